#!/usr/bin/env python3
"""Write a small RMSNorm input for normgrad-cli in safetensors form (standard library only).

    python3 tools/make_example.py [OUT]      (default: tests/data/rmsnorm_example.safetensors)

Tensors: x bf16 [8, 256], weight f32 [256], dy bf16 [8, 256]. The values come from a fixed
integer generator, so the file is byte-for-byte the same on every machine and Python version.
Try it with:

    ./build/normgrad-cli run rmsnorm --in tests/data/rmsnorm_example.safetensors --out /tmp/out.safetensors
    ./build/normgrad-cli inspect /tmp/out.safetensors
"""
import json
import math
import struct
import sys

ROWS, HIDDEN = 8, 256


class Rng:
    """64-bit LCG (Knuth's MMIX constants); the top 53 bits give a uniform in [0, 1)."""

    def __init__(self, seed):
        self.s = seed & (2**64 - 1)

    def uniform(self):
        self.s = (self.s * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
        return (self.s >> 11) / float(2**53)

    def normal(self):
        # Box-Muller; 1 - u keeps the log argument in (0, 1].
        u1, u2 = 1.0 - self.uniform(), self.uniform()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def bf16_bits(v):
    """Round an f32 value to bfloat16, nearest-even (what the kernels and PyTorch do)."""
    u = f32_bits(v)
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return (u >> 16) | 0x40
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def pack(dtype, values):
    if dtype == "F32":
        return struct.pack("<%df" % len(values), *values)
    if dtype == "BF16":
        return struct.pack("<%dH" % len(values), *(bf16_bits(v) for v in values))
    raise ValueError(dtype)


def safetensors_bytes(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, raw bytes) in file order."""
    header, data, offset = {}, b"", 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # data section starts 8-byte aligned
    return struct.pack("<Q", len(text)) + text + data


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/rmsnorm_example.safetensors"
    rng = Rng(20261121)
    x = [0.3 + 1.5 * rng.normal() for _ in range(ROWS * HIDDEN)]
    weight = [1.0 + 0.25 * rng.normal() for _ in range(HIDDEN)]
    dy = [rng.normal() for _ in range(ROWS * HIDDEN)]
    blob = safetensors_bytes(
        [("x", "BF16", (ROWS, HIDDEN), pack("BF16", x)),
         ("weight", "F32", (HIDDEN,), pack("F32", weight)),
         ("dy", "BF16", (ROWS, HIDDEN), pack("BF16", dy))],
        metadata={"producer": "tools/make_example.py", "op": "rmsnorm"})
    with open(out, "wb") as f:
        f.write(blob)
    print("wrote %s (%d bytes)" % (out, len(blob)))


if __name__ == "__main__":
    main()
