#!/usr/bin/env bash
# Installs what is needed, configures and builds a preset, and runs the whole test suite.
# Usage: scripts/test.sh [--preset default|asan|tsan]
# Environment: CONVEYOR_JOBS (parallel compile jobs, default: all cores),
#              CTEST_PARALLEL_LEVEL (tests run at once, default: 1).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() {
  echo "usage: $0 [--preset default|asan|tsan]" >&2
  exit 2
}

preset=default
while (($#)); do
  case "$1" in
    --preset) (($# >= 2)) || usage; preset=$2; shift 2 ;;
    --preset=*) preset=${1#--preset=}; shift ;;
    -h|--help) usage ;;
    *) echo "test.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
case "$preset" in
  default|asan|tsan) ;;
  *) echo "test.sh: unknown preset '$preset'" >&2; usage ;;
esac

start=$SECONDS
report_time() {
  local rc=$? elapsed=$((SECONDS - start))
  printf 'test.sh: preset %s %s after %dm%02ds\n' "$preset" \
    "$([[ $rc == 0 ]] && echo passed || echo "FAILED (exit $rc)")" $((elapsed / 60)) $((elapsed % 60))
}
trap report_time EXIT

run() {
  echo "+ $*"
  "$@"
}

run bash scripts/install-deps.sh
run cmake --preset "$preset"
run cmake --build --preset "$preset" --parallel "${CONVEYOR_JOBS:-$(nproc)}"
run ctest --preset "$preset"
