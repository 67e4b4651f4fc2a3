#!/usr/bin/env bash
# compare_builds.sh BEFORE AFTER — two builds of conveyor-bench side by side in one run, for
# a change meant to leave speed as it was. Alternates the builds (BEFORE, AFTER) ROUNDS
# times over the same data, each round:
#   pipeline  conveyor-bench pipeline SHARDS/index.json --batch 256 --threads 2 (images/s, and
#             the decode-only rate it prints)
#   files     conveyor-bench files --engine uring, then --engine ring (the bare io_uring loop:
#             no library code, so it shows the machine's drift), --concurrency 64 --repeat 3
#   s3-get    conveyor-bench s3-get --anonymous against bench/nginx_bucket.sh at DELAY ms to the
#             first byte (LIMIT objects of the file set, served as bucket "bench")
#
# usage: compare_builds.sh BEFORE AFTER [--rounds 3] [--shards DIR] [--files DIR] [--delay-ms 20]
#                          [--limit 5000] [--out FILE]
#   BEFORE, AFTER  conveyor-bench binaries (e.g. build/default/bench/conveyor-bench of two trees)
#   --shards DIR   tar shards with an index.json; default: the quickstart's (2,560 JPEGs in 4
#                  shards), made by AFTER's examples/quickstart --epochs 0 under
#                  /tmp/conveyor-quickstart when missing
#   --files DIR    an ImageNet-like file set; default /tmp/cv-files, made by
#                  `conveyor-bench gen-files --count 20000` when missing (2.2 GB)
# Prints every JSON line, with "which" and "round" added, on stdout (and to FILE); then on
# stderr a table of medians with their range for each build and the ratio after/before.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage() { sed -n '12,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
(($# >= 2)) || usage
before=$1 after=$2
shift 2
rounds=3 shards='' files=/tmp/cv-files delay=20 limit=5000 out=''
while (($#)); do
    case $1 in
        --rounds) rounds=$2; shift 2 ;;
        --shards) shards=$2; shift 2 ;;
        --files) files=$2; shift 2 ;;
        --delay-ms) delay=$2; shift 2 ;;
        --limit) limit=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) usage ;;
    esac
done
for b in "$before" "$after"; do
    [[ -x $b ]] || { echo "$0: $b is not an executable conveyor-bench" >&2; exit 2; }
done

if [[ -z $shards ]]; then
    shards=/tmp/conveyor-quickstart/shards
    if [[ ! -f $shards/index.json ]]; then
        quickstart=$(dirname "$after")/../examples/quickstart
        [[ -x $quickstart ]] || { echo "$0: no shards at $shards and no quickstart at $quickstart to make them" >&2; exit 2; }
        echo "== making the quickstart's shards" >&2
        "$quickstart" --dir /tmp/conveyor-quickstart --epochs 0 >&2
    fi
fi
[[ -f $shards/index.json ]] || { echo "$0: $shards has no index.json" >&2; exit 2; }
if [[ ! -d $files ]]; then
    echo "== making the file set $files" >&2
    "$after" gen-files --dir "$files" --count 20000 >&2
fi

# The bucket: a folder whose "bench/train" is the file set.
bucket_root=$(mktemp -d)
state=$(mktemp -d)
lines=$(mktemp)
cleanup() {
    bash "$here/nginx_bucket.sh" stop --state-dir "$state" >/dev/null 2>&1 || true
    rm -rf "$bucket_root" "$state" "$lines"
}
trap cleanup EXIT
mkdir -p "$bucket_root/bench"
ln -s "$(cd "$files" && pwd)" "$bucket_root/bench/train"
endpoint=$(bash "$here/nginx_bucket.sh" start --root "$bucket_root" --delay-ms "$delay" --state-dir "$state" | tail -1)
echo "== nginx bucket at $endpoint, $delay ms to the first byte" >&2

tag() { # which round: adds both to each JSON line
    python3 -c '
import json, sys
for l in sys.stdin:
    l = l.strip()
    if l.startswith("{"):
        r = json.loads(l); r["which"] = sys.argv[1]; r["round"] = int(sys.argv[2]); print(json.dumps(r), flush=True)
' "$1" "$2" | tee -a "$lines"
}

for ((r = 0; r < rounds; ++r)); do
    for which in before after; do
        bin=$before
        [[ $which == after ]] && bin=$after
        echo "== round $r, $which: pipeline" >&2
        "$bin" pipeline "$shards/index.json" --batch 256 --threads 2 | tag "$which" "$r"
        for engine in uring ring; do
            echo "== round $r, $which: files $engine" >&2
            "$bin" files --dir "$files" --engine "$engine" --concurrency 64 --repeat 3 | tag "$which" "$r"
        done
        echo "== round $r, $which: s3-get" >&2
        "$bin" s3-get --endpoint "$endpoint" --bucket bench --prefix train/ --limit "$limit" --anonymous | tag "$which" "$r"
    done
done
[[ -n $out ]] && cp "$lines" "$out"

python3 - "$lines" <<'PY' >&2
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def pick(r):
    b, e = r.get("bench"), r.get("engine")
    if b == "pipeline" and e == "decode-only": return "decode-only, images/s", r["images_per_s"]
    if b == "pipeline" and "threads" in r and e not in ("source-only",) and "batches" in r: return "pipeline, images/s", r["images_per_s"]
    if b == "files" and "files_per_s" in r: return f"files {e}, files/s", r["files_per_s"]
    if b == "s3-get" and "objects_per_s" in r and not r.get("second"): return "s3-get, objects/s", r["objects_per_s"]
    return None
def pick_p50(r):
    if r.get("bench") == "s3-get" and "p50_ms" in r: return "s3-get p50, ms", r["p50_ms"]
    return None
got = {}
for r in rows:
    for f in (pick, pick_p50):
        k = f(r)
        if k: got.setdefault((k[0], r["which"]), []).append(k[1])
names = []
for (n, _) in got:
    if n not in names: names.append(n)
def cell(v):
    if not v: return "-"
    return f"{statistics.median(v):,.1f} ({min(v):,.1f}-{max(v):,.1f}, n={len(v)})"
print(f"\n{'bench':<24} {'before':<36} {'after':<36} after/before")
for n in names:
    b, a = got.get((n, "before"), []), got.get((n, "after"), [])
    ratio = statistics.median(a) / statistics.median(b) if a and b else float("nan")
    print(f"{n:<24} {cell(b):<36} {cell(a):<36} {ratio:.3f}")
PY
