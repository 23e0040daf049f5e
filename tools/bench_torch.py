#!/usr/bin/env python3
"""Benchmark peers for `normgrad-cli bench`: the same op, shape and byte count, run through
autograd as users run it, by PyTorch eager, torch.compile and Liger-Kernel's Triton kernels.

    tools/bench_torch.py --op rmsnorm --rows 8192 --hidden 4096 --dtype bf16 \
        [--freeze-weight] [--freeze-bias] [--with-frozen weight|all|weight,all] \
        [--device cuda|cpu] \
        [--impls eager,compile,liger] [--pass forward,backward,both] [--liger-path DIR]

Ops: rmsnorm, fused-add-rmsnorm, layernorm, groupnorm (rows = channels, hidden = spatial size,
--batch samples, default 1, groups as the CLI picks them), polynorm, flce (--vocab). Prints one
JSON object per (impl, pass, frozen setting) with the fields of `normgrad-cli bench --json`:
impl, op, pass, rows, hidden, dtype, frozen, frozen_bias, bytes, median_ms, min_ms, max_ms, reps,
gbps, copy_gbps, ratio, device (plus the torch and liger versions; groupnorm's batch and
groups). `bytes` is counted exactly as the CLI counts it for the same op, pass and frozen flags
(every input read once, every output written once; weights counted as f32, as the CLI's are), so
GB/s compare. An impl that cannot run here
prints a `skipped` line saying why; one that fails prints an `error` line; neither stops the
others. Exit status: 0 when every impl ran or was skipped, 1 when any printed an error, 2 on bad
usage.

Passes: `forward` (timed alone, with autograd recording, as in training), `backward` (timed
alone, over the graph of one forward with retain_graph; grads of the inputs and, unless frozen,
of weight/bias), `both` (one forward plus its backward, timed together; bytes = forward's +
backward's). --with-frozen runs the backward passes again with the weight (all: and the bias)
frozen, in the same process; weight,all runs them with each. For `flce` the CLI's "backward" is
the fused pass that also computes the loss, so the peers' flce `backward` times
forward+backward together (and `forward` is the loss with no gradient wanted); its peers' weight
is in the activation dtype by default (a bf16 GEMM, as in training; the bytes still count it as
the CLI's f32 weight), plus `tflops`.

Timing: on cuda, CUDA events around each repetition, L2 flushed (256 MiB written) before each;
on cpu, time.perf_counter wall clock with torch using every core, caches flushed (128 MiB
written) before each repetition whose working set is under 64 MiB, as the CLI does. The median
is reported. The copy bandwidth (256 MiB tensor copy, read + written) is measured on the same
device in the same run.

Liger-Kernel: imported from PYTHONPATH or --liger-path DIR (an unpacked wheel; pure-python
helpers it needs, e.g. `packaging`, may sit in DIR/_deps and are used only when missing). Its
autograd Function classes from liger_kernel.ops.<module> (the default Triton implementation) are
called directly, frozen parameters with requires_grad=False. PyTorch, Triton and Liger are peers,
not dependencies: a missing one gives `skipped` lines, not a failure."""
import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback

OPS = ["rmsnorm", "fused-add-rmsnorm", "layernorm", "groupnorm", "polynorm", "flce"]
NORM_OPS = OPS[:-1]
DTYPE_SIZE = {"f32": 4, "f16": 2, "bf16": 2}
# Liger's autograd Function for each op: (module under liger_kernel.ops, class name).
LIGER_FUNCS = {
    "rmsnorm": ("rms_norm", "LigerRMSNormFunction"),
    "fused-add-rmsnorm": ("fused_add_rms_norm", "LigerFusedAddRMSNormFunction"),
    "layernorm": ("layer_norm", "LigerLayerNormFunction"),
    "groupnorm": ("group_norm", "LigerGroupNormFunction"),
    "polynorm": ("poly_norm", "LigerPolyNormFunction"),
    "flce": ("fused_linear_cross_entropy", "LigerFusedLinearCrossEntropyFunction"),
}
MIB = 1 << 20
COPY_BYTES = 256 * MIB
FLUSH_BELOW = 64 * MIB


def emit(obj):
    print(json.dumps(obj))
    sys.stdout.flush()


