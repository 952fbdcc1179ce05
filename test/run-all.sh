#!/usr/bin/env bash
# The whole test suite, as CI runs it: contract checks, type check, then vitest against real servers.
# Installs the external tools the tests need (grpcurl, ...) when missing; see test/setup-tools.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== buf lint, format and breaking"
npx buf lint
# proto/grpc is vendored as upstream wrote it: only our own files are held to buf format.
npx buf format --diff --exit-code --path proto/sandbox --path proto/process
# Against the released contract; moving the baseline on purpose: proto/baseline/README.md.
npx buf breaking --against proto/baseline/sandbox-v1.binpb
# process.v1 is KEP-539.2's, not ours to change: without comments it must build to the very bytes the KEP's own
# file builds to (proto/baseline/process-v1.binpb), so no name, number, type or option drifts, added or removed.
kep_image=$(mktemp)
npx buf build --exclude-source-info --path proto/process -o "$kep_image"
if ! cmp -s "$kep_image" proto/baseline/process-v1.binpb; then
  rm -f "$kep_image"
  echo "proto/process/v1/process.proto no longer matches KEP-539.2's process.proto (proto/baseline/README.md)" >&2
  exit 1
fi
rm -f "$kep_image"

echo "== gen/ is what buf generate writes"
npx buf generate
if [ -n "$(git status --porcelain -- gen/ 2>/dev/null)" ]; then
  git status --porcelain -- gen/
  echo "gen/ is not current: run 'npx buf generate' and commit the result" >&2
  exit 1
fi

echo "== type check"
npx tsc --noEmit

# Biome formats and lints every TypeScript, JavaScript and JSON file but gen/ and the vendored ones (biome.jsonc).
echo "== format and lint"
if ! npx biome ci --error-on-warnings .; then
  echo "format or lint: run 'npx biome check --write <file>' on the files above" >&2
  exit 1
fi

if [ -f test/setup-tools.sh ]; then
  echo "== external tools"
  bash test/setup-tools.sh
fi

echo "== examples/go/gen is what buf generate --template buf.gen.go.yaml writes"
PATH="$PWD/.tools/bin:$PATH" npx buf generate --template buf.gen.go.yaml
if [ -n "$(git status --porcelain -- examples/go/gen 2>/dev/null)" ]; then
  git status --porcelain -- examples/go/gen
  echo "examples/go/gen is not current: run 'bash test/setup-tools.sh && PATH=\"\$PWD/.tools/bin:\$PATH\" npx buf generate --template buf.gen.go.yaml' and commit the result" >&2
  exit 1
fi

# Independent suites (Python SDK, browser, image, package...) are one script each in test/side/: they start
# here, run beside vitest, and their logs are printed when they end. Any failure fails the run.
side_pids=()
side_names=()
mkdir -p .side-logs
if [ $# -eq 0 ]; then
  for script in test/side/*.sh; do
    [ -e "$script" ] || continue
    name=$(basename "$script" .sh)
    echo "== side suite $name (log: .side-logs/$name.log)"
    # A suite that hangs (an apt lock, a stuck build) fails after 25 minutes instead of holding CI.
    timeout --kill-after=30 1500 bash "$script" >".side-logs/$name.log" 2>&1 &
    side_pids+=($!)
    side_names+=("$name")
  done
fi

echo "== vitest"
status=0
npx vitest run "$@" || status=$?

for i in "${!side_pids[@]}"; do
  name=${side_names[$i]}
  if wait "${side_pids[$i]}"; then
    echo "== side suite $name: passed"
    tail -n 5 ".side-logs/$name.log"
  else
    echo "== side suite $name: FAILED; its log:"
    cat ".side-logs/$name.log"
    status=1
  fi
done
exit "$status"
