"""Prompts made of random words, each one starting differently from every earlier one.

docs/method.md, "Cache busting": every request gets a new prompt, or the prefix cache fakes a fast
prefill. `PromptGenerator` builds prompts from a shipped list of common English words, seeded
so a run is repeatable, and makes each prompt *start* differently (prefix caches match
prefixes): the first three words of every prompt form a combination no earlier prompt of the
same generator used, and the first word always differs from the previous prompt's. How many
words make a prompt of a given size in tokens is measured in calibration.py.

No Textual here.
"""

from __future__ import annotations

import functools
import hashlib
import random
import secrets
from importlib import resources

# The closing instruction every prompt ends with. Its tokens are part of what calibration
# measures (they sit in `template_tokens` together with the chat template).
INSTRUCTION = "Summarise the words above in one sentence."
SEPARATOR = "\n\n"
HEAD_WORDS = 3  # the start of every prompt that no earlier prompt of a generator shares


# --------------------------------------------------------------------------- word list


@functools.cache
def word_list() -> tuple[str, ...]:
    """The shipped word list (`llmtop/sessions/measure/words.txt`): ~1700 common lowercase
    English words, in file order, loaded once through `importlib.resources`."""
    words_txt = resources.files("llmtop.sessions.measure").joinpath("words.txt")
    text = words_txt.read_text(encoding="utf-8")
    words = tuple(line.strip() for line in text.splitlines() if line.strip())
    if len(words) < 100:
        raise RuntimeError(f"llmtop's word list is damaged: {len(words)} words in words.txt")
    return words


@functools.cache
def prompt_format_id() -> str:
    """A short hash of what shapes a prompt's tokens (the word list, the separator and the
    instruction): part of the calibration cache key, so a changed list invalidates the cache."""
    digest = hashlib.sha256()
    for part in (*word_list(), SEPARATOR, INSTRUCTION):
        digest.update(part.encode("utf-8") + b"\0")
    return digest.hexdigest()[:12]


def run_salt() -> str:
    """A fresh salt for one run's `PromptGenerator` (8 hex digits from the OS's randomness).

    Why: a seed alone makes the same prompts in every run, and a server's prompt cache
    outlives a run — llama-server keeps earlier prompts in RAM (`--cache-ram`, 8 GiB by
    default) and served 95 of 100 prompt tokens of a repeated bench from it (docs/method.md,
    "Cache busting"). The bench and the sweep log the salt they used, so a run's prompts can
    be made again (`PromptGenerator(seed, salt=…)`)."""
    return secrets.token_hex(4)


class PromptGenerator:
    """Random-word prompts, repeatable per seed, each one different from every earlier one.

    seed: same seed (and salt) → the same sequence of prompts, on any machine/Python ≥ 3.11.
    salt: separates independent streams from one seed; calibration probes use
    salt="calibration" so they never equal the bench's `PromptGenerator(seed)` prompts.
    """

    def __init__(self, seed: int, *, salt: str = "") -> None:
        self.seed = seed
        self.salt = salt
        self.count = 0  # prompts made so far
        self._rng = random.Random(f"llmtop-prompts:{seed}:{salt}")
        self._words = word_list()
        self._heads: set[tuple[str, ...]] = set()
        self._last_first: str | None = None

    def make(self, words: int) -> str:
        """A prompt of exactly `words` random words (≥ 1), then a blank line and `INSTRUCTION`.

        Its first min(3, words) words are a combination this generator never started a prompt
        with before, and its first word differs from the previous prompt's first word.
        Raises ValueError for words < 1, RuntimeError if (absurdly) no unused start is left.
        """
        if not isinstance(words, int) or isinstance(words, bool) or words < 1:
            raise ValueError(f"a prompt needs at least 1 word, got {words!r}")
        choice = self._rng.choice
        k = min(HEAD_WORDS, words)
        for _ in range(10_000):
            head = tuple(choice(self._words) for _ in range(k))
            if head not in self._heads and head[0] != self._last_first:
                break
        else:
            raise RuntimeError(f"no unused {k}-word prompt start left after {self.count} prompts")
        self._heads.add(head)
        self._last_first = head[0]
        self.count += 1
        body = list(head)
        body.extend(choice(self._words) for _ in range(words - k))
        return " ".join(body) + SEPARATOR + INSTRUCTION
