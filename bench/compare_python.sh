#!/usr/bin/env bash
# compare_python.sh — the Python module against the C++ pipeline and PyTorch's DataLoader,
# over the same tar shards, cores and transforms, alternated ROUNDS times:
#   cpp      conveyor-bench pipeline SPEC --threads T --batch B --size S --epochs E
#   python   bench/python_pipeline.py SPEC with the same (the module's builder, a Python loop
#            taking each batch as torch tensors)
#   torch    bench/torch_baseline.py shards over the same shards: T DataLoader workers (one
#            torch thread each), PIL decode, RandomResizedCrop(S) and RandomHorizontalFlip,
#            uint8 batches of B; a sample shuffle buffer of 1000/T per worker (1000 in all,
#            as conveyor's shuffle(1000))
# Each round's figure for an engine is the median of its epochs 1..E-1 (epoch 0 also warms
# the pools and, for the DataLoader, starts the workers; with E = 1, epoch 0).
#
# usage: compare_python.sh [--shards DIR] [--threads 2] [--batch 256] [--size 224] [--epochs 3]
#                          [--rounds 3] [--cpus LIST] [--out FILE]
#   --shards DIR  a folder of tar shards (its index.json when there is one); default: the
#                 quickstart's dataset (2,560 JPEGs of 500x375, ~100 KB each, in 4 shards),
#                 made by build/default/examples/quickstart --epochs 0 under /tmp/conveyor-quickstart
#                 when missing
#   --cpus LIST   pin every engine to these cores (taskset -c LIST); default: not pinned
# Environment: CONVEYOR_BENCH (conveyor-bench), QUICKSTART (the quickstart binary), PYTHONPATH
# (default: build/default/python, the module in the build tree).
# Prints every JSON line (to FILE too when given), then per engine the median images/s with
# its range over the rounds and the peak RSS, and the ratios python/cpp and conveyor/DataLoader.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
shards='' threads=2 batch=256 size=224 epochs=3 rounds=3 cpus='' out=''
while (($#)); do
    case $1 in
        --shards) shards=${2:?}; shift 2 ;;
        --threads) threads=${2:?}; shift 2 ;;
        --batch) batch=${2:?}; shift 2 ;;
        --size) size=${2:?}; shift 2 ;;
        --epochs) epochs=${2:?}; shift 2 ;;
        --rounds) rounds=${2:?}; shift 2 ;;
        --cpus) cpus=${2:?}; shift 2 ;;
        --out) out=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "compare_python.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
((threads >= 1)) || { echo "compare_python.sh: --threads must be at least 1 (the DataLoader gets as many workers)" >&2; exit 2; }
bench=${CONVEYOR_BENCH:-$root/build/default/bench/conveyor-bench}
[[ -x $bench ]] || { echo "compare_python.sh: $bench not found (build conveyor-bench, or set CONVEYOR_BENCH)" >&2; exit 2; }
export PYTHONPATH=${PYTHONPATH:-$root/build/default/python}
py=/usr/bin/python3
$py -c 'import conveyor, torch, torchvision' 2>/dev/null ||
    { echo "compare_python.sh: $py cannot import conveyor, torch and torchvision (PYTHONPATH=$PYTHONPATH)" >&2; exit 2; }

if [[ -z $shards ]]; then
    shards=/tmp/conveyor-quickstart/shards
    if [[ ! -f $shards/index.json ]]; then
        quickstart=${QUICKSTART:-$root/build/default/examples/quickstart}
        [[ -x $quickstart ]] || { echo "compare_python.sh: $quickstart not found to make the shards (build quickstart, or give --shards)" >&2; exit 2; }
        "$quickstart" --dir /tmp/conveyor-quickstart --epochs 0 >&2
    fi
fi
[[ -d $shards ]] || { echo "compare_python.sh: $shards is not a folder of shards" >&2; exit 2; }
if [[ -f $shards/index.json ]]; then
    spec=("$shards/index.json")
