"""The ``ppl-sbl`` command: compare sparse Bayesian models by ELBO and by leave-one-out on built-in data."""
from __future__ import annotations

import argparse
import sys

import numpy as np

from ._cache import compilation_cache, quick_compile_flags, short_locations

__all__ = ["main"]

# ripley: Tipping (2001) used a Gaussian kernel of width 0.5, exp(-||x - x'||^2 / 0.5^2);
# sinc, mixture: the grid RVM paper's delta on standardised inputs
_DEFAULT_DELTA = {"ripley": 4.0, "sinc": 5.55, "mixture": 5.55, "digits": None}
_CLASSIFICATION = {"ripley": True, "sinc": False, "mixture": True, "digits": True}


def _load(args):
    from . import datasets

    if args.dataset == "ripley":
        data = datasets.ripley()
    elif args.dataset == "sinc":
        data = datasets.sinc(noise_features=args.noise_features, seed=args.seed)
    elif args.dataset == "mixture":
        data = datasets.mixture(noise_features=args.noise_features, seed=args.seed)
    else:
        data = datasets.digits_table(args.n_train, seed=args.seed)
    if args.label_noise:
        if not _CLASSIFICATION[args.dataset]:
            raise ValueError("`--label-noise` applies to the classification datasets (ripley, mixture, digits), "
                             "not to sinc.")
        t, flipped = datasets.flip_labels(data.t_train, args.label_noise, np.random.default_rng(args.seed))
        data = data._replace(t_train=t, description=f"{data.description}, {len(flipped)} training labels flipped "
                                                    f"at random (--label-noise {args.label_noise})")
    return data


def _designs(args, data, delta):
    """(train, test, is_table): digits are pixel tables; otherwise an RBF basis centred on the
    training points, flat (``--basis rbf``, with a bias column) or one RBF per centre and input
    dimension (``--basis rbf-table``, the grid RVM paper's table of section 6.1)."""
    from . import basis

    if args.dataset == "digits":
        return data.X_train, data.X_test, True
    if args.basis == "rbf-table":
        return (basis.rbf_table(data.X_train, data.X_train, delta),
                basis.rbf_table(data.X_test, data.X_train, delta), True)
    return (basis.rbf(data.X_train, delta=delta, bias=True),
            basis.rbf(data.X_test, data.X_train, delta=delta, bias=True), False)


def _fit_models(args, data, delta):
    """{name: fitted result}, {name: (test error or RMSE, held-out mean log predictive density)}."""
    from . import CAVI
    from .models import grid_rvm, robust_rvm, rvm

    X, X_test, is_table = _designs(args, data, delta)
    X, X_test = np.asarray(X), np.asarray(X_test)
    classify = _CLASSIFICATION[args.dataset]
    flat, flat_test = X.reshape(len(X), -1), X_test.reshape(len(X_test), -1)
    options = dict(tol=args.tol, max_sweeps=args.max_sweeps, progress_bar=args.progress)
    flat_model = rvm.classification if classify else rvm.regression
    fits = {
        "rvm (ARD)": (flat_model, (flat, data.t_train), {}, flat_test),
        "ridge (shared precision)": (flat_model, (flat, data.t_train),
                                     {"groups": np.zeros(flat.shape[1], dtype=int)}, flat_test),
        "robust rvm": (robust_rvm.classification if classify else robust_rvm.regression, (flat, data.t_train), {},
                       flat_test),
    }
    if is_table:
        grid_model = grid_rvm.classification if classify else grid_rvm.regression
        fits["p-grid rvm"] = (grid_model, (X, data.t_train), {"kind": "p"}, X_test)
        fits["s-grid rvm"] = (grid_model, (X, data.t_train), {"kind": "s"}, X_test)
    results, scores = {}, {}
    for name, (model, fit_args, kwargs, new) in fits.items():
        res = CAVI(model, **options).run(*fit_args, **kwargs)
        results[name] = res
        scores[name] = _held_out(res, new, data.t_test, classify)
    return results, scores, "test error rate" if classify else "test RMSE", X.shape


