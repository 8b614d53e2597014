"""The TUI's screens, each over its own state (tui/state): bench, load, past sessions, plots,
a report, and help. The main screen is the app itself (tui/app.py)."""
