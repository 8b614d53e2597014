"""`llmtop run`: stream one prompt without the TUI; print the text and metrics, or JSON."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llmtop.commands.engines import others_task, say_others
from llmtop.commands.flags import engine_flags
from llmtop.commands.stopping import run_stoppable
from llmtop.engines.events import Status, StreamEvent, exit_code_for
from llmtop.exitcodes import ExitCode, UsageError
from llmtop.sessions.measure.metrics import (
    E2E,
    ITL,
    ITL_TOKEN,
    LOAD,
    OVERHEAD,
    PROMPT_EVAL,
    SERVER_DECODE,
    TPOT,
    TTFT,
)
from llmtop.sessions.measure.options import GenerationOptions

if TYPE_CHECKING:
    from llmtop.engines.connection import Connection
    from llmtop.probes.remote import AgentSampler
    from llmtop.probes.sampler import ProbeSampler
    from llmtop.sessions.measure.request import RequestResult
    from llmtop.sessions.records.schema import FindingRecord
    from llmtop.sessions.runners.energy import EnergyMeter
    from llmtop.sessions.runners.recorder import SessionRecorder

PROBE_INTERVAL_S = 0.5  # faster than the TUI's idle 1 Hz: a request lasts a few seconds
# The first probe sample identifies every process (~20-50 ms of CPU, bench/probe_cost.py
# "first"); taken while the request waits for its first token it holds the GIL when the
# bytes arrive and adds ~1 ms to TTFT (bench/clock_truth.py, `run` row). The request waits
# for it, at most this long (a machine too slow for that must not hold the request up).
FIRST_SAMPLE_WAIT_S = 2.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`llmtop run`'s flags: the engine's and generation's, the prompt, --json."""
    engine_flags(p, top=False)
    p.add_argument("--prompt", required=True, help="the prompt text")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def result_exit_code(result: RequestResult) -> ExitCode:
    """OK for a completed generation; otherwise the code that names what failed
    (`exit_code_for` its failure; REQUEST_FAILED when it ended without one)."""
    if result.status == Status.OK:
        return ExitCode.OK
    if result.failure is not None:
        return exit_code_for(result.failure.kind)
    return ExitCode.REQUEST_FAILED


def cold_start(result: RequestResult) -> bool:
    """An ok request that loaded the model (load over analysis.run.COLD_START_MS): a report
    calls it cold-start and the TUI's history too; its TTFT is not a warm figure."""
    from llmtop.sessions.analysis.run import cold_starts

    return result.status == Status.OK and cold_starts([result.metrics.load_ms or 0.0])[0][0]


def result_json(result: RequestResult, conn: Connection, log_path: str) -> dict[str, Any]:
    """The `--json` object: metrics (ms, tokens/s), server counts, identity, status, log."""
    m, s = result.metrics, result.stats
    return {
        "status": str(result.status),
        "error": str(result.failure) if result.failure else None,
        "cold_start": cold_start(result),
        TTFT.key: m.ttft_ms,
        TPOT.key: m.tpot_ms,
        E2E.key: m.e2e_ms,
        "output_tokens": m.output_tokens,
        "tokens_basis": m.tokens_basis,
        "decode_tps": m.client_decode_tps,
        SERVER_DECODE.key: m.server_decode_tps,
        "prefill_tps": m.server_prefill_tps,
        LOAD.key: m.load_ms,
        PROMPT_EVAL.key: m.prompt_eval_ms,
        OVERHEAD.key: m.overhead_ms,
        "buffered": m.buffered,
        "impossible": m.impossible,
        "prompt_eval_count": s.prompt_eval_count if s else None,
        "prompt_cached_count": s.prompt_cached_count if s else None,
        "draft_count": s.draft_count if s else None,
        "draft_accepted_count": s.draft_accepted_count if s else None,
        "draft_acceptance": s.draft_acceptance if s else None,
        ITL.key: list(m.itl_ms),
        ITL_TOKEN.key: list(m.itl_token_ms),
        "new_connection": result.new_connection,
        "engine_config": conn.engine_config_short,
        "eval_count": s.eval_count if s else None,
        "done_reason": s.done_reason if s else None,
        "engine": conn.engine.name,
        "host": conn.engine.host,
        "model": conn.model,
        "quantization": conn.info.quantization if conn.info else None,
        "remote": conn.info.remote if conn.info else None,
        "options": result.options,
        "text": result.content,
        "thinking": result.thinking,
        "log": log_path,
    }


