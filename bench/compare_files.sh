#!/usr/bin/env bash
# compare_files.sh DIR — the file-reading engines side by side, warm and cold page cache:
# ifstream (sequential baseline), pread with 2, 4, 8, 16, 32 and 64 threads, conveyor's
# io_uring file source at concurrency 64, and a bare io_uring loop without conveyor (`ring`,
# two threads and a consumer: what the file source could reach on this machine). Prints
# every JSON line that `conveyor-bench files` writes (stdout), then a table of medians and
# the ratios uring/ring, ring/pread x2 and uring/pread x2 (stderr), and fails if the engines
# disagree on the bytes they read. How to read them: warm, the file source is judged as a
# fraction of ring (the ceiling for a reader that hands files to a consumer; two pread
# threads that reuse one buffer each are not a target there); cold, against pread x2.
#
# Environment: CONVEYOR_BENCH (the conveyor-bench binary; default: the usual build
# folders), WARM_REPEAT (default 3), COLD_REPEAT (default 2), PREAD_THREADS (default
# "2 4 8 16 32 64"), URING_CONCURRENCY (default 64), LIMIT (files to use; default all).
#
# Make a file set first, e.g.: conveyor-bench gen-files --dir /tmp/conveyor-bench-files --count 20000
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 DIR" >&2
    exit 2
fi
dir=$1
# shellcheck source-path=SCRIPTDIR source=find_bench.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_bench.sh"
[[ -n $bench_bin && -x $bench_bin ]] || { echo "$0: conveyor-bench not found; build it or set CONVEYOR_BENCH" >&2; exit 2; }

warm_repeat=${WARM_REPEAT:-3}
cold_repeat=${COLD_REPEAT:-2}
pread_threads=${PREAD_THREADS:-2 4 8 16 32 64}
uring_concurrency=${URING_CONCURRENCY:-64}
limit=${LIMIT:-0}

lines=$(mktemp)
trap 'rm -f "$lines"' EXIT

run() { # engine concurrency [--cold]
    local engine=$1 conc=$2 cold=${3:-}
    local repeat=$warm_repeat
    [[ -n $cold ]] && repeat=$cold_repeat
    echo "== $engine x$conc ${cold:-warm}" >&2
    # shellcheck disable=SC2086 # $cold is empty or one flag
    "$bench_bin" files --dir "$dir" --limit "$limit" --engine "$engine" --concurrency "$conc" --repeat "$repeat" $cold \
        | tee -a "$lines"
}

for cold in "" --cold; do
    run ifstream 1 $cold
    for t in $pread_threads; do run pread "$t" $cold; done
    run uring "$uring_concurrency" $cold
    run ring "$uring_concurrency" $cold
done

python3 - "$lines" <<'PY' >&2
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
groups = {}
for r in rows:
    groups.setdefault((r["cold"], r["engine"], r["concurrency"]), []).append(r)
print()
print(f"{'cache':5} {'engine':8} {'conc':>4} {'files/s':>9} {'MB/s':>8} {'p50 us':>8} {'p99 us':>8} {'CPU s/GB':>8} {'RSS MB':>7}  (medians)")
for (cold, engine, conc), rs in groups.items():
    med = lambda k: statistics.median(r[k] for r in rs)
    print(f"{'cold' if cold else 'warm':5} {engine:8} {conc:>4} {med('files_per_s'):>9.0f} {med('MB_per_s'):>8.0f} "
          f"{med('p50_us'):>8.0f} {med('p99_us'):>8.0f} {med('cpu_s_per_GB'):>8.2f} {max(r['max_rss_MB'] for r in rs):>7.0f}")
# The ratios that say how close conveyor is to what io_uring allows here (ring), and how
# close that is to the usual baseline (pread with 2 threads), by median files/s.
def median_fps(cold, engine, conc):
    rs = groups.get((cold, engine, conc))
    return statistics.median(r["files_per_s"] for r in rs) if rs else None
uring_conc = next((k[2] for k in groups if k[1] == "uring"), None)
for cold in (False, True):
    uring, ring, pread2 = (median_fps(cold, "uring", uring_conc), median_fps(cold, "ring", uring_conc),
                           median_fps(cold, "pread", 2))
    said = []
    if uring and ring:
        said.append(f"uring x{uring_conc} is {uring / ring:.2f}x of ring x{uring_conc} (a bare io_uring loop)")
    if ring and pread2:
        said.append(f"ring is {ring / pread2:.2f}x of pread x2")
    if uring and pread2:
        said.append(f"uring is {uring / pread2:.2f}x of pread x2")
    if said:
        print(f"{'cold' if cold else 'warm'}: " + "; ".join(said))
sizes = {r["bytes"] for r in rows}
if len(sizes) != 1:
    print(f"error: the engines read different byte counts: {sorted(sizes)}")
    sys.exit(1)
print(f"all {len(rows)} passes read {sizes.pop()} bytes")
PY
