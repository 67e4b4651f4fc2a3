"""Shard pipelines through the builder: batches equal, byte for byte, what the same C++
pipeline gives for the same seed; tensors share conveyor's memory and stay valid while held,
after the run and the pipeline are gone; dropping the iterator or closing it mid-epoch stops
all work (threads and descriptors back to where they were); len() and keys()."""

import gc
import subprocess

import pytest

torch = pytest.importorskip("torch", reason="PyTorch (Debian python3-torch) is not installed")
pytest.importorskip("PIL.Image", reason="PIL (Debian python3-pil) is not installed")
conveyor = pytest.importorskip(
    "conveyor", reason="the conveyor module is not built (needs pybind11-dev and python3-dev) or not on PYTHONPATH"
)

from conftest import no_hang, threads_and_fds  # noqa: E402

SEED, BUFFER, SIZE, BATCH = 7, 16, 32, 5


def augmented(shard_set, **source):
    """The pipeline reference_batches.cpp runs in C++."""
    source.setdefault("rank", 0)
    source.setdefault("world_size", 1)
    return (
        conveyor.shards(shard_set.pattern, seed=SEED, threads=2, **source)
        .shuffle(BUFFER)
        .decode(SIZE, crop="random_resized", flip=True)
        .batch(BATCH)
    )


@pytest.mark.parametrize("epoch", [0, 1])
def test_batches_equal_the_cpp_pipelines_byte_for_byte(shard_set, reference_program, tmp_path, epoch):
    out = str(tmp_path / "ref")
    run = subprocess.run(
        [reference_program, out, str(SEED), str(BUFFER), str(SIZE), str(BATCH), str(epoch), shard_set.pattern],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    with open(out + ".bin", "rb") as f:
        want_pixels = f.read()
    with open(out + ".txt") as f:
        want_meta = f.read().splitlines()

    pipe = augmented(shard_set).keys()
    pipe.set_epoch(epoch)
    pixels, meta = [], []
    for images, labels, keys in pipe:
        assert images.shape == (len(keys), SIZE, SIZE, 3)
        pixels.append(images.numpy().tobytes())
        meta.append(f"batch {len(keys)}")
        meta += [f"{k} {y}" for k, y in zip(keys, labels.tolist())]
    assert meta == want_meta  # same keys, labels and batches, in the same order
    assert len(want_pixels) == 48 * SIZE * SIZE * 3
    assert b"".join(pixels) == want_pixels
    keys = [line.split()[0] for line in meta if not line.startswith("batch")]
    assert sorted(keys) == sorted(shard_set.keys)
    assert all(int(line.split()[1]) == shard_set.labels[line.split()[0]] for line in meta if not line.startswith("batch"))


def test_epochs_differ_and_an_epoch_repeats_exactly(shard_set):
    pipe = augmented(shard_set).keys()
    first = [(x.clone(), k) for x, _, k in pipe]
    second = [(x.clone(), k) for x, _, k in pipe]  # the next epoch
    assert pipe.epoch == 2
    assert [k for _, k in first] != [k for _, k in second]
    pipe.set_epoch(0)
    again = [(x.clone(), k) for x, _, k in pipe]
    assert [k for _, k in again] == [k for _, k in first]
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(first, again))


def test_tensors_are_conveyors_memory_without_a_copy(shard_set):
    n = 0
    for b in augmented(shard_set).dlpack():
        images = torch.from_dlpack(b.images)
        labels = torch.from_dlpack(b.labels)
        assert images.data_ptr() == b.images.data_ptr
        assert labels.data_ptr() == b.labels.data_ptr
        assert images.shape == tuple(b.images.shape) and labels.shape == (len(b),)
        assert b.index == n
        n += 1
    assert n == 10


def test_numpy_takes_the_same_memory_through_dlpack(shard_set):
    np = pytest.importorskip("numpy", reason="NumPy (Debian python3-numpy) is not installed")
    if not hasattr(np, "from_dlpack"):
        pytest.skip(f"NumPy {np.__version__} has no from_dlpack (1.22 or later has)")
    for b in augmented(shard_set).dlpack():
        images, labels = np.from_dlpack(b.images), np.from_dlpack(b.labels)
        assert images.ctypes.data == b.images.data_ptr and labels.ctypes.data == b.labels.data_ptr
        assert images.dtype == np.uint8 and labels.dtype == np.int64
        assert (images == torch.from_dlpack(b.images).numpy()).all()


