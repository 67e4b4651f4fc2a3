#!/usr/bin/env bash
# soak.sh — one process reads a dataset of tar shards from S3 for many epochs while the
# store's requests are faulted, and its memory, descriptors and threads are watched: after
# the first epoch they must stay flat, and every epoch must deliver every sample.
#
#   1. The dataset: synthetic JPEGs (examples/quickstart's, ~100 KB, 500x375, kept under
#      --work-dir for the next run) packed by examples/make_shards into webdataset shards of
#      --per-shard samples, written straight to the test S3 server (s3rver behind
#      tests/s3/server/sigv4_proxy.py, started by tests/s3/server/with_s3_server.sh, which
#      this script runs itself under when CONVEYOR_TEST_S3_ENDPOINT is not set).
#   2. The proxy's seeded fault plan (POST /__conveyor/fault-plan) faults --rate of the GETs
#      of the shards: 500 and 503 replies, resets before the answer and mid-body, stalls past
#      the client's timeouts (--timeout-ms 1000 against stalls of 2.5 s), bodies cut short
#      and a Content-Length longer than the body. Left out: `garbage`, `corrupt` and a short
#      Content-Length, which a streamed shard cannot recover from (its checksum is checked at
#      its end, after its chunks have gone on; docs/limits.md): they fail the run by
#      design, which is not what a soak measures.
#   3. ONE process, `conveyor-bench pipeline` over the s3:// shards for --epochs epochs:
#      shards (shuffled per epoch) → shuffle → decode (CPU JPEG decoder, random-resized crop
#      224, flip) → batches of 256, --threads compute threads. It prints a JSON line per
#      epoch (images delivered, the S3 client's requests, retries and failed attempts).
#   4. Every --interval seconds a sample of the process from outside: VmRSS, VmHWM and
#      Threads from /proc/PID/status, open descriptors (and how many are sockets) from
#      /proc/PID/fd, and the epoch it is in (numbered from 0, as the bench numbers them: the
#      number of epoch lines it has printed). At the end of each epoch, the bench's own
#      figures, read from /proc/self once the epoch's run is torn down (`rss_end_mb`,
#      `fds_end`, `sockets_end`, `threads_end`, and the buffer pool's `pool_idle_mb`): that
#      epoch's last sample, with no race against the process's exit after the last one.
#
# Flat after the first epoch (epoch 0 warms the pools, opens the connections, starts the
# threads). Per epoch e: rss(e), fds(e), threads(e) are the maxima of its samples; idle(e) is
# the runtime's buffer pool's idle memory at its end (the bench's `pool_idle_mb`), and
# held(e) = rss(e) - idle(e). The pool caches freed buffers up to its cap (--pool-MB, 256 MiB
# by default; 1.5 times that with its slabs, core/buffer.hpp), so its idle memory, and RSS
# with it, follow the high-water mark of the buffers in use toward that cap: bounded by
# design, and judged apart:
#   - RSS:     held(e) <= held(1) + max(--rss-tolerance-mb, --rss-tolerance-pct % of held(1))
#              for every epoch e >= 2 (defaults 16 MB, 5%), and idle(e) <= 1.5 x the cap;
#   - descriptors other than sockets (files, pipes, eventfds, io_uring, epoll):
#              other(e) <= other(0) for every epoch e >= 1;
#   - sockets: at most the S3 client's connection cap (64, http::client_options::
#              max_connections) in every epoch: it keeps connections alive between requests,
#              so the sockets it holds follow the high-water mark of the requests in flight
#              (a socket per fault leaked would pass the cap within the soak's ~190 faults);
#   - threads: threads(e) <= threads(0) for every epoch e >= 1.
# The raw RSS and all descriptors of each epoch, and RSS's trend (MB per epoch), are printed
# beside them.
# Nothing lost: every epoch's `images` equals the dataset's samples, and the bench exits 0.
#
# Output: stdout has the bench's JSON lines, one {"bench":"soak",...} line per sample and a
# {"bench":"soak-summary",...} line; stderr a human line per sample, then a table per epoch
# (max RSS, pool idle, held, max fds, sockets, other fds, threads; images; retries and
# failed attempts), the faults injected by kind (the proxy's plan report), the client's
# retries and failed attempts by cause, and the verdict.
#
# usage: soak.sh [--epochs 20] [--rate 0.1] [--interval 2] [--images 2000] [--per-shard 25]
#            [--threads 2] [--seed 30] [--timeout-ms 1000] [--rss-tolerance-mb 16]
#            [--rss-tolerance-pct 5] [--pool-MB 0] [--build-dir DIR] [--work-dir DIR]
#
# conveyor-bench: $CONVEYOR_BENCH, else DIR/bench/conveyor-bench for --build-dir DIR, else the
# usual build folders (bench/find_bench.sh); quickstart and make_shards are taken from the
# same build's examples/ folder. Needs node and npm (s3rver) and Debian's python3-botocore,
# as the S3 tests do.
# Exit status: 0 flat and nothing lost; 1 something grew, a sample was lost or the bench
# failed (each named on stderr); 2 a usage or setup error.
set -euo pipefail

