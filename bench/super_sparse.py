"""Speed of super-sparse learning against scikit-learn's SVC, side by side in one process.

Not a test (``tests/test_bench_super_sparse.py`` runs ``--quick``). Generated two-class data
(``make_classification``: ``--features`` features, 5 informative, 5% of the labels flipped,
``random_state = seed``), RBF similarity with scikit-learn's ``gamma="scale"``
(``1 / (d var X)``). For each training size n:

* **SVC**: ``SVC(kernel="rbf", C=1).fit`` (LIBSVM).
* **reduction**: :func:`models.super_sparse.fit_to_decision_values` of that SVC to ``--m``
  virtual prototypes (the paper's recipe; it needs the SVC first, so SVC + reduction is the
  cost of the pipeline).
* **super-sparse on labels**: :func:`models.super_sparse.fit` straight on the labels -1/+1 (no
  SVC needed).

Each prototype fit runs at most ``--steps`` gradient steps (its steps and stop reason are
recorded). JIT compilation is excluded: a warm-up fit on the smallest size runs first (its time
is recorded as ``first_call_seconds``); a new n compiles again, so each timed fit is preceded by
one untimed fit of the same shapes with a single step. Test-time cost on ``--n-test`` held-out
points: similarity evaluations per point (support vectors against m) and the wall clock of
``decision_function`` (median of 5), with the test AUC of each machine so the speed is not bought
with accuracy. The log-log slope of training time against n is fitted per method. Where one fit
would exceed ``--budget`` seconds (estimated from the growth so far) the method stops growing n
and says so.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from _common import environment, loglog_fit  # noqa: E402


def log(*a):
    print(*a, flush=True)


def data(n, n_test, d, seed):
    import numpy as np
    from sklearn.datasets import make_classification

    X, t = make_classification(n + n_test, n_features=d, n_informative=5, n_redundant=2, flip_y=0.05,
                               class_sep=1.0, random_state=seed)
    y = np.where(t == 1, 1.0, -1.0)
    return X[:n], y[:n], X[n:], y[n:]


def median_time(fn, repeats=5):
    import numpy as np

    fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="sizes 300 600, 1000 test points, 50 steps")
    p.add_argument("--sizes", type=int, nargs="+", default=None, help="training sizes (default 1000 ... 20000)")
    p.add_argument("--n-test", type=int, default=None, help="held-out points (default 5000)")
    p.add_argument("--features", type=int, default=10)
    p.add_argument("--m", type=int, default=10, help="virtual prototypes (default 10)")
    p.add_argument("--steps", type=int, default=None, help="gradient steps per prototype fit at most (default 200)")
    p.add_argument("--budget", type=float, default=600.0, help="seconds one fit may take (default 600)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON record (default bench/results/super_sparse_cpu.json)")
    args = p.parse_args(argv)
    if args.sizes is None:
        args.sizes = [300, 600] if args.quick else [1000, 2000, 5000, 10000, 20000]
    if args.n_test is None:
        args.n_test = 1000 if args.quick else 5000
    if args.steps is None:
        args.steps = 50 if args.quick else 200
    if args.out is None:
        if args.quick:
            p.error("--quick needs --out (the full record lives in bench/results)")
        args.out = os.path.join(HERE, "results", "super_sparse_cpu.json")

    from sklearn.metrics import roc_auc_score
    from sklearn.svm import SVC

    import ppl_sbl  # noqa: F401  (float64 on)
    from models import super_sparse as ss

    env = environment("sklearn")
    log(f"# super-sparse vs SVC speed  {env['date']}  backend={env['jax_backend']}  cpus={env['cpu_count']}  "
        f"load={env['load_average']}")
    log(f"# d={args.features}, m={args.m}, at most {args.steps} prototype steps, {args.n_test} test points; "
        "JIT compilation excluded (an untimed fit of the same shapes runs first)")
    record = {"args": vars(args), "environment": env, "sizes": [], "methods": ["svc", "reduction", "labels"]}
    methods = {"svc": [], "reduction": [], "labels": []}
    stopped = {}

    def first_fit():
        X, y, _, _ = data(args.sizes[0], 10, args.features, args.seed)
        gamma = 1.0 / (X.shape[1] * X.var())
        t = time.perf_counter()
        ss.fit(X, y, m=args.m, gamma=gamma, max_steps=2, seed=args.seed)
        return time.perf_counter() - t

    record["first_call_seconds"] = first_fit()
    for n in args.sizes:
        X, y, X_test, y_test = data(n, args.n_test, args.features, args.seed)
        gamma = 1.0 / (X.shape[1] * X.var())
        row = {"n": n, "gamma": gamma}
        # SVC
        if "svc" not in stopped:
            t = time.perf_counter()
            svc = SVC(kernel="rbf", gamma=gamma, C=1.0).fit(X, y)
            row["svc"] = {"seconds": time.perf_counter() - t, "n_sv": int(len(svc.support_)),
                          "test_auc": float(roc_auc_score(y_test, svc.decision_function(X_test))),
                          "test_seconds": median_time(lambda: svc.decision_function(X_test))}
            methods["svc"].append((n, row["svc"]["seconds"]))
        for key in ("reduction", "labels"):
            if key in stopped or (key == "reduction" and "svc" not in row):
                continue
            target = svc.decision_function(X) if key == "reduction" else y
            ss.fit(X, target, m=args.m, gamma=gamma, max_steps=1, seed=args.seed)  # compile for these shapes
            t = time.perf_counter()
            res = ss.fit(X, target, m=args.m, gamma=gamma, max_steps=args.steps, seed=args.seed)
            seconds = time.perf_counter() - t
            row[key] = {"seconds": seconds, "steps": res.steps, "stop_reason": res.stop_reason, "m": res.m,
                        "test_auc": float(roc_auc_score(y_test, res.decision_function(X_test))),
                        "test_seconds": median_time(lambda: res.decision_function(X_test))}
            methods[key].append((n, seconds))
        record["sizes"].append(row)
        line = f"n={n:6d}"
        if "svc" in row:
            s = row["svc"]
            line += f" | SVC {s['seconds']:8.2f} s, {s['n_sv']} SVs, AUC {s['test_auc']:.4f}"
        for key in ("reduction", "labels"):
            if key in row:
                r = row[key]
                line += (f" | {key} {r['seconds']:7.2f} s ({r['steps']} steps, {r['stop_reason']}), "
                         f"AUC {r['test_auc']:.4f}")
        log(line)
        # stop growing a method whose next fit would exceed the budget (growth fitted so far)
        for key, pts in methods.items():
            if key in stopped or not pts:
                continue
            fit = loglog_fit([q[0] for q in pts], [q[1] for q in pts]) if len(pts) > 1 else (2.0, None)
            nxt = [m for m in args.sizes if m > n]
            if nxt and pts[-1][1] * (nxt[0] / n) ** max(fit[0], 1.0) > args.budget:
                stopped[key] = f"stopped before n={nxt[0]}: estimated above {args.budget:.0f} s"
                log(f"  {key}: {stopped[key]}")
    record["stopped"] = stopped
    slopes = {k: loglog_fit([q[0] for q in v], [q[1] for q in v]) for k, v in methods.items()}
    record["slopes"] = {k: (None if s is None else s[0]) for k, s in slopes.items()}
    ratios = []
    for row in record["sizes"]:
        if "svc" in row and "labels" in row and "reduction" in row:
            ratios.append({"n": row["n"],
                           "svc_over_labels": row["svc"]["seconds"] / row["labels"]["seconds"],
                           "svc_plus_reduction_over_svc": (row["svc"]["seconds"] + row["reduction"]["seconds"])
                           / row["svc"]["seconds"],
                           "test_evaluations_svc_over_m": row["svc"]["n_sv"] / args.m,
                           "test_time_svc_over_reduction": row["svc"]["test_seconds"] / row["reduction"]["test_seconds"],
                           "test_auc_svc_minus_reduction": row["svc"]["test_auc"] - row["reduction"]["test_auc"]})
    record["ratios"] = ratios
    log("\nratios:")
    for r in ratios:
        log(f"n={r['n']:6d}: training SVC / super-sparse on labels {r['svc_over_labels']:.2f}; "
            f"(SVC + reduction) / SVC {r['svc_plus_reduction_over_svc']:.2f}; test-time evaluations "
            f"SVs / m {r['test_evaluations_svc_over_m']:.1f}, wall clock SVC / reduced "
            f"{r['test_time_svc_over_reduction']:.1f}; AUC SVC - reduced {r['test_auc_svc_minus_reduction']:+.4f}")
    log("log-log slopes of training time: " + ", ".join(f"{k} {v:.2f}" for k, v in record["slopes"].items()
                                                          if v is not None))
    log(f"first (compiling) call: {record['first_call_seconds']:.1f} s")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(record, fh, indent=1, default=float)
    log(f"record: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