def groups_of(a):
    """GroupNorm groups as the CLI's bench chooses them (rows = channels)."""
    if a.groups:
        return a.groups
    return 32 if a.rows % 32 == 0 else 1


def byte_counts(a):
    """(forward, backward) bytes exactly as tools/cli/op_<op>.c counts them."""
    R, N = a.rows, a.hidden
    x = a.batch * R * N * DTYPE_SIZE[a.dtype]
    ws = 4  # the CLI's weights and biases are f32; counted so even where a peer's are not
    fw, fb = a.freeze_weight, a.freeze_bias
    if a.op == "rmsnorm":
        w, r = ws * N, 4 * R
        return x + w + x + r, x + x + w + r + x + (0 if fw else w)
    if a.op == "fused-add-rmsnorm":
        w, r = ws * N, 4 * R
        # forward: x + residual + weight in, y + s + rstd out; backward: dy + ds_out + s +
        # weight + rstd in, one dx (= dresidual) out
        return 4 * x + w + r, 4 * x + w + r + (0 if fw else w)
    if a.op == "layernorm":
        w, r = ws * N, 4 * R
        return 2 * x + 2 * w + 2 * r, 3 * x + w + 2 * r + (0 if fw else w) + (0 if fb else w)
    if a.op == "groupnorm":
        w, st = ws * R, 8 * a.batch * groups_of(a)  # rows = channels, hidden = spatial size
        return 2 * x + 2 * w + st, 3 * x + w + st + (0 if fw else w) + (0 if fb else w)
    if a.op == "polynorm":
        r = 12 * R
        w, b = 3 * ws, ws  # w[3], scalar b
        return 2 * x + w + b + r, 3 * x + w + r + (0 if fw else w) + (0 if fb else b)
    # flce: input, weight [V, H], i32 target, bias [V], scalar mean loss
    V = a.vocab
    w, tgt, bias, loss = ws * V * N, 4 * R, ws * V, 4
    fwd = x + w + tgt + bias + loss
    return fwd, fwd + x + (0 if fw else w) + (0 if fb else bias)


def device_name(torch, dev):
    if dev == "cuda":
        return torch.cuda.get_device_name()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return "CPU: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU: " + (platform.processor() or platform.machine())


class Timer:
    """Median time of a callable on one device, flushing caches between repetitions."""

    def __init__(self, torch, dev, budget_s, min_reps, max_reps):
        self.torch, self.dev = torch, dev
        self.budget_s, self.min_reps, self.max_reps = budget_s, min_reps, max_reps
        self.flush = torch.empty((256 if dev == "cuda" else 128) * MIB, dtype=torch.uint8,
                                 device=dev)

    def sync(self):
        if self.dev == "cuda":
            self.torch.cuda.synchronize()

    def once(self, fn, flush, rep):
        if flush:
            self.flush.fill_(rep & 0xFF)
        if self.dev == "cuda":
            s = self.torch.cuda.Event(enable_timing=True)
            e = self.torch.cuda.Event(enable_timing=True)
            self.sync()
            s.record()
            fn()
            e.record()
            self.sync()
            return s.elapsed_time(e)
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3

    def once_wall(self, fn, flush, rep):
        t0 = time.perf_counter()
        self.once(fn, flush, rep)
        return time.perf_counter() - t0

    def median_ms(self, fn, nbytes, warmup=3):
        # GPUs are flushed always (cheap and untimed); CPUs like the CLI: only small sets.
        flush = self.dev == "cuda" or nbytes < FLUSH_BELOW
        # the fastest warm-up run estimates a repetition (the first ones pay for lazy set-up)
        per_rep = min(self.once_wall(fn, flush, r) for r in range(warmup))
        reps = int(self.budget_s / per_rep) if per_rep > 0 else self.max_reps
        reps = max(self.min_reps, min(self.max_reps, reps))
        ts = [self.once(fn, flush, warmup + r) for r in range(reps)]
        return statistics.median(ts), reps, min(ts), max(ts)