def _held_out(res, new, t_test, classify):
    """(test error rate or RMSE, mean log predictive density of the held-out points)."""
    if classify:
        p = np.clip(np.asarray(res.predict(new)), 1e-300, 1 - 1e-16)
        return (float(np.mean((p > 0.5) != (t_test > 0.5))),
                float(np.mean(np.where(t_test > 0.5, np.log(p), np.log1p(-p)))))
    mean, var = (np.asarray(v) for v in res.predict(new))
    return (float(np.sqrt(np.mean((mean - t_test) ** 2))),
            float(np.mean(-0.5 * (np.log(2 * np.pi * var) + (t_test - mean) ** 2 / var))))


def _quietly(fn, *args, **kwargs):
    """fn(...) and the text of the ComparisonWarnings it raised."""
    import warnings

    from .comparison import ComparisonWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ComparisonWarning)
        out = fn(*args, **kwargs)
    notes = [str(w.message) for w in caught if issubclass(w.category, ComparisonWarning)]
    for w in caught:
        if not issubclass(w.category, ComparisonWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return out, notes


def _width_table(args, data, widths, fitted):
    """The ARD RVM at every RBF width: ELBO, elpd_loo and held-out scores, and the width each picks
    (``fitted``: {delta: result} already fitted)."""
    import pandas as pd

    from . import CAVI, basis, compare
    from .models import rvm

    classify = _CLASSIFICATION[args.dataset]
    fits, rows = {}, {}
    for delta in sorted(widths):
        Phi = np.asarray(basis.rbf(data.X_train, delta=delta, bias=True))
        Phi_test = np.asarray(basis.rbf(data.X_test, data.X_train, delta=delta, bias=True))
        res = fitted.get(delta) or CAVI(rvm.classification if classify else rvm.regression, tol=args.tol,
                                        max_sweeps=args.max_sweeps, progress_bar=args.progress).run(Phi, data.t_train)
        fits[f"{delta:g}"] = res
        error, lpd = _held_out(res, Phi_test, data.t_test, classify)
        rows[f"{delta:g}"] = {"test lpd": lpd, "error": error}
    by_loo, _ = _quietly(compare, fits, by="loo")
    table = pd.DataFrame({"elbo": {k: r.elbo for k, r in fits.items()},  # fits in the order of delta
                          "elpd_loo": by_loo["elpd_loo"], "se": by_loo["se"], "pareto_k_max": by_loo["pareto_k_max"],
                          "n_relevant": {k: int(np.sum(r.relevant)) for k, r in fits.items()}})
    table = table.join(pd.DataFrame.from_dict(rows, orient="index")).loc[list(rows)]
    table.index.name = "delta"
    picks = {"ELBO": table["elbo"].idxmax(), "LOO": table["elpd_loo"].idxmax(), "held-out lpd": table["test lpd"].idxmax()}
    return table, picks


def compare_command(args):
    from . import compare

    if args.dataset == "digits-verification":
        return _super_sparse_command(args)
    if args.dataset == "digits" and args.basis != "rbf":
        raise ValueError("`--basis` does not apply to digits: its features are the 8 x 8 pixel tables.")
    data = _load(args)
    delta = args.delta if args.delta is not None else _DEFAULT_DELTA[args.dataset]
    results, scores, error_name, shape = _fit_models(args, data, delta)
    by_elbo, notes = _quietly(compare, results, by="elbo")
    by_loo, loo_notes = _quietly(compare, results, by="loo", num_samples=args.loo_samples, seed=args.seed)
    notes += [n for n in loo_notes if n not in notes]
    import pandas as pd

    elbo_table = by_elbo[["rank", "elbo", "d_elbo", "log_lik", "-kl_latent", "-kl_hyper", "log_norm", "local_bound",
                          "n_vague", "n_relevant", "schedule"]]
    loo_table = by_loo[["rank", "elpd_loo", "se", "elpd_diff", "dse", "p_loo", "weight", "loo", "pareto_k_max"]].copy()
    loo_table[error_name] = [scores[name][0] for name in loo_table.index]
    loo_table["test lpd"] = [scores[name][1] for name in loo_table.index]
    if args.dataset == "digits":
        features = "8 x 8 pixel tables (rows x columns)"
    elif args.basis == "rbf-table":
        features = f"per-dimension RBF tables {shape[1]} centres x {shape[2]} input dimensions, delta = {delta}"
    else:
        features = f"RBF basis + bias, {shape[1]} functions, delta = {delta}"
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.3f}".format):
        print(f"dataset: {data.description}; {len(data.t_train)} training, {len(data.t_test)} test points; {features}")
        print("\nby ELBO, with its parts (log_lik + -kl_latent + -kl_hyper + log_norm + local_bound = elbo):")
        print(elbo_table.to_string())
        print("\nby leave-one-out predictive density (az.compare; weight: stacking), with the held-out test points:")
        print(loo_table.to_string())
        widths = args.widths if args.widths else ([delta / 4, delta, 4 * delta] if args.dataset != "digits" else [])
        record = {"dataset": data.description, "by_elbo": elbo_table.to_dict(orient="index"),
                  "by_loo": loo_table.to_dict(orient="index"), "notes": notes}
        if widths:
            fitted = {delta: results["rvm (ARD)"]} if args.basis == "rbf" else {}
            table, picks = _width_table(args, data, widths, fitted)
            record["widths"], record["width_chosen_by"] = table.to_dict(orient="index"), picks
            print(f"\nthe RBF width of the ARD RVM (delta, exp(-delta ||x - c||^2)) chosen by each criterion: "
                  + ", ".join(f"{k}: {v}" for k, v in picks.items()))
            print(table.to_string())
    print("note: the ELBO bounds the evidence ln p(t), which includes the hyperpriors' log normalising constants "
          "(log_norm, about -ln(1/a0) = -13.8 nats per precision at a0 = 1e-6): a model with one precision per "
          "basis function pays that Occam factor whatever the data, so one shared precision can win on ELBO. "
          "elpd_loo scores only how well each fit predicts the points it did not see, so the two can disagree; "
          "compare models with the same hyperparameters by ELBO, different families by LOO or held-out data.")
    print("note: elpd_loo is PSIS-LOO (az.loo on draws from each fit's q; Pareto k > 0.7 marks points where it is "
          "unreliable) or the exact closed form for Gaussian likelihoods (loo = exact); both hold the "
          "hyperparameters at their fitted values, which flatters models with many tuned precisions.")
    for note in notes:
        print(f"warning: {note.removeprefix('compare: ')}")
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump(record, f, indent=1, default=lambda v: v.item() if hasattr(v, "item") else str(v))
    if args.dataset == "digits":
        _gplvm_table(args)
    return 0


