"""Samples as they are: webdataset's dicts from shards, files and objects; to_tuple; the
user's map and filter on conveyor's threads; batches of samples; exact resume through all
of them. The reference for what a sample holds is Python's own tarfile reading the shards."""

import io
import json
import os
import tarfile
import threading

import pytest

import conveyor
import conveyor_testdata as td
from conftest import no_hang


def tar_samples(paths):
    """Each shard's samples by webdataset's rule, read with tarfile: {key: {field: bytes}}
    and the shard each came from."""
    out, where = {}, {}
    for path in paths:
        with tarfile.open(path) as tar:
            for m in tar.getmembers():
                if not m.isfile():
                    continue
                d, base = os.path.split(m.name)
                key, field = base.split(".", 1)
                key = os.path.join(d, key) if d else key
                out.setdefault(key, {})[field.lower()] = tar.extractfile(m).read()
                where[key] = path
    return out, where


@pytest.fixture(scope="module")
def rich(tmp_path_factory):
    """3 shards of 5 samples with an image, a caption, a JSON record, a mask (seg.png), an
    upper-case extension and a label: what image-text and segmentation datasets hold."""
    folder = tmp_path_factory.mktemp("rich")
    paths = []
    for s in range(3):
        samples = []
        for i in range(5):
            n = s * 5 + i
            samples.append(
                (
                    f"r{s}/k{i:02d}",
                    {
                        "jpg": td.jpeg_bytes(32 + i, 24, n),
                        "txt": f"caption {n} \u00e9".encode(),
                        "json": json.dumps({"n": n, "tags": ["a", "b"][: n % 3]}).encode(),
                        "seg.png": b"\x89PNG-not-really-%d" % n,
                        "META": b"upper %d" % n,
                        "cls": str(n % 4).encode(),
                    },
                )
            )
        path = str(folder / f"rich-{s:06d}.tar")
        td.write_shard(path, samples)
        paths.append(path)
    return paths


def test_a_shard_sample_is_the_dict_webdataset_yields(rich):
    want, where = tar_samples(rich)
    got = {}
    with no_hang(60, "raw samples"):
        for s in conveyor.shards(rich, shuffle=False):
            got[s["__key__"]] = s
    assert set(got) == set(want)
    for key, s in got.items():
        assert s["__url__"] == where[key]
        fields = {k: v for k, v in s.items() if not k.startswith("__")}
        assert fields == want[key]  # every member, its bytes exactly, lower-cased extensions
        assert all(isinstance(v, bytes) for v in fields.values())
    assert "seg.png" in got["r0/k00"] and "meta" in got["r0/k00"]


def test_each_shard_s_samples_come_in_member_order(rich):
    keys = [s["__key__"] for s in conveyor.shards(rich, seed=9)]  # shards interleaved, each in order
    assert len(keys) == 15 and len(set(keys)) == 15
    for shard in ("r0", "r1", "r2"):
        mine = [k for k in keys if k.startswith(shard + "/")]
        assert mine == sorted(mine)


def test_files_are_samples_of_one_field_and_their_label(folder):
    samples = list(conveyor.files(folder, shuffle=False))
    assert len(samples) == 9
    by_key = {s["__key__"]: s for s in samples}
    s = by_key["cat/0"]
    assert s["__url__"] == os.path.join(folder, "cat", "0.jpg")
    with open(s["__url__"], "rb") as f:
        assert s["jpg"] == f.read()
    assert s["cls"] == b"0" and by_key["fish/2"]["cls"] == b"2"
    no_labels = next(iter(conveyor.files(paths=[os.path.join(folder, "dog", "1.jpg")])))
    assert set(no_labels) == {"__key__", "__url__", "jpg"}


def test_to_tuple_picks_the_first_present_of_alternatives(rich):
    got = list(conveyor.shards(rich, shuffle=False).to_tuple("png;jpg", "txt", "__key__", "cls"))
    want, _ = tar_samples(rich)
    assert len(got) == 15
    for image, txt, key, cls in got:
        assert image == want[key]["jpg"] and txt == want[key]["txt"] and cls == want[key]["cls"]


def test_to_tuple_of_a_missing_field_names_the_key_and_the_fields_it_has(rich):
    with pytest.raises(conveyor.Error) as e:
        list(conveyor.shards(rich, shuffle=False).to_tuple("jpg", "npy"))
    msg = str(e.value)
    assert "npy" in msg and "r0/k00" in msg and "txt" in msg and "seg.png" in msg
    skipping = conveyor.shards(rich, shuffle=False, on_error="skip").to_tuple("jpg", "npy")
    it = iter(skipping)
    assert list(it) == []
    assert it.stats()["skipped"] == 15


