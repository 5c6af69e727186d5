"""The classification experiment of Sauer's thesis, chapter 5 (Tables 5.1-5.2), on data that ship offline.

Not a test (``tests/test_experiments_gplvm.py`` runs ``--quick``). The thesis classified facial
expressions of the Cohn-Kanade database (shape and texture features, seven emotions, 10-fold
cross-validation); those data do not ship. Here: scikit-learn's bundled handwritten digits
(:func:`ppl_sbl.datasets.digits`: 64 pixels scaled to [0, 1], ten classes), a stratified subset of
``--n-points`` images (500; drawn with ``--seed``), and stratified ``--folds``-fold
cross-validation (5; shuffled with ``--seed``). The inputs are used as they are (every method sees
the same [0, 1] pixels). Only the layout of the tables and the kind of comparison carry over from
the thesis, not its numbers.

Rows: the classes 0-9 and "overall"; each entry is the accuracy (%) pooled over the folds (every
image is tested once: correct / images of that class), "overall" the accuracy over all images,
i.e. the per-class figures weighted by the class counts; below, the standard deviation over folds
of each fold's overall accuracy. Columns:

* **Supervised Bayesian GPLVM** (``models.gplvm.fit(model="supervised")``, Fig. 5.1 b) with the
  latent prior (5.2) on the linear (LIN), RBF and Matern 3/2 (M32) kernels, labels coded 1-of-K in
  {-1, 1} (section 5.3), each classified two ways as in Table 5.1: **1-NN** on the latent means
  (training points: the means of q(X); test points: eq. 5.32; Euclidean distance over all latent
  dimensions, as the library's ``GPLVMClassifier(classifier="knn")``), and **Posterior**, the
  argmax of the predictive mean (5.29) averaged over ``--num-samples`` (64) draws of q(x*) (5.30).
  One fit per kernel and fold serves both classifiers. The library's defaults otherwise: the
  signal-to-noise ratio fixed at 100 (section 5.5.3), the prior's parameters from the median
  squared distance of the inputs and kept (``optimize_prior=False``), q(X) initialised by PCA.
* **Autoencoder GPLVM** (Fig. 5.1 c, Z = Y, RBF latent prior) and the **unsupervised Bayesian
  GPLVM** (Titsias & Lawrence 2010, X ~ N(0, I)), each with 1-NN on the latent means (test
  points: eq. 5.32 for the autoencoder; for the unsupervised model q(x*) optimised with the other
  parameters fixed, ``transform(max_steps=500)``). The thesis's "AutoEnc" column combined shape
  and texture latent spaces; here the autoencoder sees the pixels.
* Baselines (scikit-learn), as in Table 5.2: **PCA+LDA 1-NN**: PCA to ``--pca-dims`` dimensions
  (default: the latent dimensionality, 20, the thesis's choice "as in our experiments using the
  supervised Bayesian GPLVM"), then ``LinearDiscriminantAnalysis()`` (SVD solver, 9 = classes - 1
  discriminant directions), then 1-NN in the LDA space; **RF**: ``RandomForestClassifier(
  n_estimators=500, random_state=seed + fold)`` (one forest per fold; the thesis averaged 10
  cross-validations of R's randomForest); **SVM**: ``SVC(kernel="linear", C=1.0)`` (LIBSVM, one
  against one). The thesis's DGPLVM column is not reproduced.

Every GPLVM starts from ``--latent-dim`` (20) latent dimensions, ``--num-inducing`` (30) inducing
inputs, and is fitted by the library's default optimizer (``--optimizer`` overrides it for the
supervised and autoencoder models): natural-gradient sweeps for the supervised and autoencoder
models (each a damped fixed-point step of (5.28) on q(X), then 20 L-BFGS iterations on the
hyperparameters), L-BFGS for the unsupervised one; at most ``--max-steps`` (1000) sweeps or
L-BFGS steps (relative tolerance 1e-10, the library default). ARD decides how many latent dimensions are kept (the result's
``relevant_dims``: relevance alpha_q E[x_q^2] at least 1e-3 of the largest); recorded per fold
with the optimizer, the bound (``elbo``), the sweeps or L-BFGS steps, ``converged`` and the seconds of the fit (wall clock,
including jit compilation) and of the predictions; the log reports the mean, min and max count of
kept dimensions per model.

Figures (PNG next to the JSON): the latent means of the first fold's training (dots) and test
points (crosses) in the two most relevant dimensions, coloured by class, for the supervised RBF,
autoencoder and unsupervised models (as the thesis's Fig. 5.3 b); and a bar chart of the ARD
relevance per latent dimension of every GPLVM (first fold as bars, the other folds as dots;
scaled to the largest, log scale, the 1e-3 threshold drawn) (Fig. 5.3 a).

Cost: the supervised and autoencoder fits are O(Q N^3) per bound evaluation (section 5.4); the
natural-gradient sweeps skip the latent dimensions at their fixed point. A full run is 25 fits of
up to 1000 sweeps or steps (times in experiments/README.md). Quick mode (``--quick``: 120 images,
2 folds, latent_dim 6, num_inducing 12, 40 sweeps or L-BFGS steps, forests of 50 trees; the fits
stop at the step cap, so the numbers are a smoke test, not results). Explicit options override the
quick settings.

Usage::

    python experiments/gplvm.py                       # experiments/results/gplvm_experiments.json
    python experiments/gplvm.py --optimizer lbfgs     # gplvm_experiments_lbfgs.json
    python experiments/gplvm.py --quick --out-dir /tmp/gplvm
    python experiments/gplvm.py --n-points 300 --folds 3 --max-steps 500
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for ``benchmarks.timing``

from benchmarks.timing import environment, log, save_figure, write_record  # noqa: E402

# the GPLVM fits: key -> (model, latent-prior kernel)
FITS = {
    "sup_lin": ("supervised", "linear"),
    "sup_rbf": ("supervised", "rbf"),
    "sup_m32": ("supervised", "matern32"),
    "autoenc": ("autoencoder", "rbf"),
    "unsup": ("unsupervised", "rbf"),  # no latent prior kernel: X ~ N(0, I)
}
FIT_LABELS = {"sup_lin": "supervised LIN", "sup_rbf": "supervised RBF", "sup_m32": "supervised M32",
              "autoenc": "autoencoder (RBF prior)", "unsup": "unsupervised"}
# the table's columns: key -> (group, short label, fit it uses or None for a baseline)
COLUMNS = {
    "sup_lin_1nn": ("Sup 1-NN", "LIN", "sup_lin"),
    "sup_rbf_1nn": ("Sup 1-NN", "RBF", "sup_rbf"),
    "sup_m32_1nn": ("Sup 1-NN", "M32", "sup_m32"),
    "sup_lin_post": ("Sup Post", "LIN", "sup_lin"),
    "sup_rbf_post": ("Sup Post", "RBF", "sup_rbf"),
    "sup_m32_post": ("Sup Post", "M32", "sup_m32"),
    "autoenc_1nn": ("AutoEnc", "1-NN", "autoenc"),
    "unsup_1nn": ("Unsup", "1-NN", "unsup"),
    "pca_lda_1nn": ("PCA+LDA", "1-NN", None),
    "rf": ("RF", "", None),
    "svm_linear": ("SVM", "linear", None),
}
NOTE = ("Note: the thesis's Tables 5.1-5.2 are on different data (emotion recognition, Cohn-Kanade, 10-fold CV); "
        "only the layout and the kind of comparison carry over, not the numbers.")


# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------
def load(n_points, seed):
    """A stratified subset of ``n_points`` of scikit-learn's digits (all 1797 with None)."""
    import ppl_sbl

    if n_points is None or n_points >= 1797:
        d = ppl_sbl.datasets.digits(None)
    else:
        d = ppl_sbl.datasets.digits(n_points, seed=seed)
    return d.X_train, d.t_train


