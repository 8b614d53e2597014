"""`llmtop bench --engines A,B,…`: the bench protocol on several engines at once, their
requests interleaved in rounds.

Each engine has its own `bench.BenchRunner` and its own session log (a complete bench log:
its header records that engine's version, configuration and model, so `llmtop report` and
`llmtop compare` read it as any bench log). This driver runs their phases side by side:

1. every runner's start (environment, preflight, the load request), in the engines' order;
2. every runner's calibration (each engine's own record and word counts);
3. per prompt size, per request index: one round; the round's text (one per round, from the
   shared salt: new to every engine) goes to every engine cut to that engine's calibrated
   word count (`cut`: the same words, as many as make the size in its own tokens: engines
   that render a prompt differently, one with a chat template and one without, still get
   the same size; for one model and template the counts, and so the prompts, are equal), in
   the round's order, `round_order`: rotated by one engine per round, so over n rounds each
   engine is
   measured first, second, … equally often, and a machine that drifts slower (or faster)
   over the run spreads its drift over the engines instead of favouring the one measured
   first;
4. every runner's finish (energy, end environment, the one analysis, the summary).

Re-measuring around slow episodes is off here: it would send one engine requests the others
do not get, out of the rounds; an episode leaves that engine's baseline short, and its
verdict says so. The context phases (`--cache-pairs`, `--turns`), a dataset and the relay
comparison are single-engine protocols (commands/bench_engines.py refuses them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llmtop.sessions.measure.prompts import INSTRUCTION, SEPARATOR, PromptGenerator, run_salt
from llmtop.sessions.runners.bench import BenchOutcome, BenchRunner
from llmtop.sessions.runners.calibration import Calibration
from llmtop.sessions.runners.recorder import RequestFields


def cut(prompt: str, words: int) -> str:
    """`prompt` (PromptGenerator.make's: words, SEPARATOR, INSTRUCTION) with its first
    `words` words only, the instruction kept. Raises ValueError for words < 1 or more words
    than it has."""
    body = prompt.removesuffix(SEPARATOR + INSTRUCTION).split(" ")
    if not 1 <= words <= len(body):
        raise ValueError(f"cannot cut a {len(body)}-word prompt to {words} words")
    return " ".join(body[:words]) + SEPARATOR + INSTRUCTION


def round_order(engines: int, round_index: int) -> list[int]:
    """The order (engine positions) of round `round_index` (0-based) among `engines`
    engines: rotated left by the round's index, [0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2], …
    Raises ValueError for fewer than one engine or a negative round."""
    if engines < 1 or round_index < 0:
        raise ValueError(f"a round needs one engine or more and an index >= 0, not "
                         f"{engines} engines, round {round_index}")
    k = round_index % engines
    return [*range(k, engines), *range(k)]


@dataclass(frozen=True, slots=True)
class Round:
    """One round: its number (1-based, over the whole run), the prompt size, the phase
    ("warmup" or "measure"), the request index within the size, and the engines' labels in
    the order they were sent the round's prompt."""

    number: int
    target: int
    phase: str
    index: int
    order: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: round, target, phase, index, order."""
        return {"round": self.number, "target": self.target, "phase": self.phase,
                "index": self.index, "order": list(self.order)}


@dataclass(frozen=True)
class InterleavedOutcome:
    """The finished set: each engine's outcome (in the engines' order), the rounds as run,
    and the calibrations' disagreements ("llama-server@8080: 64 tok is 31 words there, 53
    on llmtop-embedded@11435 …": each is sent its own count of the round's words)."""

    outcomes: list[BenchOutcome]
    rounds: list[Round]
    notes: list[str]


class InterleavedBench:
    """Runs `runners` (one per engine, labelled by `labels`, all with one BenchConfig) in
    interleaved rounds (the module docstring). on_round: called with each round before its
    requests. Raises what BenchRunner's phases raise (NoisyMachine, CalibrationError,
    LogError); every runner's log is closed however it ends."""

    def __init__(self, runners: Sequence[BenchRunner], labels: Sequence[str],
                 on_round: Callable[[Round], None] | None = None) -> None:
        if len(runners) != len(labels) or not runners:
            raise ValueError("one label per runner, and one runner or more")
        self.runners = list(runners)
        self.labels = list(labels)
        self.config = runners[0].config
        self.on_round = on_round or (lambda _r: None)

    async def run(self) -> InterleavedOutcome:
        """Start, calibrate, the rounds, finish (the module docstring's order)."""
        salt = run_salt()
        with contextlib.ExitStack() as stack:
            for runner in self.runners:
                stack.enter_context(runner.measuring())
            for runner in self.runners:
                await runner.start(salt)
            calibrations = [await runner.calibrate() for runner in self.runners]
            notes = self._disagreements(calibrations)
            rounds = await self._rounds(calibrations, PromptGenerator(self.config.seed,
                                                                      salt=salt))
            outcomes = [await runner.finish(calibration)
                        for runner, calibration in zip(self.runners, calibrations, strict=True)]
        return InterleavedOutcome(outcomes, rounds, notes)

    async def _rounds(self, calibrations: Sequence[Calibration], generator: PromptGenerator
                      ) -> list[Round]:
        cfg = self.config
        total = cfg.warmup + cfg.requests
        rounds: list[Round] = []
        for target in cfg.prompt_tokens:
            words = [c.targets[target].words for c in calibrations]
            for i in range(total):
                phase = "warmup" if i < cfg.warmup else "measure"
                order = round_order(len(self.runners), len(rounds))
                done = Round(len(rounds) + 1, target, phase, i,
                             tuple(self.labels[k] for k in order))
                rounds.append(done)
                self.on_round(done)
                prompt = generator.make(max(words))
                for k in order:
                    fields = RequestFields(phase=phase, index=i, prompt_tokens_target=target,
                                           prompt_words=words[k])
                    await self.runners[k].measure_one(fields, total, cut(prompt, words[k]))
        return rounds

    def _disagreements(self, calibrations: Sequence[Calibration]) -> list[str]:
        """Where an engine's calibration found another word count than the first engine's
        (another tokenizer: another model, or a template that counts differently): each is
        sent the round's words cut to its own count, said here."""
        first = calibrations[0].targets
        notes = []
        for label, calibration in zip(self.labels[1:], calibrations[1:], strict=True):
            for target, point in calibration.targets.items():
                if target in first and point.words != first[target].words:
                    notes.append(f"{label}: {target} tok is {point.words} words there, "
                                 f"{first[target].words} on {self.labels[0]} (another chat "
                                 "template or tokenizer): each engine is sent the round's "
                                 "words cut to its own count, the same size in its tokens")
        return notes
