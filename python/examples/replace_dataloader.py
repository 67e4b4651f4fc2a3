#!/usr/bin/python3
"""replace_dataloader.py: one training loop fed first by a PyTorch DataLoader, then by conveyor.

The two loaders below give the loop the same batches: images of an ImageFolder (one folder
per class) in a new random order each epoch, each decoded, cropped at random and resized
(RandomResizedCrop), flipped half the time, as float32 NCHW tensors normalised with
ImageNet's mean and standard deviation, with their class ids. Only the loader changes:

    DataLoader: W worker processes, each decoding with PIL and transforming with torchvision,
                batches pickled back to the main process;
    conveyor:   W threads in this process decode (libjpeg-turbo) straight into the batch's
                memory, handed to torch without a copy (DLPack); the GIL is not held.

Each runs in a process of its own (this script started again with --run), so that its
figures are its own: images/s over the epochs, from the first request for a batch (the
DataLoader's worker start-up included) to the last, and the peak RSS. The DataLoader's peak
RSS is the main process's (getrusage: ru_maxrss) plus the sum of its workers' peaks
(VmHWM in /proc/PID/status, read while they live; persistent workers, sampled every few
batches and at each epoch's end). getrusage(RUSAGE_CHILDREN) would not do: its ru_maxrss is
the largest single child's, known only once the child has been reaped. A worker's RSS counts
the pages it shares with the main process since fork, so the sum is an upper bound.

Without --folder it draws an ImageFolder of a few hundred small JPEGs (PIL) under
/tmp/conveyor-replace-dataloader and keeps it for the next run. From the build tree:

    PYTHONPATH=build/default/python /usr/bin/python3 python/examples/replace_dataloader.py
    PYTHONPATH=build/default/python /usr/bin/python3 python/examples/replace_dataloader.py --folder /data/train --workers 8 --no-model
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import torch
import torchvision

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
DEFAULT_FOLDER = "/tmp/conveyor-replace-dataloader/train"


# ---- the loop both loaders feed ---------------------------------------------------------

class Trainer:
    """A small ResNet-18 and one optimiser step per batch (or nothing, with --no-model: the
    loaders alone)."""

    def __init__(self, args, classes):
        torch.manual_seed(args.seed)
        self.model = None if args.no_model else torchvision.models.resnet18(num_classes=classes)
        if self.model is not None:
            self.optimiser = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
            self.loss_fn = torch.nn.CrossEntropyLoss()
        self.losses = []

    def step(self, images, labels):
        if self.model is None:
            return
        loss = self.loss_fn(self.model(images), labels)
        self.optimiser.zero_grad(set_to_none=True)
        loss.backward()
        self.optimiser.step()
        self.losses.append(loss.item())


# ---- before: torch.utils.data.DataLoader ------------------------------------------------

def with_dataloader(args, memory):
    from torch.utils.data import DataLoader
    from torchvision import transforms

    transform = transforms.Compose([
        transforms.RandomResizedCrop(args.size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])
    dataset = torchvision.datasets.ImageFolder(args.folder, transform)
    loader = DataLoader(dataset, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                        persistent_workers=args.workers > 0)
    trainer = Trainer(args, len(dataset.classes))

    images_seen = 0
    start = time.perf_counter()
    for epoch in range(args.epochs):
        for i, (images, labels) in enumerate(loader):
            trainer.step(images, labels)
            images_seen += len(labels)
            if i % 4 == 0:
                memory.sample()
        memory.sample()
    seconds = time.perf_counter() - start
    return images_seen, seconds, trainer


# ---- after: conveyor ----------------------------------------------------------------------

def with_conveyor(args, memory):
    import conveyor

    pipe = (conveyor.files(args.folder, seed=args.seed, threads=args.workers)  # a new order each epoch
            .decode(args.size, crop="random_resized", flip=True)
            .batch(args.batch, dtype="float32", layout="nchw",
                   mean=conveyor.IMAGENET_MEAN, std=conveyor.IMAGENET_STD))
    classes = len([d for d in os.listdir(args.folder) if os.path.isdir(os.path.join(args.folder, d))])
    trainer = Trainer(args, classes)

    images_seen = 0
    start = time.perf_counter()
    for epoch in range(args.epochs):
        for images, labels in pipe:
            trainer.step(images, labels)
            images_seen += len(labels)
    seconds = time.perf_counter() - start
    return images_seen, seconds, trainer


# ---- measuring ----------------------------------------------------------------------------

def children():
    """The processes whose parent is this one (the DataLoader's workers)."""
    me = os.getpid()
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2:].split()[1]) == me:  # ppid: 2nd field after the command
                out.append(int(name))
    return out


def peak_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class PeakMemory:
    """This process's peak RSS and its live children's, each child's highest VmHWM seen."""

    def __init__(self):
        self.children_kb = {}

    def sample(self):
        for pid in children():
            self.children_kb[pid] = max(self.children_kb.get(pid, 0), peak_kb(pid))

    def mb(self):
        main = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        workers = sum(self.children_kb.values())
        return round((main + workers) / 1024, 1), round(main / 1024, 1), round(workers / 1024, 1), len(self.children_kb)


