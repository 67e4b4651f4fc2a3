#!/usr/bin/env bash
# throttle_s3.sh — `conveyor-bench s3-get` against a store that throttles above a rate
# (bench/nginx_bucket.sh --throttle-rate: a token bucket that answers 503 SlowDown, behind a
# first-byte delay), adaptive throttling against a fixed concurrency, and the recovery when
# the throttle is lifted. Prints every JSON line (stdout: conveyor-bench's own, and one
# "bench":"throttle-s3" line per case) and then a table against the targets (stderr):
#
#   0. unthrottled: the same objects, --concurrency in flight, no throttle: the rate this
#      machine sustains (the reference for 2; the allowed RATE should be well under it).
#   1. throttled at RATE requests/s (default 1,000; burst RATE/100): RATE x SECONDS GETs
#      (default 8 s worth), adaptive (the default client) and --fixed-concurrency, alternating,
#      REPEAT times each (default 3). Goodput: objects read per second, as a share of RATE
#      (target >= 0.9 adaptive); retries per object (target <= 0.2 adaptive); the 503s the
#      server sent per object, the objects that failed (the retry quota spent), and the
#      client's in-flight and send-rate limits at the end. Medians, with min-max.
#   2. lift: adaptive, throttled at RATE for LIFT seconds (default 10), then the throttle is
#      lifted (PUT /_conveyor/throttle?rate=0) while the run goes on; with --timeline the
#      client prints objects/s per second; recovery: the time from the lift to the end of
#      the first second at >= 90% of case 0's rate (target <= 10 s).
#
# usage: throttle_s3.sh [--objects 2000] [--size 65536] [--delay-ms 20] [--rate 1000]
#            [--concurrency 64] [--seconds 8] [--repeat 3] [--lift-after 10] [--workers 1]
#            [--build-dir DIR] [--work-dir DIR] [--check-targets]
#
# Every run GETs an index that cycles through the OBJECTS objects of SIZE bytes (random
# bytes; made once under --work-dir, default ${TMPDIR:-/tmp}/conveyor-s3-throttle, and
# reused; read once to warm the page cache). The server's own counts (requests served and
# throttled) come from GET /_conveyor/throttle around each run. About 100 s with the
# defaults. conveyor-bench: $CONVEYOR_BENCH, else DIR/bench/conveyor-bench for --build-dir
# DIR, else the usual build folders (bench/find_bench.sh). Dummy AWS credentials are
# exported (nginx checks no signature). Installs nginx and libnginx-mod-http-lua when missing.
# Exit status: 1 when conveyor-bench is missing or a run fails other than by throttling; with
# --check-targets, 3 when a target is missed; else 0.
set -euo pipefail

objects=2000 size=65536 delay_ms=20 rate=1000 concurrency=64 seconds=8 repeat=3 lift_after=10
workers=1 build_dir="" check_targets=0
work_dir=${TMPDIR:-/tmp}/conveyor-s3-throttle
while (($#)); do
    case $1 in
        --objects) objects=${2:?}; shift 2 ;;
        --size) size=${2:?}; shift 2 ;;
        --delay-ms) delay_ms=${2:?}; shift 2 ;;
        --rate) rate=${2:?}; shift 2 ;;
        --concurrency) concurrency=${2:?}; shift 2 ;;
        --seconds) seconds=${2:?}; shift 2 ;;
        --repeat) repeat=${2:?}; shift 2 ;;
        --lift-after) lift_after=${2:?}; shift 2 ;;
        --workers) workers=${2:?}; shift 2 ;;
        --build-dir) build_dir=${2:?}; shift 2 ;;
        --work-dir) work_dir=${2:?}; shift 2 ;;
        --check-targets) check_targets=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
        *) echo "$0: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
