"""The subcommands, one module each (`cli.COMMANDS` names them), and the helpers they share.

A command's module holds its flags, `add_arguments(parser)`, beside its run, `main(args) ->
int`. `llmtop <command> --help` imports that module to declare the flags, so a command module
imports at its top only what declaring them needs (argparse, commands/flags.py, the light
defaults of `sessions.measure`); what running it needs (httpx, pydantic, numpy and scipy
through the engines and the sessions) is imported inside the functions that run it. That
keeps every `--help` to tens of ms (tests/unit/test_cli.py,
`test_starting_imports_nothing_heavy`; bench/cli_start.py).

A command refuses a command line or an input by raising `exitcodes.UsageError` with what was
wrong and what to do; `cli.main` prints it once and exits 2.
"""
