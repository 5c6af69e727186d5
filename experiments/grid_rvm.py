"""The experiments of the grid RVM paper (Kropotov et al., section 6.1) on data that ship offline.

Not a test (``tests/test_experiments_grid_rvm.py`` runs ``--quick``). Three experiments, each
comparing the flat variational RVM (``models.rvm``, Bishop & Tipping 2000) with the p-grid
and s-grid RVMs (``models.grid_rvm``, kind "p" and "s") fitted by closed-form CAVI:

1. **Noisy sinc** (paper's Fig. 3 c, d). 100 training points of sinc(x) on [-10, 10] with
   uniform noise on [-0.2, 0.2], 600 noiseless test points, plus k standard-normal noise
   features; inputs standardised with the training mean and standard deviation. Per-dimension
   RBF tables phi_ij(y) = exp(-delta (y(i) - x_j(i))^2), delta = 5.55: a table of (training
   centres j) x (input dimensions i) per object, i.e. M = 100 (1 + k) basis functions; the
   flat RVR sees the same basis flattened in C order. Reported: test and train RMSE and the
   number of relevant basis functions (|E[w]| > 0.1, the paper's rule).
2. **Mixture** (paper's Fig. 4 c, d). The two-class Gaussian mixture of Hastie, Tibshirani &
   Friedman regenerated from its recipe (:func:`ppl_sbl.datasets.mixture`: 200 training and
   5000 test points, centres redrawn until the Bayes error lies in [0.19, 0.21]) plus k noise
   features; the same per-dimension RBF tables (M = 200 (2 + k), up to 6400). Reported: test
   and train error, relevant basis functions.
3. **Digits as pixel tables** (in place of the paper's LFW similarity tables, which do not
   ship). scikit-learn's bundled 8 x 8 digits, 0-4 against 5-9, pixels standardised with the
   training set; the grid models have one precision per pixel row (alpha_i) and per pixel
   column (beta_j), the flat RVM one per pixel. Training sets of 20 to 500 images (stratified),
   the remaining images are the test set. Reported: test error, and the row / column
   precisions E[alpha_i], E[beta_j] of the grid models and the 8 x 8 map of the flat RVM's
   E[alpha_k] (the paper's Fig. 1 b, c style) at the largest training size.

The paper's figures are averages over repetitions whose number it does not give; here every
point is the mean over the seeds listed in the configuration (full mode: sinc 2 seeds, mixture
1 seed, digits 2 seeds; quick mode: 1 seed), with the standard deviation in the JSON record.
A seed fixes the data draw (for the mixture also its centres); the fits are deterministic.

Stopping rule. CAVI stops when the relative ELBO change between sweeps falls below ``--tol``
(default 1e-9, the library default) or after ``max_sweeps`` sweeps. The p-grid's precisions
have a scale degeneracy (alpha_i c, beta_j / c give the same prior) along which the vague
Gamma hyperpriors let CAVI drift for thousands of sweeps, and the mixture with 30 noise features
has M = 6400 coefficients, so a run to tol 1e-9 everywhere would take hours. The sweep caps below are a compute budget, not a
tuned setting: every fit records ``converged``, the number of sweeps and the last relative
ELBO change, and the tables count how many fits stopped at the cap.

Full mode (about an hour; the mixture with 20 and 30 noise features takes half of it)::

    sinc     k = 0, 1, 2, 5, 10, 15, 20   seeds 0, 1   max 1500 sweeps
    mixture  k = 0, 2, 5, 10, 20, 30      seed 0       max  500 sweeps
    digits   n = 20, 50, 100, 200, 500    seeds 0, 1   max 1500 sweeps

Quick mode (``--quick``, a smoke run): one setting per experiment, sinc with 50 training points
and k = 2; mixture with 60 training points, 1000 test points and k = 2; digits n = 60; one seed;
150 sweeps; no pruning. Compiling, not sweeping, is most of a quick run's time: each model
compiles its CAVI loop once per problem shape, and pruning would compile the smaller shapes too.

Seconds per fit are wall-clock times of ``CAVI.run`` and include the jit compilation of the
sweep for every new problem shape (pruning also compiles smaller shapes).

Usage::

    python experiments/grid_rvm.py --quick --out-dir /tmp/grid   # *_quick.json, grid_rvm_*_quick.png
    python experiments/grid_rvm.py          # experiments/results/grid_rvm_experiments.json, grid_rvm_*.png
    python experiments/grid_rvm.py --only sinc digits --seeds 0 1 2
"""
from __future__ import annotations

