"""Energy per request and per token, from the sources a local machine has.

Sources, each read without privileges where the platform allows: Linux RAPL through powercap
(`rapl`), NVML's energy counter or integrated board power (`nvml`), battery discharge
(`battery`), Apple Silicon's IOReport energy per rail through zeus-apple-silicon (`apple`).
`reader` finds them and samples them; `window` holds the pure arithmetic (joules in a
window, per request split at the first token, per token, above idle); `model` the records,
each with a JSON-ready `to_dict()`.
"""

from llmtop.probes.energy.model import (
    EnergySample,
    Kind,
    RequestEnergy,
    Role,
    RunEnergy,
    SourceInfo,
    WindowEnergy,
)
from llmtop.probes.energy.reader import (
    CPU_GROUP,
    NA_PREFIX,
    Discovery,
    EnergyReader,
    EnergySource,
    SourcesSummary,
    describe_sources,
    discover_sources,
    version_line,
)
from llmtop.probes.energy.window import (
    COARSE_ADVICE,
    MAX_EDGE_ERROR,
    combine,
    idle_power,
    observed_update_period,
    request_energy,
    request_from_windows,
    run_energy,
    run_from_window,
    segment_joules,
    window_energy,
)

__all__ = [
    "COARSE_ADVICE",
    "CPU_GROUP",
    "MAX_EDGE_ERROR",
    "NA_PREFIX",
    "Discovery",
    "EnergyReader",
    "EnergySample",
    "EnergySource",
    "Kind",
    "RequestEnergy",
    "Role",
    "RunEnergy",
    "SourceInfo",
    "SourcesSummary",
    "WindowEnergy",
    "combine",
    "describe_sources",
    "discover_sources",
    "idle_power",
    "observed_update_period",
    "request_energy",
    "request_from_windows",
    "run_energy",
    "run_from_window",
    "segment_joules",
    "version_line",
    "window_energy",
]
