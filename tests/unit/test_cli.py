"""The command line does what it says: flags before the subcommand are kept, defaults come
from one place, and every subcommand is declared the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtop.cli import COMMANDS, build_parser, main, tui_settings
from llmtop.sessions.measure.config import BenchConfig
from llmtop.sessions.measure.options import DEFAULT_OPTIONS, GenerationOptions


def parse(*argv: str):
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "model", "temperature"),
    [
        # the regression: flags before the subcommand used to be overwritten by its defaults
        (("--model", "qwen", "--temperature", "0.7", "run", "--prompt", "hi"), "qwen", 0.7),
        (("run", "--model", "qwen", "--temperature", "0.7", "--prompt", "hi"), "qwen", 0.7),
        # given at both places, the subcommand's own copy wins (it is written last)
        (("--model", "a", "run", "--model", "b", "--prompt", "hi"), "b", 0.0),
        (("run", "--prompt", "hi"), None, 0.0),
    ],
)
def test_run_keeps_engine_flags_wherever_they_are_given(argv, model, temperature) -> None:
    args = parse(*argv)
    assert (args.command, args.model, args.temperature) == ("run", model, temperature)


def test_bench_keeps_a_model_given_before_it() -> None:
    args = parse("--model", "qwen", "--host", "http://10.0.0.5:11434", "bench")
    assert (args.model, args.host) == ("qwen", "http://10.0.0.5:11434")
    assert args.requests == 25 and args.max_tokens == 100  # the source's protocol


def test_preflight_keeps_host_and_model_given_before_it() -> None:
    args = parse("--host", "http://127.0.0.1:1", "--model", "m", "preflight")
    assert (args.host, args.model) == ("http://127.0.0.1:1", "m")


def test_relay_and_engine_bind_addresses_are_their_own() -> None:
    # `--host` of `relay`/`engine` is the bind address, with its own default
    assert parse("--host", "http://x:1", "relay").host == "127.0.0.1"
    assert parse("engine", "--port", "9").port == 9


def test_defaults_are_the_ones_defined_once() -> None:
    run = parse("run", "--prompt", "x")
    assert GenerationOptions.from_flags(run) == DEFAULT_OPTIONS
    # the values themselves, from the method: temperature 0, seed 42, num_ctx 8192
    assert DEFAULT_OPTIONS.to_ollama() == {"temperature": 0.0, "seed": 42, "num_ctx": 8192,
                                           "num_predict": 200}
    bench = parse("bench")
    config = BenchConfig()
    assert (bench.requests, bench.warmup, bench.prompt_tokens, bench.max_tokens,
            bench.num_ctx, bench.temperature, bench.seed) == (
        config.requests, config.warmup, config.prompt_tokens, config.max_tokens,
        config.num_ctx, config.temperature, config.seed)
    assert (config.requests, config.warmup, config.prompt_tokens, config.max_tokens) == (
        25, 1, (200,), 100)


def test_tui_settings_carry_the_top_level_flags() -> None:
    args = parse("--engine", "embedded", "--num-predict", "50", "--relay", "http://r:1",
                 "--engine-pid", "900", "--engine-pid", "901")
    args.thresholds, args.engine_pids = None, tuple(args.engine_pid)  # as main() loads them
    settings = tui_settings(args)
    assert settings.engine_pids == (900, 901)
    assert (settings.engine, settings.relay_url, settings.options["num_predict"]) == (
        "embedded", "http://r:1", 50)
    assert (settings.bench_requests, settings.bench_max_tokens) == (25, 100)


def test_every_subcommand_is_declared_in_one_table() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sorted(sub.choices) == sorted(COMMANDS) == [
        "agent", "bench", "compare", "engine", "engines", "load", "preflight", "relay", "report",
        "run", "sessions", "watch"]
    for command in COMMANDS.values():
        assert command.module.startswith("llmtop.commands.")


def test_num_thread_is_sent_only_when_given() -> None:
    # absent: the engine chooses, so the key is not in the request (defaults test above);
    # given on the top level or after the subcommand, it reaches the options as Ollama's name
    for argv in (("--num-thread", "1", "run", "--prompt", "x"),
                 ("run", "--prompt", "x", "--num-thread", "1")):
        options = GenerationOptions.from_flags(parse(*argv)).to_ollama()
        assert options == {"temperature": 0.0, "seed": 42, "num_ctx": 8192,
                           "num_predict": 200, "num_thread": 1}
    with pytest.raises(SystemExit):
        parse("run", "--prompt", "x", "--num-thread", "0")


def test_print_completion_names_every_shell_and_exits_quietly_on_a_closed_pipe():
    import subprocess
    import sys

    import shtab

    from llmtop.cli import build_parser

    shown = build_parser().format_help()
    assert all(shell in shown for shell in shtab.SUPPORTED_SHELLS)
    for shell in ("fish", "bash"):
        # the reader takes 10 bytes and leaves: the script's rest meets a closed pipe
        p = subprocess.run(
            ["bash", "-c", (f"{sys.executable} -m llmtop --print-completion {shell} "
                           "| head -c 10 >/dev/null; exit ${PIPESTATUS[0]}")],
            capture_output=True, text=True, timeout=60, check=False)
        assert (p.returncode, p.stderr) == (0, ""), p.stderr


def test_completion_shells_are_shtabs_and_the_script_has_every_commands_flags():
    import subprocess
    import sys

    import shtab

    from llmtop.cli import COMPLETION_SHELLS

    assert COMPLETION_SHELLS == tuple(shtab.SUPPORTED_SHELLS)
    script = subprocess.run([sys.executable, "-m", "llmtop", "--print-completion", "bash"],
                            capture_output=True, text=True, timeout=60, check=True).stdout
    # flags of commands that were not named on the command line are in the script too
    assert "--drift-threshold" in script and "--concurrency" in script and "--threshold" in script


# What a start-up that declares only the named command's flags must not import: each of
# these costs 50-600 ms on a 2-core machine (issue 31; bench/cli_start.py times them).
HEAVY = ("numpy", "scipy", "httpx", "pydantic", "psutil", "textual", "aiohttp", "plotly")


@pytest.mark.parametrize("argv", [["--version"], ["--help"],
                                  *([name, "--help"] for name in COMMANDS)])
def test_starting_imports_nothing_heavy(argv):
    import subprocess
    import sys

    code = ("import sys, runpy\n"
            f"sys.argv = ['llmtop', *{argv!r}]\n"
            "from llmtop.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, check=True)
    assert p.stdout.strip().splitlines()[-1] == "[]", p.stdout[-500:]


def test_a_command_gets_its_flags_when_named_after_top_level_flags(capsys):
    from llmtop.cli import main

    # `--model` before the command, the command's own flag after it: the flag is declared
    # (its range check speaks, not "unrecognized arguments")
    with pytest.raises(SystemExit) as exit_:
        main(["--model", "m", "bench", "--requests", "0"])  # 0 is below bench's range
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --requests" in err and "unrecognized" not in err


def test_a_short_max_tokens_is_said_to_be_too_short_for_decode(capsys):
    # new-user pass N44: --max-tokens 10 (9 gaps a rate) was called CONTAMINATED by a decode
    # "trend" with no word that the rates were too short to judge
    from llmtop.servers.child import free_port

    code = main(["bench", "--engine", "ollama", "--host", f"127.0.0.1:{free_port()}",
                 "--max-tokens", "10", "--preflight-duration", "0"])
    assert code == 3  # nothing there: the note came first
    assert ("llmtop bench: note: --max-tokens 10 gives each decode rate 9 gaps: the drift and "
            "trend rules on decode may call a steady engine CONTAMINATED; use --max-tokens 32 "
            "or more to judge decode") in capsys.readouterr().err


def test_the_progress_numbers_a_re_measure_among_the_extra_requests():
    # new-user pass N14: "request 10/10", then "request 13 (re-measuring)": which extra
    # request, out of how many, is said now
    from llmtop.sessions.measure.config import BenchConfig

    cfg = BenchConfig(requests=10, warmup=1)
    assert cfg.position("warmup", 0) == "warm-up 1/1"
    assert cfg.position("measure", 10) == "request 10/10"  # i 10: the warm-up is i 0
    # i 13 → request 13, the third past the 10 asked for; the budget defaults to --requests
    assert cfg.position("measure", 13) == "request 13 (re-measure 3 of at most 10)"
    assert BenchConfig(requests=10, warmup=1, remeasure_budget=4).position("measure", 12) == (
        "request 12 (re-measure 2 of at most 4)")


def test_each_command_declares_its_flags_beside_its_main():
    import importlib

    for name, command in COMMANDS.items():
        module = importlib.import_module(command.module)
        assert callable(module.add_arguments) and callable(module.main), name


@pytest.mark.parametrize(("argv", "line"), [
    (["sessions", "/no/such/llmtop/folder"],
     "llmtop sessions: no such file or folder: /no/such/llmtop/folder"),
    (["bench", "--measure-cache", "--preflight-duration", "0"],
     ("llmtop bench: --measure-cache applies to --dataset's requests (llmtop's own prompts "
      "are always cache-busted)")),
    (["load", "--speed", "2"], "llmtop load: --speed and --back-to-back apply to --replay"),
    (["--host", "http://a b", "run", "--prompt", "x"], None),
])
def test_a_usage_error_is_said_once_and_exits_2(argv, line, capsys):
    # a command raises exitcodes.UsageError; cli.main says it once, on stderr, and exits 2
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and captured.out == "", captured
    assert line is None and err[0].startswith("llmtop: ") or err[0] == line


def test_the_tui_starts_with_the_collector_off(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`llmtop` with no command turns the garbage collector off before the TUI's imports (its
    app turns it on at the first frame); a command leaves it as it is."""
    import gc
    import importlib

    from llmtop import cli

    seen: list[bool] = []

    class FakeTui:  # the TUI module's `main`, as the CLI calls it
        @staticmethod
        def main(_settings: object) -> int:
            seen.append(gc.isenabled())
            return 0

    real_import = importlib.import_module
    monkeypatch.setattr(cli.importlib, "import_module",
                        lambda name: FakeTui if name == cli.TUI_MODULE else real_import(name))
    config = tmp_path / "config.toml"
    config.write_text("", encoding="utf-8")  # the defaults, whatever the user's file says
    monkeypatch.setenv("LLMTOP_CONFIG", str(config))
    try:
        assert cli.main(["--host", "http://127.0.0.1:9"]) == 0
        assert seen == [False]
    finally:
        gc.enable()
    assert cli.main(["--version"]) == 0 and gc.isenabled()
