"""Benchmark: robust RVM width selection by ELBO (one compiled call) against loops, RVM and SVC CV.

Not a test. The robust RVM paper (Hwang & Jeong 2015, Tables 3, 6 and 7) picks the RBF width of
the robust RVM (RRVM) by its variational lower bound, one fit per width, while the SVM and the
RVM pick theirs by 5-fold cross-validation; it reports "model selection" and "model training"
times separately. This benchmark times the same protocol.

Data
    * Ripley: the 250 + 1000 points of Ripley's synthetic problem pooled (1250 points, 2 inputs;
      ``datasets.ripley_pooled``): 750 training points;
    * biopsy: the Wisconsin breast cancer data (MASS ``biopsy``, 683 rows, 9 inputs;
      ``datasets.biopsy``): 410 training points;
    each split at random 60/40 into training and test sets with ``--label-noise`` (default 10%) of
    the training labels flipped (``datasets.split_with_label_noise``, seed ``--seed``), inputs
    standardised with the whole training set. The arms run on the first N points of the
    (randomly ordered) training set for each N in ``--sizes`` (0: all of them), always against
    the whole test set. Basis: ``basis.rbf(X, X_train, delta, bias=True)``, one centre per
    training point plus a bias (M = N + 1). Widths: ``--widths`` (20) values delta = s / d, s on
    ``geomspace(--s-min, --s-max)`` (default 0.1 to 30), d the number of inputs (s = 1 is
    scikit-learn's ``gamma="scale"`` on standardised inputs); scikit-learn's gamma equals our
    delta, so every method sees the same kernels.

Arms (every RRVM and RVM fit with the same ``--tol`` and ``--max-sweeps``)
    (a) RRVM, the grid in one compiled call: ``ppl_sbl.fit_grid(robust_rvm.classification, designs,
        t)`` with its default batching (no pruning): on a CPU the widths run one after the other
        (``lax.map``) inside the one call, on an accelerator side by side (``vmap``); the first
        call (incl. jit) and a second call (every shape compiled: excl. jit). The width with the
        largest ELBO (the bound (17)) is chosen.
    (a2) the same with every width vmapped side by side (``batch_size`` = number of widths), the
        accelerator default, timed on this backend for comparison (``--no-all-lanes`` skips it).
    (b) RRVM, Python loop of the pruned sweep: ``CAVI(robust_rvm.classification,
        schedule="sweep").run`` (with CAVI's default pruning) over the same widths, one after the other.
    (c) RRVM, Python loop of the jitted ``ppl_sbl.fit`` (no pruning): the same algorithm as (a),
        one width at a time; (a) and (c) must agree width by width (sweeps and ELBO).
    (d) RVM (``rvm.classification``, ``CAVI(..., schedule="sweep").run`` with pruning): width by 5-fold
        cross-validation error rate over the same widths (100 fits), then a refit on the whole
        training set at the chosen width.
    (e) scikit-learn ``SVC(kernel="rbf")``: ``GridSearchCV`` 5-fold over C in ``--svc-C`` and
        gamma over the same widths, then the refit (``refit_time_``) at the chosen pair.
    The CV folds of (d) and (e) are the same (``StratifiedKFold(5, shuffle=True)``, seed
    ``--seed``). The RRVM's "model training" time is one pruned sweep (``CAVI.run``, ``schedule="sweep"``)
    at its chosen width. (The paper's algorithm is the sweep; CAVI's default schedule, "auto", would
    run the fast schedule of :mod:`ppl_sbl.fast_ard` on these models, so every fit here names the sweep.)

Tolerance: ``--tol 1e-6`` (relative ELBO change), the same for every RRVM and RVM fit, with
``--max-sweeps 3000``: a tighter tolerance makes every arm several times longer, and the chosen
width can move by one grid step with it (benchmarks/README.md, notes).

Compilation: the loops and the CV compile on their first fits (and on pruning's new bucket
sizes); ``jax.monitoring`` reports every compilation and its duration is subtracted to give
"excl. jit". With ``--repeat-loops`` the loops (b) and (c) run a second time, all shapes
compiled, and that wall time is recorded as well. Times are wall clock in one process; CPU times
(all threads) are in the JSON. OpenBLAS runs on one thread (``--blas-threads``): jaxlib's CPU
Cholesky and triangular solves call scipy's OpenBLAS, whose thread pool otherwise competes with
XLA's and makes a small dense triangular solve many times slower at random, which hits the
vmapped grid hardest (one solve per lane per sweep).

Sizes. A sweep of the RRVM costs O(N M^2 + M^3) with M = N + 1, and a fit takes hundreds of
sweeps, so the five arms on all 750 training points of Ripley take long (arm (a) alone runs 20
lanes for as many sweeps as the slowest width needs, twice). The default sizes are 100, 200 and 400 training
points (biopsy's 410 in full: a size within 10% of the training set runs on all of it). Where the
full size is not run, each arm's time is extrapolated to it with a log-log fit over the sizes
(marked '*', not measured), and at the full N the benchmark measures what is cheap: the cost of
one sweep of a single fit and of the 20-lane vmapped sweep (``--probe-sweeps`` sweeps each, after
two warm-up sweeps), which times the sweep counts of the largest size run give a second estimate
for (a) and (c) (marked '+'), and the whole SVC grid search. ``--sizes 100 200 400 0`` runs
everything at the full size too.

Goal (from the issue): the grid in one call (a) no slower than the loop over the same widths, on
CPU. It is judged excl. jit at every size: (a)'s second call against the loop (b) (what a user
writes) and against the loop (c) (the same algorithm); the JSON records both, and the lane
statistics that explain the outcome (a vmapped ``while_loop`` runs every lane until the slowest
width has converged, and cannot prune).

The table prints, per data set and size, the arms' times, their ratios, the chosen widths and the
test error rates, the per-width fits, then a summary in the form of the paper's Table 3 (model
selection and model training seconds). A JSON record goes to
``benchmarks/results/robust_rvm_<backend>.json``.

Usage::

    python benchmarks/robust_rvm.py --quick          # smoke run: 40 and 80 training points, 4 widths
    python benchmarks/robust_rvm.py                  # benchmarks/results/robust_rvm_cpu.json
    python benchmarks/robust_rvm.py --datasets biopsy --sizes 100 200 0 --tol 1e-7
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for ``benchmarks.timing``

from benchmarks.timing import (CompileClock, Timer, environment, fmt, load_average, log, loglog_predict,  # noqa: E402
                               run_chained, set_blas_threads, write_record)

DATASETS = ("ripley", "biopsy")


# ----------------------------------------------------------------------------------------------
# Set-up
# ----------------------------------------------------------------------------------------------
def load(name, *, label_noise, seed, n_train=None, n_test=None):
    """The data set split 60/40 with flipped training labels; optionally the first ``n_train``
    training and ``n_test`` test points only (the split is random, so these are random too)."""
    from ppl_sbl import datasets

    if name == "ripley":
        X, t = datasets.ripley_pooled()
        d = datasets.split_with_label_noise(X, t, label_noise=label_noise, seed=seed, name="Ripley pooled")
    elif name == "biopsy":
        d = datasets.biopsy(label_noise=label_noise, seed=seed)
    else:
        raise ValueError(f"unknown data set {name!r}; choose from {DATASETS}.")
    # a subsample keeps the standardisation of the full training set
    a, b = (n_train or len(d.t_train)), (n_test or len(d.t_test))
    return d._replace(X_train=d.X_train[:a], t_train=d.t_train[:a], X_test=d.X_test[:b], t_test=d.t_test[:b])


def width_grid(args, dims):
    import numpy as np

    return [float(s / dims) for s in np.geomspace(args.s_min, args.s_max, args.widths)]


def error_rate(p, t):
    import numpy as np

    return float(np.mean((np.asarray(p) > 0.5) != (np.asarray(t) > 0.5)))


def stratified_folds(t, k, seed):
    import numpy as np
    from sklearn.model_selection import StratifiedKFold

    return [(tr, va) for tr, va in StratifiedKFold(k, shuffle=True, random_state=seed).split(np.zeros(len(t)), t)]


# ----------------------------------------------------------------------------------------------
# The arms
# ----------------------------------------------------------------------------------------------
def rrvm_vmapped(designs, t, names, *, tol, max_sweeps, clock, batch_size=None):
    """(a) fit_grid over all widths: first call (incl. jit), second call (excl. jit).
    ``batch_size``: fit_grid's (None: its default for the backend)."""
    import jax
    import numpy as np

    import ppl_sbl
    from ppl_sbl.models import robust_rvm

    with Timer(clock) as first:
        res1 = ppl_sbl.fit_grid(robust_rvm.classification, designs, t, names=names, tol=tol, max_sweeps=max_sweeps,
                                batch_size=batch_size)
    with Timer(clock) as second:
        res = ppl_sbl.fit_grid(robust_rvm.classification, designs, t, names=names, tol=tol, max_sweeps=max_sweeps,
                               batch_size=batch_size)
    same = all(res1[k].num_sweeps == res[k].num_sweeps and res1[k].elbo == res[k].elbo for k in names)
    sweeps = np.array([res[k].num_sweeps for k in names])
    rec = {
        "batch_size": batch_size,
        "resolved_batch_size": int(batch_size or (1 if jax.default_backend() == "cpu" else len(designs))),
        "first_call": first.record(),
        "second_call": {"seconds": second.wall, "cpu_seconds": second.cpu, "compile_seconds": second.compile,
                        "compilations": second.compilations},
        "seconds_in_jitted_call": float(res[names[0]].seconds),  # fit_grid's own clock (second call)
        "repeat_identical": bool(same),
        "lane_sweeps_max": int(sweeps.max()),
        "lane_sweeps_sum": int(sweeps.sum()),
        # share of the batch's lane-sweeps that did useful work: every lane runs max(sweeps) sweeps
        "lane_utilisation": float(sweeps.sum() / (len(sweeps) * sweeps.max())),
    }
    return rec, res


