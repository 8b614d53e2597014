"""Things that produce tokens. Every engine yields the same time-stamped `StreamEvent`s.

No Textual here: the TUI depends on engines, never the reverse.
"""