# ----------------------------------------------------------------------------------------------
# Methods
# ----------------------------------------------------------------------------------------------
def one_nn(train, train_labels, test):
    from sklearn.neighbors import KNeighborsClassifier

    return KNeighborsClassifier(n_neighbors=1).fit(train, train_labels).predict(test)


def run_gplvm(key, Y, labels, Y_test, classes, args):
    """Fit one GPLVM; return (record, predictions by column, result, test latent means)."""
    import numpy as np

    import ppl_sbl
    from ppl_sbl.models import gplvm

    model, kernel = FITS[key]
    Z = ppl_sbl.datasets.one_of_k(labels, classes)
    res = gplvm.fit(Y, Z if model == "supervised" else None, model=model, latent_dim=args.latent_dim,
                    num_inducing=args.num_inducing, prior_kernel=kernel, max_steps=args.max_steps, seed=args.seed,
                    optimizer=args.optimizer if model != "unsupervised" else None)
    start = time.perf_counter()
    test_latent = res.transform(Y_test)
    preds = {f"{key}_1nn": one_nn(res.latent_mean, labels, test_latent)}
    transform_seconds = time.perf_counter() - start
    post_seconds = None
    if model == "supervised":
        start = time.perf_counter()
        out = res.predict(Y_test, num_samples=args.num_samples, seed=args.seed)
        preds[f"{key}_post"] = classes[np.argmax(out, 1)]
        post_seconds = time.perf_counter() - start
    rec = {
        "model": model, "prior_kernel": kernel if model != "unsupervised" else None, "optimizer": res.info["optimizer"],
        "elbo": float(res.elbo), "steps": int(res.info["steps"]), "converged": bool(res.converged),
        "seconds": float(res.seconds), "transform_1nn_seconds": transform_seconds, "posterior_seconds": post_seconds,
        "relevant_dims": [int(i) for i in res.relevant_dims], "kept_dims": int(len(res.relevant_dims)),
        "ard_alpha": [float(a) for a in res.ard_alpha], "relevance": [float(r) for r in res.relevance],
        "noise_var": float(res.noise_var),
    }
    return rec, preds, res, test_latent


