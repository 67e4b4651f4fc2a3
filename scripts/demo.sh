#!/usr/bin/env bash
# Builds and runs the quickstart example (it makes its own small dataset).
# Usage: scripts/demo.sh [quickstart arguments...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

run() {
  echo "+ $*"
  "$@"
}

run bash scripts/install-deps.sh
run cmake --preset default
run cmake --build --preset default --target quickstart --parallel "${CONVEYOR_JOBS:-$(nproc)}"
run build/default/examples/quickstart "$@"
