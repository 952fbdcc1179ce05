"""The SDK's own high-level methods against a daemon with a token, as in a cluster: from a pod of a network the daemon
trusts (--agent-sandbox-trusted-peer), they work without credentials, as they do against KEP-539.2's reference daemon;
from the daemon's own machine (where the sandbox's commands run) they are refused. The other pod is a network
namespace of its own, joined by a veth pair, so the daemon sees an address that is not its own."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from conftest import Daemon, assert_the_sdks_methods_are_refused, connect

HERE = Path(__file__).resolve().parent
TOKEN = "trusted-peers-token"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2's ip for a network namespace"
)


class PeerNetwork(NamedTuple):
    namespace: str
    daemon_address: str
    peer_address: str
    network: str


@pytest.fixture(scope="module")
def peer_network() -> Iterator[PeerNetwork]:
    suffix = f"{random.randrange(16**6):06x}"
    subnet = random.randrange(16, 216)
    namespace, host_link, peer_link = f"sbxsdk{suffix}", f"sbxh{suffix}", f"sbxp{suffix}"
    found = PeerNetwork(namespace, f"10.215.{subnet}.1", f"10.215.{subnet}.2", f"10.215.{subnet}.0/30")

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    try:
        ip("netns", "add", namespace)
    except subprocess.CalledProcessError as refused:
        pytest.skip(f"cannot make a network namespace here (CAP_SYS_ADMIN, CAP_NET_ADMIN): {refused.stderr!r}")
    try:
        ip("link", "add", host_link, "type", "veth", "peer", "name", peer_link)
        ip("link", "set", peer_link, "netns", namespace)
        ip("addr", "add", f"{found.daemon_address}/30", "dev", host_link)
        ip("link", "set", host_link, "up")
        ip("-n", namespace, "addr", "add", f"{found.peer_address}/30", "dev", peer_link)
        ip("-n", namespace, "link", "set", peer_link, "up")
        ip("-n", namespace, "link", "set", "lo", "up")
        yield found
    finally:
        # The veth pair goes with the namespace.
        ip("netns", "del", namespace)


@pytest.fixture(scope="module")
def trusting(peer_network: PeerNetwork) -> Iterator[Daemon]:
    started = Daemon(
        "--host", "0.0.0.0", "--agent-sandbox-trusted-peer", peer_network.network, env={"SANDBOXD_TOKEN": TOKEN}
    )
    try:
        yield started
    finally:
        started.close()


def from_the_peer(peer_network: PeerNetwork, daemon: Daemon, mode: str) -> dict[str, Any]:
    """Runs peer_client.py in the peer's namespace, the SDK reaching the daemon at its address on the veth."""
    finished = subprocess.run(
        ["ip", "netns", "exec", peer_network.namespace, sys.executable, str(HERE / "peer_client.py"), mode,
         peer_network.daemon_address, str(daemon.grpc_port), str(daemon.rest_port)],
        cwd=HERE, capture_output=True, text=True, timeout=120,
    )
    assert finished.returncode == 0, finished.stderr
    return dict(json.loads(finished.stdout))


def test_the_sdks_own_methods_work_from_a_trusted_peer(peer_network: PeerNetwork, trusting: Daemon) -> None:
    assert from_the_peer(peer_network, trusting, "methods") == {
        "run": ["hello from a peer\n", "oops\n", 4],
        "read": "from a peer\n",
        "exists": True,
        "list": ["notes.txt"],
        "exists after delete": False,
    }


def test_the_documented_snippet_runs_as_written_from_a_trusted_peer(peer_network: PeerNetwork, trusting: Daemon) -> None:
    found = from_the_peer(peer_network, trusting, "snippet")
    assert found["printed"] == found["expected"]


@pytest.mark.parametrize("where", ["the daemon's address on the peer's network", "loopback"])
def test_the_sdks_own_methods_are_refused_from_the_daemons_own_machine(
    peer_network: PeerNetwork, trusting: Daemon, where: str
) -> None:
    # What a command of the sandbox would do: call the KEP ports from the machine itself, at an address in the
    # trusted network or at loopback. It has no token, and is not a trusted peer.
    assert_the_sdks_methods_are_refused(
        connect(trusting, peer_network.daemon_address if where.startswith("the daemon") else "127.0.0.1")
    )
