"""Fixtures of the conveyor module's tests: the datasets (made once per session in a temporary
folder), the C++ reference program, and a guard that turns a hang into a failure.

Run by ctest (test python-pipeline: Debian's /usr/bin/python3 with PYTHONPATH at the built
package, CONVEYOR_TEST_BIN at the build folder). By hand, from the source tree:

    PYTHONPATH=build/default/python /usr/bin/python3 -m pytest -q tests/python
"""

import contextlib
import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # conveyor_testdata

CLASSES = ["cat", "dog", "fish"]  # ImageFolder ids in sorted order: 0, 1, 2
SIZES = [(80, 60), (64, 96), (101, 77)]

SHARDS = 6  # divides among 1, 2 and 3 ranks
PER_SHARD = 8


class ShardSet:
    """Shards made for a test: their folder, brace pattern, paths, dataset index, labels."""

    def __init__(self, folder, shards, per_shard):
        import conveyor_testdata as td

        self.folder = str(folder)
        self.pattern, self.labels = td.make_shards(self.folder, shards, per_shard)
        self.paths = [os.path.join(self.folder, f"shard-{s:06d}.tar") for s in range(shards)]
        self.index = td.write_index(os.path.join(self.folder, "index.json"), self.paths)

    @property
    def keys(self):
        return set(self.labels)


@pytest.fixture(scope="session")
def folder(tmp_path_factory):
    """An ImageFolder of 9 JPEGs: cat/, dog/, fish/, each 0.jpg 1.jpg 2.jpg of other sizes."""
    import conveyor_testdata as td

    return td.image_folder(tmp_path_factory.mktemp("imagefolder"), CLASSES, SIZES)


@pytest.fixture(scope="session")
def shard_set(tmp_path_factory):
    """6 shards of 8 samples (48 in all: JPEG about 40 x 40 in .jpg, the label in .cls), with a
    dataset index. Tests must not change them."""
    return ShardSet(tmp_path_factory.mktemp("shards"), SHARDS, PER_SHARD)


def _reference_program():
    given = os.environ.get("CONVEYOR_TEST_REFERENCE")
    if given:
        return given
    build = os.environ.get("CONVEYOR_TEST_BIN")
    if build:
        return os.path.join(build, "tests", "python", "conveyor-python-reference")
    return None


@pytest.fixture(scope="session")
def reference_program():
    """The C++ reference pipeline (tests/python/reference_batches.cpp). Under ctest it must
    exist; run by hand without CONVEYOR_TEST_BIN or CONVEYOR_TEST_REFERENCE, the test skips."""
    path = _reference_program()
    if path is None:
        pytest.skip("set CONVEYOR_TEST_BIN (the build folder) or CONVEYOR_TEST_REFERENCE to run the C++ reference pipeline")
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not built: build the target conveyor-python-reference")
    return path


class Hung(Exception):
    pass


@contextlib.contextmanager
def no_hang(seconds, what):
    """Fails the test when the block has not finished after `seconds` (a hang guard, far
    beyond what the block needs; it measures nothing). The alarm's handler raises inside the
    block: conveyor's waits check for signals between short sleeps, so they end too."""

    def on_alarm(signum, frame):
        raise Hung(what)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except Hung:
        pytest.fail(f"{what}: still not done after {seconds} s (hung)")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def threads_and_fds():
    """(threads, open descriptors) of this process."""
    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))
