"""Benchmark: the speed of super-sparse learning against scikit-learn's SVC (RBF kernel), side by
side in one process.

Not a test (``tests/test_benchmarks_super_sparse.py`` runs ``--quick``). Data: one pool from
``make_classification`` (``--features`` = 10 features, 5 informative and 2 redundant, two
clusters per class, 5% of the labels flipped, ``random_state = --seed``), labels -1/+1; the
training set of size n is its first n rows (so the training sets are nested) and the held-out set
its last ``--n-test`` rows (the same for every n). RBF similarity ``exp(-gamma ||x - c||^2)`` with
scikit-learn's ``gamma="scale"``, ``1 / (d var X)`` of the training set. For each n in
``--sizes`` (default 1000 2000 5000 10000 20000):

* **svc**: ``SVC(kernel="rbf", gamma=gamma, C=1).fit(X, y)`` (LIBSVM);
* **reduction**: :func:`ppl_sbl.models.super_sparse.fit_to_decision_values` of that SVC to
  ``--m`` (10) virtual prototypes, at most ``--steps`` (200) gradient steps (the paper's recipe;
  the time includes the SVC's decision values on the training set, which the reduction needs;
  ``svc_plus_reduction`` is the cost of the whole pipeline);
* **labels**: :func:`ppl_sbl.models.super_sparse.fit` straight on the labels -1/+1 (no SVC).

JIT compilation is excluded from the timed fits: the fit is compiled per shape of the training
set, so before the timings at each n one untimed fit of the same shapes with a single step runs
(its seconds are recorded as ``warmup_seconds``). The very first call, at the smallest n (a full
fit on the labels, compiling everything), is timed separately as ``first_call``. Each training
time is the median of ``--fit-repeats`` (3) runs, fewer where they would take over 30 s in all;
the steps taken and the stop reason of each super-sparse fit are recorded.

Test time, on the held-out points: similarity evaluations per point (the SVC's support vectors
against m), the wall clock of ``decision_function`` on the whole held-out set (median of
``--repeats`` = 5, after one untimed call) and the speed-up, and the test AUC
(``roc_auc_score``) and accuracy of each machine, so that the speed is not bought with accuracy.
The log-log slope of training time against n is fitted for each method on the sizes it finished;
a method whose next fit is estimated (from its growth so far) to exceed ``--budget`` seconds
(600) stops growing n and the log says so.

Usage::

    python benchmarks/super_sparse.py                                    # benchmarks/results/super_sparse_cpu.json
    python benchmarks/super_sparse.py --quick --out /tmp/r.json   # n 300 600, 1000 test points, 50 steps, 1 run
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for ``benchmarks.timing``

from benchmarks.timing import environment, log, loglog_slope, repeat_timed, timed, write_record  # noqa: E402

METHODS = ("svc", "reduction", "svc_plus_reduction", "labels")
FIT_REPEAT_CAP_S = 30.0


def pool(n_max, n_test, d, seed):
    """(X_pool, y_pool, X_test, y_test): the first n rows of the pool are the training set of size n."""
    import numpy as np
    from sklearn.datasets import make_classification

    X, t = make_classification(n_max + n_test, n_features=d, n_informative=5, n_redundant=2, n_clusters_per_class=2,
                               flip_y=0.05, class_sep=1.0, random_state=seed)
    y = np.where(t == 1, 1.0, -1.0)
    return X[:n_max], y[:n_max], X[n_max:], y[n_max:]


def fit_time(fn, repeats):
    """(median seconds, the last result) of up to ``repeats`` calls of ``fn``; no more calls once
    FIT_REPEAT_CAP_S seconds have been spent."""
    import numpy as np

    seconds, out = repeat_timed(fn, repeats, budget=FIT_REPEAT_CAP_S)
    return float(np.median(seconds)), out


def median_time(fn, repeats):
    """Median seconds of ``repeats`` calls of ``fn`` after one untimed call."""
    import numpy as np

    return float(np.median(repeat_timed(fn, repeats, warm=True)[0]))


def scores(y_test, f):
    import numpy as np
    from sklearn.metrics import roc_auc_score

    return {"test_auc": float(roc_auc_score(y_test, f)), "test_accuracy": float(np.mean(np.where(f > 0, 1.0, -1.0) == y_test))}


def prototype_row(res, seconds, X_test, y_test, args):
    return {"seconds": seconds, "m": res.m, "steps": int(res.steps),
            "stop_reason": res.stop_reason, "converged": bool(res.converged), "objective": float(res.objective),
            "evaluations_per_test_point": res.similarity_evaluations_per_point,
            "test_seconds": median_time(lambda: res.decision_function(X_test), args.repeats),
            **scores(y_test, res.decision_function(X_test))}


def slope(points):
    """The log-log slope of (n, seconds) points, or None."""
    return loglog_slope([p[0] for p in points], [p[1] for p in points])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="n 300 600, 1000 test points, 50 steps, one training and one test run (seconds)")
    p.add_argument("--sizes", type=int, nargs="+", default=None, help="training sizes (default 1000 2000 5000 10000 20000)")
    p.add_argument("--n-test", type=int, default=None, help="held-out points (default 5000; quick 1000)")
    p.add_argument("--features", type=int, default=10)
    p.add_argument("--m", type=int, default=10, help="virtual prototypes (default 10)")
    p.add_argument("--steps", type=int, default=None, help="gradient steps per super-sparse fit at most (default 200; quick 50)")
    p.add_argument("--fit-repeats", type=int, default=None,
                   help="training runs per method and n, median (default 3; quick 1)")
    p.add_argument("--repeats", type=int, default=None, help="test-time runs, median (default 5; quick 1)")
    p.add_argument("--budget", type=float, default=600.0, help="seconds one fit may take (default 600)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON record (default benchmarks/results/super_sparse_cpu.json; "
                                               "quick: a file in the temporary folder)")
    args = p.parse_args(argv)
    if args.sizes is None:
        args.sizes = [300, 600] if args.quick else [1000, 2000, 5000, 10000, 20000]
    args.sizes = sorted(set(args.sizes))
    if args.n_test is None:
        args.n_test = 1000 if args.quick else 5000
    if args.steps is None:
        args.steps = 50 if args.quick else 200
    if args.fit_repeats is None:
        args.fit_repeats = 1 if args.quick else 3
    if args.repeats is None:
        args.repeats = 1 if args.quick else 5
    if args.out is None:
        args.out = (os.path.join(tempfile.gettempdir(), "super_sparse_quick.json") if args.quick
                    else os.path.join(HERE, "results", "super_sparse_cpu.json"))
    if args.m > args.sizes[0]:
        p.error(f"--m {args.m} is larger than the smallest size {args.sizes[0]}")

    from sklearn.svm import SVC

    from ppl_sbl.models import super_sparse as ss  # importing ppl_sbl turns float64 on

    env = environment("sklearn")
    log(f"# super-sparse machines vs SVC (RBF), training and test time  {env['date']}  backend={env['jax_backend']}  "
        f"cpus={env['cpu_count']}  load={env['load_average']}  x64={env['x64']}  XLA_FLAGS={env['xla_flags']!r}")
    log(f"# make_classification d={args.features}, n in {args.sizes}, {args.n_test} held-out points; m={args.m}, "
        f"at most {args.steps} prototype steps; gamma = 1 / (d var X); SVC C=1")
    log("# JIT compile time EXCLUDED from the timed fits: an untimed 1-step fit of the same shapes runs first at "
        f"each n; training time = median of up to {args.fit_repeats} runs (fewer past {FIT_REPEAT_CAP_S:.0f} s); "
        f"test time = median of {args.repeats} decision_function calls on all held-out points")
    out = args.out
    record = {"benchmark": "super-sparse machines (m virtual prototypes) vs scikit-learn SVC (RBF): training and "
                           "test time", "environment": env, "args": vars(args), "methods": list(METHODS),
              "rows": [], "stopped": {}, "partial": True}

    def save(announce=False):  # after every size too: an interrupted run leaves what it measured
        write_record(record, out, announce=announce)

    Xp, yp, X_test, y_test = pool(args.sizes[-1], args.n_test, args.features, args.seed)
    finished = {k: [] for k in METHODS}  # (n, seconds) per method
    stopped = record["stopped"]

    # the first (compiling) call, at the smallest n: a whole fit on the labels, compile included
    n0 = args.sizes[0]
    X0, y0 = Xp[:n0], yp[:n0]
    gamma0 = 1.0 / (X0.shape[1] * X0.var())
    first, first_seconds = timed(lambda: ss.fit(X0, y0, m=args.m, gamma=gamma0, max_steps=args.steps, seed=args.seed))
    record["first_call"] = {"n": n0, "method": "labels", "seconds": first_seconds, "steps": int(first.steps)}
    log(f"# first (compiling) call, super-sparse on labels at n={n0}: {first_seconds:.2f} s ({first.steps} steps); "
        "not in the table below")

    log(f"\n{'n':>6} | {'SVC s':>8} {'SVs':>6} | {'reduction s':>11} {'steps':>5} {'stop':>9} | {'SVC+red s':>9} | "
        f"{'labels s':>8} {'steps':>5} {'stop':>9} | {'warm-up s':>9} | {'AUC SVC':>7} {'red':>6} {'labels':>6}")
    for n in args.sizes:
        X, y = Xp[:n], yp[:n]
        gamma = 1.0 / (X.shape[1] * X.var())
        row = {"n": n, "gamma": float(gamma)}
        svc = None
        if "svc" not in stopped:
            sec, svc = fit_time(lambda: SVC(kernel="rbf", gamma=gamma, C=1.0).fit(X, y), args.fit_repeats)
            f_svc = svc.decision_function(X_test)
            row["svc"] = {"seconds": sec, "n_sv": int(len(svc.support_)),
                          "evaluations_per_test_point": int(len(svc.support_)),
                          "test_seconds": median_time(lambda: svc.decision_function(X_test), args.repeats),
                          **scores(y_test, f_svc)}
            finished["svc"].append((n, sec))
        if "labels" not in stopped or svc is not None:
            # compiles for these shapes
            _, row["warmup_seconds"] = timed(lambda: ss.fit(X, y, m=args.m, gamma=gamma, max_steps=1, seed=args.seed))
        if svc is not None and "reduction" not in stopped:
            sec, res = fit_time(lambda: ss.fit_to_decision_values(svc, X, m=args.m, gamma=gamma,
                                                                  max_steps=args.steps, seed=args.seed),
                                args.fit_repeats)
            row["reduction"] = prototype_row(res, sec, X_test, y_test, args)
            # the decision values on the training set are part of the reduction's time
            row["reduction"]["fit_seconds_last_run"] = float(res.seconds)
            row["svc_plus_reduction"] = {"seconds": row["svc"]["seconds"] + sec}
            finished["reduction"].append((n, sec))
            finished["svc_plus_reduction"].append((n, row["svc_plus_reduction"]["seconds"]))
        if "labels" not in stopped:
            sec, res = fit_time(lambda: ss.fit(X, y, m=args.m, gamma=gamma, max_steps=args.steps, seed=args.seed),
                                args.fit_repeats)
            row["labels"] = prototype_row(res, sec, X_test, y_test, args)
            finished["labels"].append((n, sec))
        record["rows"].append(row)

        def cell(key, width, fmt):
            return format(row[key]["seconds"], fmt).rjust(width) if key in row else "-".rjust(width)

        def steps(key):
            return f"{row[key]['steps']:>5} {row[key]['stop_reason']:>9}" if key in row else f"{'-':>5} {'-':>9}"

        def auc(key, width):
            return f"{row[key]['test_auc']:.4f}".rjust(width) if key in row else "-".rjust(width)

        log(f"{n:>6} | {cell('svc', 8, '.3f')} {row['svc']['n_sv'] if 'svc' in row else '-':>6} | "
            f"{cell('reduction', 11, '.3f')} {steps('reduction')} | {cell('svc_plus_reduction', 9, '.3f')} | "
            f"{cell('labels', 8, '.3f')} {steps('labels')} | {row.get('warmup_seconds', math.nan):9.2f} | "
            f"{auc('svc', 7)} {auc('reduction', 6)} {auc('labels', 6)}")

        # stop growing a method whose next fit is estimated (growth so far, slope at least 1) to exceed the budget
        nxt = [s for s in args.sizes if s > n]
        for key in ("svc", "reduction", "labels"):
            pts = finished[key]
            if key in stopped or not pts or not nxt or pts[-1][0] != n:
                continue
            b = slope(pts)
            estimate = pts[-1][1] * (nxt[0] / n) ** max(2.0 if b is None else b, 1.0)
            if estimate > args.budget:
                stopped[key] = (f"stopped before n={nxt[0]}: one fit estimated at {estimate:.0f} s > budget "
                                f"{args.budget:.0f} s")
                log(f"  {key}: {stopped[key]}")
        if "svc" in stopped and "reduction" not in stopped:
            stopped["reduction"] = "stopped with the SVC (the reduction needs it)"
        save()
    for key in ("reduction", "svc_plus_reduction"):
        if "svc" in stopped and key not in stopped:
            stopped[key] = "stopped with the SVC"

    # slopes and ratios
    record["slopes"] = {k: slope(v) for k, v in finished.items()}
    record["sizes_finished"] = {k: [q[0] for q in v] for k, v in finished.items()}
    ratios = []
    for row in record["rows"]:
        r = {"n": row["n"]}
        if "svc" in row and "labels" in row:
            r["train_svc_over_labels"] = row["svc"]["seconds"] / row["labels"]["seconds"]
            r["test_speedup_labels"] = row["svc"]["test_seconds"] / row["labels"]["test_seconds"]
            r["test_auc_svc_minus_labels"] = row["svc"]["test_auc"] - row["labels"]["test_auc"]
        if "svc" in row and "reduction" in row:
            r["train_svc_over_reduction"] = row["svc"]["seconds"] / row["reduction"]["seconds"]
            r["train_svc_plus_reduction_over_svc"] = row["svc_plus_reduction"]["seconds"] / row["svc"]["seconds"]
            r["test_evaluations_svc_over_m"] = row["svc"]["n_sv"] / row["reduction"]["m"]
            r["test_speedup_reduction"] = row["svc"]["test_seconds"] / row["reduction"]["test_seconds"]
            r["test_auc_svc_minus_reduction"] = row["svc"]["test_auc"] - row["reduction"]["test_auc"]
        if "svc_plus_reduction" in row and "labels" in row:
            r["train_svc_plus_reduction_over_labels"] = row["svc_plus_reduction"]["seconds"] / row["labels"]["seconds"]
        ratios.append(r)
    record["ratios"] = ratios

    log(f"\n# test time on {args.n_test} held-out points (median of {args.repeats}); evaluations = similarity "
        "evaluations per test point")
    log(f"{'n':>6} | {'SVC evals':>9} {'m':>3} {'ratio':>6} | {'SVC ms':>8} {'red ms':>7} {'labels ms':>9} | "
        f"{'speed-up red':>12} {'labels':>6} | {'acc SVC':>7} {'red':>6} {'labels':>6}")
    for row, r in zip(record["rows"], ratios):
        if "svc" not in row or "reduction" not in row or "labels" not in row:
            continue
        s, red, lab = row["svc"], row["reduction"], row["labels"]
        log(f"{row['n']:>6} | {s['n_sv']:>9} {red['m']:>3} {r['test_evaluations_svc_over_m']:>6.1f} | "
            f"{1e3 * s['test_seconds']:>8.2f} {1e3 * red['test_seconds']:>7.2f} {1e3 * lab['test_seconds']:>9.2f} | "
            f"{r['test_speedup_reduction']:>12.1f} {r['test_speedup_labels']:>6.1f} | "
            f"{s['test_accuracy']:>7.4f} {red['test_accuracy']:>6.4f} {lab['test_accuracy']:>6.4f}")
    log("\nratios (training: SVC time / super-sparse time; > 1 means super-sparse trains faster):")
    for r in ratios:
        parts = [f"n={r['n']:>6}:"]
        if "train_svc_over_labels" in r:
            parts.append(f"SVC / labels {r['train_svc_over_labels']:.2f}")
        if "train_svc_over_reduction" in r:
            parts.append(f"SVC / reduction {r['train_svc_over_reduction']:.2f}")
            parts.append(f"(SVC + reduction) / SVC {r['train_svc_plus_reduction_over_svc']:.2f}")
        if "train_svc_plus_reduction_over_labels" in r:
            parts.append(f"(SVC + reduction) / labels {r['train_svc_plus_reduction_over_labels']:.2f}")
        if "test_speedup_reduction" in r:
            parts.append(f"| test: SVs / m {r['test_evaluations_svc_over_m']:.1f}, speed-up {r['test_speedup_reduction']:.1f}x "
                         f"(reduction) {r['test_speedup_labels']:.1f}x (labels), AUC SVC - reduction "
                         f"{r['test_auc_svc_minus_reduction']:+.4f}, SVC - labels {r['test_auc_svc_minus_labels']:+.4f}")
        log("  " + " ".join(parts))
    log("log-log slopes of training time in n (sizes finished): " + ", ".join(
        f"{k} {v:.2f} (n {record['sizes_finished'][k]})" if v is not None else f"{k} -" for k, v in record["slopes"].items()))
    for key, why in stopped.items():
        log(f"  {key}: {why}")
    log(f"first (compiling) call at n={n0}: {first_seconds:.2f} s, excluded from the timings above")
    record["partial"] = False
    save(announce=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
