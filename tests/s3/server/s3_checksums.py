"""S3's additional checksums for the test proxy, written from the algorithms' parameters.

CRC-64/NVME (polynomial 0xad93d23594c93659, reflected, init and xorout all ones) has no
implementation in Debian 12's Python packages (python3-awscrt 0.16 predates it), so it is
computed here: blocks of 4 KiB side by side with numpy, one byte position at a time, then
combined in order (zlib's crc32_combine, by a matrix over GF(2) for 4 KiB of zeros). CRC-32C
comes from awscrt, CRC-32 from zlib, SHA from hashlib: none of them shares code with
conveyor's.
"""

import base64
import hashlib
import zlib

import numpy as np

try:
    from awscrt import checksums as _awscrt
except ImportError:  # pragma: no cover - scripts/install-deps.sh installs python3-awscrt
    _awscrt = None

POLY64 = 0x9A6C9329AC4BC9B5  # reflected
BLOCK = 4096
MASK64 = (1 << 64) - 1


def _table64():
    t = []
    for i in range(256):
        v = i
        for _ in range(8):
            v = (v >> 1) ^ POLY64 if v & 1 else v >> 1
        t.append(v)
    return t


_T = _table64()
_T_NP = np.array(_T, dtype=np.uint64)


def _register(data, r):
    """The reflected register after `data`, byte by byte (for short inputs)."""
    for b in data:
        r = _T[(r ^ b) & 0xFF] ^ (r >> 8)
    return r


def _zeros_operator(nbytes):
    """The register's image after `nbytes` zero bytes, as 8 tables of 256 (linear map)."""
    cols = []
    for bit in range(64):
        cols.append(_register(bytes(nbytes), 1 << bit))
    tables = []
    for k in range(8):
        tab = []
        for v in range(256):
            acc = 0
            for j in range(8):
                if v >> j & 1:
                    acc ^= cols[8 * k + j]
            tab.append(acc)
        tables.append(tab)
    return tables


_SHIFT_BLOCK = _zeros_operator(BLOCK)


def _apply(tables, r):
    out = 0
    for k in range(8):
        out ^= tables[k][(r >> (8 * k)) & 0xFF]
    return out


def crc64nvme(data):
    """CRC-64/NVME of `data` (bytes-like) as an int."""
    data = bytes(data)
    n = len(data) // BLOCK
    r = MASK64
    if n:
        blocks = np.frombuffer(data, dtype=np.uint8, count=n * BLOCK).reshape(n, BLOCK)
        regs = np.zeros(n, dtype=np.uint64)  # each block's register from 0
        eight = np.uint64(8)
        for i in range(BLOCK):
            regs = _T_NP[(regs ^ blocks[:, i]) & np.uint64(0xFF)] ^ (regs >> eight)
        # register(a ++ b) = shift(register(a), len b) ^ register_from_0(b): linear in the start.
        for reg in regs.tolist():
            r = _apply(_SHIFT_BLOCK, r) ^ reg
    r = _register(data[n * BLOCK:], r)
    return r ^ MASK64


def crc32c(data):
    if _awscrt is None:
        raise RuntimeError("python3-awscrt is needed for CRC32C")
    return _awscrt.crc32c(bytes(data))


def crc32(data):
    return zlib.crc32(bytes(data))


ALGORITHMS = ("crc64nvme", "crc32c", "crc32", "sha1", "sha256")
CRC_PARAMS = {"crc64nvme": (64, POLY64), "crc32c": (32, 0x82F63B78), "crc32": (32, 0xEDB88320)}


def crc_value(algorithm, data):
    """The CRC `algorithm` of `data` as an int."""
    return {"crc64nvme": crc64nvme, "crc32c": crc32c, "crc32": crc32}[algorithm](data)


def crc_combine(algorithm, crc_a, crc_b, len_b):
    """CRC(a ++ b) from CRC(a), CRC(b) and len(b): CRC(a) * x^(8 len_b) mod P, xor CRC(b)
    (reflected polynomials; the top bit is x^0)."""
    width, poly = CRC_PARAMS[algorithm]
    top = 1 << (width - 1)

    def multiply(a, b):
        p = 0
        m = top
        while m:
            if a & m:
                p ^= b
            b = (b >> 1) ^ poly if b & 1 else b >> 1
            m >>= 1
        return p

    power, base, n = top, top >> 8, len_b
    while n:
        if n & 1:
            power = multiply(power, base)
        base = multiply(base, base)
        n >>= 1
    return multiply(power, crc_a) ^ crc_b


def crc_base64(algorithm, value):
    return base64.b64encode(value.to_bytes(CRC_PARAMS[algorithm][0] // 8, "big")).decode("ascii")


def digest(algorithm, data):
    """The base64 of the checksum `algorithm` (S3's lower-case header suffix) of `data`."""
    if algorithm == "crc64nvme":
        raw = crc64nvme(data).to_bytes(8, "big")
    elif algorithm == "crc32c":
        raw = crc32c(data).to_bytes(4, "big")
    elif algorithm == "crc32":
        raw = crc32(data).to_bytes(4, "big")
    elif algorithm == "sha1":
        raw = hashlib.sha1(data).digest()
    elif algorithm == "sha256":
        raw = hashlib.sha256(data).digest()
    else:
        raise ValueError("unknown checksum algorithm %r" % algorithm)
    return base64.b64encode(raw).decode("ascii")


if __name__ == "__main__":  # self-check against the published check value
    assert crc64nvme(b"123456789") == 0xAE8B14860A799888
    import os
    blob = os.urandom(3 * BLOCK + 123)
    assert crc64nvme(blob) == _register(blob, MASK64) ^ MASK64
    for alg in CRC_PARAMS:
        a, b = blob[:5000], blob[5000:]
        assert crc_combine(alg, crc_value(alg, a), crc_value(alg, b), len(b)) == crc_value(alg, blob)
    print("ok")
