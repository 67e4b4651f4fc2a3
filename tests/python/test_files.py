"""A folder of images through the builder: pixels as PIL's decode + centre crop + resize make
them, labels from the folders, float batches normalized as torchvision's Normalize does,
tensors taken by torch.from_dlpack without a copy, a bad file skipped and counted or raised
with its path, len(), stats() and keys()."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch (Debian python3-torch) is not installed")
Image = pytest.importorskip("PIL.Image", reason="PIL (Debian python3-pil) is not installed")
conveyor = pytest.importorskip(
    "conveyor", reason="the conveyor module is not built (needs pybind11-dev and python3-dev) or not on PYTHONPATH"
)

from conftest import CLASSES, SIZES  # noqa: E402

SIZE = 32


def expected(root, key):
    """PIL's decode, the stage's centre crop, PIL's bilinear resize (what torchvision does to PIL images)."""
    img = Image.open(root / key).convert("RGB")
    top, left, h, w = conveyor.center_crop(img.height, img.width, SIZE)
    img = img.crop((left, top, left + w, top + h)).resize((SIZE, SIZE), Image.BILINEAR)
    return torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).reshape(SIZE, SIZE, 3)


def centre(root, **batch):
    # dct_scaling=False: decode at full size as PIL does, so the only difference is the
    # resampler's rounding. shuffle=False: the listing's (sorted) order.
    return (
        conveyor.files(root, shuffle=False, threads=2, rank=0, world_size=1)
        .decode(SIZE, crop="center", dct_scaling=False)
        .batch(4, **batch)
    )


def test_uint8_batches_have_pil_pixels_and_folder_labels(folder):
    keys, labels, counts = [], [], []
    for images, lab, ks in centre(folder).keys():
        assert images.dtype == torch.uint8 and images.device.type == "cpu"
        assert images.shape == (len(ks), SIZE, SIZE, 3)
        assert lab.dtype == torch.int64 and lab.shape == (len(ks),)
        counts.append(len(ks))
        keys += ks
        labels += lab.tolist()
        for i, key in enumerate(ks):
            diff = (images[i].int() - expected(folder, key).int()).abs()
            # Same libjpeg-turbo decode (islow DCT, fancy upsampling) in both; PIL's resampler
            # keeps more fraction bits than the stage's 14-bit weights, which the decode tests
            # measured at a mean of 0.10-0.18 levels and at most 1 (tests/image/pil_compare.py).
            assert diff.max().item() <= 2, key
            assert diff.float().mean().item() <= 0.5, key
    assert counts == [4, 4, 1]
    assert keys == sorted(f"{c}/{i}.jpg" for c in CLASSES for i in range(len(SIZES)))
    assert labels == [CLASSES.index(k.split("/")[0]) for k in keys]


def test_files_batches_are_exported_without_a_copy(folder):
    for b in centre(folder).dlpack():
        images = torch.from_dlpack(b.images)
        labels = torch.from_dlpack(b.labels)
        assert images.data_ptr() == b.images.data_ptr  # the batch's own memory
        assert labels.data_ptr() == b.labels.data_ptr
        assert b.images.__dlpack_device__() == (1, 0)  # kDLCPU, device 0
        assert b.images.shape == (len(b), SIZE, SIZE, 3) and b.images.dtype == "uint8"


def test_float_batches_are_normalized_as_torchvision_normalize_does(folder):
    import torchvision.transforms as T

    mean, std = conveyor.IMAGENET_MEAN, conveyor.IMAGENET_STD
    u8 = torch.cat([x.clone() for x, _ in centre(folder)])
    f32 = torch.cat([x.clone() for x, _ in centre(folder, dtype="float32", layout="nchw", mean=mean, std=std)])
    f16 = torch.cat([x.clone() for x, _ in centre(folder, dtype="float16", layout="nchw", mean=mean, std=std)])
    assert f32.dtype == torch.float32 and f16.dtype == torch.float16
    assert f32.shape == (9, 3, SIZE, SIZE)
    normalize = T.Normalize(mean, std)
    for i in range(u8.shape[0]):
        want = normalize(u8[i].permute(2, 0, 1).float().div(255))  # ToTensor, then Normalize
        assert torch.equal(f32[i], want)  # exact: the same float operations in the same order
        assert torch.equal(f16[i], f32[i].half())  # float16: the float32 value rounded to nearest even


def test_a_bad_file_is_skipped_and_counted_when_asked_and_raised_with_its_path_otherwise(folder, tmp_path):
    good = [str(folder / "cat" / f"{i}.jpg") for i in range(3)]
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not a jpeg at all")
    paths = good[:1] + [str(bad)] + good[1:]
    pipe = conveyor.files(paths=paths, shuffle=False, on_error="skip", threads=2, rank=0, world_size=1)
    pipe = pipe.decode(SIZE, crop="center").batch(2).keys()
    got = [k for _, labels, ks in pipe for k in ks]
    assert got == good
    assert pipe.stats()["skipped"] == 1

    strict = conveyor.files(paths=[str(bad)], threads=2, rank=0, world_size=1).decode(SIZE).batch(2)
    with pytest.raises(conveyor.Error, match="bad.jpg") as e:
        list(strict)
    assert isinstance(e.value, RuntimeError)
    assert "decode_batches" in str(e.value) and str(bad) in str(e.value)  # the stage and the path


