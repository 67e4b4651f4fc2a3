"""Waiting for a slow pipeline: the wait for the next batch leaves the GIL to other Python
threads; Ctrl-C meanwhile (SIGINT to a process iterating it) raises KeyboardInterrupt
(conveyor's wait checks for signals between short sleeps), stops the run, and the process
exits through its own handler: no hang, no crash."""

import io
import signal
import subprocess
import sys
import threading
import time

import pytest

Image = pytest.importorskip("PIL.Image", reason="PIL (Debian python3-pil) is not installed")
conveyor = pytest.importorskip(
    "conveyor", reason="the conveyor module is not built (needs pybind11-dev and python3-dev) or not on PYTHONPATH"
)

from conveyor_testdata import write_shard  # noqa: E402

# Resampled shards never end; one compute thread decoding big noisy JPEGs at full size takes
# a while for each batch of 16, so the main thread spends its time waiting in next().
CHILD = """
import sys, time
import conveyor
pipe = conveyor.shards(sys.argv[1], resampled=True, threads=1, rank=0, world_size=1)
pipe = pipe.decode(64, crop="center", dct_scaling=False).batch(16).dlpack()
it = iter(pipe)
try:
    next(it)
    print("first batch", flush=True)
    while True:
        next(it)
except KeyboardInterrupt:
    print("interrupted", time.monotonic(), flush=True)
    it.close()
    del it, pipe
    print("closed", flush=True)
    sys.exit(42)
print("the loop ended", flush=True)
sys.exit(1)
"""


@pytest.fixture(scope="module")
def slow_shard(tmp_path_factory):
    samples = []
    for i in range(4):
        out = io.BytesIO()
        Image.effect_noise((1600, 1200), 40 + i).convert("RGB").save(out, format="JPEG", quality=90)
        samples.append((f"big-{i}", {"jpg": out.getvalue(), "cls": b"0"}))
    path = tmp_path_factory.mktemp("slow") / "big.tar"
    write_shard(str(path), samples)
    return str(path)


def test_ctrl_c_raises_keyboard_interrupt_and_the_process_exits_cleanly(slow_shard):
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, slow_shard], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = child.stdout.readline()
        assert line.strip() == "first batch", line + child.stderr.read()
        time.sleep(0.3)  # well inside the wait for the next batch
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)  # a hang guard, not a measurement
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 42, f"exit status {child.returncode}\n{out}\n{err}"
    lines = out.splitlines()
    assert lines[0].startswith("interrupted") and lines[-1] == "closed", out
    assert "Traceback" not in err and "terminate" not in err and "Fatal" not in err, err
    print(f"KeyboardInterrupt {float(lines[0].split()[1]) - sent:.3f} s after SIGINT")


def test_other_python_threads_run_while_the_loop_waits(slow_shard):
    pipe = conveyor.shards(slow_shard, resampled=True, threads=1, rank=0, world_size=1)
    pipe = pipe.decode(64, crop="center", dct_scaling=False).batch(16).dlpack()
    it = iter(pipe)
    next(it)  # started: the next batch takes the one compute thread a while (16 big decodes)
    counted = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            counted[0] += 1

    counter = threading.Thread(target=count)
    counter.start()
    try:
        time.sleep(0.05)  # the counter holds the GIL in turns from here
        before = counted[0]
        b = next(it)  # waits in C++; with the GIL held there, the counter would stand still
        during = counted[0] - before
    finally:
        stop.set()
        counter.join()
        it.close()
    assert len(b) == 16
    assert during > 1000, f"the counting thread advanced {during} times while next() waited"
