#!/usr/bin/env python3
"""Compare normgrad builds or settings the way docs/tuning.md's tables are measured: every case
under every variant, the variants alternating within each round (so a machine's drift hits them
alike), then each case's range over the rounds per variant.

  tools/ab_bench.py --variant NAME=CLI [--variant NAME=CLI ...] [--env NAME:VAR=VALUE ...]
                    [--case "OP ARGS"]... [--cases-file FILE] [--rounds R] [--out FILE]
                    [--check] [--deadline SECONDS]
  tools/ab_bench.py --report FILE [--report FILE ...]

  --variant NAME=CLI   a variant: a name and the normgrad-cli binary it runs (repeat; the first
                       is the baseline the others are set against)
  --env NAME:VAR=VAL   an environment variable for one variant (repeat), e.g.
                       --env new:NORMGRAD_TUNE=wg=512,reg=1; a variant may reuse another's binary
                       (a backward's inputs come from the rules' forward whatever it sets)
  --case "OP ARGS"     the arguments of one `normgrad-cli bench` call (repeat), e.g.
                       "rmsnorm --rows 8192 --hidden 4096 --dtype bf16 --pass backward"
  --cases-file FILE    cases one per line (blank lines and lines starting with # skipped)
  --rounds R           rounds (default 2)
  --out FILE           every bench result as a JSON line with "variant" and "round" added
  --check              also compare outputs: in round 1 the baseline saves each case's outputs
                       (`bench --save-outputs`, into a temporary folder) and every other variant
                       checks its own against them (`--check-outputs`), reported per variant as
                       the worst difference over the allowed one (`tune`'s bound, <= 1 agrees)
                       and, where they differ, the output it is in (dx, dweight, ...); a variant
                       that differs makes the exit status 1
  --deadline SECONDS   start no bench call after this many seconds from the start and report
                       what the finished calls gave (exit status 3 when it cut the run); set it
                       below an outer time limit, which would otherwise lose the whole report
  --report FILE        run nothing: report earlier runs' --out lines (repeat to pool runs, e.g.
                       one a deadline cut and one of the cells it left); cases and variants in
                       the order the lines first name them, the first variant the baseline, and
                       "(R of N rounds)" where a variant has fewer results than the most any
                       has; exit status 1 where a line records a failed call or outputs that
                       differ

For each case it prints each variant's median time over its rounds as min-max, the ratio to the
copy of the same run, each kernel's time (where a pass has several), and its median time against
the baseline's (+ slower, - faster). A call that fails is reported and the rest go on; the exit
status is then 1 (3 when --deadline cut the run). Speed is measured here, never in tests
(tests/cli/ab_bench.sh checks only that the script runs and reports).
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variant", action="append", default=[], metavar="NAME=CLI")
    p.add_argument("--env", action="append", default=[], metavar="NAME:VAR=VALUE")
    p.add_argument("--case", action="append", default=[], metavar="OP ARGS")
    p.add_argument("--cases-file")
    p.add_argument("--rounds", type=int)
    p.add_argument("--out")
    p.add_argument("--check", action="store_true")
    p.add_argument("--deadline", type=float)
    p.add_argument("--report", action="append", default=[], metavar="FILE")
    a = p.parse_args(argv)
    if a.report:
        if (a.variant or a.env or a.case or a.cases_file or a.out or a.check or
                a.deadline is not None or a.rounds is not None):
            p.error("--report runs nothing: it takes no --variant, --env, --case, --cases-file, "
                    "--rounds, --out, --check or --deadline")
        return a, None, None
    if a.rounds is None:
        a.rounds = 2
    variants, names = [], set()
    for v in a.variant:
        name, sep, cli = v.partition("=")
        if not sep or not name or not cli:
            p.error(f"--variant {v!r}: expected NAME=CLI")
        if name in names:
            p.error(f"--variant {name!r} given twice")
        names.add(name)
        variants.append({"name": name, "cli": cli, "env": {}})
    if not variants:
        p.error("at least one --variant")
    for e in a.env:
        name, sep, assign = e.partition(":")
        var, sep2, val = assign.partition("=")
        if not sep or not sep2 or not var:
            p.error(f"--env {e!r}: expected NAME:VAR=VALUE")
        match = [v for v in variants if v["name"] == name]
        if not match:
            p.error(f"--env {e!r}: no variant named {name!r}")
        match[0]["env"][var] = val
    cases = list(a.case)
    if a.cases_file:
        with open(a.cases_file) as f:
            cases += [l.strip() for l in f if l.strip() and not l.lstrip().startswith("#")]
    if not cases:
        p.error("at least one --case or a --cases-file with cases")
    if a.rounds < 1:
        p.error("--rounds must be at least 1")
    if a.deadline is not None and a.deadline <= 0:
        p.error("--deadline must be a positive number of seconds")
    return a, variants, cases


def run_bench(variant, case, extra=()):
    """One `bench --json` call; returns (result dict, None) or (None, error text)."""
    cmd = [variant["cli"], "bench"] + shlex.split(case) + ["--json"] + list(extra)
    env = dict(os.environ, **variant["env"])
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    except OSError as e:
        return None, str(e)
    if r.returncode != 0:
        err = (r.stderr.strip() or r.stdout.strip()).splitlines()
        return None, f"exit {r.returncode}: {err[-1] if err else ''}"
    try:
        return json.loads(r.stdout), None
    except ValueError:
        return None, "no JSON on stdout"


def span(xs, fmt):
    lo, hi = min(xs), max(xs)
    return fmt % lo if fmt % lo == fmt % hi else (fmt % lo) + "-" + (fmt % hi)


def report(cases, names, results, checks, rounds, check, present=None):
    """Print each case's lines: every variant's times, ratio, kernels, change against the
    baseline (names[0]) and output check. present (--report): the (case, variant) pairs the
    files have a line of, a result or an error; a variant without one for a case was not run on
    it (the files pool runs of other variant sets) and is left out of that case's lines."""
    base = names[0]
    for case in cases:
        print(f"== {case}")
        base_rs = results.get((case, base))
        base_med = statistics.median(r["median_ms"] for r in base_rs) if base_rs else None
        for name in names:
            rs = results.get((case, name))
            if present is not None and (case, name) not in present:
                continue
            if not rs:
                print(f"  {name:<12} (no result)")
                continue
            us = [r["median_ms"] * 1000 for r in rs]
            line = f"  {name:<12} {span(us, '%.1f'):>13} us"
            line += f"  ratio {span([r['ratio'] for r in rs], '%.2f')}"
            kernels = {}
            for r in rs:
                for k in r.get("each_kernel", []):
                    kernels.setdefault(k["name"], []).append(k["median_ms"] * 1000)
            if len(kernels) > 1:
                line += "  " + " ".join(f"{n}={span(t, '%.1f')}" for n, t in kernels.items())
            if base_med and name != base:
                rel = statistics.median(r["median_ms"] for r in rs) / base_med - 1
                line += "  time %+.1f%%" % (100 * rel)
            if (case, name) in checks:
                w, where = checks[(case, name)]
                if w is None:
                    line += "  outputs DIFFER (NaN in %s)" % where
                elif w <= 1:
                    line += "  outputs agree (%.2g)" % w
                else:
                    line += "  outputs DIFFER (%.2g, in %s)" % (w, where)
            elif check and name != base:
                line += "  outputs not checked"
            if len(rs) < rounds:
                line += f"  ({len(rs)} of {rounds} rounds)"
            print(line)
        copies = [r["copy_gbps"] for name in names for r in results.get((case, name), [])]
        if copies:
            print(f"  copy {span(copies, '%.0f')} GB/s")


