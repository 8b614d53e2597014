"""Where the engine is: `--host`, `OLLAMA_HOST`, and the proxy (if any) on the way there.

`OLLAMA_HOST` is read the way Ollama's own server reads it (`envconfig.Host()` in Ollama's
source, docs/protocols.md, "Addresses"): spaces and surrounding quotes trimmed; the scheme is
optional (http when absent; an explicit `http://` means port 80 by default, `https://` 443,
no scheme 11434); a path is kept; a bare IPv6 address (`::1`) and a bracketed one (`[::1]`)
both work; a bare `:PORT` means 127.0.0.1; a port that is not a number from 1 to 65535 falls
back to the default with a warning, as Ollama does. Bind-all addresses (`0.0.0.0`, `::`) are
where a server listens, not where a client connects: llmtop reaches them through loopback.
A value that cannot name a server at all (another scheme, a host with spaces) is an error
naming the variable and the value.

`--host` and `--relay` take the same forms, but the user typed them: a bad port or an empty
host is an error there, not a fallback.

Proxies: traffic to a loopback address never goes through `HTTP_PROXY`/`HTTPS_PROXY`/
`ALL_PROXY` (a proxy hop would land inside TTFT, and a proxy answering 502 would look like no
engine). For any other host the environment is followed, `NO_PROXY` included, and the proxy
used is reported so that the session log can say a proxy was in the path.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_HOST = "http://127.0.0.1:11434"
# The bearer token of an OpenAI-compatible server (`--api-key` sets it for every client).
API_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_PORT = {"": 11434, "http": 80, "https": 443}  # by the scheme written (none: Ollama's)
BIND_ALL = {"0.0.0.0": "127.0.0.1", "::": "::1"}
_HOSTNAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")


class HostError(ValueError):
    """An address that cannot name a server. `source` is where it came from ("--host",
    "--relay", "OLLAMA_HOST"), `value` the text as given, `reason` what is wrong."""

    def __init__(self, source: str, value: str, reason: str) -> None:
        self.source, self.value, self.reason = source, value, reason
        shown = f"{source}={value!r}" if source.isupper() else f"{source} {value!r}"
        super().__init__(f"{shown} cannot be used: {reason} "
                         "(e.g. http://127.0.0.1:11434, localhost:11434 or [::1]:11434)")


@dataclass(frozen=True, slots=True)
class Address:
    """A resolved server address: `url` ("http://127.0.0.1:11434", no trailing slash),
    `source` ("--host", "OLLAMA_HOST" or "default"), and `warning` (a fallback Ollama would
    also make, to be shown once) or None."""

    url: str
    source: str
    warning: str | None = None


MAX_NAME_CHARS = 253  # a DNS name (RFC 1035, 2.3.4: 255 octets on the wire)
MAX_LABEL_CHARS = 63  # one label of it


def parse_address(value: str, source: str = "--host") -> Address:
    """Parse `value` by Ollama's rules (module docstring). Strict for a flag (an empty host
    or a bad port raise), lenient like Ollama for an environment variable (a bad port falls
    back with a warning). Raises HostError."""
    lenient = source.isupper()
    text = value.strip().strip("\"'").strip()
    if not text:
        if lenient:
            return Address(DEFAULT_HOST, source)
        raise HostError(source, value, "it is empty")
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    scheme = scheme.lower()
    if scheme not in DEFAULT_PORT or (sep and not scheme):
        raise HostError(source, value, f"the scheme {scheme!r} is not http or https")
    hostport, _, path = rest.partition("/")
    host, port_text = _split_host_port(hostport)
    if host == "" and port_text is None and not lenient:
        raise HostError(source, value, "it names no host")  # Ollama would take 127.0.0.1
    host = BIND_ALL.get(host, host) or "127.0.0.1"
    if not _valid_host(host):
        raise HostError(source, value, f"{host!r} is not a host name or an IP address")
    longest = max((len(label) for label in host.split(".")), default=0)
    if ":" not in host and len(host) > MAX_NAME_CHARS:
        raise HostError(source, value, f"the host name is {len(host)} characters: a DNS name "
                        f"is at most {MAX_NAME_CHARS} (RFC 1035)")
    if ":" not in host and longest > MAX_LABEL_CHARS:
        raise HostError(source, value, f"a part of the host name between dots is {longest} "
                        f"characters: at most {MAX_LABEL_CHARS} (RFC 1035)")
    default = DEFAULT_PORT[scheme]
    port, warning = default, None
    if port_text is not None:
        if port_text.isdigit() and 1 <= int(port_text) <= 65535:
            port = int(port_text)
        elif lenient:
            warning = (f"{source}={value!r}: port {port_text!r} is not a number from 1 to "
                       f"65535; using {default}, as Ollama does")
        else:
            raise HostError(source, value, f"port {port_text!r} is not a number from 1 to 65535")
    shown = f"[{host}]" if ":" in host else host
    path = "/" + path.strip("/") if path.strip("/") else ""
    return Address(f"{scheme or 'http'}://{shown}:{port}{path}", source, warning)


def resolve_address(host: str | None = None, env: Mapping[str, str] | None = None) -> Address:
    """`host` (the flag) when given, else `OLLAMA_HOST` from `env` (default: os.environ),
    else the default. A malformed `OLLAMA_HOST` is never read when `host` is given."""
    if host is not None:
        return parse_address(host, "--host")
    raw = (os.environ if env is None else env).get("OLLAMA_HOST")
    if raw is None or not raw.strip().strip("\"'").strip():
        return Address(DEFAULT_HOST, "default")
    return parse_address(raw, "OLLAMA_HOST")


def resolve_host(host: str | None = None) -> str:
    """The base URL to talk to (`resolve_address(host).url`). Raises HostError."""
    return resolve_address(host).url


def _split_host_port(hostport: str) -> tuple[str, str | None]:
    """Go's net.SplitHostPort with Ollama's fallback: "h:p", "[v6]:p", ":p" split; anything
    else (a bare host, a bare or bracketed IPv6 address) is all host and no port."""
    if hostport.startswith("["):
        inner, bracket, after = hostport[1:].partition("]")
        if not bracket:
            return hostport, None  # "[::1" - rejected by the host check
        return inner, (after[1:] if after.startswith(":") else None)
    if hostport.count(":") == 1:
        host, _, port = hostport.partition(":")
        return host, port
    return hostport, None


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return bool(_HOSTNAME.match(host))
    return True


def is_loopback(url: str) -> bool:
    """True when `url`'s host is this machine: `localhost` or a loopback IP (127.0.0.0/8,
    ::1); False for a URL whose host cannot be read (`http://[127.0.0.1:80:81]`: a Host
    header with two ports, which a server must refuse, never answer with a 500)."""
    try:
        hostname = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return False
    if hostname == "localhost" or hostname.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


def proxy_for(url: str, env: Mapping[str, str] | None = None) -> str | None:
    """The proxy requests to `url` go through: None for a loopback host (never proxied) or
    when none applies (no variable, or `NO_PROXY` covers the host); else the URL of the
    environment's proxy for the scheme (`HTTPS_PROXY`/`HTTP_PROXY`, then `ALL_PROXY`, either
    case). Raises HostError for a proxy that cannot be used (an unknown scheme, or SOCKS
    without the `socksio` package)."""
    if is_loopback(url):
        return None
    environ = dict(os.environ if env is None else env)
    proxies = _env_proxies(environ)
    parts = urlsplit(url)
    if _bypassed(parts.hostname or "", parts.port, proxies.get("no", "")):
        return None
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy:
        return None
    scheme = urlsplit(proxy if "://" in proxy else f"http://{proxy}").scheme.lower()
    name = next((k for k in environ if environ[k] == proxy and k.lower().endswith("_proxy")),
                "the proxy variable")
    if scheme.startswith("socks") and scheme not in ("socks5", "socks5h"):
        raise HostError(name, proxy, f"httpx speaks SOCKS5 only, not {scheme!r}: use a "
                        "socks5:// or socks5h:// proxy, or set NO_PROXY for the engine's host")
    if scheme.startswith("socks"):
        if importlib.util.find_spec("socksio") is None:
            raise HostError(name, proxy, "a SOCKS proxy needs the socksio package "
                            "(pip install 'httpx[socks]'), or set NO_PROXY for the engine's host")
    elif scheme not in ("http", "https"):
        raise HostError(name, proxy, f"the proxy scheme {scheme!r} is not http, https or socks5")
    return proxy if "://" in proxy else f"http://{proxy}"


def _env_proxies(environ: Mapping[str, str]) -> dict[str, str]:
    """{"http": …, "https": …, "all": …, "no": …} from the environment, lower-case names
    winning (as curl and urllib read them)."""
    found: dict[str, str] = {}
    for key in ("http", "https", "all", "no"):
        value = environ.get(f"{key}_proxy") or environ.get(f"{key.upper()}_PROXY")
        if value:
            found[key] = value.strip()
    return found


def _bypassed(hostname: str, port: int | None, no_proxy: str) -> bool:
    """Whether `NO_PROXY` covers the host (urllib's matching: "*", suffixes, host:port)."""
    if not no_proxy:
        return False
    if no_proxy.strip() == "*":
        return True
    target = f"{hostname}:{port}" if port else hostname
    import urllib.request  # http.client and email with it: ~40 ms, only with a NO_PROXY set

    # urllib's own NO_PROXY matcher (public in the module, absent from its type stubs)
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    return bool(bypass(target, {"no": no_proxy}))
