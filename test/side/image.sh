#!/usr/bin/env bash
# Container image: builds the Dockerfile with buildah (chroot isolation: no container engine runs here) from
# bases assembled from reachable sources and cached on the machine (test/side/image/base.sh), then runs the
# image's entrypoint as PID 1 of a new PID namespace and calls the daemon inside (test/side/image/smoke.ts).
# Installs buildah and debootstrap with apt-get when missing. Prints the image's size and the time taken.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$SECONDS
source test/side/lib/steps.sh
report_failed_step
source test/side/lib/apt.sh
apt_install buildah debootstrap
source test/side/image/base.sh
ensure_bases
echo "bases ready after $((SECONDS - started)) s"

image=localhost/sandboxd:ci
# --layers keeps each step's result, so an unchanged step is not run again by the next build on this machine.
buildah bud --isolation chroot --layers --format docker --quiet \
  --build-arg NODE_IMAGE="$RUNTIME_BASE" --build-arg BUILD_IMAGE="$BUILD_BASE" -t "$image" . >/dev/null
echo "image built after $((SECONDS - started)) s"
size=$(buildah inspect --type image --format '{{.Size}}' "$image" 2>/dev/null || true)
[ -n "$size" ] || size=$(buildah images --noheading --format '{{.Size}}' "$image")
echo "image size: $(buildah images --noheading --format '{{.Size}}' "$image") (runtime base $(buildah images --noheading --format '{{.Size}}' "$RUNTIME_BASE"))"

work=$(mktemp -d)
ctr=$(buildah from --quiet "$image")
cleanup() {
  buildah umount "$ctr" >/dev/null 2>&1 || true
  buildah rm "$ctr" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
rootfs=$(buildah mount "$ctr")
buildah inspect --type image "$image" | node -e 'process.stdout.write(JSON.stringify(JSON.parse(require("fs").readFileSync(0, "utf8")).Docker.config))' >"$work/config.json"
node --import tsx test/side/image/smoke.ts "$rootfs" "$work/config.json"
echo "image side suite took $((SECONDS - started)) s"
