#!/usr/bin/python3
"""torch_baseline.py: the PyTorch DataLoader baseline for conveyor's end-to-end pipeline bench.

Reads the same data as `conveyor-bench pipeline` the way a competent PyTorch user would, and
prints the same JSON fields, so the two can be run side by side:

  shards  a torch IterableDataset over webdataset-style tar shards (make_shards' output:
          `<key>.jpg` + `<key>.cls` members), read with Python's tarfile in streaming mode
          ('r|*'), consecutive members grouped by key (the name up to the first dot of its
          base name); the shard list shuffled per epoch from --seed and split across the
          DataLoader's workers; an optional per-worker sample shuffle buffer.
  files   torchvision.datasets.ImageFolder over a directory, shuffle=True.

Both decode with PIL and apply torchvision's RandomResizedCrop(size) (bilinear) and
RandomHorizontalFlip, then PILToTensor: uint8 NCHW batches (default) or, with --float,
float32 NCHW normalised with ImageNet's mean and std (converted per batch in the worker).
--draft adds PIL's JPEG draft mode (libjpeg's DCT scaling by 1/2, 1/4, 1/8) chosen per sample
so the random crop still has at least --size pixels each way: the same idea as conveyor's
DCT scaling, for a stronger baseline; off by default because torchvision's recipe does not.

Output (stdout): one JSON line per epoch and a final one ("epoch": "all"); a human summary
on stderr. mb_per_s is 10^6 bytes a second of encoded images (the jpg members or the files;
not tar headers); the memory figures (*_rss_mb, pss_mb) are MiB, as in conveyor's benches.
Peak RSS: see PeakMemory. Seconds run from the epoch's first request for a batch (for the
first epoch, that includes starting the workers) to its last batch; time_to_first_batch_s
is the first batch's share of that. CPU seconds (final line) are the main process's from the
first epoch on plus its workers' (getrusage of the reaped children).

Runs under Debian's /usr/bin/python3 with python3-torch, python3-torchvision, python3-pil.
"""

import argparse
import functools
import io
import json
import os
import random
import re
import resource
import sys
import tarfile
import time

try:
    import torch
    import torchvision
    import PIL
    from PIL import Image
    from torch.utils.data import DataLoader, IterableDataset, RandomSampler, default_collate, get_worker_info
    from torchvision import transforms
    from torchvision.transforms import functional as TF
except ImportError as e:  # the smoke test checks this itself; say it plainly for people too
    print(f"torch_baseline: cannot import {e.name}: {e} (Debian: apt-get install python3-torch "
          "python3-torchvision python3-pil, and run with /usr/bin/python3)", file=sys.stderr)
    sys.exit(3)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGE_FIELDS = ("jpg", "jpeg", "png")
CROP_SCALE = (0.08, 1.0)
CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)


# ---- shard lists -------------------------------------------------------------------------

def expand_braces(spec):
    """shard-{000000..000009}.tar -> the ten names (zero padding kept; several ranges allowed)."""
    m = re.search(r"\{(\d+)\.\.(\d+)\}", spec)
    if not m:
        return [spec]
    lo, hi = m.group(1), m.group(2)
    width = len(lo) if lo.startswith("0") else 0
    out = []
    for n in range(int(lo), int(hi) + 1):
        out.extend(expand_braces(spec[:m.start()] + str(n).zfill(width) + spec[m.end():]))
    return out


def shard_list(urls):
    """--urls entries: brace ranges, folders (their *.tar, sorted) or single tar files."""
    shards = []
    for spec in urls:
        for part in spec.split(","):
            if not part:
                continue
            if os.path.isdir(part):
                names = sorted(n for n in os.listdir(part) if n.endswith(".tar"))
                shards.extend(os.path.join(part, n) for n in names)
            else:
                shards.extend(expand_braces(part))
    missing = [s for s in shards if not os.path.isfile(s)]
    if not shards:
        sys.exit(f"torch_baseline: no shards in {urls}")
    if missing:
        sys.exit(f"torch_baseline: shard not found: {missing[0]} ({len(missing)} of {len(shards)} missing)")
    return shards


# ---- decode and augment ------------------------------------------------------------------

