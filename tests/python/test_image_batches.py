"""conveyor's Python module with PyTorch: batches decoded from an ImageFolder taken by
torch.from_dlpack without a copy, pixels as PIL's own decode + centre crop + resize make
them, labels from the folders, float batches normalized as torchvision's Normalize does.

Run by ctest (test python-image-batches) with Debian's /usr/bin/python3 and PYTHONPATH at
the built module; skips, saying why, without torch or the module."""

import os

import pytest

torch = pytest.importorskip("torch", reason="PyTorch (Debian python3-torch) is not installed")
Image = pytest.importorskip("PIL.Image", reason="PIL (Debian python3-pil) is not installed")
conveyor = pytest.importorskip(
    "conveyor", reason="the conveyor module is not built (needs pybind11-dev and python3-dev) or not on PYTHONPATH"
)

CLASSES = ["cat", "dog", "fish"]  # ImageFolder ids in sorted order: 0, 1, 2
SIZES = [(80, 60), (64, 96), (101, 77)]
SIZE = 32
IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


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


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("imagefolder")
    for c, name in enumerate(CLASSES):
        os.makedirs(root / name)
        for i, (w, h) in enumerate(SIZES):
            picture(w, h, 3 * c + i).save(root / name / f"{i}.jpg", quality=95)
    return root


def expected(root, key):
    """PIL's decode, the stage's centre crop, PIL's bilinear resize (what torchvision does to PIL images)."""
    img = Image.open(root / key).convert("RGB")
    top, left, h, w = conveyor.center_crop(img.height, img.width, SIZE)
    img = img.crop((left, top, left + w, top + h)).resize((SIZE, SIZE), Image.BILINEAR)
    return torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).reshape(SIZE, SIZE, 3)


def uint8_batches(root):
    # dct_scaling=False: decode at full size as PIL does, so the only difference is the resampler's rounding.
    return conveyor.image_batches(str(root), batch=4, size=SIZE, dct_scaling=False, threads=2)


def test_uint8_batches_reach_torch_without_a_copy_with_pil_pixels_and_folder_labels(folder):
    keys, labels, counts = [], [], []
    for b in uint8_batches(folder):
        t = torch.from_dlpack(b)
        assert t.dtype == torch.uint8
        assert t.shape == (len(b), SIZE, SIZE, 3)
        assert t.data_ptr() == b.data_ptr  # the batch's own memory: no copy
        assert b.__dlpack_device__() == (1, 0)  # kDLCPU
        lab = torch.from_dlpack(b.labels)
        assert lab.dtype == torch.int64
        assert lab.data_ptr() == b.labels.data_ptr
        counts.append(len(b))
        keys += b.keys
        labels += lab.tolist()
        for i, key in enumerate(b.keys):
            want = expected(folder, key)
            diff = (t[i].int() - want.int()).abs()
            # Same libjpeg-turbo decode (islow DCT, fancy upsampling) in both; PIL's resampler
            # keeps more fraction bits than the stage's 14-bit weights, which the decode tests
            # measured at a mean of 0.10-0.18 levels and at most 1 (tests/image/pil_compare.py).
            assert diff.max().item() <= 2, key
            assert diff.float().mean().item() <= 0.5, key
    assert counts == [4, 4, 1]
    assert keys == sorted(f"{c}/{i}.jpg" for c in CLASSES for i in range(len(SIZES)))
    assert labels == [CLASSES.index(k.split("/")[0]) for k in keys]


def test_tensors_outlive_their_batch_and_keep_its_memory(folder):
    kept = []
    for b in uint8_batches(folder):
        t = torch.from_dlpack(b)
        kept.append((t, t.clone()))
        del b  # the tensor still owns the slab: it must not be reused under it
    for t, copy in kept:
        assert torch.equal(t, copy)


def test_float_batches_are_normalized_as_torchvision_normalize_does(folder):
    import torchvision.transforms as T

    u8 = torch.cat([torch.from_dlpack(b).clone() for b in uint8_batches(folder)])
    opts = dict(batch=4, size=SIZE, dct_scaling=False, layout="nchw", mean=IMAGENET_MEAN, std=IMAGENET_STD, threads=2)
    f32 = torch.cat([torch.from_dlpack(b).clone() for b in conveyor.image_batches(str(folder), dtype="float32", **opts)])
    f16 = torch.cat([torch.from_dlpack(b).clone() for b in conveyor.image_batches(str(folder), dtype="float16", **opts)])
    assert f32.dtype == torch.float32 and f16.dtype == torch.float16
    assert f32.shape == (9, 3, SIZE, SIZE)
    normalize = T.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    for i in range(u8.shape[0]):
        want = normalize(u8[i].permute(2, 0, 1).float().div(255))  # ToTensor, then Normalize
        assert torch.equal(f32[i], want)  # exact: the same float operations in the same order
        assert torch.equal(f16[i], f32[i].half())  # float16: the float32 value rounded to nearest even


def test_bad_files_are_skipped_and_counted_when_asked(folder, tmp_path):
    good = [str(folder / "cat" / f"{i}.jpg") for i in range(3)]
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not a jpeg at all")
    it = conveyor.image_batches(good[:1] + [str(bad)] + good[1:], batch=2, size=SIZE, skip_errors=True)
    got = [list(b.keys) for b in it]
    assert [k for ks in got for k in ks] == good
    assert it.skipped == 1
    with pytest.raises(RuntimeError, match="bad.jpg"):
        list(conveyor.image_batches([str(bad)], batch=2, size=SIZE))
