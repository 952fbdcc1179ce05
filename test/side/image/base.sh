# Sourced by test/side/image.sh, after test/side/lib/steps.sh. ensure_bases assembles, or finds in the machine's cache, the two base images
# CI builds the Dockerfile from, since no container registry is reachable here: stand-ins for the official
# node:24-bookworm-slim (runtime) and node:24-bookworm (build) images, made of what is reachable:
#   - a minimal Debian from debootstrap, from the mirror apt uses on this machine;
#   - Node.js from the npm registry: node-linux-<arch>, the package the `node` package installs (binary and
#     headers), with npm from the `npm` package, both under /usr/local as in the official images;
#   - for the build base, gcc and libc6-dev with apt (the native helper and addon).
# Sets RUNTIME_BASE and BUILD_BASE to local image names. The images stay in buildah's storage and are also
# kept as OCI archives in $SANDBOXD_CI_CACHE (default /var/cache/sandboxd-ci), both named by a key over
# everything that goes into them (this file, the versions, the mirror, the trusted certificates), so a later run assembles nothing.

node_version=24.21.0
npm_version=10.9.9
debian_suite=bookworm

# The first Debian mirror apt's own sources name, so the base comes from where this machine's packages do.
apt_mirror() {
  local uri
  uri=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{ print $2; exit }')
  [ -n "$uri" ] || uri=$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{ print $2; exit }')
  echo "$uri"
}

# The certificates this machine trusts: the system's, and Node.js's extra ones where set.
host_ca_bundle() {
  cat /etc/ssl/certs/ca-certificates.crt 2>/dev/null || true
  if [ -n "${NODE_EXTRA_CA_CERTS:-}" ] && [ -f "$NODE_EXTRA_CA_CERTS" ]; then cat "$NODE_EXTRA_CA_CERTS"; fi
}

# ensure_image NAME ARCHIVE MAKE: NAME in buildah's storage, from ARCHIVE if it is there, else made by the
# function MAKE and then saved to ARCHIVE.
ensure_image() {
  local name=$1 archive=$2 make=$3
  if buildah inspect --type image "$name" >/dev/null 2>&1; then
    echo "base $name: in buildah's storage"
  elif [ -f "$archive" ]; then
    echo "base $name: loading $archive"
    buildah tag "$(buildah pull --quiet "oci-archive:$archive")" "$name"
  else
    echo "base $name: assembling"
    "$make" "$name"
    buildah push --quiet "$name" "oci-archive:$archive.partial:$name" >/dev/null
    mv "$archive.partial" "$archive"
  fi
}

make_runtime_base() {
  local name=$1 rootfs arch node_arch mirror work ctr mnt
  mirror=$(apt_mirror)
  arch=$(dpkg --print-architecture)
  case "$arch" in amd64) node_arch=x64 ;; arm64) node_arch=arm64 ;; *) echo "no Node.js package for $arch" >&2; return 1 ;; esac
  work=$(mktemp -d)
  rootfs="$work/rootfs"
  mkdir -p "$cache_dir/debootstrap"
  debootstrap --variant=minbase --cache-dir="$cache_dir/debootstrap" "$debian_suite" "$rootfs" ${mirror:+"$mirror"} >"$work/debootstrap.log" 2>&1 ||
    { tail -n 30 "$work/debootstrap.log" >&2; return 1; }
  # This machine's apt may be told to accept a mirror's Release files past their dates; the base's apt,
  # used while the Dockerfile is built here, must be told the same.
  apt-config dump | grep -E '^Acquire::Check-(Valid-Until|Date) ' >"$rootfs/etc/apt/apt.conf.d/99sandboxd-ci" || true
  # As Debian's slim images: no documentation, manuals or translations, now or from later installs.
  printf 'path-exclude /usr/share/%s/*\n' doc groff info linda lintian locale man >"$rootfs/etc/dpkg/dpkg.cfg.d/docker"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/* \
    "$rootfs"/usr/share/{doc,groff,info,linda,lintian,locale,man}/*
  # --pack-destination: run from npm test, npm hands down the project's own pack-destination (dist/) to every npm below it.
  (cd "$work" && with_retries 3 npm pack --loglevel=error --pack-destination "$work" "node-linux-$node_arch@$node_version" "npm@$npm_version" >/dev/null)
  tar -xzf "$work/node-linux-$node_arch-$node_version.tgz" -C "$rootfs/usr/local" --strip-components=1 package/bin package/include
  mkdir -p "$rootfs/usr/local/lib/node_modules/npm"
  tar -xzf "$work/npm-$npm_version.tgz" -C "$rootfs/usr/local/lib/node_modules/npm" --strip-components=1
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/local/bin/npx"
  # This machine may reach the registries through a TLS proxy of its own: the base trusts what this
  # machine trusts, so that npm in the Dockerfile's steps reaches the npm registry (node reads
  # NODE_EXTRA_CA_CERTS; the official images need nothing of the kind).
  mkdir -p "$rootfs/etc/ssl/certs"
  host_ca_bundle >"$rootfs/etc/ssl/certs/sandboxd-ci-host.pem"
  # The official images' user.
  chroot "$rootfs" sh -c 'groupadd --gid 1000 node && useradd --uid 1000 --gid node --shell /bin/bash --create-home node'
  ctr=$(buildah from scratch)
  mnt=$(buildah mount "$ctr")
  cp -a "$rootfs/." "$mnt/"
  buildah umount "$ctr" >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env NODE_VERSION="$node_version" \
    --env NODE_EXTRA_CA_CERTS=/etc/ssl/certs/sandboxd-ci-host.pem --cmd node "$ctr"
  buildah commit --quiet --rm "$ctr" "$name" >/dev/null
  rm -rf "$work"
}

make_build_base() {
  local name=$1 ctr
  ctr=$(buildah from "$RUNTIME_BASE")
  buildah run --isolation chroot "$ctr" -- sh -c \
    'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null && rm -rf /var/lib/apt/lists/*'
  buildah commit --quiet --rm "$ctr" "$name" >/dev/null
}

ensure_bases() {
  cache_dir=${SANDBOXD_CI_CACHE:-/var/cache/sandboxd-ci}
  mkdir -p "$cache_dir"
  local key
  key=$( { cat "${BASH_SOURCE[0]}"; echo "$(apt_mirror) $(dpkg --print-architecture)"; host_ca_bundle; } | sha256sum | cut -c1-16)
  RUNTIME_BASE="localhost/sandboxd-ci/node:$node_version-$debian_suite-slim-$key"
  BUILD_BASE="localhost/sandboxd-ci/node:$node_version-$debian_suite-$key"
  # Bases of older keys are of no further use.
  find "$cache_dir" -maxdepth 1 -name 'node-*.tar' ! -name "*-$key.tar" -delete
  local old
  for old in $(buildah images --noheading --format '{{.Name}}:{{.Tag}}'); do
    case "$old" in localhost/sandboxd-ci/node:*-"$key") ;; localhost/sandboxd-ci/node:*) buildah rmi "$old" >/dev/null 2>&1 || true ;; esac
  done
  ensure_image "$RUNTIME_BASE" "$cache_dir/node-slim-$key.tar" make_runtime_base
  ensure_image "$BUILD_BASE" "$cache_dir/node-build-$key.tar" make_build_base
}