class Augment:
    """PIL decode + RandomResizedCrop + RandomHorizontalFlip + PILToTensor (uint8 CHW).

    Without draft this is exactly torchvision's Compose of those transforms. With draft, the
    crop is drawn first (from the header's size, before decoding), the JPEG is decoded at the
    smallest DCT scale that keeps the crop >= size pixels each way, and the crop box is scaled
    to match; the resize is PIL's bilinear either way.
    """

    def __init__(self, size, draft):
        self.size = size
        self.draft = draft
        self.compose = transforms.Compose([
            transforms.RandomResizedCrop(size, scale=CROP_SCALE, ratio=CROP_RATIO),
            transforms.RandomHorizontalFlip(),
            transforms.PILToTensor(),
        ])

    def __call__(self, img):
        if not self.draft:
            return self.compose(img.convert("RGB"))
        full_w, full_h = img.size
        top, left, h, w = transforms.RandomResizedCrop.get_params(img, CROP_SCALE, CROP_RATIO)
        if img.format == "JPEG":
            want = (-(-full_w * self.size // w), -(-full_h * self.size // h))
            img.draft("RGB", want)
        img = img.convert("RGB")
        sx, sy = img.size[0] / full_w, img.size[1] / full_h
        box = (left * sx, top * sy, (left + w) * sx, (top + h) * sy)
        img = img.resize((self.size, self.size), Image.BILINEAR, box=box)
        if torch.rand(1) < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        return TF.pil_to_tensor(img)


def shared_empty(shape, dtype):
    """In a worker, a tensor in shared memory (what default_collate stacks into), so that
    handing it to the main process copies nothing; elsewhere an ordinary one."""
    if get_worker_info() is None:
        return torch.empty(shape, dtype=dtype)
    numel = 1
    for n in shape:
        numel *= n
    like = torch.empty(0, dtype=dtype)
    return like.new(like.storage()._new_shared(numel)).resize_(*shape)


def collate_uint8(samples):
    """(images uint8 NCHW, labels int64, encoded bytes): default_collate's stacking (into
    shared memory in a worker), plus the byte count for mb_per_s."""
    images, labels = default_collate([s[:2] for s in samples])
    return images, labels, sum(s[2] for s in samples)


class CollateFloat:
    """float32 NCHW, (x / 255 - mean) / std per channel, one vectorised pass per batch in the
    worker, written straight into shared memory; the uint8 stack goes into a buffer the
    worker reuses (its pages are not faulted in afresh for each batch)."""

    def __init__(self):
        self.scale = (1.0 / (255.0 * torch.tensor(IMAGENET_STD))).view(1, 3, 1, 1)
        self.shift = (-torch.tensor(IMAGENET_MEAN) / torch.tensor(IMAGENET_STD)).view(1, 3, 1, 1)
        self.stack = None

    def __call__(self, samples):
        n, shape = len(samples), samples[0][0].shape
        if self.stack is None or self.stack.shape[0] < n or self.stack.shape[1:] != shape:
            self.stack = torch.empty((n, *shape), dtype=torch.uint8)
        images = torch.stack([s[0] for s in samples], out=self.stack[:n])
        out = shared_empty(images.shape, torch.float32)
        out.copy_(images)  # a plain cast, then two in-place passes: far cheaper than one mixed-type multiply
        out.mul_(self.scale).add_(self.shift)
        labels = torch.tensor([s[1] for s in samples], dtype=torch.int64)
        return out, labels, sum(s[2] for s in samples)


# ---- the webdataset-style reader ---------------------------------------------------------

def split_name(name):
    """'n01/img_1.jpg' -> ('n01/img_1', 'jpg'): the key ends at the first dot of the base name."""
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot < 0:
        return name, ""
    return name[:dot], name[dot + 1:]


def tar_samples(path, keep=None, first=0):
    """Samples ({'__key__': key, ext: bytes, ...}) of one shard, streamed, in member order.
    keep(i), if given, says whether sample i is wanted (numbered from `first`): the members of
    the others are skipped over unread. Returns the number after its last sample."""
    current, key, index = None, None, first - 1
    with open(path, "rb") as f, tarfile.open(fileobj=f, mode="r|*") as tf:
        for member in tf:
            if not member.isfile():
                continue
            k, ext = split_name(member.name)
            if k != key:
                if current is not None:
                    yield current
                index += 1
                key = k
                current = {"__key__": k, "__url__": path} if keep is None or keep(index) else None
            if current is not None:
                current[ext] = tf.extractfile(member).read()
    if current is not None:
        yield current
    return index + 1


class ShardDataset(IterableDataset):
    """Webdataset-style samples from tar shards, split across DataLoader workers.

    split='shards': each worker reads its own shards (webdataset's split_by_worker); needs
    several shards per worker to keep them equally busy. split='samples': every worker reads
    every shard and keeps every N-th sample (the tar headers are parsed by every
    worker, the other samples' bytes skipped unread, the decode is not repeated): for fewer
    shards than that. Each worker counts its epochs itself (one __iter__ per epoch;
    the workers are persistent), so the per-epoch shard order agrees across workers.
    """

    def __init__(self, shards, augment, seed, split, shuffle_buffer, limit):
        self.shards = shards
        self.augment = augment
        self.seed = seed
        self.split = split
        self.shuffle_buffer = shuffle_buffer
        self.limit = limit
        self.epoch = 0

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        epoch = self.epoch
        self.epoch += 1
        order = list(self.shards)
        random.Random(f"shards {self.seed} {epoch}").shuffle(order)  # a str seed goes through SHA-512
        if self.split == "shards":
            order = order[worker::workers]
        limit = None
        if self.limit is not None:
            limit = self.limit // workers + (1 if worker < self.limit % workers else 0)
        samples = self._samples(order, worker, workers)
        if self.shuffle_buffer > 1:
            samples = shuffled(samples, self.shuffle_buffer, random.Random(f"samples {self.seed} {epoch} {worker}"))
        n = 0
        for sample in samples:
            if limit is not None and n >= limit:
                return
            yield self._decode(sample)
            n += 1

    def _samples(self, order, worker, workers):
        keep = None
        if self.split == "samples" and workers > 1:
            keep = lambda i: i % workers == worker
        count = 0
        for path in order:
            count = yield from tar_samples(path, keep, count)

    def _decode(self, sample):
        data = next((sample[f] for f in IMAGE_FIELDS if f in sample), None)
        where = f"sample {sample['__key__']} in {sample['__url__']}"
        if data is None:
            raise ValueError(f"{where}: no image field ({', '.join(IMAGE_FIELDS)}); has {sorted(sample)}")
        if "cls" not in sample:
            raise ValueError(f"{where}: no cls field")
        try:
            image = self.augment(Image.open(io.BytesIO(data)))
            label = int(sample["cls"].decode())
        except Exception as e:
            raise ValueError(f"{where}: {e}") from e
        return image, label, len(data)


def shuffled(samples, size, rng):
    """Webdataset's shuffle: a buffer of `size`, a random one out for each one in."""
    buf = []
    for s in samples:
        if len(buf) < size:
            buf.append(s)
            continue
        i = rng.randrange(size)
        out, buf[i] = buf[i], s
        yield out
    rng.shuffle(buf)
    yield from buf


# ---- ImageFolder -------------------------------------------------------------------------

class SizedImageFolder(torchvision.datasets.ImageFolder):
    """ImageFolder (its default PIL loader) that also hands on each file's size in bytes,
    taken once before the timed epochs."""

    def __init__(self, root, augment):
        super().__init__(root)
        self.augment = augment
        self.sizes = [os.path.getsize(p) for p, _ in self.samples]

    def __getitem__(self, index):
        path, label = self.samples[index]
        try:
            with open(path, "rb") as f:
                image = self.augment(Image.open(f))
        except Exception as e:
            raise ValueError(f"{path}: {e}") from e
        return image, label, self.sizes[index]


# ---- memory ------------------------------------------------------------------------------

def proc_status_kb(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def proc_pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def child_pids():
    me = os.getpid()
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # the command may hold spaces and parentheses: the ppid is the 2nd field after the last ')'
        if int(stat[stat.rfind(")") + 2:].split()[1]) == me:
            pids.append(int(name))
    return pids


class PeakMemory:
    """Peak RSS of the main process plus its DataLoader workers.

    peak_rss_mb = the main process's ru_maxrss (getrusage(RUSAGE_SELF)) + the sum over the
    workers of their VmHWM (their own peak RSS, read from /proc/PID/status while they live:
    they are persistent, so sampled at each epoch's end). A worker's RSS counts the pages it
    shares with the main process since fork (the torch and Python libraries), so the sum
    counts those once per process: an upper bound. getrusage(RUSAGE_CHILDREN) cannot be used
    for this: its ru_maxrss is the largest single child's, and only once it has been reaped.
    pss_mb (sampled at the same moments, not a peak) shares each page among its users.
    """

    def __init__(self):
        self.worker_hwm_kb = {}
        self.pss_kb = 0

    def sample(self):
        pids = child_pids()
        for pid in pids:
            self.worker_hwm_kb[pid] = max(self.worker_hwm_kb.get(pid, 0), proc_status_kb(pid, "VmHWM"))
        self.pss_kb = proc_pss_kb(os.getpid()) + sum(proc_pss_kb(p) for p in pids)

    def fields(self):
        main_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        workers_kb = sum(self.worker_hwm_kb.values())
        return {
            "peak_rss_mb": round((main_kb + workers_kb) / 1024, 1),
            "main_peak_rss_mb": round(main_kb / 1024, 1),
            "workers_peak_rss_mb": round(workers_kb / 1024, 1),
            "pss_mb": round(self.pss_kb / 1024, 1),
        }


# ---- main --------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(
        description="PyTorch DataLoader baseline for conveyor's pipeline bench: JSON lines on stdout, "
                    "a summary on stderr.",
        epilog="examples:\n"
               "  torch_baseline.py make-images --dir /tmp/torchdata/train --count 2000\n"
               "  torch_baseline.py shards --urls 'data/shard-{000000..000009}.tar' --workers 2\n"
               "  torch_baseline.py files --urls /tmp/torchdata/train --workers 2 --limit 5000",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    for mode, what in (("shards", "tar shards through an IterableDataset (webdataset-style reader)"),
                       ("files", "an ImageFolder directory through torchvision.datasets.ImageFolder")):
        m = sub.add_parser(mode, help=what, description=what)
        m.add_argument("--urls", nargs="+", required=True,
                       help="shards: shard paths, brace ranges (shard-{000000..000009}.tar), comma lists or "
                            "a folder of .tar; files: the ImageFolder directory")
        m.add_argument("--workers", type=int, default=2, help="DataLoader worker processes (0: load in the main process)")
        m.add_argument("--batch", type=int, default=256)
        m.add_argument("--size", type=int, default=224, help="output height and width")
        m.add_argument("--epochs", type=int, default=1)
        m.add_argument("--limit", type=int, default=None, help="samples per epoch at most")
        m.add_argument("--threads", type=int, default=1, help="torch.set_num_threads in each worker and the main process")
        m.add_argument("--float", action="store_true", help="float32 NCHW normalised with ImageNet mean/std (default: uint8 NCHW)")
        m.add_argument("--draft", action="store_true", help="JPEG DCT scaling before decode (PIL draft), chosen per crop")
        m.add_argument("--seed", type=int, default=0)
        m.add_argument("--prefetch-factor", type=int, default=2, help="batches each worker works ahead (DataLoader's)")
        if mode == "shards":
            m.add_argument("--shuffle-buffer", type=int, default=0, help="per-worker sample shuffle buffer (0: off)")
            m.add_argument("--split", choices=("auto", "shards", "samples"), default="auto",
                           help="how workers share the data; auto: by shard when there are >= 4 per worker, "
                                "else by sample")
    g = sub.add_parser("make-images", help="write a synthetic ImageFolder of JPEGs (for the tests and measurements)",
                       description="Writes DIR/class_KK/img_NNNNNN.jpg: gradients, class-dependent shapes and "
                                   "band-limited texture whose strength varies per image (lognormal), so the "
                                   "sizes spread around ~110 KB at 500x375, quality 90 (ImageNet's typical size).")
    g.add_argument("--dir", required=True)
    g.add_argument("--count", type=int, required=True)
    g.add_argument("--classes", type=int, default=10)
    g.add_argument("--width", type=int, default=500)
    g.add_argument("--height", type=int, default=375)
    g.add_argument("--quality", type=int, default=90)
    g.add_argument("--texture", type=float, default=2.0, help="median texture strength (bigger: larger files)")
    g.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    if args.mode == "make-images":
        if args.count < 1 or args.classes < 1 or args.width < 8 or args.height < 8:
            p.error("--count, --classes >= 1; --width, --height >= 8")
        return args
    if args.workers < 0 or args.batch < 1 or args.size < 1 or args.epochs < 1 or args.threads < 1:
        p.error("--workers >= 0, --batch, --size, --epochs, --threads >= 1")
    if args.limit is not None and args.limit < 1:
        p.error("--limit >= 1")
    if args.mode == "files" and (len(args.urls) != 1 or not os.path.isdir(args.urls[0])):
        p.error("files: --urls must be one directory (an ImageFolder)")
    return args


def texture(rng, w, h, scale, amp):
    """Smooth noise: a random field of (h/scale, w/scale) upsampled bicubically."""
    import numpy as np
    f = rng.normal(0, 1, (h // scale + 2, w // scale + 2)).astype(np.float32)
    return np.asarray(Image.fromarray(f, "F").resize((w, h), Image.BICUBIC), np.float32)[..., None] * amp


def make_images(args):
    import numpy as np
    from PIL import ImageDraw
    rng = np.random.default_rng(args.seed)
    w, h = args.width, args.height
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    total = 0
    for n in range(args.count):
        cls = n % args.classes
        c0, c1 = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
        t = x * rng.uniform(-1, 1) + y * rng.uniform(-1, 1)
        t = (t - t.min()) / (np.ptp(t) + 1)
        base = Image.fromarray(np.clip(c0 * (1 - t[..., None]) + c1 * t[..., None], 0, 255).astype(np.uint8))
        draw = ImageDraw.Draw(base)
        for _ in range(3 + cls % 5):
            cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(0.04, 0.25) * w
            colour = tuple(int(v) for v in rng.uniform(0, 255, 3))
            if cls % 2:
                draw.ellipse([cx - r, cy - r * 0.7, cx + r, cy + r * 0.7], fill=colour)
            else:
                draw.rectangle([cx - r, cy - r, cx + r * 0.6, cy + r], fill=colour)
        tex = args.texture * float(np.exp(rng.normal(0, 0.3)))
        img = (np.asarray(base, np.float32) + texture(rng, w, h, 12, 25) + texture(rng, w, h, 4, 18 * tex)
               + texture(rng, w, h, 2, 14 * tex) + rng.normal(0, 6 * tex, (h, w, 1)))
        folder = os.path.join(args.dir, f"class_{cls:02d}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"img_{n:06d}.jpg")
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(path, "JPEG", quality=args.quality)
        total += os.path.getsize(path)
    print(json.dumps({"bench": "make-images", "dir": args.dir, "images": args.count, "classes": args.classes,
                      "width": w, "height": h, "quality": args.quality, "bytes": total,
                      "mean_kb": round(total / args.count / 1000, 1)}))
    return 0


def worker_init(threads, worker_id):
    torch.set_num_threads(threads)


def main(argv):
    args = parse_args(argv)
    if args.mode == "make-images":
        return make_images(args)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    augment = Augment(args.size, args.draft)
    collate = CollateFloat() if args.float else collate_uint8
    extra = {}

    if args.mode == "shards":
        shards = shard_list(args.urls)
        split = args.split
        if split == "auto":
            split = "shards" if len(shards) >= 4 * max(args.workers, 1) else "samples"
        dataset = ShardDataset(shards, augment, args.seed, split, args.shuffle_buffer, args.limit)
        loader_args = {}
        extra = {"shards": len(shards), "split": split, "shuffle_buffer": args.shuffle_buffer}
    else:
        dataset = SizedImageFolder(args.urls[0], augment)
        generator = torch.Generator()
        generator.manual_seed(args.seed)
        loader_args = {"sampler": RandomSampler(dataset, num_samples=args.limit, generator=generator)}
        extra = {"files": len(dataset), "classes": len(dataset.classes)}

    workers = args.workers
    if workers > 0:
        loader_args.update(persistent_workers=True, prefetch_factor=args.prefetch_factor,
                           worker_init_fn=functools.partial(worker_init, args.threads))
    loader = DataLoader(dataset, batch_size=args.batch, num_workers=workers, collate_fn=collate,
                        pin_memory=False, drop_last=False, **loader_args)

    common = {"bench": "pipeline", "engine": f"torch-{args.mode}", "workers": workers, "batch": args.batch,
              "size": args.size, "dtype": "float32" if args.float else "uint8", "draft": args.draft,
              "threads": args.threads, "prefetch_factor": args.prefetch_factor if workers else 0, **extra}
    memory = PeakMemory()
    cpu_start = resource.getrusage(resource.RUSAGE_SELF)
    totals = {"images": 0, "batches": 0, "bytes": 0, "seconds": 0.0}
    first_ttfb = None
    shape = None
    for epoch in range(args.epochs):
        images = batches = nbytes = label_sum = 0
        ttfb = None
        start = time.perf_counter()
        for batch, labels, size in loader:
            if ttfb is None:
                ttfb = time.perf_counter() - start
                shape = list(batch.shape)
            images += len(labels)
            batches += 1
            nbytes += size
            label_sum += int(labels.sum())
            del batch, labels
        seconds = time.perf_counter() - start
        memory.sample()
        if ttfb is None:
            sys.exit("torch_baseline: no samples")
        first_ttfb = ttfb if first_ttfb is None else first_ttfb
        for k, v in (("images", images), ("batches", batches), ("bytes", nbytes), ("seconds", seconds)):
            totals[k] += v
        print(json.dumps({**common, "epoch": epoch, "images": images, "batches": batches, "bytes": nbytes,
                          "label_sum": label_sum,
                          "seconds": round(seconds, 3), "images_per_s": round(images / seconds, 1),
                          "mb_per_s": round(nbytes / seconds / 1e6, 1),
                          "time_to_first_batch_s": round(ttfb, 3), "batch_shape": shape, **memory.fields()}),
              flush=True)

    del loader  # ends the workers; their exit is what RUSAGE_CHILDREN could see
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the workers, joined (reaped) by now
    largest_child_mb = children.ru_maxrss / 1024
    main_now = resource.getrusage(resource.RUSAGE_SELF)
    main_cpu_s = main_now.ru_utime + main_now.ru_stime - cpu_start.ru_utime - cpu_start.ru_stime
    workers_cpu_s = children.ru_utime + children.ru_stime
    cpu_s = main_cpu_s + workers_cpu_s
    final = {**common, "epoch": "all", "epochs": args.epochs, "images": totals["images"],
             "batches": totals["batches"], "bytes": totals["bytes"], "seconds": round(totals["seconds"], 3),
             "images_per_s": round(totals["images"] / totals["seconds"], 1),
             "mb_per_s": round(totals["bytes"] / totals["seconds"] / 1e6, 1),
             "time_to_first_batch_s": round(first_ttfb, 3), "batch_shape": shape, **memory.fields(),
             "cpu_s": round(cpu_s, 3), "main_cpu_s": round(main_cpu_s, 3), "workers_cpu_s": round(workers_cpu_s, 3),
             "images_per_cpu_s": round(totals["images"] / max(cpu_s, 1e-9), 1),
             "largest_child_maxrss_mb": round(largest_child_mb, 1),
             "torch": torch.__version__, "torchvision": torchvision.__version__,
             "pil": PIL.__version__}
    print(json.dumps(final), flush=True)
    print(f"torch-{args.mode}: {totals['images']} images in {totals['seconds']:.2f} s over {args.epochs} epoch(s): "
          f"{final['images_per_s']:.0f} images/s, {final['mb_per_s']:.1f} MB/s, first batch after "
          f"{first_ttfb:.2f} s, peak RSS {final['peak_rss_mb']:.0f} MB (main + {workers} workers; PSS "
          f"{final['pss_mb']:.0f} MB); batches {shape} {common['dtype']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
