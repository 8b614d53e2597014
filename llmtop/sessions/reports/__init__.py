"""Rendering only: one `render(subject, fmt)` (formats) over the run, load and compare
renderers (run, load, compare), the HTML pages and their plots (html, plots), and the plain
text rules they share (text)."""
