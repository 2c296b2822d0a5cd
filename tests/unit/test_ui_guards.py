"""The dashboard's ASGI guards on their own: which ``Host`` values a pattern list answers,
the patterns refused, and the Host values of a bound address."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed")

from cyclone_flow.ui.guards import LOOPBACK_HOSTS, TrustedHosts, bound_hosts, check_host_pattern


def _trusted(hosts: list[str], value: str) -> bool:
    async def app(scope: object, receive: object, send: object) -> None:
        raise AssertionError("not called")

    return TrustedHosts(app, hosts).trusted(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:8080", True),
        ("LOCALHOST:8080", True),
        ("[::1]:8080", True),
        ("flows.example.com", True),  # a name without a port: any port
        ("flows.example.com:443", True),
        ("a.proxy.example", True),  # *.proxy.example
        ("proxy.example", False),  # the domain itself is no subdomain
        ("evilproxy.example", False),
        ("127.0.0.1:8081", False),  # another port of a name:port
        ("127.0.0.1", False),
        ("localhost:8080.attacker.example", False),
        ("attacker.example:8080", False),
        ("[::1]:x", False),
        ("", False),
    ],
)
def test_host_values_against_patterns(value: str, expected: bool) -> None:
    hosts = [*bound_hosts("127.0.0.1", 8080), "Flows.Example.com", "*.proxy.example"]
    assert _trusted(hosts, value) is expected


def test_star_answers_any_host_and_loopback_names_any_port() -> None:
    assert _trusted(["*"], "whatever.example:1")
    assert _trusted(list(LOOPBACK_HOSTS), "localhost:5555")
    assert not _trusted(list(LOOPBACK_HOSTS), "attacker.example:5555")


def test_bound_hosts() -> None:
    assert bound_hosts("127.0.0.1", 8080) == ["127.0.0.1:8080", "localhost:8080", "[::1]:8080"]
    assert bound_hosts("::1", 9000)[-1] == "[::1]:9000"
    assert bound_hosts("10.0.0.5", 8080)[-1] == "10.0.0.5:8080"
    assert "localhost" in bound_hosts("127.0.0.1", 80)  # a browser omits port 80


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("a/b", "a name, an address"),
        ("*foo.example", "a name, an address"),
        ("", "a name, an address"),
        ("flows.example:0", "port must be a number"),
        ("flows.example:http", "port must be a number"),
    ],
)
def test_malformed_patterns_are_refused(pattern: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        check_host_pattern(pattern)
    assert check_host_pattern(" *.Example.COM ") == "*.example.com"