import argparse
import os
import sys
import time


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for ``benchmarks.timing``

from benchmarks.timing import environment, log, save_figure, write_record  # noqa: E402
DELTA = 5.55
RELEVANT_THRESHOLD = 0.1  # |E[w]| above this: a relevant basis function (the paper's rule)
MODELS = ("rvm", "p", "s")
LABELS = {"rvm": "RVM", "p": "p-grid", "s": "s-grid"}
STYLE = {"rvm": dict(color="0.7"), "p": dict(color="k"), "s": dict(color="0.4")}  # the paper's greys
BAYES_BAND = (0.19, 0.21)

CONFIG = {
    "full": {
        "sinc": dict(n_train=100, n_test=600, noise_features=[0, 1, 2, 5, 10, 15, 20], seeds=[0, 1], max_sweeps=1500),
        "mixture": dict(n_train=200, n_test=5000, noise_features=[0, 2, 5, 10, 20, 30], seeds=[0], max_sweeps=500),
        "digits": dict(sizes=[20, 50, 100, 200, 500], seeds=[0, 1], max_sweeps=1500),
    },
    "quick": {
        "sinc": dict(n_train=50, n_test=600, noise_features=[2], seeds=[0], max_sweeps=150, prune=False),
        "mixture": dict(n_train=60, n_test=1000, noise_features=[2], seeds=[0], max_sweeps=150, prune=False),
        "digits": dict(sizes=[60], seeds=[0], max_sweeps=150, prune=False),
    },
}

PAPER = {
    "sinc": "Fig. 3 c, d: RVR begins to overfit from several noise features; both grid RVRs stay stable "
            "up to 20 noise features; the s-grid is less sparse than the p-grid (no numbers in the text).",
    "mixture": "Fig. 4 c, d: grid RVMs stable, 22-23% test error even with 30 noise features, while the RVM "
               "definitely overfits from several noise features (Bayes error 19%); s-grid less sparse.",
    "digits": "Not in the paper (its real tables, LFW, do not ship). Its LFW claim, Fig. 6: grid RVMs beat "
              "the RVM, most clearly with little training data; the advantage shrinks as the data grow.",
}


# ----------------------------------------------------------------------------------------------
# Fitting
# ----------------------------------------------------------------------------------------------
def fit(model, task, X, t, X_test, t_test, *, max_sweeps, tol, prune=True):
    """Fit one model ("rvm", "p", "s") to table inputs X (N, M1, M2); the RVM sees X flattened
    in C order; ``prune``: CAVI's pruning. Returns (record, result)."""
    import numpy as np

    import ppl_sbl
    from ppl_sbl.models import grid_rvm, rvm

    N, N_test = X.shape[0], X_test.shape[0]
    if model == "rvm":
        program = rvm.regression if task == "regression" else rvm.classification
        train, test, kwargs = X.reshape(N, -1), X_test.reshape(N_test, -1), {}
    else:
        program = grid_rvm.regression if task == "regression" else grid_rvm.classification
        train, test, kwargs = X, X_test, {"kind": model}
    # the paper's algorithm for every model, the sweep (CAVI's default would run the RVM's fast schedule)
    cavi = ppl_sbl.CAVI(program, tol=tol, max_sweeps=max_sweeps, prune=prune, progress_bar=False, schedule="sweep")
    start = time.perf_counter()
    res = cavi.run(train, t, **kwargs)
    seconds = time.perf_counter() - start
    trace = np.asarray(res.elbo_trace)
    last_change = float(abs(trace[-1] - trace[-2]) / abs(trace[-1])) if len(trace) > 1 else float("nan")
    w = np.asarray(res.state.w.mean)
    rec = {
        "model": model,
        "seconds": seconds,
        "num_sweeps": res.num_sweeps,
        "converged": bool(res.converged),
        "last_relative_change": last_change,
        "elbo": res.elbo,
        "relevant": int(np.sum(np.abs(w) > RELEVANT_THRESHOLD)),
        "active": int(np.sum(w != 0.0)),
    }
    if task == "regression":
        for name, inputs, target in (("test", test, t_test), ("train", train, t)):
            mean, _ = res.predict(inputs)
            rec[f"rmse_{name}"] = float(np.sqrt(np.mean((np.asarray(mean) - target) ** 2)))
    else:
        for name, inputs, target in (("test", test, t_test), ("train", train, t)):
            prob = np.asarray(res.predict(inputs))
            rec[f"error_{name}"] = float(np.mean((prob > 0.5) != (target > 0.5)))
    return rec, res


