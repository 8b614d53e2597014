"""`llmtop bench --engines`: the rounds' order, the interleaving driver (with stand-in
runners that record what each is sent), the model matching, the items, the set's file and
its one comparison (from logs written with the real SessionLog)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
from dataclasses import dataclass

import pytest

from llmtop.commands.bench_engines import (
    check_engine_flags,
    label_of,
    log_paths,
)
from llmtop.commands.flags import engine_items
from llmtop.engines.discovery import FoundEngine
from llmtop.exitcodes import UsageError
from llmtop.sessions.analysis.compare.engines import quantization_name
from llmtop.sessions.analysis.engine_set import analyze_set, match_models
from llmtop.sessions.measure.config import BenchConfig
from llmtop.sessions.measure.prompts import INSTRUCTION, SEPARATOR, PromptGenerator
from llmtop.sessions.records.engine_set import (
    EngineSet,
    ModelFile,
    SetEngine,
    read_set,
    write_set,
)
from llmtop.sessions.records.log import LogError, read_log
from llmtop.sessions.reports import engine_set as report
from llmtop.sessions.runners.engines import InterleavedBench, cut, round_order
from tests.unit.compare_logs import write_log

# --- the rounds' order ---------------------------------------------------------------------


def test_round_order_rotates_one_engine_each_round():
    # by hand: three engines, rotated left by the round's index
    assert [round_order(3, r) for r in range(4)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    assert [round_order(2, r) for r in range(3)] == [[0, 1], [1, 0], [0, 1]]
    assert round_order(1, 5) == [0]


def test_over_n_rounds_each_engine_holds_each_position_once():
    for n in (2, 3, 4):
        orders = [round_order(n, r) for r in range(n)]
        for position in range(n):
            assert sorted(order[position] for order in orders) == list(range(n))


@pytest.mark.parametrize(("engines", "index"), [(0, 0), (2, -1)])
def test_round_order_refuses_no_engine_or_a_negative_round(engines, index):
    with pytest.raises(ValueError, match="a round needs"):
        round_order(engines, index)


# --- the driver, with stand-in runners ----------------------------------------------------


@dataclass
class Point:
    words: int


@dataclass
class Cal:
    targets: dict[int, Point]


class StandIn:
    """Records, in one shared list, every call the driver makes (label, what, detail)."""

    def __init__(self, label: str, calls: list, config: BenchConfig, words: int) -> None:
        self.label, self.calls, self.config, self.words = label, calls, config, words

    @contextlib.contextmanager
    def measuring(self):
        yield
        self.calls.append((self.label, "closed", None))

    async def start(self, salt):
        self.calls.append((self.label, "start", salt))

    async def calibrate(self):
        return Cal({t: Point(self.words) for t in self.config.prompt_tokens})

    async def measure_one(self, fields, total, prompt):
        self.calls.append((self.label, "request", (fields.phase, fields.index,
                                                    fields.prompt_tokens_target, prompt,
                                                    fields.prompt_words)))

    async def finish(self, calibration):
        self.calls.append((self.label, "finish", None))
        return self.label


def test_every_round_sends_one_prompt_to_every_engine_in_the_rotated_order():
    config = BenchConfig(requests=3, warmup=1, prompt_tokens=(64, 128))
    calls: list = []
    runners = [StandIn(x, calls, config, 40) for x in ("a", "b", "c")]
    runners[2].words = 42  # another template: c gets the round's words cut to its own 42
    done = asyncio.run(InterleavedBench(runners, ["a", "b", "c"]).run())
    requests = [(label, detail) for label, what, detail in calls if what == "request"]
    # 2 sizes × (1 warm-up + 3) rounds × 3 engines
    assert len(requests) == 24 and len(done.rounds) == 8
    for k, r in enumerate(done.rounds):
        sent = dict(requests[3 * k: 3 * k + 3])
        assert tuple(label for label, _ in requests[3 * k: 3 * k + 3]) == r.order
        assert r.order == tuple("abc"[i] for i in round_order(3, k))
        assert {d[:3] for d in sent.values()} == {(r.phase, r.index, r.target)}
        assert [sent[x][4] for x in "abc"] == [40, 40, 42]
        words = {x: sent[x][3].removesuffix(SEPARATOR + INSTRUCTION).split(" ") for x in "abc"}
        assert sent["a"][3] == sent["b"][3] and len(words["a"]) == 40  # the same prompt
        assert words["c"][:40] == words["a"] and len(words["c"]) == 42  # the same words, more
    # rounds 1-4 are 64 tok (index 0 the warm-up), 5-8 are 128 tok
    assert [(r.target, r.phase, r.index) for r in done.rounds[:5]] == [
        (64, "warmup", 0), (64, "measure", 1), (64, "measure", 2), (64, "measure", 3),
        (128, "warmup", 0)]
    prompts = [detail[3] for label, detail in requests if label == "a"]
    assert len(set(prompts)) == 8  # a new prompt every round: never one twice to an engine
    assert len({salt for _, what, salt in calls if what == "start"}) == 1
    assert [n.split(" (")[0] for n in done.notes] == ["c: 64 tok is 42 words there, 40 on a",
                                                      "c: 128 tok is 42 words there, 40 on a"]
    assert done.outcomes == ["a", "b", "c"]
    assert [label for label, what, _ in calls if what == "closed"] == ["c", "b", "a"]


def test_a_prompt_cut_keeps_its_first_words_and_the_instruction():
    prompt = PromptGenerator(1).make(5)
    words = prompt.removesuffix(SEPARATOR + INSTRUCTION).split(" ")
    assert cut(prompt, 5) == prompt
    assert cut(prompt, 2) == " ".join(words[:2]) + SEPARATOR + INSTRUCTION
    with pytest.raises(ValueError, match="cannot cut a 5-word prompt to 6 words"):
        cut(prompt, 6)


# --- the model matched --------------------------------------------------------------------


def test_one_file_on_every_engine_matches_by_file():
    f = ModelFile("/m/gemma.gguf", 253113024, "a5fd" * 16)
    match = match_models(["x", "y"], ["gemma3:270m", "/m/gemma.gguf"], [f, f])
    assert match.how == "file" and not match.refused
    assert "253113024 bytes, sha256 a5fda5fda5fda5fd…" in match.said


def test_files_that_differ_refuse_the_set():
    a = ModelFile("/m/q4.gguf", 100, "aa" * 32)
    b = ModelFile("/m/q8.gguf", 100, "bb" * 32)
    match = match_models(["x", "y"], ["m", "m"], [a, b])
    assert match.refused and match.how == "file"
    assert "x: /m/q4.gguf" in match.said and "y: /m/q8.gguf" in match.said


def test_without_every_file_the_names_decide():
    f = ModelFile("/m/gemma-3-270m.gguf", 1, "cc" * 32)
    same = match_models(["x", "y"], ["/m/gemma-3-270m.gguf", "Gemma-3-270M"], [f, None])
    assert same.how == "name" and not same.refused
    assert same.said.endswith("the model file was not readable here for y")
    other = match_models(["x", "y"], ["gemma3:270m", "llama3:8b"], [None, None])
    assert other.how == "none" and not other.refused and other.said.startswith("WARNING")
    assert "x: gemma3:270m, y: llama3:8b" in other.said


@pytest.mark.parametrize(("given", "name"), [
    ("Q4_K - Medium", "Q4_K_M"), ("Q3_K - Small", "Q3_K_S"), ("Q5_K - Large", "Q5_K_L"),
    ("IQ2_XS - 2.3125 bpw", "IQ2_XS"), ("q8_0", "Q8_0"), ("Q4_K_M", "Q4_K_M")])
def test_llama_cpp_and_ollama_name_a_quantization_alike(given, name):
    assert quantization_name(given) == name


# --- the items and the flags --------------------------------------------------------------


def test_items_are_kinds_kind_at_port_or_urls():
    assert engine_items("llama-server@8080, llmtop-embedded,http://10.0.0.5:11434") == (
        "llama-server@8080", "llmtop-embedded", "http://10.0.0.5:11434")


@pytest.mark.parametrize(("text", "said"), [
    ("llama-server", "two or more different engines"),
    ("ollama,ollama", "two or more different engines"),
    ("ollama,Llama Server", "is not an engine"),
    ("ollama,http://:80", "a URL without a host"),
    # as `engines --ports` refuses it
    ("llama-server@99999,ollama", "port '99999' is not a number from 1 to 65535"),
    ("llama-server@0,ollama", "port '0' is not a number from 1 to 65535"),
])
def test_bad_items_are_refused_naming_them(text, said):
    with pytest.raises(argparse.ArgumentTypeError, match=said):
        engine_items(text)


def test_a_single_engine_protocol_is_refused_with_engines():
    args = argparse.Namespace(runs=2, engine="auto", via="direct")
    with pytest.raises(UsageError, match="--runs measures one engine"):
        check_engine_flags(args)
    with pytest.raises(UsageError, match="leave out --engine"):
        check_engine_flags(argparse.Namespace(engine="openai"))


def test_labels_and_paths():
    assert label_of(FoundEngine("llama-server", "http://127.0.0.1:8080")) == "llama-server@8080"
    assert label_of(FoundEngine("ollama", "http://10.0.0.5:11434")) == "ollama@10.0.0.5:11434"
    set_file, logs = log_paths("/r/x.jsonl", ["llama-server@8080", "ollama@10.0.0.5:11434"])
    assert str(set_file) == "/r/x.engines.json"
    assert [str(p) for p in logs] == ["/r/x-llama-server-8080.jsonl",
                                      "/r/x-ollama-10.0.0.5-11434.jsonl"]


# --- the set's file and its one comparison -------------------------------------------------

A_TTFT = [100.0, 102.0, 98.0, 101.0, 99.0, 103.0, 97.0, 100.5]
B_TTFT = [200.0, 204.0, 196.0, 202.0, 198.0, 206.0, 194.0, 201.0]


def _set(tmp_path, match=None, headers=({}, {})):
    logs = [write_log(tmp_path / "s-a.jsonl", A_TTFT, engine="embedded", **headers[0]),
            write_log(tmp_path / "s-b.jsonl", B_TTFT, engine="openai: llama-server",
                      **headers[1])]
    engines = [SetEngine("a@1", "llmtop-embedded", "http://127.0.0.1:1", "0.1", "gemma3:270m",
                         str(logs[0])),
               SetEngine("b@2", "llama-server", "http://127.0.0.1:2", "b1", "g.gguf",
                         str(logs[1]), ModelFile("/m/g.gguf", 5, "dd" * 32))]
    rounds = [{"round": k + 1, "target": 200, "phase": "measure", "index": k,
               "order": ["a@1", "b@2"][k % 2:] + ["a@1", "b@2"][:k % 2]} for k in range(8)]
    path = tmp_path / "s.engines.json"
    write_set(EngineSet(engines, match or {"how": "name", "said": "by name"}, rounds), path)
    return path


def test_the_set_file_reads_back_with_its_logs_beside_it(tmp_path):
    path = _set(tmp_path)
    written = json.loads(path.read_text())
    assert written["type"] == "llmtop-engine-set"
    assert [e["log"] for e in written["engines"]] == ["s-a.jsonl", "s-b.jsonl"]  # relative
    back = read_set(path)
    assert [back.log_path(e) for e in back.engines] == [tmp_path / "s-a.jsonl",
                                                        tmp_path / "s-b.jsonl"]
    assert back.engines[1].model_file == ModelFile("/m/g.gguf", 5, "dd" * 32)
    assert back.rounds[1]["order"] == ["b@2", "a@1"]


def test_a_file_that_is_no_set_is_refused(tmp_path):
    other = tmp_path / "x.engines.json"
    other.write_text('{"type": "something else"}')
    with pytest.raises(LogError, match="is not an engine set"):
        read_set(other)
    other.write_text("not json")
    with pytest.raises(LogError, match="is not JSON"):
        read_set(other)


def test_one_table_per_metric_with_a_row_per_engine_and_the_pairs_verdict(tmp_path):
    back = read_set(_set(tmp_path))
    analysis = analyze_set(back, [read_log(back.log_path(e)) for e in back.engines])
    ttft = next(t for t in analysis.tables if t.metric.name == "ttft")
    assert [r.label for r in ttft.rows] == ["a@1", "b@2"]
    # by hand: A sorted 97 98 99 100 100.5 101 102 103, median (100 + 100.5) / 2; n = 8:
    # k = 1 (P(Bin(8, ½) <= 1) = 9/256 = 3.5 % > 2.5 %), so the interval is min to max
    a, b = ttft.rows
    assert (a.n, a.median, a.low, a.high) == (8, 100.25, 97.0, 103.0)
    assert (b.n, b.median, b.low, b.high) == (8, 200.5, 194.0, 206.0)
    assert {t.metric.name for t in analysis.tables} == {"ttft", "tpot", "decode", "prefill",
                                                        "e2e"}
    (pair,) = analysis.pairs
    assert (pair.name_a, pair.name_b) == ("a@1", "b@2") and not pair.refused
    row = next(r for r in pair.rows if r.metric.name == "ttft")
    assert row.verdict.startswith("B is 2.00× slower")
    text = report.markdown(analysis)
    assert "| a@1 | 8 | 100.2 | 97.0–103.0 |" in text
    assert "| 2 | 200 tok | measure | b@2 → a@1 |" in text
    assert "### a@1 vs b@2 (A: a@1, B: b@2)" in text  # the set's order, A first
    data = json.loads(report.json_text(analysis))
    assert data["tables"][0]["rows"][1] == {"engine": "b@2", "n": 8, "median": 200.5,
                                            "ci_low": 194.0, "ci_high": 206.0}
    assert data["pairs"][0]["a"] == "a@1" and len(data["rounds"]) == 8


# what the user's two engines recorded of one GGUF: Ollama's name and its quantization,
# llama-server's path and the same quantization; no digest on llama-server's side
NAMED_APART = ({"model": "gemma3:270m", "model_details": {"quantization": "Q4_K_M",
                                                         "digest": "a5fd3b62"}},
               {"model": "/m/gemma-3-270m-q4_k_m.gguf",
                "model_details": {"quantization": "Q4_K - Medium"}})


def test_a_set_matched_by_file_has_no_pair_warning_that_the_models_may_differ(tmp_path):
    by_name = read_set(_set(tmp_path, headers=NAMED_APART))
    logs = [read_log(by_name.log_path(e)) for e in by_name.engines]
    (pair,) = analyze_set(by_name, logs).pairs
    # matched by name only: compare's warning stays (nothing proves one file)
    said = ("the engines name the model differently (A gemma3:270m, "
            "B /m/gemma-3-270m-q4_k_m.gguf); the same model by its quantization Q4_K_M; "
            "not in both logs: digest")
    assert [w for w in pair.checks.warnings if "name the model differently" in w] == [said]
    same = {"how": "file", "said": "the same model file on every engine: 5 bytes, sha256 "
                                   "dddddddddddddddd… (a@1: /m/g.gguf, b@2: /m/g.gguf)"}
    (tmp_path / "file").mkdir()
    by_file = read_set(_set(tmp_path / "file", same, NAMED_APART))
    (pair,) = analyze_set(by_file, logs).pairs
    assert not [w for w in pair.checks.warnings if "model" in w]
    assert not pair.refused


# --- the items resolved against what `engines` finds ---------------------------------------

FOUND = (FoundEngine("llama-server", "http://127.0.0.1:8080", loaded=("m.gguf",)),
         FoundEngine("llama-server", "http://127.0.0.1:8081"),
         FoundEngine("llmtop-embedded", "http://127.0.0.1:11435"),
         FoundEngine("openai-compatible", "http://127.0.0.1:8000", found_by="port 8000"))


@pytest.fixture
def found_here(monkeypatch):
    from llmtop import connect
    from llmtop.engines.discovery import Discovery

    asked: list = []

    async def find(extra_ports=(), sockets=True):
        asked.append(list(extra_ports))
        return Discovery(FOUND)

    monkeypatch.setattr(connect, "find_engines", find)
    return asked


def test_a_kind_a_kind_at_port_and_a_generic_server_named_by_its_port(found_here):
    from llmtop.commands.bench_engines import resolve

    got = asyncio.run(resolve(["llmtop-embedded", "llama-server@8081",
                               "llama-cpp-python@8000"]))
    assert [(e.kind, e.url) for e in got] == [
        ("llmtop-embedded", "http://127.0.0.1:11435"), ("llama-server", "http://127.0.0.1:8081"),
        ("llama-cpp-python", "http://127.0.0.1:8000")]
    assert "named llama-cpp-python by --engines" in got[2].found_by
    assert found_here == [[8000, 8081]]  # the ports named are probed besides the usual


@pytest.mark.parametrize(("items", "said"), [
    (["llama-server", "llmtop-embedded"], "2 llama-server engines answer here"),
    (["llmtop-embedded", "llmtop-embedded@11435"], "two items name the same engine"),
    # a typo is no engine that does not answer: the kinds are listed
    (["foo@8080", "llmtop-embedded"], ("'foo' is not an engine kind: give one of ollama, "
     "llmtop-embedded, llama-server, vllm, sglang, llama-cpp-python, koboldcpp, lm-studio, "
     "openai-compatible")),
])
def test_items_no_single_engine_answers_for_are_refused(found_here, items, said):
    from llmtop.commands.bench_engines import resolve

    with pytest.raises(UsageError, match=re.escape(said)):
        asyncio.run(resolve(items))


@pytest.mark.parametrize(("items", "said"), [
    (["vllm", "llmtop-embedded"], "no vllm engine answers here"),
    (["ollama@8000", "llmtop-embedded"], "no ollama engine answers here on port 8000"),
])
def test_items_no_engine_answers_for_are_unreachable(found_here, items, said):
    from llmtop.commands.bench_engines import NotAnswering, resolve

    with pytest.raises(NotAnswering, match=said):
        asyncio.run(resolve(items))


def test_a_dead_url_exits_engine_unreachable_as_a_single_bench(found_here, monkeypatch,
                                                                 capsys):
    from llmtop.commands.bench_engines import run_set
    from llmtop.engines import discovery
    from llmtop.exitcodes import ExitCode

    async def discover(ports, *, addresses, **_):
        return discovery.Discovery()  # nothing answers at 127.0.0.1:1

    monkeypatch.setattr(discovery, "discover", discover)
    args = argparse.Namespace(engines=("llama-server@8081", "http://127.0.0.1:1"))
    code = asyncio.run(run_set(args, BenchConfig()))
    assert code == ExitCode.ENGINE_UNREACHABLE == 3
    assert "no LLM engine answers at http://127.0.0.1:1" in capsys.readouterr().err


def test_a_url_is_identified_at_its_own_address(found_here, monkeypatch):
    from llmtop.commands.bench_engines import NotAnswering, resolve
    from llmtop.engines import discovery

    asked: list = []

    async def discover(ports, *, addresses, **_):
        asked.append((list(ports), list(addresses)))
        if addresses == ["10.0.0.5"]:
            return discovery.Discovery((FoundEngine("ollama", "http://10.0.0.5:11434"),))
        return discovery.Discovery()

    monkeypatch.setattr(discovery, "discover", discover)
    got = asyncio.run(resolve(["http://10.0.0.5:11434/", "llmtop-embedded"]))
    assert [(e.kind, e.url, e.found_by) for e in got] == [
        ("ollama", "http://10.0.0.5:11434", "URL given"),
        ("llmtop-embedded", "http://127.0.0.1:11435", "")]
    assert asked == [([11434], ["10.0.0.5"])]
    with pytest.raises(NotAnswering, match="no LLM engine answers at http://10.0.0.6:8080"):
        asyncio.run(resolve(["http://10.0.0.6:8080", "llmtop-embedded"]))


def test_an_engine_that_cannot_be_reached_gives_connects_exit_code(monkeypatch, capsys):
    from llmtop import connect as connecting
    from llmtop.commands.bench_engines import _connect
    from llmtop.engines.base import EngineError
    from llmtop.engines.events import Failure, FailureKind
    from llmtop.exitcodes import ExitCode

    closed: list = []

    class Conn:
        async def close(self):
            closed.append(self)

    async def connect(engine, host, model=None, *_args, **_kw):
        if "8080" in host:
            raise EngineError(Failure(FailureKind.MODEL_NOT_FOUND, "no model 'x'", "pull it"))
        return Conn()

    monkeypatch.setattr(connecting, "connect", connect)
    engines = [FOUND[2], FOUND[0]]  # the embedded engine, then llama-server on 8080
    code = asyncio.run(_connect(argparse.Namespace(model="x"), engines))
    assert code == ExitCode.MODEL_NOT_FOUND and len(closed) == 1
    assert "llmtop: llama-server@8080: no model 'x' — pull it" in capsys.readouterr().err


def test_the_set_as_one_page(tmp_path):
    from llmtop.sessions.reports.formats import render

    back = read_set(_set(tmp_path))
    page = render(analyze_set(back, [read_log(back.log_path(e)) for e in back.engines]), "html")
    assert "<h1>llmtop bench --engines</h1>" in page
    # one figure per metric table with a median (both engines have every metric here)
    assert page.count('data-plot="engines-') == 5
    assert '"arrayminus":[3.25,6.5]' in page  # TTFT: 100.25 − 97, 200.5 − 194


def test_a_runners_probe_sampler_stops_before_its_log_closes(tmp_path, monkeypatch):
    """The set finishes its runners one after another: the first one's sampler must not
    outlive its log (its next sample, taken during the second one's finish, was written to
    the closed log: "probe sample callback failed … LogError … is closed")."""
    from llmtop.sessions.runners.bench import BenchRunner
    from llmtop.testing.paced import PacedEngine, paced_connection

    engine = PacedEngine()
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", engine.clock)
    config = BenchConfig(requests=2, warmup=0, prompt_tokens=(64,), max_tokens=8,
                         preflight_s=0, use_cache=False, remeasure_budget=0)
    runner = BenchRunner(paced_connection(engine), config, str(tmp_path / "x-a.jsonl"))
    seen: list = []

    async def run() -> None:
        with runner.measuring():
            sampler = runner._probe_sampler
            await runner.start("salt")
            calibration = await runner.calibrate()
            seen.append(sampler.running)
            await runner.finish(calibration)
            # still inside the set's block (the next engine would finish now): the log
            # closed by finish, the sampler with it
            seen.append(sampler.running)

    asyncio.run(run())
    assert seen == [True, False]
