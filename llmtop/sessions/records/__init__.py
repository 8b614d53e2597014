"""The session log: every record type, written and read through one schema (schema; the
request record in request, typed in parts and written flat; the record bases and the checks
every record read back goes through in base), and the append-only writer and bounded reader
of the JSONL file (log); the file that ties several engines' bench logs into one set
(engine_set). Its format, record by record, and its history:
docs/reference/session-log.md.

The doors: `log.SessionLog` (write), `log.read_log` (read back), `schema.RunLog` (what it
reads: the typed records, in file order).
"""
