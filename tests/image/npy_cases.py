#!/usr/bin/env python3
"""Writes .npy files with NumPy itself (np.save and np.lib.format.write_array) into OUTDIR,
and OUTDIR/manifest.json saying what each holds: the header's descr (repr of the list for
structured dtypes, as the header writes it), shape, order, version, item size and the data
bytes in hex. tests/image/npy.cpp reads them with conveyor's reader.
Usage: npy_cases.py OUTDIR. Exit 77: NumPy is missing."""
import json
import os
import sys

try:
    import numpy as np
except ImportError as e:
    print(f"skipped: {e} (Debian: python3-numpy; run with /usr/bin/python3)")
    sys.exit(77)

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(7)
cases = []


def add(name, a, version=None, fortran=None):
    path = os.path.join(out, name + ".npy")
    with open(path, "wb") as f:
        if version is None:
            np.save(f, a)
        else:
            np.lib.format.write_array(f, a, version=version)
    with open(path, "rb") as f:
        major, minor = np.lib.format.read_magic(f)
    descr = np.lib.format.dtype_to_descr(a.dtype)
    is_fortran = bool(a.flags.f_contiguous and not a.flags.c_contiguous)
    cases.append(
        {
            "file": name + ".npy",
            "descr": descr if isinstance(descr, str) else repr(descr),
            "shape": list(a.shape),
            "fortran_order": is_fortran,
            "version": [major, minor],
            "item_size": a.dtype.itemsize,
            "data": a.tobytes(order="F" if is_fortran else "C").hex(),
        }
    )


for t in ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64",
          "complex64", "complex128"]:
    dt = np.dtype(t)
    if dt.kind == "b":
        a = rng.integers(0, 2, size=(2, 3)).astype(dt)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, size=(2, 3), dtype=dt, endpoint=True)
    elif dt.kind == "c":
        a = (rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))).astype(dt)
    else:
        a = rng.standard_normal((2, 3)).astype(dt)
    add(t, a)
for t in [">i4", ">u2", ">f8", ">c16", ">f2"]:
    add("big_" + t[1:], rng.standard_normal((3, 2)).astype(t) if t[1] in "fc" else rng.integers(0, 1000, size=(3, 2)).astype(t))
add("fortran_f4", np.asfortranarray(rng.standard_normal((2, 3, 4)).astype("<f4")))
add("fortran_i8", np.asfortranarray(np.arange(6, dtype="<i8").reshape(2, 3)))
add("zero_d_f8", np.array(3.5))
add("zero_d_i8", np.array(-7, dtype="<i8"))
add("empty_f4", np.zeros((0,), dtype="<f4"))
add("empty_i2", np.zeros((3, 0, 2), dtype="<i2"))
add("v2_u1", np.arange(24, dtype=np.uint8).reshape(2, 3, 4), version=(2, 0))
add("v2_f4", rng.standard_normal((5,)).astype("<f4"), version=(2, 0))
add("bytes_s5", np.array([b"ab", b"hello", b""], dtype="S5"))
add("unicode_u3", np.array(["a", "xyz", "\u00e9"], dtype="<U3"))
add("datetime_ns", np.array(["2024-01-02T03:04:05", "1970-01-01"], dtype="datetime64[ns]"))
add("timedelta_s", np.array([1, -2, 3], dtype="timedelta64[s]"))
add("longdouble", np.array([1.5, -2.25], dtype=np.longdouble))
structured = np.zeros(3, dtype=[("x", "<f4"), ("y", "<i4", (2,))])
structured["x"] = [1, 2, 3]
structured["y"] = [[1, 2], [3, 4], [5, 6]]
add("structured", structured)
padded = np.zeros(2, dtype=np.dtype({"names": ["a", "b"], "formats": ["<u1", "<f8"], "offsets": [0, 8], "itemsize": 16}))
add("structured_padded", padded)
add("structured_v3", np.zeros(2, dtype=[("\u00e9t\u00e9", "<i2"), ("b", "|u1")]), version=(3, 0))
add("many_dims", np.zeros((1,) * 20 + (2,), dtype="<u2"))

with open(os.path.join(out, "object.npy"), "wb") as f:
    np.save(f, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)

with open(os.path.join(out, "manifest.json"), "w") as f:
    json.dump(cases, f)
print(f"{len(cases)} arrays in {out}")