def precisions(model, res):
    """E[alpha_i], E[beta_j] (grid) or E[alpha_k] (RVM) as lists."""
    import numpy as np

    s = res.state
    if model == "rvm":
        return {"alpha": (np.asarray(s.alpha_shape) / np.asarray(s.alpha_rate)).tolist()}
    return {"alpha": (np.asarray(s.shapes[0]) / np.asarray(s.rates[0])).tolist(),
            "beta": (np.asarray(s.shapes[1]) / np.asarray(s.rates[1])).tolist()}


def noise_weight_share(res, table_shape, signal_dims):
    """Share of sum E[w]^2 carried by the noise dimensions (columns >= signal_dims) of the
    (centre, dimension) table: how much of the fit rests on features that carry no signal."""
    import numpy as np

    W = np.asarray(res.state.w.mean).reshape(table_shape)
    total = float(np.sum(W**2))
    return float(np.sum(W[:, signal_dims:] ** 2) / total) if total > 0 else 0.0


def fit_line(label, rec, metric):
    log(f"    {label:<7} {metric}={rec[metric]:.4f}  relevant={rec['relevant']:>4}  "
        f"{rec['seconds']:7.1f} s  {rec['num_sweeps']:>5} sweeps  "
        f"{'converged' if rec['converged'] else 'cap     '}  last rel. change {rec['last_relative_change']:.1e}")


# ----------------------------------------------------------------------------------------------
# Experiments
# ----------------------------------------------------------------------------------------------
def run_sinc(cfg, tol):
    from ppl_sbl import basis, datasets

    rows = []
    for k in cfg["noise_features"]:
        for seed in cfg["seeds"]:
            d = datasets.sinc(n_train=cfg["n_train"], n_test=cfg["n_test"], noise_features=k, seed=seed)
            T = basis.rbf_table(d.X_train, d.X_train, DELTA)
            T_test = basis.rbf_table(d.X_test, d.X_train, DELTA)
            log(f"  sinc k={k} seed={seed}: tables {T.shape} (M = {T.shape[1] * T.shape[2]})")
            for model in MODELS:
                rec, res = fit(model, "regression", T, d.t_train, T_test, d.t_test,
                               max_sweeps=cfg["max_sweeps"], tol=tol, prune=cfg.get("prune", True))
                rec.update(noise_features=k, seed=seed,
                           noise_weight_share=noise_weight_share(res, T.shape[1:], 1))
                fit_line(LABELS[model], rec, "rmse_test")
                rows.append(rec)
    return rows


def run_mixture(cfg, tol):
    from ppl_sbl import basis, datasets

    rows = []
    bayes = {}
    for k in cfg["noise_features"]:
        for seed in cfg["seeds"]:
            if seed not in bayes:
                bayes[seed] = datasets.mixture_bayes_error(datasets.mixture_centres(seed))
            m = datasets.mixture(n_train=cfg["n_train"], n_test=cfg["n_test"], noise_features=k, seed=seed)
            T = basis.rbf_table(m.X_train, m.X_train, DELTA)
            T_test = basis.rbf_table(m.X_test, m.X_train, DELTA)
            log(f"  mixture k={k} seed={seed} (Bayes error {bayes[seed]:.3f}): tables {T.shape} "
                f"(M = {T.shape[1] * T.shape[2]})")
            for model in MODELS:
                rec, res = fit(model, "classification", T, m.t_train, T_test, m.t_test,
                               max_sweeps=cfg["max_sweeps"], tol=tol, prune=cfg.get("prune", True))
                rec.update(noise_features=k, seed=seed, bayes_error=bayes[seed],
                           noise_weight_share=noise_weight_share(res, T.shape[1:], 2))
                fit_line(LABELS[model], rec, "error_test")
                rows.append(rec)
    return rows, {str(s): v for s, v in bayes.items()}


