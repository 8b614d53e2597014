"""Rendering only, over an analysis: one `render(subject, fmt)` (formats) over the renderers of
a run (run: the `Report`; run_markdown; run_data: CSV and JSON; run_environment: the
machine's sections; context: the context phases), of a sweep (load), of a comparison
(compare), of several engines benched together (engine_set), of a watch log (watch), of a
replay against its originals (replay) and of
a run in another tool's definitions (peers); the HTML pages and their plots (html, plots),
and the plain-text rules and CSV cells they share (text, csvcells).

The doors: `run.build` (a run's `Report`) and `formats.render` (any subject, any format).
"""
