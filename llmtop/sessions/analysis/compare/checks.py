"""Can two runs be compared? `comparability` refuses what was not measured the same way
and warns for what differs around it; `distrust` names a run whose difference cannot be
attributed to what was changed.

The baseline-first form follows docs/method.md: a claim like "2× faster" needs a baseline
measured the same way, so runs that were not measured the same way (other prompt sizes,
generation options, engines: unless `--vary` names them) are refused, and a run the machine
disturbed (CONTAMINATED drift, NOISY probe samples: analysis/run.py) is named in the
warnings. NOISY_SHARE says where a disturbed run stops carrying a claim.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from llmtop.sessions.analysis.compare.engines import config_differences, model_warning
from llmtop.sessions.analysis.compare.groups import Group
from llmtop.sessions.analysis.run import analyze_run, noisy_samples
from llmtop.sessions.measure.metrics import OPTION_KEYS
from llmtop.sessions.records.schema import RunLog


@dataclass(frozen=True)
class Checks:
    """Why two runs cannot be compared (problems: refuse) and what to keep in mind
    (warnings: compared anyway). config: the engine settings that differ ("threads A 1,
    B 2": compare_engines.config_differences), also in warnings; the headline names them."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    config: list[str] = field(default_factory=list)


def _differs(what: str, a: object, b: object) -> str:
    return f"{what} differ: A {a}, B {b}"


def comparability(a: RunLog, b: RunLog, ga: Sequence[Group], gb: Sequence[Group],
                  vary: Iterable[str] = ()) -> Checks:
    """Refuse what was not measured the same way, unless `vary` names it as the point of
    the comparison (VARY_CHOICES): other prompt sizes, generation options (temperature,
    num_ctx, max tokens = num_predict) or engines. Warn for another model (identified by
    what the file is, not by the engine's name for it: compare_engines.model_warning),
    engine settings that differ (unless `vary` names "config"), llmtop version, power source
    or relay path, and for a run that drifted (contaminated) or met a NOISY machine in its
    probe samples."""
    vary = set(vary)
    checks = Checks()
    sizes_a, sizes_b = [g.label for g in ga], [g.label for g in gb]
    if sizes_a != sizes_b and "prompt" not in vary:
        checks.problems.append(_differs("prompt sizes", ", ".join(sizes_a) or "none",
                                        ", ".join(sizes_b) or "none") + " (--vary prompt "
                               "pairs them in run order)")
    oa, ob = a.header.options or {}, b.header.options or {}
    for name, key in OPTION_KEYS.items():
        if oa.get(key) != ob.get(key) and not vary & {name, "options"}:
            checks.problems.append(_differs(f"options ({name})", oa.get(key), ob.get(key))
                                   + f" (--vary {name} if that is the point)")
    ha, hb = a.header, b.header
    if ha.engine != hb.engine and "engine" not in vary:
        checks.problems.append(_differs("engines", ha.engine, hb.engine) + " (--vary engine)")
    if "config" not in vary:
        checks.config.extend(config_differences(ha, hb))
    if checks.config:
        checks.warnings.append(
            f"engine configurations differ ({'; '.join(checks.config)}): a difference below "
            "may be the configuration's rather than the engine's or the change's (--vary "
            "config if that is the point)")
    _environment_warnings(a, b, vary, checks.warnings)
    for name, log in (("A", a), ("B", b)):
        checks.warnings.extend(_run_warnings(name, log))
    return checks


def _environment_warnings(a: RunLog, b: RunLog, vary: set[str], out: list[str]) -> None:
    ha, hb = a.header, b.header
    if "model" not in vary and (said := model_warning(ha, hb)) is not None:
        out.append(said)
    if ha.llmtop_version != hb.llmtop_version:
        out.append(_differs("llmtop versions", ha.llmtop_version, hb.llmtop_version))
    power_a = ha.machine_environment.get("power")
    power_b = hb.machine_environment.get("power")
    if power_a != power_b:
        out.append(_differs("power sources", power_a, power_b))
    if (ha.via or "direct") != (hb.via or "direct") and "via" not in vary:
        out.append(_differs("paths", ha.via or "direct", hb.via or "direct"))
    if ha.kind != hb.kind:
        out.append(_differs("kinds of run", ha.kind, hb.kind))


# A side whose measured requests met a NOISY machine in at least this share of their probe
# samples cannot carry a claim: a tenth of the measured time is enough to move the spread,
# and so the interval, of a 25-request run (two runs NOISY in 100 % of their
# samples were headlined "B is 2.26x faster").
NOISY_SHARE = 0.10


def distrust(name: str, log: RunLog) -> str | None:
    """Why a difference involving this run cannot be attributed to what was changed: its
    verdict is CONTAMINATED (with the verdict's first reason), or NOISY_SHARE or more of the
    probe samples taken during the requests it is compared by (the measured ones outside its
    episodes, as the verdict counts them) were NOISY; None when neither. name: "A" or "B"."""
    analysis = analyze_run(log)
    judgement = analysis.judgement
    if judgement.contaminated:
        why = f": {judgement.reasons[0]}" if judgement.reasons else ""
        return f"{name} was CONTAMINATED{why}"
    noisy, total = noisy_samples(log.probes, analysis.counted_ids)
    if total and noisy / total >= NOISY_SHARE:
        return f"{name} was NOISY in {noisy} of {total} probe samples"
    return None


def _run_warnings(name: str, log: RunLog) -> list[str]:
    out = []
    analysis = analyze_run(log)
    judgement = analysis.judgement
    if judgement.contaminated:
        out.append(f"{name}'s verdict is CONTAMINATED: " + "; ".join(judgement.reasons)
                   + "; `llmtop report` shows which metric")
    noisy, total = noisy_samples(log.probes)
    if noisy:
        out.append(f"{name} was measured on a NOISY machine ({noisy} of {total} probe "
                   "samples during requests)")
    if log.interrupted:
        out.append(f"{name} was interrupted")
    if log.header.kind == "session":
        out.append(f"{name} is an interactive session: each request had its own prompt")
    return out