def _gplvm_table(args):
    """The Bayesian GPLVMs on the ten-class digits (Sauer's thesis, chapter 5): the supervised
    model (labels 1-of-K in {-1, 1} as outputs, RBF latent prior) with 2, 5 and 10 latent
    dimensions ranked by their bound, and the autoencoder and unsupervised models (the images
    as outputs); 1-nearest-neighbour accuracy on the latent means, the posterior classifier (5.29)
    for the supervised fits."""
    import pandas as pd
    from sklearn.neighbors import KNeighborsClassifier

    from . import compare, datasets
    from .models import gplvm

    d = datasets.digits(args.n_train, seed=args.seed)
    Z = datasets.one_of_k(d.t_train, np.arange(10))
    fits = {f"supervised, Q = {q}": ("supervised", q) for q in args.gplvm_dims}
    q_max = max(args.gplvm_dims)
    fits.update({f"autoencoder, Q = {q_max}": ("autoencoder", q_max), f"unsupervised, Q = {q_max}": ("unsupervised", q_max)})
    results, rows = {}, {}
    for name, (model, q) in fits.items():
        res = gplvm.fit(d.X_train, Z, model=model, latent_dim=q, num_inducing=args.num_inducing,
                        max_steps=args.gplvm_steps, seed=args.seed)
        results[name] = res
        knn = KNeighborsClassifier(1).fit(res.latent_mean, d.t_train)
        rows[name] = {"outputs": "labels" if model == "supervised" else "images",
                      "kept_dims": len(res.relevant_dims),
                      "1-NN accuracy": knn.score(res.transform(d.X_test), d.t_test),
                      "posterior accuracy": (float(np.mean(res.predict(d.X_test).argmax(1) == d.t_test))
                                             if model == "supervised" else np.nan),
                      "steps": res.info["steps"]}
    table = compare(results)[["rank", "elbo", "d_elbo", "converged"]].join(pd.DataFrame.from_dict(rows, orient="index"))
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.4f}".format):
        print(f"\nBayesian GPLVMs on {d.description}: {len(d.t_train)} training, {len(d.t_test)} test images, "
              f"{args.num_inducing} inducing inputs, at most {args.gplvm_steps} steps\n"
              "(natural-gradient sweeps for the GP-latent models, L-BFGS for the unsupervised one)")
        print(table.to_string())
    print("note: a bound is comparable only among models of the same outputs: the supervised rows bound "
          "log p(labels | images), the autoencoder and unsupervised rows log p(images | images) and log p(images).")


