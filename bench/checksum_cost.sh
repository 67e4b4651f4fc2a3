#!/usr/bin/env bash
# checksum_cost.sh — what verifying S3 checksums costs `conveyor-bench s3-get`: the same GETs
# with checksums verified (the default) and with --no-checksums, alternated, against the
# no-delay nginx bucket (bench/nginx_bucket.sh --checksums), which answers each whole-object
# GET that asks with the object's CRC64NVME, as S3 does for new objects.
#
#   checksum_cost.sh [--objects N] [--size BYTES] [--big-MB M] [--rounds R] [--concurrency C]
#                    [--build-dir B] [--work-dir W] [--check-targets]
#
# Three cases, each run R times (default 5) in each mode, the modes alternating:
#   listed  N objects (default 4000) of about SIZE bytes (default 110000) read by prefix: the
#           listing gives each size, so each is one plain GET checked whole;
#   index   the same objects read from an index of keys (sizes unknown): one plain GET each,
#           its first part read when it is large (none is), checked whole;
#   big     one object of M MiB (default 512) in 8 MiB ranged parts: a plain GET for the first
#           part and the checksum, the rest ranged, the parts' CRCs combined.
# Prints every s3-get JSON line (stdout), then one JSON line per case
# {"bench":"checksum-cost","case":...,"verified":median,"off":median,"ratio":...,"unit":...}
# and a table (stderr). The target (issue 29): verified >= 0.95x off. --check-targets exits 1
# when a case misses it. The data set is kept in W (default $TMPDIR/conveyor-checksum-bench)
# and reused when present; the CRCs come from tests/s3/server/s3_checksums.py (not conveyor's).
set -euo pipefail

objects=4000 size=110000 big_mb=512 rounds=5 concurrency=64 build_dir="" check_targets=0
work_dir=${TMPDIR:-/tmp}/conveyor-checksum-bench
while (($#)); do
    case $1 in
        --objects) objects=${2:?}; shift 2 ;;
        --size) size=${2:?}; shift 2 ;;
        --big-MB) big_mb=${2:?}; shift 2 ;;
        --rounds) rounds=${2:?}; shift 2 ;;
        --concurrency) concurrency=${2:?}; shift 2 ;;
        --build-dir) build_dir=${2:?}; shift 2 ;;
        --work-dir) work_dir=${2:?}; shift 2 ;;
        --check-targets) check_targets=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
        *) echo "$0: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
