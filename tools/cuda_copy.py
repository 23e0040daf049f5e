#!/usr/bin/env python3
"""How far a single CUDA kernel moving a normgrad pass's bytes gets from the device's large copy.

    python3 tools/cuda_copy.py [--reps 50]

Times PyTorch's device-to-device copy (`Tensor.copy_`) over 256 MiB each way, the ceiling that
`normgrad-cli bench` also measures through OpenCL, and over the byte counts of the README table's
passes (64 MiB a bf16 tensor: a forward reads one and writes one), plus `torch.add` of two such
tensors into a third (three streams, as a frozen backward). Each figure is the median of --reps
repetitions timed by CUDA events with the L2 flushed before each, by tools/bench_torch.py's
timer (the peers' timing). Needs PyTorch with CUDA; it is a reference point for the README, not
part of the library.
"""
import argparse
import sys

import torch

from bench_torch import COPY_BYTES, MIB, Timer


def gbps(timer, fn, nbytes):
    """(us, GB/s) of fn moving nbytes."""
    ms = timer.median_ms(fn, nbytes)[0]
    return ms * 1e3, nbytes / ms / 1e6


def copy_gbps(timer, each_way):
    a = torch.ones(each_way // 2, dtype=torch.bfloat16, device="cuda")
    b = torch.empty_like(a)
    return gbps(timer, lambda: b.copy_(a), 2 * each_way)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    timer = Timer(torch, "cuda", 0.0, args.reps, args.reps)
    big_us, big = copy_gbps(timer, COPY_BYTES)
    print(f"copy 256 MiB each way: {big_us:.1f} us, {big:.0f} GB/s ({torch.cuda.get_device_name()})")
    for mb in (16, 32, 64, 96, 128, 192):
        us, g = copy_gbps(timer, mb * MIB)
        print(f"copy {mb:3d} MiB each way: {us:.1f} us, {g:.0f} GB/s = {g / big:.3f} of the large copy")
    x = torch.ones(64 * MIB // 2, dtype=torch.bfloat16, device="cuda")
    y, z = torch.ones_like(x), torch.empty_like(x)
    us, g = gbps(timer, lambda: torch.add(x, y, out=z), 3 * 64 * MIB)
    print(f"add of two 64 MiB tensors into a third: {us:.1f} us, {g:.0f} GB/s = {g / big:.3f} of the large copy")


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # piped into head: the rest is not wanted
        sys.stderr.close()