class Case:
    """One op's tensors and the functions each impl runs on them."""

    def __init__(self, torch, a, dev):
        self.torch, self.a, self.dev = torch, a, dev
        F = torch.nn.functional
        dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
        wdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[a.weight_dtype]
        self.dt, self.wdt = dt, wdt
        R, N, eps = a.rows, a.hidden, a.eps
        g = torch.Generator(device="cpu").manual_seed(1234)

        def rnd(*shape, dtype=dt, mean=0.0, std=1.0):
            return (mean + std * torch.randn(shape, generator=g)).to(dtype).to(dev)

        train_w, train_b = not a.freeze_weight, not a.freeze_bias
        self.note = None
        if a.op == "groupnorm":
            G = groups_of(a)
            if R % G:
                raise ValueError(f"groupnorm: --groups {G} does not divide --rows {R} (channels)")
            self.x = rnd(a.batch, R, N).requires_grad_(True)
            self.dy = rnd(a.batch, R, N)
            self.w = rnd(R, dtype=wdt, mean=1.0, std=0.2).requires_grad_(train_w)
            self.b = rnd(R, dtype=wdt, std=0.2).requires_grad_(train_b)
        elif a.op == "polynorm":
            self.x = rnd(R, N).requires_grad_(True)
            self.dy = rnd(R, N)
            self.w = rnd(3, dtype=wdt, mean=0.33, std=0.05).requires_grad_(train_w)
            # a 0-d bias, as Liger's PolyNorm wants (its dB has shape [])
            self.b = rnd(dtype=wdt, std=0.1).requires_grad_(train_b)
        elif a.op == "flce":
            V = a.vocab
            self.x = (rnd(R, N, std=0.5)).requires_grad_(True)
            self.w = rnd(V, N, dtype=wdt, std=1.0 / N ** 0.5).requires_grad_(train_w)
            self.b = rnd(V, dtype=wdt, std=0.1).requires_grad_(train_b)
            self.target = torch.randint(0, V, (R,), generator=g).to(dev)
        else:
            self.x = rnd(R, N).requires_grad_(True)
            self.dy = rnd(R, N)
            self.w = rnd(N, dtype=wdt, mean=1.0, std=0.2).requires_grad_(train_w)
            self.b = rnd(N, dtype=wdt, std=0.2).requires_grad_(train_b)
            if a.op == "fused-add-rmsnorm":
                self.res = rnd(R, N).requires_grad_(True)
                self.ds = rnd(R, N)

        op = a.op
        if op == "rmsnorm":
            def f(x, w):
                # Hugging Face Llama RMSNorm ("llama" casting): rstd in f32, xhat rounded to
                # x's dtype, then scaled by the (f32) weight and stored in x's dtype
                xf = x.float()
                r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
                return (w * (xf * r).to(x.dtype)).to(x.dtype)
            self.args, self.eager = (self.x, self.w), f
        elif op == "fused-add-rmsnorm":
            def f(x, res, w):
                s = x + res
                sf = s.float()
                r = torch.rsqrt(sf.pow(2).mean(-1, keepdim=True) + eps)
                return (w * (sf * r).to(s.dtype)).to(s.dtype), s
            self.args, self.eager = (self.x, self.res, self.w), f
        elif op == "layernorm":
            def f(x, w, b):
                return F.layer_norm(x, (N,), w, b, eps)
            self.args, self.eager = (self.x, self.w, self.b), f
        elif op == "groupnorm":
            G = groups_of(a)
            def f(x, w, b):
                return F.group_norm(x, G, w, b, eps)
            self.args, self.eager = (self.x, self.w, self.b), f
        elif op == "polynorm":
            def f(x, w, b):
                # PolyNorm as in Liger / Motif, all in f32
                xf = x.float()
                y = b.float()
                for i, p in enumerate((3, 2, 1)):
                    u = xf ** p
                    y = y + w[i].float() * u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps)
                return y.to(x.dtype)
            self.args, self.eager = (self.x, self.w, self.b), f
        else:
            def f(x, w, b, target):
                # logits upcast to f32 before the loss, as Hugging Face causal-LM losses do
                z = F.linear(x.to(w.dtype), w, b)
                return F.cross_entropy(z.float(), target)
            self.args, self.eager = (self.x, self.w, self.b, self.target), f
        # PyTorch builds without mixed-dtype norms get the weights cast inside the graph (N
        # elements: no effect on the traffic), said in a `note` field.
        if op in ("layernorm", "groupnorm") and wdt != dt:
            try:
                with torch.no_grad():
                    self.eager(*self.args)
            except RuntimeError:
                inner = self.eager
                self.eager = lambda x, w, b: inner(x, w.to(x.dtype), b.to(x.dtype))
                self.note = "weight and bias cast to the activation dtype inside the graph"

    @property
    def detached(self):
        return tuple(t.detach() for t in self.args)

    def grad_inputs(self):
        return [t for t in self.args if getattr(t, "requires_grad", False)]

    def grads(self):
        if self.a.op == "fused-add-rmsnorm":
            return (self.dy, self.ds)
        if self.a.op == "flce":
            return None
        return self.dy

    def liger_fn(self, cls):
        """Liger's Function as a callable over this case's argument tuple."""
        a, eps = self.a, self.a.eps
        if a.op == "rmsnorm":
            # offset 0, llama casting, in_place=False: dY must survive repeated backwards
            return lambda x, w: cls.apply(x, w, eps, 0.0, "llama", False)
        if a.op == "fused-add-rmsnorm":
            return lambda x, res, w: cls.apply(x, res, w, eps, 0.0, "llama", False)
        if a.op == "layernorm":
            return lambda x, w, b: cls.apply(x, w, b, eps)
        if a.op == "groupnorm":
            return lambda x, w, b: cls.apply(x, w, b, a.rows, groups_of(a), eps)
        if a.op == "polynorm":
            return lambda x, w, b: cls.apply(x, w, b, eps, False)

        def flce(x, w, b, target):
            out = cls.apply(x if x.dtype == w.dtype else x.to(w.dtype), w, target, b)
            return out[0] if isinstance(out, tuple) else out  # newer versions return a tuple
        return flce


