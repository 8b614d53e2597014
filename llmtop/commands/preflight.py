"""`llmtop preflight`: sample the machine for a few seconds; print QUIET or NOISY with each
finding, its measured value against its threshold, and its remedy (or one JSON object).

When an Ollama-API engine answers at --host / $OLLAMA_HOST within 0.5 s, its loaded models
(`/api/ps`) add findings and its local processes count as the measured engine, not as
background load; when none answers, the output says "no engine checked" (not an error).

Exit status (`PreflightExit`, values of `ExitCode`): 0 QUIET, 1 NOISY, 2 could not check (bad
config file, bad
--duration, no usable probe sample, an engine whose /api/ps cannot be read).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TextIO

from llmtop.commands.flags import finite_number, pid_number, probes_flags
from llmtop.engines.hosts import resolve_host
from llmtop.probes.catalogue import Category

if TYPE_CHECKING:
    from llmtop.probes.engine_identity import EngineIdentity
    from llmtop.probes.preflight import PreflightResult
    from llmtop.probes.remote import AgentSampler
    from llmtop.probes.verdict import Finding, Thresholds
    from llmtop.sessions.runners.energy import EnergyMeter

PROG = "llmtop preflight"
TOP_APPS = 5  # busiest apps listed in text mode


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`llmtop preflight`'s flags: how long to sample, --json, the engine to check, --probes."""
    # Finite and at most a day here; > 0 is checked by the command (its "cannot check" JSON).
    p.add_argument(
        "--duration",
        type=finite_number(-math.inf, 86_400.0),
        default=3.0,
        help="seconds to sample (default 3)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--host", default=argparse.SUPPRESS,
                   help="Ollama's address (default: $OLLAMA_HOST or 127.0.0.1:11434)")
    p.add_argument("--model", default=argparse.SUPPRESS,
                   help="the model tag you will measure (for the engine checks)")
    p.add_argument("--engine-pid", metavar="PID", type=pid_number, action="append",
                   default=argparse.SUPPRESS, help="a pid of the measured engine (repeatable)")
    probes_flags(p.add_argument_group("probes"), lambda _v: argparse.SUPPRESS)


def main(args: argparse.Namespace) -> int:
    """`llmtop preflight` from parsed arguments (`duration`, `json`, `host`, `model`; optional
    `interval`); print the result; return the exit code (`PreflightExit`)."""
    import asyncio

    from llmtop.engines.ollama import ollama_version
    from llmtop.probes.canary import check_against_last
    from llmtop.probes.config import ConfigError, config_path, load_engine_pids, load_thresholds
    from llmtop.probes.engine_identity import identify_engine
    from llmtop.probes.preflight import DEFAULT_INTERVAL_S
    from llmtop.sessions.runners.energy import EnergyMeter

    as_json = bool(getattr(args, "json", False))
    duration = float(args.duration)
    interval = float(getattr(args, "interval", None) or DEFAULT_INTERVAL_S)
    if not duration > 0:
        return _cannot_check(f"--duration must be > 0 seconds, got {args.duration}", as_json)
    cfg_file, _explicit = config_path()
    try:
        thresholds = load_thresholds()
        pinned = tuple(getattr(args, "engine_pid", None) or ()) or load_engine_pids()
    except ConfigError as exc:
        return _cannot_check(f"config error: {exc}", as_json)
    config = {"path": str(cfg_file), "loaded": cfg_file.is_file()}

    host = resolve_host(getattr(args, "host", None))
    version = asyncio.run(ollama_version(host))
    agent = getattr(args, "agent", None)
    # this machine's energy, sampled with the probes: its idle power over the window
    energy = EnergyMeter(remote_host=None if agent is None else agent.url)
    print(f"{PROG}: {energy.line}", file=sys.stderr, flush=True)
    # With --probes the agent identifies the engine on its machine; here it is not local.
    identity = identify_engine(host, pinned) if version is not None and agent is None else None
    sampled = _sample(agent, thresholds, duration, interval,
                      set(identity.pids) if identity is not None else set(), energy, config)
    if isinstance(sampled, str):
        return _cannot_check(sampled, as_json)
    result, idle = sampled
    result, engine = _check_engine(result, host, getattr(args, "model", None), version,
                                   identity)
    canary = check_against_last()  # after sampling: its few hundred ms of CPU stay out of it
    extra: dict[str, Any] = {"engine": engine, "config": config, "canary": canary.to_dict()}
    if idle:  # only where a source was read: otherwise the output is unchanged
        extra["idle_power"] = [{k: v for k, v in e.to_json().items() if k != "sources"}
                               for e in idle]
    return _print(_with_extra(result, extra), engine, config, idle, as_json)