else
    mapfile -t spec < <(find "$shards" -maxdepth 1 -name '*.tar' | sort)
    ((${#spec[@]})) || { echo "compare_python.sh: no .tar in $shards" >&2; exit 2; }
fi
pin=()
[[ -n $cpus ]] && pin=(taskset -c "$cpus")

tmp=$(mktemp -d "${TMPDIR:-/tmp}/conveyor-compare-python.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "compare_python.sh: ${spec[*]}: threads $threads, batch $batch, size $size, epochs $epochs, rounds $rounds;" \
     "load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores${cpus:+, pinned to $cpus}" >&2
for ((r = 0; r < rounds; ++r)); do
    for engine in cpp python torch; do
        case $engine in
            cpp) cmd=("$bench" pipeline "${spec[@]}" --threads "$threads" --batch "$batch" --size "$size"
                      --epochs "$epochs" --decode-only 0) ;;
            python) cmd=("$py" "$here/python_pipeline.py" "${spec[@]}" --threads "$threads" --batch "$batch"
                         --size "$size" --epochs "$epochs") ;;
            torch) cmd=("$py" "$here/torch_baseline.py" shards --urls "$shards" --workers "$threads" --threads 1
                        --batch "$batch" --size "$size" --epochs "$epochs" --shuffle-buffer $((1000 / threads))) ;;
        esac
        echo "compare_python.sh: round $r: $engine" >&2
        "${pin[@]}" "${cmd[@]}" 2>"$tmp/$engine.$r.err" | sed "s/^{/{\"round\": $r, \"which\": \"$engine\", /" |
            tee -a "$tmp/all.jsonl" || { cat "$tmp/$engine.$r.err" >&2; exit 1; }
    done
done
[[ -n $out ]] && cp "$tmp/all.jsonl" "$out"

$py - "$tmp/all.jsonl" "$epochs" <<'PY' >&2
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
epochs = int(sys.argv[2])
later = (lambda e: e >= 1) if epochs > 1 else (lambda e: e == 0)
names = {"cpp": "conveyor-bench pipeline (C++)", "python": "python_pipeline.py (conveyor module)",
         "torch": "torch_baseline.py (DataLoader)"}
per_round, rss, per_cpu, before = {}, {}, {}, {}
for l in lines:
    if l.get("bench") != "pipeline":
        continue
    w = l["which"]
    # images per CPU second (every thread and process of the engine): less sensitive to
    # other load than images/s. conveyor: its later epochs; the DataLoader: its final line.
    if w == "torch" and l.get("epoch") == "all" or w != "torch" and isinstance(l.get("epoch"), int) and later(l["epoch"]):
        if l.get("images_per_cpu_s"):
            per_cpu.setdefault(w, []).append(l["images_per_cpu_s"])
    if not isinstance(l.get("epoch"), int):
        continue
    per_round.setdefault(w, {}).setdefault(l["round"], []).append((l["epoch"], l["images_per_s"]))
    # MB (10^6 bytes): conveyor-bench and python_pipeline.py report MB, torch_baseline.py MiB
    # (main process + the sum of its workers' peaks).
    mb = l["peak_rss_mb"] * (1.048576 if w == "torch" else 1.0)
    rss[w] = max(rss.get(w, 0.0), mb)
    if l.get("rss_before_mb") is not None and w == "python":
        before[w] = l["rss_before_mb"]
med = {}
for w in ("cpp", "python", "torch"):
    if w not in per_round:
        continue
    rates = [statistics.median([v for e, v in ev if later(e)]) for _, ev in sorted(per_round[w].items())]
    med[w] = (statistics.median(rates), min(rates), max(rates), rates)
    what = "all processes" if w == "torch" else "one process"
    if w in before:
        what += f"; {before[w]:.0f} MB of it Python and the imported modules, before the first epoch"
    cpu = f", {statistics.median(per_cpu[w]):.0f} images per CPU second" if w in per_cpu else ""
    print(f"{names[w]:<38} {med[w][0]:8.1f} images/s (range {med[w][1]:.1f}-{med[w][2]:.1f} over {len(rates)} rounds), "
          f"peak RSS {rss[w]:.0f} MB ({what}){cpu}")
def ratio(a, b, what):
    if a in med and b in med:
        rs = [x / y for x, y in zip(med[a][3], med[b][3])]
        print(f"{what}: {med[a][0] / med[b][0]:.3f} (per round {', '.join(f'{x:.3f}' for x in rs)})")
ratio("python", "cpp", "python / C++ images/s (medians)")
ratio("python", "torch", "conveyor (python) / DataLoader images/s (medians)")
if "python" in rss and "torch" in rss:
    print(f"peak RSS conveyor (python) / DataLoader: {rss['python'] / rss['torch']:.2f}")
PY
