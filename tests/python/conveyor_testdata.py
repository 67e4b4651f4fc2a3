"""Small datasets for the Python module's tests, made in a temporary folder: JPEG pictures
(PIL), ImageFolder trees, webdataset-style tar shards (key.jpg + key.cls, Python's tarfile)
and the dataset index that describes shards (the JSON form of include/conveyor/shard/index.hpp).
Only the standard library and PIL; the tests import torch themselves."""

import io
import json
import os
import tarfile

from PIL import Image


def picture(w, h, seed):
    """A smooth picture with a few edges: gradients plus a block whose colour depends on seed."""
    px = bytearray()
    for y in range(h):
        for x in range(w):
            inside = w // 4 <= x < 3 * w // 4 and h // 3 <= y < 2 * h // 3
            r = (x * 255 // max(w - 1, 1) + 40 * seed) % 256
            g = (y * 255 // max(h - 1, 1) + 70 * seed) % 256
            b = (200 if inside else 30 + 20 * seed) % 256
            px += bytes((r, g, b))
    return Image.frombytes("RGB", (w, h), bytes(px))


def jpeg_bytes(w, h, seed, quality=90):
    out = io.BytesIO()
    picture(w, h, seed).save(out, format="JPEG", quality=quality)
    return out.getvalue()


def image_folder(root, classes, sizes):
    """An ImageFolder tree: root/<class>/<i>.jpg for each class and each (w, h) in sizes."""
    for c, name in enumerate(classes):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i, (w, h) in enumerate(sizes):
            picture(w, h, 3 * c + i).save(os.path.join(root, name, f"{i}.jpg"), quality=95)
    return root


def sample_key(shard, i):
    return f"s{shard:02d}-{i:03d}"


def write_shard(path, samples):
    """A tar shard of (key, {field: bytes}) samples, members in order, ustar headers."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for key, fields in samples:
            for field, data in fields.items():
                info = tarfile.TarInfo(f"{key}.{field}")
                info.size = len(data)
                info.mtime = 1_700_000_000
                tar.addfile(info, io.BytesIO(data))


def make_shards(folder, shards, per_shard, size=40, classes=5):
    """`shards` shards of `per_shard` samples each (JPEG of size x size-ish, label in .cls),
    folder/shard-000000.tar ...; returns (brace pattern, {key: label})."""
    os.makedirs(folder, exist_ok=True)
    labels = {}
    for s in range(shards):
        samples = []
        for i in range(per_shard):
            key = sample_key(s, i)
            label = (s * per_shard + i) % classes
            labels[key] = label
            w, h = size + (i % 3) * 8, size + (s % 2) * 8
            samples.append((key, {"jpg": jpeg_bytes(w, h, s * per_shard + i), "cls": str(label).encode()}))
        write_shard(os.path.join(folder, f"shard-{s:06d}.tar"), samples)
    pattern = os.path.join(folder, "shard-{%06d..%06d}.tar" % (0, shards - 1))
    return pattern, labels


def write_index(index_path, shard_paths):
    """The dataset index of these shards (as `make_shards --index` writes it): each shard's
    samples with the offsets of their members, URLs relative to the index's folder."""
    base = os.path.dirname(os.path.abspath(index_path))
    shards = []
    for path in shard_paths:
        entries = []
        with tarfile.open(path, "r") as tar:
            members = tar.getmembers()
        # Each member's header starts at its offset; the next header (or the end-of-archive
        # blocks) ends the member's padding.
        ends = [m.offset for m in members[1:]] + [members[-1].offset_data + -(-members[-1].size // 512) * 512]
        for m, end in zip(members, ends):
            name = os.path.basename(m.name)
            key, field = name.split(".", 1)
            if not entries or entries[-1]["key"] != key:
                entries.append({"key": key, "offset": m.offset, "size": 0, "fields": {}})
            e = entries[-1]
            e["fields"][field] = {"offset": m.offset_data, "size": m.size}
            e["size"] = end - e["offset"]
        shards.append(
            {
                "url": os.path.relpath(os.path.abspath(path), base),
                "samples": len(entries),
                "bytes": os.path.getsize(path),
                "entries": entries,
            }
        )
    with open(index_path, "w") as f:
        json.dump({"format": "conveyor-shard-index", "version": 1, "shards": shards}, f)
    return index_path
