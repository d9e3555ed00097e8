"""The secure default's pieces without a server (issue 22 item 1): the token file a fresh
manager makes and the CLI finds, and the Host allow-list's names."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from stoker import tokens
from stoker.errors import InvalidInput
from stoker.server.guard import allowed_hosts, host_name, is_loopback


def test_the_server_token_is_made_once_readable_by_its_owner_only(tmp_path: Path) -> None:
    token, path, made = tokens.server_token(tmp_path)
    assert made and path == tmp_path / "token" and len(token) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again, _, made_again = tokens.server_token(tmp_path)
    assert (again, made_again) == (token, False)
    path.write_text("\n")
    with pytest.raises(InvalidInput, match="holds no token"):
        tokens.server_token(tmp_path)


def test_the_cli_finds_a_token_only_where_it_may(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(tokens.ENV_FILE, raising=False)
    assert tokens.client_token("http://127.0.0.1:8081", None) is None
    local = tmp_path / ".stoker-server"
    local.mkdir()
    (local / "token").write_text("local-t0ken\n")
    assert tokens.client_token("http://127.0.0.1:8081", None) == "local-t0ken"
    assert tokens.client_token("http://localhost:8081", None) == "local-t0ken"
    assert tokens.client_token("http://127.0.0.1:8081", "given") == "given"
    # Never sent to another host because a file lies around here.
    assert tokens.client_token("http://jobs.example.com:8081", None) is None
    named = tmp_path / "named"
    named.write_text("named-t0ken")
    monkeypatch.setenv(tokens.ENV_FILE, str(named))
    assert tokens.client_token("http://jobs.example.com:8081", None) == "named-t0ken"
    monkeypatch.setenv(tokens.ENV_FILE, str(tmp_path / "missing"))
    with pytest.raises(InvalidInput) as info:
        tokens.client_token("http://127.0.0.1:8081", None)
    assert info.value.field == tokens.ENV_FILE


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("127.0.0.1:8081", "127.0.0.1"),
        ("LOCALHOST", "localhost"),
        ("[::1]:8081", "::1"),
        ("::1", "::1"),
        ("rebind.attacker.example:80", "rebind.attacker.example"),
        ("", ""),
    ],
)
def test_host_names_from_host_headers(header: str, name: str) -> None:
    assert host_name(header) == name


def test_the_allow_list_is_loopback_the_bound_address_and_the_names_given() -> None:
    assert allowed_hosts("127.0.0.1", ()) == {"localhost", "127.0.0.1", "::1"}
    assert "10.0.0.5" in allowed_hosts("10.0.0.5", ())
    assert allowed_hosts("0.0.0.0", ["Jobs.Internal"]) == {
        "localhost",
        "127.0.0.1",
        "::1",
        "jobs.internal",
    }
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5")
    assert is_loopback("127.0.0.2") and is_loopback("[::1]")  # any of 127/8; a bracketed v6
    assert not is_loopback("127.example.com")  # a name, not an address


@pytest.mark.parametrize(
    ("path", "open_"),
    [
        ("/healthz", True),
        ("/docs", True),
        ("/ui/jobs", True),
        ("/ui/jobs/orders-1", True),
        ("/ui/applications/shop", True),
        ("/ui/jobs/orders-1/anything", False),  # a later route under a page: guarded
        ("/ui/jobs/", False),
        ("/ui/f/jobs", False),  # fragments hold data
        ("/v1/jobs", False),
    ],
)
def test_only_the_uis_pages_are_open_not_what_lies_under_them(path: str, open_: bool) -> None:
    from stoker.server.auth import is_open

    assert is_open(path) is open_