def rrvm_loop_pruned(designs, t, *, tol, max_sweeps, clock, repeat):
    """(b) CAVI(robust_rvm.classification, schedule="sweep").run (pruning on) width after width."""
    import numpy as np

    import ppl_sbl
    from ppl_sbl.models import robust_rvm

    cavi = ppl_sbl.CAVI(robust_rvm.classification, tol=tol, max_sweeps=max_sweeps, progress_bar=False,
                        schedule="sweep")
    per_width, results = [], []
    with Timer(clock) as total:
        for Phi in designs:
            with Timer(clock) as one:
                res = cavi.run(Phi, t)
            results.append(res)
            per_width.append({"seconds_excl_jit": one.wall - one.compile, "elbo": float(res.elbo),
                              "num_sweeps": int(res.num_sweeps),
                              "converged": bool(res.converged), "num_prunes": len(res.prune_events),
                              "num_active_at_end": int(res.num_active),
                              "relevant": int(np.sum(res.relevant))})
    rec = {"loop": total.record(), "per_width": per_width}
    if repeat:
        with Timer(clock) as again:
            for Phi, r in zip(designs, results):
                res = cavi.run(Phi, t)
                if res.num_sweeps != r.num_sweeps or not np.isclose(res.elbo, r.elbo, rtol=1e-12, atol=0):
                    log(f"  [warn] repeated CAVI run differs: {r.num_sweeps} vs {res.num_sweeps} sweeps, "
                        f"ELBO {r.elbo!r} vs {res.elbo!r}")
        rec["second_loop"] = {"seconds": again.wall, "cpu_seconds": again.cpu, "compile_seconds": again.compile,
                              "compilations": again.compilations}
    return rec, results


_JITTED_FIT = {}


def rrvm_loop_fit(designs, t, *, tol, max_sweeps, clock, repeat):
    """(c) the jitted ``ppl_sbl.fit`` (no pruning), width after width."""
    import jax

    import ppl_sbl
    from ppl_sbl.models import robust_rvm

    guide = robust_rvm.CLASSIFICATION_GUIDE
    cavi = ppl_sbl.CAVI(robust_rvm.classification, schedule="sweep")
    key = (float(tol), int(max_sweeps))
    if key not in _JITTED_FIT:
        _JITTED_FIT[key] = jax.jit(lambda data: ppl_sbl.fit(guide, data, tol=tol, max_sweeps=max_sweeps))
    fit = _JITTED_FIT[key]

    def one(Phi):
        # prepared as fit_grid prepares each design (strongly typed), then fitted and waited for
        _, data = cavi.init(Phi, t)
        return jax.block_until_ready(fit(data))

    per_width, outs = [], []
    with Timer(clock) as total:
        for Phi in designs:
            with Timer(clock) as tm:
                _, elbo, sweeps, converged = one(Phi)
            outs.append((float(elbo), int(sweeps)))
            per_width.append({"seconds_excl_jit": tm.wall - tm.compile, "elbo": float(elbo), "num_sweeps": int(sweeps),
                              "converged": bool(converged)})
    rec = {"loop": total.record(), "per_width": per_width}
    if repeat:
        with Timer(clock) as again:
            for Phi, (elbo, sweeps) in zip(designs, outs):
                _, e2, s2, _ = one(Phi)
                if int(s2) != sweeps or float(e2) != elbo:
                    log(f"  [warn] repeated jitted fit differs: {sweeps} vs {int(s2)} sweeps")
        rec["second_loop"] = {"seconds": again.wall, "cpu_seconds": again.cpu, "compile_seconds": again.compile,
                              "compilations": again.compilations}
    return rec


