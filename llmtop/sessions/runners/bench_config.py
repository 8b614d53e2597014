"""A bench run's fixed parameters (`BenchConfig`), apart from the runner so that the CLI's
flag defaults and the TUI's bench form read them without importing what the runner needs
(httpx, numpy, the probes: ~0.8 s at start-up; bench/cli_start.py), as runners/load/config.py is
for `llmtop load`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from llmtop.sessions.measure.options import Workload
from llmtop.sessions.measure.stats import DRIFT_THRESHOLD_PCT


@dataclass(frozen=True)
class BenchConfig(Workload):
    """A run's fixed parameters: the workload (options.Workload) and the protocol's own.
    Times in ms, sizes in tokens.

    Defaults follow the source's protocol: 25 requests, 1 warm-up, ~200-token prompts,
    100 output tokens, num_ctx 8192, temperature 0, seed 42.
    """

    requests: int = 25
    warmup: int = 1
    prompt_tokens: tuple[int, ...] = (200,)
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

    @property
    def extra_budget(self) -> int:
        """The most requests re-measured per prompt size (`remeasure_budget`, default
        `requests`: twice the protocol's count in all); 0 under --compare-relay, whose pairs
        re-measuring would break."""
        if self.compare_relay:
            return 0
        return self.requests if self.remeasure_budget is None else self.remeasure_budget

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        data = asdict(self)
        data["prompt_tokens"] = list(self.prompt_tokens)
        return data

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
