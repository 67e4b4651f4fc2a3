#!/usr/bin/python3
"""train.py: a small model trained on tar shards read by conveyor.

A torchvision ResNet-18 learns the quickstart's classes (10 shapes, each in a colour of its
own) at low resolution, from webdataset-style shards read, shuffled, decoded, augmented and
batched by conveyor on its own threads:

    shards (order per epoch from the seed) → shuffle(1000) → decode (random-resized crop,
    flip) → batches (NCHW; float32 normalised by conveyor, or uint8 normalised on the GPU)
    → the GPU, when there is one

It prints the loss, images/s and the share of the time the loop waited for data, every
--log-every steps and at the end. With a GPU the wait is the time spent in next() (the copy
to the device included) over the wall time, the step's kernels synchronised so that their
time is not hidden in the next wait: the share of the time the GPU stood idle for want of
data. Without one it is the same share of the CPU training loop's time.

The quickstart makes the shards (/tmp/conveyor-quickstart/shards/index.json):

    build/default/examples/quickstart --epochs 0

Run from the build tree (or after scripts/install-python.sh, without PYTHONPATH):

    PYTHONPATH=build/default/python /usr/bin/python3 python/examples/train.py --steps 300
    PYTHONPATH=build/default/python /usr/bin/python3 python/examples/train.py --steps 30 --size 64 --batch 32

--checkpoint PATH saves the model, the optimiser and the pipeline's position in the epoch
(Pipeline.state_dict()) when the run ends, and a later run with the same PATH goes on from
there, mid-epoch, with the samples the first run had not yet used:

    ... train.py --steps 20 --checkpoint /tmp/train.pt    # steps 0-19, then saved
    ... train.py --steps 40 --checkpoint /tmp/train.pt    # steps 20-39, the epoch's rest first
"""

import argparse
import json
import os
import sys
import time

import torch
import torchvision

import conveyor

QUICKSTART_SHARDS = "/tmp/conveyor-quickstart/shards/index.json"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shards", default=QUICKSTART_SHARDS,
                   help="shards: a dataset index (.json), paths, brace ranges, s3:// URLs (default: the quickstart's)")
    p.add_argument("--steps", type=int, default=300, help="training steps (batches) in all")
    p.add_argument("--batch", type=int, default=64, help="images per batch")
    p.add_argument("--size", type=int, default=96, help="image side after the random-resized crop")
    p.add_argument("--threads", type=int, default=0, help="conveyor's compute threads (0: one per usable core)")
    p.add_argument("--classes", type=int, default=0,
                   help="classes (0: counted from the dataset index's keys, class/name as the quickstart makes them)")
    p.add_argument("--dtype", choices=("auto", "float32", "uint8"), default="auto",
                   help="batches conveyor makes: float32 normalised on the CPU threads, or uint8 (4x fewer bytes to "
                        "copy) normalised on the device; auto: uint8 with a GPU, float32 without")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW's learning rate")
    p.add_argument("--seed", type=int, default=7, help="seed of the shard order, the shuffle and the augmentation")
    p.add_argument("--log-every", type=int, default=10, help="a progress line every N steps")
    p.add_argument("--checkpoint", metavar="PATH",
                   help="resume from PATH if it exists, and save model, optimiser and data position there at the end")
    p.add_argument("--cpu", action="store_true", help="train on the CPU even when a GPU is there")
    args = p.parse_args(argv)
    if args.steps < 1 or args.batch < 1 or args.size < 8 or args.log_every < 1:
        p.error("--steps, --batch, --log-every >= 1; --size >= 8")
    return args


def count_classes(spec):
    """Classes in a local dataset index whose keys are class/name (the quickstart's and
    make_shards --folder's layout); 0 when that cannot be told."""
    if not spec.endswith(".json") or "://" in spec or not os.path.isfile(spec):
        return 0
    with open(spec) as f:
        index = json.load(f)
    tops = {e["key"].split("/", 1)[0] for s in index.get("shards", []) for e in s.get("entries", []) if "/" in e["key"]}
    return len(tops)