for v in objects size big_mb rounds concurrency; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$0: --${v//_/-} wants a positive integer" >&2; exit 2; }
done
# shellcheck source-path=SCRIPTDIR source=find_bench.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_bench.sh"
[[ -n ${bench_bin:-} && -x $bench_bin ]] || { echo "checksum_cost: no conveyor-bench: build it (cmake --build build/default --target conveyor-bench) or give --build-dir" >&2; exit 2; }
"$here/nginx_bucket.sh" install
py=${CONVEYOR_PYTHON:-/usr/bin/python3}
export AWS_ACCESS_KEY_ID=conveyor-bench AWS_SECRET_ACCESS_KEY=conveyor-bench-secret AWS_REGION=us-east-1
unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3

bucket=bench
mkdir -p "$work_dir/data/$bucket"
work_dir=$(realpath "$work_dir")
root=$work_dir/data
set_prefix=small-n$objects-s$size/
big_key=big/$big_mb-MiB.bin
sums=$work_dir/checksums-n$objects-s$size-b$big_mb.txt
index=$work_dir/index-n$objects-s$size.json
big_index=$work_dir/index-big-$big_mb.json
printf '["%s"]\n' "$big_key" >"$big_index"

echo "== data set in $root/$bucket ($objects objects of $size ±20%, one of $big_mb MiB) and its CRC64NVMEs" >&2
"$py" - "$root/$bucket" "$set_prefix" "$objects" "$size" "$big_key" "$((big_mb << 20))" "$sums" "$index" "$here/../tests/s3/server" <<'PY'
import json, os, random, sys
base, prefix, n, size, big_key, big_size, sums, index, helpers = sys.argv[1:]
sys.path.insert(0, helpers)
import s3_checksums
n, size, big_size = int(n), int(size), int(big_size)
rng = random.Random(29)
files = [(prefix + "obj-%06d.bin" % i, max(1, int(size * rng.uniform(0.8, 1.2)))) for i in range(n)]
files.append((big_key, big_size))
if not os.path.exists(sums):
    lines = []
    for key, length in files:
        path = os.path.join(base, key)
        if not os.path.exists(path) or os.path.getsize(path) != length:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(os.urandom(length))
        with open(path, "rb") as f:
            data = f.read()
        lines.append("%s/%s crc64nvme %s\n" % (os.path.basename(base), key, s3_checksums.digest("crc64nvme", data)))
    with open(sums + ".tmp", "w") as f:
        f.writelines(lines)
    os.rename(sums + ".tmp", sums)
with open(index, "w") as f:
    json.dump([k for k, _ in files[:-1]], f)
PY

tmp=$(mktemp -d)
state=$tmp/nginx
cleanup() {
    [[ -f $state/nginx.pid ]] && "$here/nginx_bucket.sh" stop --state-dir "$state" || true
    rm -rf "$tmp"
}
trap cleanup EXIT
endpoint=$("$here/nginx_bucket.sh" start --root "$root" --state-dir "$state" --checksums "$sums")
records=$tmp/records.jsonl
: >"$records"

run() { # CASE MODE ARGS...
    local case=$1 mode=$2 line
    shift 2
    local extra=()
    [[ $mode == off ]] && extra=(--no-checksums)
    line=$("$bench_bin" s3-get --endpoint "$endpoint" --bucket "$bucket" --region us-east-1 --concurrency "$concurrency" \
        "$@" "${extra[@]}" 2>"$tmp/err") || { cat "$tmp/err" >&2; exit 1; }
    line=$(tail -1 <<<"$line")
    echo "$line"
    "$py" - "$case" "$mode" "$line" >>"$records" <<'PY'
import json, sys
case, mode, line = sys.argv[1:]
r = json.loads(line)
if mode == "verified" and r["checksums_verified"] != r["objects"]:
    sys.exit("checksum_cost: %s: %d objects, %d checksums verified" % (case, r["objects"], r["checksums_verified"]))
print(json.dumps({"case": case, "mode": mode, "objects_per_s": r["objects_per_s"], "MB_per_s": r["MB_per_s"],
                  "cpu_us_per_get": r["cpu_us_per_get"]}))
PY
}

# One pass unmeasured, so that the page cache holds the files and nginx's file cache is warm.
run warmup verified --prefix "$set_prefix" >/dev/null
run warmup verified --index "$big_index" >/dev/null
for ((r = 1; r <= rounds; ++r)); do
    echo "== round $r of $rounds" >&2
    for mode in verified off; do
        [[ $((r % 2)) == 0 ]] && mode=$([[ $mode == verified ]] && echo off || echo verified)
        run listed "$mode" --prefix "$set_prefix"
        run index "$mode" --index "$index"
        run big "$mode" --index "$big_index"
    done
done

"$py" - "$records" "$check_targets" <<'PY'
import json, statistics, sys
records, check = sys.argv[1], sys.argv[2] == "1"
rows = [json.loads(l) for l in open(records) if l.strip()]
missed = []
table = []
for case, unit in (("listed", "objects_per_s"), ("index", "objects_per_s"), ("big", "MB_per_s")):
    by = {m: [r[unit] for r in rows if r["case"] == case and r["mode"] == m] for m in ("verified", "off")}
    cpu = {m: statistics.median([r["cpu_us_per_get"] for r in rows if r["case"] == case and r["mode"] == m]) for m in by}
    med = {m: statistics.median(v) for m, v in by.items()}
    ratio = med["verified"] / med["off"]
    print(json.dumps({"bench": "checksum-cost", "case": case, "unit": unit, "verified": med["verified"], "off": med["off"],
                      "ratio": ratio, "verified_runs": by["verified"], "off_runs": by["off"],
                      "cpu_us_per_get_verified": cpu["verified"], "cpu_us_per_get_off": cpu["off"]}))
    table.append((case, unit, med, by, ratio, cpu))
    if ratio < 0.95:
        missed.append(case)
w = sys.stderr.write
w("\nchecksum cost (medians of %d runs each, alternated; target: verified >= 0.95x off)\n" % len(table[0][3]["off"]))
w("%-7s %-14s %12s %12s %7s %22s %18s\n" % ("case", "unit", "verified", "off", "ratio", "spread verified / off", "CPU us/GET v / off"))
for case, unit, med, by, ratio, cpu in table:
    w("%-7s %-14s %12.1f %12.1f %6.3fx %10.0f-%-5.0f/ %.0f-%.0f %8.1f / %.1f\n" % (
        case, unit, med["verified"], med["off"], ratio, min(by["verified"]), max(by["verified"]), min(by["off"]), max(by["off"]),
        cpu["verified"], cpu["off"]))
if missed:
    w("target missed: %s\n" % ", ".join(missed))
    if check:
        sys.exit(1)
PY