def run_digits(cfg, tol):
    from ppl_sbl import datasets

    import numpy as np

    rows, maps, constant = [], {}, None
    largest = max(cfg["sizes"])
    for n in cfg["sizes"]:
        for seed in cfg["seeds"]:
            g = datasets.digits_table(n, seed=seed)
            log(f"  digits n={n} seed={seed}: train {g.X_train.shape}, test {g.X_test.shape[0]}")
            for model in MODELS:
                rec, res = fit(model, "classification", g.X_train, g.t_train, g.X_test, g.t_test,
                               max_sweeps=cfg["max_sweeps"], tol=tol, prune=cfg.get("prune", True))
                rec.update(n_train=n, seed=seed, n_test=int(g.X_test.shape[0]))
                fit_line(LABELS[model], rec, "error_test")
                rows.append(rec)
                if n == largest and seed == cfg["seeds"][0]:
                    maps[model] = precisions(model, res)
                    constant = (np.std(g.X_train, axis=0) == 0).tolist()
    # pixels constant on the training set are all-zero features: their precisions stay at the
    # prior mean a0 / b0 = 1 and say nothing about relevance
    return rows, {"n_train": largest, "seed": cfg["seeds"][0], "precisions": maps, "constant_pixels": constant}


# ----------------------------------------------------------------------------------------------
# Summaries and tables
# ----------------------------------------------------------------------------------------------
def summarise(rows, x_key, metrics):
    """Mean (and standard deviation over seeds) of each metric per (x, model)."""
    import numpy as np

    out = []
    for x in sorted({r[x_key] for r in rows}):
        for model in MODELS:
            sel = [r for r in rows if r[x_key] == x and r["model"] == model]
            if not sel:
                continue
            entry = {x_key: x, "model": model, "repetitions": len(sel),
                     "fits_at_cap": sum(not r["converged"] for r in sel)}
            for m in metrics:
                values = np.array([r[m] for r in sel], dtype=float)
                entry[m] = float(values.mean())
                entry[m + "_sd"] = float(values.std(ddof=1)) if len(values) > 1 else None
            out.append(entry)
    return out


def table(summary, x_key, x_label, columns, extra=None):
    """One line per x: each (metric, format) for RVM | p-grid | s-grid."""
    by = {(e[x_key], e["model"]): e for e in summary}
    xs = sorted({e[x_key] for e in summary})
    head = f"{x_label:>6} |"
    sub = f"{'':>6} |"
    for title, _, width in columns:
        group = 3 * (width + 1) - 1
        head += f" {title:^{group}} |"
        sub += " " + " ".join(f"{LABELS[m]:>{width}}" for m in MODELS) + " |"
    if extra:
        head += f" {extra[0]}"
    lines = [head, sub, "-" * len(sub)]
    for x in xs:
        line = f"{x:>6} |"
        for _, (metric, spec), width in columns:
            cells = []
            for m in MODELS:
                e = by.get((x, m))
                cells.append(f"{format(e[metric], spec):>{width}}" if e else f"{'-':>{width}}")
            line += " " + " ".join(cells) + " |"
        if extra:
            line += f" {extra[1](x)}"
        lines.append(line)
    return "\n".join(lines)


