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
  its fail level → `ConfigError` naming the file, the key and what was expected.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from pathlib import Path
from typing import Any

import platformdirs

from llmtop.probes.verdict import DEFAULT, Thresholds

ENV_VAR = "LLMTOP_CONFIG"
FILE_NAME = "config.toml"
SECTION = "thresholds"
ENGINE_SECTION = "engine"
KNOWN_SECTIONS = (SECTION, ENGINE_SECTION)

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
        raw = file.read_bytes()
    except FileNotFoundError:
        if explicit:
            raise ConfigError(
                f"config file {file} does not exist"
                + (f" (named by ${ENV_VAR})" if path is None else "")
            ) from None
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file}: {exc.strerror or exc}") from exc
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {file} is not UTF-8 text: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {file} is not valid TOML: {exc}") from exc
    return data, str(file)


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
            f"{source}: [{ENGINE_SECTION}] pids: expected a list of positive integers, got {pids!r}"
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


def _kind(value: Any) -> str:
    names = {str: "string", bool: "boolean", list: "array", dict: "table"}
    return names.get(type(value), type(value).__name__)
