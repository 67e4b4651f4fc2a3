#!/usr/bin/env bash
# fio_compare.sh DIR DEPTH [BS] — fio's io_uring engine reading every file under DIR, as a
# reference point for `conveyor-bench files`, warm and cold. Prints one JSON line per case:
#   {"bench":"fio","engine":"io_uring","iodepth":64,"bs":"4k-4M","cold":false,"files":20000,
#    "bytes":...,"dir_bytes":...,"ios":...,"seconds":...,"files_per_s":...,"MB_per_s":...,
#    "p50_us":...,"p99_us":...}
#
# fio reads in blocks and never past a file's end: with a fixed block size a file smaller
# than it is skipped entirely (bs=1M reads almost nothing of an ImageNet-like set) and a
# partial last block is never read. So fio cannot read whole files of arbitrary sizes. The
# default BS is a range, 4k-4M (fio's bsrange): each I/O takes a random 4 KiB-multiple size
# that still fits in the file, so every file is read in ~4 I/Os, all but its last partial
# 4 KiB (~98% of the bytes). A single BS such as 4k reads the same bytes in ~27 I/Os per
# 110 KB file. `bytes` is what fio read, `dir_bytes` what the files hold; MB_per_s is from
# `bytes`, files_per_s counts all files. Latency percentiles are per I/O (fio's completion
# latency), not per file.
#
# Cold runs drop each file from the page cache first: with `conveyor-bench drop-cache` when
# it is found (CONVEYOR_BENCH, or the usual build folders), else with python3's
# os.posix_fadvise. fio's own invalidation is off in both cases so that it is not timed.
#
# Needs: fio (Debian package fio), python3.
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
    echo "usage: $0 DIR DEPTH [BS]   (e.g. $0 /tmp/conveyor-bench-files 64)" >&2
    exit 2
fi
dir=$(realpath "$1")
depth=$2
bs=${3:-4k-4M}
bs_option=--bs
if [[ $bs == *-* ]]; then bs_option=--bsrange; fi
[[ -d $dir ]] || { echo "$0: $dir is not a directory" >&2; exit 2; }
command -v fio >/dev/null || { echo "$0: fio not found (apt-get install fio)" >&2; exit 2; }

# shellcheck source-path=SCRIPTDIR source=find_bench.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_bench.sh"

drop_cache() {
    if [[ -n $bench_bin ]]; then
        "$bench_bin" drop-cache --dir "$dir" >&2
    else
        python3 - "$dir" <<'EOF'
import os, sys
os.sync()
n = 0
for root, _, names in os.walk(sys.argv[1]):
    for name in names:
        fd = os.open(os.path.join(root, name), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        n += 1
print(f"dropped {n} files from the page cache", file=sys.stderr)
EOF
    fi
}

files=$(find "$dir" -type f | wc -l)
dir_bytes=$(find "$dir" -type f -printf '%s\n' | awk '{s += $1} END {printf "%.0f", s}')
out=$(mktemp)
trap 'rm -f "$out"' EXIT

for cold in false true; do
    if [[ $cold == true ]]; then drop_cache; fi
    # One job, one thread, DEPTH I/Os in flight over DEPTH open files taken in turn: the
    # closest fio gets to "DEPTH whole-file reads in flight".
    fio --name=conveyor-compare --opendir="$dir" --rw=read "$bs_option=$bs" --ioengine=io_uring \
        --iodepth="$depth" --openfiles="$depth" --file_service_type=roundrobin --invalidate=0 \
        --output-format=json --output="$out" >/dev/null
    python3 - "$out" "$cold" "$depth" "$bs" "$files" "$dir_bytes" <<'EOF'
import json, sys
path, cold, depth, bs, files, dir_bytes = sys.argv[1:]
text = open(path).read()
doc = json.loads(text[text.index("{"):])  # fio may print notes before the JSON
job = doc["jobs"][0]
rd = job["read"]
seconds = rd["runtime"] / 1e3  # milliseconds
pct = rd.get("clat_ns", {}).get("percentile", {})
def us(key):
    v = pct.get(key)
    return None if v is None else round(v / 1e3, 3)
line = {
    "bench": "fio", "engine": "io_uring", "iodepth": int(depth), "bs": bs, "cold": cold == "true",
    "files": int(files), "bytes": rd["io_bytes"], "dir_bytes": int(dir_bytes), "ios": rd["total_ios"],
    "seconds": seconds,
    "files_per_s": round(int(files) / seconds, 1) if seconds > 0 else None,
    "MB_per_s": round(rd["io_bytes"] / 1e6 / seconds, 1) if seconds > 0 else None,
    "p50_us": us("50.000000"), "p99_us": us("99.000000"),
    "cpu_usr_pct": job.get("usr_cpu"), "cpu_sys_pct": job.get("sys_cpu"),
}
if job.get("error"):
    print(f"fio reported error {job['error']}", file=sys.stderr)
    sys.exit(1)
if rd["io_bytes"] < 0.5 * int(dir_bytes):
    print(f"warning: fio read {rd['io_bytes']} of {dir_bytes} bytes: files smaller than bs={bs} are skipped",
          file=sys.stderr)
print(json.dumps(line, separators=(",", ":")))
EOF
done
