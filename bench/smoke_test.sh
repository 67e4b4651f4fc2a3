#!/usr/bin/env bash
# smoke_test.sh CONVEYOR_BENCH [MICRO_BENCH] — proves the benchmarks run and agree, on a tiny
# file set; registered with ctest. Timings are printed, never judged (that is what the
# benchmarks are for). Fails if a subcommand fails or the engines read different bytes.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
    echo "usage: $0 CONVEYOR_BENCH [MICRO_BENCH]" >&2
    exit 2
fi
bench=$1
micro=${2:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$bench" gen-files --dir "$work/files" --count 300 --classes 7 --write-index "$work/index.json" >"$work/gen.json"
# Re-running finds every file in place and writes none.
"$bench" gen-files --dir "$work/files" --count 300 --classes 7 | grep -q '"written":0,'

{
    "$bench" files --dir "$work/files" --engine ifstream --repeat 1
    "$bench" files --dir "$work/files" --engine pread --concurrency 4 --repeat 2
    "$bench" files --dir "$work/files" --engine pread --concurrency 2 --buffers 5
    "$bench" files --dir "$work/files" --engine uring --concurrency 16 --repeat 2
    "$bench" files --index "$work/index.json" --root "$work/files" --engine uring --concurrency 8 --unordered
    "$bench" files --dir "$work/files" --engine pread --concurrency 2 --cold
    "$bench" files --dir "$work/files" --engine uring --concurrency 64 --limit 100
    "$bench" files --dir "$work/files" --engine ring --concurrency 16 --repeat 2
    "$bench" files --dir "$work/files" --engine ring --concurrency 7 --io-threads 3 --no-consumer
} >"$work/files.json"
"$bench" random-access --dir "$work/files" --count 200 --inflight 1 --inflight 8 >"$work/random.json"
"$bench" drop-cache --dir "$work/files"

python3 - "$work/gen.json" "$work/files.json" "$work/random.json" <<'PY'
import json, sys
gen = json.loads(open(sys.argv[1]).read())
files = [json.loads(l) for l in open(sys.argv[2])]
rand = [json.loads(l) for l in open(sys.argv[3])]
assert gen["files"] == 300 and gen["written"] == 300, gen
full = [r for r in files if r["files"] == 300]
assert len(full) == 11, f"expected 11 full passes, got {len(full)}"
assert [r.get("buffers") for r in full if r["engine"] == "pread"] == [1, 1, 5, 1], full
# ring: 16 in flight over 2 threads, twice as many buffers; 7 over 3 threads is 2 each.
ring = [(r["io_threads"], r["consumer"], r["buffers"]) for r in full if r["engine"] == "ring"]
assert ring == [(2, True, 32), (2, True, 32), (3, False, 12)], ring
sizes = {r["bytes"] for r in full}
assert sizes == {gen["bytes"]}, f"engines disagree on bytes: {sizes} vs gen-files {gen['bytes']}"
limited = [r for r in files if r["files"] == 100]
assert len(limited) == 1, files
for r in files:
    for k in ("seconds", "files_per_s", "MB_per_s", "p50_us", "p99_us", "cpu_s", "max_rss_MB"):
        assert r[k] is not None and r[k] >= 0, (k, r)
assert [r["inflight"] for r in rand] == [1, 8], rand
assert all(r["items"] == 200 for r in rand), rand
print(f"smoke: {len(files)} file passes and {len(rand)} random-access runs agree on {gen['bytes']} bytes")
PY

# The tensor-loading cases, a few iterations each on tiny synthetic JPEGs. The GPU cases
# run where there is a GPU and a CUDA build, and are skipped (saying why) where there is not.
"$bench" tensors --case all --synthetic 12 --size 64 --batch 4 --iterations 5 --threads 2 --inflight 4 \
    >"$work/tensors.json" 2>"$work/tensors.err" || { cat "$work/tensors.err" >&2; exit 1; }
python3 - "$work/tensors.json" "$work/tensors.err" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
err = open(sys.argv[2]).read()
assert [r["case"] for r in lines] == ["single_image", "random_image", "random_gpu", "random_to_gpu"], lines
per_image = 64 * 64 * 3
expect = {  # case: (images per tensor, bytes per tensor, dtype)
    "single_image": (1, per_image, "uint8"),
    "random_image": (4, 4 * per_image, "uint8"),
    "random_gpu": (4, 4 * 3 * 64 * 64 * 4, "float32"),
    "random_to_gpu": (4, 4 * 3 * 64 * 64 * 4, "float32"),
}
for r in lines:
    if r["skipped"]:
        assert r["case"] in ("random_gpu", "random_to_gpu"), f"an image case was skipped: {r}"
        assert r["reason"], r
        assert f'{r["case"]}: skipped: {r["reason"]}' in err, f"the summary does not say why {r['case']} was skipped"
        continue
    images, nbytes, dtype = expect[r["case"]]
    assert r["tensors"] == 5 and r["images"] == 5 * images and r["bytes"] == 5 * nbytes and r["dtype"] == dtype, r
    for k in ("tensors_per_s", "images_per_s", "GB_per_s", "p50_ms", "p99_ms", "seconds"):
        assert r[k] > 0, (k, r)
    assert r["p99_ms"] >= r["p50_ms"], r
    # JSON numbers carry 6 significant digits: the ratio is exact only to about 1e-5.
    assert abs(r["images_per_s"] / r["tensors_per_s"] - images) < 1e-4 * images, r
ran = [r["case"] for r in lines if not r["skipped"]]
print(f"smoke: tensors ran {', '.join(ran)}; skipped {', '.join(r['case'] for r in lines if r['skipped']) or 'none'}")
PY

# mix: one source and a mix of three, alternated; each pass reads every item once.
"$bench" mix --items 30000 --rounds 2 >"$work/mix.json"
python3 - "$work/mix.json" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
passes = [r for r in lines if r["case"] != "summary"]
assert [r["case"] for r in passes] == ["one", "mix3", "one", "mix3"], passes
assert all(r["items"] == 30000 and r["items_per_s"] > 0 for r in passes), passes
assert lines[-1]["case"] == "summary" and lines[-1]["ratio_median"] > 0, lines[-1]
print("smoke: mix read every item once in each of its 4 passes")
PY

if [[ -n $micro ]]; then
    "$micro" --benchmark_filter='on_lane|channel' --benchmark_min_time=0.01
fi