def report_sinc(summary, cfg):
    text = table(summary, "noise_features", "k", [
        ("test RMSE", ("rmse_test", ".4f"), 7),
        ("train RMSE", ("rmse_train", ".4f"), 7),
        ("relevant (|w|>0.1)", ("relevant", ".1f"), 7),
        ("noise share of sum w^2", ("noise_weight_share", ".3f"), 7),
        ("seconds per fit", ("seconds", ".1f"), 7),
        ("fits at sweep cap", ("fits_at_cap", "d"), 7),
    ])
    return (f"Noisy sinc, per-dimension RBF tables (delta {DELTA}), N = {cfg['n_train']}, "
            f"{cfg['n_test']} test points; mean over {len(cfg['seeds'])} seed(s) {cfg['seeds']}, "
            f"max {cfg['max_sweeps']} sweeps\n{text}\nPaper: {PAPER['sinc']}")


def report_mixture(summary, cfg, bayes):
    text = table(summary, "noise_features", "k", [
        ("test error", ("error_test", ".3f"), 7),
        ("train error", ("error_train", ".3f"), 7),
        ("relevant (|w|>0.1)", ("relevant", ".1f"), 7),
        ("noise share of sum w^2", ("noise_weight_share", ".3f"), 7),
        ("seconds per fit", ("seconds", ".1f"), 7),
        ("fits at sweep cap", ("fits_at_cap", "d"), 7),
    ])
    b = ", ".join(f"seed {s}: {v:.3f}" for s, v in bayes.items())
    return (f"Mixture, per-dimension RBF tables (delta {DELTA}), N = {cfg['n_train']}, {cfg['n_test']} test "
            f"points; mean over {len(cfg['seeds'])} seed(s) {cfg['seeds']}, max {cfg['max_sweeps']} sweeps; "
            f"Bayes error ({b})\n{text}\nPaper: {PAPER['mixture']}")


