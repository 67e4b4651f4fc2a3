#!/usr/bin/env bash
# Installs what is needed, builds, and runs the whole test suite: what CI runs (.ci/run).
#
# Usage: scripts/test.sh [--preset default|asan|tsan] [--stages LIST]
#
# Without --preset, the whole suite in stages, each program compiled once:
#   other    the `default` preset (optimised) with CONVEYOR_TESTS=other: the library,
#            examples, benchmarks and Python module, and the tests of those, of the headers,
#            the packaging, the documentation's examples and the compile budget;
#   asan     the unit tests (the library's own code, label `unit`) under ASan+UBSan;
#   tsan     the unit tests of the threaded parts (label `threaded`) under TSan;
#   fuzz     each libFuzzer target for a short fixed time, after its saved regressions
#            (scripts/fuzz.sh: preset `fuzz`, clang; as many targets at once as compile jobs).
# A failed stage does not stop the next ones; the run fails if any did, and ends with a
# table of the stages, their times and results.
# --preset P builds one preset and runs its tests (default: every test, unit tests included,
# in one optimised build); --stages a,b runs only those stages of the whole suite.
#
# Environment: CONVEYOR_JOBS (parallel compile jobs, default: all cores),
#              CTEST_PARALLEL_LEVEL (tests run at once, default: 1),
#              CONVEYOR_FUZZ_SECONDS (each fuzz target's time in the fuzz stage, default 10:
#              a smoke run beside the saved regressions; campaigns run scripts/fuzz.sh longer).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() {
  echo "usage: $0 [--preset default|asan|tsan] [--stages other,asan,tsan,fuzz]" >&2
  exit 2
}

preset="" stages="other,asan,tsan,fuzz"
while (($#)); do
  case "$1" in
    --preset) (($# >= 2)) || usage; preset=$2; shift 2 ;;
    --preset=*) preset=${1#--preset=}; shift ;;
    --stages) (($# >= 2)) || usage; stages=$2; shift 2 ;;
    --stages=*) stages=${1#--stages=}; shift ;;
    -h|--help) usage ;;
    *) echo "test.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
case "$preset" in
  ""|default|asan|tsan) ;;
  *) echo "test.sh: unknown preset '$preset'" >&2; usage ;;
esac
IFS=, read -r -a stage_list <<<"$stages"
for s in "${stage_list[@]}"; do
  case "$s" in
    other|asan|tsan|fuzz) ;;
    *) echo "test.sh: unknown stage '$s' (stages: other, asan, tsan, fuzz)" >&2; usage ;;
  esac
done

jobs=${CONVEYOR_JOBS:-$(nproc)}
# The packaging tests build the library again, with the build's flags, in folders of their
# own: ccache finds the build's objects for them only when it leaves the working directory
# out of its hash (it hashes it for -g by default; the objects' debug information then
# names the folder of the first compile).
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR-1}
start=$SECONDS
summary=()
failed=0

run() {
  echo "+ $*"
  "$@"
}

# stage NAME COMMAND...: runs the command, times it, and records how it ended.
stage() {
  local name=$1 t0=$SECONDS rc=0
  shift
  echo "=== test.sh: stage $name"
  "$@" || rc=$?
  local elapsed=$((SECONDS - t0))
  summary+=("$(printf '  %-7s %3dm%02ds  %s' "$name" $((elapsed / 60)) $((elapsed % 60)) \
    "$([[ $rc == 0 ]] && echo passed || echo "FAILED (exit $rc)")")")
  ((rc == 0)) || failed=1
}

# preset P [cmake -D...]: configures, builds and tests one preset ($ctest_args: more ctest
# arguments).
declare -A ran=() # the build folders whose tests this run ran
preset_run() {
  local p=$1
  shift
  ran[build/$p]=1
  rm -f "build/$p/Testing/Temporary/LastTestsFailed.log"
  run cmake --preset "$p" "$@" &&
    run cmake --build --preset "$p" --parallel "$jobs" &&
    run ctest --preset "$p" ${ctest_args[@]+"${ctest_args[@]}"}
}
ctest_args=()

# failed_tests DIR: each test the last ctest run in build folder DIR failed, with the last
# lines of its output, so that the end of the run's log says what failed and why.
failed_tests() {
  local dir=$1 list=$1/Testing/Temporary/LastTestsFailed.log log=$1/Testing/Temporary/LastTest.log
  [[ -s $list ]] || return 0
  local line name
  while IFS= read -r line; do
    name=${line#*:}
    echo "test.sh: FAILED in ${dir#build/}: $name; the end of its output:"
    if [[ -f $log ]]; then
      awk -v t="$name" '$0 ~ ("Testing: " t "$") {f = 1} f && /^<end of output>/ {exit} f' "$log" | tail -n 25 | sed 's/^/    /'
    fi
  done <"$list"
}

finish() {
  local rc=$? elapsed=$((SECONDS - start))
  ((rc != 0 || !failed)) || rc=1 # a failed stage fails the run, however the script ended
  local d
  for d in build/default build/asan build/tsan; do
    [[ -n ${ran[$d]:-} ]] && failed_tests "$d"
  done
  if ((${#summary[@]})); then
    echo "test.sh: stages"
    printf '%s\n' "${summary[@]}"
  fi
  printf 'test.sh: %s %s after %dm%02ds\n' "${preset:+preset $preset}${preset:-whole suite}" \
    "$([[ $rc == 0 ]] && echo passed || echo "FAILED (exit $rc)")" $((elapsed / 60)) $((elapsed % 60))
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

run bash scripts/install-deps.sh

if [[ -n $preset ]]; then
  # A developer's build of one preset; default builds every test (CONVEYOR_TESTS=all).
  if [[ $preset == default ]]; then
    preset_run default -DCONVEYOR_TESTS=all
  else
    preset_run "$preset"
  fi
  exit
fi

for s in "${stage_list[@]}"; do
  case "$s" in
    # The other stage's tests two at a time: most of their time is single-threaded (one
    # compile of the budget's at a time, pytest) or waiting; none times the machine.
    other)
      ctest_args=(--parallel 2)
      stage other preset_run default -DCONVEYOR_TESTS=other
      ctest_args=() ;;
    asan)  stage asan preset_run asan ;;
    tsan)  stage tsan preset_run tsan ;;
    fuzz)
      stage fuzz bash scripts/fuzz.sh --seconds "${CONVEYOR_FUZZ_SECONDS:-10}" --jobs "$jobs" ;;
  esac
done
exit $failed
