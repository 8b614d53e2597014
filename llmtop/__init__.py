"""llmtop: honest latency numbers for LLMs running on your own machine."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("llmtop")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
