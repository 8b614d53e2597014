"""Addresses as Ollama reads them, and proxies (llmtop/engines/hosts.py).

Expected values follow Ollama's `envconfig.Host()` rules step by step (docs/protocols.md,
"Addresses"): trim spaces and quotes; the scheme sets the default port (none: 11434, http: 80,
https: 443); split host and port like Go's net.SplitHostPort, else the whole text is the
host; a port outside 1–65535 falls back to the default (for the variable; the flag refuses);
bind-all addresses are reached through loopback.
"""

from __future__ import annotations

import importlib.util

import pytest

from llmtop.engines.hosts import (
    DEFAULT_HOST,
    HostError,
    is_loopback,
    parse_address,
    proxy_for,
    resolve_address,
)


@pytest.mark.parametrize(
    ("value", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:11434"),
        ("  '127.0.0.1:11500'  ", "http://127.0.0.1:11500"),  # spaces and quotes trimmed
        ('"localhost"', "http://localhost:11434"),
        ("0.0.0.0", "http://127.0.0.1:11434"),  # bind-all → loopback
        ("0.0.0.0:8080", "http://127.0.0.1:8080"),
        ("::", "http://[::1]:11434"),
        ("[::]:11434", "http://[::1]:11434"),
        ("::1", "http://[::1]:11434"),  # bare IPv6: all host, default port
        ("[::1]", "http://[::1]:11434"),
        ("[::1]:9999", "http://[::1]:9999"),
        (":8080", "http://127.0.0.1:8080"),  # a bare :port
        ("example.com", "http://example.com:11434"),
        ("http://example.com", "http://example.com:80"),  # explicit http: port 80
        ("https://example.com", "https://example.com:443"),
        ("HTTPS://gpu-box:11434", "https://gpu-box:11434"),
        ("example.com/ollama/", "http://example.com:11434/ollama"),  # path kept
        ("http://", "http://127.0.0.1:80"),  # Ollama: empty host is 127.0.0.1
    ],
)
def test_ollama_host_forms(value: str, url: str) -> None:
    address = parse_address(value, "OLLAMA_HOST")
    assert (address.url, address.warning) == (url, None)


@pytest.mark.parametrize(("value", "url", "port"), [
    ("localhost:99999", "http://localhost:11434", "'99999'"),
    ("localhost:abc", "http://localhost:11434", "'abc'"),
    ("https://h:0", "https://h:443", "'0'"),  # no client reaches port 0
])
def test_a_bad_port_in_the_variable_falls_back_with_a_warning(value, url, port) -> None:
    address = parse_address(value, "OLLAMA_HOST")
    assert address.url == url
    assert address.warning is not None and f"port {port}" in address.warning
    assert "as Ollama does" in address.warning


@pytest.mark.parametrize(("value", "reason"), [
    ("ftp://x", "the scheme 'ftp' is not http or https"),
    ("local host", "'local host' is not a host name or an IP address"),
    ("[::1", "'[::1' is not a host name or an IP address"),
    ("://x", "the scheme '' is not http or https"),
])
def test_unusable_variable_values_name_the_variable(value: str, reason: str) -> None:
    with pytest.raises(HostError) as err:
        parse_address(value, "OLLAMA_HOST")
    assert str(err.value).startswith(f"OLLAMA_HOST={value!r} cannot be used: {reason}")


@pytest.mark.parametrize(("value", "reason"), [
    ("http://", "it names no host"),
    ("", "it is empty"),
    ("ftp://x", "the scheme 'ftp' is not http or https"),
    ("localhost:99999", "port '99999' is not a number from 1 to 65535"),
    ("http://[::1", "'[::1' is not a host name or an IP address"),
])
def test_the_flag_is_strict(value: str, reason: str) -> None:
    with pytest.raises(HostError) as err:
        parse_address(value, "--host")
    assert str(err.value).startswith(f"--host {value!r} cannot be used: {reason}")


def test_the_flag_wins_and_a_bad_variable_is_never_read() -> None:
    env = {"OLLAMA_HOST": "[::1"}
    assert resolve_address("localhost:1", env).url == "http://localhost:1"
    assert resolve_address(None, {}).url == DEFAULT_HOST
    assert resolve_address(None, {"OLLAMA_HOST": " ' ' "}).source == "default"
    with pytest.raises(HostError):
        resolve_address(None, env)


@pytest.mark.parametrize(("url", "loop"), [
    ("http://127.0.0.1:11434", True), ("http://127.8.0.1:1", True), ("http://[::1]:1", True),
    ("http://localhost:1", True), ("http://10.0.0.5:11434", False),
    ("http://gpu-box:11434", False),
])
def test_loopback(url: str, loop: bool) -> None:
    assert is_loopback(url) is loop


def test_loopback_is_never_proxied() -> None:
    env = {"HTTP_PROXY": "http://proxy:3128", "ALL_PROXY": "http://proxy:3128"}
    assert proxy_for("http://127.0.0.1:11434", env) is None
    assert proxy_for("http://localhost:11434", env) is None


@pytest.mark.parametrize(("env", "proxy"), [
    ({"HTTP_PROXY": "http://proxy:3128"}, "http://proxy:3128"),
    ({"http_proxy": "http://low:1", "HTTP_PROXY": "http://up:2"}, "http://low:1"),
    ({"ALL_PROXY": "proxy:3128"}, "http://proxy:3128"),
    ({"HTTPS_PROXY": "http://p:1"}, None),  # the engine is plain http
    ({"HTTP_PROXY": "http://p:1", "NO_PROXY": "gpu-box"}, None),
    ({"HTTP_PROXY": "http://p:1", "no_proxy": ".lan,gpu-box:11434"}, None),
    ({"HTTP_PROXY": "http://p:1", "NO_PROXY": "*"}, None),
    ({}, None),
])
def test_a_remote_host_follows_the_environment(env: dict[str, str], proxy: str | None) -> None:
    assert proxy_for("http://gpu-box:11434", env) == proxy


def test_unusable_proxies_are_errors_not_crashes() -> None:
    with pytest.raises(HostError) as err:
        proxy_for("http://gpu-box:11434", {"HTTP_PROXY": "ftp://p:1"})
    assert "HTTP_PROXY='ftp://p:1' cannot be used: the proxy scheme 'ftp'" in str(err.value)
    if importlib.util.find_spec("socksio") is None:
        with pytest.raises(HostError) as err:
            proxy_for("http://gpu-box:11434", {"ALL_PROXY": "socks5://p:1080"})
        assert "socksio" in str(err.value)
    # for a loopback engine the same variables are simply not used
    assert proxy_for("http://127.0.0.1:1", {"ALL_PROXY": "socks5://p:1080"}) is None
