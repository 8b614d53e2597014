"""How a session-log record is read and checked, whatever its type: the record bases
(`Record`, a closed record; `OpenRecord`, one whose body comes whole from elsewhere), the
validation of a record into its type (`parse`: pydantic in strict JSON mode, naming the first
bad field), and the bounds on the numbers a record may hold (`loads`, `check_numbers`,
`suspect`). The record types stand on this: schema.py (every type, `decode`, `RunLog`) and
request.py (the request record).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple, Self, TypeVar

from pydantic import TypeAdapter, ValidationError

from llmtop.safetext import may_hold_surrogate, without_surrogates

T = TypeVar("T")


class RecordError(ValueError):
    """A JSON record whose shape does not match its type.

    kind: the record type ("request", "probe", "header"). field: the first bad field as a
    dotted path ("metrics.ttft_ms"; "" for the record itself). The message says what the
    field should be and what it held.
    """

    def __init__(self, kind: str, field_path: str, problem: str) -> None:
        where = f"field {field_path}" if field_path else "the record"
        super().__init__(f"{kind} record: {where}: {problem}")
        self.kind = kind
        self.field = field_path


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}  # built on first use: a few ms per record type


def _refuse_non_finite(kind: str, text: str | bytes) -> None:
    """Raise RecordError for a bare NaN/Infinity/-Infinity in a record: Python's json writes
    and reads them, JSON does not have them, and no figure llmtop shows may be one (a NaN
    crashes Textual's Sparkline and poisons every median). Strings containing the words are
    fine: only a full parse, done when the words appear at all, can tell the two apart."""
    probe = text if isinstance(text, str) else text.decode("utf-8", "replace")
    if "NaN" not in probe and "Infinity" not in probe:
        return

    def refuse(constant: str) -> float:
        raise RecordError(kind, "", f"holds {constant}, which no measurement can be")

    with contextlib.suppress(json.JSONDecodeError):  # not JSON at all: validation says so
        json.loads(probe, parse_constant=refuse)


# Bounds on what a record read back may hold (`check_numbers`, `check_request`): past them
# a figure is no measurement, and the record is skipped as a NaN is, naming line and field.
MAX_MAGNITUDE = 2**64
"""The largest magnitude of any number in a record other than the header: every counter and
stamp llmtop writes fits a 64-bit integer (ns since the epoch until 2262 included), and with
every value under 2^64 (1.8e19) the squares and sums a statistic takes over a billion of
them stay under 1e48, far inside a float's 1.8e308: no median, mean or histogram of accepted
values overflows to infinity or turns NaN (1e308 did: the markdown report died on it)."""
MAX_DURATION_MS = 365.25 * 24 * 3600 * 1000
"""A year in ms (3.16e10): the longest duration a request record may hold. No request
llmtop times lasts a year (run's read timeout is minutes); a bigger figure is a corrupt or
hostile record, and would dominate every mean it entered."""
MAX_INT_DIGITS = 40  # digits an integer may have before it is read as a marker (see _loads)
# What `suspect` looks for, after a translation that keeps only the shape of numbers: every
# digit becomes "0", "e"/"E" becomes "e", "+" stays, everything else is a space. A number of
# 2^64 or more has 20 digits in a row or a two-digit exponent (1.8e+19); NaN and Infinity
# are found by name. One str.translate and a few substring searches run in C (~40 µs for a
# 6.5 KB request line, where one regular expression took ~600 µs).
_SHAPE = str.maketrans({**{chr(c): " " for c in range(128)}, **dict.fromkeys("0123456789", "0"),
                        "e": "e", "E": "e", "+": "+"})
_LONG_RUN = "0" * 20


def suspect(text: str) -> bool:
    """Whether a record's line may hold a number `check_numbers` refuses: the word NaN or
    Infinity, a run of 20 digits, or an exponent of two digits or more (with or without
    "+"). False says for sure it holds none; True is a "maybe" (a string in the record can
    look like one), settled by walking the decoded record."""
    if "NaN" in text or "Infinity" in text:
        return True
    shape = text.translate(_SHAPE)
    return _LONG_RUN in shape or "e+00" in shape or "0e00" in shape


class _Unreadable(NamedTuple):
    """A number `check_numbers` refuses, kept as what it was written as: a NaN/Infinity
    constant, or an integer of more than MAX_INT_DIGITS digits (Python refuses to convert
    one of over 4,300, so it is never converted)."""

    text: str


def _constant(text: str) -> _Unreadable:
    return _Unreadable(text)


def _bounded_int(text: str) -> int | _Unreadable:
    return int(text) if len(text) <= MAX_INT_DIGITS else _Unreadable(text)


def loads(text: str | bytes) -> Any:
    """`json.loads` for a record: NaN, Infinity and -Infinity read as markers that
    `check_numbers` names (JSON has no such constants), and an integer too long for Python
    to convert (over 4,300 digits: ValueError) read as a marker instead of failing the
    line. Raises json.JSONDecodeError and RecursionError as json.loads does."""
    try:
        return json.loads(text, parse_constant=_constant)
    except json.JSONDecodeError:
        raise
    except ValueError:  # the only other: an int past sys.get_int_max_str_digits()
        return json.loads(text, parse_constant=_constant, parse_int=_bounded_int)


def check_numbers(kind: str, obj: Any, text: str | bytes | None = None) -> None:
    """Raise RecordError naming the first field of `obj` (a decoded record, from `loads`)
    that holds a number no measurement can be: NaN or ±Infinity, a float that overflowed to
    infinity (1e400), or a magnitude of MAX_MAGNITUDE or more. `text`: the line it was
    decoded from; when given, a line that cannot hold such a number (no "NaN", "Infinity",
    20-digit run or two-digit exponent: `suspect`) is not walked, so a record costs a scan
    of its text in C, not a second pass over its values."""
    if text is not None:
        probe = text if isinstance(text, str) else text.decode("utf-8", "replace")
        if not suspect(probe):
            return
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):  # pushed last first: fields are named in file order
            stack.extend(reversed([(f"{path}.{k}" if path else str(k), v)
                                   for k, v in value.items()]))
        elif isinstance(value, list):
            stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(value)]))
        else:
            problem = _number_problem(value)
            if problem is not None:
                raise RecordError(kind, path, problem)


def _number_problem(value: Any) -> str | None:
    """Why `value` is no measurement (check_numbers' rules), or None."""
    if isinstance(value, _Unreadable):
        digits = value.text.lstrip("-")
        if digits.isdigit():
            return f"holds an integer of {len(digits)} digits, which no measurement can be"
        return f"holds {value.text}, which no measurement can be"
    if isinstance(value, float):
        if math.isnan(value):
            return "holds NaN, which no measurement can be"
        if math.isinf(value):
            return ("holds a number past a float's range (read as infinity), which no "
                    "measurement can be")
    elif not isinstance(value, int) or isinstance(value, bool):
        return None
    if abs(value) >= MAX_MAGNITUDE:
        return f"holds {value:.3g}, past {MAX_MAGNITUDE:.3g}, which no measurement can be"
    return None


def parse(cls: type[T], kind: str, data: str | bytes | Mapping[str, Any]) -> T:
    """Validate one JSON record (a line, or an object already decoded) into `cls`.

    Raises RecordError naming the first bad field. A decoded object is re-encoded so both
    paths validate JSON types (a JSON array is a valid tuple; a Python list would not be in
    strict mode). A lone surrogate in a string (a JSON `"\\ud800"` from an engine or a log)
    is read as U+FFFD, the replacement character (safetext.without_surrogates): the record
    stays valid Unicode, written and read back whole.
    """
    if isinstance(data, str | bytes) and may_hold_surrogate(data):
        with contextlib.suppress(json.JSONDecodeError, UnicodeDecodeError):
            data = json.loads(data)  # a lone surrogate becomes U+FFFD: valid Unicode
    text = (data if isinstance(data, str | bytes)
            else json.dumps(without_surrogates(data), default=str))
    _refuse_non_finite(kind, text)
    adapter = _ADAPTERS.get(cls) or _ADAPTERS.setdefault(cls, TypeAdapter(cls))
    try:
        record: T = adapter.validate_json(text, strict=True)
        return record
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(part) for part in first["loc"])
        got = first.get("input")
        shown = "" if isinstance(got, dict) else f", got {json.dumps(got, default=str)[:60]}"
        raise RecordError(kind, path, f"{first['msg']}{shown}") from None


def adapter(cls: type[T]) -> TypeAdapter[T]:
    """The pydantic adapter of a record type, built on its first use and kept."""
    adapter: TypeAdapter[T] = _ADAPTERS.get(cls) or _ADAPTERS.setdefault(cls, TypeAdapter(cls))
    return adapter


class Record:
    """A closed record type: `to_json` writes its declared fields under its `TYPE`."""

    __slots__ = ()
    TYPE: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this record (`type` first), as one log line holds it."""
        body: dict[str, Any] = adapter(type(self)).dump_python(self, mode="json")
        return {"type": self.TYPE, **body}

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> Self:
        """Validate one record (see `parse`); raises RecordError naming the first bad field."""
        return parse(cls, cls.TYPE, data)


class OpenRecord(Record):
    """A record whose body comes whole from elsewhere: `body` is written and read as is, and
    the declared fields are its typed view (module docstring)."""

    __slots__ = ()
    body: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The body under this record's `type`."""
        return {"type": self.TYPE, **self.body}

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> Self:
        """Validate the typed view (raises RecordError) and keep the whole body."""
        text = data if isinstance(data, str | bytes) else json.dumps(data, default=str)
        typed = parse(cls, cls.TYPE, text)
        decoded = json.loads(text)
        # the body is the record's own JSON, set once on the instance just built (frozen)
        object.__setattr__(typed, "body", {k: v for k, v in decoded.items() if k != "type"})
        return typed

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> Self:
        """A record of `body` (JSON-ready), validated as it will read back; raises
        RecordError."""
        return cls.from_json(dict(body))