def run_baselines(Y, labels, Y_test, args, fold):
    from sklearn.decomposition import PCA
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.svm import SVC

    methods = {
        "pca_lda_1nn": make_pipeline(PCA(n_components=min(args.pca_dims, Y.shape[1], len(Y) - 1)),
                                     LinearDiscriminantAnalysis(), KNeighborsClassifier(n_neighbors=1)),
        "rf": RandomForestClassifier(n_estimators=args.rf_trees, random_state=args.seed + fold, n_jobs=1),
        "svm_linear": SVC(kernel="linear", C=1.0),
    }
    preds, seconds = {}, {}
    for name, est in methods.items():
        start = time.perf_counter()
        preds[name] = est.fit(Y, labels).predict(Y_test)
        seconds[name] = time.perf_counter() - start
    return preds, seconds


# ----------------------------------------------------------------------------------------------
# Tables
# ----------------------------------------------------------------------------------------------
def pooled_table(folds, classes, columns):
    """Per-class accuracy (%) pooled over the folds, overall accuracy, and the fold spread."""
    import numpy as np

    truth = np.concatenate([f["test_labels"] for f in folds])
    table = {}
    for col in columns:
        pred = np.concatenate([f["predictions"][col] for f in folds])
        correct = pred == truth
        per_class = {str(c): 100.0 * float(correct[truth == c].mean()) for c in classes}
        per_fold = [100.0 * float(np.mean(np.asarray(f["predictions"][col]) == np.asarray(f["test_labels"])))
                    for f in folds]
        table[col] = {
            "per_class": per_class,
            "per_class_correct": {str(c): int(correct[truth == c].sum()) for c in classes},
            "overall": 100.0 * float(correct.mean()),
            "correct": int(correct.sum()),
            "tested": int(len(truth)),
            "per_fold": per_fold,
            "fold_sd": float(np.std(per_fold, ddof=1)) if len(per_fold) > 1 else float("nan"),
        }
    return table


def fit_summary(folds, fit_keys):
    import numpy as np

    out = {}
    for key in fit_keys:
        recs = [f["fits"][key] for f in folds]
        kept = [r["kept_dims"] for r in recs]
        out[key] = {
            "kept_dims": {"mean": float(np.mean(kept)), "min": int(min(kept)), "max": int(max(kept)), "per_fold": kept},
            "elbo": [r["elbo"] for r in recs],
            "steps": [r["steps"] for r in recs],
            "converged": [r["converged"] for r in recs],
            "seconds": [r["seconds"] for r in recs],
        }
    return out


def print_table(table, classes, columns, class_counts):
    groups = [COLUMNS[c][0] for c in columns]
    labels = [COLUMNS[c][1] for c in columns]
    width = 9
    line = f"{'':8}" + "".join(f"{g:>{width}}" for g in groups)
    log(line)
    log(f"{'class':8}" + "".join(f"{s:>{width}}" for s in labels))
    for c in classes:
        log(f"{str(c) + ' (' + str(class_counts[str(c)]) + ')':8}"
            + "".join(f"{table[col]['per_class'][str(c)]:{width}.1f}" for col in columns))
    log(f"{'Overall':8}" + "".join(f"{table[col]['overall']:{width}.1f}" for col in columns))
    log(f"{'fold sd':8}" + "".join(f"{table[col]['fold_sd']:{width}.1f}" for col in columns))