def remote_line(remote: str) -> str:
    """What a model that runs elsewhere (an Ollama cloud model: `ModelInfo.remote`) does to
    the figures, said plainly."""
    return (f"the model runs on {remote}, not on this machine (remote: TTFT and E2E include "
            f"the network to {remote}, and this machine's probes do not describe the machine "
            "that ran it)")


def _fmt(value: float | None, unit: str, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f} {unit}"


def cancelled_line(result: RequestResult) -> str:
    """What a request stopped by Ctrl+C had shown: "cancelled after 12 chunks: TTFT 85.1 ms ·
    11.9 chunk/s over 1.0 s (the client's chunks; no server counts)"."""
    from llmtop.sessions.measure.timeline import live_chunk_rate

    stamps = [e.t_ns for e in result.events if e.has_text]
    ttft = result.metrics.ttft_ms
    if not stamps:
        return "cancelled before the first chunk: no figure"
    rate = live_chunk_rate(stamps[0], stamps[-1], len(stamps))
    span_s = (stamps[-1] - stamps[0]) / 1e9
    pace = (f" · {rate:.1f} chunk/s over {span_s:.1f} s" if rate is not None else "")
    return (f"cancelled after {len(stamps)} chunk{'s' if len(stamps) != 1 else ''}: TTFT "
            f"{_fmt(ttft, 'ms')}{pace} (the client's chunks; no server counts)")


def print_metrics(result: RequestResult, out: Any = sys.stdout) -> None:
    """The human-readable metrics block printed after the streamed text."""
    from llmtop.sessions.measure.timeline import prompt_cache_hit

    m, s = result.metrics, result.stats
    basis = (
        "" if m.tokens_basis != "chunks" else " (counted as chunks: no eval_count from the server)"
    )
    whole = (" (includes the wait while the text was held back: the stream was buffered)"
             if m.buffered else "")
    lines = [
        f"status        {result.status}" + (f": {result.failure}" if result.failure else "")
        + (" · cold-start (the model was loaded in this request: its TTFT is not a warm "
           "figure; a second request to the same engine is warm)" if cold_start(result) else ""),
        f"TTFT          {_fmt(m.ttft_ms, 'ms')}{whole}",
        f"TPOT          {_fmt(m.tpot_ms, 'ms/token', 2)}",
        f"E2E           {_fmt(m.e2e_ms, 'ms')}",
        f"output        {m.output_tokens if m.output_tokens is not None else 'n/a'} tokens{basis}",
        (f"decode        {_fmt(m.client_decode_tps, 'tok/s')} client, "
        f"{_fmt(m.server_decode_tps, 'tok/s')} server"),
        (f"prefill       cached ({s.prompt_cached_count} of {s.prompt_eval_count} prompt "
         "tokens from the server's prompt cache: no prefill rate)")
        if prompt_cache_hit(s) and s is not None else
        f"prefill       {_fmt(m.server_prefill_tps, 'tok/s')} server"
        + (
            f" ({s.prompt_eval_count} tokens in {_fmt(m.prompt_eval_ms, 'ms')})"
            if s and s.prompt_eval_count
            else ""
        ),
        f"load          {_fmt(m.load_ms, 'ms')}",
        f"overhead      {_fmt(m.overhead_ms, 'ms')} (TTFT − load − prompt eval)",
    ]
    if m.impossible:
        lines.append(f"impossible    the server's figures are set aside: {m.impossible}")
    if s and s.prompt_cached_count:
        lines.append(f"prompt cache  {s.prompt_cached_count} of {s.prompt_eval_count} prompt "
                     "tokens reused by the server (not evaluated, not in the prefill rate)")
    if s and s.draft_acceptance is not None:
        lines.append(f"draft         {s.draft_accepted_count} of {s.draft_count} drafted tokens "
                     f"accepted ({s.draft_acceptance:.0%}, the server's draft_n_accepted)")
    if m.itl_token_ms and m.itl_token_ms != m.itl_ms:
        itl = sorted(m.itl_token_ms)
        lines.append(f"ITL per token {_fmt(itl[len(itl) // 2], 'ms', 2)} median, from the "
                     f"server's token counts ({m.output_tokens} tokens in {m.text_chunks} chunks, "
                     "some arriving together: chunk gaps are not token gaps)")
    if m.buffered:
        lines.append(f"buffered      client TPOT, decode and overhead are n/a: {m.buffered}")
    print("\n".join(lines), file=out)


