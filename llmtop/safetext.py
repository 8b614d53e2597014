"""Text from outside is data: one sanitiser for everything llmtop shows that it did not
write itself (a model's answer, a server's error text, a process name, a field of a session
log), and one encoding-safe writer for standard output and standard error.

A terminal obeys control sequences: ESC starts a CSI (`ESC [ 2 J` clears the screen) or an
OSC (`ESC ] 0 ; title BEL` sets the window title, `ESC ] 52` writes the clipboard, `ESC ] 8`
makes a link); C1 controls (U+0080-U+009F, e.g. U+009B, a one-character CSI) do the same on
some terminals; the bidirectional overrides (U+202A-U+202E, U+2066-U+2069) reorder what is
shown. `visible` writes every such character as its Python escape (`\\x1b`, `\\u202e`), so
the sequence is shown, not obeyed; a newline and a tab stay. Past the C0 range the escapes
are `\\uXXXX` (DEL is `\\u007f`), which JSON reads too: JSON written through `SafeStream`
stays JSON. Lone UTF-16 surrogates (U+D800-U+DFFF alone, from a JSON `"\\ud800"`), which no
encoding can write, are shown the same way. The raw text stays as it came in the session
log (JSON escapes every control character: `json_line`).

The rows this holds are in docs/hostile-input.md, "Text from outside".
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, TextIO

# C0 controls but tab and newline, DEL, C1 controls, the bidi embeddings/overrides/isolates
# and the marks, the line/paragraph separators, and any lone surrogate.
_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
    "\ud800-\udfff]"
)
_LINE_BREAKS = re.compile("[\n\t]")
DEFAULT_NAME_CHARS = 200  # a process, model or engine name shown on one line


def _escape(match: re.Match[str]) -> str:
    # C0 as Python writes it (ESC → \x1b); DEL, C1 and the rest as \u escapes, which are
    # also JSON's: a JSON text (its C0 already escaped by json.dumps) stays valid JSON after
    # `visible`, so `--json` output through SafeStream parses (\x9b would not)
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x20 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with every control character (module docstring) written as its escape
    (ESC → the four characters `\\x1b`); newlines and tabs kept, a CR LF pair read as a
    newline. Pure; `visible(visible(t)) == visible(t)` for text without a backslash."""
    if _printable(text):
        return text
    return _CONTROL.sub(_escape, text.replace("\r\n", "\n"))


def _printable(text: str) -> bool:
    """The fast path (C speed, ~40 times the regex's on 90 KB of text): every character
    `visible` changes is a control, a format character or a surrogate, which `isprintable`
    refuses; newlines and tabs aside, a printable text holds none."""
    return text.isprintable() or text.replace("\n", "").replace("\t", "").isprintable()


def one_line(text: Any, limit: int = DEFAULT_NAME_CHARS) -> str:
    """`visible(str(text))` on one line (newline and tab escaped too), cut to `limit`
    characters with "…": for a name (a process, a model, an engine) shown in a message, a
    table cell or a panel."""
    shown = _LINE_BREAKS.sub(_escape, visible(str(text)))
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def has_control(text: str) -> bool:
    """Whether `visible` would change `text` (a control character or a lone surrogate)."""
    return not _printable(text) and _CONTROL.search(text.replace("\r\n", "\n")) is not None


def json_line(obj: Any) -> str:
    """`obj` as one line of JSON that any UTF-8 writer can write: non-ASCII text as it is,
    but an object holding a lone surrogate (which UTF-8 cannot encode) written with
    `ensure_ascii`, so its raw text survives as the JSON escape `\\ud800`. Raises what
    `json.dumps` raises (TypeError, ValueError) for what is not JSON."""
    line = json.dumps(obj, ensure_ascii=False, default=str)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj, ensure_ascii=True, default=str)
    return line


_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
REPLACEMENT = "\ufffd"


def without_surrogates(obj: Any) -> Any:
    """`obj` (decoded JSON: dicts, lists, strings, numbers) with every lone surrogate in its
    strings and keys replaced by U+FFFD, the replacement character: a record must be valid
    Unicode to be validated, written as UTF-8 and read back. Pure."""
    if isinstance(obj, str):
        return _SURROGATE.sub(REPLACEMENT, obj) if _SURROGATE.search(obj) else obj
    if isinstance(obj, dict):
        return {without_surrogates(k): without_surrogates(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [without_surrogates(v) for v in obj]
    return obj


def may_hold_surrogate(json_text: str | bytes) -> bool:
    """Whether a JSON text may hold a lone surrogate (an escape \\uD800-\\uDFFF; a pair
    is two of them, so this says "maybe"): such a text is decoded and `without_surrogates`
    before it is validated."""
    text = json_text if isinstance(json_text, str) else json_text.decode("utf-8", "replace")
    # two C-speed tests first (a log line is kilobytes, read by the hundred thousand): no
    # backslash-u escape and only ASCII characters cannot hold either kind of surrogate
    if "\\u" not in text and text.isascii():
        return False
    return _SURROGATE_ESCAPE.search(text) is not None or _SURROGATE.search(text) is not None


class SafeStream:
    """A text stream that writes `visible(text)` to `raw` and never raises
    UnicodeEncodeError: a character the stream's encoding cannot write (cp1252 has no "≈")
    becomes "?". Everything else (`flush`, `fileno`, `isatty`, `buffer`, `encoding`) is the
    raw stream's."""

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw
        reconfigure = getattr(raw, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="replace")
            except (ValueError, OSError):  # a stream already written in another way
                pass

    def write(self, text: str) -> int:
        """Write `text` made visible; returns len(text) (what the caller gave)."""
        shown = visible(text)
        try:
            self.raw.write(shown)
        except UnicodeEncodeError:
            encoding = getattr(self.raw, "encoding", None) or "ascii"
            self.raw.write(shown.encode(encoding, "replace").decode(encoding, "replace"))
        return len(text)

    def writelines(self, lines: Any) -> None:
        """`write` each line."""
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def install() -> None:
    """Point sys.stdout and sys.stderr at SafeStreams over the streams they are now (once):
    every message, table and streamed answer llmtop prints then shows control characters
    instead of obeying them and never ends in UnicodeEncodeError. Textual draws on
    sys.__stderr__, which stays as it is."""
    if not isinstance(sys.stdout, SafeStream) and sys.stdout is not None:
        sys.stdout = SafeStream(sys.stdout)  # type: ignore[assignment]
    if not isinstance(sys.stderr, SafeStream) and sys.stderr is not None:
        sys.stderr = SafeStream(sys.stderr)  # type: ignore[assignment]
