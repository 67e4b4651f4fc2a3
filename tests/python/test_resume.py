"""state_dict() / load_state_dict(): a new pipeline object resumes exactly where the saved
one stopped (the shuffle buffer's samples not yet handed out included): the keys before and
after are the whole epoch, none twice. The states of all ranks merged resume on any number
of ranks, each sample of the epoch once overall: shards, files and S3 objects alike."""

import json

import pytest

pytest.importorskip("PIL.Image", reason="PIL (Debian python3-pil) is not installed")
conveyor = pytest.importorskip(
    "conveyor", reason="the conveyor module is not built (needs pybind11-dev and python3-dev) or not on PYTHONPATH"
)


def shard_pipe(shard_set, rank=0, world_size=1):
    # .dlpack(): keys without torch; a shuffle buffer larger than a batch, so that samples
    # read but not handed out exist at every save.
    return (
        conveyor.shards(shard_set.pattern, seed=3, threads=2, rank=rank, world_size=world_size)
        .shuffle(12)
        .decode(32)
        .batch(4)
        .keys()
        .dlpack()
    )


def take(pipe, batches):
    """Keys of the first `batches` batches of an iteration broken off after them."""
    it = iter(pipe)
    keys = [k for _ in range(batches) for k in next(it).keys]
    del it
    return keys


def checkpoint(state):
    return json.loads(json.dumps(state))  # what a checkpoint file keeps


@pytest.mark.parametrize("batches", [1, 3, 11])
def test_a_new_pipeline_resumes_a_shard_epoch_exactly(shard_set, batches):
    pipe = shard_pipe(shard_set)
    before = take(pipe, batches)
    state = checkpoint(pipe.state_dict())
    assert state["epoch"] == 0 and state["progress"]

    resumed = shard_pipe(shard_set)
    resumed.load_state_dict(state)
    after = [k for b in resumed for k in b.keys]
    assert len(before) == 4 * batches
    assert not set(before) & set(after)  # nothing handed out twice
    assert len(after) == len(set(after))
    assert sorted(before + after) == sorted(shard_set.keys)  # nothing lost
    assert resumed.epoch == 1  # the epoch ended: the next one comes next


def test_a_broken_loop_goes_on_from_where_it_stopped(shard_set):
    pipe = shard_pipe(shard_set)
    before = take(pipe, 2)
    after = [k for b in pipe for k in b.keys]
    assert sorted(before + after) == sorted(shard_set.keys)


def test_a_state_saved_at_the_end_of_an_epoch_starts_the_next(shard_set):
    pipe = shard_pipe(shard_set)
    for _ in pipe:
        pass
    state = pipe.state_dict()
    assert state["epoch"] == 1 and not state["progress"]
    fresh = shard_pipe(shard_set)
    fresh.load_state_dict(state)
    assert fresh.epoch == 1
    assert sorted(k for b in fresh for k in b.keys) == sorted(shard_set.keys)


@pytest.mark.parametrize("new_world", [3, 1])
def test_merged_states_of_two_ranks_resume_on_another_number_of_ranks(shard_set, new_world):
    used, states = [], []
    for rank, batches in ((0, 2), (1, 3)):
        pipe = shard_pipe(shard_set, rank, 2)
        used += take(pipe, batches)
        states.append(checkpoint(pipe.state_dict()))
    assert len(used) == len(set(used)) == 20
    merged = conveyor.merge_states(states)

    after = []
    for rank in range(new_world):
        pipe = shard_pipe(shard_set, rank, new_world)
        pipe.load_state_dict(merged)
        assert pipe.split == (rank, new_world, 0, 1)
        after += [k for b in pipe for k in b.keys]
    assert len(after) == len(set(after))
    assert not set(used) & set(after)
    assert sorted(used + after) == sorted(shard_set.keys)  # every sample once overall

    # A list of the ranks' states is merged by load_state_dict itself.
    one = shard_pipe(shard_set)
    one.load_state_dict(states)
    if new_world == 1:
        assert sorted(k for b in one for k in b.keys) == sorted(after)


def test_states_of_different_epochs_do_not_merge(shard_set):
    a = shard_pipe(shard_set, 0, 2)
    take(a, 1)
    b = shard_pipe(shard_set, 1, 2)
    b.set_epoch(1)
    take(b, 1)
    with pytest.raises(conveyor.Error, match="different epochs"):
        conveyor.merge_states([a.state_dict(), b.state_dict()])


