"""Messages posted to the app from other threads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:  # the sampler's module imports psutil and the probes: after the first frame
    from llmtop.probes.sampler import ProbeSample


class ProbeSampled(Message):
    """A probe sample from the sampler thread (posted with the thread-safe `post_message`).

    ends: the request whose end this sample was taken for (the app asks for one sample as a
    request ends: it measures the request's last stretch, since the sample before), else None.
    Coalesces: a newer sample replaces an older one still waiting in the queue, so a slow
    frame never builds a backlog; a request's end sample is never replaced.
    """

    def __init__(self, sample: ProbeSample, ends: object = None) -> None:
        super().__init__()
        self.sample = sample
        self.ends = ends

    def can_replace(self, message: Message) -> bool:
        """True for an older, unprocessed ProbeSampled that is no request's end sample."""
        return isinstance(message, ProbeSampled) and message.ends is None


class ProbeStateChanged(Message):
    """The agent sampler's connection state changed (posted from its reader thread): the
    probe panel's title is redrawn."""
