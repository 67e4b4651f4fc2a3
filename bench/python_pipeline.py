#!/usr/bin/python3
"""python_pipeline.py: `conveyor-bench pipeline`'s pipeline run from Python, through the module.

The same shards, stages and settings as `conveyor-bench pipeline SPEC --threads T --batch B
--size S --epochs E --seed SEED` (bench/pipeline_bench.cpp):

    shards (order per epoch from SEED) → shuffle(1000, SEED) → decode (random-resized crop S,
    flip 0.5, SEED) straight into uint8 NHWC batches of B; T compute threads, one I/O thread

built with the Python builder and iterated by a Python loop that takes each batch as torch
tensors (DLPack, no copy; --dlpack: conveyor's own batch objects, torch not imported) and
counts its images: what a training loop that consumes batches pays for the binding.

Output (stdout): one JSON line per epoch with conveyor-bench pipeline's and
torch_baseline.py's field names ("engine": "conveyor-python"), then a final line
("epoch": "all"); a human summary on stderr. Seconds run from the epoch's first request for a
batch to its last batch. peak_rss_mb is the process's ru_maxrss in MB (10^6 bytes), as
conveyor-bench reports it (torch_baseline.py reports MiB); rss_before_mb is the RSS once the
modules are imported, before the first epoch. cpu_s is this process's user + system time in
the epoch (every thread: conveyor's and Python's).

    PYTHONPATH=build/default/python /usr/bin/python3 bench/python_pipeline.py \\
        /tmp/conveyor-quickstart/shards/index.json --threads 2 --batch 256 --size 224 --epochs 3
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

import conveyor


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("urls", nargs="+", help="shards: paths, brace patterns, s3:// URLs, a dataset index (.json)")
    p.add_argument("--batch", type=int, default=256, help="images per batch")
    p.add_argument("--size", type=int, default=224, help="output side (random-resized crop)")
    p.add_argument("--threads", type=int, default=0, help="compute threads (0: one per core); one I/O thread besides")
    p.add_argument("--epochs", type=int, default=1, help="passes over the data")
    p.add_argument("--seed", type=int, default=1, help="seed of order and augmentation (conveyor-bench's default)")
    p.add_argument("--dlpack", action="store_true", help="take conveyor's batch objects, not torch tensors")
    args = p.parse_args(argv)
    if args.batch < 1 or args.size < 1 or args.epochs < 1 or args.threads < 0:
        p.error("--batch, --size, --epochs >= 1; --threads >= 0")
    return args


def current_rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv):
    args = parse_args(argv)
    pipe = (conveyor.shards(args.urls, seed=args.seed, threads=args.threads)
            .shuffle(1000)
            .decode(args.size, crop="random_resized", flip=True)
            .batch(args.batch))
    if args.dlpack:
        pipe = pipe.dlpack()
    else:
        import torch  # noqa: F401  (imported before the clock starts, as a training script has it)
    threads = args.threads or len(os.sched_getaffinity(0))
    # What an epoch reads, for mb_per_s: the shards' sizes as the module resolved them (an
    # index's, a listing's, the files'), those it could not know left out.
    nbytes = sum(max(0, s["size"]) for s in pipe.shard_list())
    print(f"python_pipeline: {nbytes / 1e6:.1f} MB of shards, {threads} compute threads, "
          f"{'DLPack batches' if args.dlpack else 'torch tensors'}", file=sys.stderr)
    rss_before = current_rss_mb()
    common = {"bench": "pipeline", "engine": "conveyor-python", "threads": threads, "batch": args.batch,
              "size": args.size, "output": "dlpack" if args.dlpack else "torch"}
    rates = []
    totals = {"images": 0, "batches": 0, "seconds": 0.0, "cpu_s": 0.0}
    for epoch in range(args.epochs):
        images = batches = 0
        first = None
        cpu0 = cpu_seconds()
        start = time.perf_counter()
        # Each batch is let go before the next is asked for, as conveyor-bench's range-for
        # does; a loop that keeps its variables holds one batch more while it waits.
        if args.dlpack:
            for b in pipe:
                if first is None:
                    first = time.perf_counter() - start
                images += len(b)
                batches += 1
                del b
        else:
            for x, y in pipe:
                if first is None:
                    first = time.perf_counter() - start
                images += y.shape[0]
                batches += 1
                del x, y
        seconds = time.perf_counter() - start
        cpu = cpu_seconds() - cpu0
        stats = pipe.stats()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6
        rates.append(images / seconds)
        for k, v in (("images", images), ("batches", batches), ("seconds", seconds), ("cpu_s", cpu)):
            totals[k] += v
        print(json.dumps({**common, "epoch": epoch, "images": images, "batches": batches, "bytes": nbytes,
                          "seconds": round(seconds, 3), "images_per_s": round(rates[-1], 1),
                          "mb_per_s": round(nbytes / 1e6 / seconds, 1),
                          "time_to_first_batch_s": round(first if first is not None else -1, 3),
                          "peak_rss_mb": round(peak, 1), "rss_before_mb": round(rss_before, 1),
                          "cpu_s": round(cpu, 3), "images_per_cpu_s": round(images / max(cpu, 1e-9), 1),
                          "consumer_wait_share": round(stats.get("consumer_wait_share", 0.0), 3),
                          "rss_end_mb": round(current_rss_mb(), 1), "bottleneck": stats.get("bottleneck")}),
              flush=True)
        print(f"python_pipeline: epoch {epoch}: {images} images in {batches} batches, {seconds:.2f} s: "
              f"{rates[-1]:.0f} images/s, {nbytes / 1e6 / seconds:.0f} MB/s, first batch after {first or 0:.3f} s, "
              f"peak RSS {peak:.0f} MB, {images / max(cpu, 1e-9):.0f} images per CPU second; the loop waited "
              f"{100 * stats.get('consumer_wait_share', 0.0):.1f}% of the epoch", file=sys.stderr)
    later = rates[1:] if len(rates) > 1 else rates  # the first epoch also warms the pools
    print(json.dumps({**common, "epoch": "all", "epochs": args.epochs, "images": totals["images"],
                      "batches": totals["batches"], "seconds": round(totals["seconds"], 3),
                      "images_per_s": round(totals["images"] / totals["seconds"], 1),
                      "median_later_images_per_s": round(statistics.median(later), 1),
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6, 1),
                      "rss_before_mb": round(rss_before, 1), "cpu_s": round(totals["cpu_s"], 3),
                      "images_per_cpu_s": round(totals["images"] / max(totals["cpu_s"], 1e-9), 1)}), flush=True)
    print(f"python_pipeline: median of {'epochs 1..' if len(rates) > 1 else 'epoch '}"
          f"{len(rates) - 1 if len(rates) > 1 else 0}: {statistics.median(later):.0f} images/s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
