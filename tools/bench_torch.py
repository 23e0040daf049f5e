#!/usr/bin/env python3
"""PyTorch peers for `normgrad-cli bench`: the same op, shape and byte count, timed with CUDA
events (median), through autograd as users run it, eager and torch.compile.

    tools/bench_torch.py --op rmsnorm --rows 8192 --hidden 4096 --dtype bf16 [--freeze-weight]

Prints one JSON object per (impl, pass) line. Needs PyTorch with a CUDA device; says so and exits
0 where there is none (it is a benchmark peer, not a dependency)."""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", default="rmsnorm", choices=["rmsnorm", "layernorm"])
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--dtype", default="bf16", choices=["f32", "f16", "bf16"])
    ap.add_argument("--freeze-weight", action="store_true")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--impls", default="eager,compile")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print(json.dumps({"skipped": "PyTorch is not installed"}))
        return 0
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "no CUDA device"}))
        return 0
    dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    es = torch.finfo(dt).bits // 8
    R, N = a.rows, a.hidden
    dev = "cuda"
    x = torch.randn(R, N, device=dev, dtype=dt).requires_grad_(True)
    w = (1 + 0.1 * torch.randn(N, device=dev, dtype=torch.float32)).requires_grad_(not a.freeze_weight)
    b = torch.zeros(N, device=dev, dtype=torch.float32).requires_grad_(not a.freeze_weight)
    dy = torch.randn(R, N, device=dev, dtype=dt)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)

    if a.op == "rmsnorm":
        def f(x, w):
            # Llama / Hugging Face RMSNorm ("llama" casting), weight f32 as in normgrad's bench
            xf = x.float()
            r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
            return (w * (xf * r).to(x.dtype)).to(x.dtype)
        args = (x, w)
        stats = 4 * R
        params = 4 * N
        grads = 0 if a.freeze_weight else 4 * N
    else:
        def f(x, w, b):
            return torch.nn.functional.layer_norm(x.float(), (N,), w, b, 1e-6).to(x.dtype)
        args = (x, w, b)
        stats = 8 * R
        params = 8 * N
        grads = 0 if a.freeze_weight else 8 * N
    fwd_bytes = 2 * R * N * es + params + stats
    bwd_bytes = 3 * R * N * es + params + stats + grads

    def time_it(fn):
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(a.reps):
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
        ts.sort()
        return ts[len(ts) // 2]

    # copy bandwidth in the same run (bytes read + written)
    src = torch.empty(512 << 20, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    copy_ms = time_it(lambda: dst.copy_(src))
    copy_gbps = 2 * src.numel() / copy_ms / 1e6

    for impl in a.impls.split(","):
        g = f if impl == "eager" else torch.compile(f)
        inputs = [t for t in args if t.requires_grad]
        y = g(*args)
        fwd_ms = time_it(lambda: g(*args))
        y = g(*args)
        bwd_ms = time_it(lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True))
        for pass_, ms, by in (("forward", fwd_ms, fwd_bytes), ("backward", bwd_ms, bwd_bytes)):
            print(json.dumps({"impl": "torch-" + impl, "op": a.op, "pass": pass_, "rows": R,
                              "hidden": N, "dtype": a.dtype, "frozen": a.freeze_weight,
                              "bytes": by, "median_ms": ms, "gbps": by / ms / 1e6,
                              "copy_gbps": copy_gbps, "ratio": by / ms / 1e6 / copy_gbps}))
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