def report_files(paths):
    """--report: pool the JSON lines of earlier runs and report them as the run would have."""
    cases, names, results, checks, failed, present = [], [], {}, {}, False, set()
    for path in paths:
        try:
            f = open(path)
        except OSError as e:
            print(f"ab_bench.py: --report {path}: {e.strerror}", file=sys.stderr)
            return 2
        with f:
            for ln, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                    case, name = r["case"], r["variant"]
                    if "error" not in r:
                        float(r["median_ms"]), float(r["ratio"]), float(r["copy_gbps"])
                    if r.get("outputs_check") is not None:
                        float(r["outputs_check"])
                except (ValueError, KeyError, TypeError):
                    print(f"ab_bench.py: {path}:{ln}: not a line of ab_bench.py --out",
                          file=sys.stderr)
                    return 2
                if case not in cases:
                    cases.append(case)
                if name not in names:
                    names.append(name)
                present.add((case, name))
                if "error" in r:
                    failed = True
                    continue
                if "outputs_check" in r:
                    w, where = r["outputs_check"], r.get("outputs_check_worst")
                    old = checks.get((case, name))
                    if old is None or (old[0] is not None and (w is None or w > old[0])):
                        checks[(case, name)] = (w, where)
                    if w is None or w > 1:
                        failed = True
                results.setdefault((case, name), []).append(r)
    if not names:
        print("ab_bench.py: --report: no lines in " + ", ".join(paths), file=sys.stderr)
        return 2
    rounds = max((len(rs) for rs in results.values()), default=0)
    report(cases, names, results, checks, rounds, bool(checks), present)
    return 1 if failed else 0


