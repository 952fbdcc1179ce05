# Sourced by side suites: apt_install PACKAGE... installs Debian packages that are missing, with apt-get
# (downloads land in apt's cache). Side suites run at the same time, so every apt-get here holds one lock
# and also waits for dpkg's own lock rather than failing on it.

apt_install() {
  local missing=() package
  for package in "$@"; do
    dpkg-query -W -f '${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing ${missing[*]} with apt-get"
  (
    flock 9
    apt-get update -qq -o DPkg::Lock::Timeout=600
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null
  ) 9>/var/lock/sandboxd-ci-apt.lock
}
