#!/usr/bin/env bash
# Builds the libFuzzer targets (preset `fuzz`: clang-14, ASan + UBSan), writes their seed
# corpora (scripts/fuzz_corpus.py), replays fuzz/regressions/<target>/ and runs each target
# for a fixed time. Prints one JSON line per target and a table; exits non-zero when any
# target found something, naming the input that shows it.
#
# Usage: scripts/fuzz.sh [--seconds N] [--jobs J] [TARGET...]
#   --seconds N  how long each target runs (default 10)
#   --jobs J     targets run at once (default 1)
#   TARGET       tar tar_gzip samples index_json labels aws_config sigv4 s3_xml
#                http_response jpeg png webp avif (default: all)
# Environment: CONVEYOR_JOBS (parallel compile jobs, default: all cores, as in test.sh),
#              CONVEYOR_SKIP_DEPS=1 skips the package check (as in install-deps.sh).
# Corpora grow under build/fuzz/corpus/<target>/ from run to run; what a target finds is
# written to build/fuzz/findings/<target>/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

all_targets=(tar tar_gzip samples index_json labels aws_config sigv4 s3_xml http_response jpeg png webp avif)
declare -A dict=([tar]=tar [tar_gzip]=tar [samples]=tar [index_json]=json [labels]=json [aws_config]=ini
                 [sigv4]=sigv4 [s3_xml]=xml [http_response]=http [jpeg]=jpeg [png]=png [webp]=webp [avif]=avif)
declare -A max_len=([tar]=65536 [tar_gzip]=65536 [samples]=4096 [index_json]=16384 [labels]=16384
                    [aws_config]=8192 [sigv4]=4096 [s3_xml]=65536 [http_response]=65536 [jpeg]=262144 [png]=262144
                    [webp]=262144 [avif]=262144)

usage() {
  echo "usage: $0 [--seconds N] [--jobs J] [TARGET...]" >&2
  echo "targets: ${all_targets[*]}" >&2
  exit 2
}

seconds=10
jobs=1
targets=()
while (($#)); do
  case "$1" in
    --seconds) (($# >= 2)) || usage; seconds=$2; shift 2 ;;
    --seconds=*) seconds=${1#--seconds=}; shift ;;
    --jobs) (($# >= 2)) || usage; jobs=$2; shift 2 ;;
    --jobs=*) jobs=${1#--jobs=}; shift ;;
    -h|--help) usage ;;
    -*) echo "fuzz.sh: unknown option '$1'" >&2; usage ;;
    *) [[ -n "${dict[$1]:-}" ]] || { echo "fuzz.sh: unknown target '$1'" >&2; usage; }; targets+=("$1"); shift ;;
  esac
done
[[ "$seconds" =~ ^[0-9]+$ && "$jobs" =~ ^[1-9][0-9]*$ ]] || usage
((${#targets[@]})) || targets=("${all_targets[@]}")

# clang and its libFuzzer runtime (Debian: libclang-rt-14-dev holds libclang_rt.fuzzer),
# llvm-symbolizer for readable stacks, Go's sources for the seeds; and the library's own.
bash scripts/install-deps.sh clang-14 libclang-rt-14-dev llvm-14 golang-1.19-src python3

build=build/fuzz
start=$SECONDS
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz --parallel "${CONVEYOR_JOBS:-$(nproc)}" --target "${targets[@]/#/fuzz_}"
echo "fuzz.sh: built ${#targets[@]} targets in $((SECONDS - start)) s"

# Debian's interpreter has the packages the seeds are made with (PIL for WebP); a python3
# earlier on PATH may lack them.
py=$( [[ -x /usr/bin/python3 ]] && echo /usr/bin/python3 || command -v python3)
"$py" scripts/fuzz_corpus.py "$build/corpus/seeds"

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
symbolizer=$(command -v llvm-symbolizer-14 || command -v llvm-symbolizer || true)
[[ -n "$symbolizer" ]] && export ASAN_SYMBOLIZER_PATH=$symbolizer

# run_target NAME: replays the regressions, then fuzzes; leaves NAME's log and summary in $build/logs.
run_target() {
  local t=$1 exe=$build/fuzz/fuzz_$1 logs=$build/logs
  local corpus=$build/corpus/$t findings=$build/findings/$t
  # A target without seeds fuzzes from nothing (libFuzzer refuses a folder that is not there).
  mkdir -p "$corpus" "$findings" "$logs" "$build/corpus/seeds/$t"
  local flags=(-timeout=10 -rss_limit_mb=2048 -max_len="${max_len[$t]}" -dict="fuzz/dict/${dict[$t]}.dict")
  local found=()
  # Inputs that crashed before must not crash again (each is run once).
  local regress=(fuzz/regressions/"$t"/*)
  if [[ -e "${regress[0]}" ]]; then
    if ! nice -n 10 "$exe" "${flags[@]}" -runs=1 "${regress[@]}" >"$logs/$t.regressions.log" 2>&1; then
      found+=("regression replay failed: see $logs/$t.regressions.log")
    fi
  fi
  nice -n 10 "$exe" "${flags[@]}" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$findings/" "$corpus" "$build/corpus/seeds/$t" >"$logs/$t.log" 2>&1 || true
  local f
  for f in "$findings"/*; do
    [[ -e "$f" ]] && found+=("$f")
  done
  local execs corp
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$t.log" | tail -1)
  # A target that ran nothing did not fuzz: it fails rather than pass unseen.
  ((${execs:-0} > 0)) || found+=("ran no input (see $logs/$t.log)")
  corp=$(find "$corpus" -type f | wc -l)
  printf '{"target": "%s", "seconds": %d, "execs": %d, "corpus": %d, "findings": %d}\n' \
    "$t" "$seconds" "${execs:-0}" "$corp" "${#found[@]}" >"$logs/$t.json"
  printf '%s\n' "${found[@]}" >"$logs/$t.findings"
}

running=0
for t in "${targets[@]}"; do
  rm -rf "$build/findings/$t"
  run_target "$t" &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

status=0
for t in "${targets[@]}"; do cat "$build/logs/$t.json"; done
printf '\n%-14s %8s %12s %8s %9s\n' target seconds execs corpus findings
for t in "${targets[@]}"; do
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%-14s %8d %12d %8d %9d" % (r["target"], r["seconds"], r["execs"], r["corpus"], r["findings"]))' \
    "$build/logs/$t.json"
done
for t in "${targets[@]}"; do
  while IFS= read -r f; do
    [[ -n "$f" ]] || continue
    echo "fuzz.sh: $t: FINDING: $f (log: $build/logs/$t.log)" >&2
    status=1
  done <"$build/logs/$t.findings"
done
exit $status