def rvm_cv(X, t, deltas, folds, *, tol, max_sweeps, clock):
    """(d) RVM: 5-fold CV error over the widths (CAVI.run, the pruned sweep), then the refit."""
    import numpy as np

    import ppl_sbl
    from ppl_sbl import basis
    from ppl_sbl.models import rvm

    cavi = ppl_sbl.CAVI(rvm.classification, tol=tol, max_sweeps=max_sweeps, progress_bar=False, schedule="sweep")
    errors = np.zeros((len(deltas), len(folds)))
    sweeps = np.zeros((len(deltas), len(folds)), dtype=int)
    unconverged = 0
    with Timer(clock) as cv:
        for i, delta in enumerate(deltas):
            for j, (tr, va) in enumerate(folds):
                Phi = basis.rbf(X[tr], delta=delta, bias=True)
                Phi_val = basis.rbf(X[va], X[tr], delta=delta, bias=True)
                res = cavi.run(Phi, t[tr])
                errors[i, j] = error_rate(res.predict(Phi_val), t[va])
                sweeps[i, j] = res.num_sweeps
                unconverged += not res.converged
    mean_error = errors.mean(1)
    best = int(np.argmin(mean_error))  # the first (widest) width on ties
    Phi = basis.rbf(X, delta=deltas[best], bias=True)
    with Timer(clock) as refit:
        res = cavi.run(Phi, t)
    return {
        "selection": cv.record(),
        "fits": len(deltas) * len(folds),
        "cv_error": mean_error.tolist(),
        "cv_sweeps": int(sweeps.sum()),
        "cv_unconverged": int(unconverged),
        "chosen_index": best,
        "chosen_delta": float(deltas[best]),
        "training": refit.record(),
        "refit_sweeps": int(res.num_sweeps),
        "refit_converged": bool(res.converged),
        "refit_relevant": int(np.sum(res.relevant)),
    }, res


def svc_cv(X, t, deltas, Cs, folds):
    """(e) SVC: GridSearchCV over C x gamma on the same folds; selection = search minus refit."""
    import numpy as np
    from sklearn.model_selection import GridSearchCV
    from sklearn.svm import SVC

    search = GridSearchCV(SVC(kernel="rbf"), {"C": list(Cs), "gamma": list(deltas)}, cv=folds, refit=True)
    with Timer() as tm:
        search.fit(X, t)
    best = search.best_params_
    scores = np.asarray(search.cv_results_["mean_test_score"]).reshape(len(Cs), len(deltas))
    return {
        "search_seconds": tm.wall,
        "cpu_seconds": tm.cpu,
        "selection_seconds": tm.wall - float(search.refit_time_),
        "training_seconds": float(search.refit_time_),
        "fits": len(Cs) * len(deltas) * len(folds),
        "C_grid": list(map(float, Cs)),
        # the CV error over the widths at the chosen C (the grid over C as well is not kept)
        "cv_error_at_chosen_C": (1.0 - scores[list(Cs).index(best["C"])]).tolist(),
        "chosen_C": float(best["C"]),
        "chosen_delta": float(best["gamma"]),
        "chosen_index": int(np.argmin(np.abs(np.asarray(deltas) - best["gamma"]))),
        "num_support_vectors": int(search.best_estimator_.n_support_.sum()),
    }, search