def run_one(args):
    memory = PeakMemory()
    loader = with_dataloader if args.run == "dataloader" else with_conveyor
    images, seconds, trainer = loader(args, memory)
    peak, main, workers, nworkers = memory.mb()
    print(json.dumps({"loader": args.run, "workers": args.workers, "images": images, "seconds": round(seconds, 3),
                      "images_per_s": round(images / seconds, 1), "peak_rss_mb": peak, "main_peak_rss_mb": main,
                      "workers_peak_rss_mb": workers, "worker_processes": nworkers,
                      "first_loss": round(trainer.losses[0], 3) if trainer.losses else None,
                      "last_loss": round(sum(trainer.losses[-5:]) / len(trainer.losses[-5:]), 3) if trainer.losses else None}),
          flush=True)
    return 0


# ---- a small ImageFolder ----------------------------------------------------------------

def make_folder(folder, count, classes, seed):
    """count JPEGs of 320x240 in `classes` folders: a shape per class on a noisy background."""
    import random
    from PIL import Image, ImageDraw, ImageFilter

    rng = random.Random(seed)
    for n in range(count):
        c = n % classes
        d = os.path.join(folder, f"class_{c:02d}")
        os.makedirs(d, exist_ok=True)
        bg = tuple(rng.randrange(256) for _ in range(3))
        img = Image.effect_noise((320, 240), 40).convert("RGB")
        img = Image.blend(img, Image.new("RGB", img.size, bg), 0.6)
        draw = ImageDraw.Draw(img)
        x, y, r = rng.randrange(60, 260), rng.randrange(60, 180), rng.randrange(25, 60)
        colour = ((c * 97) % 256, (c * 57 + 80) % 256, (c * 31 + 160) % 256)
        box = [x - r, y - r, x + r, y + r]
        if c % 4 == 0:
            draw.ellipse(box, fill=colour)
        elif c % 4 == 1:
            draw.rectangle(box, fill=colour)
        elif c % 4 == 2:
            draw.polygon([(x, y - r), (x - r, y + r), (x + r, y + r)], fill=colour)
        else:
            draw.pieslice(box, 0, 270, fill=colour)
        img.filter(ImageFilter.SMOOTH).save(os.path.join(d, f"img_{n:05d}.jpg"), quality=90)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--folder", help=f"an ImageFolder (default: one drawn under {DEFAULT_FOLDER})")
    p.add_argument("--images", type=int, default=400, help="images to draw when --folder is not given")
    p.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1),
                   help="DataLoader worker processes; conveyor's decode threads")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=64, help="image side after the random-resized crop")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--no-model", action="store_true", help="no training step: time the loaders alone")
    p.add_argument("--run", choices=("dataloader", "conveyor"), help=argparse.SUPPRESS)  # one side, in a child process
    args = p.parse_args(argv)
    if args.run:
        return run_one(args)

    if args.folder is None:
        args.folder = DEFAULT_FOLDER
        if not os.path.isdir(args.folder):
            print(f"drawing {args.images} JPEGs in {args.folder} ...", flush=True)
            make_folder(args.folder, args.images, 8, args.seed)
    forwarded = ["--folder", args.folder, "--workers", str(args.workers), "--batch", str(args.batch),
                 "--size", str(args.size), "--epochs", str(args.epochs), "--seed", str(args.seed)]
    if args.no_model:
        forwarded.append("--no-model")
    what = "the loaders alone" if args.no_model else "a ResNet-18 training step per batch"
    print(f"{args.folder}: {args.epochs} epoch(s), batches of {args.batch} at {args.size}x{args.size}, "
          f"{args.workers} workers / threads, {what}")
    results = {}
    for loader in ("dataloader", "conveyor"):
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--run", loader, *forwarded],
                             stdout=subprocess.PIPE, text=True)
        if out.returncode != 0:
            sys.exit(f"replace_dataloader: the {loader} run failed (exit status {out.returncode})")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        results[loader] = r
        print(json.dumps(r))
    for name, r in (("DataLoader", results["dataloader"]), ("conveyor", results["conveyor"])):
        rss = (f"peak RSS {r['peak_rss_mb']:.0f} MB (main {r['main_peak_rss_mb']:.0f} + "
               f"{r['worker_processes']} workers {r['workers_peak_rss_mb']:.0f})" if r["worker_processes"]
               else f"peak RSS {r['peak_rss_mb']:.0f} MB (one process)")
        loss = f"; loss {r['first_loss']} -> {r['last_loss']}" if r["first_loss"] is not None else ""
        print(f"{name:>10}: {r['images']} images in {r['seconds']:.1f} s: {r['images_per_s']:.0f} images/s, {rss}{loss}")
    d, c = results["dataloader"], results["conveyor"]
    print(f"conveyor / DataLoader: {c['images_per_s'] / d['images_per_s']:.2f}x the images/s, "
          f"{c['peak_rss_mb'] / d['peak_rss_mb']:.2f}x the peak RSS")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
