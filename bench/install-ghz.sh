#!/usr/bin/env bash
# Installs ghz, pinned, into bench/.tools/bin (ignored by git), where `npm run bench` looks first.
# Needs Go; the bench skips its ghz row, saying so, when ghz is absent.
set -euo pipefail
cd "$(dirname "$0")"
version="$(sed -n 's/^export const ghzVersion = "\(v[0-9.]*\)";$/\1/p' figures/ghz.ts)"
GOBIN="$PWD/.tools/bin" go install "github.com/bojand/ghz/cmd/ghz@${version}"
echo "ghz ${version} in bench/.tools/bin/ghz"