def _sample(agent: Any, thresholds: Thresholds, duration: float, interval: float,
            engine_pids: set[int], energy: EnergyMeter, config: dict[str, Any]
            ) -> tuple[PreflightResult, list[Any]] | str:
    """Sample the machine (here, or through the agent of `--probes`) for `duration` seconds:
    the aggregated result and the idle power readings, or why the machine could not be
    sampled. An agent's summary is added to `config`."""
    from llmtop.probes.preflight import aggregate, collect_samples
    from llmtop.probes.remote import AgentSampler
    from llmtop.probes.sampler import ProbeSampler

    sampler: AgentSampler | ProbeSampler = (
        AgentSampler(agent, thresholds=thresholds) if agent is not None
        else ProbeSampler(interval, engine_pids=engine_pids, energy=energy.reader))
    try:
        idle_from = energy.sample()
        samples, took = collect_samples(duration, interval, engine_pids, sampler=sampler)
        idle = energy.measure_idle(idle_from, energy.sample("end"))
    except Exception as exc:  # noqa: BLE001 - an unreadable machine state is "could not check"
        return f"could not sample the machine: {type(exc).__name__}: {exc}"
    if isinstance(sampler, AgentSampler):
        config["probes"] = _agent_summary(sampler)
    result = aggregate(
        samples, thresholds, duration_s=took, interval_s=interval, taken=len(samples) + 1
    )
    return result, idle


def _check_engine(result: PreflightResult, host: str, model: str | None, version: str | None,
                  identity: EngineIdentity | None) -> tuple[PreflightResult, dict[str, Any]]:
    """The result with the engine's findings (its identity, its loaded models from
    `/api/ps`), and what was checked of it (the JSON's "engine")."""
    import asyncio

    engine: dict[str, Any] = {"checked": False, "host": host, "version": version, "model": model}
    if identity is not None:
        result = result.with_findings([identity.finding()])
        engine.update(identity=identity.to_dict(), described=identity.describe())
    if version is None:
        engine["reason"] = f"no engine answers at {host}"
        return result, engine
    state = asyncio.run(_engine_state(host, model, result.gpu_present))
    if isinstance(state, str):
        engine["reason"] = state
        return _with_error(result, f"could not check the engine: {state}"), engine
    engine.update(checked=True, source="/api/ps",
                  pids=sorted(set(identity.pids)) if identity is not None else [])
    return result.with_findings(state), engine


def _print(result: PreflightResult, engine: dict[str, Any], config: dict[str, Any],
           idle: list[Any], as_json: bool) -> int:
    """Print the result (one JSON object, or the text report and the idle power); returns
    its exit code."""
    from llmtop.probes.preflight import PreflightExit

    if as_json:
        print(json.dumps(result.to_dict(), ensure_ascii=False))
    else:
        print_result(result, engine, config)
        for e in idle:
            power = "n/a" if e.mean_power_w is None else f"{e.mean_power_w:.3g} W"
            print(f"idle power  {e.source} ({e.covers}): {power} over {e.duration_s:.1f} s"
                  + (f" ({e.reason})" if e.reason else ""))
    if result.exit_code is PreflightExit.CANNOT_CHECK and result.error:
        print(f"{PROG}: {result.error}", file=sys.stderr)
    return int(result.exit_code)


async def _engine_state(
    host: str, model: str | None, gpu_present: bool | None
) -> list[Finding] | str:
    """The engine findings, or the reason they could not be read."""
    from llmtop.engines.ollama import OllamaEngine
    from llmtop.probes.engine_state import CouldNotCheck, engine_findings

    engine = OllamaEngine(host, connect_timeout_s=2.0, read_timeout_s=5.0)
    try:
        found = await engine_findings(engine, model, gpu_present=gpu_present)
    finally:
        await engine.aclose()
    return found.reason if isinstance(found, CouldNotCheck) else found


def _agent_summary(sampler: AgentSampler) -> dict[str, Any]:
    """Where the samples came from (`--probes`): the agent, its machine, the engine it
    identified there, and the clock offset with its uncertainty."""
    info = sampler.info or {}
    clock = sampler.clock.to_dict() if sampler.clock is not None else {}
    return {"source": "agent", "url": sampler.target.url, "machine": info.get("machine"),
            "engine": (info.get("engine") or {}).get("description"), **clock}


