#!/usr/bin/env bash
# compare_make_shards.sh — examples/make_shards against GNU `tar -cf` over the same files
# (warm page cache), alternating which goes first, repeated; then make_shards' full shuffle
# (--shuffle: every sample read back in a random order), from the files and from a tar of
# per-class tars of them (ImageNet's train archive layout, read back by offset). Prints one JSON line per
# run (stdout) and a table of medians (stderr); fails if a run fails or the shards do not
# hold every input byte.
#
# Environment: CONVEYOR_BENCH (the conveyor-bench binary, for gen-files), MAKE_SHARDS (the
# make_shards binary; default: beside conveyor-bench in the same build), DIR (work folder;
# default /tmp/conveyor-make-shards-bench), COUNT (files; default 20000, ImageNet-sized:
# ~2.2 GB), REPEAT (default 5), WORKERS (make_shards --workers values; default "1 4"),
# MAXSIZE (make_shards --maxsize; default 1e9).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=find_bench.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_bench.sh"
[[ -n $bench_bin && -x $bench_bin ]] || { echo "$0: conveyor-bench not found; build it or set CONVEYOR_BENCH" >&2; exit 2; }
make_shards=${MAKE_SHARDS:-$(dirname "$bench_bin")/../examples/make_shards}
[[ -x $make_shards ]] || { echo "$0: make_shards not found at $make_shards; set MAKE_SHARDS" >&2; exit 2; }
dir=${DIR:-/tmp/conveyor-make-shards-bench}
count=${COUNT:-20000}
repeat=${REPEAT:-5}
workers=${WORKERS:-1 4}
maxsize=${MAXSIZE:-1e9}

mkdir -p "$dir"
"$bench_bin" gen-files --dir "$dir/files" --count "$count" >/dev/null
input_bytes=$(find "$dir/files" -type f -printf '%s\n' | python3 -c 'import sys; print(sum(int(l) for l in sys.stdin))')
lines=$(mktemp)
trap 'rm -f "$lines"; rm -rf "$dir/out"' EXIT

# Warm the page cache: both tools read the same cached files.
find "$dir/files" -type f -print0 | xargs -0 cat >/dev/null

now() { date +%s.%N; }
record() { # tool seconds output_bytes
    python3 -c 'import json,sys; t,s,o,i=sys.argv[1],float(sys.argv[2]),int(sys.argv[3]),int(sys.argv[4]); print(json.dumps({"bench":"make_shards","tool":t,"seconds":round(s,3),"input_bytes":i,"output_bytes":o,"MB_per_s":round(i/1e6/s,1)}))' \
        "$1" "$2" "$3" "$input_bytes" | tee -a "$lines"
}
run_tar() {
    rm -rf "$dir/out" && mkdir -p "$dir/out" && sync
    local t0 t1; t0=$(now)
    (cd "$dir/files" && tar -cf "$dir/out/all.tar" .)
    t1=$(now)
    record "tar -cf" "$(echo "$t1 - $t0" | bc)" "$(stat -c %s "$dir/out/all.tar")"
}
run_ms() { # label input-flag input args...
    local label=$1 flag=$2 input=$3; shift 3
    rm -rf "$dir/out" && mkdir -p "$dir/out" && sync
    local t0 t1; t0=$(now)
    "$make_shards" "$flag" "$input" --output "$dir/out/shard-%06d.tar" --maxsize "$maxsize" --index "$dir/out/index.json" "$@" \
        >/dev/null 2>"$dir/ms.log" || { cat "$dir/ms.log" >&2; exit 1; }
    t1=$(now)
    local out; out=$(cat "$dir"/out/shard-*.tar | wc -c)
    python3 - "$dir/out/index.json" "$input_bytes" <<'PY' || { echo "$0: $label: the shards do not hold the input" >&2; exit 1; }
import json, sys
idx = json.load(open(sys.argv[1]))
jpg = sum(e["fields"]["jpg"]["size"] for s in idx["shards"] for e in s["entries"])
assert jpg == int(sys.argv[2]), (jpg, sys.argv[2])
PY
    record "$label" "$(echo "$t1 - $t0" | bc)" "$out"
}

# ImageNet's layout for the shuffle from one big file: a tar of per-class tars of the same
# files (made once, kept), every sample read back by offset in a random order.
if [[ ! -s $dir/train.tar ]]; then
    mkdir -p "$dir/classes"
    for c in $(ls "$dir/files"); do [[ -d $dir/files/$c ]] && (cd "$dir/files/$c" && tar -cf "$dir/classes/$c.tar" .); done
    (cd "$dir/classes" && tar -cf "$dir/train.tar" ./*.tar) && rm -rf "$dir/classes"
fi
cat "$dir/train.tar" >/dev/null

for ((r = 0; r < repeat; r++)); do
    echo "== repeat $((r + 1))/$repeat" >&2
    if ((r % 2 == 0)); then run_tar; fi
    for w in $workers; do run_ms "make_shards --workers $w" --folder "$dir/files" --workers "$w"; done
    if ((r % 2 == 1)); then run_tar; fi
    for w in $workers; do run_ms "make_shards --shuffle --workers $w" --folder "$dir/files" --shuffle --seed "$r" --workers "$w"; done
    for w in $workers; do run_ms "make_shards --tar --shuffle --workers $w" --tar "$dir/train.tar" --shuffle --seed "$r" --workers "$w"; done
done

python3 - "$lines" "$count" <<'PY' >&2
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
groups = {}
for r in rows:
    groups.setdefault(r["tool"], []).append(r)
tar = statistics.median(r["seconds"] for r in groups["tar -cf"])
print()
print(f"{sys.argv[2]} files, {rows[0]['input_bytes'] / 1e9:.2f} GB, warm cache; medians of {len(groups['tar -cf'])}")
print(f"{'tool':34} {'seconds':>8} {'MB/s':>8} {'files/s':>9} {'x tar':>6}")
for tool, rs in groups.items():
    s = statistics.median(r["seconds"] for r in rs)
    print(f"{tool:34} {s:>8.2f} {rs[0]['input_bytes'] / 1e6 / s:>8.0f} {int(sys.argv[2]) / s:>9.0f} {tar / s:>6.2f}")
PY
