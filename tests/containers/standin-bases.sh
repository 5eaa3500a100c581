#!/usr/bin/env bash
# The stand-in base images for building Dockerfile.triton and Dockerfile.api where their real bases cannot be
# pulled (no Docker Hub, no nvcr.io here):
#
#   local/debian:bookworm               Debian bookworm (debootstrap --variant=minbase), imported once
#   local/python:3.11-slim-standin      for python:3.11-slim                      (python-standin.Dockerfile)
#   local/tritonserver-standin          for nvcr.io/nvidia/tritonserver:25.08-py3 (tritonserver-standin.Dockerfile)
#
# Usage: tests/containers/standin-bases.sh [--rebuild]
#   --rebuild   debootstrap and import the Debian base again (the two stand-ins are always rebuilt from
#               it, which Docker's layer cache makes quick when nothing changed)
# Needs a running Docker daemon; debootstrap is installed from Debian when missing (as root).
# Docker builds use the host network (--network host), as everything here does.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
DEBIAN_IMAGE=local/debian:bookworm
PYTHON_STANDIN=local/python:3.11-slim-standin
TRITON_STANDIN=local/tritonserver-standin
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
REBUILD=0
[ "${1:-}" = "--rebuild" ] && REBUILD=1

say() { echo "standin-bases: $*"; }
die() { echo "standin-bases: FAILED: $*" >&2; exit 1; }

docker info >/dev/null 2>&1 || die "no Docker daemon answers (tests/containers/check.py starts one)"

if [ "$REBUILD" = 1 ] || ! docker image inspect "$DEBIAN_IMAGE" >/dev/null 2>&1; then
    if ! command -v debootstrap >/dev/null; then
        [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || die "debootstrap is missing (apt-get install debootstrap, as root)"
        say "installing debootstrap from Debian"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    fi
    rootfs="$(mktemp -d)"
    trap 'rm -rf "$rootfs"' EXIT
    say "debootstrap --variant=minbase bookworm (about a minute)"
    debootstrap --variant=minbase bookworm "$rootfs" "$DEBIAN_MIRROR" >"$rootfs.log" 2>&1 \
        || { tail -20 "$rootfs.log" >&2; rm -f "$rootfs.log"; die "debootstrap failed"; }
    rm -f "$rootfs.log"
    # Debian's security and point-release updates too, as Debian's own images have them.
    cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $DEBIAN_MIRROR bookworm main
deb $DEBIAN_MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | docker import --change 'CMD ["bash"]' - "$DEBIAN_IMAGE" >/dev/null
    rm -rf "$rootfs"
    trap - EXIT
    say "imported $DEBIAN_IMAGE"
else
    say "$DEBIAN_IMAGE is there (--rebuild makes it again)"
fi

# The stand-in Triton's server: the nvidia-pytriton pin of pyproject.toml's `server` extra.
PYTRITON_REQUIREMENT="$("${PYTHON:-python3}" -c '
import sys, tomllib
extra = tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["server"]
(pin,) = [spec for spec in extra if spec.startswith("nvidia-pytriton==")]
print(pin)' "$HERE/../../pyproject.toml")" \
    || die "could not read the nvidia-pytriton pin from pyproject.toml (needs Python 3.11 or newer as \$PYTHON or python3)"

# The build context: the two Dockerfiles and the certificate authorities this machine adds to Debian's.
context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
cp "$HERE"/python-standin.Dockerfile "$HERE"/tritonserver-standin.Dockerfile "$context"/
mkdir "$context/ca"
find /usr/local/share/ca-certificates -maxdepth 1 -name '*.crt' -exec cp {} "$context/ca/" \; 2>/dev/null || true

build() {  # image dockerfile [docker build options]
    say "building $1"
    local image="$1" dockerfile="$2" log="$context/$2.log"
    shift 2
    docker build --network host --label food11.check=standin-base --build-arg DEBIAN_IMAGE="$DEBIAN_IMAGE" "$@" \
        -f "$context/$dockerfile" -t "$image" "$context" >"$log" 2>&1 \
        || { tail -30 "$log" >&2; die "building $1 failed (above: the end of its log)"; }
}
build "$PYTHON_STANDIN" python-standin.Dockerfile
build "$TRITON_STANDIN" tritonserver-standin.Dockerfile --build-arg PYTRITON_REQUIREMENT="$PYTRITON_REQUIREMENT"
say "ready: $PYTHON_STANDIN, $TRITON_STANDIN ($PYTRITON_REQUIREMENT)"
