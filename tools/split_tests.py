#!/usr/bin/env python3
"""Run a build's CTest suite with each cmocka test of a test binary as a process of its own, many
at a time, within a deadline: the whole suite on a GPU machine in one call of limited length,
where a long binary (test_groupnorm's test_prebuild alone takes minutes through NVIDIA's
compiler) would otherwise hold back everything after it.

  tools/split_tests.py [--build DIR] [--plan FILE | --write-plan FILE] [-j N] [--deadline S]
                       [--select REGEX] [--exclude REGEX] [--durations FILE] [--out DIR]

  --build DIR         the build folder (default: build)
  --write-plan FILE   write the suite's plan, as `ctest --show-only=json-v1` gives it, with the
                      build and source folders as {build} and {source}, and stop; for a
                      machine without CMake that gets the build folder copied
  --plan FILE         run that plan ({build} = --build, {source} = this checkout) instead of
                      asking ctest
  -j N                jobs at a time (default 4)
  --deadline S        seconds: no job starts after S, and a running one is stopped at S
                      (reported TIMEOUT); jobs never started are NOT RUN (default: none)
  --select REGEX      only the jobs whose name matches (re.search): a CTest test's name, or
                      NAME.TEST for one cmocka test of it; --exclude leaves them out
  --durations FILE    a summary.json of an earlier run: the longest jobs start first
  --out DIR           each job's output as DIR/<job>.log and DIR/summary.json (default: a new
                      folder under the system's temporary one, printed)

A CTest test whose command is a test binary of the build (tests/common/ng_test.h's
NG_RUN_GROUP_TESTS) lists its tests under NORMGRAD_TEST_LIST and becomes one job per test
(NORMGRAD_TEST_FILTER); any other CTest test (a shell script, an example) is one job. Each job
has its CTest environment, folder and timeout. A line a job is printed as each ends, then the
counts; exit status 0 when every job passed, 1 otherwise, 2 for usage errors.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

LIST_MARK = "# normgrad tests"  # ng_test.h's first line under NORMGRAD_TEST_LIST
SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cache_dirs(build):
    """(build folder, source folder) as the build's CMakeCache.txt names them."""
    dirs = {}
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                for key in ("CMAKE_CACHEFILE_DIR", "CMAKE_HOME_DIRECTORY"):
                    if line.startswith(key + ":"):
                        dirs[key] = line.split("=", 1)[1].strip()
    except OSError:
        pass
    return dirs.get("CMAKE_CACHEFILE_DIR"), dirs.get("CMAKE_HOME_DIRECTORY")


def ctest_plan(build):
    """The suite's tests from ctest: [{name, command, env, cwd, timeout}], with the folders the
    build was configured with replaced by {build} and {source}."""
    if not shutil.which("ctest"):
        sys.exit("split_tests.py: ctest not found; give --plan FILE (written by --write-plan)")
    r = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"split_tests.py: ctest --show-only failed: {r.stderr.strip()}")
    bdir, sdir = cache_dirs(build)
    bdir = bdir or os.path.abspath(build)
    sdir = sdir or SOURCE

    def rel(v):
        return v.replace(bdir, "{build}").replace(sdir, "{source}")

    plan = []
    for t in json.loads(r.stdout).get("tests", []):
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        if props.get("DISABLED"):
            continue
        plan.append({
            "name": t["name"],
            "command": [rel(c) for c in t.get("command", [])],
            "env": [rel(e) for e in props.get("ENVIRONMENT", [])],
            "cwd": rel(props.get("WORKING_DIRECTORY", bdir)),
            "timeout": float(props.get("TIMEOUT", 0) or 0),
        })
    return plan


def expand(v, build):
    return v.replace("{build}", os.path.abspath(build)).replace("{source}", SOURCE)


def job_env(test, build):
    env = dict(os.environ)
    for e in test["env"]:
        k, _, v = expand(e, build).partition("=")
        env[k] = v
    return env


def list_tests(test, build):
    """The cmocka tests of a test binary of the build (a test_* program under {build}), or None
    for a command that is not one. A test_* program that does not know NORMGRAD_TEST_LIST runs
    here once (at most 60 s) and is then one job."""
    cmd = [expand(c, build) for c in test["command"]]
    if not cmd or not test["command"][0].startswith("{build}/") or \
            not os.path.basename(cmd[0]).startswith("test_"):
        return None
    env = dict(job_env(test, build), NORMGRAD_TEST_LIST="1")
    try:
        r = subprocess.run(cmd, env=env, cwd=expand(test["cwd"], build), capture_output=True,
                           text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = r.stdout.splitlines()
    if r.returncode != 0 or not lines or lines[0] != LIST_MARK:
        return None
    return [l for l in lines[1:] if l]


def ran_one(log):
    """Whether cmocka ran the one test a job's filter names (it reports 0 and exits 0 when the
    filter matches nothing)."""
    with open(log, errors="replace") as f:
        return "Running 1 test(s)" in f.read()


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default="build")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--plan")
    g.add_argument("--write-plan")
    p.add_argument("-j", type=int, default=4)
    p.add_argument("--deadline", type=float)
    p.add_argument("--select")
    p.add_argument("--exclude")
    p.add_argument("--durations")
    p.add_argument("--out")
    a = p.parse_args(argv)
    if a.j < 1:
        p.error("-j must be at least 1")
    if a.deadline is not None and a.deadline <= 0:
        p.error("--deadline must be positive")
    for opt in ("select", "exclude"):
        try:
            re.compile(getattr(a, opt) or "")
        except re.error as e:
            p.error(f"--{opt}: {e}")
    if not os.path.isdir(a.build):
        p.error(f"--build {a.build!r}: no such folder")
    return a