def print_fits(summary, latent_dim):
    import numpy as np

    log(f"{'model':26} {'kept dims of ' + str(latent_dim) + ': mean [min, max]':>34} {'bound (mean)':>14} "
        f"{'steps (mean)':>13} {'converged':>10} {'fit s (mean)':>13}")
    for key, s in summary.items():
        k = s["kept_dims"]
        log(f"{FIT_LABELS[key]:26} {k['mean']:>24.1f} [{k['min']:>2d}, {k['max']:>2d}] {np.mean(s['elbo']):14.1f} "
            f"{np.mean(s['steps']):13.0f} {sum(s['converged']):>4d} of {len(s['converged']):<3d} "
            f"{np.mean(s['seconds']):13.1f}")


# ----------------------------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------------------------
def figure_latent(latents, classes, out_dir, suffix):
    """Latent means of one fold in the two most relevant dimensions, coloured by class."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    keys = [k for k in ("sup_rbf", "autoenc", "unsup") if k in latents]
    fig, axes = plt.subplots(1, len(keys), figsize=(5.2 * len(keys), 4.6), squeeze=False)
    cmap = matplotlib.colormaps["tab10"]
    for ax, key in zip(axes[0], keys):
        res, train_labels, test_latent, test_labels = latents[key]
        order = np.argsort(-res.relevance)
        a, b = int(order[0]), int(order[1]) if len(order) > 1 else int(order[0])
        X = res.latent_mean
        for i, c in enumerate(classes):
            colour = cmap(i % 10)
            ax.scatter(X[train_labels == c, a], X[train_labels == c, b], s=9, color=colour, label=str(c))
            ax.scatter(test_latent[test_labels == c, a], test_latent[test_labels == c, b], s=16, marker="x",
                       color=colour, lw=0.8)
        ax.set(xlabel=f"latent dimension {a} (most relevant)", ylabel=f"latent dimension {b} (second)",
               title=f"{FIT_LABELS[key]}: {len(res.relevant_dims)} of {res.latent_dim} dims kept")
    axes[0][0].legend(fontsize=7, ncol=2, title="class", title_fontsize=7, markerscale=1.5)
    fig.suptitle("Latent means, first fold: training points (dots), test points (crosses)", fontsize=9)
    return save_figure(fig, os.path.join(out_dir, f"gplvm_latent{suffix}.png"))


def figure_ard(folds, fit_keys, out_dir, suffix):
    """ARD relevance alpha_q E[x_q^2] per latent dimension, scaled to the largest, per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, len(fit_keys), figsize=(3.6 * len(fit_keys), 3.6), squeeze=False, sharey=True)
    scaled = {}
    for key in fit_keys:
        rel = np.array([f["fits"][key]["relevance"] for f in folds])
        scaled[key] = rel / rel.max(1, keepdims=True)
    positive = np.concatenate([r[r > 0] for r in scaled.values()])
    lower = max(1e-12, min(3e-4, float(positive.min()) / 3 if len(positive) else 1e-12))
    for ax, key in zip(axes[0], fit_keys):
        rel = scaled[key]
        q = np.arange(rel.shape[1])
        ax.bar(q, rel[0], color="C0", label="first fold")
        for r in rel[1:]:
            ax.plot(q, r, "k.", ms=4)
        ax.axhline(1e-3, color="C3", lw=0.8, ls="--", label="kept above 1e-3")
        ax.set_yscale("log")
        ax.set_ylim(lower, 2.0)
        kept = [f["fits"][key]["kept_dims"] for f in folds]
        ax.set(xlabel="latent dimension q", title=f"{FIT_LABELS[key]}\nkept {min(kept)}-{max(kept)} dims")
        ax.title.set_fontsize(9)
    axes[0][0].set_ylabel("relevance alpha_q E[x_q^2] / max")
    axes[0][0].legend(fontsize=7, loc="lower left")
    fig.suptitle("ARD relevance per latent dimension (bars: first fold; dots: other folds)", fontsize=9)
    return save_figure(fig, os.path.join(out_dir, f"gplvm_ard{suffix}.png"))


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------
QUICK = {"n_points": 120, "folds": 2, "latent_dim": 6, "num_inducing": 12, "max_steps": 40, "rf_trees": 50}
FULL = {"n_points": 500, "folds": 5, "latent_dim": 20, "num_inducing": 30, "max_steps": 1000, "rf_trees": 500}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: " + ", ".join(f"{k}={v}" for k, v in QUICK.items()))
    p.add_argument("--n-points", type=int, default=None, help="stratified subset of the digits (default 500)")
    p.add_argument("--folds", type=int, default=None, help="stratified cross-validation folds (default 5)")
    p.add_argument("--latent-dim", type=int, default=None, help="latent dimensions ARD starts from (default 20)")
    p.add_argument("--num-inducing", type=int, default=None, help="inducing inputs (default 30)")
    p.add_argument("--max-steps", type=int, default=None,
                   help="sweeps or L-BFGS steps at most per GPLVM fit (default 1000)")
    p.add_argument("--optimizer", choices=["natural", "lbfgs"], default=None,
                   help="optimizer of the supervised and autoencoder fits (default: the library's, natural)")
    p.add_argument("--pca-dims", type=int, default=None, help="PCA dimensions before LDA (default: --latent-dim)")
    p.add_argument("--rf-trees", type=int, default=None, help="trees of the random forest (default 500)")
    p.add_argument("--num-samples", type=int, default=64, help="draws of q(x*) for the posterior rule (5.29)")
    p.add_argument("--seed", type=int, default=0, help="subset, folds, inducing inputs, forests (default 0)")
    p.add_argument("--no-figures", action="store_true")
    p.add_argument("--out-dir", default=os.path.join(HERE, "results"),
                   help="where the JSON record and the PNG figures go (default experiments/results)")
    args = p.parse_args(argv)
    for k, v in (QUICK if args.quick else FULL).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.pca_dims is None:
        args.pca_dims = args.latent_dim
    return args