def test_a_corrupt_jpeg_in_a_folder_fails_the_epoch_naming_stage_and_path(folder, tmp_path):
    import shutil

    root = tmp_path / "tree"
    shutil.copytree(folder, root)
    data = (root / "dog" / "1.jpg").read_bytes()
    (root / "dog" / "1.jpg").write_bytes(data[: len(data) // 3])  # cut inside the scan
    pipe = conveyor.files(root, threads=2, rank=0, world_size=1).decode(SIZE).batch(4)
    with pytest.raises(conveyor.Error) as e:
        for _ in pipe:
            pass
    msg = str(e.value)
    assert "decode_batches" in msg and str(root / "dog" / "1.jpg") in msg, msg

    skipping = conveyor.files(root, on_error="skip", threads=2, rank=0, world_size=1).decode(SIZE).batch(4).keys()
    keys = [k for _, _, ks in skipping for k in ks]
    assert sorted(keys) == sorted(f"{c}/{i}.jpg" for c in CLASSES for i in range(len(SIZES)) if (c, i) != ("dog", 1))
    assert skipping.stats()["skipped"] == 1


def test_len_of_a_files_pipeline_is_its_batches(folder):
    assert len(centre(folder)) == 3  # 9 images, 4 a batch, the last partial
    assert len(centre(folder, partial=False)) == 2
    assert len(conveyor.files(folder, rank=1, world_size=2).decode(SIZE).batch(2)) == 2  # 4 of 9 (drop): 2 batches
    assert sum(1 for _ in centre(folder)) == len(centre(folder))


def test_stats_name_each_stage_with_its_items(folder):
    pipe = centre(folder)
    for _ in pipe:
        pass
    s = pipe.stats()
    names = [st["name"] for st in s["stages"]]
    assert names[-1] == "decode_batches", names
    assert len(names) >= 2
    assert s["stages"][0]["items"] == 9  # the source read every file
    assert s["stages"][-1]["items"] == 3  # three batches
    assert s["delivered"] == 3 and s["skipped"] == 0
    assert s["bottleneck"] in names + ["consumer"]
    for st in s["stages"]:
        assert st["finished"] is True
        assert 0.0 <= st["busy_share"] <= 1.0
    assert isinstance(s["summary"], str) and "decode_batches" in s["summary"]


def labels_by_key(pipe):
    return {k: int(y) for _, labels, keys in pipe.keys() for k, y in zip(keys, labels)}


def test_an_index_and_a_classes_file_give_the_files_and_their_labels(folder, tmp_path):
    import json

    index = tmp_path / "index.json"
    index.write_text(json.dumps(["dog/0.jpg", "fish/2.jpg", "cat/1.jpg", "dog/2.jpg"]))
    classes = tmp_path / "classes.json"
    ids = {"cat": 7, "dog": 3, "fish": 0}
    classes.write_text(json.dumps({c: {"id": i, "name": c.title()} for c, i in ids.items()}))
    pipe = conveyor.files(folder, index=index, classes=classes, threads=2, rank=0, world_size=1).decode(SIZE).batch(3)
    assert len(pipe) == 2
    assert labels_by_key(pipe) == {"dog/0.jpg": 3, "fish/2.jpg": 0, "cat/1.jpg": 7, "dog/2.jpg": 3}


def test_files_without_labels_are_labelled_minus_one(folder):
    unlabelled = conveyor.files(folder, labels=False, threads=2, rank=0, world_size=1).decode(SIZE).batch(4)
    assert set(labels_by_key(unlabelled).values()) == {-1}
    paths = [str(folder / "cat" / "0.jpg"), str(folder / "fish" / "1.jpg")]
    listed = conveyor.files(paths=paths, threads=2, rank=0, world_size=1).decode(SIZE).batch(4)
    assert labels_by_key(listed) == {p: -1 for p in paths}


def test_a_validation_map_gives_the_labels(folder, tmp_path):
    import json
    import shutil

    val = tmp_path / "val"
    val.mkdir()
    want = {}
    for n, src in enumerate(["cat/0.jpg", "dog/1.jpg", "fish/2.jpg"], start=1):
        name = f"ILSVRC2012_val_{n:08d}"
        shutil.copy(folder / src, val / f"{name}.JPEG")
        want[f"{name}.JPEG"] = 100 + n
    by_name = tmp_path / "map.json"
    by_name.write_text(json.dumps({k.split(".")[0]: v for k, v in want.items()}))
    pipe = conveyor.files(val, labels=False, extensions=(".JPEG",), threads=2, rank=0, world_size=1)
    assert labels_by_key(pipe.decode(SIZE, label_map=by_name).batch(2)) == want
    # The indexed form: entry "i" is the i-th file of the sorted listing.
    by_position = tmp_path / "map-indexed.json"
    by_position.write_text(json.dumps({"0": 101, "1": 102, "2": 103}))
    assert labels_by_key(pipe.decode(SIZE, label_map=by_position).batch(2)) == want
