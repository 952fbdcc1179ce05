"""Where a sandbox finds its daemon (the SANDBOXD_URL and SANDBOXD_TOKEN variables the CLI and the TypeScript client
read too), URLs and options it refuses before any call, said as the other clients say them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import sandboxd
from sandboxd import Sandbox

from .support import Daemon

URL_FORMS = "write it as http://host:port (the daemon speaks plain HTTP by default) or https://host:port (a daemon started with --tls-cert)"


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No SANDBOXD_URL or SANDBOXD_TOKEN but what the test sets."""
    monkeypatch.delenv("SANDBOXD_URL", raising=False)
    monkeypatch.delenv("SANDBOXD_TOKEN", raising=False)
    yield monkeypatch


def test_reads_sandboxd_url_and_sandboxd_token_when_no_argument_says(daemon: Daemon, clean_environment: pytest.MonkeyPatch) -> None:
    clean_environment.setenv("SANDBOXD_URL", daemon.url)
    clean_environment.setenv("SANDBOXD_TOKEN", daemon.token or "")
    with sandboxd.connect() as sandbox:
        assert sandbox.url == daemon.url
        assert sandbox.exec("echo found").stdout == b"found\n"
    # An explicit token (None included) wins over the variable: None sends none.
    with pytest.raises(sandboxd.AuthenticationError):
        sandboxd.connect(token=None)


def test_a_url_without_a_scheme_is_refused_naming_both_forms(clean_environment: pytest.MonkeyPatch) -> None:
    for url in ("127.0.0.1:7007", "localhost:7007", "ftp://127.0.0.1:7007", "not a url"):
        with pytest.raises(sandboxd.InvalidArgumentError) as refused:
            Sandbox(url)
        assert str(refused.value) == f'invalid daemon URL "{url}": {URL_FORMS}'
        assert refused.value.code == "INVALID_ARGUMENT"


def test_https_against_a_daemon_speaking_plain_http_says_so(daemon: Daemon, clean_environment: pytest.MonkeyPatch) -> None:
    https = daemon.url.replace("http://", "https://")
    with pytest.raises(sandboxd.SandboxUnavailableError) as refused:
        sandboxd.connect(https, token=daemon.token, connect_timeout=5)
    assert str(refused.value) == (
        f"the daemon at {https} speaks plain HTTP, not TLS: use {daemon.url}, or start the daemon with --tls-cert and --tls-key"
    )


def test_a_token_goes_in_clear_only_to_loopback_unless_allowed(clean_environment: pytest.MonkeyPatch) -> None:
    for url in ("http://192.0.2.1:7007", "http://sandbox.example:7007", "http://[2001:db8::1]:7007"):
        with pytest.raises(sandboxd.InvalidArgumentError) as refused:
            Sandbox(url, token="secret")
        assert str(refused.value) == (
            f"refusing to send the token in clear to {url}: use https:// (a daemon started with --tls-cert and --tls-key), "
            "or allow it with allow_cleartext_token=True on a network you trust"
        )
        assert Sandbox(url, token="secret", allow_cleartext_token=True).url == url
    clean_environment.setenv("SANDBOXD_TOKEN", "secret")
    with pytest.raises(sandboxd.InvalidArgumentError):
        Sandbox("http://192.0.2.1:7007")
    for url in ("http://127.0.0.1:7007", "http://127.8.9.10:7007", "http://localhost:7007", "http://[::1]:7007", "https://sandbox.example"):
        assert Sandbox(url).url == url
    clean_environment.delenv("SANDBOXD_TOKEN")
    assert Sandbox("http://192.0.2.1:7007").url == "http://192.0.2.1:7007"


def test_unknown_options_are_refused_not_ignored(sandbox: Sandbox) -> None:
    # A misspelled time limit must not run the command without one, nor a misspelled id start it under another.
    with pytest.raises(sandboxd.UnknownOptionError) as misspelled:
        sandbox.exec("sleep 3; echo done", timout=1)  # type: ignore[call-arg]
    assert isinstance(misspelled.value, TypeError) and isinstance(misspelled.value, sandboxd.InvalidArgumentError)
    assert misspelled.value.code == "INVALID_ARGUMENT"
    assert str(misspelled.value).startswith("exec(): unknown option timout (did you mean timeout?) (it takes ")
    with pytest.raises(sandboxd.UnknownOptionError, match=r"^exec\(\): unknown option process_id \(it takes "):
        sandbox.exec("echo hi", process_id="py-kbi")  # type: ignore[call-arg]
    with pytest.raises(sandboxd.UnknownOptionError, match=r"^exec_stream\(\): unknown option"):
        sandbox.exec_stream("echo hi", timeout_ms=5)  # type: ignore[call-arg]
    with pytest.raises(sandboxd.UnknownOptionError, match=r"^start_process\(\): unknown option procss_id \(did you mean process_id\?\)"):
        sandbox.start_process("sleep 1", procss_id="x")  # type: ignore[call-arg]
    with pytest.raises(sandboxd.UnknownOptionError, match=r"^AsyncSandbox\(\): unknown option tokn \(did you mean token\?\)"):
        Sandbox("http://127.0.0.1:7007", tokn="x")  # type: ignore[call-arg]
    assert sandbox.processes.list() == []
