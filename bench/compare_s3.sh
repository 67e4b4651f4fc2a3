#!/usr/bin/env bash
# compare_s3.sh — `conveyor-bench s3-get` against its baselines on an emulated remote object
# store (bench/nginx_bucket.sh: nginx on loopback with a first-byte delay), in one run, side
# by side. Prints every JSON line (stdout; the s3-get shape for every tool) and then a table
# with the ratios against the targets (stderr):
#
#   1. delay (default 20 ms), OBJECTS objects (default 10,000) of SIZE ±20% (default 110 KB,
#      random bytes), 64 in flight: conveyor objects/s vs `wrk -t2 -c64` cycling through the
#      same keys (bench/wrk_keys.lua; target >= 0.9x) and vs boto3 with 64 threads
#      (bench/boto3_get.py; target >= 3x). Little's law bounds all three at 64 / delay.
#   2. no delay, one SIZE object, 64 connections: conveyor GETs/s vs `wrk -t2 -c64`
#      (target >= 0.7x); CPU µs per GET of both (wrk's from its rusage).
#   3. no delay, one 1 GiB object: conveyor with --part-size 8388608 (PARTS ranged parts in
#      flight, default 8) vs `curl -s -o /dev/null` (target >= 1x curl's MB/s); REPEAT runs
#      each, the table shows medians.
#
# conveyor and boto3 GET each index entry once (test 1: every object once; test 2: the one
# object as many times as wrk managed in SECONDS, so both run about as long); wrk runs for
# SECONDS. The table adds nginx's own CPU per GET (its processes' utime+stime from /proc) and,
# for 1, the Little's-law bound. wrk's bytes include response headers.
#
# usage: compare_s3.sh [--objects 10000] [--size 110000] [--delay-ms 20] [--seconds 10]
#            [--concurrency 64] [--workers 1|N|auto] [--repeat 3] [--parts-in-flight 8]
#            [--skip-1gib] [--skip-boto3] [--build-dir DIR] [--work-dir DIR] [--check-targets]
#
# The data set lives in --work-dir (default ${TMPDIR:-/tmp}/conveyor-s3-bench; about
# OBJECTS x SIZE + 1 GiB) and is reused when the files are there with the right sizes.
# conveyor-bench: $CONVEYOR_BENCH, else DIR/bench/conveyor-bench or DIR/conveyor-bench for
# --build-dir DIR, else the usual build folders (bench/find_bench.sh). When it is missing or
# has no `s3-get` subcommand the baselines still run and the ratios say n/a.
# --workers: nginx worker processes (default 1; see bench/README.md). Dummy AWS credentials
# are exported (nginx checks no signature). Installs nginx, libnginx-mod-http-lua, wrk,
# python3-boto3 and curl when missing (bench/nginx_bucket.sh install).
# Exit status: 1 when a tool fails or reads the wrong number of bytes; with --check-targets,
# 3 when conveyor ran and missed a target; else 0.
set -euo pipefail

objects=10000 size=110000 delay_ms=20 seconds=10 concurrency=64 workers=1 repeat=3
parts_in_flight=8 skip_big=0 skip_boto3=0 build_dir="" check_targets=0
work_dir=${TMPDIR:-/tmp}/conveyor-s3-bench
while (($#)); do
    case $1 in
        --objects) objects=${2:?}; shift 2 ;;
        --size) size=${2:?}; shift 2 ;;
        --delay-ms) delay_ms=${2:?}; shift 2 ;;
        --seconds) seconds=${2:?}; shift 2 ;;
        --concurrency) concurrency=${2:?}; shift 2 ;;
        --workers) workers=${2:?}; shift 2 ;;
        --repeat) repeat=${2:?}; shift 2 ;;
        --parts-in-flight) parts_in_flight=${2:?}; shift 2 ;;
        --skip-1gib) skip_big=1; shift ;;
        --skip-boto3) skip_boto3=1; shift ;;
        --build-dir) build_dir=${2:?}; shift 2 ;;
        --work-dir) work_dir=${2:?}; shift 2 ;;
        --check-targets) check_targets=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
        *) echo "$0: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
