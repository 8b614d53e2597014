"""`llmtop watch`'s transparent pass-through in front of an engine (proxy.py) and its reading
of the bytes that pass (meter.py)."""
