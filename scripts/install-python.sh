#!/usr/bin/env bash
# Installs conveyor's Python package for Debian's python3: the Debian packages it needs
# (scripts/install-deps.sh), the module built in build/default, and the package put in the
# interpreter's site-packages (/usr/local/lib/python3.X/dist-packages) by
# `cmake --install build/default --component python`. Then imports it from elsewhere to check.
# Usage: scripts/install-python.sh   (as root, or through sudo for the install step)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

run() {
  echo "+ $*"
  "$@"
}

run bash scripts/install-deps.sh
run cmake --preset default
run cmake --build --preset default --target conveyor_python --parallel "${CONVEYOR_JOBS:-$(nproc)}"
as_root=()
if [[ "$(id -u)" != 0 ]] && command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
fi
run "${as_root[@]}" cmake --install build/default --component python
python=$(sed -n 's/^Python3_EXECUTABLE:FILEPATH=//p' build/default/CMakeCache.txt)
(cd / && run "${python:-/usr/bin/python3}" -c 'import conveyor; print("conveyor is installed:", conveyor.__file__)')
