"""The multi-rank split from the environment: processes launched with RANK/WORLD_SIZE
(torchrun) or SLURM_PROCID/SLURM_NTASKS each read a disjoint share of epoch 0, together the
whole epoch (uneven="drop": the shards that divide evenly among the ranks); and the workers
of a torch DataLoader that iterates the pipeline in an IterableDataset split each rank's share."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("PIL.Image", reason="PIL (Debian python3-pil) is not installed")
conveyor = pytest.importorskip(
    "conveyor", reason="the conveyor module is not built (needs pybind11-dev and python3-dev) or not on PYTHONPATH"
)

from conftest import PER_SHARD, SHARDS, no_hang  # noqa: E402

LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")

# One rank of a job: its split and the keys of its share of epoch 0 (without torch: .dlpack()).
CHILD = """
import json, sys
import conveyor
source = sys.argv[1]
if source.endswith(".tar"):
    pipe = conveyor.shards(source, seed=11, threads=1)
else:
    pipe = conveyor.files(source, seed=11, threads=1)
pipe = pipe.decode(32).batch(4).keys().dlpack()
keys = [k for b in pipe for k in b.keys]
print(json.dumps({"split": list(pipe.split), "environment": list(conveyor.environment_split()), "keys": keys}))
"""


def launch(source, ranks):
    """Runs one process per environment in `ranks` (dicts of launcher variables) at once;
    returns their outputs in order."""
    base = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, source],
            env={**base, **{k: str(v) for k, v in r.items()}},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in ranks
    ]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(json.loads(out))
    return outs


def test_torchrun_ranks_read_disjoint_shares_that_make_the_whole_epoch(shard_set):
    outs = launch(shard_set.pattern, [{"RANK": r, "WORLD_SIZE": 3} for r in range(3)])
    for r, o in enumerate(outs):
        assert o["environment"] == [r, 3]
        assert o["split"] == [r, 3, 0, 1]
        assert len(o["keys"]) == 2 * PER_SHARD  # 6 shards, 2 a rank
    everything = [k for o in outs for k in o["keys"]]
    assert len(everything) == len(set(everything))
    assert sorted(everything) == sorted(shard_set.keys)


def test_slurm_ranks_drop_the_shards_that_do_not_divide_evenly(shard_set):
    outs = launch(shard_set.pattern, [{"SLURM_PROCID": r, "SLURM_NTASKS": 4} for r in range(4)])
    for r, o in enumerate(outs):
        assert o["split"] == [r, 4, 0, 1]
        assert len(o["keys"]) == PER_SHARD  # 6 shards among 4: one each, two left out
    everything = [k for o in outs for k in o["keys"]]
    assert len(everything) == len(set(everything))
    shards_read = {k.split("-")[0] for k in everything}
    assert len(shards_read) == 4  # whole shards: 4 of the 6
    assert set(everything) == {k for k in shard_set.keys if k.split("-")[0] in shards_read}


def test_files_ranks_split_the_listing(folder):
    outs = launch(str(folder), [{"RANK": r, "WORLD_SIZE": 2} for r in range(2)])
    a, b = (set(o["keys"]) for o in outs)
    assert len(a) == len(b) == 4  # 9 files among 2: 4 each, one left out (drop)
    assert not a & b


def test_a_malformed_environment_is_an_error(monkeypatch):
    for k in LAUNCHER_VARIABLES:
        monkeypatch.delenv(k, raising=False)
    assert conveyor.environment_split() == (0, 1)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(conveyor.Error, match="RANK"):
        conveyor.environment_split()
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(conveyor.Error):
        conveyor.environment_split()


def iterable(pipe, item):
    """A torch IterableDataset over `pipe` (with keys) yielding item(images, labels, keys,
    pipe.split) per batch: the pipeline iterated inside each DataLoader worker."""
    torch = pytest.importorskip("torch", reason="PyTorch (Debian python3-torch) is not installed")

    class Batches(torch.utils.data.IterableDataset):
        def __iter__(self):
            for images, labels, keys in pipe:
                yield item(images, labels, keys, pipe.split)

    return Batches()


def test_dataloader_workers_split_the_epoch(shard_set):
    torch = pytest.importorskip("torch", reason="PyTorch (Debian python3-torch) is not installed")

    # A pipeline run in this process first (a validation pass, say): the workers, forked
    # afterwards, must not depend on its threads.
    for _ in conveyor.shards(shard_set.pattern, seed=1, threads=2, rank=0, world_size=1).decode(32).batch(8):
        pass

    pipe = conveyor.shards(shard_set.pattern, seed=1, threads=2, rank=0, world_size=1).decode(32).batch(4).keys()
    loader = torch.utils.data.DataLoader(iterable(pipe, lambda *x: x), batch_size=None, num_workers=2)
    with no_hang(120, "a DataLoader epoch with 2 workers"):
        got = list(loader)
    splits = {tuple(split) for _, _, _, split in got}
    assert splits == {(0, 1, 0, 2), (0, 1, 1, 2)}
    by_worker = {w: [k for _, _, keys, (_, _, ww, _) in got if ww == w for k in keys] for w in (0, 1)}
    assert len(by_worker[0]) == len(by_worker[1]) == SHARDS * PER_SHARD // 2
    assert not set(by_worker[0]) & set(by_worker[1])
    assert sorted(by_worker[0] + by_worker[1]) == sorted(shard_set.keys)
    for images, labels, keys, _ in got:
        assert images.shape == (len(keys), 32, 32, 3)
        assert labels.tolist() == [shard_set.labels[k] for k in keys]


def test_dataloader_workers_work_after_the_parent_asked_for_len(folder):
    torch = pytest.importorskip("torch", reason="PyTorch (Debian python3-torch) is not installed")

    pipe = conveyor.files(folder, seed=1, threads=2, rank=0, world_size=1).decode(32).batch(2).keys()
    assert len(pipe) == 5  # resolves the source in this process, as a training script sizing its schedule does
    running = iter(pipe)
    next(running)  # and a run of it in progress here when the workers fork
    # timeout: the wait for each batch from a worker (a hang guard; a batch takes far less).
    keyed = iterable(pipe, lambda images, labels, keys, split: (keys, split))
    loader = torch.utils.data.DataLoader(keyed, batch_size=None, num_workers=2, timeout=60)
    got = list(loader)
    assert {tuple(split) for _, split in got} == {(0, 1, 0, 2), (0, 1, 1, 2)}
    keys = [k for ks, _ in got for k in ks]
    assert len(keys) == len(set(keys)) == 8  # 9 files among 2 workers: 4 each (drop)
    assert len(next(running)[2]) == 2  # the parent's run goes on


# A process runs a pipeline that waits for a free slab (its consumer is slow: the stage runs
# ahead until its 6 slabs are out, and waits for one to come back), then forks (as a
# DataLoader does for its workers); the child does the same. The wait's grant must complete on
# the run's own executor: on Asio's system_executor, whose process-wide pool the parent started
# and the child lacks, it never arrives. Exit status 0 when the child's epoch ends, 3 when it
# is stopped after 30 s (a hang guard; the epoch takes far less).
FORKED = """
import os, signal, sys, time
import conveyor

def epoch():
    pipe = conveyor.shards(sys.argv[1], threads=2, rank=0, world_size=1).decode(32).batch(2).dlpack()
    n = 0
    for b in pipe:
        n += len(b)
        time.sleep(0.02)  # slower than the stage: it waits for slabs
    return n

assert epoch() == 48
pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGALRM, lambda *a: os._exit(3))
    signal.alarm(30)
    os._exit(0 if epoch() == 48 else 1)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_runs_pipelines_after_the_parent_waited_for_a_slab(shard_set):
    child = subprocess.run([sys.executable, "-c", FORKED, shard_set.pattern], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, f"exit status {child.returncode} (3: the forked child hung)\n{child.stderr}"
