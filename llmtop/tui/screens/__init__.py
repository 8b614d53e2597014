"""The TUI's screens, each over its own state (tui/state): bench, load, past sessions, plots,
a report, and help; the main screen (`main.py`), which the app starts on."""
