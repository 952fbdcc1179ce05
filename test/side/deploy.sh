#!/usr/bin/env bash
# Deployment files, checked:
#   deploy/agent-sandbox/*.yaml  strictly against kubernetes-sigs/agent-sandbox's CRD schemas (vendored in
#                             test/side/deploy/agent-sandbox-crds), the pod template against the Kubernetes ones,
#                             and against the image (test/side/deploy/agent_sandbox.py)
#   deploy/kubernetes/*.yaml  strictly against the Kubernetes schemas of the oldest version the manifests
#                             support (1.27: native gRPC probes) and of the newest, with kubernetes-validate
#                             (PyPI; the schemas ship inside the package, nothing is fetched at run time)
#   deploy/systemd/           systemd-analyze verify of the unit as shipped, with the daemon of this checkout
#                             at the unit's ExecStart path (in a private mount namespace); systemd-sysusers
#                             --dry-run of the sysusers file
#   both                      every SANDBOXD_* variable they set is one the daemon knows; the manifest's user
#                             and port are the image's; a token file of a credential's mode (0400) is accepted;
#                             in the image, the manifest and the unit the daemon runs as root and its commands
#                             as another user, and the token never comes from the environment of the manifest
#                             or the unit; the manifest's NetworkPolicy selects its pods and admits their port
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/side/lib/steps.sh
report_failed_step
source test/side/lib/apt.sh
passed=0
failed=0
result() { # result NAME STATUS [DETAIL]
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); echo "ok - $1"; else failed=$((failed + 1)); echo "FAILED - $1${3:+: $3}"; fi
}

kubernetes_validate_version=1.37.0
venv=.tools/kubernetes-validate
if ! "$venv/bin/kubernetes-validate" --version 2>/dev/null | grep -q "$kubernetes_validate_version"; then
  echo "installing kubernetes-validate $kubernetes_validate_version into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$kubernetes_validate_version"
fi
for version in 1.27.0 1.37.0; do
  status=0
  out=$("$venv/bin/kubernetes-validate" --strict --no-warn -k "$version" deploy/kubernetes/*.yaml 2>&1) || status=$?
  result "deploy/kubernetes is valid for Kubernetes $version (strict: no unknown fields)" "$status" "$out"
done

# deploy/agent-sandbox/ against agent-sandbox's CRD schemas (strict), its pod against the Kubernetes ones.
pod=$(mktemp --suffix=.yaml)
status=0
out=$("$venv/bin/python" test/side/deploy/agent_sandbox.py test/side/deploy/agent-sandbox-crds Dockerfile "$pod" deploy/agent-sandbox/*.yaml 2>&1) || status=$?
result "deploy/agent-sandbox is valid for agent-sandbox's CRDs (strict) and is what sandboxd needs" "$status" "$out"
for version in 1.27.0 1.37.0; do
  status=0
  out=$("$venv/bin/kubernetes-validate" --strict --no-warn -k "$version" "$pod" 2>&1) || status=$?
  result "deploy/agent-sandbox's pod is valid for Kubernetes $version (strict)" "$status" "$out"
done
rm -f "$pod"

[ -x dist/src/cli/sandboxd.js ] || npm run build --silent
help=$(node dist/src/cli/sandboxd.js --help)
unknown=""
for name in $(grep -ohE '\bSANDBOXD_[A-Z_]+' deploy/kubernetes/*.yaml deploy/agent-sandbox/*.yaml deploy/systemd/sandboxd.service Dockerfile | sort -u); do
  grep -q "$name" <<<"$help" || unknown="$unknown $name"
done
result "every SANDBOXD_* variable in deploy/ and the Dockerfile is in sandboxd --help" "$([ -z "$unknown" ]; echo $?)" "unknown:$unknown"

# The manifest against the image (its USER and ENV) and itself, read with the YAML parser kubernetes-validate uses.
status=0
out=$("$venv/bin/python" test/side/deploy/manifest.py deploy/kubernetes/sandboxd.yaml Dockerfile 2>&1) || status=$?
result "the manifest runs the image's user (root, commands as another), its token from a root-only file, its port behind a NetworkPolicy" "$status" "$out"

# LoadCredential= gives a service running as root (as this unit does) a file of mode 0400: the daemon
# must start with it as its token file.
work=$(mktemp -d)
daemon=""
cleanup() { [ -z "$daemon" ] || kill "$daemon" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/credentials" "$work/workspace"
printf 'credential-token\n' >"$work/credentials/token"
chmod 0400 "$work/credentials/token"
chmod 0500 "$work/credentials"
SANDBOXD_TOKEN_FILE="$work/credentials/token" node dist/src/cli/sandboxd.js --port 0 --workspace "$work/workspace" --log-format json 2>"$work/daemon.log" &
daemon=$!
for _ in $(seq 1 300); do grep -q '"url"' "$work/daemon.log" && break; kill -0 "$daemon" 2>/dev/null || break; sleep 0.1; done
listening=$(grep -c '"url"' "$work/daemon.log" || true)
required=$(grep -c 'bearer token required' "$work/daemon.log" || true)
result "the daemon takes a credential file (mode 0400) as its token file" "$([ "$listening" = 1 ] && [ "$required" = 1 ]; echo $?)" "$(cat "$work/daemon.log")"
kill "$daemon"
wait "$daemon" || true
daemon=""

command -v systemd-analyze >/dev/null || apt_install systemd
echo "$(systemd-analyze --version | head -n 1)"
# systemd-analyze verify checks that ExecStart's program exists: the unit runs /usr/local/bin/sandboxd,
# where `npm install -g` puts it. Here that path is this checkout's daemon, in a mount namespace of its own.
status=0
out=$(unshare --mount --propagation private -- bash -c '
  mount -t tmpfs tmpfs /usr/local/bin &&
  ln -s "$1/dist/src/cli/sandboxd.js" /usr/local/bin/sandboxd &&
  SYSTEMD_LOG_LEVEL=notice systemd-analyze verify "$1/deploy/systemd/sandboxd.service"' _ "$PWD" 2>&1) || status=$?
[ -z "$out" ] || status=1
result "systemd-analyze verify deploy/systemd/sandboxd.service" "$status" "$out"
status=0
grep -q '^KillMode=control-group$' deploy/systemd/sandboxd.service && grep -q '^LoadCredential=token:' deploy/systemd/sandboxd.service || status=1
# Root (no User=), commands as another user, and no token among the unit's variables (systemd would hand it to the daemon's environment).
grep -qE '^(User|DynamicUser)=' deploy/systemd/sandboxd.service && status=1
grep -qE '^Environment=SANDBOXD_USER=[a-z0-9]' deploy/systemd/sandboxd.service || status=1
grep -qE '^Environment=.*SANDBOXD_TOKEN=' deploy/systemd/sandboxd.service && status=1
result "the unit kills its whole cgroup, runs the daemon as root and its commands as another user, takes the token as a credential" "$status"
mkdir -p "$work/sysusers-root/etc"
status=0
out=$(systemd-sysusers --root="$work/sysusers-root" --dry-run "$PWD/deploy/systemd/sandboxd.sysusers" 2>&1) || status=$?
grep -q "Creating user 'sandbox'" <<<"$out" || status=1
result "systemd-sysusers takes deploy/systemd/sandboxd.sysusers" "$status" "$out"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
