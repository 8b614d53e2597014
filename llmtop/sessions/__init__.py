"""`llmtop.sessions`: what makes a session log, reads it and renders it (docs/architecture.md,
"Glossary": a session log is the JSONL file one TUI session, `run`, `bench`, `load` or
`watch` writes). No Textual here.

Five wings, one way down (the import contract `sessions-route`): a wing imports only the
wings below it, and the two on top know nothing of each other.

    runners | reports   make measurements and log them | render a log's analysis
    analysis            from a log's records to figures and verdicts, pure
    records             the log: every record type (one schema), its writer and its reader
    measure             one request measured, and the pure parts every wing shares:
                        its stream, metrics, statistics, prompts, options and the metric table

The route of one `llmtop bench`: runners/bench.py sends each request through measure/
(request.py streams it, timeline.py derives its metrics), the recorder (runners/recorder.py)
writes it as a records/ request record, analysis/run.py turns the records into statistics
and a verdict, and reports/ renders that analysis as markdown, CSV, JSON or HTML.
"""
