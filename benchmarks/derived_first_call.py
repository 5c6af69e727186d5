"""Benchmark: a derived guide's first call (issue 41, point 4: analysis and compilation).

Each model runs in a fresh process: ``import ppl_sbl``, one tiny unrelated ``jax.jit`` (so that
JAX's start, the backend's initialisation, is not counted), the data of
:func:`benchmarks.derived_cavi.make_problem`, then the timed first call
``CAVI(model, progress_bar=False).run(*data)`` followed by the result's common accessors
(``.elbo``, ``.relevant``, ``.predict`` on the test design), then the same again (the warm call,
same shapes, the programs compiled). ``overhead`` = first - warm: what the first call spends on
analysis and compilation beyond the fit itself. XLA compilations and their seconds are counted
through ``jax.monitoring`` (:class:`benchmarks.timing.CompileClock`); ``folding`` counts lines of the
process's stderr that mention XLA's constant folding.

Models: the edited models of :mod:`benchmarks.derived_cavi` (derived guides: ``CAVI(model)``) and
the shipped RVMs with ``guide="derived"``.

Usage::

    python benchmarks/derived_first_call.py                          # N = 200 and 1000, every model
    python benchmarks/derived_first_call.py --sizes 1000 --models rvm_regression student_t
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MODELS = ("student_t", "student_t_table", "weighted_logit", "group_ard", "rvm_regression", "rvm_classification",
          "robust_regression", "robust_classification")


def one(name, n):
    """The first and the warm call of model ``name`` at size ``n`` in this process (a dict)."""
    sys.path.insert(0, ROOT)
    import jax
    import jax.numpy as jnp
    import numpy as np

    import ppl_sbl
    from benchmarks import derived_cavi as dc
    from benchmarks.timing import CompileClock
    from ppl_sbl.models import robust_rvm, rvm

    jax.jit(lambda x: x + 1)(jnp.ones(3)).block_until_ready()  # JAX's start, not counted
    p = dc.make_problem(n)
    models = {"student_t": (dc.student_t_rvm, None, "regression"),
              "student_t_table": (dc.student_t_table_rvm, None, "table"),
              "weighted_logit": (dc.weighted_logit_rvm, None, "classification"),
              "group_ard": (dc.group_ard_rvm, None, "regression"),
              "rvm_regression": (rvm.regression, "derived", "regression"),
              "rvm_classification": (rvm.classification, "derived", "classification"),
              "robust_regression": (robust_rvm.regression, "derived", "regression"),
              "robust_classification": (robust_rvm.classification, "derived", "classification")}
    model, guide, kind = models[name]
    data = {"regression": (p.Phi, p.t), "classification": (p.Phi_c, p.labels), "table": (p.X_table, p.t_table)}[kind]
    test = {"regression": p.Phi_test, "classification": p.Phi_c_test, "table": p.X_table_test}[kind]
    kw = {} if guide is None else {"guide": guide}
    clock = CompileClock()

    def call():
        count, seconds = clock.count, clock.seconds
        start = time.perf_counter()
        res = ppl_sbl.CAVI(model, progress_bar=False, **kw).run(*data)
        fitted = time.perf_counter()
        elbo, relevant = float(res.elbo), np.asarray(res.relevant)
        jax.block_until_ready(res.predict(test))
        end = time.perf_counter()
        return {"seconds": end - start, "run": fitted - start, "accessors": end - fitted,
                "compilations": clock.count - count, "compile_seconds": clock.seconds - seconds,
                "schedule": res.schedule, "elbo": elbo, "relevant": int(relevant.sum())}

    first = call()
    warm = call()
    return {"model": name, "n": n, "first": first, "warm": warm, "overhead": first["seconds"] - warm["seconds"]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[200, 1000])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--out", default=None, help="JSON list of the records (default: none written)")
    p.add_argument("--one", nargs=2, metavar=("MODEL", "N"), help=argparse.SUPPRESS)  # the child process
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]))))
        return 0
    env = {**os.environ, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1")}
    records = []
    print(f"{'N':>5} {'model':<22} {'first s':>8} {'warm s':>7} {'overhead':>8} {'compiles':>8} {'compile s':>9} "
          f"{'folding':>7} {'schedule':>8}  elbo", flush=True)
    for n in args.sizes:
        for name in args.models:
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", name, str(n)], env=env,
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{n:>5} {name:<22} failed:\n{proc.stderr[-2000:]}", flush=True)
                continue
            rec = json.loads(proc.stdout.strip().splitlines()[-1])
            rec["folding"] = sum("constant fold" in line.lower() for line in proc.stderr.splitlines())
            records.append(rec)
            f, w = rec["first"], rec["warm"]
            print(f"{n:>5} {name:<22} {f['seconds']:8.2f} {w['seconds']:7.2f} {rec['overhead']:8.2f} "
                  f"{f['compilations']:>8} {f['compile_seconds']:9.2f} {rec['folding']:>7} {f['schedule']:>8}  "
                  f"{f['elbo']:.10f}", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(records, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
