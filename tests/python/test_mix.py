"""conveyor.mix: samples drawn from several sources by weight, deterministic for (seed,
epoch, rank), the three ways to end, weight schedules, and exact resume across ranks."""

import os

import pytest

import conveyor
import conveyor_testdata as td


def make_set(folder, name, shards, per_shard):
    os.makedirs(folder, exist_ok=True)
    paths = []
    for s in range(shards):
        samples = [(f"{name}{s}-{i:03d}", {"jpg": td.jpeg_bytes(24, 20, s * per_shard + i), "cls": str(len(name)).encode()})
                   for i in range(per_shard)]
        path = os.path.join(folder, f"{name}-{s:06d}.tar")
        td.write_shard(path, samples)
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    return {
        "a": make_set(str(root / "a"), "a", 4, 30),  # 120 samples
        "bb": make_set(str(root / "b"), "bb", 2, 20),  # 40 samples
        "ccc": make_set(str(root / "c"), "ccc", 2, 10),  # 20 samples
    }


def keys_of(pipe, n=None):
    out = []
    for s in pipe:
        out.append(s["__key__"])
        if n is not None and len(out) == n:
            break
    return out


def src(key):
    return "".join(ch for ch in key.split("-")[0] if ch.isalpha())


def test_stop_all_reads_every_sample_of_every_source_once(sets):
    got = keys_of(conveyor.mix([conveyor.shards(sets[k], seed=1) for k in sets], [1, 1, 1], seed=3))
    assert len(got) == 180 and len(set(got)) == 180


def test_stop_first_ends_when_the_first_source_runs_out(sets):
    got = keys_of(conveyor.mix([conveyor.shards(sets["a"], seed=1), conveyor.shards(sets["ccc"], seed=1)], [1, 1], seed=3, stop="first"))
    by = [src(k) for k in got]
    assert by.count("ccc") == 20 and 0 < by.count("a") < 60  # c ran out first (about 20 draws of each): the epoch ended there


def test_which_source_each_draw_takes_is_a_pure_function_of_seed_and_epoch(sets):
    def sources(seed):
        return [src(k) for k in keys_of(conveyor.mix([conveyor.shards(sets[k], seed=1) for k in sets], [3, 2, 1], seed=seed))]

    assert sources(5) == sources(5)
    assert sources(5) != sources(6)


def test_weights_are_honoured_when_sources_never_end(sets):
    pipe = conveyor.mix([conveyor.shards(sets["a"], seed=1), conveyor.shards(sets["ccc"], seed=1)], [3, 1], seed=11, stop="never")
    by = [src(k) for k in keys_of(pipe, 2000)]
    share = by.count("a") / len(by)
    assert 0.72 < share < 0.78  # 0.75 +- 4 standard deviations of 2000 draws
    assert by.count("ccc") > 20  # the small source was started again


def test_a_weight_schedule_of_the_global_index(sets):
    schedule = lambda i: [1.0, 0.0] if i < 25 else [0.0, 1.0]
    pipe = conveyor.mix([conveyor.shards(sets["a"], seed=1), conveyor.shards(sets["bb"], seed=1)], seed=2, schedule=schedule, schedule_step=1)
    by = [src(k) for k in keys_of(pipe, 60)]
    assert by[:25] == ["a"] * 25 and by[25:] == ["bb"] * 35


def test_a_mix_resumes_each_sample_once(sets):
    def make():
        return conveyor.mix([conveyor.shards(sets[k], seed=4).shuffle(16) for k in sets], [2, 1, 1], seed=9)

    pipe = make()
    it = iter(pipe)
    first = [next(it)["__key__"] for _ in range(37)]
    state = pipe.state_dict()
    it.close()
    again = make()
    again.load_state_dict(state)
    rest = keys_of(again)
    assert len(first) + len(rest) == 180 and len(set(first + rest)) == 180


def test_merged_mix_states_of_two_ranks_resume_on_three(sets):
    def make(rank, world):
        return conveyor.mix([conveyor.shards(sets[k], seed=4) for k in ("a", "bb")], [1, 1], seed=9, rank=rank, world_size=world)

    seen, states = [], []
    for rank in range(2):
        pipe = make(rank, 2)
        it = iter(pipe)
        seen += [next(it)["__key__"] for _ in range(13)]
        states.append(pipe.state_dict())
        it.close()
    for rank in range(3):
        pipe = make(rank, 3)
        pipe.load_state_dict(states)
        seen += keys_of(pipe)
    assert len(seen) == len(set(seen))
    # Shards divide among ranks: 4 of a and 2 of bb among 2 ranks, then their rest among 3.
    assert set(seen) == {f"a{s}-{i:03d}" for s in range(4) for i in range(30)} | {f"bb{s}-{i:03d}" for s in range(2) for i in range(20)}


def test_a_mix_decodes_and_batches_after_it(sets):
    pipe = conveyor.mix([conveyor.shards(sets["a"]), conveyor.shards(sets["bb"])], [1, 1], seed=1).decode(size=16).batch(32)
    labels = [int(x) for _, l in pipe for x in l]
    assert sorted(set(labels)) == [1, 2] and len(labels) == 160


def test_bad_mixes_are_refused(sets):
    a = conveyor.shards(sets["a"])
    with pytest.raises(ValueError, match="weights"):
        conveyor.mix([a, a], [1])
    with pytest.raises(ValueError, match="weights"):
        conveyor.mix([a, a], [0, 0])
    with pytest.raises(ValueError, match="weights"):
        conveyor.mix([a, a], [1, -1])
    with pytest.raises(ValueError, match="decode"):
        conveyor.mix([a.decode(size=8), a])
    with pytest.raises(ValueError, match="stop"):
        conveyor.mix([a], stop="sometimes")
    with pytest.raises(ValueError, match="at least one"):
        conveyor.mix([])
