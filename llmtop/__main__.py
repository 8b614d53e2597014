"""`python -m llmtop` is the same as the `llmtop` console script."""

from llmtop.cli import main

raise SystemExit(main())
