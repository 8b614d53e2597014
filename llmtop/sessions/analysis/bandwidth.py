"""Is decode bound by memory bandwidth? The bandwidth-bound verdict of a run.

Decode produces one token per pass over the model: a dense model's every weight is read once
per token, so a decode rate of D tokens/s reads about W × D bytes/s, W the weights' size (the
GGUF's bytes: the KV cache read on top is small at short contexts and left out, so the share
is a floor). Set against what the machine's memory delivers (probes/bandwidth.py: a copy
test, STREAM's rule), the share says what limits decode:

* ≥ BOUND_SHARE (60 %): decode runs near the memory's limit. Roofline reasoning (Williams,
  Waterman and Patterson, "Roofline", CACM 2009): a kernel at the bandwidth roof does not get
  faster with more compute; llama.cpp's CPU decode reaches 60–80 % of STREAM's figure when it
  is memory-bound, so 60 % is where the roof starts. Remedy: a smaller quantisation (fewer
  bytes per token) or faster memory, not a faster CPU or more threads.
* < FREE_SHARE (30 %): far from the roof: compute, threads or the engine's own overhead set
  the pace; more or faster cores can help.
* between: partly bound; both matter.

A mixture-of-experts model reads only its active experts per token, so the share from the
whole file overstates its traffic: said when the model's family says MoE. A model wholly or
partly in GPU memory is read at the GPU's bandwidth, which the copy test does not measure: no
verdict then (said so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BOUND_SHARE = 0.60
FREE_SHARE = 0.30
GB = 1e9


@dataclass(frozen=True, slots=True)
class BandwidthVerdict:
    """share: weights_bytes × decode_tps / bandwidth (0.78 = 78 %; None when it cannot be
    judged, `reason` says why); verdict: "memory-bound", "partly memory-bound",
    "not memory-bound" or None; sentence: the line a report prints."""

    share: float | None
    verdict: str | None
    sentence: str
    weights_bytes: int | None = None
    decode_tps: float | None = None
    bandwidth_bytes_per_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: share, verdict, sentence and the three inputs."""
        return {"share": self.share, "verdict": self.verdict, "sentence": self.sentence,
                "weights_bytes": self.weights_bytes, "decode_tps": self.decode_tps,
                "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s}


def bandwidth_verdict(decode_tps: float | None, weights_bytes: int | None,
                      bandwidth_bytes_per_s: float | None, *, in_gpu_memory: bool = False,
                      family: str | None = None) -> BandwidthVerdict:
    """The verdict for a run whose median decode rate is `decode_tps` (tokens/s), its model's
    weights `weights_bytes` (bytes) and this machine's memory bandwidth (bytes/s, read +
    written: probes/bandwidth.py). Thresholds and reasoning: the module docstring."""
    missing = [what for what, v in (("the decode rate", decode_tps),
                                     ("the model's size", weights_bytes),
                                     ("this machine's memory bandwidth", bandwidth_bytes_per_s))
               if not v or v <= 0]
    if in_gpu_memory:
        return BandwidthVerdict(None, None, "the model is (partly) in GPU memory: its weights "
                                "are read at the GPU's bandwidth, which llmtop does not measure")
    if missing:
        return BandwidthVerdict(None, None, "no bandwidth verdict: " + " and ".join(missing)
                                + " not known")
    assert decode_tps and weights_bytes and bandwidth_bytes_per_s
    rate = weights_bytes * decode_tps
    share = rate / bandwidth_bytes_per_s
    figures = (f"{weights_bytes / GB:.2f} GB of weights × {decode_tps:.1f} tok/s = "
               f"{rate / GB:.1f} GB/s of {bandwidth_bytes_per_s / GB:.1f} GB/s measured")
    if share >= BOUND_SHARE:
        verdict, advice = "memory-bound", ("a faster CPU or more threads will not help; a "
                                           "smaller quantisation (fewer bytes a token) will")
    elif share < FREE_SHARE:
        verdict, advice = "not memory-bound", ("compute, threads or the engine's overhead set "
                                               "the pace; more or faster cores can help")
    else:
        verdict, advice = "partly memory-bound", ("both the memory and the cores matter; a "
                                                  "smaller quantisation helps some")
    moe = " (a mixture-of-experts model reads only its active experts: less than this)" \
        if family and "moe" in family.lower() else ""
    sentence = (f"decode reads its weights at {100 * share:.0f} % of this machine's memory "
                f"bandwidth ({figures}){moe}: {verdict}; {advice}")
    return BandwidthVerdict(round(share, 3), verdict, sentence, weights_bytes, decode_tps,
                            bandwidth_bytes_per_s)


__all__ = ["BOUND_SHARE", "FREE_SHARE", "BandwidthVerdict", "bandwidth_verdict"]
