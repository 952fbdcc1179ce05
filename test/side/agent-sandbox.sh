#!/usr/bin/env bash
# kubernetes-sigs/agent-sandbox's own Python SDK against a real daemon of this checkout: k8s-agent-sandbox 1.0.8 from
# PyPI, unmodified, in a venv of its own (test/side/agent-sandbox/.venv; downloads land in pip's cache, ~/.cache/pip),
# connected as in a cluster with SandboxdInClusterConnectionConfig(mode="in-cluster-pod-ip") to a Sandbox whose pod
# IP is 127.0.0.1. Its CommandExecutor.run, its Filesystem and its generated ProcessService stubs (Start, Execute,
# WriteStdin, SendSignal, ResizeTTY) drive the daemon's KEP-539.2 ports; the stubs it ships must describe the very
# process.v1 this checkout serves (proto/baseline/process-v1.binpb), file options aside.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/side/lib/steps.sh
report_failed_step

python="${PYTHON:-python3}"
dir=test/side/agent-sandbox
venv=$dir/.venv
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "k8s-agent-sandbox 1.0.8 needs Python 3.11 or later" >&2; exit 1; }

echo "== agent-sandbox: venv with $dir/requirements.txt"
stamp="$venv/.requirements.sha256"
wanted=$(sha256sum "$dir/requirements.txt" | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$dir/requirements.txt"
  echo "$wanted" >"$stamp"
fi
"$venv/bin/python" -c 'import importlib.metadata as m; print("k8s-agent-sandbox", m.version("k8s-agent-sandbox"), "grpcio", m.version("grpcio"))'

echo "== agent-sandbox: pytest"
(cd "$dir" && .venv/bin/python -m pytest -q -p no:cacheprovider --timeout 300)