for v in objects size seconds concurrency repeat parts_in_flight; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$0: --${v//_/-} wants a positive integer" >&2; exit 2; }
done

# shellcheck source-path=SCRIPTDIR source=find_bench.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_bench.sh"

"$here/nginx_bucket.sh" install wrk python3-boto3 curl
py=${CONVEYOR_PYTHON:-/usr/bin/python3} # Debian's python3-boto3 is installed for it only

have_conveyor=0
why_no_conveyor=""
if [[ -z $bench_bin || ! -x $bench_bin ]]; then
    why_no_conveyor="conveyor-bench not found (build it, or set CONVEYOR_BENCH / --build-dir)"
elif ! "$bench_bin" --help 2>&1 | grep -qE '^[[:space:]]+s3-get([[:space:]]|$)'; then
    why_no_conveyor="$bench_bin has no s3-get subcommand yet"
else
    have_conveyor=1
fi
if ((!have_conveyor)); then
    echo "compare_s3: NOTE: $why_no_conveyor: running the baselines only; conveyor's rows and ratios are n/a" >&2
fi

export AWS_ACCESS_KEY_ID=conveyor-bench AWS_SECRET_ACCESS_KEY=conveyor-bench-secret AWS_REGION=us-east-1
unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3

bucket=bench
mkdir -p "$work_dir/data/$bucket"
work_dir=$(realpath "$work_dir")
root=$work_dir/data
set_prefix=set-n$objects-s$size
index=$work_dir/index-$set_prefix.json
one_key=one/$size.bin
big_key=big/1GiB.bin

load_start=$(cut -d' ' -f1 /proc/loadavg)
tmp=$(mktemp -d)
states=()
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
    local s
    for s in "${states[@]}"; do
        if [[ -f $s/nginx.pid ]]; then "$here/nginx_bucket.sh" stop --state-dir "$s" || true; fi
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
records=$tmp/records.jsonl

# ---- the data set -----------------------------------------------------------------------
echo "== data set in $root/$bucket ($objects objects of $size ±20%, one of $size, $( ((skip_big)) && echo "no" || echo "one") 1 GiB)" >&2
"$py" - "$root/$bucket" "$set_prefix" "$objects" "$size" "$index" "$one_key" "$big_key" "$skip_big" <<'PY'
import json, os, random, sys, time
base, set_prefix, n, size, index, one_key, big_key, skip_big = sys.argv[1:]
n, size = int(n), int(size)
rng = random.Random(20240611)  # sizes are the same on every machine; contents are random bytes
files = [(f"{set_prefix}/{i:06d}.bin", round(size * rng.uniform(0.8, 1.2))) for i in range(n)]
files.append((one_key, size))
if skip_big != "1":
    files.append((big_key, 1 << 30))
t0, made, made_bytes = time.time(), 0, 0
for key, length in files:
    path = os.path.join(base, key)
    try:
        if os.path.getsize(path) == length:
            continue
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "wb") as f:
        left = length
        while left:
            chunk = min(left, 8 << 20)
            f.write(os.urandom(chunk))
            left -= chunk
    os.replace(path + ".tmp", path)
    made += 1
    made_bytes += length
keys = [k for k, _ in files[:n]]
total = sum(l for _, l in files[:n])
with open(index + ".tmp", "w") as f:
    json.dump(keys, f)
os.replace(index + ".tmp", index)
print(f"compare_s3: wrote {made} files ({made_bytes / 1e6:.0f} MB) in {time.time() - t0:.1f} s; "
      f"set: {n} objects, {total} bytes (mean {total / n / 1e3:.1f} KB)", file=sys.stderr)
with open(index + ".bytes", "w") as f:
    f.write(str(total))
PY
set_bytes=$(<"$index.bytes")
# Warm the page cache: every tool then reads memory, the same for all.
find "$root/$bucket/$set_prefix" "$root/$bucket/one" -type f -exec cat {} + >/dev/null
((skip_big)) || cat "$root/$bucket/$big_key" >/dev/null
printf '["%s"]\n' "$big_key" >"$tmp/index-big.json"

