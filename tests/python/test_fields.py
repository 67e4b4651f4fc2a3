"""Decoded fields from Python: webdataset's default decoders (images, cls, txt, json, npy),
the user's decoders, batches of any fields beside the image tensor, and what bad fields give.
The references are NumPy, PIL and json themselves."""

import io
import json

import numpy as np
import pytest
from PIL import Image

import conveyor
import conveyor_testdata as td


def npy_bytes(a):
    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


def png_bytes(mask):
    f = io.BytesIO()
    Image.fromarray(mask).save(f, format="PNG")
    return f.getvalue()


def arrays(n):
    return np.arange(6, dtype=np.float32).reshape(2, 3) + n


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """2 shards of 6 samples: a JPEG, a caption, a JSON record, a label, a float32 array of
    one shape, an int16 array of a shape of its own per sample, and a PNG mask."""
    folder = tmp_path_factory.mktemp("fields")
    paths, want = [], {}
    for s in range(2):
        samples = []
        for i in range(6):
            n = s * 6 + i
            key = f"f{s}/{i:03d}"
            w, h = 40 + 4 * i, 30
            fields = {
                "jpg": td.jpeg_bytes(w, h, n),
                "txt": f"a photo of thing {n} \u2713".encode(),
                "json": json.dumps({"n": n, "box": [1, 2, 3 + n], "name": f"x{n}"}).encode(),
                "cls": str(n % 3).encode(),
                "npy": npy_bytes(arrays(n)),
                "var.npy": npy_bytes(np.arange(n + 1, dtype=">i2")),
                "seg.png": png_bytes(np.full((h, w), n, dtype=np.uint8)),
            }
            want[key] = {"n": n, "size": (h, w), "jpg": fields["jpg"]}
            samples.append((key, fields))
        path = str(folder / f"fields-{s:06d}.tar")
        td.write_shard(path, samples)
        paths.append(path)
    return paths, want


def test_decoded_samples_hold_each_field_as_webdataset_decodes_it(dataset):
    import torch

    paths, want = dataset
    got = {s["__key__"]: s for s in conveyor.shards(paths, shuffle=False).decode(size=None)}
    assert set(got) == set(want)
    for key, s in got.items():
        n = want[key]["n"]
        assert s["txt"] == f"a photo of thing {n} \u2713"
        assert s["json"] == {"n": n, "box": [1, 2, 3 + n], "name": f"x{n}"}
        assert s["cls"] == n % 3 and isinstance(s["cls"], int)
        np.testing.assert_array_equal(s["npy"], arrays(n))
        assert s["npy"].dtype == np.float32
        np.testing.assert_array_equal(s["var.npy"], np.arange(n + 1, dtype=">i2"))
        assert s["var.npy"].dtype == np.dtype(">i2")
        image = s["jpg"]
        assert isinstance(image, torch.Tensor) and image.dtype == torch.uint8
        assert tuple(image.shape) == want[key]["size"] + (3,)
        pil = np.asarray(Image.open(io.BytesIO(want[key]["jpg"])).convert("RGB"))
        assert np.abs(image.numpy().astype(int) - pil.astype(int)).max() <= 2  # libjpeg-turbo both, IDCT rounding apart
        mask = s["seg.png"]
        assert tuple(mask.shape)[:2] == want[key]["size"] and int(mask[0, 0, 0]) == n


def test_batches_carry_any_fields_beside_the_image_tensor(dataset):
    import torch

    paths, want = dataset
    pipe = conveyor.shards(paths, shuffle=False).decode(size=24, crop="center").batch(4)
    tuples = list(pipe.to_tuple("jpg;png;webp", "txt", "json", "cls", "npy", "var.npy", "__key__"))
    assert len(tuples) == 3
    seen = []
    for images, txt, js, cls, npy, var, keys in tuples:
        assert images.shape == (4, 24, 24, 3) and images.dtype == torch.uint8
        assert isinstance(cls, torch.Tensor) and cls.dtype == torch.int64
        assert isinstance(npy, torch.Tensor) and npy.shape == (4, 2, 3) and npy.dtype == torch.float32  # same shape: stacked
        assert isinstance(var, list) and len(var) == 4  # shapes differ: a list
        assert isinstance(txt, list) and isinstance(js, list)
        for j, key in enumerate(keys):
            n = want[key]["n"]
            assert txt[j] == f"a photo of thing {n} \u2713" and js[j]["n"] == n and int(cls[j]) == n % 3
            np.testing.assert_array_equal(npy[j].numpy(), arrays(n))
            np.testing.assert_array_equal(var[j], np.arange(n + 1, dtype=">i2"))
            seen.append(key)
    assert sorted(seen) == sorted(want)