def test_a_map_adds_fields_and_its_output_decodes(rich):
    def caption(s):
        s = dict(s)
        s["caption"] = s["txt"].decode().upper()  # a str: carried as it is
        s["length"] = len(s["txt"])
        del s["seg.png"]
        return s

    pipe = conveyor.shards(rich, shuffle=False).map(caption, threads=3)
    got = list(pipe)
    assert len(got) == 15
    for s in got:
        assert s["caption"] == s["txt"].decode().upper() and s["length"] == len(s["txt"]) and "seg.png" not in s
    decoded = conveyor.shards(rich, shuffle=False).map(caption).decode(size=16, crop="center").batch(5)
    labels = sorted(int(x) for images, labels in decoded for x in labels)
    assert labels == sorted(n % 4 for n in range(15))


def test_a_map_keeps_input_order_unless_told_not_to(rich):
    plain = [s["__key__"] for s in conveyor.shards(rich, seed=3)]
    slow_first = lambda s: (threading.Event().wait(0.02 if s["__key__"].endswith("0") else 0), s)[1]
    ordered = [s["__key__"] for s in conveyor.shards(rich, seed=3).map(slow_first, threads=4)]
    assert ordered == plain
    unordered = [s["__key__"] for s in conveyor.shards(rich, seed=3).map(slow_first, threads=4, ordered=False)]
    assert sorted(unordered) == sorted(plain)


def test_a_map_returning_none_drops_and_a_filter_keeps(rich):
    even = lambda s: int(s["cls"]) % 2 == 0
    kept = [s["__key__"] for s in conveyor.shards(rich, shuffle=False).filter(even)]
    dropped = [s["__key__"] for s in conveyor.shards(rich, shuffle=False).map(lambda s: s if even(s) else None)]
    want = sorted(k for k, f in tar_samples(rich)[0].items() if int(f["cls"]) % 2 == 0)
    assert sorted(kept) == want and sorted(dropped) == want


def test_a_map_returning_a_non_dict_names_the_stage(rich):
    def broken(s):
        return [s]

    with pytest.raises(conveyor.Error) as e:
        list(conveyor.shards(rich, shuffle=False).map(broken))
    assert "map(" in str(e.value) and "broken" in str(e.value) and "list" in str(e.value) and "not a sample" in str(e.value)


def test_a_python_exception_names_the_key_and_shard_and_follows_on_error(rich):
    def fails_on_k03(s):
        if s["__key__"].endswith("k03"):
            raise ValueError("bad caption")
        return s

    with pytest.raises(conveyor.Error) as e:
        list(conveyor.shards(rich, shuffle=False).map(fails_on_k03))
    msg = str(e.value)
    assert "ValueError: bad caption" in msg and "k03" in msg and "rich-" in msg and "fails_on_k03" in msg
    it = iter(conveyor.shards(rich, shuffle=False, on_error="skip").map(fails_on_k03))
    keys = [s["__key__"] for s in it]
    assert len(keys) == 12 and not any(k.endswith("k03") for k in keys)
    assert it.stats()["skipped"] == 3


def test_python_functions_run_on_several_threads_at_once(rich):
    seen, lock, peak = set(), threading.Lock(), [0]
    active = [0]

    def busy(s):
        with lock:
            seen.add(threading.get_ident())
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        threading.Event().wait(0.01)  # releases the GIL, as PIL or NumPy would
        with lock:
            active[0] -= 1
        return s

    assert len(list(conveyor.shards(rich).map(busy, threads=3))) == 15
    assert len(seen) == 3 and peak[0] >= 2


def test_memoryviews_hand_members_over_without_a_copy(rich):
    want, _ = tar_samples(rich)
    pipe = conveyor.shards(rich, shuffle=False).memoryviews()
    kept = []
    with no_hang(60, "raw samples as memoryviews"):
        for s in pipe:
            fields = {k: v for k, v in s.items() if not k.startswith("__")}
            assert all(isinstance(v, memoryview) and v.readonly and v.format == "B" for v in fields.values())
            assert {k: bytes(v) for k, v in fields.items()} == want[s["__key__"]]
            with pytest.raises(TypeError):
                fields["txt"][0] = 0  # read-only: the buffer is shared
            kept.append((s["__key__"], s["jpg"]))
    del pipe
    with pytest.raises(TypeError):
        type(kept[0][1].obj)()  # the exporter is made by conveyor only
    # A view outlives the run, the pipeline and the chunk it was read in: it holds its buffer.
    assert all(bytes(v) == want[key]["jpg"] for key, v in kept)

    # A map gets views too; handed back untouched, they are decoded without a copy.
    seen = []

    def look(s):
        seen.append(type(s["jpg"]))
        return {**s, "caption": s["txt"].tobytes().decode()}

    views = conveyor.shards(rich, shuffle=False).memoryviews().map(look)
    decoded = views.decode(size=16, crop="center").batch(5)
    assert sorted(int(x) for _, labels in decoded for x in labels) == sorted(n % 4 for n in range(15))
    assert seen and set(seen) == {memoryview}
    # Batches of samples: views in the columns.
    for b in conveyor.shards(rich, shuffle=False).memoryviews().batch(4):
        assert all(isinstance(x, memoryview) for x in b["txt"])
    # Off again: bytes, as webdataset yields.
    assert all(isinstance(s["txt"], bytes) for s in conveyor.shards(rich, shuffle=False).memoryviews().memoryviews(False))