# ---- the measuring helper -------------------------------------------------------------
# measure.py CASE KIND NGINX_PID EXPECT_BYTES -- CMD...: runs CMD, takes its CPU from
# wait4's rusage and nginx's CPU (master + workers) from /proc before and after; turns
# the tool's output into the s3-get JSON line (KIND json: the tool printed it; wrk; curl),
# prints it on stdout and appends {"case", "result", "nginx_cpu_s", ...} to the records.
cat >"$tmp/measure.py" <<'PY'
import json, os, subprocess, sys, time
case, kind, nginx_pid, expect_bytes, records, endpoint, bucket, conc = sys.argv[1:9]
cmd = sys.argv[10:]  # argv[9] is "--"
tick = os.sysconf("SC_CLK_TCK")

def nginx_cpu():
    pids = [nginx_pid]
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[1] == nginx_pid:
                        pids.append(p)
            except OSError:
                pass
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except OSError:
            pass
    return total / tick

n0, t0 = nginx_cpu(), time.perf_counter()
proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
out = proc.stdout.read()
_, status, ru = os.wait4(proc.pid, 0)
proc.returncode = os.waitstatus_to_exitcode(status)
wall, n1 = time.perf_counter() - t0, nginx_cpu()
client_cpu = ru.ru_utime + ru.ru_stime

result, notes = None, []
for line in out.splitlines():
    if kind == "json" and line.startswith("{"):
        result = json.loads(line)
    elif kind == "wrk" and line.startswith("wrk_keys.lua: "):
        w = json.loads(line[len("wrk_keys.lua: "):])
        secs = w["duration_us"] / 1e6
        result = {"bench": "s3-get", "engine": "wrk", "endpoint": endpoint, "bucket": bucket,
                  "concurrency": int(conc), "part_size": None, "objects": w["requests"], "bytes": w["bytes"],
                  "seconds": round(secs, 4), "objects_per_s": round(w["requests"] / secs, 1),
                  "MB_per_s": round(w["bytes"] / secs / 1e6, 2), "p50_ms": w["p50_us"] / 1e3,
                  "p99_ms": w["p99_us"] / 1e3, "max_ms": w["max_us"] / 1e3, "retries": 0,
                  "errors": sum(v for k, v in w.items() if k.startswith("errors_")),
                  "cpu_s": round(client_cpu, 3), "cpu_us_per_get": round(client_cpu / max(1, w["requests"]) * 1e6, 1)}
    elif kind == "curl" and line.startswith("curl:"):
        code, size, total = line.split()[1:4]
        size, total = int(size), float(total)
        result = {"bench": "s3-get", "engine": "curl", "endpoint": endpoint, "bucket": bucket,
                  "concurrency": 1, "part_size": None, "objects": 1, "bytes": size,
                  "seconds": round(total, 4), "objects_per_s": round(1 / total, 2),
                  "MB_per_s": round(size / total / 1e6, 1), "p50_ms": round(total * 1e3, 3),
                  "p99_ms": round(total * 1e3, 3), "max_ms": round(total * 1e3, 3), "retries": 0,
                  "errors": 0 if code == "200" else 1, "cpu_s": round(client_cpu, 3),
                  "cpu_us_per_get": round(client_cpu * 1e6, 1)}
    else:
        notes.append(line)
if notes and kind != "json":
    print("\n".join(notes), file=sys.stderr)  # wrk's own report
ok = proc.returncode == 0 and result is not None
problem = None
if not ok:
    problem = f"exit status {proc.returncode}" + ("" if result else ", no result line")
elif result["errors"]:
    problem = f"{result['errors']} errors"
elif expect_bytes != "-" and result["bytes"] != int(expect_bytes):
    problem = f"read {result['bytes']} bytes, expected {expect_bytes}"
if result is not None:
    print(json.dumps(result), flush=True)
rec = {"case": case, "result": result, "nginx_cpu_s": round(n1 - n0, 3), "wall_s": round(wall, 3),
       "rusage_cpu_s": round(client_cpu, 3), "problem": problem}
with open(records, "a") as f:
    f.write(json.dumps(rec) + "\n")
if problem:
    print(f"compare_s3: {case} {kind}: {problem}", file=sys.stderr)
sys.exit(0 if problem is None else 1)
PY

