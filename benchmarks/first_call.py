"""Benchmark: the shipped RVMs' first call at a new shape, in a fresh process (issue 42's goal: under
one second), with JAX's persistent compilation cache empty and with the cache an earlier process
filled.

For each problem and schedule, three fresh processes share one cache folder (``XDG_CACHE_HOME``
set to a new temporary folder; :func:`ppl_sbl.compilation_cache` on, as the command line and the
estimators have it): the first finds the cache empty (``cold``), the second and third find every
program there (``cached``; two, since the machine's noise is of the size of the times). Each
process imports ppl-sbl, runs one tiny unrelated ``jax.jit`` (JAX's start, not counted), then
times ``CAVI(model, progress_bar=False, compiled=...).run(Phi, t)`` and the result's ``.elbo``,
``.relevant`` and ``.predict`` on the test design, and the same again (``warm``: the programs in
memory). XLA compilations, the programs read from the cache instead, and the seconds of tracing,
lowering and compiling come from ``jax.monitoring`` (:class:`benchmarks.timing.CompileClock`);
every process must give the same ELBO.

Problems: ``sinc<N>``, ``rvm.regression`` on the noisy sinc (``datasets.sinc(n_train=N)``, RBF width
5.55 with the bias column); ``ripley``, ``rvm.classification`` on Ripley's 250 training points
(width 4.0). Schedules: ``fast`` (the default loop on the host) and ``compiled``
(``compiled=True``: the fast schedule as one XLA program).

Usage::

    python benchmarks/first_call.py                       # sinc100, sinc1000, ripley
    python benchmarks/first_call.py --quick               # sinc100 only
    python benchmarks/first_call.py --out record.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # the repository root, for ``benchmarks.timing``

from benchmarks.timing import write_record  # noqa: E402

PROBLEMS = ("sinc100", "sinc1000", "ripley")
SCHEDULES = ("fast", "compiled")
RUNS = ("cold", "cached", "cached_again")
#: the environment's settings of JAX's cache that the child processes leave out: they cache as
#: ppl-sbl's defaults have it (:func:`ppl_sbl.compilation_cache`), in a folder of their own
OWN_CACHE_SETTINGS = ("JAX_COMPILATION_CACHE_DIR", "PPL_SBL_NO_COMPILATION_CACHE",
                      "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES")


def one(problem, schedule):
    """The first and the warm call in this process (a dict)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import ppl_sbl
    from benchmarks.timing import CompileClock
    from ppl_sbl.models import rvm

    folder = ppl_sbl.compilation_cache()
    jax.jit(lambda x: x + 1)(jnp.ones(3)).block_until_ready()  # JAX's start, not counted
    if problem == "ripley":
        d, delta, model = ppl_sbl.datasets.ripley(), 4.0, rvm.classification
    else:
        d, delta, model = ppl_sbl.datasets.sinc(n_train=int(problem[4:])), 5.55, rvm.regression
    Phi = np.asarray(ppl_sbl.basis.rbf(d.X_train, delta=delta, bias=True))
    test = np.asarray(ppl_sbl.basis.rbf(d.X_test, d.X_train, delta=delta, bias=True))
    clock = CompileClock()
    hits = [0]  # programs read from the persistent cache (the clock counts them among its compilations)
    jax.monitoring.register_event_listener(
        lambda event, **kw: hits.__setitem__(0, hits[0] + (event == "/jax/compilation_cache/cache_hits")))

    def call():
        count, seconds, read = clock.count, clock.seconds, hits[0]
        start = time.perf_counter()
        res = ppl_sbl.CAVI(model, progress_bar=False, compiled=schedule == "compiled").run(Phi, d.t_train)
        fitted = time.perf_counter()
        elbo, relevant = float(res.elbo), np.asarray(res.relevant)
        jax.block_until_ready(res.predict(test))
        end = time.perf_counter()
        return {"seconds": end - start, "run": fitted - start, "accessors": end - fitted,
                "compilations": clock.count - count - (hits[0] - read), "read_from_cache": hits[0] - read,
                "compile_seconds": clock.seconds - seconds, "elbo": elbo,
                "relevant": int(relevant.sum())}

    return {"problem": problem, "schedule": schedule, "cache": folder, "first": call(), "warm": call()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=PROBLEMS)
    p.add_argument("--quick", action="store_true", help="sinc100 only")
    p.add_argument("--out", default=None, help="JSON record (default: none written)")
    p.add_argument("--one", nargs=2, metavar=("PROBLEM", "SCHEDULE"), help=argparse.SUPPRESS)  # a child process
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(one(*args.one)))
        return 0
    problems = ["sinc100"] if args.quick else args.problems
    rows = []
    print(f"{'problem':<9} {'schedule':<9} {'run':<13} {'first s':>8} {'warm s':>7} {'compiles':>8} {'read':>5} "
          f"{'jax s':>6}  elbo", flush=True)
    for problem in problems:
        for schedule in SCHEDULES:
            with tempfile.TemporaryDirectory() as cache:
                env = {key: value for key, value in os.environ.items() if key not in OWN_CACHE_SETTINGS}
                env.update(XDG_CACHE_HOME=cache, OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "1"))
                row = {"problem": problem, "schedule": schedule}
                for run in RUNS:
                    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", problem, schedule],
                                          env=env, capture_output=True, text=True)
                    if proc.returncode != 0:
                        raise RuntimeError(f"{problem} {schedule} {run}:\n{proc.stderr[-3000:]}")
                    rec = json.loads(proc.stdout.strip().splitlines()[-1])
                    if not str(rec["cache"]).startswith(cache):
                        raise RuntimeError(f"the child process cached in {rec['cache']}, not in {cache}")
                    row[run] = {"first": rec["first"], "warm": rec["warm"]}
                    f, w = rec["first"], rec["warm"]
                    print(f"{problem:<9} {schedule:<9} {run:<13} {f['seconds']:8.3f} {w['seconds']:7.3f} "
                          f"{f['compilations']:>8} {f['read_from_cache']:>5} {f['compile_seconds']:6.2f}  "
                          f"{f['elbo']:.10f}", flush=True)
                elbos = [row[run][call]["elbo"] for run in RUNS for call in ("first", "warm")]
                row["same_fit"] = max(elbos) - min(elbos) <= 1e-9 * abs(elbos[0])
                rows.append(row)
    record = {"benchmark": "first call at a new shape, fresh processes, persistent cache empty then filled",
              "rows": rows,
              "first_call_under_1s": {f"{r['problem']}/{r['schedule']}/{run}": r[run]["first"]["seconds"] < 1.0
                                      for r in rows for run in RUNS}}
    print(json.dumps(record["first_call_under_1s"]))
    if args.out:
        write_record(record, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
