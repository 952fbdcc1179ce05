#!/usr/bin/env bash
# The whole test suite, as CI runs it: contract checks, type check, then vitest against real servers.
# Installs the external tools the tests need (grpcurl, ...) when missing; see test/setup-tools.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== buf lint, format and breaking"
npx buf lint
# proto/grpc is vendored as upstream wrote it: only our own contract is held to buf format.
npx buf format --diff --exit-code --path proto/sandbox
# Against the released contract; moving the baseline on purpose: proto/baseline/README.md.
npx buf breaking --against proto/baseline/sandbox-v1.binpb

echo "== gen/ is what buf generate writes"
npx buf generate
if [ -n "$(git status --porcelain -- gen/ 2>/dev/null)" ]; then
  git status --porcelain -- gen/
  echo "gen/ is not current: run 'npx buf generate' and commit the result" >&2
  exit 1
fi

echo "== type check"
npx tsc --noEmit

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

echo "== vitest"
npx vitest run "$@"