failed=0
measure() { # CASE KIND EXPECT_BYTES CONCURRENCY -- CMD...
    local case=$1 kind=$2 expect=$3 conc=$4
    shift 5
    "$py" "$tmp/measure.py" "$case" "$kind" "$nginx_pid" "$expect" "$records" "$endpoint" "$bucket" "$conc" -- "$@" || failed=1
}

start_nginx() { # DELAY_MS STATE — sets endpoint and nginx_pid
    states+=("$2")
    endpoint=$("$here/nginx_bucket.sh" start --root "$root" --delay-ms "$1" --workers "$workers" --state-dir "$2")
    nginx_pid=$(<"$2/nginx.pid")
}

conveyor_get() { # CASE EXPECT_BYTES CONCURRENCY INDEX [EXTRA...]
    local case=$1 expect=$2 conc=$3 idx=$4
    shift 4
    if ((have_conveyor)); then
        echo "== $case: conveyor-bench s3-get --concurrency $conc $*" >&2
        measure "$case" json "$expect" "$conc" -- "$bench_bin" s3-get --endpoint "$endpoint" --bucket "$bucket" \
            --index "$idx" --concurrency "$conc" --region us-east-1 "$@"
    fi
}

# ---- 1: first-byte delay, many objects --------------------------------------------------
start_nginx "$delay_ms" "$tmp/nginx-delay"
echo "== 1: ${delay_ms} ms first-byte delay, $objects objects: wrk -t2 -c$concurrency -d${seconds}s" >&2
measure delay wrk - "$concurrency" -- wrk -t2 -c"$concurrency" -d"${seconds}s" --latency \
    -s "$here/wrk_keys.lua" "$endpoint" -- "$index" "$bucket"
conveyor_get delay "$set_bytes" "$concurrency" "$index"
if ((!skip_boto3)); then
    echo "== 1: boto3 x$concurrency" >&2
    measure delay json "$set_bytes" "$concurrency" -- "$py" "$here/boto3_get.py" --endpoint "$endpoint" \
        --bucket "$bucket" --index "$index" --concurrency "$concurrency"
fi
"$here/nginx_bucket.sh" stop --state-dir "$tmp/nginx-delay"

# ---- 2 and 3: no delay ------------------------------------------------------------------
start_nginx 0 "$tmp/nginx-nodelay"
printf '["%s"]\n' "$one_key" >"$tmp/index-one-key.json"
echo "== 2: no delay, one $size-byte object: wrk -t2 -c$concurrency -d${seconds}s" >&2
measure one wrk - "$concurrency" -- wrk -t2 -c"$concurrency" -d"${seconds}s" --latency \
    -s "$here/wrk_keys.lua" "$endpoint" -- "$tmp/index-one-key.json" "$bucket"
if ((have_conveyor)); then
    # as many GETs as wrk did in SECONDS (at least 1000), so conveyor runs about as long
    gets=$("$py" -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1])][-1]["result"]
print(max(1000, min(5000000, int(r["objects"]) if r else 0)))' "$records")
    "$py" -c 'import json,sys; json.dump([sys.argv[1]] * int(sys.argv[2]), open(sys.argv[3], "w"))' \
        "$one_key" "$gets" "$tmp/index-one.json"
    conveyor_get one $((gets * size)) "$concurrency" "$tmp/index-one.json"
fi

if ((!skip_big)); then
    for ((r = 1; r <= repeat; r++)); do
        echo "== 3: 1 GiB object, run $r/$repeat: curl" >&2
        measure big curl $((1 << 30)) 1 -- curl -s -o /dev/null -w 'curl: %{http_code} %{size_download} %{time_total}\n' \
            "$endpoint/$bucket/$big_key"
        conveyor_get big $((1 << 30)) 1 "$tmp/index-big.json" --part-size 8388608 --parts-in-flight "$parts_in_flight"
    done
fi
"$here/nginx_bucket.sh" stop --state-dir "$tmp/nginx-nodelay"

# ---- the table ----------------------------------------------------------------------------
target_rc=0
"$py" - "$records" "$delay_ms" "$concurrency" "$objects" "$size" "$workers" "$have_conveyor" "$why_no_conveyor" "$load_start" "$parts_in_flight" <<'PY' >&2 || target_rc=$?
import json, os, statistics, sys
path, delay_ms, conc, objects, size, workers, have_conveyor, why, load_start, parts = sys.argv[1:]
recs = [json.loads(l) for l in open(path) if l.strip()]
titles = {"delay": f"1: {delay_ms} ms delay, {objects} objects", "one": f"2: no delay, one {int(size) // 1000} KB object",
          "big": "3: no delay, one 1 GiB object"}