def files_pipe(folder, rank=0, world_size=1):
    return conveyor.files(folder, seed=5, threads=2, rank=rank, world_size=world_size).decode(32).batch(2).keys().dlpack()


def test_a_files_pipeline_resumes_its_position(folder):
    whole = [k for b in files_pipe(folder) for k in b.keys]  # epoch 0's order
    pipe = files_pipe(folder)
    before = take(pipe, 2)
    state = checkpoint(pipe.state_dict())
    assert state["kind"] == "files" and json.loads(state["progress"])["whole"]["next"] == [4]
    resumed = files_pipe(folder)
    resumed.load_state_dict(state)
    after = [k for b in resumed for k in b.keys]
    assert before + after == whole  # the same order, from the same place

    with pytest.raises(ValueError, match="shards pipeline"):
        files_pipe(folder).load_state_dict({**state, "kind": "shards"})


@pytest.mark.parametrize("new_world", [3, 1])
def test_merged_files_states_of_two_ranks_resume_on_another_number_of_ranks(folder, new_world):
    def pipe_of(rank, world):
        return conveyor.files(folder, seed=5, threads=2, rank=rank, world_size=world).shuffle(3).decode(32).batch(1).keys().dlpack()

    used, states = [], []
    for rank, batches in ((0, 2), (1, 1)):
        pipe = pipe_of(rank, 2)
        used += take(pipe, batches)
        states.append(checkpoint(pipe.state_dict()))
    assert len(used) == len(set(used)) == 3
    merged = conveyor.merge_states(states)
    after = []
    for rank in range(new_world):
        pipe = pipe_of(rank, new_world)
        pipe.load_state_dict(merged)
        after += [k for b in pipe for k in b.keys]
    # 9 files divided among 2 ranks with uneven="drop": the epoch is 8 of them, each once.
    assert len(after) == len(set(after)) == 5
    assert not set(used) & set(after)
    assert set(used + after) <= {f"{c}/{i}.jpg" for c in ("cat", "dog", "fish") for i in range(3)}


def test_a_second_iterator_takes_over_where_the_first_stopped(shard_set):
    pipe = shard_pipe(shard_set)
    first = iter(pipe)
    a = next(first).keys
    second = iter(pipe)  # stops the first: one run per pipeline at a time
    with pytest.raises(StopIteration):
        next(first)
    rest = [k for b in second for k in b.keys]
    assert sorted(a + rest) == sorted(shard_set.keys)
    assert pipe.epoch == 1


def test_a_files_pipeline_with_a_shuffle_buffer_resumes_each_file_once(folder):
    def shuffled():
        return conveyor.files(folder, seed=5, threads=2, rank=0, world_size=1).shuffle(6).decode(32).batch(2).keys().dlpack()

    pipe = shuffled()
    before = take(pipe, 2)
    resumed = shuffled()
    resumed.load_state_dict(pipe.state_dict())
    after = [k for b in resumed for k in b.keys]
    assert not set(before) & set(after)
    assert sorted(before + after) == sorted(f"{c}/{i}.jpg" for c in ("cat", "dog", "fish") for i in range(3))


@pytest.mark.parametrize("kind", ["shards", "files"])
def test_a_state_saved_inside_the_loop_resumes_after_the_batches_handed_out_so_far(shard_set, folder, kind):
    make = (lambda: shard_pipe(shard_set)) if kind == "shards" else (lambda: files_pipe(folder))
    pipe = make()
    seen, state = [], None
    for i, b in enumerate(pipe):  # a checkpoint every few steps, the loop going on
        seen += b.keys
        if i == 2:
            state = checkpoint(pipe.state_dict())
            before = list(seen)
    everything = sorted(seen)
    assert len(everything) == len(set(everything))
    resumed = make()
    resumed.load_state_dict(state)
    after = [k for b in resumed for k in b.keys]
    assert not set(before) & set(after)
    assert sorted(before + after) == everything


def test_a_pipeline_pickles_with_its_position_resolved_or_not(folder):
    import pickle

    whole = [k for b in files_pipe(folder) for k in b.keys]
    fresh = pickle.loads(pickle.dumps(files_pipe(folder)))
    assert [k for b in fresh for k in b.keys] == whole
    pipe = files_pipe(folder)  # as for a DataLoader whose workers are spawned, after len() and some batches
    assert len(pipe) == 5
    before = take(pipe, 2)
    copy = pickle.loads(pickle.dumps(pipe))
    assert copy.epoch == 0
    assert before + [k for b in copy for k in b.keys] == whole
