"""Benchmark: how far the GPLVM speed ratio moves between separate processes.

``benchmarks/gplvm.py`` times the natural evaluation (what the default fit evaluates) against JAX's
Q Cholesky factorisations in interleaved rounds within one process. On a shared machine the
reference's own time moves from one process to the next, so one record can land either side of
the 3x goal. This runs ``benchmarks/gplvm.py`` (no fits) ``--runs`` times, each
in a fresh process, and records per N the spread over the runs of both ratios it prints: of the
medians over the rounds, and of the minima (each function's undisturbed cost); beside them the
floor's ratio of minima (``benchmarks/gplvm.py``: the evaluation's LAPACK calls alone plus its data
term), which says whether a run's reference left room for 3x at all, and the compiled route's
floor (N <= ``linalg.DEVICE_FACTOR_MAX_N``: its blocked Cholesky factorisations and inverses alone,
plus the data term). The record keeps each statistic's values over the processes and their
summary, not the processes' times.

Usage::

    OPENBLAS_NUM_THREADS=1 python benchmarks/gplvm_spread.py   # benchmarks/results/gplvm_cpu_spread.json
    python benchmarks/gplvm_spread.py --quick
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for ``benchmarks.timing``

from benchmarks.timing import environment, fmt, log, write_record  # noqa: E402

STATISTICS = {"medians": "natural_ratio_to_jax_cholesky", "minima": "natural_min_ratio_to_jax_cholesky",
              "floor minima": "floor_min_ratio_to_jax_cholesky",
              "compiled floor minima": "compiled_floor_min_ratio_to_jax_cholesky"}


def spread(values, goal=3.0):
    """min, median, max and the number above ``goal`` of ``values`` (one per process, kept too);
    None where a run has none (the compiled floor, measured only up to the N where the fit takes
    that route)."""
    import numpy as np

    if any(x is None for x in values):
        return None
    v = np.asarray(values, dtype=float)
    return {"min": float(v.min()), "median": float(np.median(v)), "max": float(v.max()),
            "runs_above_goal": int(np.sum(v > goal)), "values": v.tolist()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="two runs of benchmarks/gplvm.py --quick at N = 50 only, without fits, sharing a "
                        "compilation cache")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 200, 400])
    p.add_argument("--out", default=os.path.join(HERE, "results", "gplvm_cpu_spread.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.runs, args.sizes = 2, [50]
    extra = ["--quick"] * args.quick + ["--sizes", *map(str, args.sizes)]
    out = args.out.replace(".json", "_quick.json") if args.quick else args.out
    env = environment()
    log(f"# GPLVM ratio spread over {args.runs} processes  {env['date']}  cpus={env['cpu_count']}  "
        f"blas threads={env['blas_threads_env']}")
    runs = []  # per process: the statistics' values at each N (the record keeps their summaries)
    with tempfile.TemporaryDirectory() as tmp:
        run_env = None
        if args.quick:
            # the smoke run's processes share one persistent compilation cache: the second loads the
            # programs the first compiled (the statistics are times of compiled code, which it does not change)
            run_env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": os.path.join(tmp, "jax_cache"),
                       "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
        for i in range(args.runs):
            path = os.path.join(tmp, f"run{i}.json")
            cmd = [sys.executable, os.path.join(HERE, "gplvm.py"), *extra, "--fit-sizes", "--fit-steps", "--out", path]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=run_env)
            if args.quick:
                path = path.replace(".json", "_quick.json")
            with open(path) as f:
                rows = json.load(f)["rows"]
            runs.append({"run": i + 1, "rows": [{k: r[k] for k in ("n", *STATISTICS.values())} for r in rows]})
            log(f"run {i + 1}: " + "  ".join(f"N={r['n']} " + "/".join(fmt(r[key]) for key in STATISTICS.values())
                                            for r in rows) + "  (ratio of " + " / of ".join(STATISTICS) + ")")
    sizes = [r["n"] for r in runs[0]["rows"]]
    summary = {str(n): {name: spread([run["rows"][j][key] for run in runs]) for name, key in STATISTICS.items()}
               for j, n in enumerate(sizes)}
    log("\n    N | " + " | ".join(f"ratio of {name}: min  median  max  runs > 3" for name in STATISTICS))
    for n in sizes:
        log(f"{n:>5} | " + " | ".join(
            f"{s['min']:{len(name) + 16}.2f} {s['median']:7.2f} {s['max']:5.2f} {s['runs_above_goal']:9d}"
            if s is not None else f"{'-':>{len(name) + 16}} {'-':>7} {'-':>5} {'-':>9}"
            for name, s in summary[str(n)].items()))
    record = {"benchmark": "spread over separate processes of the natural evaluation's ratio to JAX's Q Cholesky "
                           "factorisations", "environment": env, "args": vars(args),
              "command": "OPENBLAS_NUM_THREADS=1 python benchmarks/gplvm_spread.py", "runs": len(runs),
              "summary": summary}
    write_record(record, out)


if __name__ == "__main__":
    main()
