"""The ARD models' default fit under vague and proper hyperpriors: its ELBO against the sweep's.

Not a test (``tests/test_benchmarks_proper_priors.py`` runs ``--quick``). For each model and prior
the script fits:

* ``before``: the fast schedule with the rule of the limit a0 = b0 -> 0 for every prior (a
  coefficient enters only where q^2 > s and the alignment test allows it), what ``CAVI(model)``
  ran for every prior before the rule by the prior (:func:`ppl_sbl.fast_ard.schedule` with
  ``entry="supported"`` on the model's own likelihood factor, built here as the model's fast
  function builds it; checked by running the same replica with the rule by the prior against
  ``CAVI(model, schedule="fast")``);
* ``default``: ``CAVI(model)`` as it is (``schedule="auto"``: the fast schedule under vague
  priors, the sweep under proper ones);
* ``fast``: ``CAVI(model, schedule="fast")`` (the exact comparison under proper priors);
* ``sweep``: ``CAVI(model, schedule="sweep")``, the reference;
* ``refined``: ``default.refine()``, the default fit continued with the unpruned sweep.

Each arm runs ``--repeats`` times; the record keeps the first call's seconds (compilation included
where the arm compiles) and the fastest call's. The gap of an arm is (ELBO_sweep - ELBO_arm) /
|ELBO_sweep|; the goal is a default gap within 0.5% at the proper priors.

Problems: ``rvm.regression`` and ``robust_rvm.regression`` on the noisy sinc (RBF width 5.55 on
the standardised input, a bias column; N = 100), ``rvm.classification`` and
``robust_rvm.classification`` on Ripley's training data (RBF width 4, a bias; N = 250). Priors:
each model's default (its vague shape, rates on the data's scale), and a0 = b0 = 1e-2 and 1 (given
as absolute rates; the noise and weight priors at their defaults). ``--quick``: the two RVM
models only, sinc N = 30, every fifth Ripley point (N = 50), one call per arm. The arms run in the
order sweep, fast, default, before, refined, so the default's and the refinement's sweeps are
compiled by then (the sweep arm's first call holds the compilation).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for ``benchmarks.timing``

from benchmarks.timing import environment, fmt, log, set_blas_threads, write_record  # noqa: E402

MODELS = ("rvm.regression", "rvm.classification", "robust_rvm.regression", "robust_rvm.classification")
PRIORS = ("default", 1e-2, 1.0)
GOAL = 5e-3  # the default fit's largest relative gap to the sweep at the proper priors


def problems(quick):
    """{model name: (model, Phi, t)}."""
    import numpy as np

    from ppl_sbl import basis, datasets
    from ppl_sbl.models import robust_rvm, rvm

    d = datasets.sinc(30 if quick else 100, 10, seed=0)
    sinc = basis.rbf(d.X_train, delta=5.55, bias=True), np.asarray(d.t_train)
    r = datasets.ripley()
    rows = np.arange(0, 250, 5 if quick else 1)
    ripley = basis.rbf(r.X_train[rows], delta=4.0, bias=True), np.asarray(r.t_train[rows], dtype=np.float64)
    return {"rvm.regression": (rvm.regression, *sinc), "rvm.classification": (rvm.classification, *ripley),
            "robust_rvm.regression": (robust_rvm.regression, *sinc),
            "robust_rvm.classification": (robust_rvm.classification, *ripley)}


def hyper(prior):
    return {} if prior == "default" else {"a0": prior, "b0": prior}


def limit_rule_fit(name, data, tol, max_passes, entry):
    """The fast schedule on the model's likelihood factor, as the model's fast function sets it up
    from its prepared ``data`` (a fast result's), with the entry rule ``entry``: its ELBO."""
    import numpy as np

    from ppl_sbl import fast_ard

    common = dict(tol=tol, max_passes=max_passes, entry=entry)
    if name == "rvm.regression":
        e0, f0 = float(data.lik.e0), float(data.lik.f0)
        s = math.sqrt(f0 / e0)
        factor = fast_ard.GaussianNoise(np.asarray(data.t) / s, e0, e0)
        return fast_ard.schedule(np.asarray(data.Phi), factor, a0=float(data.a0), b0=np.asarray(data.b0),
                                 target_scale=s, **common).elbo
    if name == "rvm.classification":
        factor = fast_ard.JaakkolaJordan(np.asarray(data.t))
        return fast_ard.schedule(np.asarray(data.Phi), factor, a0=float(data.a0), b0=np.asarray(data.b0), **common).elbo
    a0, b0 = float(data.base.a0), np.asarray(data.base.b0)
    if name == "robust_rvm.regression":
        e0, f0 = float(data.e0), float(data.f0)
        s = math.sqrt(f0 / e0)
        factor = fast_ard.RobustGaussianNoise(np.asarray(data.t) / s, float(data.c), float(data.d), e0, e0)
        return fast_ard.schedule(np.asarray(data.Phi), factor, a0=a0, b0=b0, target_scale=s, **common).elbo
    factor = fast_ard.RobustJaakkolaJordan(np.asarray(data.t), float(data.c), float(data.d))
    return fast_ard.schedule(np.asarray(data.Phi), factor, a0=a0, b0=b0, **common).elbo


def timed_calls(fn, repeats):
    """(last value, first call's seconds, fastest call's seconds) of ``repeats`` calls of ``fn``."""
    seconds, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        seconds.append(time.perf_counter() - start)
    return value, seconds[0], min(seconds)


def measure(name, model, Phi, t, prior, repeats):
    import warnings

    import ppl_sbl

    kw = hyper(prior)
    arms = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an unconverged arm is recorded as such
        for arm, schedule in (("sweep", "sweep"), ("fast", "fast"), ("default", "auto")):
            cavi = ppl_sbl.CAVI(model, schedule=schedule, progress_bar=False)
            res, first, best = timed_calls(lambda: cavi.run(Phi, t, **kw), repeats)
            arms[arm] = {"result": res, "elbo": res.elbo, "schedule": res.schedule, "converged": res.converged,
                         "num_active": res.num_active, "num_relevant": int(res.relevant.sum()),
                         "first_seconds": first, "best_seconds": best}
        fast = arms["fast"]["result"]
        tol, passes = fast.tol, ppl_sbl.CAVI(model).max_sweeps
        elbo, first, best = timed_calls(lambda: limit_rule_fit(name, fast.data, tol, passes, "supported"), repeats)
        arms["before"] = {"elbo": elbo, "schedule": "fast (q^2 > s)", "first_seconds": first, "best_seconds": best}
        replica = limit_rule_fit(name, fast.data, tol, passes, None)
        refined, first, best = timed_calls(lambda: arms["default"]["result"].refine(), repeats)
        arms["refined"] = {"elbo": refined.elbo, "schedule": refined.schedule, "converged": refined.converged,
                           "refined_by": refined.refined_by, "num_sweeps": refined.num_sweeps - 1,
                           "first_seconds": first, "best_seconds": best}
    sweep = arms["sweep"]["elbo"]
    for arm in arms.values():
        arm.pop("result", None)
        arm["gap"] = (sweep - arm["elbo"]) / abs(sweep)
    return {"model": name, "prior": prior, "vague": prior == "default", "N": int(Phi.shape[0]), "M": int(Phi.shape[1]),
            "arms": arms, "replica_relative_difference": abs(replica - fast.elbo) / abs(fast.elbo),
            "goal_met": None if prior == "default" else bool(arms["default"]["gap"] <= GOAL)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="sinc N = 30, Ripley N = 50, one call per arm")
    p.add_argument("--models", nargs="+", default=None, choices=MODELS,
                   help="default: all four (quick: rvm.regression, rvm.classification)")
    p.add_argument("--repeats", type=int, default=None, help="calls per arm (default 2; quick 1)")
    p.add_argument("--blas-threads", type=int, default=1, help="OPENBLAS_NUM_THREADS (0: as set; default 1)")
    p.add_argument("--out", default=None, help="JSON record (default benchmarks/results/proper_priors_cpu.json)")
    args = p.parse_args(argv)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 2
    if args.models is None:
        args.models = list(MODELS[:2] if args.quick else MODELS)
    if args.out is None:
        if args.quick:
            p.error("--quick needs --out (the full record lives in benchmarks/results)")
        args.out = os.path.join(HERE, "results", "proper_priors_cpu.json")
    set_blas_threads(args.blas_threads)

    import ppl_sbl  # noqa: F401  (float64 on)

    env = environment()
    log(f"# the default fit under vague and proper priors  {env['date']}  backend={env['jax_backend']}  "
        f"cpus={env['cpu_count']}  load={env['load_average']}")
    log("# gap = (ELBO_sweep - ELBO) / |ELBO_sweep|; before: the fast schedule with q^2 > s for every prior; fast: "
        f"schedule='fast'; goal: default within {GOAL:.1%} at the proper priors; seconds (s): the fastest of "
        f"{args.repeats} call(s)")
    header = (f"{'model':26s} {'a0=b0':>7s} {'before':>10s} {'default':>10s} {'sweep':>10s} {'refined':>10s} "
              f"{'gap before':>10s} {'gap default':>11s} {'gap fast':>9s} {'default ran':>11s} {'s before':>8s} "
              f"{'s default':>9s} {'s fast':>7s} {'s sweep':>8s} {'s refine':>8s}")
    log(header)
    rows = []
    record = {"benchmark": "the ARD models' default fit under vague and proper priors", "args": vars(args),
              "environment": env, "goal": GOAL, "rows": rows}
    for name, (model, Phi, t) in problems(args.quick).items():
        if name not in args.models:
            continue
        for prior in PRIORS:
            row = measure(name, model, Phi, t, prior, args.repeats)
            rows.append(row)
            a = row["arms"]
            log(f"{name:26s} {str(prior):>7s} {a['before']['elbo']:10.2f} {a['default']['elbo']:10.2f} "
                f"{a['sweep']['elbo']:10.2f} {a['refined']['elbo']:10.2f} {a['before']['gap']:10.3%} "
                f"{a['default']['gap']:11.4%} {a['fast']['gap']:9.4%} {a['default']['schedule']:>11s} "
                f"{a['before']['best_seconds']:8.2f} {a['default']['best_seconds']:9.2f} {a['fast']['best_seconds']:7.2f} "
                f"{a['sweep']['best_seconds']:8.2f} {a['refined']['best_seconds']:8.2f}")
            write_record(record, args.out, announce=False)
    proper = [r for r in rows if r["goal_met"] is not None]
    record["goal_met"] = all(r["goal_met"] for r in proper)
    record["worst_proper_gap"] = max((r["arms"]["default"]["gap"] for r in proper), default=None)
    log(f"# worst default gap at the proper priors: {fmt(record['worst_proper_gap'], '.4%')} "
        f"({'within' if record['goal_met'] else 'above'} the goal)")
    write_record(record, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