def main(argv):
    a, variants, cases = parse_args(argv)
    if a.report:
        return report_files(a.report)
    out = open(a.out, "w") if a.out else None
    results = {}  # (case, variant) -> [result, ...]
    failed = False
    tmp = tempfile.TemporaryDirectory(prefix="ab_bench-") if a.check else None
    # (case, variant) -> (worst difference / allowed, None: a NaN where ref had none; the output
    # it is in)
    checks = {}
    start, cut = time.monotonic(), None
    for rnd in range(1, a.rounds + 1):
        for ci, case in enumerate(cases):
            ref = os.path.join(tmp.name, f"case{ci}.safetensors") if tmp else None
            for vi, v in enumerate(variants):
                if a.deadline is not None and time.monotonic() - start >= a.deadline:
                    cut = cut or (rnd, case, v["name"])
                    continue
                extra = ()
                if ref and rnd == 1:
                    extra = ("--save-outputs" if vi == 0 else "--check-outputs", ref)
                    if vi > 0 and not os.path.exists(ref):
                        extra = ()  # the baseline failed: nothing to check against
                res, err = run_bench(v, case, extra)
                if err:
                    failed = True
                    print(f"error: round {rnd}, {v['name']}, {case}: {err}", file=sys.stderr)
                    if out:
                        out.write(json.dumps({"variant": v["name"], "round": rnd, "case": case,
                                              "error": err}) + "\n")
                    continue
                res = dict(res, variant=v["name"], round=rnd, case=case)
                if extra and extra[0] == "--check-outputs":
                    checks[(case, v["name"])] = (res.get("outputs_check"),
                                                 res.get("outputs_check_worst"))
                    if res.get("outputs_check") is None or res["outputs_check"] > 1:
                        failed = True
                results.setdefault((case, v["name"]), []).append(res)
                if out:
                    out.write(json.dumps(res) + "\n")
                    out.flush()
    if out:
        out.close()
    if tmp:
        tmp.cleanup()
    if cut:
        print(f"deadline: {a.deadline:g} s reached; round {cut[0]}, {cut[1]}, {cut[2]} and the "
              "calls after it did not run", file=sys.stderr)
    report(cases, [v["name"] for v in variants], results, checks, a.rounds, a.check)
    return 1 if failed else 3 if cut else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
