#!/bin/sh
# Build the images the container tests run, without any container registry:
#   localhost/multiworker-base:bookworm  Debian minbase from the mirror apt uses (debootstrap + podman import)
#   localhost/multiworker-tf:2.21        that base + Python + tensorflow==2.21.0 + tf-keras (images/python-tf)
# Each is kept when already present (checked by name). Installs podman, runc, debootstrap,
# docker-registry and apache2-utils when root and missing, and writes /etc/containers/containers.conf
# (runc; ulimits within this machine's) when absent. Elsewhere it says what is missing and stops:
# the container tests then skip and say why.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
BASE=${MW_BASE_IMAGE:-localhost/multiworker-base:bookworm}
TF=${MW_TF_IMAGE:-localhost/multiworker-tf:2.21}
PKGS="podman runc debootstrap docker-registry apache2-utils"

missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing$missing"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  else
    echo "note: not installed:$missing (container tests skip)"; exit 0
  fi
fi
conf=/etc/containers/containers.conf
if [ ! -e "$conf" ] && [ "$(id -u)" = 0 ]; then
  nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
  [ "$nofile" = unlimited ] && nofile=1048576; [ "$nproc" = unlimited ] && nproc=1048576
  [ "$nofile" -gt 65536 ] && nofile=65536; [ "$nproc" -gt 65536 ] && nproc=65536
  mkdir -p /etc/containers
  printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n\n[engine]\nruntime = "runc"\n' \
    "$nofile" "$nofile" "$nproc" "$nproc" > "$conf"
  echo "wrote $conf (runc; nofile=$nofile, nproc=$nproc)"
fi
if ! podman info >/dev/null 2>&1; then
  echo "note: podman does not run here: $(podman info 2>&1 | tail -1) (container tests skip)"; exit 0
fi
if ! podman image exists "$BASE"; then
  mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)\/*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
  [ -n "$mirror" ] || mirror=$(sed -n 's/^deb \(http[^ ]*debian\)\/* .*/\1/p' /etc/apt/sources.list 2>/dev/null | head -1)
  suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
  root=$(mktemp -d)
  echo "debootstrap --variant=minbase $suite from ${mirror:-http://deb.debian.org/debian}"
  if debootstrap --variant=minbase "$suite" "$root/fs" "${mirror:-http://deb.debian.org/debian}" >"$root/log" 2>&1 \
     && tar -C "$root/fs" -c . | podman import -q - "$BASE" >/dev/null; then
    echo "imported $BASE"
  else
    echo "note: could not make $BASE: $(tail -1 "$root/log") (container tests skip)"; rm -rf "$root"; exit 0
  fi
  rm -rf "$root"
fi
if ! podman image exists "$TF"; then
  ctx=$(mktemp -d)
  cp "$here/python-tf/Dockerfile" "$ctx/"
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/" 2>/dev/null || : > "$ctx/ca-certificates.crt"
  if podman build -q --pull=never --build-arg BASE="$BASE" -t "$TF" "$ctx" >"$ctx/log" 2>&1; then
    echo "built $TF"
  else
    echo "note: could not build $TF: $(tail -1 "$ctx/log") (container tests skip)"
  fi
  rm -rf "$ctx"
fi
