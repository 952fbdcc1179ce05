"""Filesystem of the unmodified agent-sandbox SDK (write, read, list, exists, delete): the daemon's KEP-539.2 REST port,
/v1/files/{path}, confined to the workspace."""

from __future__ import annotations

import hashlib
import os

import pytest
from k8s_agent_sandbox.exceptions import SandboxRequestError
from k8s_agent_sandbox.sandbox import Sandbox

from conftest import Daemon


def status_of(call: object) -> int | None:
    with pytest.raises(SandboxRequestError) as refused:
        call()  # type: ignore[operator]
    return refused.value.status_code


def test_write_read_exists_list_delete(sandbox: Sandbox, daemon: Daemon) -> None:
    sandbox.files.write("notes/today.txt", "hello files\n")
    sandbox.files.write("notes/blob.bin", bytes(range(256)) * 4)
    assert sandbox.files.read("notes/today.txt") == b"hello files\n"
    assert sandbox.files.read("notes/blob.bin") == bytes(range(256)) * 4
    with open(os.path.join(daemon.workspace, "notes/today.txt"), "rb") as written:
        assert written.read() == b"hello files\n"
    assert sandbox.files.exists("notes/today.txt") and sandbox.files.exists("notes")
    assert not sandbox.files.exists("notes/missing.txt")
    entries = {entry.name: entry for entry in sandbox.files.list("notes")}
    assert sorted(entries) == ["blob.bin", "today.txt"]
    assert (entries["today.txt"].type, entries["today.txt"].size, entries["today.txt"].mode) == ("file", 12, "0644")
    assert entries["blob.bin"].size == 1024 and entries["today.txt"].modified.tzinfo is not None
    assert status_of(lambda: sandbox.files.delete("notes")) == 409
    sandbox.files.delete("notes/today.txt")
    assert not sandbox.files.exists("notes/today.txt")
    sandbox.files.delete("notes", recursive=True)
    assert not os.path.exists(os.path.join(daemon.workspace, "notes"))
    assert status_of(lambda: sandbox.files.read("notes/today.txt")) == 404


def test_64_mib_round_trip_is_byte_exact(sandbox: Sandbox) -> None:
    content = os.urandom(64 * 1024 * 1024)
    sandbox.files.write("big/random.bin", content, timeout=300)
    read = sandbox.files.read("big/random.bin", timeout=300)
    assert len(read) == len(content) and hashlib.sha256(read).digest() == hashlib.sha256(content).digest()
    with open(os.devnull, "wb") as sink:
        assert sandbox.files.read_to("big/random.bin", sink, timeout=300) == len(content)  # type: ignore[arg-type]
    sandbox.files.delete("big", recursive=True)


def test_files_and_commands_see_the_same_workspace(sandbox: Sandbox) -> None:
    sandbox.files.write("shared/script.sh", "echo from a file\n")
    assert sandbox.commands.run("sh shared/script.sh").stdout == "from a file\n"
    sandbox.commands.run("printf made-by-a-command > shared/out.txt")
    assert sandbox.files.read("shared/out.txt") == b"made-by-a-command"
    sandbox.files.delete("shared", recursive=True)


@pytest.mark.parametrize("path", ["../outside.txt", "a/../../outside.txt", "/etc/passwd", "/etc/new-file", "/"])
def test_paths_outside_the_workspace_are_refused(sandbox: Sandbox, path: str) -> None:
    # The SDK cleans paths itself unless told not to: these reach the daemon as written.
    assert status_of(lambda: sandbox.files.read(path, allow_unsafe_paths=True)) == 403
    assert status_of(lambda: sandbox.files.write(path, b"x", allow_unsafe_paths=True)) == 403


def test_symlinks_out_of_the_workspace_are_refused(sandbox: Sandbox, daemon: Daemon) -> None:
    os.symlink("/etc", os.path.join(daemon.workspace, "etc-link"))
    os.symlink("/etc/passwd", os.path.join(daemon.workspace, "passwd-link"))
    try:
        assert status_of(lambda: sandbox.files.read("etc-link/passwd")) == 403
        assert status_of(lambda: sandbox.files.read("passwd-link")) == 403
        assert status_of(lambda: sandbox.files.list("etc-link")) == 403
        assert status_of(lambda: sandbox.files.write("etc-link/planted", b"x")) == 403
        assert not os.path.exists("/etc/planted")
        # The links themselves are the workspace's: deleting one removes the link, never what it points to.
        sandbox.files.delete("passwd-link")
        assert os.path.exists("/etc/passwd") and not os.path.lexists(os.path.join(daemon.workspace, "passwd-link"))
    finally:
        for name in ("etc-link", "passwd-link"):
            if os.path.lexists(os.path.join(daemon.workspace, name)):
                os.unlink(os.path.join(daemon.workspace, name))


def test_metadata_and_health(sandbox: Sandbox) -> None:
    base = sandbox.connector.connect()
    assert sandbox.connector.session.get(f"{base}/v1/health", timeout=30).json()["status"] == "ok"
    env = sandbox.connector.session.get(f"{base}/v1/metadata", timeout=30).json()["env"]
    assert env == {"SANDBOX_ID": "sb-conformance", "SANDBOX_TEMPLATE": "sandboxd"}