def _super_sparse_command(args):
    """Super-sparse virtual prototypes (Biggio et al.) on digit verification: for each class, the
    class (client, +1) against all others (impostors, -1) on PCA features with an RBF similarity;
    an RBF SVC, then m virtual prototypes fitted to the SVC's decision values (the paper's
    reduction of a kernel machine) for each m, scored by test AUC and error at threshold 0, by
    similarity evaluations per test point, and by the ELBO of an ARD RVM over the prototypes
    (summed over the verification problems, so ``compare`` ranks the m by evidence)."""
    import pandas as pd
    from sklearn.decomposition import PCA
    from sklearn.metrics import roc_auc_score
    from sklearn.svm import SVC

    from . import compare, datasets
    from .models import super_sparse as ss

    d = datasets.digits(args.n_train, seed=args.seed)
    pca = PCA(args.pca_dims, random_state=args.seed).fit(d.X_train)
    X, X_test = pca.transform(d.X_train), pca.transform(d.X_test)
    sq = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    gamma = 1.0 / float(np.median(sq[np.triu_indices(len(X), 1)]))
    classes = args.classes if args.classes else list(range(10))
    ms = sorted(set(args.prototypes))
    rows = {"SVC (RBF)": {"auc": [], "error": [], "evaluations per point": []}}
    rows.update({f"super-sparse, m = {m}": {"auc": [], "error": [], "evaluations per point": []} for m in ms})
    evidence = {m: 0.0 for m in ms}
    evidence_results = {}
    for c in classes:
        y, y_test = np.where(d.t_train == c, 1.0, -1.0), np.where(d.t_test == c, 1.0, -1.0)
        svc = SVC(kernel="rbf", gamma=gamma, C=args.svc_c).fit(X, y)
        g = svc.decision_function(X_test)
        rows["SVC (RBF)"]["auc"].append(roc_auc_score(y_test, g))
        rows["SVC (RBF)"]["error"].append(np.mean(np.where(g > 0, 1.0, -1.0) != y_test))
        rows["SVC (RBF)"]["evaluations per point"].append(len(svc.support_))
        for m in ms:
            res = ss.fit_to_decision_values(svc, X, m=m, gamma=gamma, lam=args.lam, max_steps=args.prototype_steps,
                                            seed=args.seed)
            f = res.decision_function(X_test)
            row = rows[f"super-sparse, m = {m}"]
            row["auc"].append(roc_auc_score(y_test, f))
            row["error"].append(np.mean(np.where(f > 0, 1.0, -1.0) != y_test))
            row["evaluations per point"].append(m)
            ev = ss.evidence(res, X, y, task="classification", tol=args.tol, max_sweeps=args.max_sweeps)
            evidence[m] += float(ev.elbo)
            evidence_results[m] = ev
    table = pd.DataFrame({name: {k: float(np.mean(v)) for k, v in row.items()} for name, row in rows.items()}).T
    table["ELBO (sum over classes)"] = [np.nan] + [evidence[m] for m in ms]
    # the ELBO ranking across m, through compare (one result per m; the ELBOs are the sums)
    ranked = compare({f"super-sparse, m = {m}": evidence_results[m] for m in ms})
    table["ELBO rank"] = [np.nan] + [float(1 + sorted(ms, key=lambda k: -evidence[k]).index(m)) for m in ms]
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.4f}".format):
        print(f"dataset: {d.description}; verification, each of the classes {classes} against the others; "
              f"{len(d.t_train)} training, {len(d.t_test)} test images; PCA to {args.pca_dims} dimensions, RBF "
              f"gamma = {gamma:.4g} (1 / median squared distance); means over the classes")
        print(table.to_string())
        print(f"\nthe last class's problem alone, m ranked by ELBO ({classes[-1]} against the others):")
        print(ranked[["rank", "elbo", "d_elbo", "n_relevant"]].to_string())
    print("note: 'evaluations per point' is the test-time cost, similarity evaluations per test image (the SVC's "
          "support vectors, or m); each super-sparse machine is fitted to the SVC's decision values with m virtual "
          "prototypes (Biggio et al.); its ELBO is that of an ARD RVM over the learned prototypes (labels as "
          "Bernoulli, Jaakkola-Jordan bound), which includes the Occam factor of its Gamma(1e-6, 1e-6) hyperpriors: "
          "every extra prototype costs roughly ln(1/a0) = 13.8 nats unless the data pay for it.")
    return 0


