"""Every module a line of llmtop/ names exists, so a reader who follows the name finds it.

A file that is split, renamed or moved into a folder leaves its old name behind in the prose
around it ("server_watch.py", "runners/watch.py", "analysis.METRICS"), and the reader then
looks for a file that is not there. Four forms of a name are checked:

* a path to a file, "sessions/measure/request.py" or "bench/tui_cost.py" (every line of a
  module, a stylesheet or the relay's page: a message shown to a user counts as much as a
  docstring);
* a file's name alone, "records.py" (every line, likewise): a file of that name under
  llmtop/, bench/, tests/ or docs/;
* a module's path without ".py", maybe with a name in it: "servers/watch/proxy.WatchProxy",
  "runners/load/server_metrics.summarize" (docstrings and comments);
* a dotted module, maybe with a name in it: "sessions.environment", "records.schema.Header",
  "load.OPEN_LOOP_WARMUP" (docstrings and comments).

A path is read from the repository's root, from llmtop/ or from any package under it (the
tree names a module by as much of its path as tells it apart: "analysis/run.py",
"compare/runs.py"); a name after a module must be one the module defines or imports at its
top level (a package's: a module in it or a name its __init__.py defines). The last two
forms are taken only where their first part is a package of llmtop's ("sessions",
"analysis", "load"...): "tokens/s" or "psutil.Process" are not ours.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "llmtop"
PACKAGE_DIRS = sorted(p.parent for p in PACKAGE.rglob("__init__.py"))
BASES = [ROOT, *PACKAGE_DIRS]
PACKAGE_NAMES = frozenset(p.name for p in PACKAGE_DIRS)
# every file a bare name may mean (a module, a stylesheet, a word list, a docs page)
FILE_NAMES = frozenset(p.name for top in ("llmtop", "bench", "tests", "docs")
                       for p in (ROOT / top).rglob("*") if p.is_file())

# A path to a file: a token with at least one "/" that ends in ".py", not part of a longer
# path or a URL ("sessions/measure/request.py", "bench/tui_cost.py").
SLASHED = re.compile(r"(?<![\w./:-])((?:[\w.-]+/)+[\w-]+\.py)\b")
# A file's name alone ("records.py"). Not after "python " or "python3 ": that is a user's
# command line in an example ("python3 train.py"), not one of ours.
BARE = re.compile(r"(?<![\w./:-])(?<!python )(?<!python3 )([A-Za-z_]\w*\.py)\b")
# A module's path without ".py", and the name after it: "servers/watch/proxy.WatchProxy".
# Not part of a longer path, a URL, a "$VAR/x" or a "<pid>/stat" placeholder.
MODULE_PATH = re.compile(
    r"(?<![\w./:~$<>-])((?:[a-z_]\w*/)+[a-z_]\w*)(?:\.([A-Za-z_]\w*))?(?![\w/<>-])")
# A dotted module and names: "sessions.environment", "records.schema.Header". Not a call
# ("load.run(") and not part of a longer dotted or slashed name.
DOTTED = re.compile(r"(?<![\w./:~$-])([a-z_]\w*(?:\.[A-Za-z_]\w*)+)(?![\w(-])")


def source_lines() -> Iterator[tuple[Path, int, str]]:
    """(file, line number from 1, line) of every file of llmtop/ a reader opens: its modules,
    its stylesheets (*.tcss) and its page (*.html)."""
    for path in sorted(p for p in PACKAGE.rglob("*") if p.suffix in (".py", ".tcss", ".html")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            yield path, number, line


def prose_lines() -> Iterator[tuple[Path, int, str]]:
    """(file, line number, text) of every comment and every line of a module's, class's or
    function's docstring in llmtop/**/*.py."""
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                yield path, token.start[0], token.string
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                     ast.AsyncFunctionDef)) or not node.body:
                continue
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                for number in range(first.lineno, (first.end_lineno or first.lineno) + 1):
                    yield path, number, lines[number - 1]


def resolves_file(token: str) -> bool:
    """Whether a path to a file ("analysis/run.py", "bench/tui_cost.py") names one, read from
    the repository's root, llmtop/ or any package under it."""
    return any((base / token).is_file() for base in BASES)


@functools.cache
def top_level_names(path: Path) -> frozenset[str]:
    """What a module defines or imports at its top level: functions, classes, assigned
    names and imported names."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def _defines(place: Path, name: str) -> bool:
    """Whether `name` is in `place`: a module or package in a package, a top-level name of a
    module or of a package's __init__.py."""
    if place.is_dir():
        init = place / "__init__.py"
        return ((place / f"{name}.py").is_file() or (place / name).is_dir()
                or (init.is_file() and name in top_level_names(init)))
    return name in top_level_names(place)