def report_digits(summary, cfg, maps):
    text = table(summary, "n_train", "N", [
        ("test error", ("error_test", ".3f"), 7),
        ("train error", ("error_train", ".3f"), 7),
        ("relevant (|w|>0.1)", ("relevant", ".1f"), 7),
        ("seconds per fit", ("seconds", ".1f"), 7),
        ("fits at sweep cap", ("fits_at_cap", "d"), 7),
    ])
    lines = [f"Digits 0-4 vs 5-9 as 8 x 8 pixel tables, test set = the other images; mean over "
             f"{len(cfg['seeds'])} seed(s) {cfg['seeds']}, max {cfg['max_sweeps']} sweeps", text,
             f"Precisions at N = {maps['n_train']}, seed {maps['seed']} (log10; large = switched off):"]
    import numpy as np

    for model in ("p", "s"):
        p = maps["precisions"].get(model)
        if p:
            for axis in ("alpha", "beta"):
                name = "rows E[alpha_i]" if axis == "alpha" else "cols E[beta_j] "
                lines.append(f"  {LABELS[model]:<6} {name}: "
                             + " ".join(f"{v:6.1f}" for v in np.log10(p[axis])))
    if "rvm" in maps["precisions"]:
        a = np.log10(np.asarray(maps["precisions"]["rvm"]["alpha"])).reshape(8, 8)
        const = np.asarray(maps["constant_pixels"], dtype=bool).reshape(8, 8)
        lines.append("  RVM E[alpha_k] per pixel (8 x 8; '.' = pixel constant on the training set):")
        lines += ["    " + " ".join(f"{'.':>6}" if c else f"{v:6.1f}" for v, c in zip(row, crow))
                  for row, crow in zip(a, const)]
    lines.append(f"Paper: {PAPER['digits']}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------------------------
def _curves(ax, summary, x_key, metric, label_suffix="", **kw):
    for m in MODELS:
        sel = sorted((e for e in summary if e["model"] == m), key=lambda e: e[x_key])
        if sel:
            ax.plot([e[x_key] for e in sel], [e[metric] for e in sel], marker="o", ms=3,
                    label=LABELS[m] + label_suffix, **STYLE[m], **kw)


def figures(record, out_dir, suffix=""):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    written = []

    def save(fig, name):
        written.append(save_figure(fig, os.path.join(out_dir, name.replace(".png", suffix + ".png"))))

    reps = lambda cfg: f"{len(cfg['seeds'])} seed(s)"  # noqa: E731
    if "sinc" in record:
        s, cfg = record["sinc"]["summary"], record["config"]["sinc"]
        fig, ax = plt.subplots(figsize=(5, 3.6))
        _curves(ax, s, "noise_features", "rmse_test", " test", ls="-")
        _curves(ax, s, "noise_features", "rmse_train", " train", ls=":")
        ax.set_xlabel("number of noise features")
        ax.set_ylabel("RMSE")
        ax.set_title(f"Noisy sinc, per-dimension RBFs ({reps(cfg)})")
        ax.legend(fontsize=7)
        save(fig, "grid_rvm_sinc_rmse.png")
        fig, ax = plt.subplots(figsize=(5, 3.6))
        _curves(ax, s, "noise_features", "relevant")
        ax.set_xlabel("number of noise features")
        ax.set_ylabel("relevant basis functions (|w| > 0.1)")
        ax.set_title(f"Noisy sinc: relevant basis functions ({reps(cfg)})")
        ax.legend(fontsize=8)
        save(fig, "grid_rvm_sinc_relevant.png")
    if "mixture" in record:
        s, cfg = record["mixture"]["summary"], record["config"]["mixture"]
        fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.6))
        axes[0].axhspan(*BAYES_BAND, color="C2", alpha=0.2, label="Bayes error 0.19-0.21")
        _curves(axes[0], s, "noise_features", "error_test", " test", ls="-")
        _curves(axes[0], s, "noise_features", "error_train", " train", ls=":")
        axes[0].set_xlabel("number of noise features")
        axes[0].set_ylabel("error rate")
        axes[0].set_title(f"Mixture, per-dimension RBFs ({reps(cfg)})")
        axes[0].legend(fontsize=7)
        _curves(axes[1], s, "noise_features", "relevant")
        axes[1].set_xlabel("number of noise features")
        axes[1].set_ylabel("relevant basis functions (|w| > 0.1)")
        axes[1].set_title("Mixture: relevant basis functions")
        axes[1].legend(fontsize=8)
        save(fig, "grid_rvm_mixture_error.png")
    if "digits" in record:
        s, cfg = record["digits"]["summary"], record["config"]["digits"]
        fig, ax = plt.subplots(figsize=(5, 3.6))
        _curves(ax, s, "n_train", "error_test", " test", ls="-")
        _curves(ax, s, "n_train", "error_train", " train", ls=":")
        ax.set_xscale("log")
        ax.set_xlabel("training images")
        ax.set_ylabel("error rate")
        ax.set_title(f"Digits 0-4 vs 5-9, 8x8 pixel tables ({reps(cfg)})")
        ax.legend(fontsize=7)
        save(fig, "grid_rvm_digits_error.png")
        maps = record["digits"]["relevance"]
        prec = maps["precisions"]
        fig, axes = plt.subplots(1, 5, figsize=(17, 3.4))
        for i, model in enumerate(("p", "s")):
            for j, axis in enumerate(("alpha", "beta")):
                ax = axes[2 * i + j]
                if model in prec:
                    ax.bar(np.arange(8), prec[model][axis], color=STYLE[model]["color"])
                ax.set_yscale("log")
                ax.set_xlabel("pixel row i" if axis == "alpha" else "pixel column j")
                ax.set_ylabel("E[alpha_i]" if axis == "alpha" else "E[beta_j]")
                ax.set_title(f"{LABELS[model]}: {'row' if axis == 'alpha' else 'column'} precisions")
        ax = axes[4]
        if "rvm" in prec:
            a = np.log10(np.reshape(prec["rvm"]["alpha"], (8, 8)))
            a = np.ma.masked_where(np.reshape(maps["constant_pixels"], (8, 8)), a)
            cmap = matplotlib.colormaps["Greys"].copy()
            cmap.set_bad("C1")
            im = ax.imshow(a, cmap=cmap)
            fig.colorbar(im, ax=ax, label="log10 E[alpha_k] (orange: constant pixel)")
        ax.set_xlabel("pixel column")
        ax.set_ylabel("pixel row")
        ax.set_title("RVM: per-pixel precision")
        fig.suptitle(f"Digits, N = {maps['n_train']} (seed {maps['seed']}): large precision = switched off",
                     fontsize=9)
        save(fig, "grid_rvm_digits_relevance.png")
    return written


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small smoke run")
    p.add_argument("--out-dir", default=os.path.join(HERE, "results"),
                   help="where the JSON record and the PNG figures go (default experiments/results)")
    p.add_argument("--only", nargs="+", choices=["sinc", "mixture", "digits"], default=None,
                   help="run only these experiments")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="override the seeds of every experiment")
    p.add_argument("--max-sweeps", type=int, default=None, help="override the sweep cap of every experiment")
    p.add_argument("--tol", type=float, default=1e-9, help="CAVI relative ELBO tolerance (default 1e-9)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import ppl_sbl  # noqa: F401  (float64 on)

    mode = "quick" if args.quick else "full"
    config = {name: dict(cfg) for name, cfg in CONFIG[mode].items() if args.only is None or name in args.only}
    for cfg in config.values():
        if args.seeds is not None:
            cfg["seeds"] = list(args.seeds)
        if args.max_sweeps is not None:
            cfg["max_sweeps"] = int(args.max_sweeps)
    os.makedirs(args.out_dir, exist_ok=True)
    name = "grid_rvm_experiments" + ("_quick" if args.quick else "")
    out = os.path.join(args.out_dir, name + ".json")
    env = environment()
    record = {"experiment": "grid RVM paper (Kropotov et al.) section 6.1 experiments, offline data",
              "mode": mode, "tol": args.tol, "delta": DELTA, "relevant_threshold": RELEVANT_THRESHOLD,
              "config": config, "environment": env, "paper": PAPER}
    log(f"# grid RVM experiments ({mode})  {env['date']}  backend={env['jax_backend']}  cpus={env['cpu_count']}")
    log(f"# tol={args.tol}; repetitions: " + ", ".join(f"{k} {len(c['seeds'])} seed(s) {c['seeds']} "
                                                       f"(max {c['max_sweeps']} sweeps"
                                                       + ("" if c.get("prune", True) else ", no pruning") + ")"
                                                       for k, c in config.items()))

    def save(announce=False):
        write_record(record, out, announce=announce)

    reports = []
    t_all = time.perf_counter()
    if "sinc" in config:
        log("\n== Noisy sinc")
        t0 = time.perf_counter()
        rows = run_sinc(config["sinc"], args.tol)
        summary = summarise(rows, "noise_features", ["rmse_test", "rmse_train", "relevant", "noise_weight_share",
                                                     "seconds", "num_sweeps"])
        record["sinc"] = {"fits": rows, "summary": summary, "seconds": time.perf_counter() - t0}
        reports.append(report_sinc(summary, config["sinc"]))
        save()
    if "mixture" in config:
        log("\n== Mixture")
        t0 = time.perf_counter()
        rows, bayes = run_mixture(config["mixture"], args.tol)
        summary = summarise(rows, "noise_features", ["error_test", "error_train", "relevant", "noise_weight_share",
                                                     "seconds", "num_sweeps"])
        record["mixture"] = {"fits": rows, "summary": summary, "bayes_error": bayes,
                             "seconds": time.perf_counter() - t0}
        reports.append(report_mixture(summary, config["mixture"], bayes))
        save()
    if "digits" in config:
        log("\n== Digits")
        t0 = time.perf_counter()
        rows, maps = run_digits(config["digits"], args.tol)
        summary = summarise(rows, "n_train", ["error_test", "error_train", "relevant", "seconds", "num_sweeps"])
        record["digits"] = {"fits": rows, "summary": summary, "relevance": maps,
                            "seconds": time.perf_counter() - t0}
        reports.append(report_digits(summary, config["digits"], maps))
        save()
    suffix = "_quick" if args.quick else ""
    record["figures"] = figures(record, args.out_dir, suffix)
    record["seconds_total"] = time.perf_counter() - t_all
    save(announce=True)
    log("\n" + "\n\n".join(reports))
    log(f"\nTotal {record['seconds_total']:.0f} s. Record: {out}; figures: {', '.join(record['figures'])}")
    return record


if __name__ == "__main__":
    main()
