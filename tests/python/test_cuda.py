"""to_cuda(0): batches on the GPU equal the CPU batches of the same pipeline. Without a GPU
(or without CUDA in this build) these skip, saying why, and to_cuda is an error naming the
stage. The device memory is read back with torch when its CUDA works, else with the CUDA
runtime that conveyor links (Debian's torch is CPU-only)."""

import ctypes

import pytest

torch = pytest.importorskip("torch", reason="PyTorch (Debian python3-torch) is not installed")
pytest.importorskip("PIL.Image", reason="PIL (Debian python3-pil) is not installed")
conveyor = pytest.importorskip(
    "conveyor", reason="the conveyor module is not built (needs pybind11-dev and python3-dev) or not on PYTHONPATH"
)

KDLCUDA = 2


def cuda_runtime():
    """The CUDA runtime library already loaded with conveyor's module, when it has a device."""
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        count = ctypes.c_int(0)
        if lib.cudaGetDeviceCount(ctypes.byref(count)) == 0 and count.value > 0:
            return lib
        return None
    return None


def gpu_reason():
    if torch.cuda.is_available() or cuda_runtime() is not None:
        return None
    return "no GPU: torch.cuda.is_available() is False and the CUDA runtime reports no device"


def device_to_host(device_ptr, dtype, shape):
    """A CPU copy of the device memory at `device_ptr` (a DLPack export), read with cudaMemcpy."""
    lib = cuda_runtime()
    lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    out = torch.empty(shape, dtype=dtype)
    device_to_host_kind = 2  # cudaMemcpyDeviceToHost
    assert lib.cudaMemcpy(out.data_ptr(), device_ptr, out.numel() * out.element_size(), device_to_host_kind) == 0
    return out


def pipe(shard_set):
    return (
        conveyor.shards(shard_set.pattern, seed=4, threads=2, rank=0, world_size=1)
        .shuffle(8)
        .decode(32, crop="random_resized", flip=True)
        .batch(6, dtype="float16", layout="nchw", mean=conveyor.IMAGENET_MEAN, std=conveyor.IMAGENET_STD)
        .keys()
    )


def test_cuda_batches_equal_the_cpu_batches(shard_set):
    reason = gpu_reason()
    if reason:
        pytest.skip(reason)
    cpu = [(x.clone(), y.clone(), k) for x, y, k in pipe(shard_set)]
    gpu = []
    if torch.cuda.is_available():
        for x, y, k in pipe(shard_set).to_cuda(0):
            assert x.is_cuda and y.is_cuda and x.device.index == 0
            gpu.append((x.cpu(), y.cpu(), k))
    else:
        for b in pipe(shard_set).to_cuda(0).dlpack():
            assert b.images.__dlpack_device__() == (KDLCUDA, 0)
            assert b.labels.__dlpack_device__() == (KDLCUDA, 0)
            n = len(b)
            x = device_to_host(b.images.data_ptr, torch.float16, (n, 3, 32, 32))
            y = device_to_host(b.labels.data_ptr, torch.int64, (n,))
            gpu.append((x, y, list(b.keys)))
    assert len(gpu) == len(cpu) == 8
    for (cx, cy, ck), (gx, gy, gk) in zip(cpu, gpu):
        assert ck == gk
        assert torch.equal(cx, gx)
        assert torch.equal(cy, gy)


def test_to_cuda_without_a_gpu_is_an_error_naming_the_stage(shard_set):
    if gpu_reason() is None:
        pytest.skip("a GPU is here: to_cuda works")
    with pytest.raises(conveyor.Error, match="to_cuda"):
        for _ in pipe(shard_set).to_cuda(0):
            pass
