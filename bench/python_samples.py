#!/usr/bin/python3
"""python_samples.py: samples as they are, iterated from Python, beside their baselines.

On the same shards and the same cores, alternated round by round, each round of a case
--epochs passes over the shards (one pipeline, its epochs in a row; the C++ case's passes
timed as it times them):

  cpp          conveyor-bench shards (the C++ shard source, no Python): the ceiling
  conveyor     for s in conveyor.shards(...): each sample a dict of bytes, as webdataset's
  views        the same with .memoryviews(): each member a read-only memoryview, no copy
  map          the same with a trivial Python map (lambda s: s) on --threads Python threads
  map-pil      a map that decodes each JPEG with PIL (releases the GIL while it decodes),
               at 1, 2 and 4 threads: does the map scale with threads?
  tarfile      webdataset's loop written with tarfile in a torch DataLoader with 2 workers
               (each worker reads its share of the shards, groups members by key, yields dicts)

Output (stdout): one JSON line per case and round ({"bench": "python-samples", "case", "round",
"samples", "seconds", "samples_per_s", ...}); a summary on stderr: medians with the range, and
the ratios the targets name (conveyor / cpp, conveyor / tarfile, map / conveyor).

    PYTHONPATH=build/default/python /usr/bin/python3 bench/python_samples.py \\
        /tmp/conveyor-quickstart/shards/index.json --bench build/default/bench/conveyor-bench --rounds 5
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spec", help="shards: a dataset index (.json), a brace pattern or a path")
    p.add_argument("--bench", default="build/default/bench/conveyor-bench", help="the conveyor-bench binary (case cpp)")
    p.add_argument("--rounds", type=int, default=5, help="rounds of every case, alternated")
    p.add_argument("--epochs", type=int, default=10,
                   help="passes over the shards in each round of each case (one pipeline, its epochs in a row): a pass "
                        "over the quickstart's shards takes tens of milliseconds, too short to time alone")
    p.add_argument("--threads", type=int, default=1, help="Python threads of the trivial map")
    p.add_argument("--cases", default="cpp,conveyor,views,map,map-pil,tarfile", help="cases to run, comma-separated")
    p.add_argument("--pil-samples", type=int, default=600, help="samples per map-pil run (PIL decodes are slow)")
    return p.parse_args(argv)


def shard_paths(spec):
    if spec.endswith(".json"):
        with open(spec) as f:
            index = json.load(f)
        base = os.path.dirname(os.path.abspath(spec))
        return [os.path.join(base, s["url"]) if not os.path.isabs(s["url"]) else s["url"] for s in index["shards"]]
    return [spec]


def run_cpp(args):
    out = subprocess.run([args.bench, "shards", args.spec, "--repeat", str(args.epochs)], capture_output=True, text=True,
                         check=True).stdout
    passes = [json.loads(l) for l in out.splitlines() if l.startswith("{") and '"bench":"shards"' in l]
    return sum(p["samples"] for p in passes), sum(p["seconds"] for p in passes)


def run_conveyor(args, fn=None, threads=1, limit=None, views=False):
    import conveyor

    pipe = conveyor.shards(args.spec, shuffle=False).memoryviews(views)
    if fn is not None:
        pipe = pipe.map(fn, threads=threads)
    len(pipe)  # the index read before the clock starts, as the C++ case reads it before its passes
    n, size = 0, 0
    t0 = time.perf_counter()
    for _ in range(1 if limit else args.epochs):
        for s in pipe:
            size += len(s["jpg"])
            n += 1
            if limit and n >= limit:
                break
    return n, time.perf_counter() - t0


def pil_decode(s):
    import io

    from PIL import Image

    im = Image.open(io.BytesIO(s["jpg"]))
    im.draft("RGB", (im.width // 2, im.height // 2))
    im.load()
    return s


class TarSamples(__import__("torch").utils.data.IterableDataset):
    """webdataset's loop with tarfile: each worker reads its share of the shards, members
    grouped into samples by key (the path up to the first dot of the base name)."""

    def __init__(self, paths):
        self.paths = paths

    def __iter__(self):
        import torch

        info = torch.utils.data.get_worker_info()
        mine = self.paths if info is None else self.paths[info.id :: info.num_workers]
        for path in mine:
            with tarfile.open(path, "r|") as tar:
                current, key = None, None
                for m in tar:
                    if not m.isfile():
                        continue
                    d, base = os.path.split(m.name)
                    k, field = base.split(".", 1)
                    k = os.path.join(d, k)
                    if k != key:
                        if current:
                            yield current
                        current, key = {"__key__": k, "__url__": path}, k
                    current[field.lower()] = tar.extractfile(m).read()
                if current:
                    yield current


def run_tarfile(args):
    import torch

    paths = shard_paths(args.spec)
    loader = torch.utils.data.DataLoader(TarSamples(paths), batch_size=None, num_workers=2)
    n = 0
    t0 = time.perf_counter()
    for _ in range(args.epochs):
        for s in loader:
            n += len(s["jpg"]) > 0
    return n, time.perf_counter() - t0


def main(argv):
    args = parse_args(argv)
    cases = args.cases.split(",")
    runs = {
        "cpp": lambda: run_cpp(args),
        "conveyor": lambda: run_conveyor(args),
        "views": lambda: run_conveyor(args, views=True),
        "map": lambda: run_conveyor(args, lambda s: s, args.threads),
        "tarfile": lambda: run_tarfile(args),
    }
    for t in (1, 2, 4):
        runs[f"map-pil-{t}"] = lambda t=t: run_conveyor(args, pil_decode, t, args.pil_samples)
    order = [c for c in runs if c in cases or (c.startswith("map-pil") and "map-pil" in cases)]
    rates = {c: [] for c in order}
    run_conveyor(args)  # warm: the shards in the page cache, the module loaded
    for r in range(args.rounds):
        for c in order if r % 2 == 0 else reversed(order):
            n, seconds = runs[c]()
            rate = n / seconds
            rates[c].append(rate)
            print(json.dumps({"bench": "python-samples", "case": c, "round": r, "samples": n, "seconds": round(seconds, 4),
                              "samples_per_s": round(rate, 1), "threads": args.threads if c == "map" else None}), flush=True)
            print(f"  round {r + 1}/{args.rounds} {c:12s} {rate:10.0f} samples/s", file=sys.stderr)
    med = {c: statistics.median(v) for c, v in rates.items()}
    print("\nsamples/s, median (range) over %d rounds:" % args.rounds, file=sys.stderr)
    for c, v in rates.items():
        print(f"  {c:12s} {med[c]:10.0f}  ({min(v):.0f}-{max(v):.0f})", file=sys.stderr)
    ratios = {}
    if "cpp" in med and "conveyor" in med:
        ratios["conveyor/cpp"] = med["conveyor"] / med["cpp"]
    if "cpp" in med and "views" in med:
        ratios["views/cpp"] = med["views"] / med["cpp"]
    if "tarfile" in med and "conveyor" in med:
        ratios["conveyor/tarfile"] = med["conveyor"] / med["tarfile"]
    if "map" in med and "conveyor" in med:
        ratios["map/conveyor"] = med["map"] / med["conveyor"]
        ratios["map cost, us per sample"] = (1 / med["map"] - 1 / med["conveyor"]) * 1e6
    if "map-pil-1" in med:
        for t in (2, 4):
            ratios[f"map-pil {t} threads / 1"] = med[f"map-pil-{t}"] / med["map-pil-1"]
    for k, v in ratios.items():
        print(f"  {k:28s} {v:.3f}", file=sys.stderr)
    print(json.dumps({"bench": "python-samples", "case": "summary", "medians": {k: round(v, 1) for k, v in med.items()},
                      "ratios": {k: round(v, 3) for k, v in ratios.items()}}))


if __name__ == "__main__":
    main(sys.argv[1:])
