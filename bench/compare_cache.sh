#!/usr/bin/env bash
# compare_cache.sh — the node-local cache (store::cached_store) against its baselines, with
# `conveyor-bench shards` over the same tar shards three ways, alternated ROUNDS times:
#   local      the shards as local files (second pass of --repeat 2: warm page cache)
#   uncached   the same files as s3:// objects from bench/nginx_bucket.sh (first-byte delay)
#   cached     the same s3:// objects through --cache DIR, the folder emptied first:
#              pass 0 = first epoch (fetch + write), pass 1 = second epoch (from the folder)
# then 8 processes reading the shards through one fresh cache at once: the sum of their
# cache_misses is how many GETs of shards the cache made (one per shard when it works; the
# test `conveyor-store-server-tests` counts them at a proxy).
#
# usage: compare_cache.sh [--shards 12] [--shard-MB 48] [--delay-ms 5] [--rounds 3] [--out FILE]
# Prints one JSON line per measurement (to FILE too when given) and a summary of medians.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
shards=12 shard_mb=48 delay_ms=5 rounds=3 out=
while (($#)); do
    case $1 in
        --shards) shards=${2:?}; shift 2 ;;
        --shard-MB) shard_mb=${2:?}; shift 2 ;;
        --delay-ms) delay_ms=${2:?}; shift 2 ;;
        --rounds) rounds=${2:?}; shift 2 ;;
        --out) out=${2:?}; shift 2 ;;
        *) echo "compare_cache.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
bench=${CONVEYOR_BENCH:-}
if [[ -z $bench ]]; then
    for b in "$here/../build/default/bench/conveyor-bench" "$here/../build/bench/conveyor-bench"; do
        if [[ -x $b ]]; then bench=$b; break; fi
    done
fi
[[ -x $bench ]] || { echo "compare_cache.sh: conveyor-bench not found (set CONVEYOR_BENCH)" >&2; exit 2; }
export AWS_ACCESS_KEY_ID=conveyor-bench AWS_SECRET_ACCESS_KEY=conveyor-bench-secret AWS_REGION=us-east-1
unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3

tmp=$(mktemp -d "${TMPDIR:-/tmp}/conveyor-cache-bench.XXXXXX")
cleanup() {
    [[ -f $tmp/nginx/nginx.pid ]] && "$here/nginx_bucket.sh" stop --state-dir "$tmp/nginx" || true
    rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$tmp/root/bench" "$tmp/nginx"
last=$(printf '%03d' $((shards - 1)))
# Tar shards of ~110 KB members of random bytes (incompressible, as JPEGs are).
/usr/bin/python3 - "$tmp/root/bench" "$shards" "$shard_mb" <<'PY'
import io, os, sys, tarfile, random
root, n, mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(7)
for s in range(n):
    with tarfile.open(os.path.join(root, "shard-%03d.tar" % s), "w", format=tarfile.USTAR_FORMAT) as t:
        size, i = 0, 0
        while size < mb << 20:
            for ext, length in (("jpg", rng.randint(88000, 132000)), ("cls", 3)):
                data = os.urandom(length)
                info = tarfile.TarInfo("s%03d-%06d.%s" % (s, i, ext))
                info.size = length
                t.addfile(info, io.BytesIO(data))
                size += length + 512
            i += 1
PY
endpoint=$("$here/nginx_bucket.sh" start --root "$tmp/root" --delay-ms "$delay_ms" --state-dir "$tmp/nginx")
local_spec="$tmp/root/bench/shard-{000..$last}.tar"
remote_spec="s3://bench/shard-{000..$last}.tar"
emit() { # case pass-to-keep, JSON lines on stdin
    local case=$1 keep=$2
    while IFS= read -r line; do
        [[ $line == \{* ]] || continue
        if [[ $keep == all || $line == *"\"repeat\":$keep,"* ]]; then
            line="{\"case\":\"$case\",${line#\{}"
            echo "$line"
            echo "$line" >> "$tmp/all.jsonl"
            if [[ -n $out ]]; then echo "$line" >> "$out"; fi
        fi
    done
}
for ((r = 0; r < rounds; r++)); do
    echo "== round $r" >&2
    "$bench" shards "$local_spec" --repeat 2 2>/dev/null | emit local 1
    "$bench" shards "$remote_spec" --endpoint "$endpoint" --repeat 1 2>/dev/null | emit uncached 0
    rm -rf "$tmp/cache"
    "$bench" shards "$remote_spec" --endpoint "$endpoint" --repeat 2 --cache "$tmp/cache" 2>/dev/null > "$tmp/cached.json"
    emit cached-first 0 < "$tmp/cached.json"
    emit cached-second 1 < "$tmp/cached.json"
    rm -rf "$tmp/cache"
    "$bench" shards "$remote_spec" --endpoint "$endpoint" --repeat 1 --cache "$tmp/cache" --cache-no-fsync 2>/dev/null | emit cached-first-nofsync 0
    "$bench" shards "$local_spec" --repeat 2 --shards-in-flight 12 2>/dev/null | emit local-12 1
done
echo "== 8 processes, one fresh cache" >&2
rm -rf "$tmp/cache"
for p in 0 1 2 3 4 5 6 7; do
    "$bench" shards "$remote_spec" --endpoint "$endpoint" --repeat 1 --cache "$tmp/cache" 2>/dev/null > "$tmp/proc-$p.json" &
done
wait
cat "$tmp"/proc-*.json | emit eight-processes all
/usr/bin/python3 - "$tmp/all.jsonl" "$shards" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
shards = int(sys.argv[2])
def med(case):
    v = sorted(r["MB_per_s"] for r in rows if r["case"] == case)
    return statistics.median(v), v
for case in ("local", "local-12", "uncached", "cached-first", "cached-first-nofsync", "cached-second"):
    m, v = med(case)
    print("%-14s MB/s median %7.0f  runs %s" % (case, m, " ".join("%.0f" % x for x in v)), file=sys.stderr)
print("second epoch from the cache / local shards: %.2f" % (med("cached-second")[0] / med("local")[0]), file=sys.stderr)
print("first epoch through the cache / uncached:   %.2f" % (med("cached-first")[0] / med("uncached")[0]), file=sys.stderr)
eight = [r for r in rows if r["case"] == "eight-processes"]
print("8 processes: cache misses (GETs of shards) %d for %d shards; hits %d" %
      (sum(r.get("cache_misses", 0) for r in eight), shards, sum(r.get("cache_hits", 0) for r in eight)), file=sys.stderr)
PY