# ----------------------------------------------------------------------------------------------
# One data set at one training size
# ----------------------------------------------------------------------------------------------
def run_dataset(name, n, args, clock):
    import numpy as np

    import ppl_sbl
    from ppl_sbl import basis
    from ppl_sbl.models import robust_rvm

    d = load(name, label_noise=args.label_noise, seed=args.seed, n_train=n or None, n_test=args.n_test)
    N, dims = d.X_train.shape
    deltas = width_grid(args, dims)
    names = [f"{x:.6g}" for x in deltas]
    designs = [basis.rbf(d.X_train, delta=x, bias=True) for x in deltas]
    tests = [basis.rbf(d.X_test, d.X_train, delta=x, bias=True) for x in deltas]
    t = d.t_train
    row = {"data": name, "description": d.description, "n_train": int(N), "n_test": int(len(d.t_test)),
           "inputs": int(dims), "m": int(designs[0].shape[1]), "deltas": deltas}
    log(f"\n== {name}: N = {N} training ({args.label_noise:.0%} of the labels flipped), {len(d.t_test)} test, "
        f"{dims} inputs, M = {designs[0].shape[1]}; {len(deltas)} widths delta = {deltas[0]:.4g} .. {deltas[-1]:.4g}")

    # (a) the grid in one compiled call (fit_grid's default batching for the backend), and (a2) all
    # widths side by side (every lane vmapped), for comparison
    a, grid = rrvm_vmapped(designs, t, names, tol=args.tol, max_sweeps=args.max_sweeps, clock=clock)
    log(f"  (a) RRVM fit_grid (default)   : {a['first_call']['seconds_incl_jit']:.2f}s first call "
        f"({a['first_call']['compile_seconds']:.2f}s compiling), {a['second_call']['seconds']:.2f}s second call; "
        f"lanes: max {a['lane_sweeps_max']} sweeps, sum {a['lane_sweeps_sum']}, utilisation {a['lane_utilisation']:.2f}")
    a2 = None
    if args.all_lanes and (args.all_lanes_max_n is None or N <= args.all_lanes_max_n):
        a2, _ = rrvm_vmapped(designs, t, names, tol=args.tol, max_sweeps=args.max_sweeps, clock=clock,
                             batch_size=len(designs))
        log(f"  (a2) fit_grid, all vmapped    : {a2['first_call']['seconds_incl_jit']:.2f}s first call "
            f"({a2['first_call']['compile_seconds']:.2f}s compiling), {a2['second_call']['seconds']:.2f}s second call")
    # (b) the loop of pruned sweeps
    b, pruned = rrvm_loop_pruned(designs, t, tol=args.tol, max_sweeps=args.max_sweeps, clock=clock,
                                 repeat=args.repeat_loops)
    second = f", {b['second_loop']['seconds']:.2f}s second loop" if "second_loop" in b else ""
    log(f"  (b) RRVM loop CAVI.run pruned : {b['loop']['seconds_incl_jit']:.2f}s incl. jit, "
        f"{b['loop']['seconds_excl_jit']:.2f}s excl. ({b['loop']['compile_seconds']:.2f}s compiling "
        f"{b['loop']['compilations']} functions){second}; sweeps sum "
        f"{sum(w['num_sweeps'] for w in b['per_width'])}")
    # (c) the loop of the jitted fit
    c = rrvm_loop_fit(designs, t, tol=args.tol, max_sweeps=args.max_sweeps, clock=clock, repeat=args.repeat_loops)
    second = f", {c['second_loop']['seconds']:.2f}s second loop" if "second_loop" in c else ""
    log(f"  (c) RRVM loop jitted fit      : {c['loop']['seconds_incl_jit']:.2f}s incl. jit, "
        f"{c['loop']['seconds_excl_jit']:.2f}s excl. ({c['loop']['compile_seconds']:.2f}s compiling){second}")

    # per width: ELBO, sweeps, test error; (a) against (c)
    per_width = []
    for i, (key, delta) in enumerate(zip(names, deltas)):
        g = grid[key]
        per_width.append({
            "delta": delta,
            "vmapped": {"elbo": g.elbo, "num_sweeps": g.num_sweeps, "converged": g.converged,
                        "test_error": error_rate(g.predict(tests[i]), d.t_test),
                        "relevant": int(np.sum(g.relevant))},
            "loop_pruned": {**b["per_width"][i], "test_error": error_rate(pruned[i].predict(tests[i]), d.t_test)},
            "loop_fit": c["per_width"][i],
        })
    rel = [abs(w["vmapped"]["elbo"] - w["loop_fit"]["elbo"]) / abs(w["loop_fit"]["elbo"]) for w in per_width]
    agreement = {
        "sweeps_equal": all(w["vmapped"]["num_sweeps"] == w["loop_fit"]["num_sweeps"] for w in per_width),
        "max_relative_elbo_difference": float(max(rel)),
        "pruned_minus_unpruned_elbo": [w["loop_pruned"]["elbo"] - w["vmapped"]["elbo"] for w in per_width],
    }
    chosen = int(np.argmax([w["vmapped"]["elbo"] for w in per_width]))
    chosen_pruned = int(np.argmax([w["loop_pruned"]["elbo"] for w in per_width]))

    # RRVM "model training": one pruned sweep at the chosen width (its first shapes compiled by (b))
    cavi = ppl_sbl.CAVI(robust_rvm.classification, tol=args.tol, max_sweeps=args.max_sweeps, progress_bar=False,
                        schedule="sweep")
    with Timer(clock) as train:
        final = cavi.run(designs[chosen], t)
    rrvm = {
        "chosen_index": chosen,
        "chosen_delta": deltas[chosen],
        "chosen_index_loop_pruned": chosen_pruned,
        "test_error": per_width[chosen]["vmapped"]["test_error"],
        "test_error_default_fit": error_rate(final.predict(tests[chosen]), d.t_test),
        "training": train.record(),
        "training_sweeps": int(final.num_sweeps),
        "relevant": int(np.sum(final.relevant)),
        "all_converged": all(w["vmapped"]["converged"] for w in per_width),
    }
    log(f"  RRVM chosen by ELBO: delta = {deltas[chosen]:.4g} (loop (b): {deltas[chosen_pruned]:.4g}); test error "
        f"{rrvm['test_error']:.4f}; (a) = (c): sweeps equal {agreement['sweeps_equal']}, max rel. ELBO difference "
        f"{agreement['max_relative_elbo_difference']:.2e}")

    # (d), (e) cross-validation on the same folds
    folds = stratified_folds(t, args.folds, args.seed)
    dv, rvm_res = rvm_cv(d.X_train, t, deltas, folds, tol=args.tol, max_sweeps=args.max_sweeps, clock=clock)
    dv["test_error"] = error_rate(rvm_res.predict(basis.rbf(d.X_test, d.X_train, delta=dv["chosen_delta"], bias=True)),
                                  d.t_test)
    log(f"  (d) RVM {args.folds}-fold CV             : {dv['selection']['seconds_incl_jit']:.2f}s incl. jit, "
        f"{dv['selection']['seconds_excl_jit']:.2f}s excl. ({dv['fits']} fits, {dv['cv_unconverged']} unconverged); "
        f"refit {dv['training']['seconds_excl_jit']:.2f}s excl. jit; delta = {dv['chosen_delta']:.4g}; "
        f"test error {dv['test_error']:.4f}")
    e = run_svc(d, deltas, args, folds)
    log(f"  (e) SVC GridSearchCV {args.folds}-fold   : {e['selection_seconds']:.2f}s selection ({e['fits']} fits), "
        f"{e['training_seconds']:.3f}s refit; C = {e['chosen_C']:g}, gamma = {e['chosen_delta']:.4g}; "
        f"test error {e['test_error']:.4f}")

    vm = a["second_call"]["seconds"]
    ratios = {
        "vmapped_over_loop_pruned": vm / b["loop"]["seconds_excl_jit"],
        "vmapped_over_loop_fit": vm / c["loop"]["seconds_excl_jit"],
        "vmapped_over_loop_pruned_incl_jit": a["first_call"]["seconds_incl_jit"] / b["loop"]["seconds_incl_jit"],
        "vmapped_over_loop_fit_incl_jit": a["first_call"]["seconds_incl_jit"] / c["loop"]["seconds_incl_jit"],
        "rrvm_selection_over_rvm_cv": vm / dv["selection"]["seconds_excl_jit"],
        "rrvm_selection_over_svc_cv": vm / e["selection_seconds"],
    }
    if a2 is not None:
        ratios["all_lanes_over_loop_fit"] = a2["second_call"]["seconds"] / c["loop"]["seconds_excl_jit"]
        ratios["all_lanes_over_default"] = a2["second_call"]["seconds"] / vm
    if "second_loop" in b:
        ratios["vmapped_over_second_loop_pruned"] = vm / b["second_loop"]["seconds"]
        ratios["vmapped_over_second_loop_fit"] = vm / c["second_loop"]["seconds"]
    row.update({"vmapped": a, "all_lanes": a2, "loop_pruned": {k: v for k, v in b.items() if k != "per_width"},
                "loop_fit": {k: v for k, v in c.items() if k != "per_width"}, "per_width": per_width,
                "agreement": agreement, "rrvm": rrvm, "rvm": dv, "svc": e, "ratios": ratios,
                "goal_met": ratios["vmapped_over_loop_pruned"] <= 1.0 and ratios["vmapped_over_loop_fit"] <= 1.0})
    return row