def save(record, out_dir, suffix, announce=False):
    record.setdefault("partial", True)
    return write_record(record, os.path.join(out_dir, f"gplvm_experiments{suffix}.json"), announce=announce)


def fold_record(fold):
    """What the record keeps of a fold: its sizes, times and fits (their ARD relevance per latent
    dimension, not the alphas), without the predictions (the tables are made from them)."""
    fits = {key: {k: v for k, v in rec.items() if k != "ard_alpha"} for key, rec in fold["fits"].items()}
    return {"fold": fold["fold"], "train_size": fold["train_size"], "test_size": len(fold["test_labels"]),
            "fits": fits, "baseline_seconds": fold["baseline_seconds"], "seconds": fold["seconds"]}


def main(argv=None):
    args = parse_args(argv)
    import numpy as np
    from sklearn.model_selection import StratifiedKFold

    import ppl_sbl  # noqa: F401  (float64 on)

    os.makedirs(args.out_dir, exist_ok=True)
    suffix = ("_quick" if args.quick else "") + ("_lbfgs" if args.optimizer == "lbfgs" else "")
    env = environment("sklearn")
    mode = "quick" if args.quick else "full"
    log(f"# supervised GPLVM experiments, Sauer's thesis ch. 5 ({mode})  {env['date']}  "
        f"backend={env['jax_backend']}  cpus={env['cpu_count']}  load={env['load_average']}")
    log(f"# digits: {args.n_points} images (stratified, seed {args.seed}), {args.folds}-fold stratified CV; "
        f"latent_dim={args.latent_dim}  num_inducing={args.num_inducing}  max_steps={args.max_steps}  "
        f"posterior draws={args.num_samples}")
    log(f"# baselines: PCA({args.pca_dims}) + LDA + 1-NN; RandomForest({args.rf_trees} trees); SVC(kernel='linear', C=1)")
    log("# " + NOTE)

    Y, labels = load(args.n_points, args.seed)
    classes = np.unique(labels)
    class_counts = {str(c): int(np.sum(labels == c)) for c in classes}
    record = {
        "experiment": "supervised / autoencoder / unsupervised Bayesian GPLVMs, Sauer's thesis ch. 5, "
                      "Tables 5.1-5.2 layout, on scikit-learn digits",
        "mode": mode, "args": vars(args), "environment": env, "note": NOTE,
        "data": {"name": "scikit-learn digits (64 pixels in [0, 1])", "n_points": int(len(labels)),
                 "classes": [int(c) for c in classes], "class_counts": class_counts},
        "fits_config": {k: {"model": m, "prior_kernel": pk if m != "unsupervised" else None} for k, (m, pk) in
                        FITS.items()},
        "columns": {k: {"group": g, "label": lab, "fit": f} for k, (g, lab, f) in COLUMNS.items()},
        "baselines": {"pca_lda_1nn": f"PCA(n_components={args.pca_dims}) -> LinearDiscriminantAnalysis() -> "
                                     "KNeighborsClassifier(n_neighbors=1)",
                      "rf": f"RandomForestClassifier(n_estimators={args.rf_trees}, random_state=seed + fold)",
                      "svm_linear": "SVC(kernel='linear', C=1.0)"},
        "folds": [],
    }
    columns = list(COLUMNS)
    fit_keys = list(FITS)
    latents = {}
    folds = []  # every fold in full: predictions, ARD vectors
    t_all = time.perf_counter()
    splitter = StratifiedKFold(args.folds, shuffle=True, random_state=args.seed)
    for fold, (tr, te) in enumerate(splitter.split(Y, labels)):
        t_fold = time.perf_counter()
        Ytr, ltr, Yte, lte = Y[tr], labels[tr], Y[te], labels[te]
        preds, fits = {}, {}
        for key in fit_keys:
            rec, p, res, test_latent = run_gplvm(key, Ytr, ltr, Yte, classes, args)
            fits[key], preds = rec, {**preds, **p}
            if fold == 0 and key in ("sup_rbf", "autoenc", "unsup"):
                latents[key] = (res, ltr, test_latent, lte)
            acc = ", ".join(f"{c.rsplit('_', 1)[1]} {100 * np.mean(v == lte):.1f}%" for c, v in p.items())
            log(f"  fold {fold + 1}/{args.folds} {FIT_LABELS[key]:24}: {acc}; kept {rec['kept_dims']} dims, "
                f"bound {rec['elbo']:.1f}, {rec['steps']} {rec['optimizer']} steps, converged {rec['converged']}, {rec['seconds']:.1f} s")
        base, base_seconds = run_baselines(Ytr, ltr, Yte, args, fold)
        preds.update(base)
        log(f"  fold {fold + 1}/{args.folds} baselines: "
            + ", ".join(f"{k} {100 * np.mean(v == lte):.1f}%" for k, v in base.items())
            + f"  ({time.perf_counter() - t_fold:.1f} s for the fold)")
        folds.append({
            "fold": fold, "train_size": int(len(tr)), "test_labels": [int(c) for c in lte],
            "predictions": {c: [int(v) for v in preds[c]] for c in columns},
            "fits": fits, "baseline_seconds": base_seconds, "seconds": time.perf_counter() - t_fold,
        })
        record["folds"].append(fold_record(folds[-1]))
        save(record, args.out_dir, suffix)

    table = pooled_table(folds, classes, columns)
    summary = fit_summary(folds, fit_keys)
    record["table"] = table
    record["fit_summary"] = summary
    log(f"\nAccuracy (%) per class, pooled over {args.folds} folds ({len(labels)} images; class counts in brackets); "
        "layout of the thesis's Tables 5.1-5.2")
    print_table(table, classes, columns, class_counts)
    log("\nColumns: Sup = supervised Bayesian GPLVM with latent prior LIN / RBF / M32 (Matern 3/2), classified by "
        "1-NN on latent means (5.32) or the posterior rule (5.29) (Post); AutoEnc, Unsup = autoencoder (RBF prior) and "
        "unsupervised GPLVMs with 1-NN; baselines as listed above.")
    log(NOTE)
    log(f"\nGPLVM fits over {args.folds} folds (relevant dims: relevance >= 1e-3 of the largest)")
    print_fits(summary, args.latent_dim)

    if not args.no_figures:
        paths = [figure_latent(latents, classes, args.out_dir, suffix),
                 figure_ard(folds, fit_keys, args.out_dir, suffix)]
        record["figures"] = paths
        log("# figures: " + ", ".join(record["figures"]))
    record["total_seconds"] = time.perf_counter() - t_all
    record["partial"] = False
    log(f"# total {record['total_seconds']:.1f} s")
    save(record, args.out_dir, suffix, announce=True)
    return record


if __name__ == "__main__":
    main()
