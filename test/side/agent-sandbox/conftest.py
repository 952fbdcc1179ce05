"""Fixtures: a real sandboxd of this checkout with its KEP-539.2 ports, and the agent-sandbox SDK's Sandbox connected
to it as in a cluster (SandboxdInClusterConnectionConfig, mode in-cluster-pod-ip, pod IP 127.0.0.1)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_agent_sandbox.sandbox import Sandbox
from k8s_agent_sandbox.models import SandboxdInClusterConnectionConfig

REPOSITORY = Path(__file__).resolve().parents[3]


class Daemon:
    """sandboxd started as its CLI is (``node --import tsx src/cli/sandboxd.ts``) on free ports, its own, the KEP's
    gRPC one and the KEP's REST one, read from the JSON log lines that name them."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.workspace = os.path.realpath(tempfile.mkdtemp(prefix="sandboxd-agent-sandbox-"))
        command = ["node", "--import", "tsx", "src/cli/sandboxd.ts", "--port", "0", "--workspace", self.workspace]
        command += ["--agent-sandbox-grpc-port", "0", "--agent-sandbox-rest-port", "0", "--log-format", "json", *args]
        base = {key: value for key, value in os.environ.items() if not key.startswith("SANDBOXD_")}
        self.process = subprocess.Popen(
            command, cwd=REPOSITORY, env={**base, **(env or {})}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.log: list[str] = []
        ports = self._read_ports(timeout=60.0)
        self.grpc_port, self.rest_port = int(ports["grpc"]), int(ports["rest"])
        threading.Thread(target=self._drain, daemon=True).start()

    def _read_ports(self, timeout: float) -> dict[str, Any]:
        assert self.process.stderr is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            text = line.decode(errors="replace")
            self.log.append(text)
            try:
                record = json.loads(text)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("agentSandboxPorts"), dict):
                return dict(record["agentSandboxPorts"])
        self.close()
        raise RuntimeError("sandboxd did not report its KEP-539.2 ports:\n" + "".join(self.log[-20:]))

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            if len(self.log) < 10_000:
                self.log.append(line.decode(errors="replace"))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.workspace, ignore_errors=True)


class ClusterStandIn:
    """What the SDK asks of Kubernetes, answered as agent-sandbox's controller reports a ready Sandbox whose pod IP is
    `pod_ip` (127.0.0.1 unless told): the SDK resolves the address itself, exactly as in a cluster."""

    def __init__(self, pod_ip: str = "127.0.0.1") -> None:
        self.pod_ip = pod_ip

    def get_sandbox(self, name: str, namespace: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "namespace": namespace},
            "status": {"podIPs": [{"ip": self.pod_ip}], "conditions": [{"type": "Ready", "status": "True"}]},
        }


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    started = Daemon(env={"SANDBOX_ID": "sb-conformance", "SANDBOX_TEMPLATE": "sandboxd"})
    try:
        yield started
    finally:
        started.close()


def connect(daemon: Daemon, pod_ip: str = "127.0.0.1") -> Sandbox:
    """The SDK's Sandbox for the daemon, as `SandboxClient.create_sandbox` would hand it out for a pod at `pod_ip`."""
    return connect_to(pod_ip, daemon.grpc_port, daemon.rest_port)


def connect_to(pod_ip: str, grpc_port: int, rest_port: int) -> Sandbox:
    """The SDK's Sandbox for a daemon at `pod_ip` with these KEP-539.2 ports."""
    config = SandboxdInClusterConnectionConfig(mode="in-cluster-pod-ip", grpc_port=grpc_port, rest_port=rest_port)
    return Sandbox("claim-1", "sandbox-1", namespace="default", connection_config=config, k8s_helper=ClusterStandIn(pod_ip))  # type: ignore[arg-type]


@pytest.fixture()
def sandbox(daemon: Daemon) -> Iterator[Sandbox]:
    connected = connect(daemon)
    try:
        yield connected
    finally:
        connected.connector.close()


def assert_the_sdks_methods_are_refused(sandbox: Sandbox) -> None:
    """The SDK's own `commands.run` and `files` get UNAUTHENTICATED and 401: it sends no credentials."""
    from k8s_agent_sandbox.exceptions import SandboxRequestError

    try:
        with pytest.raises(RuntimeError, match="UNAUTHENTICATED"):
            sandbox.commands.run("true")
        with pytest.raises(SandboxRequestError) as refused:
            sandbox.files.read("anything")
        assert refused.value.status_code == 401
    finally:
        sandbox.connector.close()
