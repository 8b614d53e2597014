"""llmtop: honest latency numbers for LLMs running on your own machine.

The distribution is published as `llmtop-latency` (the name `llmtop` on the package index
belongs to an unrelated project); the command and the import package are `llmtop`.
"""

from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "llmtop-latency"

try:
    __version__ = version(DISTRIBUTION)
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"

__all__ = ["DISTRIBUTION", "__version__"]
