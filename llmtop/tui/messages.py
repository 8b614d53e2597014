"""Messages posted to the app from other threads."""

from __future__ import annotations

from textual.message import Message

from llmtop.probes.sampler import ProbeSample


class ProbeSampled(Message):
    """A probe sample from the sampler thread (posted with the thread-safe `post_message`).

    Coalesces: a newer sample replaces an older one still waiting in the queue, so a slow
    frame never builds a backlog.
    """

    def __init__(self, sample: ProbeSample) -> None:
        super().__init__()
        self.sample = sample

    def can_replace(self, message: Message) -> bool:
        """True for an older, unprocessed ProbeSampled."""
        return isinstance(message, ProbeSampled)


class ProbeStateChanged(Message):
    """The agent sampler's connection state changed (posted from its reader thread): the
    probe panel's title is redrawn."""
