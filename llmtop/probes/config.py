"""Verdict thresholds from the user's TOML config file.

Where: `$LLMTOP_CONFIG` when set, else `platformdirs.user_config_dir("llmtop")/config.toml`
(Linux: ~/.config/llmtop/config.toml; macOS: ~/Library/Application Support/llmtop/config.toml).

What: one table, ``[thresholds]``, whose keys are the field names of
`llmtop.probes.verdict.Thresholds`; every key is optional and a missing one keeps its default.
The defaults, and the source each comes from, are documented on `Thresholds` itself
(verdict.py), not repeated here::

    [thresholds]
    background_cpu_warn = 15     # % of the whole machine (default 25)
    app_cpu_warn = 5.0           # % of one core (default 10)

A second optional table, ``[engine]``, names the measured engine's processes when llmtop
cannot find them itself (the `--engine-pid` override; see `probes/engine_identity.py`)::

    [engine]
    pids = [900]                 # positive integers; their children count as the engine too

Rules (a config error is never silently ignored):
* the default file missing → defaults; a file named explicitly (argument or `$LLMTOP_CONFIG`)
  but missing → `ConfigError` (a typo in the path must not silently measure with defaults);
* invalid TOML, an unknown table or key, a value that is not a number (bool is not a number),
  a negative or non-finite number, `freq_ratio_warn` outside 0–1, a warn level stricter than
  its fail level, a pid past the system's largest (`PID_LIMIT`) → `ConfigError` naming the
  file, the key and what was expected;
* the file is read without blocking and with bounds: a FIFO, a device (a link to /dev/zero)
  or a folder is refused by what it is, a file over MAX_CONFIG_BYTES by its size, nesting too
  deep for the parser by that; a UTF-8 byte-order mark at its start is skipped.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from pathlib import Path
from typing import Any

import platformdirs

from llmtop.files import FileTooLarge, NotRegularFile, read_bounded
from llmtop.probes.verdict import DEFAULT, Thresholds

ENV_VAR = "LLMTOP_CONFIG"
FILE_NAME = "config.toml"
SECTION = "thresholds"
ENGINE_SECTION = "engine"
KNOWN_SECTIONS = (SECTION, ENGINE_SECTION)
# The config holds a few thresholds and pids: 1 MiB is thousands of times that, and bounds
# what a wrong path (a log, a disk image) costs to read before it is refused.
MAX_CONFIG_BYTES = 1 << 20
# The largest pid a process can have. Linux: PID_MAX_LIMIT, 2^22 on 64-bit kernels
# (include/linux/threads.h; /proc/sys/kernel/pid_max can be raised to it, never past it).
# Elsewhere a pid is a C pid_t or DWORD, at most 2^31 - 1 as psutil takes it; a larger
# number overflows psutil's conversion (OverflowError) instead of naming no process.
PID_LIMIT = 1 << 22 if sys.platform.startswith("linux") else (1 << 31) - 1

# (warn, fail, "fail is above warn"): pairs that must be ordered for the levels to make sense.
_ORDERED = (
    ("background_cpu_warn", "background_cpu_fail", True),
    ("app_cpu_warn", "app_cpu_fail", True),
    ("mem_available_warn", "mem_available_fail", False),  # less memory available is worse
)


class ConfigError(Exception):
    """The config file cannot be used; the message names the file, the key and the reason."""


def default_config_path() -> Path:
    """`platformdirs.user_config_dir("llmtop")/config.toml` (the file need not exist)."""
    return Path(platformdirs.user_config_dir("llmtop")) / FILE_NAME


def config_path(path: str | os.PathLike[str] | None = None) -> tuple[Path, bool]:
    """The file to read and whether it was named explicitly (argument or `$LLMTOP_CONFIG`)."""
    if path is not None:
        return Path(path), True
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser(), True
    return default_config_path(), False


def load_thresholds(path: str | os.PathLike[str] | None = None) -> Thresholds:
    """Thresholds from `path` (default: see `config_path`), defaults for keys not given.

    Returns `verdict.DEFAULT` when the default file does not exist. Raises ConfigError
    (see the module docstring for every case).
    """
    found = read_document(path)
    return DEFAULT if found is None else thresholds_from_mapping(*found)


def load_engine_pids(path: str | os.PathLike[str] | None = None) -> tuple[int, ...]:
    """`[engine] pids` from `path` (default: see `config_path`); () when not set or when the
    default file does not exist. Raises ConfigError like `load_thresholds`."""
    found = read_document(path)
    return () if found is None else engine_pids_from_mapping(*found)


def read_document(path: str | os.PathLike[str] | None = None) -> tuple[dict[str, Any], str] | None:
    """The parsed TOML document and its file name; None when the default file does not exist.
    Raises ConfigError for an explicit file that is missing, unreadable, not UTF-8 or not TOML."""
    file, explicit = config_path(path)
    try:
        raw = read_bounded(file, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        if explicit:
            raise ConfigError(
                f"config file {file} does not exist"
                + (f" (named by ${ENV_VAR})" if path is None else "")
            ) from None
        return None
    except NotRegularFile as exc:
        raise ConfigError(f"config file {exc}: give the path of a TOML file") from exc
    except FileTooLarge as exc:
        raise ConfigError(f"config file {exc} ({MAX_CONFIG_BYTES // 2**20} MiB): a config of "
                          "thresholds is a few lines; is it the right file?") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file}: {exc.strerror or exc}") from exc
    return _parse(raw, file), str(file)


def _parse(raw: bytes, file: Path) -> dict[str, Any]:
    """The TOML document in `raw` (read from `file`); a UTF-8 byte-order mark at its start
    (what Windows Notepad writes) is skipped: it is invisible, and TOML has no other meaning
    for it. Raises ConfigError for text that is not UTF-8 or not TOML, and for nesting too
    deep for Python's parser (tomllib recurses per level: arrays 100,000 deep exhaust the
    interpreter's stack of about 1,000 frames). tomllib is imported here, when a file
    exists: most users have none, and every command and the TUI's first frame read this."""
    import tomllib

    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {file} is not UTF-8 text: {exc}") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {file} is not valid TOML: {exc}") from exc
    except ValueError as exc:  # an integer past Python's 4,300-digit conversion limit
        raise ConfigError(f"config file {file} holds a number too long to read ({exc}); "
                          "no threshold or pid has that many digits") from None
    except RecursionError:
        raise ConfigError(f"config file {file}: arrays or tables nested too deep to read "
                          "(over about 900 levels); a config of thresholds nests two") from None


