"""`python -m llmtop.relay`: the same as `llmtop relay` (used by RelayProcess)."""

if __name__ == "__main__":
    import sys

    from llmtop.relay.process import main

    sys.exit(main())
