"""What `llmtop compare` compares and may be told to vary, apart from the comparison itself
(scipy, the log's schema) so that the CLI declares `compare`'s flags without importing them
(bench/cli_start.py). Re-exported by analysis/compare/logs.py."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_THRESHOLD_PCT = 5.0  # a significant slowdown beyond this is a regression (exit 1)


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """A metric `compare` knows: its name on the command line, its field in
    timeline.RequestMetrics, label, unit, and whether higher values are faster."""

    name: str
    key: str
    label: str
    unit: str
    higher_is_better: bool


METRICS: dict[str, MetricSpec] = {
    m.name: m
    for m in (
        MetricSpec("ttft", "ttft_ms", "TTFT", "ms", False),
        MetricSpec("tpot", "tpot_ms", "TPOT", "ms", False),
        MetricSpec("decode", "server_decode_tps", "decode (server)", "tok/s", True),
        MetricSpec("prefill", "server_prefill_tps", "prefill (server)", "tok/s", True),
        MetricSpec("e2e", "e2e_ms", "E2E", "ms", False),
    )
}
DEFAULT_METRICS = tuple(METRICS)

# What a user may declare to be the point of a comparison (`--vary`); "options" is all three;
# "config": the engines' settings (threads, batch…: compare_engines.config_differences).
OPTION_KEYS = {"temperature": "temperature", "num_ctx": "num_ctx", "max_tokens": "num_predict"}
VARY_CHOICES = ("prompt", "options", *OPTION_KEYS, "engine", "model", "via", "config")