def main(argv):
    args = parse_args(argv)
    if args.shards == QUICKSTART_SHARDS and not os.path.exists(QUICKSTART_SHARDS):
        sys.exit(f"train: {QUICKSTART_SHARDS} is missing: make it with `build/default/examples/quickstart --epochs 0` "
                 "(or give --shards)")
    classes = args.classes or count_classes(args.shards)
    if classes < 2:
        sys.exit("train: give --classes (the number of classes could not be read from the shards' index)")

    cuda = torch.cuda.is_available() and not args.cpu
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    dtype = args.dtype if args.dtype != "auto" else ("uint8" if cuda else "float32")
    torch.manual_seed(args.seed)

    # The input pipeline: a description; it runs on conveyor's threads while iterated.
    pipe = (conveyor.shards(args.shards, seed=args.seed, threads=args.threads)
            .shuffle(1000)
            .decode(args.size, crop="random_resized", flip=True))
    if dtype == "float32":
        pipe = pipe.batch(args.batch, dtype="float32", layout="nchw",
                          mean=conveyor.IMAGENET_MEAN, std=conveyor.IMAGENET_STD)
    else:
        pipe = pipe.batch(args.batch, dtype="uint8", layout="nchw")
    if cuda:
        pipe = pipe.to_cuda(0)
    mean = torch.tensor(conveyor.IMAGENET_MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(conveyor.IMAGENET_STD, device=device).view(1, 3, 1, 1) * 255

    model = torchvision.models.resnet18(num_classes=classes).to(device)
    optimiser = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.CrossEntropyLoss()

    step = 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        saved = torch.load(args.checkpoint, map_location=device)
        model.load_state_dict(saved["model"])
        optimiser.load_state_dict(saved["optimiser"])
        pipe.load_state_dict(saved["data"])  # the epoch and the samples of it already used
        step = saved["step"]
        print(f"train: resumed from {args.checkpoint} at step {step}, epoch {pipe.epoch}")
        if step >= args.steps:
            print(f"train: the checkpoint is at step {step}, not below --steps {args.steps}: nothing to do")
            return 0

    print(f"train: resnet18, {classes} classes, {args.size}x{args.size}, batches of {args.batch} {dtype}, "
          f"on {'GPU ' + torch.cuda.get_device_name(0) if cuda else 'the CPU'}; conveyor threads: "
          f"{args.threads or 'one per core'}; shards: {args.shards}")

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model.train()
    first_step = step
    images_total = 0
    wait_total = 0.0
    window = {"images": 0, "wait": 0.0, "loss": 0.0, "steps": 0, "start": time.perf_counter()}
    start = time.perf_counter()
    while step < args.steps:
        epoch = pipe.epoch
        it = iter(pipe)  # one epoch, or what is left of it after a resume
        while step < args.steps:
            t0 = time.perf_counter()
            try:
                images, labels = next(it)  # waits without the GIL; the GPU copy is done on return
            except StopIteration:
                break
            waited = time.perf_counter() - t0
            if images.dtype == torch.uint8:  # normalised here, on the device
                images = (images.float() - mean) / std
            labels = labels.to(device, non_blocking=True)
            loss = loss_fn(model(images), labels)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            sync()  # the step's kernels are done: their time is not counted as waiting

            step += 1
            n = labels.shape[0]
            images_total += n
            wait_total += waited
            window["images"] += n
            window["wait"] += waited
            window["loss"] += loss.item()
            window["steps"] += 1
            if step % args.log_every == 0 or step == args.steps:
                now = time.perf_counter()
                secs = now - window["start"]
                print(f"step {step:5d}  epoch {epoch}  loss {window['loss'] / window['steps']:.3f}  "
                      f"{window['images'] / secs:7.1f} images/s  waited for data {100 * window['wait'] / secs:4.1f}%",
                      flush=True)
                window = {"images": 0, "wait": 0.0, "loss": 0.0, "steps": 0, "start": now}
        del it  # ends the epoch's run (or saves the position reached, if it was broken off)
    wall = time.perf_counter() - start

    stats = pipe.stats()
    who = "the GPU stood idle waiting for data" if cuda else "the loop waited for data"
    print(f"train: {step - first_step} steps, {images_total} images in {wall:.1f} s: {images_total / wall:.1f} images/s; "
          f"{who} {100 * wait_total / wall:.1f}% of the time")
    if stats.get("bottleneck"):
        print(f"train: the input pipeline's busiest stage: {stats['bottleneck']}")

    if args.checkpoint:
        torch.save({"model": model.state_dict(), "optimiser": optimiser.state_dict(), "step": step,
                    "data": pipe.state_dict()}, args.checkpoint)
        print(f"train: saved step {step} (epoch {pipe.epoch}, position in it) to {args.checkpoint}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