def request_noise(log_path: str, request_id: int) -> tuple[int, int, list[FindingRecord]]:
    """What the probes saw during request `request_id`, read back from its log: (NOISY
    samples, samples, each distinct WARN/FAIL finding once — the worst level of its code,
    FAIL first). (0, 0, []) when the log cannot be read back (its own error is said apart)."""
    from llmtop.sessions.records.log import LogError, read_log

    try:
        probes = [p for p in read_log(log_path).probes if p.request_id == request_id]
    except LogError:
        return 0, 0, []
    noisy = [p for p in probes if p.noisy]
    worst: dict[str, FindingRecord] = {}
    for p in noisy:
        for f in p.verdict.findings if p.verdict else ():
            if f.level in ("warn", "fail") and (f.code not in worst or f.level == "fail"):
                worst[f.code] = f
    ordered = sorted(worst.values(), key=lambda f: f.level != "fail")
    return len(noisy), len(probes), ordered


async def offload_check(conn: Connection, log_path: str, request_id: int,
                        result: RequestResult, agent: bool) -> FindingRecord | None:
    """The `offload-mismatch` finding of the request (analysis/offload.py): the engine's
    claim of the model's share in GPU memory, read from `/api/ps` as the request ended,
    against the probe samples taken during it; None when the engine claims no GPU share,
    cannot say, or the probes do not watch its machine."""
    from llmtop.engines.base import EngineError
    from llmtop.probes.engine_identity import is_local_host
    from llmtop.sessions.analysis.offload import gpu_share, offload_finding
    from llmtop.sessions.records.log import LogError, read_log

    if not agent and not is_local_host(conn.upstream.host):
        return None
    try:
        loaded = await conn.upstream.model_info(conn.model)
        probes = [p for p in read_log(log_path).probes if p.request_id == request_id]
    except (EngineError, LogError):
        return None
    m = result.metrics
    engine = "llama-server" if (conn.engine_config or {}).get("server") == "llama-server" \
        else "ollama"
    return offload_finding(gpu_share(loaded.size, loaded.size_vram), probes,
                           m.server_decode_tps or m.client_decode_tps, engine)


def noise_lines(noisy: int, total: int, findings: list[FindingRecord]) -> list[str]:
    """"⚠ machine NOISY during this request (4 of 6 probe samples): …" and one line per
    finding with its remedy; [] when no sample during the request was NOISY."""
    if not noisy:
        return []
    return [(f"⚠ machine NOISY during this request ({noisy} of {total} probe samples): these "
            "figures include the noise"),
            *(f"  {f.level.upper()} {f.message} — {f.remedy}" for f in findings)]


def _probe_state(recorder: SessionRecorder, quiet: bool) -> Callable[[str, str], None]:
    """An agent's state changes (`--probes`): logged, and said on stderr unless `quiet`."""
    from llmtop.sessions.records.log import LogError

    def changed(state: str, detail: str) -> None:
        with contextlib.suppress(LogError):
            recorder.record_probe_state(state, detail)
        if not quiet and state != "connected":
            print(f"\nllmtop: probes {state}: {detail}", file=sys.stderr, flush=True)

    return changed


class _FirstSample:
    """The sampler's callback: hands every sample to `record`, and lets the event loop that
    built it `wait` for the first one (the sampler calls from its own thread)."""

    def __init__(self, record: Callable[[Any], None]) -> None:
        import asyncio

        self._record = record
        self._loop = asyncio.get_running_loop()
        self._seen = asyncio.Event()

    def __call__(self, sample: Any) -> None:
        self._record(sample)
        if not self._seen.is_set():
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                self._loop.call_soon_threadsafe(self._seen.set)

    async def wait(self, limit_s: float) -> None:
        """Until the first sample has been recorded, or `limit_s` seconds."""
        import asyncio

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(limit_s):
                await self._seen.wait()


async def _run(args: argparse.Namespace) -> int:
    """Connect, stream the prompt with the probes sampling, report it; the exit code."""
    from llmtop.commands.connecting import connect_from_flags

    others = others_task(args)  # with no engine flags: which other engines answer here
    conn = await connect_from_flags(args)
    await say_others(others, None if isinstance(conn, int) else conn.upstream.host)
    if isinstance(conn, int):
        return conn
    try:
        return await _stream(args, conn)
    finally:
        await conn.close()