def import_liger(a):
    """(module loader, version) or (None, reason)."""
    if a.liger_path:
        sys.path.insert(0, os.path.abspath(a.liger_path))
    try:
        import importlib.util
        spec = importlib.util.find_spec("liger_kernel")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        where = f" in {a.liger_path}" if a.liger_path else " (give --liger-path DIR or PYTHONPATH)"
        return None, "Liger-Kernel is not importable" + where
    # pure-python helpers shipped beside an unpacked wheel (e.g. `packaging`), used only when
    # the machine lacks them
    root = os.path.dirname(os.path.dirname(spec.origin))
    deps = os.path.join(root, "_deps")
    if os.path.isdir(deps):
        sys.path.append(deps)
    try:
        import triton  # noqa: F401
    except ImportError as e:
        return None, f"Triton is not importable ({e})"
    try:
        from importlib.metadata import version
        ver = version("liger-kernel")
    except Exception:  # noqa: BLE001 - an unpacked tree may lack its metadata
        ver = "unknown"
    import importlib

    def load(op):
        mod, name = LIGER_FUNCS[op]
        try:
            m = importlib.import_module("liger_kernel.ops." + mod)
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith("liger_kernel"):
                return None, f"Liger-Kernel {ver} has no {op} kernel (no liger_kernel.ops.{mod})"
            raise
        cls = getattr(m, name, None)
        if cls is None:
            return None, f"Liger-Kernel {ver} has no {name} in liger_kernel.ops.{mod}"
        return cls, None
    return load, ver


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--op", default="rmsnorm", choices=OPS)
    ap.add_argument("--rows", type=int, default=8192, help="rows (groupnorm: channels)")
    ap.add_argument("--hidden", type=int, default=4096, help="N (groupnorm: spatial size)")
    ap.add_argument("--dtype", default="bf16", choices=list(DTYPE_SIZE))
    ap.add_argument("--weight-dtype", choices=list(DTYPE_SIZE),
                    help="default f32 (as the CLI's bench); flce: the activation dtype")
    ap.add_argument("--freeze-weight", action="store_true")
    ap.add_argument("--freeze-bias", action="store_true")
    ap.add_argument("--with-frozen", default="",
                    help="also run the backward passes with the weight (all: and bias) frozen; "
                         "a comma list runs each (weight,all)")
    ap.add_argument("--groups", type=int, default=0, help="groupnorm groups (default as the CLI)")
    ap.add_argument("--batch", type=int, default=1,
                    help="groupnorm samples: x = [batch, rows, hidden] (as the CLI's --batch)")
    ap.add_argument("--vocab", type=int, default=32000, help="flce vocabulary size")
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--pass", dest="passes", default="forward,backward",
                    help="comma list of forward, backward, both (or 'all')")
    ap.add_argument("--impls", default="eager,compile,liger")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--liger-path", help="directory holding liger_kernel/ (an unpacked wheel)")
    ap.add_argument("--threads", type=int, default=0, help="cpu: torch threads (default: all)")
    ap.add_argument("--budget-s", type=float, default=1.0, help="rough time per timed pass")
    ap.add_argument("--reps", type=int, default=0,
                    help="most repetitions (default 200 cuda, 50 cpu)")
    a = ap.parse_args()
    with_frozen = [f for f in a.with_frozen.split(",") if f]
    for f in with_frozen:
        if f not in ("weight", "all"):
            ap.error(f"--with-frozen takes weight, all or both as a comma list, not '{f}'")
    a.weight_dtype = a.weight_dtype or (a.dtype if a.op == "flce" else "f32")
    passes = ["forward", "backward", "both"] if a.passes == "all" else a.passes.split(",")
    for p in passes:
        if p not in ("forward", "backward", "both"):
            ap.error(f"unknown pass '{p}'")
    if a.op == "flce":
        passes = [p for p in passes if p != "both"]  # its backward already covers both
    impls = [i for i in a.impls.split(",") if i]
    for i in impls:
        if i not in ("eager", "compile", "liger"):
            ap.error(f"unknown impl '{i}'")
    if a.rows <= 0 or a.hidden <= 0:
        ap.error("--rows and --hidden must be positive")
    if a.batch <= 0 or (a.batch != 1 and a.op != "groupnorm"):
        ap.error("--batch must be positive, and is groupnorm's alone")
    base = {"op": a.op, "rows": a.rows, "hidden": a.hidden, "dtype": a.dtype,
            "weight_dtype": a.weight_dtype, "frozen": a.freeze_weight,
            "frozen_bias": a.freeze_bias}
    if a.op == "groupnorm":
        base.update(batch=a.batch, groups=groups_of(a))

    # (freeze weight, freeze bias, passes) of each run in this process; --with-frozen adds the
    # frozen ones (their forward is the same as the trained one's, so it is not run again)
    settings = [(a.freeze_weight, a.freeze_bias, passes)]
    fpasses = [p for p in passes if p != "forward"]
    if fpasses and not (a.freeze_weight or a.freeze_bias):
        for f in dict.fromkeys(with_frozen):
            settings.append((True, f == "all", fpasses))

    def skip_all(reason):
        for fw, fb, ps in settings:
            for i in impls:
                for p in ps:
                    emit({"impl": "torch-" + i if i != "liger" else "liger", **base,
                          "frozen": fw, "frozen_bias": fb, "pass": p, "skipped": reason})
        return 0

    try:
        import torch
    except ImportError:
        return skip_all("PyTorch is not installed")
    dev = a.device
    if dev == "cuda" and not torch.cuda.is_available():
        return skip_all("no CUDA device (try --device cpu)")
    if dev == "cpu":
        n = a.threads or len(os.sched_getaffinity(0))
        torch.set_num_threads(n)
    base["device"] = device_name(torch, dev)
    base["torch"] = torch.__version__
    if a.op == "flce" and a.vocab <= 0:
        ap.error("--vocab must be positive")

    timer = Timer(torch, dev, a.budget_s, 20 if dev == "cuda" else 10,
                  a.reps or (200 if dev == "cuda" else 50))
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=dev).fill_(1)
    dst = torch.empty_like(src)
    copy_ms = timer.median_ms(lambda: dst.copy_(src), COPY_BYTES * 2)[0]
    copy_gbps = 2 * COPY_BYTES / copy_ms / 1e6
    del src, dst

    liger_state = {}
    failed = False
    for fw, fb, ps in settings:
        a.freeze_weight, a.freeze_bias = fw, fb
        failed |= run_setting(torch, a, dev, timer, impls, ps,
                              {**base, "frozen": fw, "frozen_bias": fb}, copy_gbps, liger_state)
    return 1 if failed else 0


