"""The SDK as a client in another pod: run by test_trusted_peers.py inside a network namespace of its own
(`ip netns exec`), so the daemon sees a peer that is not its own machine. Prints one JSON object.

    peer_client.py methods <pod ip> <grpc port> <rest port>   the SDK's own commands.run and files
    peer_client.py snippet <pod ip> <grpc port> <rest port>   docs/OPERATIONS.md's "On agent-sandbox" block as written
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import k8s_agent_sandbox.sandbox_client

from conftest import REPOSITORY, ClusterStandIn, connect_to


def methods(pod_ip: str, grpc_port: int, rest_port: int) -> dict[str, Any]:
    sandbox = connect_to(pod_ip, grpc_port, rest_port)
    try:
        run = sandbox.commands.run("echo hello from a peer; echo oops >&2; exit 4")
        sandbox.files.write("peer/notes.txt", "from a peer\n")
        found = {
            "run": [run.stdout, run.stderr, run.exit_code],
            "read": sandbox.files.read("peer/notes.txt").decode(),
            "exists": sandbox.files.exists("peer/notes.txt"),
            "list": sorted(entry.name for entry in sandbox.files.list("peer")),
        }
        sandbox.files.delete("peer", recursive=True)
        found["exists after delete"] = sandbox.files.exists("peer")
        return found
    finally:
        sandbox.connector.close()


def section_python() -> str:
    text = (Path(REPOSITORY) / "docs/OPERATIONS.md").read_text()
    start = text.index("\n## On agent-sandbox\n")
    section = text[start : text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the section has one Python block"
    return blocks[0]


def snippet(pod_ip: str, grpc_port: int, rest_port: int) -> dict[str, Any]:
    # The cluster is what is stood in for: the SDK's Kubernetes calls, and the claim the controller would answer
    # with a ready sandbox of the warm pool. Everything after the claim is the SDK talking to the daemon.
    k8s_agent_sandbox.sandbox_client.K8sHelper = lambda **_: ClusterStandIn(pod_ip)  # type: ignore[assignment,misc]
    k8s_agent_sandbox.sandbox_client.SandboxClient.create_sandbox = (  # type: ignore[method-assign]
        lambda self, warmpool, **_: connect_to(pod_ip, grpc_port, rest_port)
    )
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(section_python(), "docs/OPERATIONS.md", "exec"), {})
    expected = [comment.strip() for line in section_python().splitlines() for comment in re.findall(r"# → (.*)$", line)]
    return {"printed": printed.getvalue().splitlines(), "expected": expected}


if __name__ == "__main__":
    mode, pod_ip, grpc_port, rest_port = sys.argv[1:]
    print(json.dumps({"methods": methods, "snippet": snippet}[mode](pod_ip, int(grpc_port), int(rest_port))))