rows = {}
for r in recs:
    if r["result"]:
        rows.setdefault((r["case"], r["result"]["engine"]), []).append(r)

def med(case, engine, key):
    rs = rows.get((case, engine))
    if not rs:
        return None
    if key == "nginx_us_per_get":
        return statistics.median(r["nginx_cpu_s"] / max(1, r["result"]["objects"]) * 1e6 for r in rs)
    return statistics.median(r["result"][key] for r in rs)

print()
print(f"nginx: {workers} worker process(es); machine: {os.cpu_count()} CPUs; 1-minute load average {load_start} at the start, "
      f"{open('/proc/loadavg').read().split()[0]} at the end (this run adds about 2)")
print(f"{'case':31} {'engine':8} {'conc':>4} {'runs':>4} {'objects/s':>10} {'MB/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
      f"{'CPU us/GET':>10} {'nginx us/GET':>12} {'errors':>6}")
for case in ("delay", "one", "big"):
    first = True
    for engine in ("wrk", "curl", "conveyor", "boto3"):
        rs = rows.get((case, engine))
        if not rs:
            continue
        m = lambda k: med(case, engine, k)
        print(f"{titles[case] if first else '':31} {engine:8} {rs[0]['result']['concurrency']:>4} {len(rs):>4} {m('objects_per_s'):>10.1f} "
              f"{m('MB_per_s'):>8.1f} {m('p50_ms'):>8.2f} {m('p99_ms'):>8.2f} {m('max_ms'):>8.2f} {m('cpu_us_per_get'):>10.1f} "
              f"{m('nginx_us_per_get'):>12.1f} {sum(r['result']['errors'] for r in rs):>6}")
        first = False
print("(medians over runs; CPU us/GET: the client's user+system CPU per GET (conveyor: per HTTP request); nginx us/GET: the server's;\n"
      f" wrk's MB/s counts headers; in 3, conveyor reads 8 MiB ranged parts, {parts} in flight)")

print()
missed = 0
def ratio(label, num, den, target):
    global missed
    if num is None or den is None:
        why_na = why if have_conveyor != "1" else "a run is missing"
        print(f"  {label:44} target >= {target:<5} n/a ({why_na})")
        return
    r = num / den
    ok = r >= target
    missed += not ok
    print(f"  {label:44} target >= {target:<5} {r:6.2f}  {'ok' if ok else 'MISSED'}")
bound = int(conc) / (float(delay_ms) / 1e3) if float(delay_ms) > 0 else None
print("targets:")
ratio("1. conveyor / wrk objects/s (delay)", med("delay", "conveyor", "objects_per_s"), med("delay", "wrk", "objects_per_s"), 0.9)
ratio("1. conveyor / boto3 objects/s (delay)", med("delay", "conveyor", "objects_per_s"), med("delay", "boto3", "objects_per_s"), 3.0)
ratio("2. conveyor / wrk GETs/s (no delay)", med("one", "conveyor", "objects_per_s"), med("one", "wrk", "objects_per_s"), 0.7)
ratio("3. conveyor / curl MB/s (1 GiB)", med("big", "conveyor", "MB_per_s"), med("big", "curl", "MB_per_s"), 1.0)
if bound:
    print(f"Little's law bound for 1: {conc} / {float(delay_ms) / 1e3:g} s = {bound:.0f} objects/s; reached: " +
          ", ".join(f"{e} {med('delay', e, 'objects_per_s') / bound:.0%}" for e in ("wrk", "conveyor", "boto3") if med("delay", e, "objects_per_s")))
problems = [f"{r['case']} {r['result']['engine'] if r['result'] else '?'}: {r['problem']}" for r in recs if r["problem"]]
for p in problems:
    print(f"problem: {p}")
sys.exit(3 if missed else 0)
PY
if ((failed)); then exit 1; fi
if ((check_targets && target_rc == 3)); then exit 3; fi
exit 0
