"""Errors reach Python as conveyor.Error (a RuntimeError) with the C++ message: the stage, the
key and the path; with on_error="skip" the bad item (or the rest of a bad shard) is left out,
counted in stats()["skipped"], and the epoch goes on."""

import os
import shutil

import pytest

pytest.importorskip("PIL.Image", reason="PIL (Debian python3-pil) is not installed")
conveyor = pytest.importorskip(
    "conveyor", reason="the conveyor module is not built (needs pybind11-dev and python3-dev) or not on PYTHONPATH"
)

from conveyor_testdata import jpeg_bytes, write_shard  # noqa: E402


def keys_of(pipe):
    return [k for b in pipe for k in b.keys]


def pipeline(pattern, **source):
    return conveyor.shards(pattern, seed=2, threads=2, rank=0, world_size=1, **source).decode(32).batch(4).keys().dlpack()


@pytest.fixture
def truncated(shard_set, tmp_path):
    """Two of the shard set's shards, the second cut 10 bytes into the data of its 7th member
    (the 4th sample's .jpg)."""
    import tarfile

    for s in (0, 1):
        shutil.copy(shard_set.paths[s], tmp_path / os.path.basename(shard_set.paths[s]))
    cut = tmp_path / os.path.basename(shard_set.paths[1])
    with tarfile.open(cut) as tar:
        member = tar.getmembers()[6]
    assert member.name == "s01-003.jpg"
    data = cut.read_bytes()
    cut.write_bytes(data[: member.offset_data + 10])
    return str(tmp_path / "shard-{000000..000001}.tar"), str(cut)


def test_a_truncated_shard_fails_the_epoch_naming_stage_path_and_offset(truncated):
    pattern, cut = truncated
    with pytest.raises(conveyor.Error) as e:
        keys_of(pipeline(pattern))
    msg = str(e.value)
    assert isinstance(e.value, RuntimeError)
    assert "'shards'" in msg and cut in msg and "at byte" in msg, msg
    assert "past the end of the archive" in msg, msg  # the member's data run past the end


def test_a_truncated_shard_is_skipped_and_counted_when_asked(truncated, shard_set):
    pattern, cut = truncated
    pipe = pipeline(pattern, on_error="skip")
    keys = keys_of(pipe)
    assert len(keys) == len(set(keys))
    first = {k for k in shard_set.keys if k.startswith("s00-")}
    assert first <= set(keys)  # the good shard whole
    assert all(k.startswith(("s00-", "s01-")) for k in keys)
    # Up to the cut: the samples before the cut member's; s01-002 (whose members are whole)
    # goes with the cut, as the sample is only known complete when the next key begins.
    assert {k for k in keys if k.startswith("s01-")} == {"s01-000", "s01-001"}
    assert pipe.stats()["skipped"] == 1


def test_a_corrupt_image_in_a_shard_names_the_stage_the_key_and_the_shard(tmp_path):
    good = jpeg_bytes(40, 40, 1)
    samples = [(f"k{i}", {"jpg": good, "cls": b"1"}) for i in range(5)]
    samples[2] = ("k2", {"jpg": good[: len(good) // 3], "cls": b"1"})
    path = tmp_path / "shard-000000.tar"
    write_shard(str(path), samples)
    with pytest.raises(conveyor.Error) as e:
        keys_of(pipeline(str(path)))
    msg = str(e.value)
    assert "decode_batches" in msg and "k2" in msg and str(path) in msg, msg

    pipe = pipeline(str(path), on_error="skip")
    assert sorted(keys_of(pipe)) == ["k0", "k1", "k3", "k4"]
    assert pipe.stats()["skipped"] == 1


def test_a_sample_without_a_label_is_an_error(tmp_path):
    path = tmp_path / "shard-000000.tar"
    write_shard(str(path), [("k0", {"jpg": jpeg_bytes(40, 40, 1)})])
    with pytest.raises(conveyor.Error, match="k0"):
        keys_of(pipeline(str(path)))


def test_a_missing_source_is_an_error_when_resolved(tmp_path):
    with pytest.raises(conveyor.Error):
        keys_of(pipeline(str(tmp_path / "absent-{000000..000001}.tar")))
    with pytest.raises(conveyor.Error, match="no files found"):
        len(conveyor.files(tmp_path).decode(32).batch(2))


def test_builder_arguments_are_checked_in_python():
    with pytest.raises(ValueError, match="on_error"):
        conveyor.shards("x.tar", on_error="ignore")
    with pytest.raises(ValueError, match="crop"):
        conveyor.shards("x.tar").decode(32, crop="square")
    with pytest.raises(ValueError, match="after decode"):
        conveyor.shards("x.tar").batch(4, layout="nchw")
    with pytest.raises(ValueError, match="dtype"):
        conveyor.shards("x.tar").decode(32).batch(4, dtype="int8")
    with pytest.raises(ValueError, match="both rank and world_size"):
        conveyor.shards("x.tar", rank=0)