def test_a_batch_of_fields_without_an_image(dataset):
    import torch

    paths, want = dataset
    batches = list(conveyor.shards(paths, shuffle=False).decode().batch(5).to_tuple("npy", "cls", "__key__"))
    assert [len(k) for _, _, k in batches] == [5, 5, 2]
    for npy, cls, keys in batches:
        assert isinstance(npy, torch.Tensor) and npy.shape[1:] == (2, 3)
        assert [int(c) for c in cls] == [want[k]["n"] % 3 for k in keys]


def test_images_of_no_fixed_size_batch_as_lists(dataset):
    paths, want = dataset
    for images, keys in conveyor.shards(paths, shuffle=False).decode(size=None).batch(3).to_tuple("jpg", "__key__"):
        assert isinstance(images, list)
        assert [tuple(im.shape[:2]) for im in images] == [want[k]["size"] for k in keys]
    with pytest.raises(ValueError, match="to_tuple"):
        list(conveyor.shards(paths).decode(size=None).batch(3))


def test_a_user_decoder_by_field_name_and_by_extension(dataset):
    paths, want = dataset

    def mask_area(data):
        return int((np.asarray(Image.open(io.BytesIO(data))) > 0).sum())

    def no_json(data):
        return None  # leaves the field to the default decoder

    got = list(conveyor.shards(paths, shuffle=False).decode(size=16, decoders={"seg.png": mask_area, "json": no_json}))
    for s in got:
        n = want[s["__key__"]]["n"]
        h, w = want[s["__key__"]]["size"]
        assert s["seg.png"] == (h * w if n else 0)
        assert s["json"]["n"] == n
    upper = list(conveyor.shards(paths, shuffle=False).decode(size=16, decoders={"txt": lambda b: b.decode().upper()}))
    assert all(s["txt"].startswith("A PHOTO") for s in upper)


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    folder = tmp_path_factory.mktemp("badfields")
    path = str(folder / "bad-000000.tar")
    good = {"jpg": td.jpeg_bytes(20, 20, 1), "cls": b"1", "json": b'{"ok": 1}', "npy": npy_bytes(np.zeros(3))}
    lying = bytearray(npy_bytes(np.zeros((4, 4))))[:-40]  # the header says 128 bytes; fewer follow
    td.write_shard(
        path,
        [
            ("a", good),
            ("b", {**good, "json": b'{"ok": 1,,}'}),
            ("c", good),
            ("d", {**good, "npy": bytes(lying)}),
            ("e", good),
        ],
    )
    return path


def test_bad_json_names_the_key_field_and_shard(tmp_path):
    # One bad sample only: with several, whichever decode thread fails first is reported.
    path = str(tmp_path / "json-000000.tar")
    good = {"jpg": td.jpeg_bytes(20, 20, 1), "cls": b"1", "json": b'{"ok": 1}'}
    td.write_shard(path, [("a", good), ("b", {**good, "json": b'{"ok": 1,,}'}), ("c", good)])
    with pytest.raises(conveyor.Error) as e:
        list(conveyor.shards(path, shuffle=False).decode(size=8))
    msg = str(e.value)
    assert "'b'" in msg and "json" in msg and "json-000000.tar" in msg


def test_a_lying_npy_header_is_an_error_and_skip_counts(bad):
    with pytest.raises(conveyor.Error) as e:
        list(conveyor.shards(bad, shuffle=False).decode(size=8).batch(5).to_tuple("jpg", "json", "npy"))
    assert "bad-000000.tar" in str(e.value)
    it = iter(conveyor.shards(bad, shuffle=False, on_error="skip").decode(size=8).batch(5).to_tuple("jpg", "npy", "__key__"))
    keys = [k for _, _, ks in it for k in ks]
    assert keys == ["a", "b", "c", "e"]
    assert it.stats()["skipped"] == 1


def test_a_missing_extra_field_names_the_key_and_the_fields_it_has(bad):
    with pytest.raises(conveyor.Error) as e:
        list(conveyor.shards(bad, shuffle=False).decode(size=8).batch(2).to_tuple("jpg", "txt"))
    msg = str(e.value)
    assert "txt" in msg and "cls" in msg and "json" in msg
