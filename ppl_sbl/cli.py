"""The ``ppl-sbl`` command: compare sparse Bayesian models by ELBO on built-in data."""
from __future__ import annotations

import argparse
import sys

import numpy as np

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
    results, errors = {}, {}
    for name, (model, fit_args, kwargs, new) in fits.items():
        res = CAVI(model, **options).run(*fit_args, **kwargs)
        results[name] = res
        if classify:
            errors[name] = float(np.mean((np.asarray(res.predict(new)) > 0.5) != (data.t_test > 0.5)))
        else:
            mean, _ = res.predict(new)
            errors[name] = float(np.sqrt(np.mean((np.asarray(mean) - data.t_test) ** 2)))
    return results, errors, "test error rate" if classify else "test RMSE", X.shape


def compare_command(args):
    from . import compare

    if args.dataset == "digits-verification":
        return _super_sparse_command(args)
    if args.dataset == "digits" and args.basis != "rbf":
        raise ValueError("`--basis` does not apply to digits: its features are the 8 x 8 pixel tables.")
    data = _load(args)
    delta = args.delta if args.delta is not None else _DEFAULT_DELTA[args.dataset]
    results, errors, error_name, shape = _fit_models(args, data, delta)
    table = compare(results)
    table[error_name] = [errors[name] for name in table.index]
    # CAVI's default schedule: the fast one for the ARD models (moves of one coefficient), the sweep
    # for the shared precision (groups=) and the grid RVMs; each row counts what its schedule makes
    table["schedule"] = [results[name].schedule for name in table.index]
    table["sweeps/moves"] = [results[name].num_moves if results[name].schedule == "fast" else results[name].num_sweeps
                             for name in table.index]
    import pandas as pd

    if args.dataset == "digits":
        features = "8 x 8 pixel tables (rows x columns)"
    elif args.basis == "rbf-table":
        features = f"per-dimension RBF tables {shape[1]} centres x {shape[2]} input dimensions, delta = {delta}"
    else:
        features = f"RBF basis + bias, {shape[1]} functions, delta = {delta}"
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.4f}".format):
        print(f"dataset: {data.description}; {len(data.t_train)} training, {len(data.t_test)} test points; {features}")
        print(table.to_string())
    print("note: each ELBO includes the Occam factor of its Gamma(1e-6, 1e-6) hyperpriors; every extra "
          "precision costs roughly ln(1/a0) = 13.8 nats, which is why one shared precision can win on "
          "ELBO while ARD keeps fewer basis functions (n_relevant, n_effective). n_relevant counts the basis "
          "functions whose precision the data support, judged per precision: the shared precision's fit counts "
          "all the functions it keeps, or none.")
    print("note: 'sweeps/moves' counts the sweeps of a fit with schedule 'sweep' (every coefficient updated at every "
          "sweep) and the moves of one with schedule 'fast' (the fast variational schedule, CAVI's default for the "
          "ARD models: one coefficient added or re-estimated per move, from the empty model).")
    if args.dataset == "digits":
        _gplvm_table(args)
    if _CLASSIFICATION[args.dataset]:
        print("note: the robust RVM raises each point's likelihood to a Gamma-distributed weight (Hwang & Jeong "
              "2015, eq. 3); that likelihood is not normalised over the labels, so its ELBO bounds a different "
              "quantity from the other models' evidence: compare it by test error, and robust RVMs among "
              "themselves (e.g. over kernel widths) by ELBO.")
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
        help="fit competing models on a built-in dataset and rank them by ELBO",
        description="Fit the RVM (one precision per basis function, ARD), a shared-precision "
        "(ridge) model and the robust RVM (Gamma-weighted likelihood terms) on a built-in dataset with an RBF basis centred on the training points "
        "(and, where the features are tables, the p-grid and s-grid RVMs with one precision per "
        "row and per column), then print a table ranked by ELBO (the lower bound on the log "
        "evidence) with the test error.",
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
    cmp.add_argument("--tol", type=float, default=1e-9,
                     help="CAVI stops once a sweep changes the ELBO by at most tol (relative) and the state by at most "
                     "sqrt(tol); the fast schedule once a pass changes the ELBO by at most tol (default 1e-9)")
    cmp.add_argument("--max-sweeps", type=int, default=20000,
                     help="upper limit on CAVI sweeps, or passes of the fast schedule (default 20000)")
    cmp.add_argument("--progress", action="store_true", default=None, help="always show progress bars")
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


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as err:
        parser.exit(2, f"ppl-sbl: error: {err}\n")


if __name__ == "__main__":
    sys.exit(main())