def test_batches_of_samples_collate_fields(rich):
    def numbered(s):
        return {**s, "n": json.loads(s["json"])["n"]}

    batches = list(conveyor.shards(rich, shuffle=False).map(numbered).batch(4))
    assert [len(b["__key__"]) for b in batches] == [4, 4, 4, 3]
    import torch

    for b in batches:
        assert isinstance(b["txt"], list) and all(isinstance(x, bytes) for x in b["txt"])
        assert isinstance(b["n"], torch.Tensor) and b["n"].shape == (len(b["__key__"]),)
    tuples = list(conveyor.shards(rich, shuffle=False).batch(5, partial=False).to_tuple("txt", "__key__"))
    assert len(tuples) == 3 and all(len(t[0]) == 5 and len(t[1]) == 5 for t in tuples)


def test_a_map_on_batches_runs_after_batch(shard_set):
    pipe = conveyor.shards(shard_set.index, shuffle=False).decode(size=8).batch(16).map(lambda b: (b[0].float().mean(), b[1]))
    got = list(pipe)
    assert len(got) == 3 and all(m.ndim == 0 for m, _ in got)
    assert sorted(int(x) for _, l in got for x in l) == sorted(shard_set.labels.values())

    def broken(b):
        raise RuntimeError("loss spike")

    with pytest.raises(conveyor.Error, match="RuntimeError: loss spike"):
        list(conveyor.shards(shard_set.index).decode(size=8).batch(16).map(broken))


def test_raw_samples_resume_exactly_inside_a_chunk(shard_set):
    pipe = conveyor.shards(shard_set.index, seed=5)
    it = iter(pipe)
    first = [next(it)["__key__"] for _ in range(7)]  # inside the first chunk handed over
    state = pipe.state_dict()
    it.close()
    again = conveyor.shards(shard_set.index, seed=5)
    again.load_state_dict(state)
    rest = [s["__key__"] for s in again]
    assert sorted(first + rest) == sorted(shard_set.keys)


def test_a_filtered_epoch_resumes_each_kept_sample_once(shard_set):
    keep = lambda s: int(s["cls"]) != 1
    pipe = conveyor.shards(shard_set.index, seed=2).filter(keep).shuffle(8)
    it = iter(pipe)
    first = [next(it)["__key__"] for _ in range(10)]
    state = pipe.state_dict()
    it.close()
    again = conveyor.shards(shard_set.index, seed=2).filter(keep).shuffle(8)
    again.load_state_dict(state)
    rest = [s["__key__"] for s in again]
    want = {k for k, label in shard_set.labels.items() if label != 1}
    assert sorted(first + rest) == sorted(want)


def test_a_map_on_batches_resumes_after_the_batches_the_loop_had(shard_set):
    pipe = conveyor.shards(shard_set.index, seed=4).decode(size=8).batch(8).to_tuple("__key__").map(lambda t: t[0], threads=2)
    it = iter(pipe)
    first = next(it) + next(it)
    state = pipe.state_dict()
    it.close()
    again = conveyor.shards(shard_set.index, seed=4).decode(size=8).batch(8).to_tuple("__key__").map(lambda t: t[0], threads=2)
    again.load_state_dict(state)
    rest = [k for keys in again for k in keys]
    assert sorted(first + rest) == sorted(shard_set.keys)


def test_builder_order_is_checked():
    p = conveyor.shards("/nowhere/x.tar")
    with pytest.raises(ValueError, match="decode"):
        p.batch(4).decode()
    with pytest.raises(ValueError, match="shuffle"):
        p.decode().shuffle(10)
    with pytest.raises(TypeError):
        p.map(3)
    with pytest.raises(ValueError):
        p.to_tuple("jpg;")
    with pytest.raises(ValueError, match="after decode"):
        p.batch(4, dtype="float32")