def _with_error(result: PreflightResult, error: str) -> PreflightResult:
    return replace(result, error=error, quiet=False)


def _with_extra(result: PreflightResult, extra: dict[str, Any]) -> PreflightResult:
    return replace(result, extra={**result.extra, **extra})


def _cannot_check(reason: str, as_json: bool) -> int:
    from llmtop.probes.preflight import PreflightExit

    code = PreflightExit.CANNOT_CHECK
    if as_json:
        print(
            json.dumps(
                {"verdict": "CANNOT CHECK", "quiet": False, "exit_code": int(code), "error": reason}
            )
        )
    print(f"{PROG}: {reason}", file=sys.stderr)
    return int(code)


def _num(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    return f"{value:g} {unit}".rstrip()


def format_finding(f: Finding) -> list[str]:
    """A finding as text lines: level, code and message; measured vs threshold; remedy."""
    lines = [f"  {f.level.value.upper():<5} {f.code}: {f.message}"]
    if f.value is not None:
        limit = f", threshold {_num(f.threshold, f.unit)}" if f.threshold is not None else ""
        lines.append(f"        measured {_num(f.value, f.unit)}{limit}")
    lines.append(f"        remedy: {f.remedy}")
    return lines


def _band_words(band: tuple[float, float] | None) -> str:
    """"; 8–38 % sample to sample" (the spread the median hides), or
    "; 4 % in every sample" when the two ends round alike; "" when unknown."""
    if band is None:
        return ""
    low, high = f"{band[0]:.0f}", f"{band[1]:.0f}"
    return f"; {low} % in every sample" if low == high else f"; {low}–{high} % sample to sample"


def print_result(
    result: PreflightResult,
    engine: dict[str, Any],
    config: dict[str, Any],
    out: TextIO | None = None,
) -> None:
    """The text report: verdict line, findings (worst first), busiest apps, engine, config."""
    out = out or sys.stdout
    bg = result.background_cpu_median
    head = f"{result.verdict}  ({result.samples} samples over {result.duration_s:.1f} s"
    head += f", every {result.interval_s:g} s)" if result.interval_s else ")"
    if bg is not None:
        head += f"; background CPU {bg:.0f} % of the machine (median"
        head += _band_words(result.background_cpu_band) + ")"
    lines = [head]
    shown = result.findings
    if not shown:
        lines.append("  no findings")
    for f in shown:
        lines += format_finding(f)
    busy = [a for a in result.apps if a.cpu_percent][:TOP_APPS]
    if busy:
        listing = ", ".join(f"{_label(a)} {a.cpu_percent:.0f} %" for a in busy)
        lines.append(f"busiest apps (median CPU, % of one core): {listing}")
    if engine.get("checked"):
        lines.append(
            f"engine: {engine['host']} (version {engine['version']}), loaded models from /api/ps"
            + (f", measured model {engine['model']}" if engine.get("model") else "")
        )
    else:
        lines.append(f"engine: no engine checked ({engine.get('reason', 'none answered')})")
    if engine.get("described"):
        lines.append(engine["described"])
    probes = config.get("probes")
    if probes:
        lines.append(f"probes: {probes['machine']} through the agent at {probes['url']} "
                     f"(clock ± {probes.get('clock_uncertainty_ns', 0) / 1e6:.1f} ms); "
                     f"{probes['engine']}")
    where = config["path"]
    lines.append(
        f"thresholds: {'from ' + where if config['loaded'] else 'defaults (no ' + where + ')'}"
    )
    if result.extra.get("canary"):
        lines.append(f"machine speed: {result.extra['canary']['sentence']}")
    if result.error:
        lines.append(f"could not check: {result.error}")
    print("\n".join(lines), file=out)


PIDS_SHOWN = 3  # an app of at most this many processes is listed with its pids


def _label(app: Any) -> str:
    """An app as the busiest-apps line names it: llmtop's and the engine's said as such, and
    the pids of an app of a few processes ("python3 -c …#4eda (pid 4242)"), so that the one to
    stop can be found."""
    if app.category is Category.SELF:
        return f"{app.app} (this check)"
    if app.category is Category.ENGINE:
        return f"{app.app} (measured engine)"
    pids = tuple(app.pids or ())
    if 0 < len(pids) <= PIDS_SHOWN:
        return f"{app.app} (pid{'s' if len(pids) > 1 else ''} {', '.join(map(str, pids))})"
    return str(app.app)
