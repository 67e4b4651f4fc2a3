#!/usr/bin/env bash
# torch_baseline_test.sh MAKE_SHARDS — the ctest `bench_torch_baseline`: bench/torch_baseline.py
# runs in both modes on a tiny synthetic dataset (36 JPEGs in 4 classes, packed into 4 shards
# by conveyor's make_shards) with 2 workers, and its JSON counts every image, label and byte.
# Timings are printed, never judged. Exits 77 (ctest SKIP_RETURN_CODE) when Debian's
# /usr/bin/python3 cannot import torch, torchvision and PIL (scripts/install-deps.sh installs them).
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 MAKE_SHARDS" >&2
    exit 2
fi
make_shards=$1
py=${TORCH_BASELINE_PYTHON:-${CONVEYOR_PYTHON:-/usr/bin/python3}}  # another interpreter: to see the skip
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
baseline=$here/torch_baseline.py

if [[ ! -x $py ]]; then
    echo "torch_baseline_test: skipped: $py not found (Debian's python3 runs the baseline)"
    exit 77
fi
if ! why=$("$py" -c 'import torch, torchvision, PIL, numpy' 2>&1); then
    echo "torch_baseline_test: skipped: $py cannot import torch, torchvision, PIL and numpy" \
         "(Debian: python3-torch python3-torchvision python3-pil): ${why##*$'\n'}"
    exit 77
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$py" "$baseline" make-images --dir "$work/train" --count 36 --classes 4 --width 160 --height 120 >"$work/gen.json"
"$make_shards" --folder "$work/train" --output "$work/shards/shard-%06d.tar" --maxcount 9 >"$work/make_shards.json"

run() { echo "+ torch_baseline.py $*" >&2; "$py" "$baseline" "$@"; }
{
    # a brace range; 4 shards for 2 workers: split by sample; 2 epochs over persistent workers
    run shards --urls "$work/shards/shard-{000000..000003}.tar" --workers 2 --batch 8 --size 64 --epochs 2
    # a folder of shards, split by shard, a shuffle buffer, a limit
    run shards --urls "$work/shards" --workers 2 --batch 8 --size 64 --split shards --shuffle-buffer 5 --limit 20 --draft
    run files --urls "$work/train" --workers 2 --batch 8 --size 64
    run files --urls "$work/train" --workers 2 --batch 8 --size 48 --limit 20 --float
} >"$work/runs.json"

"$py" - "$work/gen.json" "$work/runs.json" "$work/train" <<'PY'
import json, os, sys
gen = json.load(open(sys.argv[1]))
lines = [json.loads(l) for l in open(sys.argv[2])]
root = sys.argv[3]
files = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
assert len(files) == 36 == gen["images"], (len(files), gen)
total_bytes = sum(os.path.getsize(f) for f in files)
assert total_bytes == gen["bytes"], (total_bytes, gen)
# make-images puts image n in class n % 4, and make_shards / ImageFolder number the sorted
# class folders from 0: the labels of a whole epoch sum to this
label_sum = sum(n % 4 for n in range(36))

required = {"bench", "engine", "images", "batches", "seconds", "images_per_s", "mb_per_s",
            "time_to_first_batch_s", "peak_rss_mb", "workers", "batch", "size"}
for l in lines:
    missing = required - l.keys()
    assert not missing, f"fields missing: {missing} in {l}"
    assert l["bench"] == "pipeline" and l["workers"] == 2 and l["batch"] == 8, l
    assert l["seconds"] > 0 and l["images_per_s"] > 0 and l["peak_rss_mb"] > 0, l
    assert l["batch_shape"][1:] == [3, l["size"], l["size"]], l

def runs(engine):
    out, cur = [], []
    for l in lines:
        if l["engine"] != engine:
            continue
        cur.append(l)
        if l["epoch"] == "all":
            out.append(cur)
            cur = []
    return out

shards = runs("torch-shards")
files_ = runs("torch-files")
assert len(shards) == 2 and len(files_) == 2, (len(shards), len(files_))

full = shards[0]
assert [l["epoch"] for l in full] == [0, 1, "all"], full
for l in full[:2]:
    assert l["images"] == 36 and l["bytes"] == total_bytes and l["label_sum"] == label_sum, l
    assert l["shards"] == 4 and l["split"] == "samples", l
    # each worker batches its own samples: 18 each in batches of 8 -> 3 batches each
    assert l["batches"] == 6, l
assert full[2]["images"] == 72 and full[2]["bytes"] == 2 * total_bytes and full[2]["batches"] == 12, full[2]

limited = shards[1]
assert limited[0]["images"] == 20 and limited[0]["split"] == "shards" and limited[0]["draft"], limited[0]
assert limited[-1]["images"] == 20, limited[-1]

ff = files_[0]
assert ff[0]["images"] == 36 and ff[0]["bytes"] == total_bytes and ff[0]["label_sum"] == label_sum, ff[0]
assert ff[0]["batches"] == 5 and ff[0]["dtype"] == "uint8", ff[0]
fl = files_[1]
assert fl[0]["images"] == 20 and fl[0]["batches"] == 3 and fl[0]["dtype"] == "float32", fl[0]
assert fl[0]["batch_shape"] == [8, 3, 48, 48], fl[0]
print(f"torch_baseline_test: ok ({len(lines)} JSON lines checked)")
PY