def test_held_tensors_stay_valid_after_the_run_and_the_pipeline_are_gone(shard_set):
    pipe = augmented(shard_set).keys()
    held = []
    for i, (images, labels, keys) in enumerate(pipe):
        if i % 3 == 0:  # batches 0, 3, 6, 9: fewer than the pipeline's slabs
            held.append((images, labels, keys))
    assert len(held) == 4
    del pipe, images, labels
    gc.collect()
    # Other memory is allocated and written meanwhile: a slab given back under a held tensor
    # would be overwritten by the next pipeline's batches.
    fresh = {}
    for images, labels, keys in augmented(shard_set).keys():
        for k, x, y in zip(keys, images, labels):
            fresh[k] = (x.clone(), int(y))
    for images, labels, keys in held:
        for k, x, y in zip(keys, images, labels):
            assert torch.equal(x, fresh[k][0]), k
            assert int(y) == fresh[k][1]


def test_a_consumer_may_hold_every_batch_of_an_epoch(shard_set):
    with no_hang(60, "holding the batches of an epoch (list(pipe))"):
        batches = list(augmented(shard_set))
    assert len(batches) == 10


def _settle(want, seconds=10.0):
    """Counts once they equal `want`, or after `seconds` (threads exit asynchronously after join
    in some libraries; a slow machine must not fail the test)."""
    import time

    deadline = time.monotonic() + seconds
    now = threads_and_fds()
    while now != want and time.monotonic() < deadline:
        time.sleep(0.05)
        now = threads_and_fds()
    return now


@pytest.mark.parametrize("source", ["shards", "files"])
def test_dropping_the_iterator_mid_epoch_stops_all_work(shard_set, folder, source):
    def make():
        if source == "shards":
            return augmented(shard_set).dlpack()
        return conveyor.files(folder, threads=2, rank=0, world_size=1).shuffle(4).decode(SIZE).batch(2).dlpack()

    # Count from after a first pipeline came and went (what other tests or libraries started
    # for the process stays), then from after a full epoch of this one (its runtime's threads
    # live as long as it does).
    first = make()
    for _ in first:
        pass
    del first
    gc.collect()
    no_pipeline = threads_and_fds()

    pipe = make()
    for _ in pipe:
        pass
    idle = threads_and_fds()
    assert idle[0] > no_pipeline[0]  # the runtime's threads live with the pipeline

    it = iter(pipe)
    b = next(it)
    during = threads_and_fds()
    assert during[0] >= idle[0]
    del it, b
    gc.collect()
    assert _settle(idle) == idle

    # Several times over: nothing accumulates.
    for _ in range(3):
        pipe.set_epoch(0)
        it = iter(pipe)
        next(it)
        next(it)
        del it
    gc.collect()
    assert _settle(idle) == idle

    del pipe
    gc.collect()
    assert _settle(no_pipeline) == no_pipeline


def test_closing_the_epoch_stops_its_work_and_keeps_the_position(shard_set):
    pipe = augmented(shard_set).dlpack()
    for _ in pipe:
        pass
    idle = threads_and_fds()
    pipe.set_epoch(0)
    it = iter(pipe)
    first = [next(it).keys for _ in range(3)]
    it.close()
    assert _settle(idle) == idle
    with pytest.raises(StopIteration):
        next(it)  # a closed epoch yields nothing more
    # The position reached stays with the pipeline: iterating again goes on after it.
    rest = [b.keys for b in pipe]
    got = [k for ks in first + rest for k in ks]
    assert sorted(got) == sorted(shard_set.keys)
    assert pipe.epoch == 1


def test_len_of_shards_is_known_from_a_dataset_index_only(shard_set):
    indexed = conveyor.shards(shard_set.index, seed=SEED, threads=2, rank=0, world_size=1).decode(SIZE).batch(BATCH)
    assert len(indexed) == 10  # 48 samples, 5 a batch
    assert sum(1 for _ in indexed) == 10
    half = conveyor.shards(shard_set.index, rank=1, world_size=2).decode(SIZE).batch(BATCH, partial=False)
    assert len(half) == 4  # 3 shards, 24 samples: 4 whole batches
    by_pattern = augmented(shard_set)
    with pytest.raises(TypeError, match="unknown"):
        len(by_pattern)


def test_keys_come_with_each_batch(shard_set):
    seen = []
    for images, labels, keys in augmented(shard_set).keys():
        assert len(keys) == images.shape[0] == labels.shape[0]
        assert [shard_set.labels[k] for k in keys] == labels.tolist()
        seen += keys
    assert sorted(seen) == sorted(shard_set.keys)
    for item in augmented(shard_set):  # without keys(): pairs
        assert len(item) == 2
        break
