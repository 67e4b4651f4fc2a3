#!/usr/bin/env bash
# Installs the Debian 12 packages conveyor needs to build, test, benchmark and run its demo.
# Idempotent: when everything is already installed it touches nothing (no apt at all).
# Extra package names given as arguments are installed too (scripts/fuzz.sh adds clang's).
# Runs as root, or through sudo when not root. CONVEYOR_SKIP_DEPS=1 skips it entirely.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(
  build-essential cmake ninja-build ccache pkg-config
  liburing-dev libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev libssl-dev libturbojpeg0-dev libjpeg62-turbo-dev libspng-dev libdlpack-dev libisal-dev
  libwebp-dev libavif-dev libdav1d-dev libavif-bin
  doctest-dev libcli11-dev libbenchmark-dev
  fio golang-1.19-src zlib1g-dev libarchive-tools
  python3-botocore python3-awscrt openssl curl python3-torch python3-torchvision python3-pil python3-numpy
  pybind11-dev python3-dev python3-pytest
  python3-setuptools python3-wheel python3-wheel-whl python3-build python3-pybind11 python3-venv
)
packages+=("$@")
# The S3 tests run s3rver (npm) under Node.js: Debian's nodejs and npm unless a node is already here.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi

if [[ "${CONVEYOR_SKIP_DEPS:-0}" == 1 ]]; then
  echo "install-deps: CONVEYOR_SKIP_DEPS=1, not checking system packages"
  exit 0
fi

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: error: dpkg-query/apt-get not found; this script supports Debian 12." >&2
  echo "install-deps: install these packages (or their equivalents) yourself: ${packages[*]}" >&2
  echo "install-deps: then rerun with CONVEYOR_SKIP_DEPS=1" >&2
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

if [[ "$(id -u)" == 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "install-deps: error: need to install ${missing[*]}, but not running as root and sudo is not available." >&2
  echo "install-deps: rerun as root, or install them yourself." >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
echo "+ ${as_root[*]:+${as_root[*]} }apt-get update"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
echo "+ ${as_root[*]:+${as_root[*]} }apt-get install -y --no-install-recommends ${missing[*]}"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
echo "install-deps: done"