def main(argv):
    a = parse_args(argv)
    if a.plan:
        try:
            with open(a.plan) as f:
                plan = json.load(f)
            assert isinstance(plan, list) and all("name" in t and "command" in t for t in plan)
        except (OSError, ValueError, AssertionError) as e:
            print(f"split_tests.py: --plan {a.plan}: not a plan ({e or 'bad shape'})",
                  file=sys.stderr)
            return 2
    else:
        plan = ctest_plan(a.build)
    if a.write_plan:
        with open(a.write_plan, "w") as f:
            json.dump(plan, f, indent=1)
        print(f"{len(plan)} tests written to {a.write_plan}")
        return 0
    jobs = []  # (job name, CTest test, cmocka filter or None)
    for t in plan:
        names = list_tests(t, a.build)
        if names:
            jobs += [(f"{t['name']}.{n}", t, n) for n in names]
        else:
            jobs.append((t["name"], t, None))
    jobs = [j for j in jobs if (not a.select or re.search(a.select, j[0])) and
            not (a.exclude and re.search(a.exclude, j[0]))]
    if not jobs:
        print("split_tests.py: no test selected", file=sys.stderr)
        return 2
    if a.durations:
        try:
            with open(a.durations) as f:
                took = {j["job"]: j["seconds"] for j in json.load(f)["jobs"]}
            jobs.sort(key=lambda j: -took.get(j[0], 0.0))
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"split_tests.py: --durations {a.durations}: ignored ({e})", file=sys.stderr)
    out = a.out or tempfile.mkdtemp(prefix="split_tests.")
    os.makedirs(out, exist_ok=True)
    start = time.monotonic()
    lock = threading.Lock()
    print(f"{len(jobs)} jobs, {a.j} at a time; logs in {out}", flush=True)

    def run(job):
        name, t, flt = job
        left = None if a.deadline is None else a.deadline - (time.monotonic() - start)
        if left is not None and left <= 0:
            with lock:
                print(f"{'NOT RUN':<10} {0.0:7.1f} s  {name}", flush=True)
            return {"job": name, "status": "NOT RUN", "seconds": 0.0}
        limit = [x for x in (left, t.get("timeout") or None) if x]
        env = job_env(t, a.build)
        if flt is not None:
            env["NORMGRAD_TEST_FILTER"] = flt
        t0 = time.monotonic()
        log = os.path.join(out, re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".log")
        with open(log, "w") as f:
            try:
                # a session of its own, so that a timeout stops what a script started too
                p = subprocess.Popen([expand(c, a.build) for c in t["command"]], env=env,
                                     cwd=expand(t["cwd"], a.build), stdout=f,
                                     stderr=subprocess.STDOUT, start_new_session=True)
                try:
                    rc = p.wait(timeout=min(limit) if limit else None)
                    status = "PASS" if rc == 0 else f"FAIL ({rc})"
                    if rc == 0 and flt is not None and not ran_one(log):
                        status = "FAIL (ran no test)"  # cmocka exits 0 when nothing matched
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
                    status = "TIMEOUT"
            except OSError as e:
                f.write(f"split_tests.py: {e}\n")
                status = "FAIL (not started)"
        res = {"job": name, "status": status, "seconds": round(time.monotonic() - t0, 1)}
        with lock:
            print(f"{status:<10} {res['seconds']:7.1f} s  {name}", flush=True)
        return res

    with concurrent.futures.ThreadPoolExecutor(max_workers=a.j) as pool:
        results = list(pool.map(run, jobs))
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({"jobs": results, "seconds": round(time.monotonic() - start, 1)}, f, indent=1)
    counts = {}
    for r in results:
        kind = "NOT RUN" if r["status"] == "NOT RUN" else r["status"].split()[0]
        counts[kind] = counts.get(kind, 0) + 1
    bad = [r for r in results if r["status"] != "PASS"]
    print(f"{counts.get('PASS', 0)}/{len(results)} passed in {time.monotonic() - start:.0f} s" +
          "".join(f", {n} {k}" for k, n in sorted(counts.items()) if k != "PASS"))
    for r in bad:
        if r["status"] != "NOT RUN":
            print(f"  {r['status']}: {r['job']}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
