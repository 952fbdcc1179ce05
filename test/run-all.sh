#!/usr/bin/env bash
# The whole test suite, as CI runs it: contract checks, type check, then vitest against real servers.
# Installs the external tools the tests need (grpcurl, ...) when missing; see test/setup-tools.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== buf lint and format"
npx buf lint
npx buf format --diff --exit-code

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

echo "== vitest"
npx vitest run "$@"
