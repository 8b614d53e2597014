"""No two modules of llmtop import each other, not even for a type hint.

The import contracts (pyproject.toml) hold the layers; a circle inside one layer passes them
when its back edge sits under `if TYPE_CHECKING:`, the usual leftover of a file split by size
(the lower half still names the upper half's class in a hint). The reader then cannot read
either file first. The lower module states what it needs as a Protocol, or takes the plain
value, instead (load_verdict.SampledLevel, runners/load/search.LevelRunner,
servers/watch/connection.ConnectionOwner).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "llmtop"


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The llmtop modules `path` imports anywhere in it (at the top, in a function, under
    TYPE_CHECKING): `from a.b import c` counts as a.b.c when that is a module, else a.b."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("llmtop"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if not base.startswith("llmtop"):
                continue
            subs = {f"{base}.{a.name}" for a in node.names} & modules
            found.update(subs or {base})
    return {m for m in found if m in modules and m != name}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_circles_finds_a_circle_and_only_one() -> None:
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": set()}
    assert circles(graph) == [["a", "b"]]


def test_no_module_of_llmtop_is_in_an_import_circle() -> None:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    graph = {module_name(p): imports_of(p, modules) for p in paths}
    assert circles(graph) == [], "break each circle by passing the narrow thing needed"
