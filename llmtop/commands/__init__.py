"""The headless subcommands: run, bench, report (the TUI lives in llmtop.tui)."""