async def _stream(args: argparse.Namespace, conn: Connection) -> int:
    """The request on an open connection, logged with its probe samples, then reported
    (`_report`); the exit code (`result_exit_code`, or LOG_INCOMPLETE). Raises UsageError
    when the log cannot be created."""
    from llmtop.probes.remote import make_sampler
    from llmtop.sessions.records.log import LogError
    from llmtop.sessions.runners.energy import local_meter
    from llmtop.sessions.runners.recorder import SessionRecorder

    agent = getattr(args, "agent", None)
    energy = local_meter(conn.upstream.host, agent, lambda: conn.engine_pids)
    try:
        recorder = SessionRecorder(
            conn, GenerationOptions.from_flags(args).to_ollama(), args.log, energy=energy,
            token_timeout_s=args.token_timeout,
        )
    except LogError as exc:
        raise UsageError(str(exc), label="llmtop") from None
    first_sample = _FirstSample(recorder.record_probe)
    sampler = make_sampler(agent, PROBE_INTERVAL_S, first_sample,
                           lambda: conn.engine_pids, args.thresholds,
                           on_state=_probe_state(recorder, args.json),
                           energy=energy.reader,
                           engine_threads=lambda: conn.compute_threads(recorder.options),
                           thread_setting=lambda: conn.thread_setting)
    _say_engine(args, conn, agent, energy)
    try:  # from here a stop (even during the warm-up) still closes the log, `end` and all
        result, warmup_ms = await _measure(args, conn, recorder, sampler, first_sample)
    finally:
        sampler.stop()
        recorder.close()
    await _report(args, conn, recorder, result, warmup_ms, agent is not None)
    for note in getattr(conn.engine, "notes", ()):  # options the engine could not send
        print(f"llmtop: note: {note}", file=sys.stderr)
    if result.failure is not None and not args.json:
        print(f"llmtop: {result.failure}", file=sys.stderr)
    code = result_exit_code(result)
    if recorder.log.incomplete is not None:
        print(f"llmtop: {recorder.log.incomplete}", file=sys.stderr)
        return ExitCode.LOG_INCOMPLETE if code == ExitCode.OK else code
    return code


def _say_engine(args: argparse.Namespace, conn: Connection, agent: Any,
                energy: EnergyMeter) -> None:
    """The "# ollama at … · model" lines on stderr before the request (only the energy line
    with --json)."""
    from llmtop.probes.remote import probes_note

    if not args.json:
        info = conn.info
        quant = f" {info.quantization}" if info and info.quantization else ""
        config = f" · {conn.engine_config_short}" if conn.engine_config_short else ""
        print(f"# {conn.engine.name} at {conn.engine.host} · {conn.model}{quant}{config}",
              file=sys.stderr)
        note = probes_note(agent, conn.upstream.host)
        if note:
            print(f"# {note}", file=sys.stderr)
        if info and info.remote:
            print(f"# {remote_line(info.remote)}", file=sys.stderr)
    print(f"# {energy.line}", file=sys.stderr)


async def _measure(args: argparse.Namespace, conn: Connection, recorder: SessionRecorder,
                   sampler: ProbeSampler | AgentSampler, first_sample: _FirstSample
                   ) -> tuple[RequestResult, float | None]:
    """Warm up an engine this run started, start the sampler, stream the prompt (its text
    to stdout unless --json); the result and the warm-up's load ms (None: none)."""
    import asyncio

    from llmtop.sessions.runners.warmup import started_engine, warm_up

    agent = getattr(args, "agent", None)

    def show(event: StreamEvent) -> None:
        if not args.json and (event.content or event.thinking):
            sys.stdout.write(event.thinking or event.content)
            sys.stdout.flush()

    warmup_ms = await warm_up(conn, recorder.options) if started_engine(conn) else None
    if warmup_ms is not None and not args.json:
        print(f"# warm-up: the engine this run started loaded the model in "
              f"{warmup_ms:.1f} ms before the measured request (a load-only request, "
              "not measured)", file=sys.stderr)
    sampler.start()
    if agent is None:  # an agent samples elsewhere; its thread here only reads
        await first_sample.wait(FIRST_SAMPLE_WAIT_S)
    ended: list[RequestResult] = []
    try:
        result, _ = await recorder.measure(args.prompt, show,
                                           on_end=lambda r, _rec: ended.append(r),
                                           late=_throttle_edges(conn, agent))
    except asyncio.CancelledError:  # Ctrl+C: what arrived, said as such
        if ended and not args.json:
            print("\n\n" + cancelled_line(ended[0]), file=sys.stderr)
        raise
    if agent is None:  # one sample as it ended: a short request is judged too
        recorder.record_end_probe(await asyncio.to_thread(sampler.sample_once),
                                  recorder.requests)
    return result, warmup_ms