def build_parser():
    parser = argparse.ArgumentParser(
        prog="ppl-sbl",
        description="Sparse Bayesian learning with closed-form variational inference (NumPyro models).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    cmp = sub.add_parser(
        "compare",
        help="fit competing models on a built-in dataset and rank them by ELBO and by LOO",
        description="Fit the RVM (one precision per basis function, ARD), a shared-precision "
        "(ridge) model and the robust RVM (Gamma-weighted likelihood terms) on a built-in dataset with an RBF basis centred on the training points "
        "(and, where the features are tables, the p-grid and s-grid RVMs with one precision per "
        "row and per column), then print them ranked by ELBO (the lower bound on the log evidence) with "
        "its parts, and by leave-one-out predictive density (elpd_loo) with the test error and the "
        "held-out log predictive density, and the RBF width each criterion chooses.",
    )
    cmp.add_argument("--dataset", choices=["ripley", "sinc", "mixture", "digits", "digits-verification"],
                     default="ripley",
                     help="ripley: Ripley's synthetic two-class data (250 train, 1000 test); "
                     "sinc: the noisy sinc regression of the grid RVM paper (100 train, 600 test); "
                     "mixture: the two-class Gaussian mixture of Hastie et al. 2.3.3 (200 train, 5000 test); "
                     "digits: scikit-learn's 8 x 8 digits as pixel tables, 0-4 against 5-9 (needs the sklearn extra), and then "
                     "the Bayesian GPLVMs (supervised with 2, 5, 10 latent dimensions, autoencoder, unsupervised) on "
                     "the ten classes, ranked by their bound; "
                     "on table data the p-grid and s-grid RVMs join the comparison; "
                     "digits-verification: each digit class against the others, an RBF SVC against super-sparse "
                     "machines with m virtual prototypes (Biggio et al.), by AUC, error, test-time similarity "
                     "evaluations and ELBO")
    cmp.add_argument("--basis", choices=["rbf", "rbf-table"], default="rbf",
                     help="rbf: one Gaussian RBF per training point plus a bias (flat features); "
                     "rbf-table: one RBF per training point and input dimension, a table per object "
                     "(the grid RVM paper's section 6.1), so the grid RVMs are fitted too")
    cmp.add_argument("--delta", type=_positive_float, default=None,
                     help="RBF inverse squared width, exp(-delta ||x - c||^2) (default: 4.0 for ripley, i.e. width 0.5 "
                     "as in Tipping 2001; 5.55 for sinc and mixture, on standardised inputs)")
    cmp.add_argument("--noise-features", type=int, default=0,
                     help="sinc and mixture: number of pure-noise input features appended (default 0)")
    cmp.add_argument("--label-noise", type=float, default=0.0,
                     help="classification datasets: share of the training labels flipped at random (seeded by "
                     "--seed), e.g. 0.1, to see the robust RVM down-weight them (default 0)")
    cmp.add_argument("--n-train", type=int, default=200, help="digits only: number of training images (default 200)")
    cmp.add_argument("--seed", type=int, default=0, help="sinc, mixture, digits: random seed of the data")
    cmp.add_argument("--gplvm-dims", type=int, nargs="+", default=[2, 5, 10],
                     help="digits only: latent dimensions of the supervised GPLVMs compared (default 2 5 10)")
    cmp.add_argument("--num-inducing", type=int, default=30, help="digits only: GPLVM inducing inputs (default 30)")
    cmp.add_argument("--gplvm-steps", type=int, default=300, help="digits only: steps per GPLVM (natural sweeps or L-BFGS "
                     "iterations; default 300)")
    cmp.add_argument("--prototypes", type=int, nargs="+", default=[1, 2, 5, 10],
                     help="digits-verification only: numbers of virtual prototypes m (default 1 2 5 10)")
    cmp.add_argument("--classes", type=int, nargs="+", default=None,
                     help="digits-verification only: the client classes (default all ten)")
    cmp.add_argument("--pca-dims", type=int, default=20, help="digits-verification only: PCA dimensions (default 20)")
    cmp.add_argument("--svc-c", type=float, default=1.0, help="digits-verification only: the SVC's C (default 1)")
    cmp.add_argument("--lam", type=float, default=1e-3,
                     help="digits-verification only: the super-sparse ridge penalty lambda (default 1e-3)")
    cmp.add_argument("--prototype-steps", type=int, default=200,
                     help="digits-verification only: gradient steps on the prototypes at most (default 200)")
    cmp.add_argument("--widths", type=_positive_float, nargs="+", default=None,
                     help="RBF deltas at which the ARD RVM is fitted to choose the width by ELBO, LOO and held-out "
                     "density (default: delta / 4, delta, 4 delta; none for digits)")
    cmp.add_argument("--json", default=None, metavar="PATH",
                     help="also write the tables (by ELBO, by LOO, the widths) and the warnings to PATH as JSON")
    cmp.add_argument("--loo-samples", type=int, default=1000,
                     help="draws from each fit's q for PSIS-LOO (default 1000)")
    cmp.add_argument("--tol", type=float, default=1e-9,
                     help="CAVI stops once a sweep changes the ELBO by at most tol (relative) and the state by at most "
                     "sqrt(tol); the fast schedule once a pass changes the ELBO by at most tol (default 1e-9)")
    cmp.add_argument("--max-sweeps", type=int, default=20000,
                     help="upper limit on CAVI sweeps, or passes of the fast schedule (default 20000)")
    cmp.add_argument("--progress", action="store_true", default=None, help="always show progress bars")
    cmp.add_argument("--blas-threads", type=_positive_int, default=1,
                     help="threads of NumPy's and SciPy's BLAS during the job (default 1: the fits' matrices are a "
                     "few hundred wide, where BLAS threads cost more time than they save)")
    cmp.set_defaults(func=compare_command)
    return parser


def _positive_float(text):
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0; got {text!r}") from None
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0; got {text}")
    return value


def _positive_int(text):
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1; got {text}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1; got {text}")
    return value


def main(argv=None):
    import warnings

    parser = build_parser()
    args = parser.parse_args(argv)
    # ArviZ's notice of its coming 1.0 API is addressed to its own users, not to this job's readers
    warnings.filterwarnings("ignore", message="\nArviZ is undergoing a major refactor", category=FutureWarning)
    quick_compile_flags()  # XLA's CPU options that compile this job's programs faster
    short_locations()  # one source frame per operation in the programs' locations: faster compiles
    compilation_cache()  # JAX's persistent compilation cache (off with PPL_SBL_NO_COMPILATION_CACHE=1)
    from threadpoolctl import threadpool_limits

    try:
        with threadpool_limits(limits=args.blas_threads, user_api="blas"):
            return args.func(args)
    except ValueError as err:
        parser.exit(2, f"ppl-sbl: error: {err}\n")


if __name__ == "__main__":
    sys.exit(main())
