"""The experiments of the robust RVM paper (Hwang & Jeong 2015, section 4) on data that ship offline.

Not a test (``tests/test_experiments_robust_rvm.py`` runs ``--quick``). Protocol (section 4.2): every
data set is split at random into training (60%) and test (40%) sets, ``perc`` of the training
labels are flipped at random (the test labels stay clean), and this is repeated (the paper: 50
times). Inputs are standardised with the training mean and standard deviation (the paper does not
say; stated here). Classifiers, each on the RBF basis exp(-delta ||x - x_n||^2) centred on the
training points plus a bias (sklearn's gamma and the paper's 1/sigma are our delta):

* **RRVM**: ``models.robust_rvm.classification`` with the paper's priors (a = b = 1e-5,
  c = d = 2 - ln 2), width chosen by its ELBO over the width grid (no cross-validation, the
  paper's point).
* **RVM**: ``models.rvm.classification`` (variational RVM, a0 = b0 = 1e-5 as for the RRVM).
  The paper chose its width by 5-fold cross-validation; here ``--rvm-selection elbo`` (default)
  picks it by its own ELBO, which costs one fit per width instead of six, and
  ``--rvm-selection cv`` by 5-fold CV of the error rate as in the paper.
* **SVM**: scikit-learn ``SVC`` with C and gamma by 5-fold ``GridSearchCV`` (accuracy) over
  C in {0.1, 1, 10, 100, 1000} and gamma over the width grid, refitted; its probabilities (for
  AUC and RMSE) from Platt scaling, ``CalibratedClassifierCV(SVC(...), ensemble=False)``
  (what LIBSVM's ``probability=True`` did; that option is deprecated in scikit-learn 1.9).

Reported per (data set, perc): mean (standard deviation) over repetitions of the test error rate
ERR (%), the AUC (%) and the RMSE of the predicted probabilities against the 0/1 labels (the
paper's three measures), and the share (%) of non-zero coefficients (RVM, RRVM: the ``relevant``
mask over the N + 1 basis functions; SVM: support vectors over N), beside the paper's Tables 1,
2 (Ripley's synthetic data, the 250 + 1000 points pooled) and 7 (Breast Cancer Wisconsin, MASS
``biopsy``, 683 complete rows). Also the seconds spent on width selection and on the final fit.

Figures (PNG next to the JSON): the weighted logistic loss against the logistic loss (Fig. 2);
decision boundaries of SVM, RVM and RRVM on Ripley with flipped labels, relevance / support
vectors circled, flipped points in squares, RRVM points shaded by their outlier score (Fig. 4);
the sensitivity curve of section 4.2.2: one mislabelled point added at increasing distance from
the boundary, and the mean absolute change of each classifier's decision function f (the
logit for RVM/RRVM, the SVM's decision function) over a grid of inputs, scaled to [0, 1] per
classifier as in the paper's Fig. 7.

CAVI stops at a relative ELBO change of ``--tol`` (default 1e-7: a width grid needs many fits;
the library default is 1e-9) or ``--max-sweeps``; every fit's sweeps and ``converged`` flag go
to the JSON. Fits are the paper's algorithm, the sweep (``CAVI(..., schedule="sweep")``; CAVI's default
schedule would run the fast one of ``ppl_sbl.fast_ard`` on these models), with the library's
default pruning.

Usage::

    python experiments/robust_rvm.py --quick --out-dir /tmp/rrvm
    python experiments/robust_rvm.py --repeats 50   # experiments/results/robust_rvm_experiments.json
    python experiments/robust_rvm.py --only biopsy --repeats 10
    python experiments/robust_rvm.py --first-repeat 3 --repeats 5 --pool-with experiments/results/robust_rvm_experiments.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for ``benchmarks.timing``

from benchmarks.timing import environment, log, save_figure, timed, write_record  # noqa: E402
MODELS = ("SVM", "RVM", "RRVM")

# the paper's figures: mean (sd) over 50 repetitions
PAPER = {
    "ripley": {
        0.0: {"ERR": {"SVM": (9.85, 0.82), "RVM": (9.76, 0.61), "RRVM": (9.58, 0.72)},
              "AUC": {"SVM": (96.01, 1.04), "RVM": (96.34, 1.05), "RRVM": (96.87, 0.48)},
              "RMSE": {"SVM": (0.2700, 0.0124), "RVM": (0.2703, 0.0157), "RRVM": (0.2661, 0.0104)},
              "nonzero": {"SVM": (30.76, 7.76), "RVM": (2.84, 3.10), "RRVM": (1.88, 0.27)}},
        0.05: {"ERR": {"SVM": (11.87, 3.03), "RVM": (10.88, 2.70), "RRVM": (10.03, 1.31)},
               "AUC": {"SVM": (94.17, 3.02), "RVM": (95.55, 1.75), "RRVM": (96.37, 0.93)},
               "RMSE": {"SVM": (0.3068, 0.0311), "RVM": (0.2925, 0.0260), "RRVM": (0.2683, 0.0189)},
               "nonzero": {"SVM": (42.32, 6.14), "RVM": (4.04, 3.73), "RRVM": (2.04, 0.69)}},
        0.1: {"ERR": {"SVM": (14.91, 5.00), "RVM": (16.21, 4.60), "RRVM": (12.83, 4.48)},
              "AUC": {"SVM": (90.91, 6.01), "RVM": (91.17, 4.07), "RRVM": (94.31, 3.05)},
              "RMSE": {"SVM": (0.3414, 0.0485), "RVM": (0.3488, 0.0407), "RRVM": (0.3079, 0.0538)},
              "nonzero": {"SVM": (50.00, 8.07), "RVM": (6.80, 4.29), "RRVM": (3.16, 1.85)}},
    },
    "biopsy": {
        0.0: {"ERR": {"SVM": (3.26, 0.95), "RVM": (3.77, 0.96), "RRVM": (3.19, 0.75)},
              "AUC": {"SVM": (98.98, 0.61), "RVM": (99.18, 0.51), "RRVM": (99.17, 0.51)},
              "RMSE": {"SVM": (0.1624, 0.0228), "RVM": (0.1741, 0.0238), "RRVM": (0.1620, 0.0224)},
              "nonzero": {"SVM": (13.51, 3.46), "RVM": (1.39, 0.73), "RRVM": (1.61, 1.35)}},
        0.1: {"ERR": {"SVM": (5.68, 2.51), "RVM": (4.92, 1.52), "RRVM": (3.41, 1.65)},
              "AUC": {"SVM": (97.70, 1.88), "RVM": (97.94, 1.01), "RRVM": (99.08, 0.94)},
              "RMSE": {"SVM": (0.2202, 0.0397), "RVM": (0.2079, 0.0290), "RRVM": (0.1633, 0.0329)},
              "nonzero": {"SVM": (40.32, 6.56), "RVM": (2.00, 1.42), "RRVM": (2.02, 0.89)}},
    },
}
PAPER_TABLE = {"ripley": "Tables 1, 2", "biopsy": "Table 7 (BC Wisconsin)"}


# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------
def load(name, quick_size=None, seed=0):
    import numpy as np

    import ppl_sbl

    X, t = ppl_sbl.datasets.ripley_pooled() if name == "ripley" else ppl_sbl.datasets.biopsy_data()
    if quick_size:
        idx = np.random.default_rng(seed).choice(len(t), quick_size, replace=False)
        X, t = X[idx], t[idx]
    return X, t


# ----------------------------------------------------------------------------------------------
# Classifiers
# ----------------------------------------------------------------------------------------------
def _design(X, centres, delta):
    import ppl_sbl

    return ppl_sbl.basis.rbf(X, centres, delta=delta, bias=True)


PRUNE = [True]  # set from --no-prune


def fit_bayes(model, X, t, delta, *, tol, max_sweeps, **hyper):
    import ppl_sbl

    cavi = ppl_sbl.CAVI(model, tol=tol, max_sweeps=max_sweeps, prune=PRUNE[0], progress_bar=False, schedule="sweep")
    return cavi.run(_design(X, X, delta), t, **hyper)


def select_by_elbo(model, X, t, deltas, *, tol, max_sweeps, **hyper):
    """One fit per width; the width with the highest ELBO wins. Returns (best fit, delta)."""
    fits = [fit_bayes(model, X, t, d, tol=tol, max_sweeps=max_sweeps, **hyper) for d in deltas]
    best = max(range(len(deltas)), key=lambda i: fits[i].elbo)
    return fits[best], float(deltas[best])


def select_by_cv(model, X, t, deltas, *, tol, max_sweeps, folds=5, seed=0, **hyper):
    """5-fold CV of the error rate over the widths, then a refit at the best width: (fit, delta)."""
    import numpy as np
    from sklearn.model_selection import StratifiedKFold

    errors = []
    splitter = StratifiedKFold(folds, shuffle=True, random_state=seed)
    for d in deltas:
        wrong = 0
        for tr, va in splitter.split(X, t):
            res = fit_bayes(model, X[tr], t[tr], d, tol=tol, max_sweeps=max_sweeps, **hyper)
            wrong += int(np.sum((res.predict(_design(X[va], X[tr], d)) > 0.5) != (t[va] > 0.5)))
        errors.append(wrong / len(t))
    best = int(np.argmin(errors))
    fit = fit_bayes(model, X, t, deltas[best], tol=tol, max_sweeps=max_sweeps, **hyper)
    return fit, float(deltas[best])


def metrics(p, t):
    import numpy as np
    from sklearn.metrics import roc_auc_score

    p = np.asarray(p, dtype=float)
    return {
        "ERR": 100.0 * float(np.mean((p > 0.5) != (t > 0.5))),
        "AUC": 100.0 * float(roc_auc_score(t, p)),
        "RMSE": float(np.sqrt(np.mean((p - t) ** 2))),
    }


def run_bayes(name, model, d, deltas, selection, *, tol, max_sweeps, seed, **hyper):
    if selection == "elbo":
        (fit, delta), selection_seconds = timed(lambda: select_by_elbo(model, d.X_train, d.t_train, deltas, tol=tol,
                                                                       max_sweeps=max_sweeps, **hyper))
    else:
        (fit, delta), selection_seconds = timed(lambda: select_by_cv(model, d.X_train, d.t_train, deltas, tol=tol,
                                                                     max_sweeps=max_sweeps, seed=seed, **hyper))
    # the timed refit
    fit, train_seconds = timed(lambda: fit_bayes(model, d.X_train, d.t_train, delta, tol=tol, max_sweeps=max_sweeps,
                                                 **hyper))
    p = fit.predict(_design(d.X_test, d.X_train, delta))
    rec = metrics(p, d.t_test)
    rec.update(nonzero=100.0 * float(fit.relevant.mean()), delta=delta, selection=selection,
               selection_seconds=selection_seconds, train_seconds=train_seconds, sweeps=fit.num_sweeps,
               converged=bool(fit.converged), elbo=fit.elbo)
    return rec, fit


def run_svm(d, deltas, Cs, seed):
    import numpy as np
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.svm import SVC

    search = GridSearchCV(SVC(kernel="rbf"), {"C": list(Cs), "gamma": list(deltas)},
                          cv=StratifiedKFold(5, shuffle=True, random_state=seed), refit=False)
    _, selection_seconds = timed(lambda: search.fit(d.X_train, d.t_train))
    best = search.best_params_
    svc, train_seconds = timed(lambda: SVC(kernel="rbf", **best).fit(d.X_train, d.t_train))
    platt = CalibratedClassifierCV(SVC(kernel="rbf", **best), method="sigmoid", cv=5, ensemble=False)
    platt.fit(d.X_train, d.t_train)
    p = platt.predict_proba(d.X_test)[:, list(platt.classes_).index(1.0)]
    rec = metrics(p, d.t_test)
    # ERR from the SVM's own decision rule (sign of the decision function), not from Platt's p > 0.5
    rec["ERR"] = 100.0 * float(np.mean(svc.predict(d.X_test) != d.t_test))
    rec.update(nonzero=100.0 * len(svc.support_) / len(d.t_train), C=float(best["C"]), delta=float(best["gamma"]),
               selection_seconds=selection_seconds, train_seconds=train_seconds)
    return rec, svc


# ----------------------------------------------------------------------------------------------
# Tables
# ----------------------------------------------------------------------------------------------
def summarise(runs):
    import numpy as np

    out = {}
    for model in MODELS:
        out[model] = {}
        for key in ("ERR", "AUC", "RMSE", "nonzero", "selection_seconds", "train_seconds"):
            values = np.array([r[model][key] for r in runs], dtype=float)
            out[model][key] = (float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else float("nan"))
        if model != "SVM":
            out[model]["not_converged"] = int(sum(not r[model]["converged"] for r in runs))
    return out


def print_table(name, perc, summary, repeats):
    paper = PAPER[name].get(perc)
    log(f"\n{name}, perc = {100 * perc:g}%: mean (sd) over {repeats} repetitions; paper ({PAPER_TABLE[name]}) in brackets")
    log(f"{'':6} {'ERR %':>24} {'AUC %':>24} {'RMSE':>26} {'non-zero %':>24} | {'select s':>9} {'train s':>8}")
    for model in MODELS:
        s = summary[model]

        def cell(key, fmt):
            m, sd = s[key]
            ours = f"{m:{fmt}} ({sd:{fmt}})"
            if paper is None:
                return f"{ours:>24}"
            pm, psd = paper[key][model]
            return f"{ours} [{pm:{fmt}}]"

        log(f"{model:6} {cell('ERR', '.2f'):>24} {cell('AUC', '.2f'):>24} {cell('RMSE', '.4f'):>26} "
            f"{cell('nonzero', '.2f'):>24} | {s['selection_seconds'][0]:9.2f} {s['train_seconds'][0]:8.2f}")


# ----------------------------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------------------------
def figure_weighted_loss(out_dir, suffix):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from ppl_sbl.models import robust_rvm

    u = np.linspace(-6, 6, 600)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.plot(u, np.logaddexp(0, -u), "k--", label="logistic loss l(u)")
    ax.plot(u, robust_rvm.weighted_loss(u), "C0", label=r"weighted loss $r\,l/(r+l)$, $r = 2-\ln 2$")
    ax.axhline(robust_rvm.DEFAULT_R, color="0.7", lw=0.8)
    ax.set(xlabel="margin u = (2t - 1) f", ylabel="loss", title="Fig. 2: the weight bounds the loss by r")
    ax.legend()
    return save_figure(fig, os.path.join(out_dir, f"robust_rvm_weighted_loss{suffix}.png"))


def figure_boundaries(d, fits, flipped, out_dir, suffix):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    lo, hi = d.X_train.min(0) - 0.3, d.X_train.max(0) + 0.3
    g0, g1 = np.meshgrid(np.linspace(lo[0], hi[0], 150), np.linspace(lo[1], hi[1], 150))
    grid = np.column_stack([g0.ravel(), g1.ravel()])
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    for ax, model in zip(axes, MODELS):
        fit, delta = fits[model]
        if model == "SVM":
            f = fit.decision_function(grid).reshape(g0.shape)
            ax.contour(g0, g1, f, levels=[0.0], colors="k")
            circled = fit.support_
        else:
            p = fit.predict(_design(grid, d.X_train, delta)).reshape(g0.shape)
            ax.contour(g0, g1, p, levels=[0.25, 0.5, 0.75], colors="k", linestyles=["--", "-", "--"])
            circled = np.flatnonzero(fit.relevant[1:])  # column 0 is the bias
        colour = np.where(d.t_train > 0.5, "C1", "C0")
        if model == "RRVM":
            score = fit.outlier_score
            sc = ax.scatter(*d.X_train.T, c=score, cmap="viridis", s=14, vmin=0, vmax=1)
            fig.colorbar(sc, ax=ax, label="outlier score E[omega_n]")
        else:
            ax.scatter(*d.X_train.T, c=colour, s=10)
        ax.scatter(*d.X_train[circled].T, s=70, facecolors="none", edgecolors="k", lw=0.8)
        ax.scatter(*d.X_train[flipped].T, s=60, marker="s", facecolors="none", edgecolors="r", lw=1.0)
        ax.set(title=f"{model} (delta = {delta:g}): {len(circled)} " + ("support" if model == "SVM" else "relevance")
               + " vectors", xlabel="x1 (standardised)", ylabel="x2")
    fig.suptitle("Fig. 4: decision boundaries on Ripley's data with flipped training labels (red squares)")
    return save_figure(fig, os.path.join(out_dir, f"robust_rvm_boundaries{suffix}.png"))


def sensitivity_curve(d, deltas_by_model, C, *, tol, max_sweeps, positions):
    """Mean |f_{n+1} - f_n| over a grid when one mislabelled point is added at increasing
    distance from the boundary (along the line from the class-0 mean through the class-1 mean)."""
    import numpy as np
    from sklearn.svm import SVC

    from ppl_sbl.models import robust_rvm, rvm

    X, t = d.X_train, d.t_train
    lo, hi = X.min(0), X.max(0)
    g0, g1 = np.meshgrid(np.linspace(lo[0], hi[0], 40), np.linspace(lo[1], hi[1], 40))
    grid = np.column_stack([g0.ravel(), g1.ravel()])
    m0, m1 = X[t == 0].mean(0), X[t == 1].mean(0)
    direction = (m1 - m0) / np.linalg.norm(m1 - m0)
    centre = 0.5 * (m0 + m1)

    def decision(model, Xs, ts):
        if model == "SVM":
            return SVC(kernel="rbf", C=C, gamma=deltas_by_model["SVM"]).fit(Xs, ts).decision_function(grid)
        m = rvm.classification if model == "RVM" else robust_rvm.classification
        hyper = {"a0": 1e-5, "b0": 1e-5} if model == "RVM" else {}
        delta = deltas_by_model[model]
        res = fit_bayes(m, Xs, ts, delta, tol=tol, max_sweeps=max_sweeps, **hyper)
        mean, _ = __import__("ppl_sbl").gaussian.linear_moments(res.state.w, _design(grid, Xs, delta))
        return np.asarray(mean)

    base = {m: decision(m, X, t) for m in MODELS}
    curves = {m: [] for m in MODELS}
    for s in positions:
        z = centre + s * direction  # deep in class 1's side for s > 0 ...
        Xz, tz = np.vstack([X, z]), np.append(t, 0.0)  # ... labelled 0: an outlier
        for m in MODELS:
            curves[m].append(float(np.mean(np.abs(decision(m, Xz, tz) - base[m]))))
    return {m: v for m, v in curves.items()}


def figure_sensitivity(positions, curves, out_dir, suffix):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for m, style in zip(MODELS, (":", "--", "-")):
        v = np.asarray(curves[m])
        axes[0].plot(positions, v / max(v.max(), 1e-300), style, marker="o", ms=3, label=m)
        if m != "SVM":  # RVM and RRVM: both f are logits, so their raw changes compare directly
            axes[1].plot(positions, v, style, marker="o", ms=3, label=m)
    axes[0].set(xlabel="position of the added mislabelled point (standardised units)",
                ylabel="mean |change of f|, scaled to max 1", title="Sensitivity curve (section 4.2.2), as in Fig. 7")
    axes[1].set(xlabel="position of the added mislabelled point (standardised units)",
                ylabel="mean |change of the logit|", title="RVM and RRVM unscaled")
    for ax in axes:
        ax.legend()
    return save_figure(fig, os.path.join(out_dir, f"robust_rvm_sensitivity{suffix}.png"))


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 100-point subsamples, 2 repetitions, 3 widths, 300 sweeps, no pruning")
    p.add_argument("--repeats", type=int, default=10, help="repetitions per (data set, perc) (paper: 50; default 10)")
    p.add_argument("--first-repeat", type=int, default=0,
                   help="seed of the first repetition (repetition r uses seed r); with --pool-with, runs can be "
                        "added to an earlier record (default 0)")
    p.add_argument("--pool-with", default=None, metavar="JSON",
                   help="an earlier record of this script: its runs with other seeds are pooled into the tables")
    p.add_argument("--only", nargs="+", choices=["ripley", "biopsy"], default=None)
    p.add_argument("--deltas", type=float, nargs="+", default=[0.1, 0.2, 0.5, 1.0, 2.0, 5.0],
                   help="RBF widths delta on standardised inputs (default 0.1 0.2 0.5 1 2 5)")
    p.add_argument("--Cs", type=float, nargs="+", default=[0.1, 1.0, 10.0, 100.0, 1000.0], help="SVM C grid")
    p.add_argument("--rvm-selection", choices=["elbo", "cv"], default="elbo",
                   help="how the RVM's width is chosen: its ELBO (default) or 5-fold CV as in the paper")
    p.add_argument("--tol", type=float, default=1e-7, help="CAVI relative ELBO tolerance (default 1e-7)")
    p.add_argument("--max-sweeps", type=int, default=5000)
    p.add_argument("--no-prune", action="store_true", help="fit without pruning (one compiled shape per problem)")
    p.add_argument("--no-figures", action="store_true")
    p.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    args = p.parse_args(argv)
    if args.quick:
        args.repeats = min(args.repeats, 2)
        args.deltas = [0.5, 1.0, 2.0]
        args.Cs = [1.0, 10.0]
        args.max_sweeps = min(args.max_sweeps, 300)
        args.tol = max(args.tol, 1e-6)
        args.no_prune = True
    return args


def main(argv=None):
    args = parse_args(argv)
    import numpy as np

    import ppl_sbl
    from ppl_sbl.models import robust_rvm, rvm

    PRUNE[0] = not args.no_prune
    os.makedirs(args.out_dir, exist_ok=True)
    suffix = "_quick" if args.quick else ""
    env = environment("sklearn")
    log(f"# robust RVM experiments ({'quick' if args.quick else 'full'})  {env['date']}  backend={env['jax_backend']}  "
        f"cpus={env['cpu_count']}  load={env['load_average']}")
    log(f"# repeats={args.repeats}  deltas={args.deltas}  C={args.Cs}  RVM width by {args.rvm_selection}  "
        f"tol={args.tol}  max_sweeps={args.max_sweeps}")
    plan = {"ripley": [0.0, 0.05, 0.1], "biopsy": [0.0, 0.1]}
    record = {"experiment": "robust RVM (Hwang & Jeong 2015), section 4", "environment": env, "args": vars(args),
              "paper": {k: {str(p): v for p, v in d.items()} for k, d in PAPER.items()}, "results": {}}
    t_all = time.perf_counter()
    rrvm_hyper = {}
    rvm_hyper = {"a0": 1e-5, "b0": 1e-5}
    last = {}
    pooled = {}
    if args.pool_with:
        with open(args.pool_with) as f:
            pooled = json.load(f)["results"]
    for name in args.only or list(plan):
        X, t = load(name, quick_size=100 if args.quick else None)
        record["results"][name] = {}
        for perc in plan[name]:
            runs = []
            for rep in range(args.first_repeat, args.first_repeat + args.repeats):
                d, flipped_train = ppl_sbl.datasets.split_with_label_noise(X, t, label_noise=perc, seed=rep, name=name,
                                                                           return_flipped=True)
                svm_rec, svc = run_svm(d, args.deltas, args.Cs, rep)
                rvm_rec, rvm_fit = run_bayes("RVM", rvm.classification, d, args.deltas, args.rvm_selection,
                                             tol=args.tol, max_sweeps=args.max_sweeps, seed=rep, **rvm_hyper)
                rr_rec, rr_fit = run_bayes("RRVM", robust_rvm.classification, d, args.deltas, "elbo",
                                           tol=args.tol, max_sweeps=args.max_sweeps, seed=rep, **rrvm_hyper)
                if len(flipped_train):
                    score = rr_fit.outlier_score
                    rr_rec["mean_score_flipped"] = float(score[flipped_train].mean())
                    rr_rec["mean_score_clean"] = float(np.delete(score, flipped_train).mean())
                runs.append({"SVM": svm_rec, "RVM": rvm_rec, "RRVM": rr_rec, "seed": rep})
                log(f"  {name} perc={100 * perc:g}% rep {rep}: ERR SVM {svm_rec['ERR']:.2f} (C {svm_rec['C']:g}, "
                    f"delta {svm_rec['delta']:g}), RVM {rvm_rec['ERR']:.2f} (delta {rvm_rec['delta']:g}), "
                    f"RRVM {rr_rec['ERR']:.2f} (delta {rr_rec['delta']:g})"
                    + (f"; RRVM score flipped {rr_rec['mean_score_flipped']:.2f} vs clean {rr_rec['mean_score_clean']:.2f}"
                       if "mean_score_flipped" in rr_rec else ""))
                if name == "ripley" and rep == args.first_repeat:
                    last[perc] = (d, {"SVM": (svc, svm_rec["delta"]), "RVM": (rvm_fit, rvm_rec["delta"]),
                                      "RRVM": (rr_fit, rr_rec["delta"])}, flipped_train, svm_rec["C"])
            seeds = {r["seed"] for r in runs}
            earlier = [r for r in pooled.get(name, {}).get(str(perc), {}).get("runs", []) if r["seed"] not in seeds]
            if earlier:
                log(f"  pooled with {len(earlier)} runs of {args.pool_with} (seeds {sorted(r['seed'] for r in earlier)})")
            runs = sorted(earlier + runs, key=lambda r: r["seed"])
            summary = summarise(runs)
            record["results"][name][str(perc)] = {"runs": runs, "summary": summary}
            print_table(name, perc, summary, len(runs))
            save(record, args, suffix)

    if not args.no_figures:
        paths = [figure_weighted_loss(args.out_dir, suffix)]
        if last:
            perc = max(last)
            d, fits, flipped, C = last[perc]
            paths.append(figure_boundaries(d, fits, flipped, args.out_dir, suffix))
            clean = last.get(0.0, last[perc])
            dc, fits_c, _, C_c = clean
            positions = list(np.linspace(-1.0, 4.0, 5 if args.quick else 11))
            curves = sensitivity_curve(dc, {m: fits_c[m][1] for m in MODELS}, C_c, tol=args.tol,
                                       max_sweeps=args.max_sweeps, positions=positions)
            record["sensitivity"] = {"positions": positions, "mean_abs_change": curves}
            paths.append(figure_sensitivity(positions, curves, args.out_dir, suffix))
        record["figures"] = paths
        log("# figures: " + ", ".join(record["figures"]))
    record["total_seconds"] = time.perf_counter() - t_all
    record["partial"] = False
    save(record, args, suffix, announce=True)
    log(f"# total {record['total_seconds']:.1f} s")


def save(record, args, suffix, announce=False):
    record.setdefault("partial", True)
    return write_record(record, os.path.join(args.out_dir, f"robust_rvm_experiments{suffix}.json"), announce=announce)


if __name__ == "__main__":
    main()
