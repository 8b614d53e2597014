"""`python -m llmtop` is the same as the `llmtop` console script. Guarded, because a
"spawn" worker process (`llmtop watch`'s caller lookup) imports the parent's main module
again, as `__mp_main__`, and must not run llmtop a second time."""

from llmtop.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
