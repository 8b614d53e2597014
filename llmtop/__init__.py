"""llmtop: honest latency numbers for LLMs running on your own machine.

The distribution is published as `llmtop-latency` (the name `llmtop` on the package index
belongs to an unrelated project); the command and the import package are `llmtop`.
"""

DISTRIBUTION = "llmtop-latency"
# The one place the version is written: pyproject.toml reads it from here (setuptools'
# dynamic `attr`), so no start-up pays for importlib.metadata to find it.
__version__ = "0.1.0"

__all__ = ["DISTRIBUTION", "__version__"]