epochs=20 rate=0.1 interval=2 images=2000 per_shard=25 threads=2 seed=30 timeout_ms=1000
rss_tol_mb=16 rss_tol_pct=5 pool_mb=0 build_dir=""
work_dir=${TMPDIR:-/tmp}/conveyor-soak
args=("$@")
while (($#)); do
    case $1 in
        --epochs) epochs=${2:?}; shift 2 ;;
        --rate) rate=${2:?}; shift 2 ;;
        --interval) interval=${2:?}; shift 2 ;;
        --images) images=${2:?}; shift 2 ;;
        --per-shard) per_shard=${2:?}; shift 2 ;;
        --threads) threads=${2:?}; shift 2 ;;
        --seed) seed=${2:?}; shift 2 ;;
        --timeout-ms) timeout_ms=${2:?}; shift 2 ;;
        --rss-tolerance-mb) rss_tol_mb=${2:?}; shift 2 ;;
        --rss-tolerance-pct) rss_tol_pct=${2:?}; shift 2 ;;
        --pool-MB) pool_mb=${2:?}; shift 2 ;;
        --build-dir) build_dir=${2:?}; shift 2 ;;
        --work-dir) work_dir=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
        *) echo "$0: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
for v in epochs images per_shard threads timeout_ms; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$0: --${v//_/-} wants a positive integer" >&2; exit 2; }
done
for v in seed rss_tol_mb rss_tol_pct pool_mb; do
    [[ ${!v} =~ ^[0-9]+$ ]] || { echo "$0: --${v//_/-} wants an integer >= 0" >&2; exit 2; }
done
[[ $rate =~ ^(0(\.[0-9]+)?|1(\.0*)?)$ ]] || { echo "$0: --rate wants a number in [0, 1]" >&2; exit 2; }
[[ $interval =~ ^[0-9]+(\.[0-9]+)?$ && ! $interval =~ ^0+(\.0*)?$ ]] || { echo "$0: --interval wants seconds > 0" >&2; exit 2; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=${CONVEYOR_PYTHON:-/usr/bin/python3}

# The S3 test server: this script again, under with_s3_server.sh (which stops both servers
# when it ends).
if [[ -z ${CONVEYOR_TEST_S3_ENDPOINT:-} ]]; then
    exec bash "$here/../tests/s3/server/with_s3_server.sh" bash "${BASH_SOURCE[0]}" "${args[@]}"
fi

# shellcheck source-path=SCRIPTDIR source=find_bench.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_bench.sh" # here, bench_bin (build_dir read)
[[ -n $bench_bin && -x $bench_bin ]] || { echo "soak.sh: conveyor-bench not found (build it, or set CONVEYOR_BENCH)" >&2; exit 2; }
bench_bin=$(cd "$(dirname "$bench_bin")" && pwd)/$(basename "$bench_bin")
examples=$(dirname "$bench_bin")/../examples
quickstart=$examples/quickstart make_shards=$examples/make_shards
for t in "$quickstart" "$make_shards"; do
    [[ -x $t ]] || { echo "soak.sh: $t not found (build the quickstart and make_shards targets)" >&2; exit 2; }
done
"$bench_bin" pipeline --help 2>/dev/null | grep -q -- --timeout-ms ||
    { echo "soak.sh: $bench_bin has no pipeline --timeout-ms (rebuild conveyor-bench)" >&2; exit 2; }

export AWS_ACCESS_KEY_ID=$CONVEYOR_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$CONVEYOR_TEST_S3_SECRET_KEY
unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3
endpoint=$CONVEYOR_TEST_S3_ENDPOINT bucket=$CONVEYOR_TEST_S3_BUCKET region=$CONVEYOR_TEST_S3_REGION
admin=$CONVEYOR_TEST_S3_ADMIN

tmp=$(mktemp -d "${TMPDIR:-/tmp}/conveyor-soak.XXXXXX")
bench_pid=
cleanup() {
    if [[ -n $bench_pid ]] && kill -0 "$bench_pid" 2>/dev/null; then
        kill -TERM "$bench_pid" 2>/dev/null || true
        wait "$bench_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# ---- the dataset: JPEGs made once, shards written to S3 (no faults yet)
mkdir -p "$work_dir"
data=$work_dir/images-$images
if [[ ! -f $data/.done ]]; then
    echo "soak.sh: drawing $images JPEGs into $data (once)" >&2
    "$quickstart" --dir "$data" --count "$images" --classes 10 --epochs 0 >"$tmp/quickstart.log" 2>&1 ||
        { cat "$tmp/quickstart.log" >&2; echo "soak.sh: quickstart failed" >&2; exit 2; }
    rm -rf "$data/shards" # quickstart's own local shards: not used here
    touch "$data/.done"
fi
prefix=soak/
"$make_shards" --folder "$data/images" --output "s3://$bucket/${prefix}shard-%06d.tar" --maxcount "$per_shard" \
    --index "$tmp/index.json" --endpoint "$endpoint" --region "$region" >"$tmp/make_shards.log" 2>&1 ||
    { cat "$tmp/make_shards.log" >&2; echo "soak.sh: make_shards failed" >&2; exit 2; }
read -r shards samples < <("$py" -c '
import json, sys
ix = json.load(open(sys.argv[1]))
print(len(ix["shards"]), sum(s["samples"] for s in ix["shards"]))' "$tmp/index.json")
((samples == images)) || { echo "soak.sh: the index counts $samples samples in $shards shards, expected $images" >&2; exit 2; }
last=$(printf '%06d' $((shards - 1)))
spec="s3://$bucket/${prefix}shard-{000000..$last}.tar"
echo "soak.sh: $samples samples in $shards shards at $spec ($endpoint)" >&2

# ---- the fault plan: GETs of the shards only
kinds='{"status_500": 1, "status_503": 1, "reset": 1, "reset_after": 1, "stall": 1, "truncate": 1, "content_length_long": 1}'
plan="{\"seed\": $seed, \"rate\": $rate, \"keys\": \"$prefix\", \"stall_ms\": 2500, \"after_bytes\": 20000, \"kinds\": $kinds}"
curl -fsS -X POST "$admin/fault-plan" -d "$plan" >/dev/null || { echo "soak.sh: the proxy refused the fault plan $plan" >&2; exit 2; }
echo "soak.sh: fault plan $plan" >&2

# ---- one process, all the epochs
bench_out=$tmp/bench.out bench_err=$tmp/bench.err samples_out=$tmp/samples.jsonl
: >"$samples_out"
"$bench_bin" pipeline "$spec" --endpoint "$endpoint" --region "$region" --timeout-ms "$timeout_ms" \
    --epochs "$epochs" --threads "$threads" --seed "$seed" --pool-MB "$pool_mb" --decode-only 0 >"$bench_out" 2>"$bench_err" &
bench_pid=$!
echo "soak.sh: conveyor-bench pipeline, pid $bench_pid, $epochs epochs, a sample every $interval s" >&2

epoch_lines() { grep '"bench":"pipeline","engine":"conveyor-shards"' "$bench_out" || true; }
micros() { local t=${EPOCHREALTIME//[.,]/}; echo $((10#$t)); } # the wall clock in microseconds
start_us=$(micros)
interval_us=$(awk -v i="$interval" 'BEGIN { printf "%d", i * 1e6 }')
mb() { awk -v k="$1" 'BEGIN { printf "%.1f", k * 1.024 / 1000 }'; } # kB (KiB) to MB
seconds_since_start() { local d=$(($(micros) - start_us)); printf '%d.%d' $((d / 1000000)) $((d % 1000000 / 100000)); }

# Prints a sample's JSON line (stdout, and the samples file) and its human line (stderr).
report() { # report T EPOCH END RSS_MB HWM_MB FDS SOCKETS THREADS POOL_IDLE_MB|"" [EXTRA_JSON_FIELDS]
    local json="{\"bench\":\"soak\",\"t_s\":$1,\"epoch\":$2,\"end_of_epoch\":$3,\"rss_mb\":$4,\"hwm_mb\":${5:-null},\"fds\":$6,\"sockets\":$7,\"threads\":$8"
    [[ -n ${9:-} ]] && json+=",\"pool_idle_mb\":$9"
    json+=${10:-}
    echo "$json}" | tee -a "$samples_out"
    if [[ $3 == true ]]; then
        printf 'soak.sh: t %6s s  epoch %3d end  RSS %7s MB  pool idle %7s MB  fds %4d (sockets %3d)  threads %3d\n' "$1" "$2" "$4" "$9" "$6" "$7" "$8" >&2
    else
        printf 'soak.sh: t %6s s  epoch %3d      RSS %7s MB  peak      %7s MB  fds %4d (sockets %3d)  threads %3d\n' "$1" "$2" "$4" "$5" "$6" "$7" "$8" >&2
    fi
}

# One sample of the process from outside: VmRSS, VmHWM, Threads and the entries of
# /proc/PID/fd; fails when the process is gone.
sample() { # sample EPOCH
    local status rss=0 hwm=0 thr=0 key value rest t
    status=$(cat "/proc/$bench_pid/status" 2>/dev/null) || return 1
    while read -r key value rest; do
        case $key in
            VmRSS:) rss=$value ;;
            VmHWM:) hwm=$value ;;
            Threads:) thr=$value ;;
        esac
    done <<<"$status"
    # One pass over the descriptors, each read once: the total and the sockets agree.
    local -a links=()
    mapfile -t links < <(find "/proc/$bench_pid/fd" -mindepth 1 -maxdepth 1 -printf '%l\n' 2>/dev/null) || true
    ((${#links[@]} > 0 && rss > 0)) || return 1
    local sockets=0 l
    for l in "${links[@]}"; do [[ $l == socket:* ]] && sockets=$((sockets + 1)); done
    # The other descriptors by kind (inode numbers left out), to say what grew if they do.
    local other
    other=$(printf '%s\n' "${links[@]}" | grep -v '^socket:' | sed 's/:\[[0-9]*\]$//' | sort | uniq -c |
        awk '{ k = $2; for (i = 3; i <= NF; i++) k = k " " $i; gsub(/["\\]/, "", k); printf "%s\"%s\":%d", (NR > 1 ? "," : ""), k, $1 }')
    report "$(seconds_since_start)" "$1" false "$(mb "$rss")" "$(mb "$hwm")" "${#links[@]}" "$sockets" "$thr" "" ",\"other_fds\":{$other}"
}

# The bench's own figures at the end of an epoch (the process once the epoch's run is torn
# down; no race with its exit after the last epoch).
epoch_end() { # epoch_end EPOCH JSON-LINE
    local rss=0 nfds=0 sockets=0 thr=0 idle=0
    [[ $2 =~ \"rss_end_mb\":([0-9.]+) ]] && rss=${BASH_REMATCH[1]}
    [[ $2 =~ \"fds_end\":([0-9]+) ]] && nfds=${BASH_REMATCH[1]}
    [[ $2 =~ \"sockets_end\":([0-9]+) ]] && sockets=${BASH_REMATCH[1]}
    [[ $2 =~ \"threads_end\":([0-9]+) ]] && thr=${BASH_REMATCH[1]}
    [[ $2 =~ \"pool_idle_mb\":([0-9.]+) ]] && idle=${BASH_REMATCH[1]}
    report "$(seconds_since_start)" "$1" true "$(awk -v r="$rss" 'BEGIN { printf "%.1f", r }')" "" "$nfds" "$sockets" "$thr" \
        "$(awk -v r="$idle" 'BEGIN { printf "%.1f", r }')"
}

# Poll for epoch lines often; sample every `interval` seconds.
seen=0 next_us=0
while :; do
    alive=0
    kill -0 "$bench_pid" 2>/dev/null && alive=1
    mapfile -t done_lines < <(epoch_lines)
    while ((seen < ${#done_lines[@]})); do
        epoch_end "$seen" "${done_lines[seen]}"
        seen=$((seen + 1))
    done
    ((alive)) || break
    if (($(micros) >= next_us)); then
        ((seen < epochs)) && { sample "$seen" || true; }
        next_us=$(($(micros) + interval_us))
    fi
    sleep 0.2
done
bench_rc=0
wait "$bench_pid" || bench_rc=$?
bench_pid=
grep '^{' "$bench_out" || true
curl -fsS "$admin/fault-plan" >"$tmp/plan.json" || echo '{}' >"$tmp/plan.json"
curl -fsS -X DELETE "$admin/fault-plan" >/dev/null || true

# ---- the verdict
"$py" - "$bench_out" "$samples_out" "$tmp/plan.json" "$bench_rc" "$bench_err" "$epochs" "$samples" \
    "$rss_tol_mb" "$rss_tol_pct" "$rate" "$shards" "$pool_mb" <<'PY'
import json, sys

bench_out, samples_out, plan_file, bench_rc, bench_err = sys.argv[1:6]
epochs, samples, tol_mb, tol_pct = int(sys.argv[6]), int(sys.argv[7]), float(sys.argv[8]), float(sys.argv[9])
rate, shards, pool_mb = float(sys.argv[10]), int(sys.argv[11]), int(sys.argv[12])
bench_rc = int(bench_rc)
# The runtime's buffer pool keeps at most its cap of idle memory, plus up to half of it in
# slabs (core/buffer.hpp): 1.5 times runtime_options::buffer_pool_bytes (256 MiB by default).
pool_bound_mb = 1.5 * (pool_mb if pool_mb else 256) * 1.048576
# The S3 client keeps its connections alive between requests, up to its cap
# (http::client_options::max_connections, 64 by default; max_idle is that too): the sockets
# it holds follow the high-water mark of the requests in flight, bounded by that cap.
socket_cap = 64
err = lambda *a: print(*a, file=sys.stderr)


def lines(path):
    out = []
    for l in open(path):
        l = l.strip()
        if l.startswith("{"):
            try:
                out.append(json.loads(l))
            except ValueError:
                pass
    return out


ep = {d["epoch"]: d for d in lines(bench_out) if d.get("bench") == "pipeline" and d.get("engine") == "conveyor-shards"}
smp = lines(samples_out)
plan = json.load(open(plan_file)).get("plan") or {}

per = {}
for s in smp:
    m = per.setdefault(s["epoch"], {"rss": 0.0, "fds": 0, "sockets": 0, "other_fds": 0, "threads": 0, "n": 0})
    m["rss"] = max(m["rss"], s["rss_mb"])
    m["fds"] = max(m["fds"], s["fds"])
    m["sockets"] = max(m["sockets"], s["sockets"])
    m["other_fds"] = max(m["other_fds"], s["fds"] - s["sockets"])
    m["threads"] = max(m["threads"], s["threads"])
    m["n"] += 1
# Held: the epoch's highest RSS less the pool's idle memory at its end: what the process keeps
# beside the buffers the pool may cache (their high-water mark grows toward its cap, by design).
held = {e: per[e]["rss"] - ep[e]["pool_idle_mb"] for e in per if e in ep}

problems = []
if bench_rc != 0:
    tail = [l.rstrip() for l in open(bench_err)][-5:]
    problems.append("the bench exited with status %d: %s" % (bench_rc, " | ".join(tail)))
if len(ep) != epochs:
    problems.append("%d of %d epochs completed" % (len(ep), epochs))
for e in sorted(ep):
    if ep[e]["images"] != samples:
        problems.append("epoch %d delivered %d of %d samples" % (e, ep[e]["images"], samples))

err("soak.sh: epoch | samples | max RSS MB | pool idle MB | held MB | max fds | sockets | other fds | max threads | images | retries | failed attempts (status/connection/timeout/short body)")
for e in range(epochs):
    m, d = per.get(e), ep.get(e)
    err("soak.sh: %5d | %7s | %10s | %12s | %7s | %7s | %7s | %9s | %11s | %6s | %7s | %s" % (
        e, m["n"] if m else "-", "%.1f" % m["rss"] if m else "-", "%.1f" % d["pool_idle_mb"] if d else "-",
        "%.1f" % held[e] if e in held else "-", m["fds"] if m else "-", m["sockets"] if m else "-",
        m["other_fds"] if m else "-", m["threads"] if m else "-",
        d["images"] if d else "-", d.get("retries", "-") if d else "-",
        "%s/%s/%s/%s" % (d.get("status_errors"), d.get("connection_errors"), d.get("timeouts"), d.get("short_bodies")) if d else "-"))


def slope(xs, ys):
    if len(xs) < 2:
        return 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


flat = {}
rss_slope = held_slope = None
if 0 in per and 1 in per and 1 in held:
    base = held[1]
    bound = base + max(tol_mb, base * tol_pct / 100)
    grew = [(e, held[e]) for e in sorted(held) if e >= 2 and held[e] > bound]
    flat["rss"] = not grew
    for e, v in grew:
        problems.append("RSS not flat: epoch %d held %.1f MB beside the pool's idle memory, over the bound %.1f MB "
                        "(epoch 1's %.1f MB + max(%g MB, %g%%))" % (e, v, bound, base, tol_mb, tol_pct))
    over_pool = [(e, ep[e]["pool_idle_mb"]) for e in sorted(ep) if ep[e]["pool_idle_mb"] > pool_bound_mb]
    flat["pool"] = not over_pool
    for e, v in over_pool:
        problems.append("the buffer pool kept %.1f MB idle at the end of epoch %d, over its bound %.1f MB" % (v, e, pool_bound_mb))
    for what, name in (("other_fds", "descriptors other than sockets"), ("threads", "threads")):
        b = per[0][what]
        over = [(e, per[e][what]) for e in sorted(per) if e >= 1 and per[e][what] > b]
        flat[what] = not over
        for e, v in over:
            problems.append("%s not flat: epoch %d reached %d, over epoch 0's %d" % (name, e, v, b))
            if what == "other_fds": # what they were, in the epoch's first sample that had that many
                kinds = next((s["other_fds"] for s in smp if s["epoch"] == e and s["fds"] - s["sockets"] == v and "other_fds" in s), None)
                if kinds:
                    problems.append("  epoch %d's other descriptors: %s" % (e, ", ".join("%s x%d" % kv for kv in sorted(kinds.items()))))
    over = [(e, per[e]["sockets"]) for e in sorted(per) if per[e]["sockets"] > socket_cap]
    flat["sockets"] = not over
    for e, v in over:
        problems.append("sockets not bounded: epoch %d held %d, over the S3 client's connection cap %d" % (e, v, socket_cap))
    later = sorted(e for e in per if e >= 1)
    later_held = sorted(e for e in held if e >= 1)
    rss_slope = slope(later, [per[e]["rss"] for e in later])
    held_slope = slope(later_held, [held[e] for e in later_held])
    last = max(later)
    err("soak.sh: RSS: epoch 1 max %.1f MB, epoch %d max %.1f MB (%+.2f MB per epoch); the pool's idle memory %.1f -> %.1f MB (bound %.1f MB)"
        % (per[1]["rss"], last, per[last]["rss"], rss_slope, ep[1]["pool_idle_mb"], ep[max(ep)]["pool_idle_mb"], pool_bound_mb))
    err("soak.sh: held beside the pool: bound %.1f MB (epoch 1's %.1f MB + max(%g MB, %g%%)); epochs 2.. max %.1f MB (%+.2f MB per epoch)"
        % (bound, base, tol_mb, tol_pct, max((held[e] for e in held if e >= 2), default=base), held_slope))
    err("soak.sh: fds: epoch 0 max %d, epochs 1.. max %d; of them sockets: epoch 0 max %d, epochs 1.. max %d (cap %d); "
        "other descriptors: epoch 0 max %d, epochs 1.. max %d; threads: epoch 0 max %d, epochs 1.. max %d"
        % (per[0]["fds"], max(per[e]["fds"] for e in later), per[0]["sockets"], max(per[e]["sockets"] for e in later), socket_cap,
           per[0]["other_fds"], max(per[e]["other_fds"] for e in later), per[0]["threads"], max(per[e]["threads"] for e in later)))
else:
    problems.append("fewer than two epochs were sampled: nothing to call flat")

lines_ = list(ep.values())
retries = sum(d.get("retries", 0) for d in lines_)
requests = sum(d.get("requests", 0) for d in lines_)
causes = {k: sum(d.get(k, 0) for d in lines_) for k in ("status_errors", "connection_errors", "timeouts", "short_bodies", "retries_refused")}
injected = plan.get("injected", {})
err("soak.sh: faults injected: %d of %d GETs matched (%s)" % (plan.get("faulted", 0), plan.get("requests", 0),
    ", ".join("%s %d" % kv for kv in sorted(injected.items()))))
err("soak.sh: client: %d requests, %d retries; failed attempts: %s" % (requests, retries,
    ", ".join("%s %d" % kv for kv in causes.items())))
if rate > 0 and plan.get("faulted", 0) == 0:
    problems.append("no fault was injected (rate %g)" % rate)

col = lambda f: [f(e) for e in range(epochs)]
summary = {"bench": "soak-summary", "epochs": epochs, "epochs_completed": len(ep), "samples_per_epoch": samples,
           "shards": shards, "delivered": col(lambda e: ep[e]["images"] if e in ep else None), "bench_rc": bench_rc,
           "max_rss_mb": col(lambda e: round(per[e]["rss"], 1) if e in per else None),
           "pool_idle_mb": col(lambda e: round(ep[e]["pool_idle_mb"], 1) if e in ep else None),
           "held_mb": col(lambda e: round(held[e], 1) if e in held else None),
           "max_fds": col(lambda e: per[e]["fds"] if e in per else None),
           "max_sockets": col(lambda e: per[e]["sockets"] if e in per else None),
           "max_other_fds": col(lambda e: per[e]["other_fds"] if e in per else None),
           "max_threads": col(lambda e: per[e]["threads"] if e in per else None),
           "rss_slope_mb_per_epoch": None if rss_slope is None else round(rss_slope, 3),
           "held_slope_mb_per_epoch": None if held_slope is None else round(held_slope, 3),
           "peak_rss_mb": max((s["hwm_mb"] for s in smp if s["hwm_mb"] is not None), default=0),
           "flat": flat, "fault_rate": rate, "faults_injected": injected, "faulted": plan.get("faulted", 0),
           "gets_matched": plan.get("requests", 0), "requests": requests, "retries": retries, "failed_attempts": causes,
           "seconds": smp[-1]["t_s"] if smp else 0, "problems": problems}
print(json.dumps(summary, separators=(",", ":")))
if problems:
    for p in problems:
        err("soak.sh: FAIL: " + p)
    sys.exit(1)
err("soak.sh: OK: RSS (beside the pool's idle memory), descriptors (sockets under the client's cap) and threads flat after the first epoch; %d epochs each delivered all %d samples under %d faults"
    % (epochs, samples, plan.get("faulted", 0)))
PY
