"""The session log: every record type, written and read through one schema (schema), and the
append-only writer and bounded reader of the JSONL file (log). Its format, record by record:
docs/reference/session-log.md.
"""
