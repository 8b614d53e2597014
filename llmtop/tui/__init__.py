"""llmtop's terminal UI: the only package that imports Textual.

Entry points: `llmtop.tui.app.make_app(settings)` (CLI and tests) and `main(settings)` (CLI).
Everything measured here comes from `llmtop.sessions` / `llmtop.probes`; the UI only displays.
"""
