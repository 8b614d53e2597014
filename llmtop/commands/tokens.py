"""The token rules of llmtop's servers that may listen beyond loopback (`llmtop agent`,
`llmtop watch`): which addresses count as loopback, and what a token file must hold. Light
on purpose: a command imports it before it decides to start anything."""

from __future__ import annotations

import ipaddress
from pathlib import Path

MIN_TOKEN_CHARS = 16  # a guessable token is no protection; `openssl rand -hex 16` gives 32


def is_loopback(host: str) -> bool:
    """True for "localhost" and loopback IP addresses (127.0.0.0/8, ::1); False for anything
    else, "0.0.0.0" and names included (a name may resolve off this machine)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token(path: str | None) -> str | None:
    """The token in `path` (surrounding whitespace removed); None without a path. Raises
    ValueError saying why a file cannot serve as one (unreadable, empty, short)."""
    if path is None:
        return None
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read --token-file {path}: {exc}") from None
    if len(token) < MIN_TOKEN_CHARS or not token.isascii() or not token.isprintable():
        raise ValueError(f"the token in {path} must be at least {MIN_TOKEN_CHARS} printable "
                         "ASCII characters (e.g. `openssl rand -hex 16 > FILE`)")
    return token


__all__ = ["MIN_TOKEN_CHARS", "is_loopback", "read_token"]
