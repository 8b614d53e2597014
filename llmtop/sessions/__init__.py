"""Measuring and recording: metrics, the request runner and the session log. No Textual here."""
