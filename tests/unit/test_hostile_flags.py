"""Bad flag values are the user's: exit 2 with the flag and the value named, before anything
is sent (docs/hostile-input.md, "The CLI"). The host given is a scripted server that records
every request, so "nothing was sent" is checked, not assumed."""

from __future__ import annotations

import pytest

from llmtop.cli import build_parser, main
from llmtop.testing.scripted import ScriptedUpstream


@pytest.fixture(scope="module")
def upstream():
    with ScriptedUpstream() as server:
        yield server


RUN = ["run", "--engine", "ollama", "--model", "ok", "--prompt", "hi"]
BENCH = ["bench", "--engine", "ollama", "--model", "ok", "--preflight-duration", "0"]

BAD = [
    (RUN + ["--temperature", "nan"], "--temperature", "'nan' is not a finite number >= 0"),
    (RUN + ["--temperature", "inf"], "--temperature", "'inf' is not a finite number"),
    (RUN + ["--temperature", "1e999"], "--temperature", "'1e999' is not a finite number"),
    (RUN + ["--temperature", "-0.5"], "--temperature", "'-0.5' is not a finite number >= 0"),
    (RUN + ["--seed", str(2**63)], "--seed", "is not a whole number from -9223372036854775808"),
    (RUN + ["--seed", "4.2"], "--seed", "'4.2' is not a whole number"),
    (
        RUN + ["--num-ctx", "-4096"],
        "--num-ctx",
        "'-4096' is not a whole number from 16 to 2147483647",
    ),
    (RUN + ["--num-ctx", "0"], "--num-ctx", "from 16"),
    (RUN + ["--num-predict", "0"], "--num-predict", "from 1 to 2147483647 or -1"),
    (BENCH + ["--requests", "0"], "--requests", "'0' is not a whole number from 1 to 1000000"),
    (BENCH + ["--warmup", "-1"], "--warmup", "'-1' is not a whole number from 0"),
    (BENCH + ["--max-tokens", "1"], "--max-tokens", "from 2"),
    (BENCH + ["--drift-threshold", "0"], "--drift-threshold", "'0' is not a finite number > 0"),
    (BENCH + ["--drift-threshold", "nan"], "--drift-threshold", "not a finite number"),
    (BENCH + ["--preflight-duration", "-1"], "--preflight-duration", ">= 0 and <= 86400"),
    (["preflight", "--duration", "inf"], "--duration", "'inf' is not a finite number <= 86400"),
    (["preflight", "--duration", "nan"], "--duration", "'nan' is not a finite number <= 86400"),
    (["engine", "--num-ctx", "8"], "--num-ctx", "from 16"),
    (["engine", "--port", "70000"], "--port", "port '70000' is not a number from 1 to 65535"),
    (["relay", "--port", "-1"], "--port", "is not a number from 1 to 65535"),
]


@pytest.mark.parametrize("argv, flag, fragment", BAD)
def test_bad_flag_values_exit_2_before_anything_is_sent(upstream, capsys, argv, flag, fragment):
    upstream.recorder.reset()
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--host", upstream.url] if argv[0] in ("run", "bench") else argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: " in err and fragment in err, err
    assert upstream.recorder.requests == []


@pytest.mark.parametrize(
    "argv",
    [
        RUN
        + [
            "--temperature",
            "0",
            "--seed",
            str(2**63 - 1),
            "--num-ctx",
            "16",
            "--num-predict",
            "-1",
        ],
        BENCH
        + ["--requests", "1", "--warmup", "0", "--max-tokens", "2", "--drift-threshold", "0.5"],
    ],
)
def test_boundary_values_are_accepted(argv):
    args = build_parser().parse_args(argv)  # no SystemExit: each value is at its range's edge
    assert args.command == argv[0]
