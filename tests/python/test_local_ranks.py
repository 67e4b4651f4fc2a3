"""Ranks on one node: with several ranks of a job on a node (LOCAL_WORLD_SIZE from torchrun,
Slurm's tasks per node, Open MPI's local size, or torch's GPU count where only LOCAL_RANK is
set), threads=0 is this rank's share of the usable cores, not all of them; a malformed count
is an error that names its variable."""

import sys

import pytest

conveyor = pytest.importorskip(
    "conveyor", reason="the conveyor module is not built (needs pybind11-dev and python3-dev) or not on PYTHONPATH"
)
from conveyor import _conveyor  # noqa: E402

NODE_VARIABLES = (
    "LOCAL_WORLD_SIZE",
    "LOCAL_RANK",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_NODEID",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
)


@pytest.fixture
def no_launcher(monkeypatch):
    for k in NODE_VARIABLES:
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


def all_cores():
    """The compute threads of a runtime with threads=0 and no launcher: every usable core."""
    return _conveyor.Runtime(threads=0).threads


def test_the_ranks_on_the_node_come_from_the_launchers_variables(no_launcher):
    assert _conveyor.local_ranks() == 1
    assert _conveyor.local_ranks(devices=4) == 1  # the devices count only under LOCAL_RANK
    no_launcher.setenv("SLURM_TASKS_PER_NODE", "2(x3),1")
    assert _conveyor.local_ranks() == 2
    no_launcher.setenv("SLURM_NODEID", "3")
    assert _conveyor.local_ranks() == 1
    no_launcher.setenv("SLURM_NTASKS_PER_NODE", "4")
    assert _conveyor.local_ranks() == 4
    no_launcher.setenv("LOCAL_WORLD_SIZE", "8")
    assert _conveyor.local_ranks() == 8
    for k in NODE_VARIABLES:
        no_launcher.delenv(k, raising=False)
    no_launcher.setenv("LOCAL_RANK", "0")
    assert _conveyor.local_ranks(devices=4) == 4
    assert _conveyor.local_ranks() == 1


def test_threads_0_is_this_ranks_share_of_the_cores(no_launcher):
    cores = all_cores()
    no_launcher.setenv("LOCAL_WORLD_SIZE", "2")
    assert _conveyor.Runtime(threads=0).threads == max(cores // 2, 1)
    assert _conveyor.Runtime(threads=3).threads == 3  # asked for: taken as given
    no_launcher.setenv("LOCAL_WORLD_SIZE", str(4 * cores + 1))
    assert _conveyor.Runtime(threads=0).threads == 1


def test_a_malformed_count_is_an_error_naming_the_variable(no_launcher, folder):
    no_launcher.setenv("LOCAL_WORLD_SIZE", "eight")
    with pytest.raises(conveyor.Error, match='LOCAL_WORLD_SIZE="eight" is not a whole number'):
        _conveyor.local_ranks()
    pipe = conveyor.files(str(folder), threads=0, rank=0, world_size=1).decode(16).batch(2).dlpack()
    with pytest.raises(conveyor.Error, match="LOCAL_WORLD_SIZE"):
        len(pipe)
    assert len(conveyor.files(str(folder), threads=2, rank=0, world_size=1).decode(16).batch(2).dlpack()) > 0
    no_launcher.delenv("LOCAL_WORLD_SIZE")
    no_launcher.setenv("SLURM_NTASKS_PER_NODE", "2(x")
    with pytest.raises(conveyor.Error, match=r"SLURM_NTASKS_PER_NODE=\"2\(x\" is not a count of tasks per node"):
        _conveyor.Runtime(threads=0)


def test_under_local_rank_alone_a_pipeline_counts_the_ranks_by_torchs_gpus(no_launcher, folder):
    torch = pytest.importorskip("torch", reason="PyTorch (Debian python3-torch) is not installed")
    assert sys.modules.get("torch") is torch
    cores = all_cores()
    asked = []

    def device_count():
        asked.append(True)
        return 2

    no_launcher.setattr(torch.cuda, "device_count", device_count)

    def resolved_threads(threads):
        pipe = conveyor.files(str(folder), threads=threads, rank=0, world_size=1).decode(16).batch(2).dlpack()
        len(pipe)  # resolves the source, and makes the pipeline's runtime
        return pipe._runtime.threads

    assert resolved_threads(0) == cores and not asked  # no launcher: torch is not asked
    no_launcher.setenv("LOCAL_RANK", "1")
    assert resolved_threads(0) == max(cores // 2, 1) and asked
    asked.clear()
    assert resolved_threads(3) == 3 and not asked
    no_launcher.setenv("LOCAL_WORLD_SIZE", "4")
    assert resolved_threads(0) == max(cores // 4, 1) and not asked