def _throttle_edges(conn: Connection, agent: object) -> Callable[[RequestResult], Any] | None:
    """When the engine runs on this machine: the throttles read now, before the request, and
    a `late` hook that reads them again as it ends (runners/throttles.py). None for an engine
    elsewhere, whose machine this one is not."""
    from llmtop.probes.engine_identity import is_local_host
    from llmtop.sessions.runners.throttles import ThrottleEdges

    if agent is not None or not is_local_host(conn.upstream.host):
        return None
    return ThrottleEdges().edges()


def throttle_check(log_path: str, request_id: int) -> FindingRecord | None:
    """The `throttled` WARN of request `request_id` (analysis/machine.throttle_finding), from
    the throttles its record carries; None when it saw none or the log cannot be read."""
    from llmtop.sessions.analysis.machine import throttle_finding
    from llmtop.sessions.records.log import LogError, read_log

    try:
        record = next((r for r in read_log(log_path).requests if r.id == request_id), None)
    except LogError:
        return None
    if record is None or record.machine is None:
        return None
    return throttle_finding(record.machine.throttle)


async def _report(args: argparse.Namespace, conn: Connection, recorder: SessionRecorder,
                  result: RequestResult, warmup_ms: float | None, agent: bool) -> None:
    """Print the finished request: its JSON (`--json`) or its metrics, energy, the probes'
    verdict over it and their findings (the engine's GPU claim set against the machine's
    first: `offload_check`)."""
    from llmtop.sessions.runners.energy import request_line

    noisy, samples, findings = request_noise(str(recorder.log.path), recorder.requests)
    offload = await offload_check(conn, str(recorder.log.path), recorder.requests,
                                  result, agent)
    throttled = throttle_check(str(recorder.log.path), recorder.requests)
    for said in (f for f in (throttled, offload) if f is not None):
        findings = [said, *findings]
        if not args.json:
            print(f"llmtop: {said.level.upper()} {said.message} — {said.remedy}",
                  file=sys.stderr)
    if args.json:
        data = result_json(result, conn, str(recorder.log.path))
        data["warmup_load_ms"] = warmup_ms
        data["noisy"] = noisy > 0 if samples else None  # no sample: unknown, not "no"
        data["probe_samples"] = {"noisy": noisy, "total": samples}
        data["findings"] = [{"code": f.code, "level": f.level, "message": f.message,
                             "remedy": f.remedy} for f in findings]
        if recorder.last_energy:  # only where a source was read: otherwise unchanged
            data["energy"] = [e.to_json() for e in recorder.last_energy]
        print(json.dumps(data))
    else:
        print("\n")
        print_metrics(result)
        for e in recorder.last_energy:
            print(f"energy        {request_line(e)}")
        state = "NOISY" if noisy else "QUIET"
        print(f"machine       {state} ({noisy} of {samples} probe samples NOISY during the "
              "request)" if samples else "machine       no probe sample during the request")
        if conn.info and conn.info.remote:
            print(f"remote        {remote_line(conn.info.remote)}")
        print(f"log           {recorder.log.path}")
        for line in noise_lines(noisy, samples, findings):
            print(f"llmtop: {line}", file=sys.stderr)


def main(args: argparse.Namespace) -> int:
    """`llmtop run`: stream one prompt (args.prompt) and print it; returns an ExitCode, or
    128 + the signal's number after SIGTERM/SIGHUP (`stopping.run_stoppable`).
    `args.thresholds` (the loaded config) is set by the CLI. Raises UsageError for an empty
    prompt."""
    if not args.prompt.strip():
        raise UsageError("--prompt is empty; give the text to send, e.g. --prompt 'Why is the "
                         "sky blue?'")
    return run_stoppable(_run(args), "llmtop run")
