#!/usr/bin/env python3
"""torchvision_decode.py: torchvision.io.decode_jpeg on the GPU over the same JPEGs as
`conveyor-bench gpu-decode` (the first --count files of DIR in sorted order, held in memory),
in batches (decode_jpeg takes a list), one JSON line per timed pass.

    python3 torchvision_decode.py DIR --count 2048 --batch 256 --repeats 5
"""
import argparse
import json
import pathlib
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--count", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    try:
        import torch
        import torchvision
        from torchvision.io import decode_jpeg
    except ImportError as e:
        print(f"torchvision_decode: skipped: {e}", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("torchvision_decode: skipped: no CUDA device", file=sys.stderr)
        return 77
    paths = sorted(p for p in pathlib.Path(a.dir).rglob("*") if p.suffix in (".jpg", ".jpeg", ".JPEG"))[: a.count]
    datas = [torch.frombuffer(bytearray(p.read_bytes()), dtype=torch.uint8) for p in paths]
    mb = sum(len(d) for d in datas) / 1e6
    for r in range(a.repeats + 1):  # pass 0 warms up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for at in range(0, len(datas), a.batch):
            out = decode_jpeg(datas[at : at + a.batch], device="cuda")
            torch.cuda.synchronize()
        s = time.perf_counter() - t0
        if r == 0:
            continue
        print(json.dumps({"bench": "gpu_decode", "engine": "torchvision-decode_jpeg-cuda", "torchvision": torchvision.__version__,
                          "mode": "full", "repeat": r, "images": len(datas), "batch": a.batch, "mb": round(mb, 1),
                          "seconds": round(s, 4), "images_per_s": round(len(datas) / s, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