for v in objects size rate concurrency seconds repeat lift_after; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$0: --${v//_/-} wants a positive integer" >&2; exit 2; }
done

# shellcheck source-path=SCRIPTDIR source=find_bench.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_bench.sh"
if [[ -z $bench_bin || ! -x $bench_bin ]]; then
    echo "throttle_s3: conveyor-bench not found (build it, or set CONVEYOR_BENCH / --build-dir)" >&2
    exit 1
fi
if ! "$bench_bin" s3-get --help 2>&1 | grep -q -- --fixed-concurrency; then
    echo "throttle_s3: $bench_bin s3-get has no --fixed-concurrency / --timeline: rebuild it" >&2
    exit 1
fi
"$here/nginx_bucket.sh" install
py=${CONVEYOR_PYTHON:-/usr/bin/python3}

export AWS_ACCESS_KEY_ID=conveyor-bench AWS_SECRET_ACCESS_KEY=conveyor-bench-secret AWS_REGION=us-east-1
unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3

bucket=bench
set_prefix=throttle-n$objects-s$size
mkdir -p "$work_dir/data/$bucket/$set_prefix"
work_dir=$(realpath "$work_dir")
root=$work_dir/data
load_start=$(cut -d' ' -f1 /proc/loadavg)
tmp=$(mktemp -d)
state=$tmp/nginx
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
    if [[ -f $state/nginx.pid ]]; then "$here/nginx_bucket.sh" stop --state-dir "$state" || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
records=$tmp/records.jsonl

# ---- the data set and the indexes --------------------------------------------------------
echo "== data set: $objects objects of $size bytes in $root/$bucket/$set_prefix" >&2
"$py" - "$root/$bucket/$set_prefix" "$objects" "$size" <<'PY'
import os, sys, time
base, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t0, made = time.time(), 0
for i in range(n):
    path = os.path.join(base, f"{i:06d}.bin")
    try:
        if os.path.getsize(path) == size:
            continue
    except OSError:
        pass
    with open(path + ".tmp", "wb") as f:
        f.write(os.urandom(size))
    os.replace(path + ".tmp", path)
    made += 1
print(f"throttle_s3: wrote {made} files in {time.time() - t0:.1f} s", file=sys.stderr)
PY
find "$root/$bucket/$set_prefix" -type f -exec cat {} + >/dev/null
# make_index FILE COUNT: COUNT keys cycling through the objects
make_index() {
    "$py" -c 'import json, sys
n, count, prefix = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
json.dump([f"{prefix}/{i % n:06d}.bin" for i in range(count)], open(sys.argv[4], "w"))' "$objects" "$2" "$set_prefix" "$1"
}

endpoint=$("$here/nginx_bucket.sh" start --root "$root" --delay-ms "$delay_ms" --workers "$workers" --state-dir "$state")
throttle() { "$here/nginx_bucket.sh" throttle --state-dir "$state" "$@"; }

# run_get CASE REPEAT INDEX [EXTRA...]: one conveyor-bench s3-get; its JSON lines to stdout,
# a record {case, repeat, result, server before/after, status} to the records.
run_get() {
    local case=$1 rep=$2 idx=$3 before after rc=0
    shift 3
    before=$(throttle)
    "$bench_bin" s3-get --endpoint "$endpoint" --bucket "$bucket" --index "$idx" --concurrency "$concurrency" \
        --region us-east-1 "$@" >"$tmp/out.jsonl" 2>"$tmp/err.txt" || rc=$?
    after=$(throttle)
    grep -v '^s3-get: [0-9]*/' "$tmp/err.txt" | grep -v '^conveyor: skipped' | sed 's/^/    /' >&2 || true
    cat "$tmp/out.jsonl"
    "$py" - "$case" "$rep" "$rc" "$before" "$after" "$tmp/out.jsonl" "$records" <<'PY'
import json, sys
case, rep, rc, before, after, out, records = sys.argv[1:]
lines = [json.loads(l) for l in open(out) if l.startswith("{")]
result = next((l for l in lines if l.get("bench") == "s3-get"), None)
seconds = [l for l in lines if l.get("bench") == "s3-get-second"]
with open(records, "a") as f:
    f.write(json.dumps({"case": case, "repeat": int(rep), "rc": int(rc), "result": result, "seconds": seconds,
                        "before": json.loads(before), "after": json.loads(after)}) + "\n")
PY
}

# ---- 0: unthrottled ------------------------------------------------------------------------
make_index "$tmp/index-free.json" $((objects * 4))
echo "== 0: unthrottled, $((objects * 4)) GETs, $concurrency in flight, ${delay_ms} ms first-byte delay" >&2
run_get unthrottled 0 "$tmp/index-free.json"

# ---- 1: throttled, adaptive and fixed, alternating -------------------------------------------
throttle --rate "$rate" >/dev/null
make_index "$tmp/index-throttled.json" $((rate * seconds))
for ((r = 1; r <= repeat; r++)); do
    # alternate which goes first, so that neither always follows the other
    if ((r % 2)); then modes=(adaptive fixed); else modes=(fixed adaptive); fi
    for m in "${modes[@]}"; do
        throttle --rate "$rate" >/dev/null # a full bucket for each run
        echo "== 1: throttled at $rate/s, $m, run $r/$repeat" >&2
        if [[ $m == fixed ]]; then run_get fixed "$r" "$tmp/index-throttled.json" --fixed-concurrency
        else run_get adaptive "$r" "$tmp/index-throttled.json"; fi
    done
done

# ---- 2: the throttle lifted mid-run ----------------------------------------------------------
free_rate=$("$py" -c 'import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][0]["result"]
print(int(r["objects_per_s"]) if r else 0)' "$records")
# enough GETs for LIFT seconds throttled and 12 s at the unthrottled rate after
make_index "$tmp/index-lift.json" $((rate * lift_after + (free_rate > rate ? free_rate : rate) * 12))
throttle --rate "$rate" >/dev/null
echo "== 2: throttled at $rate/s, lifted after ${lift_after} s" >&2
(
    sleep "$lift_after"
    "$py" -c 'import time; print(time.time())' >"$tmp/lifted_at"
    throttle --rate 0 >/dev/null
) &
lifter=$!
run_get lift 1 "$tmp/index-lift.json" --timeline
wait "$lifter" || true
lifted_at=$(cat "$tmp/lifted_at" 2>/dev/null || echo 0)
"$here/nginx_bucket.sh" stop --state-dir "$state"

# ---- the table -------------------------------------------------------------------------------
target_rc=0
"$py" - "$records" "$rate" "$delay_ms" "$concurrency" "$objects" "$size" "$workers" "$load_start" "$lifted_at" <<'PY' >&2 || target_rc=$?
import json, os, statistics, sys
path, rate, delay_ms, conc, objects, size, workers, load_start, lifted_at = sys.argv[1:]
rate, lifted_at = float(rate), float(lifted_at)
recs = [json.loads(l) for l in open(path) if l.strip()]
out = []

def row(rec):
    res, b, a = rec["result"] or {}, rec["before"], rec["after"]
    requested = res.get("objects", 0) + res.get("errors", 0)
    return {"goodput": res.get("objects_per_s", 0), "share": res.get("objects_per_s", 0) / rate,
            "retries_per_object": res.get("retries", 0) / max(1, requested),
            "throttled_per_object": (a["throttled"] - b["throttled"]) / max(1, requested),
            "served": a["served"] - b["served"], "throttled": a["throttled"] - b["throttled"],
            "failed": res.get("errors", 0), "limit": res.get("limit", 0), "lowest_limit": res.get("lowest_limit", 0),
            "rate": res.get("rate", 0), "lowest_rate": res.get("lowest_rate", 0), "seconds": res.get("seconds", 0)}

free = next(r for r in recs if r["case"] == "unthrottled")
free_rate = (free["result"] or {}).get("objects_per_s", 0)
print()
print(f"store: nginx ({workers} worker), {delay_ms} ms first-byte delay, {objects} objects of {int(size) // 1024} KiB; "
      f"machine: {os.cpu_count()} CPUs, load {load_start} at the start, {open('/proc/loadavg').read().split()[0]} at the end")
print(f"0. unthrottled, {conc} in flight: {free_rate:.0f} objects/s (the throttle, {rate:.0f}/s, is {rate / max(1, free_rate):.0%} of it)")
print()
print(f"1. throttled at {rate:.0f} requests/s (a token bucket, burst {max(1, int(rate) // 100)}); medians (min-max) over runs")
print(f"   {'client':18} {'runs':>4} {'goodput/s':>10} {'of allowed':>17} {'retries/object':>20} {'503s/object':>11} "
      f"{'failed':>6} {'in flight (lowest)':>18} {'rate/s (lowest)':>16}")
meds = {}
for case, label in (("adaptive", "adaptive"), ("fixed", f"fixed {conc}")):
    rows = [row(r) for r in recs if r["case"] == case]
    if not rows:
        continue
    m = {k: statistics.median(x[k] for x in rows) for k in rows[0]}
    lo = {k: min(x[k] for x in rows) for k in rows[0]}
    hi = {k: max(x[k] for x in rows) for k in rows[0]}
    meds[case] = m
    inflight = "-" if case == "fixed" else f"{m['limit']:.0f} ({m['lowest_limit']:.0f})"
    rate_s = "-" if case == "fixed" else f"{m['rate']:.0f} ({m['lowest_rate']:.0f})"
    print(f"   {label:18} {len(rows):>4} {m['goodput']:>10.0f} {m['share']:>6.1%} ({lo['share']:.0%}-{hi['share']:.0%}) "
          f"{m['retries_per_object']:>7.3f} ({lo['retries_per_object']:.3f}-{hi['retries_per_object']:.3f}) "
          f"{m['throttled_per_object']:>11.3f} {sum(x['failed'] for x in rows):>6} {inflight:>18} {rate_s:>16}")
    out.append({"bench": "throttle-s3", "case": case, "rate": rate, "delay_ms": float(delay_ms), "concurrency": int(conc),
                "runs": len(rows), "goodput_per_s": round(m["goodput"], 1), "goodput_share": round(m["share"], 4),
                "goodput_share_min": round(lo["share"], 4), "goodput_share_max": round(hi["share"], 4),
                "retries_per_object": round(m["retries_per_object"], 4),
                "retries_per_object_min": round(lo["retries_per_object"], 4),
                "retries_per_object_max": round(hi["retries_per_object"], 4),
                "throttled_per_object": round(m["throttled_per_object"], 4), "failed": sum(x["failed"] for x in rows)})
print("   goodput: objects read per second; retries/object: the client's retries over the objects asked for;")
print("   503s/object: what the server throttled; failed: objects given up (the retry quota spent)")

lift = next((r for r in recs if r["case"] == "lift"), None)
recovery = None
print()
if lift and lift["seconds"] and lifted_at > 0:
    secs = lift["seconds"]
    start = secs[0]["unix_s"] - secs[0]["t_s"]
    lift_t = lifted_at - start
    goal = 0.9 * free_rate
    after = [s for s in secs if s["unix_s"] > lifted_at]  # the seconds that end after the lift
    hit = next((s for s in after if s["objects_per_s"] >= goal), None)
    recovery = hit["unix_s"] - lifted_at if hit else None
    before = [s["objects_per_s"] for s in secs if s["unix_s"] <= lifted_at]
    tail = [s["objects_per_s"] for s in after[-5:]]
    print(f"2. lift: throttled at {rate:.0f}/s, lifted {lift_t:.1f} s into the run ({statistics.median(before) if before else 0:.0f} objects/s "
          f"before); 90% of the unthrottled rate = {goal:.0f}/s")
    print("   objects/s per second: " + " ".join(f"{s['objects_per_s']:.0f}{'|' if s['unix_s'] <= lifted_at < s['unix_s'] + 1 else ''}"
                                           for s in secs))
    print(f"   reached {goal:.0f}/s {recovery:.1f} s after the lift" if recovery is not None else
          f"   never reached {goal:.0f}/s after the lift")
    print(f"   (the end of the first whole second at >= 90%; the last {len(tail)} seconds: median {statistics.median(tail) if tail else 0:.0f}/s)")
    out.append({"bench": "throttle-s3", "case": "lift", "rate": rate, "unthrottled_per_s": round(free_rate, 1),
                "lifted_after_s": round(lift_t, 2), "recovery_s": round(recovery, 2) if recovery is not None else None,
                "after_lift_per_s": round(statistics.median(tail), 1) if tail else None})
else:
    print("2. lift: no timeline (the run failed?)")

print()
missed = 0
def target(label, value, ok, shown):
    global missed
    if value is None:
        print(f"   {label:44} n/a")
        missed += 1
        return
    missed += not ok
    print(f"   {label:44} {shown:>8}  {'ok' if ok else 'MISSED'}")
print("targets:")
a = meds.get("adaptive")
target("adaptive goodput >= 90% of the allowed rate", a and a["share"], a and a["share"] >= 0.9, a and f"{a['share']:.1%}")
target("adaptive retries per object <= 0.2", a and a["retries_per_object"], a and a["retries_per_object"] <= 0.2,
       a and f"{a['retries_per_object']:.3f}")
target("lift: >= 90% of unthrottled within 10 s", recovery, recovery is not None and recovery <= 10,
       f"{recovery:.1f} s" if recovery is not None else "")
with open(path + ".summary", "w") as f:
    f.write("".join(json.dumps(o) + "\n" for o in out))
sys.exit(3 if missed else 0)
PY
cat "$records.summary" 2>/dev/null || true
failed=0
"$py" -c 'import json, sys
bad = [r for r in map(json.loads, open(sys.argv[1])) if r["result"] is None or (r["rc"] != 0 and r["case"] != "fixed")]
sys.exit(1 if bad else 0)' "$records" || failed=1
if ((failed)); then echo "throttle_s3: a run failed (see above)" >&2; exit 1; fi
if ((check_targets && target_rc == 3)); then exit 3; fi
exit 0
