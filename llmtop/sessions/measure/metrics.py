"""The metric table: every measured quantity llmtop names — its name, its field, unit,
direction, label and the records that carry it — read by the analysis, the reports, the TUI
and the CLI, so that a renamed field or a new label is one edit here. No other module types a
metric's field name out (tests/unit/test_metric_table.py scans the source for it).

A metric's `key` is its field in timeline.RequestMetrics (the request record's "metrics"),
or, for CLIENT_PREP, in records/request.py's RequestRecord itself; the same key names it in
the records that carry it (a bench size's summaries, the watch's line and its groups, the CSV
and JSON reports; a load level names its figures by the metric's `name`: Carrier). Counts
and annotations of a request (output_tokens, tokens_basis, text_chunks, impossible,
buffered) are RequestMetrics fields but no metrics: they have no direction, and nothing
compares or summarises them by name.

Also `compare`'s view of the table (the metrics it may be told to compare, by name) and its
other flags' choices, kept here, apart from the comparison itself (scipy, the log's schema),
so that the CLI declares `compare`'s flags without importing them (bench/cli_start.py). This
module imports nothing of llmtop.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Carrier(StrEnum):
    """A record that carries a metric: under its key, but where a comment says otherwise."""

    REQUEST = "request"  # timeline.RequestMetrics: each request record's "metrics"
    RECORD = "record"  # the request record itself (records/request.py: RequestRecord)
    SERVER = "server"  # computed from the server's own stats (ServerStats): n/a without them
    BENCH = "bench"  # a bench size's summaries and drifts (analysis/run.py: SizeAnalysis)
    LOAD = "load"  # a load level's percentiles, by name (analysis/load.py: LevelResult.ttft)
    WATCH = "watch"  # the watch's line and its groups (analysis/watch.py); the client's decode
    # rate there is "decode_tps"
    PEERS = "peers"  # `report --as TOOL`: the metrics other tools define (analysis/peers.py)
    DEPTH = "depth"  # a depth sweep's rows, each with its interval (analysis/depth.py)


MS = "ms"
TOK_S = "tok/s"


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric. name: how a user names it (`compare --metric`, the JSON reports' "metric");
    key: its field (see the module docstring); label: as shown; short: the label where its
    unit stands beside it and tells it apart from its neighbours (a bench table's "prefill ms"
    and "prefill tok/s"), else the label; unit: "ms" or "tok/s"; higher_is_better: True for a
    rate, False for a time; series: one value per gap between chunks (a tuple), not one per
    request; carriers: the records that carry it (Carrier)."""

    name: str
    key: str
    label: str
    unit: str
    higher_is_better: bool
    carriers: frozenset[Carrier]
    short: str = ""
    series: bool = False

    @property
    def heading(self) -> str:
        """The short label and its unit, as a column or a plot names it: "TTFT ms"."""
        return f"{self.shown} {self.unit}"

    @property
    def shown(self) -> str:
        """The label beside its unit: `short` when set, else `label`."""
        return self.short or self.label


def _carriers(*carriers: Carrier) -> frozenset[Carrier]:
    return frozenset(carriers)


_REQUEST, _RECORD, _SERVER = Carrier.REQUEST, Carrier.RECORD, Carrier.SERVER
_BENCH, _LOAD, _WATCH, _PEERS = Carrier.BENCH, Carrier.LOAD, Carrier.WATCH, Carrier.PEERS
_DEPTH = Carrier.DEPTH
_CLIENT = _carriers(_REQUEST, _BENCH, _LOAD, _WATCH, _PEERS)  # the client's main three

# In RequestMetrics' order (timeline.py), so that a view filtering the table keeps it.
TTFT = Metric("ttft", "ttft_ms", "TTFT", MS, False, _CLIENT | {_DEPTH})
TTFT_CONTENT = Metric("ttft-content", "ttft_content_ms", "TTFT (content)", MS, False,
                      _carriers(_REQUEST, _WATCH))
E2E = Metric("e2e", "e2e_ms", "E2E", MS, False, _CLIENT)
ITL = Metric("itl", "itl_ms", "ITL", MS, False, _carriers(_REQUEST, _LOAD, _PEERS),
             series=True)
ITL_TOKEN = Metric("itl-token", "itl_token_ms", "ITL per token", MS, False,
                   _carriers(_REQUEST, _SERVER), series=True)
TPOT = Metric("tpot", "tpot_ms", "TPOT", MS, False, _CLIENT | {_DEPTH})
CLIENT_DECODE = Metric("decode-client", "client_decode_tps", "decode (client)", TOK_S, True,
                       _carriers(_REQUEST, _BENCH, _WATCH))
SERVER_PREFILL = Metric("prefill", "server_prefill_tps", "prefill (server)", TOK_S, True,
                        _carriers(_REQUEST, _SERVER, _BENCH, _WATCH, _DEPTH), short="prefill")
SERVER_DECODE = Metric("decode", "server_decode_tps", "decode (server)", TOK_S, True,
                       _carriers(_REQUEST, _SERVER, _BENCH, _WATCH, _DEPTH))
LOAD = Metric("load", "load_ms", "load", MS, False, _carriers(_REQUEST, _SERVER, _WATCH))
PROMPT_EVAL = Metric("prompt-eval", "prompt_eval_ms", "prefill", MS, False,
                     _carriers(_REQUEST, _SERVER, _BENCH, _WATCH))
EVAL = Metric("eval", "eval_ms", "eval", MS, False, _carriers(_REQUEST, _SERVER))
TOTAL = Metric("total", "total_ms", "total", MS, False, _carriers(_REQUEST, _SERVER))
OVERHEAD = Metric("overhead", "overhead_ms", "overhead", MS, False,
                  _carriers(_REQUEST, _SERVER, _BENCH))
CLIENT_PREP = Metric("client-prep", "client_prep_ms", "client prep", MS, False,
                     _carriers(_RECORD))

# Every metric by its key, in RequestMetrics' order (CLIENT_PREP, the record's own, last).
METRICS: dict[str, Metric] = {
    m.key: m
    for m in (TTFT, TTFT_CONTENT, E2E, ITL, ITL_TOKEN, TPOT, CLIENT_DECODE, SERVER_PREFILL,
              SERVER_DECODE, LOAD, PROMPT_EVAL, EVAL, TOTAL, OVERHEAD, CLIENT_PREP)
}


def carried_by(carrier: Carrier) -> tuple[Metric, ...]:
    """The metrics `carrier` carries, in the table's order."""
    return tuple(m for m in METRICS.values() if carrier in m.carriers)


# `compare`'s view: what `--metric` may name, by name, in the order its report lists them.
COMPARE_METRICS: dict[str, Metric] = {m.name: m for m in (TTFT, TPOT, SERVER_DECODE,
                                                          SERVER_PREFILL, E2E)}
DEFAULT_COMPARE_METRICS = tuple(COMPARE_METRICS)
DEFAULT_THRESHOLD_PCT = 5.0  # a significant slowdown beyond this is a regression (exit 1)

# What a user may declare to be the point of a comparison (`--vary`); "options" is all three;
# "config": the engines' settings (threads, batch…: analysis/compare/engines.config_differences).
OPTION_KEYS = {"temperature": "temperature", "num_ctx": "num_ctx", "max_tokens": "num_predict"}
VARY_CHOICES = ("prompt", "options", *OPTION_KEYS, "engine", "model", "via", "config")
