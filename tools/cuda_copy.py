#!/usr/bin/env python3
"""How far a single CUDA kernel moving a normgrad pass's bytes gets from the device's large copy.

    python3 tools/cuda_copy.py [--reps 50]

Times PyTorch's device-to-device copy (`Tensor.copy_`) over 256 MiB each way, the ceiling that
`normgrad-cli bench` also measures through OpenCL, and over the byte counts of the README table's
passes (64 MiB a bf16 tensor: a forward reads one and writes one), plus `torch.add` of two such
tensors into a third (three streams, as a frozen backward). Each figure is the median of --reps
runs timed by CUDA events, after five untimed ones. Needs PyTorch with CUDA; it is a reference
point for the README, not part of the library.
"""
import argparse
import sys

import torch

MIB = 1 << 20


def timed(fn, reps):
    for _ in range(5):
        fn()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1000.0)  # us
    ts.sort()
    return ts[len(ts) // 2]


def copy_gbps(nbytes, reps):
    a = torch.ones(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    b = torch.empty_like(a)
    us = timed(lambda: b.copy_(a), reps)
    return us, 2 * nbytes / us / 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    big_us, big = copy_gbps(256 * MIB, args.reps)
    print(f"copy 256 MiB each way: {big_us:.1f} us, {big:.0f} GB/s ({torch.cuda.get_device_name()})")
    for mb in (16, 32, 64, 96, 128, 192):
        us, g = copy_gbps(mb * MIB, args.reps)
        print(f"copy {mb:3d} MiB each way: {us:.1f} us, {g:.0f} GB/s = {g / big:.3f} of the large copy")
    x = torch.ones(64 * MIB // 2, dtype=torch.bfloat16, device="cuda")
    y, z = torch.ones_like(x), torch.empty_like(x)
    us = timed(lambda: torch.add(x, y, out=z), args.reps)
    g = 3 * 64 * MIB / us / 1e3
    print(f"add of two 64 MiB tensors into a third: {us:.1f} us, {g:.0f} GB/s = {g / big:.3f} of the large copy")


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # piped into head: the rest is not wanted
        sys.stderr.close()