def run_setting(torch, a, dev, timer, impls, passes, base, copy_gbps, liger_state):
    """Time every impl and pass for one frozen setting; True when any printed an error."""
    fwd_bytes, bwd_bytes = byte_counts(a)
    pass_bytes = {"forward": fwd_bytes, "backward": bwd_bytes, "both": fwd_bytes + bwd_bytes}
    try:
        case = Case(torch, a, dev)
    except Exception as e:  # noqa: BLE001 - e.g. out of memory: every impl reports it
        for i in impls:
            for p in passes:
                emit({"impl": "torch-" + i if i != "liger" else "liger", **base, "pass": p,
                      "error": f"setting up the tensors: {type(e).__name__}: {e}"})
        traceback.print_exc()
        return True
    failed = False
    for impl in impls:
        name = "liger" if impl == "liger" else "torch-" + impl
        head = {"impl": name, **base}
        if case.note and impl != "liger":
            head["note"] = case.note
        try:
            if impl == "liger":
                # (BENCH_TORCH_LIGER_ON_CPU=1 with TRITON_INTERPRET=1 runs them in Triton's
                # interpreter: slow, only to check this script's calls on a machine without GPU)
                if dev != "cuda" and os.environ.get("BENCH_TORCH_LIGER_ON_CPU") != "1":
                    why = "Liger-Kernel's Triton kernels need a GPU (this run is --device cpu)"
                    for p in passes:
                        emit({**head, "pass": p, "skipped": why})
                    continue
                if not liger_state:
                    liger_state["load"], liger_state["ver"] = import_liger(a)
                liger_load, liger_ver = liger_state["load"], liger_state["ver"]
                if liger_load is None:
                    for p in passes:
                        emit({**head, "pass": p, "skipped": liger_ver})
                    continue
                cls, why = liger_load(a.op)
                if cls is None:
                    for p in passes:
                        emit({**head, "pass": p, "skipped": why})
                    continue
                head["liger"] = liger_ver
                g = case.liger_fn(cls)
            else:
                g = case.eager if impl == "eager" else torch.compile(case.eager, dynamic=False)
            fwd = (lambda g=g: g(*case.args))
            # flce's forward is the loss alone: inputs that want no gradient (Liger decides
            # from requires_grad whether to compute the gradients in its forward)
            fwd_only = (lambda g=g: g(*case.detached)) if a.op == "flce" else fwd
            inputs = case.grad_inputs()
            for p in passes:
                try:
                    ms, reps, lo, hi = run_pass(torch, timer, case, fwd, fwd_only, inputs, p,
                                         pass_bytes[p])
                except Exception as e:  # noqa: BLE001 - reported, the next pass still runs
                    failed = True
                    emit({**head, "pass": p, "error": f"{type(e).__name__}: {e}"})
                    traceback.print_exc()
                    continue
                by = pass_bytes[p]
                gbps = by / ms / 1e6
                out = {**head, "pass": p, "bytes": by, "median_ms": ms, "min_ms": lo,
                       "max_ms": hi, "reps": reps, "gbps": gbps, "copy_gbps": copy_gbps,
                       "ratio": gbps / copy_gbps}
                if a.op == "flce":
                    mnk = 2.0 * a.rows * a.vocab * a.hidden
                    fl = mnk if p == "forward" else mnk * (1 + 1 + (not a.freeze_weight))
                    out["flops"], out["tflops"] = fl, fl / ms * 1e-9
                    out["vocab"] = a.vocab
                    if p == "backward":
                        out["covers"] = "forward+backward"
                emit(out)
        except Exception as e:  # noqa: BLE001 - e.g. torch.compile unavailable here
            failed = True
            for p in passes:
                emit({**head, "pass": p, "error": f"{type(e).__name__}: {e}"})
            traceback.print_exc()
    return failed


def run_pass(torch, timer, case, fwd, fwd_only, inputs, p, nbytes):
    """(median ms, repetitions, min ms, max ms) of pass p."""
    grads = case.grads()
    if p == "forward":
        return timer.median_ms(fwd_only, nbytes)
    if case.a.op == "flce":
        # the CLI's fused pass: loss and every wanted gradient
        return timer.median_ms(lambda: torch.autograd.grad(fwd(), inputs), nbytes)
    if p == "both":
        return timer.median_ms(lambda: torch.autograd.grad(fwd(), inputs, grads), nbytes)
    out = fwd()
    return timer.median_ms(lambda: torch.autograd.grad(out, inputs, grads, retain_graph=True),
                           nbytes)


if __name__ == "__main__":
    sys.exit(main())