def run_svc(d, deltas, args, folds=None):
    folds = stratified_folds(d.t_train, args.folds, args.seed) if folds is None else folds
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        e, search = svc_cv(d.X_train, d.t_train, deltas, args.svc_C, folds)
    e["test_error"] = float(1.0 - search.score(d.X_test, d.t_test))
    return e


# ----------------------------------------------------------------------------------------------
# At the full training size: the cost of one sweep, single and vmapped, and the SVC search
# ----------------------------------------------------------------------------------------------
def probe_full(name, args, clock):
    """Seconds per sweep of one RRVM fit (the jitted sweep of ``CAVI.run``, middle width) and of
    the vmapped sweep over all widths (``jax.vmap`` of the same sweep, what each iteration of
    fit_grid's while_loop computes), at the full training size; and SVC's whole grid search."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import ppl_sbl
    from ppl_sbl import basis
    from ppl_sbl.models import robust_rvm

    d = load(name, label_noise=args.label_noise, seed=args.seed, n_test=args.n_test)
    N, dims = d.X_train.shape
    deltas = width_grid(args, dims)
    cavi = ppl_sbl.CAVI(robust_rvm.classification, schedule="sweep")
    starts = [cavi.init(basis.rbf(d.X_train, delta=x, bias=True), d.t_train) for x in deltas]  # (state, data)
    k = args.probe_sweeps

    def timed(sweep, state, data):
        with Timer(clock) as first:
            state, value = run_chained(sweep, state, data, 1)
        state, value = run_chained(sweep, state, data, 2)
        with Timer() as tm:
            state, value = run_chained(sweep, state, data, k)
        return {"seconds_per_sweep": tm.wall / k, "cpu_per_sweep": tm.cpu / k,
                "first_call": first.record(), "finite": bool(np.all(np.isfinite(np.asarray(value))))}

    single = cavi.step
    mid = len(deltas) // 2
    one = timed(single, *starts[mid])

    def stack(trees):
        return jax.tree.map(lambda *x: jnp.stack(x), *trees)

    batched = jax.jit(jax.vmap(single))
    lanes = timed(batched, stack([s for s, _ in starts]), stack([x for _, x in starts]))
    lanes["seconds_per_lane_sweep"] = lanes["seconds_per_sweep"] / len(deltas)
    e = run_svc(d, deltas, args)
    rec = {"n_train": int(N), "m": int(N + 1), "lanes": len(deltas), "sweeps_timed": k, "single": one, "vmapped": lanes,
           "lane_over_single": lanes["seconds_per_lane_sweep"] / one["seconds_per_sweep"], "svc": e}
    log(f"  full size N = {N}: one sweep {1e3 * one['seconds_per_sweep']:.1f} ms (single fit), vmapped sweep of "
        f"{len(deltas)} lanes {1e3 * lanes['seconds_per_sweep']:.1f} ms = {1e3 * lanes['seconds_per_lane_sweep']:.1f} ms "
        f"per lane ({rec['lane_over_single']:.2f} x single); SVC search {e['selection_seconds']:.2f}s + refit "
        f"{e['training_seconds']:.3f}s, test error {e['test_error']:.4f}")
    return rec


# ----------------------------------------------------------------------------------------------
# Extrapolation to the full size
# ----------------------------------------------------------------------------------------------
ARM_TIMES = {
    "vmapped": lambda r: r["vmapped"]["second_call"]["seconds"],
    "vmapped_first_call": lambda r: r["vmapped"]["first_call"]["seconds_incl_jit"],
    "loop_pruned": lambda r: r["loop_pruned"]["loop"]["seconds_excl_jit"],
    "loop_fit": lambda r: r["loop_fit"]["loop"]["seconds_excl_jit"],
    "rvm_cv": lambda r: r["rvm"]["selection"]["seconds_excl_jit"],
    "rvm_training": lambda r: r["rvm"]["training"]["seconds_excl_jit"],
    "rrvm_training": lambda r: r["rrvm"]["training"]["seconds_excl_jit"],
    "svc_cv": lambda r: r["svc"]["selection_seconds"],
}


def full_size_estimates(rows, n_full, probe=None):
    """Per arm: measured at the full size if a row has it, else extrapolated from the smaller ones
    (log-log fit). With a full-size probe, SVC's search is measured, and the RRVM arms (a) and (c)
    are also estimated as the sweep counts of the largest size run times the cost of one sweep
    measured at the full size (``method: "probe"``; the log-log value stays under ``loglog``)."""
    out = {}
    measured = {r["n_train"]: r for r in rows}
    small = [r for r in rows if r["n_train"] < n_full]
    for arm, get in ARM_TIMES.items():
        if n_full in measured:
            out[arm] = {"seconds": get(measured[n_full]), "extrapolated": False, "method": "measured"}
            continue
        ex = loglog_predict([r["n_train"] for r in small], [get(r) for r in small], n_full)
        out[arm] = None if ex is None else {"seconds": ex[0], "extrapolated": True, "method": "loglog",
                                            "loglog_slope": ex[1], "from_sizes": [r["n_train"] for r in small]}
    if probe is not None and n_full not in measured and small:
        largest = max(small, key=lambda r: r["n_train"])
        a = largest["vmapped"]
        # (a) with every width side by side runs the slowest lane's sweeps of the batched sweep;
        # one width at a time (fit_grid's CPU default) all the sweeps of the single sweep
        one_at_a_time = a.get("resolved_batch_size", len(largest["deltas"])) == 1
        sweeps = {"vmapped": (a["lane_sweeps_sum"] * probe["single"]["seconds_per_sweep"] if one_at_a_time
                              else a["lane_sweeps_max"] * probe["vmapped"]["seconds_per_sweep"]),
                  "loop_fit": a["lane_sweeps_sum"] * probe["single"]["seconds_per_sweep"]}
        for arm, seconds in sweeps.items():
            out[arm] = {"seconds": seconds, "extrapolated": True, "method": "probe", "sweeps_from_size": largest["n_train"],
                        "loglog": out[arm]}
        out["svc_cv"] = {"seconds": probe["svc"]["selection_seconds"], "extrapolated": False, "method": "measured"}
    return out


def same_method_ratio(num, den):
    """num / den for two full-size estimates made the same way (falling back on num's log-log
    estimate when den has only that one), or None."""
    if num["method"] != den["method"]:
        num = num.get("loglog")
        if num is None or num["method"] != den["method"]:
            return None
    return num["seconds"] / den["seconds"]


# ----------------------------------------------------------------------------------------------
# Reporting
# ----------------------------------------------------------------------------------------------
def row_table(r, args):
    a, b, c, dv, e = r["vmapped"], r["loop_pruned"], r["loop_fit"], r["rvm"], r["svc"]
    lines = [f"{r['data']}: N = {r['n_train']}, M = {r['m']}, {len(r['deltas'])} widths, tol = {args.tol:g}, "
             f"max_sweeps = {args.max_sweeps}", ""]
    head = (f"{'width selection':<34} {'incl. jit':>9} {'excl. jit':>9} {'2nd run':>8} {'fits':>5} {'sweeps':>7} "
            f"{'delta':>8} {'test err':>8}")
    lines += [head, "-" * len(head)]
    pw = r["per_width"]
    rr = r["rrvm"]
    b2 = b.get("second_loop", {}).get("seconds")
    c2 = c.get("second_loop", {}).get("seconds")
    ib = rr["chosen_index_loop_pruned"]
    lines.append(f"{'(a) RRVM fit_grid, 1 call':<34} {a['first_call']['seconds_incl_jit']:>9.2f} "
                 f"{a['first_call']['seconds_excl_jit']:>9.2f} {a['second_call']['seconds']:>8.2f} {len(pw):>5} "
                 f"{a['lane_sweeps_sum']:>7} {rr['chosen_delta']:>8.4g} {rr['test_error']:>8.4f}")
    a2 = r.get("all_lanes")
    if a2:
        lines.append(f"{'(a2) fit_grid, all widths vmapped':<34} {a2['first_call']['seconds_incl_jit']:>9.2f} "
                     f"{a2['first_call']['seconds_excl_jit']:>9.2f} {a2['second_call']['seconds']:>8.2f} {len(pw):>5} "
                     f"{a2['lane_sweeps_sum']:>7} {rr['chosen_delta']:>8.4g} {rr['test_error']:>8.4f}")
    lines.append(f"{'(b) RRVM loop CAVI.run, pruned':<34} {b['loop']['seconds_incl_jit']:>9.2f} "
                 f"{b['loop']['seconds_excl_jit']:>9.2f} {fmt(b2):>8} {len(pw):>5} "
                 f"{sum(w['loop_pruned']['num_sweeps'] for w in pw):>7} {r['deltas'][ib]:>8.4g} "
                 f"{pw[ib]['loop_pruned']['test_error']:>8.4f}")
    lines.append(f"{'(c) RRVM loop jitted fit':<34} {c['loop']['seconds_incl_jit']:>9.2f} "
                 f"{c['loop']['seconds_excl_jit']:>9.2f} {fmt(c2):>8} {len(pw):>5} "
                 f"{sum(w['loop_fit']['num_sweeps'] for w in pw):>7} {rr['chosen_delta']:>8.4g} {rr['test_error']:>8.4f}")
    lines.append(f"{f'(d) RVM {args.folds}-fold CV, CAVI.run pruned':<34} {dv['selection']['seconds_incl_jit']:>9.2f} "
                 f"{dv['selection']['seconds_excl_jit']:>9.2f} {'-':>8} {dv['fits']:>5} "
                 f"{dv['cv_sweeps']:>7} {dv['chosen_delta']:>8.4g} {dv['test_error']:>8.4f}")
    lines.append(f"{f'(e) SVC GridSearchCV {args.folds}-fold':<34} {e['selection_seconds']:>9.2f} {e['selection_seconds']:>9.2f} "
                 f"{'-':>8} {e['fits']:>5} {'-':>7} {e['chosen_delta']:>8.4g} {e['test_error']:>8.4f}")
    x = r["ratios"]
    lines += ["", f"  grid (a) / loop, excl. jit: / (b) {x['vmapped_over_loop_pruned']:.2f}, / (c) "
                  f"{x['vmapped_over_loop_fit']:.2f}"
              + (f"  (against the second loops: {x['vmapped_over_second_loop_pruned']:.2f}, "
                 f"{x['vmapped_over_second_loop_fit']:.2f})" if "vmapped_over_second_loop_pruned" in x else "")
              + f"; incl. jit: {x['vmapped_over_loop_pruned_incl_jit']:.2f}, {x['vmapped_over_loop_fit_incl_jit']:.2f}",
              f"  (a) batch size {a.get('resolved_batch_size')}"
              + (f"; (a2) all {len(pw)} vmapped / loop (c) {x['all_lanes_over_loop_fit']:.2f}, / (a) "
                 f"{x['all_lanes_over_default']:.2f}" if "all_lanes_over_loop_fit" in x else ""),
              f"  lanes side by side: the slowest width takes {a['lane_sweeps_max']} sweeps, all widths together "
              f"{a['lane_sweeps_sum']} = {a['lane_utilisation']:.0%} of {len(pw)} x {a['lane_sweeps_max']}",
              f"  RRVM selection (a) / RVM CV (d) {x['rrvm_selection_over_rvm_cv']:.3f}; / SVC CV (e) "
              f"{x['rrvm_selection_over_svc_cv']:.1f}",
              f"  goal (grid (a) no slower than the loops): {'met' if r['goal_met'] else 'NOT met'}", ""]
    head = (f"{'delta':>8} | {'ELBO (a)':>11} {'sw (a)':>6} {'sw (b)':>6} {'act (b)':>7} {'(a)-(c)':>8} | "
            f"{'err (a)':>7} {'err (b)':>7} | {'s (b)':>6} {'s (c)':>6} | {'RVM cv':>6} {'SVC cv':>6}")
    lines += [head, "-" * len(head)]
    svc_at_c = e["cv_error_at_chosen_C"]
    for i, w in enumerate(pw):
        mark = "*" if i == rr["chosen_index"] else " "
        diff = abs(w["vmapped"]["elbo"] - w["loop_fit"]["elbo"]) / abs(w["loop_fit"]["elbo"])
        unc = "" if w["vmapped"]["converged"] else "!"
        lines.append(
            f"{w['delta']:>7.4g}{mark} | {w['vmapped']['elbo']:>11.3f} {str(w['vmapped']['num_sweeps']) + unc:>6} "
            f"{w['loop_pruned']['num_sweeps']:>6} {w['loop_pruned']['num_active_at_end']:>7} {diff:>8.1e} | "
            f"{w['vmapped']['test_error']:>7.4f} {w['loop_pruned']['test_error']:>7.4f} | "
            f"{w['loop_pruned']['seconds_excl_jit']:>6.2f} {w['loop_fit']['seconds_excl_jit']:>6.2f} | "
            f"{dv['cv_error'][i]:>6.3f} {svc_at_c[i]:>6.3f}")
    lines.append("")
    return lines


def print_table(rows, full, args):
    lines = []
    for r in rows:
        lines += row_table(r, args)

    lines += ["Model selection and final training, seconds excl. jit (as in the paper's Table 3). Where the full",
              "training size was not run: '*' = extrapolated with a log-log fit over the sizes above; '+' = the sweep",
              "counts of the largest size run times the cost of one sweep measured at the full size ((a) one width at",
              "a time and loop (c): all sweeps x one single sweep; (a) vmapped: the slowest lane's sweeps x one",
              "20-lane sweep); no mark = measured:"]
    cols = []
    for name in args.datasets:
        for r in rows:
            if r["data"] == name:
                cols.append((f"{name} {r['n_train']}", lambda arm, r=r: (ARM_TIMES[arm](r), "")))
        if name in full and full[name]["n_full"] not in {r["n_train"] for r in rows if r["data"] == name}:
            est = full[name]["estimates"]
            marks = {"loglog": "*", "probe": "+", "measured": ""}
            cols.append((f"{name} {full[name]['n_full']}",
                         lambda arm, est=est: (est[arm]["seconds"], marks[est[arm]["method"]]) if est.get(arm)
                         else (None, "")))
    head = f"{'':<34}" + "".join(f" | {label:>18}" for label, _ in cols)
    sub = f"{'':<34}" + "".join(f" | {'select':>9} {'train':>8}" for _ in cols)
    lines += [head, sub, "-" * len(sub)]
    for label, sel, train in [("RRVM, ELBO, fit_grid (a)", "vmapped", "rrvm_training"),
                              ("RRVM, ELBO, loop CAVI.run (b)", "loop_pruned", "rrvm_training"),
                              ("RRVM, ELBO, loop jitted fit (c)", "loop_fit", "rrvm_training"),
                              (f"RVM, {args.folds}-fold CV (d)", "rvm_cv", "rvm_training"),
                              (f"SVC, {args.folds}-fold CV, C x gamma (e)", "svc_cv", None)]:
        cells = []
        for _, get in cols:
            s, mark = get(sel)
            tr, tmark = get(train) if train else (None, "")
            cells.append(f" | {fmt(s, '.1f') + mark:>9} {fmt(tr, '.2f') + tmark:>8}")
        lines.append(f"{label:<34}" + "".join(cells))
    for name, f in full.items():
        p = f.get("probe")
        if p:
            lines.append(f"  {name} at the full N = {p['n_train']} (measured): one sweep {1e3 * p['single']['seconds_per_sweep']:.1f} ms; "
                         f"vmapped sweep of {p['lanes']} lanes {1e3 * p['vmapped']['seconds_per_sweep']:.0f} ms = "
                         f"{p['lane_over_single']:.2f} x single per lane; SVC search {p['svc']['selection_seconds']:.2f}s, "
                         f"refit {p['svc']['training_seconds']:.3f}s, test error {p['svc']['test_error']:.4f}")
    lines += [
        "",
        "Columns: incl. jit = wall time of the first run in this process; excl. jit = the same minus the",
        "  compilation time jax.monitoring reports during it; 2nd run = wall time of a second run (all shapes",
        "  compiled); for (a) the second fit_grid call, which the ratios use. sweeps = sum over widths (for",
        "  (d): over widths and folds). delta = chosen width (RRVM: largest ELBO; RVM, SVC: smallest CV error);",
        "  test err = test error rate of the final model at that width. Per width: ELBO (a) = the bound (17) of",
        "  the fit_grid fit ('*' = chosen, '!' = not converged within max_sweeps); sw = sweeps; act (b) = active",
        "  coefficients at the end of the pruned fit; (a)-(c) = relative ELBO difference of the fit_grid and",
        "  the looped jitted fit; err = test error rate; s = seconds excl. jit of one fit in the loops;",
        f"  RVM cv, SVC cv = {args.folds}-fold CV error (SVC at its chosen C). SVC 'excl. jit' = its wall time.",
        "  Training (Table 3): one CAVI.run (the pruned sweep) at the chosen width (RRVM, RVM), SVC's refit_time_.",
    ]
    text = "\n".join(lines)
    log(text)
    return text


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 200, 400],
                   help="training sizes N: the first N points of the random training set; 0, or N within 10%% of "
                        "the training set, = all of it (default 100 200 400: biopsy's 410 in full)")
    p.add_argument("--widths", type=int, default=20, help="number of RBF widths (default 20)")
    p.add_argument("--s-min", type=float, default=0.1, help="smallest s, delta = s / inputs (default 0.1)")
    p.add_argument("--s-max", type=float, default=30.0, help="largest s (default 30)")
    p.add_argument("--label-noise", type=float, default=0.1, help="share of training labels flipped (default 0.1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split, the label noise and the CV folds")
    p.add_argument("--n-test", type=int, default=None, help="use only the first N test points (default all)")
    p.add_argument("--tol", type=float, default=1e-6, help="relative ELBO tolerance of every RRVM and RVM fit "
                                                           "(default 1e-6)")
    p.add_argument("--max-sweeps", type=int, default=3000, help="sweep limit of every RRVM and RVM fit (default 3000)")
    p.add_argument("--folds", type=int, default=5, help="cross-validation folds (default 5)")
    p.add_argument("--svc-C", type=float, nargs="+", default=[0.1, 1.0, 10.0, 100.0, 1000.0],
                   help="SVC regularisation constants searched (default 0.1 1 10 100 1000)")
    p.add_argument("--no-all-lanes", dest="all_lanes", action="store_false",
                   help="skip (a2), fit_grid with every width vmapped side by side (batch_size = widths)")
    p.add_argument("--all-lanes-max-n", type=int, default=None, metavar="N",
                   help="run (a2) only at training sizes up to N (default: at every size)")
    p.add_argument("--repeat-loops", action="store_true",
                   help="run the loops (b) and (c) a second time, all shapes compiled, and record that wall time too")
    p.add_argument("--probe-sweeps", type=int, default=5,
                   help="sweeps timed at the full size where it is not run, single and vmapped (default 5; 0: no "
                        "full-size probe)")
    p.add_argument("--blas-threads", type=int, default=1,
                   help="OPENBLAS_NUM_THREADS, set before numpy and jax are imported (default 1; 0: leave it as it "
                        "is). jaxlib's CPU LAPACK calls (Cholesky, triangular solves) run in scipy's OpenBLAS, whose "
                        "own thread pool competes with XLA's and slows small triangular solves down unpredictably")
    p.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                   help="skip the tiny warm-up (one-off eager compilations then count to the first data set)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 40 and 80 training points, 200 test points, 4 widths, 100 sweeps at most, "
                        "2 folds (the RVM's CV fits at N = 80 then share the shapes of its refit at N = 40), "
                        "C in {1, 10}, (a2) at N = 40 only, no full-size probe")
    p.add_argument("--out", default=None, help="JSON output path (default benchmarks/results/robust_rvm_<backend>.json)")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes = [40, 80]
        args.n_test = args.n_test or 200
        args.widths = min(args.widths, 4)
        args.max_sweeps = min(args.max_sweeps, 100)
        args.folds = min(args.folds, 2)
        args.svc_C = [1.0, 10.0]
        args.all_lanes_max_n = 40
        args.probe_sweeps = 0
        args.warm_up = False
    return args


def warm_up(args, clock):
    """The arms once on a tiny problem: one-off eager compilations not charged to the first data set."""
    import contextlib
    import io

    tiny = argparse.Namespace(**{**vars(args), "n_test": 20, "widths": 2, "max_sweeps": 20, "repeat_loops": False,
                                 "svc_C": [1.0]})
    with contextlib.redirect_stdout(io.StringIO()):
        run_dataset("ripley", 30, tiny, clock)


def main(argv=None):
    args = parse_args(argv)
    set_blas_threads(args.blas_threads)
    import ppl_sbl  # noqa: F401  (float64 on)

    clock = CompileClock()
    env = environment("sklearn")
    log(f"# ppl-sbl robust RVM benchmark  {env['date']}  host={env['hostname']}  backend={env['jax_backend']} "
        f"devices={env['jax_devices']}  cpus={env['cpu_count']}  load={env['load_average']}")
    log(f"# versions {env['versions']}")
    log(f"# datasets={args.datasets} sizes={args.sizes} widths={args.widths} (delta = s / inputs, s in "
        f"geomspace({args.s_min}, {args.s_max})) label_noise={args.label_noise} tol={args.tol} "
        f"max_sweeps={args.max_sweeps} C={args.svc_C} quick={args.quick} "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}")
    if args.warm_up:
        warm_up(args, clock)

    out = args.out
    if out is None:
        suffix = env["jax_backend"] + ("_quick" if args.quick else "")
        out = os.path.join(HERE, "results", f"robust_rvm_{suffix}.json")
    base = {
        "benchmark": "robust RVM width selection by ELBO (fit_grid in one call vs loops) against RVM and SVC "
                     f"{args.folds}-fold CV; Ripley pooled and MASS biopsy, 60/40 split, flipped training labels",
        "goal": "the grid in one call (fit_grid, excl. jit) no slower than a loop over the same widths, on CPU",
        "environment": env,
        "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "args": vars(args),
    }

    def save(extra, announce=False):  # after every size too: a run cut short leaves its record
        write_record({**base, **extra}, out, announce=announce)

    rows, full = [], {}
    t_all = time.perf_counter()
    for name in args.datasets:
        n_full = len(load(name, label_noise=args.label_noise, seed=args.seed).t_train)
        # 0, or a size within 10% of the training set: all of it
        sizes = sorted({n if 0 < n < 0.9 * n_full else n_full for n in args.sizes})
        for n in sizes:
            rows.append(run_dataset(name, n, args, clock))
            save({"rows": rows, "full_size": full, "partial": True})
        mine = [r for r in rows if r["data"] == name]
        full[name] = {"n_full": n_full}
        if args.probe_sweeps > 0 and n_full not in sizes:
            full[name]["probe"] = probe_full(name, args, clock)
        full[name]["estimates"] = full_size_estimates(mine, n_full, full[name].get("probe"))
        save({"rows": rows, "full_size": full, "partial": True})

    log("")
    table = print_table(rows, full, args)
    goal_met = all(r["goal_met"] for r in rows)
    worst = max(max(r["ratios"]["vmapped_over_loop_pruned"], r["ratios"]["vmapped_over_loop_fit"]) for r in rows)
    backend = env["jax_backend"]
    missed = [f"{r['data']} N={r['n_train']}" for r in rows if not r["goal_met"]]
    log(f"\n# goal (fit_grid in one call no slower than the loops over the same widths, excl. jit, {backend}): "
        + ("met at every size" if goal_met else "NOT met at " + ", ".join(missed))
        + f"; worst ratio fit_grid / loop {worst:.2f}")
    marks = {"loglog": "*", "probe": "+", "measured": ""}
    for name, f in full.items():
        est = f["estimates"]
        if not all(est.get(arm) for arm in ("vmapped", "loop_pruned", "loop_fit", "rvm_cv", "svc_cv")):
            continue
        text = ", ".join(f"{label} {est[arm]['seconds']:.1f}s{marks[est[arm]['method']]}" for label, arm in
                         [("fit_grid (a)", "vmapped"), ("loop (b)", "loop_pruned"), ("loop (c)", "loop_fit"),
                          ("RVM CV", "rvm_cv"), ("SVC CV", "svc_cv")])
        # ratios of estimates made the same way (the pruned loop has no probe-based estimate)
        f["vmapped_over_loops"] = {arm: same_method_ratio(est["vmapped"], est[arm]) for arm in ("loop_pruned", "loop_fit")}
        log(f"#   {name} at the full N = {f['n_full']}: {text}; fit_grid / loop (b) "
            f"{fmt(f['vmapped_over_loops']['loop_pruned'])}, / loop (c) {fmt(f['vmapped_over_loops']['loop_fit'])} "
            "(each ratio of two estimates made the same way)")
    total = time.perf_counter() - t_all
    env["load_average_end"] = load_average()
    log(f"# total benchmark time {total:.1f}s")
    save({"rows": rows, "full_size": full, "partial": False, "goal_met": goal_met, "worst_ratio": worst,
          "table": table, "total_seconds": total}, announce=True)


if __name__ == "__main__":
    sys.exit(main())
