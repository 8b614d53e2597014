"""`--dataset FILE` for bench and load: the file's records read (JSONL and ShareGPT), bad ones
named by line and field and skipped, and a bench and a sweep against the slotted server whose
request records carry the file's prompts and the server's own prompt counts."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from llmtop.cli import main
from llmtop.exitcodes import ExitCode
from llmtop.sessions.analysis.catalog import entry
from llmtop.sessions.measure.dataset import DatasetError, read_dataset
from llmtop.sessions.records.log import read_log
from llmtop.testing.slotted import TEMPLATE_TOKENS, Service, SlottedUpstream


def jsonl_20(path) -> list[dict]:
    """20 requests: even lines a prompt of i + 4 words, odd lines a system and a user
    message with max_tokens 3."""
    rows: list[dict] = []
    for i in range(20):
        if i % 2 == 0:
            rows.append({"prompt": "question about " + "word " * (i + 2)})
        else:
            rows.append({"messages": [{"role": "system", "content": "be brief"},
                                      {"role": "user", "content": f"tell me {i} things"}],
                         "max_tokens": 3})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def sharegpt_10(path, bad: bool = False) -> list[dict]:
    """10 conversations as one JSON array (ShareGPT_V3's shape); with `bad`, element 4's
    second turn is from "robot"."""
    convs = [{"id": f"c{i}", "conversations": [
        {"from": "human", "value": f"conversation {i} " + "x " * i},
        {"from": "gpt" if not (bad and i == 3) else "robot", "value": "an answer"},
        {"from": "human", "value": "a later turn, not sent"}]} for i in range(10)]
    path.write_text(json.dumps(convs))
    return convs


def words(messages) -> int:
    """The slotted server's prompt count: words of every message + TEMPLATE_TOKENS."""
    return sum(len(m["content"].split()) for m in messages) + TEMPLATE_TOKENS


def test_bad_lines_are_named_and_skipped_and_the_rest_kept(tmp_path):
    path = tmp_path / "mixed.jsonl"
    lines = [json.dumps({"prompt": "one"}), "{not json", json.dumps({"prompt": "three"}),
             json.dumps({"messages": [{"role": "robot", "content": "x"}]}),
             "", json.dumps({"prompt": "six", "max_tokens": -1}),
             json.dumps({"prompt": "seven", "options": {"temperature": "warm", "top_k": [1]}}),
             json.dumps({"messages": [{"role": "user", "content": "eight"},
                                      {"role": "assistant", "content": "a reply"}]}),
             json.dumps({"conversations": [{"from": "gpt", "value": "no human"}]}),
             json.dumps({"prompt": "ten", "options": {"num_ctx": 4096}})]
    path.write_text("\n".join(lines) + "\n")
    ds = read_dataset(path)
    assert [r.line for r in ds.records] == [1, 3, 10]  # line 5 is blank: not a record
    assert ds.records[2].options == {"num_ctx": 4096}
    assert ds.skipped == 6
    assert ds.errors[0].startswith("line 2: not JSON")
    assert ds.errors[1].startswith("line 4, field messages[0].role: 'robot' is not system")
    assert ds.errors[2].startswith("line 6, field max_tokens: must be a whole number")
    assert ds.errors[3].startswith("line 7, field options.top_k:")
    assert ds.errors[4].startswith("line 8, field messages[1]: the last message must be")
    assert ds.errors[5] == "line 9, field conversations: has no human turn"


def test_sharegpt_array_sends_system_and_first_human_turn(tmp_path):
    path = tmp_path / "sg.json"
    sharegpt_10(path, bad=True)
    ds = read_dataset(path)
    assert ds.shape == "sharegpt-array"
    assert [r.line for r in ds.records] == [1, 2, 3, 5, 6, 7, 8, 9, 10]
    named = "element 4, field conversations[1].from: 'robot' is not human, gpt or system"
    assert ds.errors == (named,)
    assert ds.records[0].messages == ({"role": "user", "content": "conversation 0 "},)
    data = path.read_bytes()
    assert ds.identity()["sha256"] == hashlib.sha256(data).hexdigest()
    assert ds.identity()["bytes"] == len(data)


def test_a_fifo_or_an_empty_file_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(DatasetError, match="FIFO"):
        read_dataset(fifo)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(DatasetError, match="holds no usable request"):
        read_dataset(empty)
    with pytest.raises(DatasetError, match="no such file"):
        read_dataset(tmp_path / "absent.jsonl")


def test_busting_tags_the_first_message():
    from llmtop.sessions.measure.dataset import parse_record

    rec = parse_record(1, json.dumps({"messages": [{"role": "system", "content": "s"},
                                                   {"role": "user", "content": "u"}]}))
    assert rec.busted("ab-3") == ({"role": "system", "content": "[ab-3] s"},
                                  {"role": "user", "content": "u"})


@pytest.fixture(scope="module")
def slotted():
    with SlottedUpstream(Service(slots=2, prefill_s=0.002, tokens=5, gap_s=0.003)) as up:
        yield up


def test_bench_from_a_20_line_jsonl(slotted, tmp_path, capsys):
    data = tmp_path / "chat.jsonl"
    rows = jsonl_20(data)
    log = tmp_path / "bench.jsonl"
    rc = main(["bench", "--engine", "ollama", "--host", slotted.url, "--model", "slotted",
               "--dataset", str(data), "--requests", "20", "--warmup", "1", "--max-tokens",
               "5", "--preflight-duration", "0", "--log", str(log)])
    out = capsys.readouterr()
    assert rc in (ExitCode.OK, ExitCode.NOISY)  # NOISY: this shared machine's probes decide
    run = read_log(log)
    dataset = run.header.bench.dataset
    assert dataset["file"] == "chat.jsonl" and dataset["records"] == 20
    assert dataset["skipped"] == 0
    assert dataset["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert dataset["bytes"] == data.stat().st_size
    measured = [r for r in run.requests if r.phase == "measure"]
    assert [r.plan.dataset_line for r in measured] == list(range(1, 21))
    salt = run.environment("start").body["prompt_salt"]
    for rec, row in zip(measured, rows, strict=True):
        messages = row.get("messages") or [{"role": "user", "content": row["prompt"]}]
        tag = f"[{salt}-{rec.id}] "  # on the first message: one word more for the server
        if len(messages) == 1:
            assert rec.prompt == tag + messages[0]["content"]
        else:
            assert rec.prompt == messages[-1]["content"]
        assert rec.stats.prompt_eval_count == words(messages) + 1
        assert rec.options["num_predict"] == row.get("max_tokens", 5)
    assert "Requests from the dataset chat.jsonl (" in out.out
    assert "20 records, 20 used, 0 skipped as bad" in out.out
    assert entry(log).cells()[3] == "bench · dataset chat.jsonl"  # the session list's kind


def test_load_from_a_sharegpt_file_names_its_bad_element(slotted, tmp_path, capsys):
    data = tmp_path / "sharegpt.json"
    convs = sharegpt_10(data, bad=True)
    log = tmp_path / "load.jsonl"
    rc = main(["load", "--engine", "ollama", "--host", slotted.url, "--model", "slotted",
               "--dataset", str(data), "--concurrency", "2", "--requests", "9",
               "--max-tokens", "5", "--log", str(log)])
    out = capsys.readouterr()
    assert rc in (ExitCode.OK, ExitCode.NOISY)
    assert ("--dataset sharegpt.json: skipped element 4, field conversations[1].from: "
            "'robot' is not human, gpt or system") in out.err
    run = read_log(log)
    assert run.header.load.dataset["records"] == 9
    assert run.header.load.dataset["skipped"] == 1
    measured = [r for r in run.requests if r.phase == "measure"]
    assert sorted(r.plan.dataset_line for r in measured) == [1, 2, 3, 5, 6, 7, 8, 9, 10]
    salt = run.environment("start").body["prompt_salt"]
    for rec in measured:
        first = convs[rec.plan.dataset_line - 1]["conversations"][0]["value"]
        assert rec.prompt.startswith(f"[{salt}-") and rec.prompt.endswith("] " + first)
        assert rec.stats.prompt_eval_count == len(first.split()) + 1 + TEMPLATE_TOKENS
    assert "from the dataset sharegpt.json (" in out.out
    assert "9 records, 9 used, 1 skipped as bad" in out.out
    assert entry(log).traffic == "dataset sharegpt.json"


def test_measure_cache_without_a_dataset_is_a_usage_error(capsys):
    assert main(["load", "--measure-cache", "--engine", "ollama"]) == ExitCode.USAGE
    assert "--measure-cache applies to --dataset" in capsys.readouterr().err