def engine_pids_from_mapping(data: dict[str, Any], source: str = "<config>") -> tuple[int, ...]:
    """`[engine] pids` from parsed TOML (the whole document): a list of positive integers.
    Raises ConfigError naming `source` for an unknown key or a value of the wrong kind."""
    _check_tables(data, source)
    table = data.get(ENGINE_SECTION, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: '{ENGINE_SECTION}' must be a table, got {_kind(table)}")
    for key in table:
        if key != "pids":
            raise ConfigError(f"{source}: [{ENGINE_SECTION}] {key}: unknown key (known keys: pids)")
    pids = table.get("pids", [])
    ok = isinstance(pids, list) and all(
        isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in pids
    )
    if not ok:
        raise ConfigError(
            f"{source}: [{ENGINE_SECTION}] pids: expected a list of positive integers, "
            f"got {_shown(pids)}"
        )
    too_big = next((p for p in pids if p > PID_LIMIT), None)
    if too_big is not None:
        raise ConfigError(
            f"{source}: [{ENGINE_SECTION}] pids: {_shown(too_big)} is not a process id (the "
            f"largest this system allows is {PID_LIMIT}); give the engine's pids from `ps`"
        )
    return tuple(pids)


def _check_tables(data: dict[str, Any], source: str) -> None:
    unknown = [k for k in data if k not in KNOWN_SECTIONS]
    if unknown:
        raise ConfigError(
            f"{source}: unknown table or key {unknown[0]!r} "
            f"(known tables: {', '.join(f'[{s}]' for s in KNOWN_SECTIONS)})"
        )


def thresholds_from_mapping(data: dict[str, Any], source: str = "<config>") -> Thresholds:
    """Thresholds from parsed TOML (the whole document). Raises ConfigError naming `source`."""
    _check_tables(data, source)
    table = data.get(SECTION, {})
    if not isinstance(table, dict):
        raise ConfigError(
            f"{source}: '{SECTION}' must be a table ([{SECTION}]), got {_kind(table)}"
        )
    fields = {f.name: f for f in dataclasses.fields(Thresholds)}
    values: dict[str, float] = {}
    for key, value in table.items():
        where = f"{source}: [{SECTION}] {key}"
        if key not in fields:
            raise ConfigError(f"{where}: unknown key (known keys: {', '.join(fields)})")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number (float), got {_kind(value)} {value!r}")
        number = float(value)
        if not math.isfinite(number) or number < 0:
            raise ConfigError(f"{where}: expected a finite number >= 0 (float), got {value!r}")
        if key == "freq_ratio_warn" and number > 1:
            raise ConfigError(f"{where}: expected a ratio between 0 and 1 (float), got {value!r}")
        values[key] = number
    merged = dataclasses.replace(DEFAULT, **values)
    for warn, fail, fail_above in _ORDERED:
        w, f = getattr(merged, warn), getattr(merged, fail)
        if (w > f) if fail_above else (w < f):
            relation = "<=" if fail_above else ">="
            raise ConfigError(
                f"{source}: [{SECTION}] {warn} = {w:g} must be {relation} {fail} = {f:g}"
            )
    return merged


def _shown(value: Any, limit: int = 80) -> str:
    """`repr(value)` cut to `limit` characters (a list of 100,000 pids is not a message); an
    integer too long for Python to print (over 4,300 digits) is named by its size."""
    try:
        text = repr(value)
    except ValueError:
        return "an integer of thousands of digits"
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def _kind(value: Any) -> str:
    names = {str: "string", bool: "boolean", list: "array", dict: "table"}
    return names.get(type(value), type(value).__name__)
