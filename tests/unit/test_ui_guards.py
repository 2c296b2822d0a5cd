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
        # strictly a host[:port]: a pattern's suffix or name inside something else is none
        ("evil.com/.proxy.example", False),
        ("evil.com/.proxy.example:8080", False),
        ("[::1]x", False),
        ("[::1]x:8080", False),
        ("[::1:8080", False),
        ("[zz::1]:8080", False),
        ("a..proxy.example", False),
        ("a_b.proxy.example", False),
        ("flows.example.com:", False),
        ("flows.example.com:80:80", False),
        ("flows.example.com@evil", False),
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
        ("flows.example:", "port must be a number"),
        ("[::1", "a name, an address"),
        ("[::1]x", "a name, an address"),
        ("[zz]", "a name, an address"),
        ("x:80:80", "a name, an address"),
        ("a..b", "a name, an address"),
        ("a b", "a name, an address"),
        ("evil.com/.example.com", "a name, an address"),
        ("*.example.com:443", r"\*\.domain takes a DNS name"),
        ("*.a/b", r"\*\.domain takes a DNS name"),
        ("*.", r"\*\.domain takes a DNS name"),
    ],
)
def test_malformed_patterns_are_refused(pattern: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        check_host_pattern(pattern)
    assert check_host_pattern(" *.Example.COM ") == "*.example.com"


def test_patterns_are_normalised() -> None:
    assert check_host_pattern("::1") == "[::1]"
    assert check_host_pattern("[::1]:8080") == "[::1]:8080"
    assert check_host_pattern("Flows.Example.COM:443") == "flows.example.com:443"
    assert check_host_pattern("10.0.0.5") == "10.0.0.5"


def test_a_name_pattern_answers_only_that_name() -> None:
    # an IPv6 name: what follows its bracket is a port or nothing (the old split dropped
    # "x" and answered "[::1]x")
    assert _trusted(["[::1]"], "[::1]:5555")
    assert not _trusted(["[::1]"], "[::1]x")
    assert not _trusted(["[::1]"], "[::1]x:5555")
    assert not _trusted(["*.example.com"], "evil.com/.example.com")