def _resolves_from(base: Path, parts: list[str]) -> bool:
    """Whether parts (modules, then maybe a name) name something from `base`: the longest
    run of folders then at most one file, and the first name after it defined there."""
    here, rest = base, list(parts)
    while rest and (here / rest[0]).is_dir():
        here = here / rest.pop(0)
    if rest and (here / f"{rest[0]}.py").is_file():
        here = here / f"{rest.pop(0)}.py"
    if here == base:
        return False
    return not rest or _defines(here, rest[0])


def resolves_module(parts: list[str]) -> bool:
    """Whether a module's path and names ("servers", "watch", "proxy", "WatchProxy") name
    something, read from the repository's root, llmtop/ or any package under it; a file
    with another extension counts ("llmtop.tcss", "measure/words.txt")."""
    if len(parts) >= 2 and f"{parts[-2]}.{parts[-1]}" in FILE_NAMES:
        return True
    return any(_resolves_from(base, parts) for base in BASES)


def stale_module_names(line: str) -> list[str]:
    """The module paths and dotted modules in a line of prose that name nothing (the last
    two forms of the module docstring)."""
    stale = []
    for m in MODULE_PATH.finditer(line):
        parts = m.group(1).split("/") + ([m.group(2)] if m.group(2) else [])
        if parts[0] in PACKAGE_NAMES and parts[-1] != "py" and not resolves_module(parts):
            stale.append(m.group(0))
    for m in DOTTED.finditer(line):
        parts = m.group(1).split(".")
        if parts[0] in PACKAGE_NAMES and "py" not in parts and not resolves_module(parts):
            stale.append(m.group(0))
    return stale


def test_the_patterns_take_module_names_only() -> None:
    line = ('see sessions/measure/request.py and `bench/tui_cost.py --py-spy`; '
            'https://example.org/a/b.py and a/b.pyc are not ours; records.py is bare')
    assert SLASHED.findall(line) == ["sessions/measure/request.py", "bench/tui_cost.py"]
    assert BARE.findall(line + '; "python3 train.py"') == ["records.py"]
    prose = ("tokens/s and read/write, psutil.Process, e.g. a guess, /sys/class/powercap, "
             "$HOME/x, /proc/<pid>/stat, docs/method.md, load.run(x), sessions.measure.")
    assert stale_module_names(prose) == []


def test_a_module_name_resolves_from_llmtop_and_its_packages() -> None:
    assert resolves_file("sessions/measure/request.py")  # from llmtop/
    assert resolves_file("analysis/run.py")  # from llmtop/sessions/
    assert resolves_file("compare/runs.py")  # from llmtop/sessions/analysis/
    assert resolves_file("bench/tui_cost.py")  # from the repository's root
    assert not resolves_file("reports/html_report.py")
    assert stale_module_names("servers/watch/proxy.WatchProxy, records.schema.Header, "
                              "llmtop.sessions.analysis, load/runner.OPEN_LOOP_WARMUP, "
                              "analysis/run.size_key, measure/words.txt, llmtop.tcss") == []
    assert stale_module_names("servers/watch/proxy.WatchGate, sessions.environment, "
                              "runners/server_watch.summarize, load.OPEN_LOOP_WARMUP") == [
        "servers/watch/proxy.WatchGate", "runners/server_watch.summarize",
        "sessions.environment", "load.OPEN_LOOP_WARMUP"]


def test_every_file_path_named_in_llmtop_exists() -> None:
    missing = [f"{path.relative_to(ROOT)}:{n}: {token}" for path, n, line in source_lines()
               for token in SLASHED.findall(line) if not resolves_file(token)]
    assert missing == [], "these name no file:\n" + "\n".join(missing)


def test_every_file_name_in_llmtop_exists() -> None:
    missing = [f"{path.relative_to(ROOT)}:{n}: {token}" for path, n, line in source_lines()
               for token in BARE.findall(line) if token not in FILE_NAMES]
    assert missing == [], "no file has these names:\n" + "\n".join(missing)


def test_every_module_named_in_llmtop_prose_exists() -> None:
    missing = [f"{path.relative_to(ROOT)}:{n}: {token}" for path, n, line in prose_lines()
               for token in stale_module_names(line)]
    assert missing == [], "these name no module or no name in it:\n" + "\n".join(missing)


def test_each_sessions_package_names_its_modules() -> None:
    """A package's docstring is the map of its folder (llmtop/sessions/ and its wings): every
    module and subpackage in it is named there, so a new file is placed on the map."""
    unnamed = []
    for init in sorted((PACKAGE / "sessions").rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        members = [p.stem for p in init.parent.glob("*.py") if p.name != "__init__.py"]
        members += [p.name for p in init.parent.iterdir() if (p / "__init__.py").is_file()]
        unnamed += [f"{init.parent.relative_to(ROOT)}: {name}" for name in sorted(members)
                    if not re.search(rf"(?<![\w/.]){name}\b", doc)]
    assert unnamed == [], "name these in their package's docstring:\n" + "\n".join(unnamed)
