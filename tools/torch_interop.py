#!/usr/bin/env python3
"""Round trip with PyTorch: save a layer's tensors with `safetensors`, run `normgrad-cli run`,
and compare its outputs and gradients with PyTorch autograd (computed in float64 from the same
rounded inputs).

    tools/torch_interop.py [--cli build/normgrad-cli] [--ops rmsnorm,layernorm,...] [--dtype bf16]

Needs torch and safetensors; where they are missing it says so and exits 0 (they are not
dependencies of normgrad). Exit 1 when a comparison fails."""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default="build/normgrad-cli")
    ap.add_argument("--ops", default="rmsnorm,fused-add-rmsnorm,layernorm,groupnorm,polynorm,flce")
    ap.add_argument("--dtype", default="bf16", choices=["f32", "f16", "bf16"])
    ap.add_argument("--device", default=None, help="normgrad device selection")
    a = ap.parse_args()
    try:
        import torch
        from safetensors.torch import load_file, save_file
    except ImportError as e:
        print(f"torch_interop: skipped, {e.name} is not installed")
        return 0
    torch.manual_seed(0)
    dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    # tolerance on max|got − ref| / max|ref|: one or two units of the storage dtype
    tol = {"f32": 1e-4, "f16": 4e-3, "bf16": 3e-2}[a.dtype]
    R, N = 64, 1000  # N not a multiple of the vector width
    failures = 0

    def rnd(*shape, scale=1.0, dtype=dt, mean=0.0):
        return (mean + scale * torch.randn(*shape, dtype=torch.float64)).to(dtype)

    def run(op, tensors, opts, want):
        nonlocal failures
        with tempfile.TemporaryDirectory() as d:
            fin, fout = os.path.join(d, "in.safetensors"), os.path.join(d, "out.safetensors")
            save_file({k: v.contiguous() for k, v in tensors.items()}, fin)
            cmd = [a.cli, "run", op, "--in", fin, "--out", fout] + opts
            if a.device:
                cmd += ["--device", a.device]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                print(f"{op}: normgrad-cli failed ({p.returncode}): {p.stderr.strip()}")
                failures += 1
                return
            got = load_file(fout)
        for name, ref in want.items():
            if name not in got:
                print(f"{op}: output {name} missing")
                failures += 1
                continue
            g, r = got[name].double(), ref.double()
            err = ((g - r).abs().max() / r.abs().max().clamp_min(1e-30)).item()
            ok = err <= tol
            failures += not ok
            print(json.dumps({"op": op, "tensor": name, "dtype": a.dtype, "rel_max_err": err,
                              "ok": ok}))

    def grads(f, inputs, dy):
        xs = [t.double().requires_grad_(True) for t in inputs]
        y = f(*xs)
        if isinstance(y, tuple):
            outs, dys = y, dy
        else:
            outs, dys = (y,), (dy,)
        g = torch.autograd.grad(outs, xs, [d.double() for d in dys])
        return [o.detach() for o in outs], g

    ops = a.ops.split(",")
    eps = 1e-6
    if "rmsnorm" in ops:
        x, w, dy = rnd(R, N), rnd(N, scale=0.2, mean=1.0, dtype=torch.float32), rnd(R, N)
        f = lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
        (y,), (dx, dw) = grads(f, [x, w], dy)
        run("rmsnorm", {"x": x, "weight": w, "dy": dy}, ["--casting-mode", "gemma"],
            {"y": y, "dx": dx, "dweight": dw})
    if "fused-add-rmsnorm" in ops:
        x, res, dy = rnd(R, N), rnd(R, N), rnd(R, N)
        w = rnd(N, scale=0.2, mean=1.0, dtype=torch.float32)
        s_ref = (x.float() + res.float()).to(dt)  # s is stored rounded, as the spec says
        f = lambda s, w: s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps) * w
        (y,), (ds, dw) = grads(f, [s_ref, w], dy)
        run("fused-add-rmsnorm", {"x": x, "residual": res, "weight": w, "dy": dy},
            ["--casting-mode", "gemma"], {"y": y, "s": s_ref, "dx": ds, "dweight": dw})
    if "layernorm" in ops:
        x, dy = rnd(R, N, mean=0.5), rnd(R, N)
        w, b = rnd(N, scale=0.2, mean=1.0, dtype=torch.float32), rnd(N, scale=0.1, dtype=torch.float32)
        f = lambda x, w, b: torch.nn.functional.layer_norm(x, (N,), w, b, eps)
        (y,), (dx, dw, db) = grads(f, [x, w, b], dy)
        run("layernorm", {"x": x, "weight": w, "bias": b, "dy": dy}, ["--eps", str(eps)],
            {"y": y, "dx": dx, "dweight": dw, "dbias": db})
    if "groupnorm" in ops:
        B, C, H, W, G = 3, 12, 7, 9, 4
        x, dy = rnd(B, C, H, W, mean=0.3), rnd(B, C, H, W)
        w, b = rnd(C, scale=0.2, mean=1.0, dtype=torch.float32), rnd(C, scale=0.1, dtype=torch.float32)
        f = lambda x, w, b: torch.nn.functional.group_norm(x, G, w, b, eps)
        (y,), (dx, dw, db) = grads(f, [x, w, b], dy)
        run("groupnorm", {"x": x, "weight": w, "bias": b, "dy": dy},
            ["--groups", str(G), "--eps", str(eps)], {"y": y, "dx": dx, "dweight": dw, "dbias": db})
    if "polynorm" in ops:
        x, dy = rnd(R, N, scale=0.7), rnd(R, N)
        w, b = rnd(3, scale=0.3, mean=0.5, dtype=torch.float32), rnd(1, scale=0.1, dtype=torch.float32)

        def f(x, w, b):
            def nrm(u):
                return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps)
            return w[0] * nrm(x ** 3) + w[1] * nrm(x ** 2) + w[2] * nrm(x) + b
        (y,), (dx, dw, db) = grads(f, [x, w, b], dy)
        run("polynorm", {"x": x, "weight": w, "bias": b, "dy": dy}, ["--eps", str(eps)],
            {"y": y, "dx": dx, "dweight": dw, "dbias": db})
    if "flce" in ops:
        BT, H, V = 37, 64, 301
        inp = rnd(BT, H)
        wt = rnd(V, H, scale=0.1, dtype=torch.float32)
        bias = rnd(V, scale=0.1, dtype=torch.float32)
        tgt = torch.randint(0, V, (BT,), dtype=torch.int64)
        tgt[3] = -100

        def f(i, w, b):
            return torch.nn.functional.cross_entropy(i @ w.t() + b, tgt, ignore_index=-100,
                                                     label_smoothing=0.1)
        xs = [inp.double().requires_grad_(True), wt.double().requires_grad_(True),
              bias.double().requires_grad_(True)]
        loss = f(*xs)
        di, dw, db = torch.autograd.grad(loss, xs)
        run("flce", {"input": inp, "weight": wt, "target": tgt, "bias": bias},
            ["--label-smoothing", "0.1"],
            {"loss": loss.detach().reshape(-1), "dinput": di, "dweight": dw, "dbias": db})
    print(f"torch_interop: {'all comparisons passed' if not failures else f'{failures} failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
