"""What a bench, a sweep and a watch were set up to do: the typed parts of a log's header.

* `BenchConfig`: a bench run's fixed parameters (`llmtop bench`, the TUI's bench form);
* `LoadConfig`: a sweep's (`llmtop load`, `load --replay`, the Locust user class);
* `WatchSetup`: what `llmtop watch` listened on and forwarded to.

They stand with the measuring core, under the records, because the session log's header
carries them (`Header.bench`, `Header.load`, `Header.watch`) and every reader of a log reads
them back as these types, by attribute. Pure: no I/O, nothing the runners need at start-up
(httpx, numpy, the probes: ~0.8 s; bench/cli_start.py), so the CLI's flag defaults and the
TUI's forms read them too. A config read back from a log is checked as one built from the
command line is (`LoadConfig`'s rules).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from llmtop.exitcodes import UsageError
from llmtop.sessions.measure.options import (
    PROTOCOL_PROMPT_TOKENS,
    PROTOCOL_REQUESTS,
    PROTOCOL_WARMUP,
    Workload,
)
from llmtop.sessions.measure.slo import Slo
from llmtop.sessions.measure.stats import DRIFT_THRESHOLD_PCT

Mode = Literal["concurrency", "rate"]

WRITTEN_WHEN_SET = ("dataset", "replay", "prompt_words", "depths")
"""A config's keys that a log's header holds only when they are set (the run used a
`--dataset`, replayed a watch log, sized its prompts in words, or swept context depths): a
header without them
reads as before they existed, and a header with them reads the same in any llmtop."""


def config_json(data: dict[str, Any]) -> dict[str, Any]:
    """A config's JSON object (`asdict` or a pydantic dump) as the header writes it: the
    WRITTEN_WHEN_SET keys that are None left out."""
    return {k: v for k, v in data.items() if v is not None or k not in WRITTEN_WHEN_SET}


@dataclass(frozen=True)
class BenchConfig(Workload):
    """A run's fixed parameters: the workload (options.Workload) and the protocol's own.
    Times in ms, sizes in tokens.

    Defaults follow the source's protocol: 25 requests, 1 warm-up, ~200-token prompts,
    100 output tokens, num_ctx 8192, temperature 0, seed 42. dataset: the `--dataset` file's
    identity (measure/dataset.py `Dataset.identity`: file, path, bytes, sha256, shape,
    records, skipped, not_read), None when the prompts were llmtop's own. depths: a context
    depth sweep's depths, tokens (`bench --depths`, measure/depths.py): then `prompt_tokens`
    are the same sizes and each request records its depth; None for a prompt-size sweep.
    """

    requests: int = PROTOCOL_REQUESTS
    warmup: int = PROTOCOL_WARMUP
    prompt_tokens: tuple[int, ...] = PROTOCOL_PROMPT_TOKENS
    drift_threshold_pct: float = DRIFT_THRESHOLD_PCT
    compare_relay: bool = False  # interleave direct and relayed requests (needs a relay connection)
    preflight_s: float = 3.0  # seconds of machine sampling before the run; 0 skips it
    require_quiet: bool = False  # refuse to run when the preflight verdict is NOISY
    cache_pairs: int = 0  # prefix-cache pairs after the sweep (runners/context.py)
    turns: int = 0  # a conversation's turns after the sweep and the pairs
    cold_turns: bool = True  # then the conversation replayed with the cache defeated
    prior_curve: dict[str, Any] | None = None  # a saved prefill curve to check (runners/curves.py)
    save_curve: bool = True  # save a sweep's prefill curve as this model's (runners/curves.py)
    remeasure_budget: int | None = None  # extra requests per size for episodes; None: `requests`
    remeasure_pause_s: float = 10.0  # the pause before re-measuring (an episode may pass)
    run: int = 1  # this run's number among `runs` (bench --runs K: the log header says which)
    runs: int = 1  # the runs of the set; `compare` reads its siblings' logs (compare/runs.py)
    measure_cache: bool = False  # a --dataset's requests sent as they are, not cache-busted
    dataset: dict[str, Any] | None = None
    depths: tuple[int, ...] | None = None

    @property
    def extra_budget(self) -> int:
        """The most requests re-measured per prompt size (`remeasure_budget`, default
        `requests`: twice the protocol's count in all); 0 under --compare-relay, whose pairs
        re-measuring would break."""
        if self.compare_relay:
            return 0
        return self.requests if self.remeasure_budget is None else self.remeasure_budget

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the log header's "bench" field)."""
        data = asdict(self)
        data["prompt_tokens"] = list(self.prompt_tokens)
        if self.depths is not None:
            data["depths"] = list(self.depths)
        return config_json(data)

    def position(self, phase: str, i: int) -> str:
        """Where request `i` (0-based within a prompt size, warm-ups first) stands, counted
        within its phase as the user asked for them: "warm-up 1/1", "request 7/25", or past
        the protocol's count (a slow episode's shortfall) "request 27 (re-measure 2 of at most
        25)": which extra request it is, out of how many ("request 13
        (re-measuring)" beside a bar at 100 read as a third numbering)."""
        if phase == "warmup":
            return f"warm-up {i + 1}/{self.warmup}"
        number = i + 1 - self.warmup
        if number > self.requests:  # re-measured around a slow episode
            return (f"request {number} (re-measure {number - self.requests} of at most "
                    f"{self.extra_budget})")
        return f"request {number}/{self.requests}"


@dataclass(frozen=True)
class LoadConfig(Workload):
    """A sweep's fixed parameters: the workload (options.Workload) and the sweep's own.

    mode/levels: "concurrency" with worker counts (ints ≥ 1), or "rate" with requests/s (> 0).
    requests: requests per level; or duration_s: seconds per level (closed loop: no request
    starts after it; open loop: rate × duration requests are scheduled). Exactly one is set.
    arrivals: open loop's timetable, "poisson" (exponential gaps, seeded) or "constant".
    prompt_tokens: the calibrated prompt size of every request, tokens; None when the prompts
    were sized in words instead (prompt_words: the Locust user class's).
    preflight_s: seconds of machine sampling before the sweep (0 skips it).
    search: an SLO search (analysis/search.py) between the lowest and the highest level
    instead of a sweep of every level; needs an SLO and two levels.
    early_stop: stop an open-loop level once it is over-saturated (analysis/saturation.py).
    measure_cache: with a dataset (measure/dataset.py), send its requests as they are, so a
    prefix cache may serve them (default: each starts with a tag of its own).
    dataset: the `--dataset` file's identity (as BenchConfig's); replay: the watch log a
    `load --replay` sends again (runners/replay.py: its identity, `speed`, `back_to_back`).
    Levels keep the number they were given as (int or float): a header says `[1, 2, 4]`.
    Raises exitcodes.UsageError for a sweep that cannot run (the rules in
    `__post_init__`).
    """

    mode: Mode = "concurrency"
    levels: tuple[int | float, ...] = (1, 2, 4, 8)
    requests: int | None = 40
    duration_s: float | None = None
    arrivals: Literal["poisson", "constant"] = "poisson"
    prompt_tokens: int | None = 200
    slo: Slo = field(default_factory=Slo)
    preflight_s: float = 0.0
    search: bool = False
    early_stop: bool = True
    measure_cache: bool = False  # a --dataset's requests sent as they are, not cache-busted
    dataset: dict[str, Any] | None = None
    replay: dict[str, Any] | None = None
    prompt_words: int | None = None

    def __post_init__(self) -> None:
        if (self.requests is None) == (self.duration_s is None):
            raise UsageError("give either requests or duration_s per level, not both or neither")
        if not self.levels or any(v <= 0 for v in self.levels):
            raise UsageError("levels must be positive")
        if self.mode == "concurrency" and any(v != int(v) for v in self.levels):
            raise UsageError("concurrency levels must be whole numbers")
        if self.search and self.slo.empty:
            raise UsageError("--search finds the highest level meeting an SLO: give one with "
                             "--slo, e.g. --slo ttft=500ms,tpot=50ms")
        if self.search and len(set(self.levels)) < 2:
            raise UsageError("--search needs a low and a high bound: two levels, e.g. "
                             "--concurrency 1,16 or --rate 0.5,8")

    def level_label(self, value: float) -> str:
        """ "1 user", "4 users" or "2 req/s"."""
        if self.mode != "concurrency":
            return f"{value:g} req/s"
        return f"{value:g} {'user' if value == 1 else 'users'}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the log header's "load" field)."""
        data = asdict(self)
        data["levels"] = list(self.levels)
        data["slo"] = self.slo.to_dict()
        return config_json(data)


@dataclass(frozen=True, slots=True)
class WatchPair:
    """One forwarding of `llmtop watch`: the "host:port" it listened on and the engine's URL
    it sent each request on to."""

    listen: str
    upstream: str


@dataclass(frozen=True, slots=True)
class WatchSetup:
    """What `llmtop watch` was set up to do: its forwardings, and whether it logged the
    requests' bodies (prompt and answer text; without them a replay sizes prompts by the
    server's token counts)."""

    pairs: tuple[WatchPair, ...] = ()
    bodies_logged: bool = False
