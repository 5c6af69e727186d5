"""The experiments of Biggio et al.'s super-sparse learning, on data that ship offline.

Not a test (``tests/test_experiments_super_sparse.py`` runs ``--quick``). The paper verified faces
(AT&T, BioID) and estimated ages (FG-NET, FRGC); those data do not ship. Here the same kinds of
comparison on scikit-learn's bundled sets; only the layout carries over, not the paper's numbers.

**Verification** (the paper's section IV-A, with digits for faces). scikit-learn's digits
(:func:`ppl_sbl.datasets.digits`, 64 pixels in [0, 1]): ``--n-train`` images for training
(stratified, ``--seed``), the rest for testing. PCA keeping 95% of the training variance (the
paper's eigenface setting), an RBF similarity with ``gamma = 1 / median squared distance`` between
training points. For each digit class (the client, +1) against the nine others (impostors, -1):

* **SVC**: ``SVC(kernel="rbf")`` with the paper's class-dependent C (C times the prior of the
  opposite class, ``class_weight``), C chosen by 5-fold cross-validated accuracy from ``--svc-c``;
  its test-time cost is its number of support vectors.
* **super-sparse** (the paper's SSVM): m virtual prototypes fitted to the SVC's decision values on
  the training points (:func:`models.super_sparse.fit_to_decision_values`), for ``m`` = the
  largest of ``--prototypes`` first, then each smaller m by the paper's incremental procedure (8)
  (drop the smallest ``|beta_j|``, warm start: :func:`models.super_sparse.prune`).
* prototype selection at the same m, coefficients by the same beta-step (4) on the same targets
  (``fit(..., init=C, max_steps=0)``): **random** (m training images, mean over
  ``--random-draws`` draws), **k-medoids** (k-means with m clusters, each represented by its set
  median, the member with the smallest summed distance to the others: the paper's PS-KM) and
  **border** (the m training images closest to the SVC's boundary, smallest ``|g(x)|``: the
  frontier of the training data, PS-B).
* **evidence**: for each m, the ELBO of a variational ARD RVM over the learned prototypes and a
  bias on the labels (Bernoulli-logit, Jaakkola-Jordan bound; :func:`models.super_sparse.evidence`),
  summed over the classes, and the m each class's ELBO prefers.

Scores on the test images: the area under the ROC curve and the equal error rate (where the false
acceptance and false rejection rates cross, interpolated on the ROC curve), averaged over the ten
classes, against the test-time cost (similarity evaluations per test image). The goal the library
set itself: an m at most a tenth of the SVC's support vectors at a mean AUC within 0.005 of the
SVC's.

**Regression** (the paper's section IV-B). scikit-learn's diabetes data (442 patients, 10
features, standardised in each fold; the target in its own units) with ``--folds``-fold
cross-validation, and a generated problem whose answer is known: ``f(x) = sum_j beta_j
exp(-gamma ||x - c_j||^2) + b`` with three prototypes in two dimensions, inputs uniform on
[-3, 3]^2, Gaussian noise of standard deviation 0.1 (the best possible mean absolute error is
``0.1 sqrt(2 / pi) = 0.080``). Methods: **kernel ridge** on all training points
(``KernelRidge(kernel="rbf")``, alpha and gamma by 5-fold cross-validated MAE); **LASSO** on the
similarities to all training points at that gamma (``LassoCV``, the paper's LASSO: its nonzero
coefficients are its prototypes); **super-sparse** fitted to the targets (the paper's S-Ridge) for
m on ``--reg-prototypes`` by the incremental procedure; **random** and **k-medoids** prototypes
with the beta-step; the m chosen by the paper's rule (8) (``select_m`` on a fifth of the training
points held out, MAE loss, ``mu = 0``) and the m the ELBO of the ARD RVM over the prototypes
(Gaussian noise) prefers. Score: mean absolute error on the test points. On the generated problem
the record also holds how far the m = 3 prototypes lie from the true centres (after matching).

Figures (PNG next to the JSON): AUC and EER against test-time similarity evaluations;
the learned prototypes of every class (m = 2) as 8 x 8 images (PCA inverse transform); MAE against
m for both regression problems with the ELBO beside it.

Quick mode (``--quick``: 200 training images, classes 3 and 8, m = 1, 2 for verification and 2, 3
for regression, 30 prototype steps, 200 of the diabetes patients in two folds, LassoCV over 20
penalties, 100 generated training points) is a smoke test, not a result. Its time is mostly
compilation: one program per problem shape and m.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for ``benchmarks.timing``

from benchmarks.timing import environment, log, repeat_timed, save_figure, write_record  # noqa: E402


# ----------------------------------------------------------------------------------------------
# Scores and prototype selection
# ----------------------------------------------------------------------------------------------
def equal_error_rate(y, score):
    """The rate at which false acceptances (impostors above the threshold) equal false rejections
    (clients below it), interpolated linearly between the points of the ROC curve."""
    import numpy as np
    from sklearn.metrics import roc_curve

    fpr, tpr, _ = roc_curve(y, score)
    fnr = 1.0 - tpr
    d = fpr - fnr  # increasing from -1 to +1 along the curve
    k = int(np.flatnonzero(d >= 0)[0])
    if d[k] == 0 or k == 0:
        return float(fpr[k])
    w = -d[k - 1] / (d[k] - d[k - 1])
    return float(fpr[k - 1] + w * (fpr[k] - fpr[k - 1]))


def k_medoids(X, m, seed):
    """k-means with m clusters, each cluster represented by its set median (the member with the
    smallest summed Euclidean distance to the other members)."""
    import numpy as np
    from sklearn.cluster import KMeans
    from sklearn.metrics import pairwise_distances

    labels = KMeans(m, n_init=10, random_state=seed).fit_predict(X)
    rows = []
    for k in range(m):
        members = np.flatnonzero(labels == k)
        D = pairwise_distances(X[members])
        rows.append(members[int(np.argmin(D.sum(1)))])
    return np.asarray(rows)


def selected(X, y, rows, gamma, lam):
    """The machine (1) on the fixed prototypes X[rows], coefficients by the beta-step (4)."""
    from ppl_sbl.models import super_sparse as ss

    return ss.fit(X, y, m=len(rows), init=X[rows], gamma=gamma, lam=lam, max_steps=0)


def decreasing(X, y, grid, **kw):
    """The paper's incremental procedure (8): yields (m, result) for m in ``grid`` from the
    largest down, each smaller machine pruned from the previous one and warm-started."""
    from ppl_sbl.models import super_sparse as ss

    result = None
    for m in sorted(set(grid), reverse=True):
        if result is None:
            result = ss.fit(X, y, m=m, **kw)
        else:
            result = ss.prune(result, X, y, m, **{k: v for k, v in kw.items() if k not in ("seed", "repulsion")})
        yield m, result


# ----------------------------------------------------------------------------------------------
# Verification on digits
# ----------------------------------------------------------------------------------------------
def verification(args):
    import numpy as np
    from sklearn.decomposition import PCA
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import GridSearchCV
    from sklearn.svm import SVC

    from ppl_sbl.models import super_sparse as ss
    from ppl_sbl import datasets

    d = datasets.digits(args.n_train, seed=args.seed)
    pca = PCA(n_components=0.95, svd_solver="full").fit(d.X_train)
    X, X_test = pca.transform(d.X_train), pca.transform(d.X_test)
    sq = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    gamma = 1.0 / float(np.median(sq[np.triu_indices(len(X), 1)]))
    ms = sorted(set(args.prototypes))
    log(f"\n## verification: {len(X)} training, {len(X_test)} test digits; PCA to {pca.n_components_} dimensions "
        f"(95% of the variance); RBF gamma = {gamma:.4g}; classes {args.classes}; m = {ms}")
    rng = np.random.default_rng(args.seed)
    per_class = []
    prototypes_m2 = {}
    for c in args.classes:
        t0 = time.perf_counter()
        y, y_test = np.where(d.t_train == c, 1.0, -1.0), np.where(d.t_test == c, 1.0, -1.0)
        p_pos = float(np.mean(y > 0))
        weights = {1.0: 1.0 - p_pos, -1.0: p_pos}  # C times the prior of the opposite class
        search = GridSearchCV(SVC(kernel="rbf", gamma=gamma, class_weight=weights), {"C": list(args.svc_c)},
                              cv=args.cv, scoring="accuracy").fit(X, y)
        svc = search.best_estimator_
        t_svc = time.perf_counter()
        svc.fit(X, y)
        t_svc = time.perf_counter() - t_svc
        g, g_test = svc.decision_function(X), svc.decision_function(X_test)
        rec = {"class": int(c), "n_client_train": int(np.sum(y > 0)), "n_client_test": int(np.sum(y_test > 0)),
               "svc": {"C": float(search.best_params_["C"]), "n_sv": int(len(svc.support_)),
                       "auc": float(roc_auc_score(y_test, g_test)), "eer": equal_error_rate(y_test, g_test),
                       "error": float(np.mean(np.where(g_test > 0, 1.0, -1.0) != y_test)), "fit_seconds": t_svc},
               "super_sparse": {}, "random": {}, "k_medoids": {}, "border": {}}
        results = {}
        for m, res in decreasing(X, g, ms, gamma=gamma, lam=args.lam, max_steps=args.prototype_steps,
                                 seed=args.seed):
            f = res.decision_function(X_test)
            ev = ss.evidence(res, X, y, task="classification", tol=1e-8, max_sweeps=args.max_sweeps)
            rec["super_sparse"][str(m)] = {
                "auc": float(roc_auc_score(y_test, f)), "eer": equal_error_rate(y_test, f),
                "error": float(np.mean(np.where(f > 0, 1.0, -1.0) != y_test)), "objective": res.objective,
                "steps": res.steps, "stop_reason": res.stop_reason, "fit_seconds": res.seconds,
                "elbo": float(ev.elbo), "relevant": int(np.sum(np.asarray(ev.relevant)[:m]))}
            results[m] = res
        for m in ms:
            aucs, eers = [], []
            for _ in range(args.random_draws):
                r = selected(X, g, rng.choice(len(X), m, replace=False), gamma, args.lam)
                f = r.decision_function(X_test)
                aucs.append(roc_auc_score(y_test, f))
                eers.append(equal_error_rate(y_test, f))
            rec["random"][str(m)] = {"auc": float(np.mean(aucs)), "eer": float(np.mean(eers))}
            for name, rows in (("k_medoids", k_medoids(X, m, args.seed)), ("border", np.argsort(np.abs(g))[:m])):
                f = selected(X, g, rows, gamma, args.lam).decision_function(X_test)
                rec[name][str(m)] = {"auc": float(roc_auc_score(y_test, f)), "eer": equal_error_rate(y_test, f)}
        # test-time wall clock on the whole test set: the SVC against the largest super-sparse machine
        best = results[max(ms)]
        rec["test_seconds"] = {"svc": _median_time(lambda: svc.decision_function(X_test)),
                               f"super_sparse_m{max(ms)}": _median_time(lambda: best.decision_function(X_test))}
        if 2 in results:
            prototypes_m2[int(c)] = (pca.inverse_transform(results[2].prototypes).tolist(), results[2].beta.tolist())
        elbos = {m: rec["super_sparse"][str(m)]["elbo"] for m in ms}
        rec["m_by_elbo"] = int(max(elbos, key=elbos.get))
        rec["seconds"] = time.perf_counter() - t0
        per_class.append(rec)
        ssr = rec["super_sparse"]
        log(f"class {c}: SVC C={rec['svc']['C']:g} SVs {rec['svc']['n_sv']:4d} AUC {rec['svc']['auc']:.4f} "
            f"EER {rec['svc']['eer']:.4f} | super-sparse AUC " +
            " ".join(f"m{m}:{ssr[str(m)]['auc']:.4f}" for m in ms) + f" | m by ELBO {rec['m_by_elbo']} "
            f"({rec['seconds']:.0f} s)")
    summary = _verification_summary(per_class, ms)
    return {"n_train": int(len(X)), "n_test": int(len(X_test)), "pca_dims": int(pca.n_components_),
            "gamma": gamma, "prototypes": ms, "classes": list(map(int, args.classes)), "per_class": per_class,
            "summary": summary, "prototypes_m2": prototypes_m2}


def _median_time(fn, repeats=5):
    """Median seconds of ``repeats`` calls of ``fn`` after an untimed one."""
    import numpy as np

    return float(np.median(repeat_timed(fn, repeats, warm=True)[0]))


def _verification_summary(per_class, ms):
    import numpy as np

    mean = lambda key, m=None, field="auc": float(np.mean(  # noqa: E731
        [r[key][field] if m is None else r[key][str(m)][field] for r in per_class]))
    table = [{"method": "SVC", "m": None, "evaluations": float(np.mean([r["svc"]["n_sv"] for r in per_class])),
              "auc": mean("svc"), "eer": mean("svc", field="eer")}]
    for key in ("super_sparse", "random", "k_medoids", "border"):
        for m in ms:
            table.append({"method": key, "m": m, "evaluations": float(m), "auc": mean(key, m),
                          "eer": mean(key, m, "eer")})
    svc_auc = table[0]["auc"]
    n_sv = table[0]["evaluations"]
    within = [m for m in ms if mean("super_sparse", m) >= svc_auc - 0.005]
    m_goal = min(within) if within else None
    # per class: the smallest m whose AUC is within 0.005 of that class's SVC
    per = []
    for r in per_class:
        ok = [m for m in ms if r["super_sparse"][str(m)]["auc"] >= r["svc"]["auc"] - 0.005]
        per.append({"class": r["class"], "n_sv": r["svc"]["n_sv"], "m": min(ok) if ok else None,
                    "goal_met": bool(ok) and min(ok) <= r["svc"]["n_sv"] / 10})
    elbo_sum = {str(m): float(np.sum([r["super_sparse"][str(m)]["elbo"] for r in per_class])) for m in ms}
    return {"table": table, "svc_mean_auc": svc_auc, "svc_mean_sv": n_sv,
            "smallest_m_within_0.005_of_svc_mean_auc": m_goal,
            "goal_met_on_means": m_goal is not None and m_goal <= n_sv / 10,
            "per_class_goal": per, "elbo_sum_over_classes": elbo_sum,
            "m_by_summed_elbo": int(max(ms, key=lambda m: elbo_sum[str(m)])),
            "m_by_elbo_per_class": [r["m_by_elbo"] for r in per_class]}


# ----------------------------------------------------------------------------------------------
# Regression
# ----------------------------------------------------------------------------------------------
TRUE_CENTRES = [[-1.5, -1.0], [1.0, 1.5], [1.5, -1.5]]
TRUE_BETA = [2.0, -1.5, 1.0]
TRUE_B, TRUE_GAMMA, TRUE_NOISE = 0.5, 0.5, 0.1


def generated(n, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    sq = ((X[:, None, :] - np.asarray(TRUE_CENTRES)[None]) ** 2).sum(-1)
    f = np.exp(-TRUE_GAMMA * sq) @ np.asarray(TRUE_BETA) + TRUE_B
    return X, f + TRUE_NOISE * rng.standard_normal(n), f


def regression_fold(X, y, X_test, y_test, grid, args, seed, known_gamma=None):
    """Every regression method on one split; returns a record."""
    import numpy as np
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.kernel_ridge import KernelRidge
    from sklearn.linear_model import LassoCV
    from sklearn.model_selection import GridSearchCV

    from ppl_sbl.models import super_sparse as ss
    from ppl_sbl import basis

    mae = lambda f: float(np.mean(np.abs(y_test - f)))  # noqa: E731
    sq = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    gamma0 = 1.0 / float(np.median(sq[np.triu_indices(len(X), 1)]))
    gammas = [gamma0 * s for s in (0.25, 0.5, 1.0, 2.0, 4.0)]
    krr = GridSearchCV(KernelRidge(kernel="rbf"), {"alpha": list(np.logspace(-3, 1, 5)), "gamma": gammas},
                       cv=args.cv, scoring="neg_mean_absolute_error").fit(X, y)
    gamma = float(krr.best_params_["gamma"]) if known_gamma is None else known_gamma
    rec = {"gamma": gamma, "kernel_ridge": {"mae": mae(krr.predict(X_test)), "prototypes": int(len(X)),
                                            "alpha": float(krr.best_params_["alpha"]),
                                            "gamma": float(krr.best_params_["gamma"])}}
    with warnings.catch_warnings(record=True) as caught:  # the path's weakest penalties may not converge
        warnings.simplefilter("always", ConvergenceWarning)
        lasso = LassoCV(cv=args.cv, alphas=args.lasso_alphas, random_state=seed,
                        max_iter=20000).fit(basis.rbf(X, X, gamma), y)
    rec["lasso"] = {"convergence_warnings": sum(issubclass(w.category, ConvergenceWarning) for w in caught), "mae": mae(lasso.predict(basis.rbf(X_test, X, gamma))),
                    "prototypes": int(np.sum(lasso.coef_ != 0)), "alpha": float(lasso.alpha_)}
    rec["super_sparse"], rec["random"], rec["k_medoids"] = {}, {}, {}
    rng = np.random.default_rng(seed)
    fits = {}
    for m, res in decreasing(X, y, grid, gamma=gamma, lam=args.lam, max_steps=args.prototype_steps, seed=seed):
        ev = ss.evidence(res, X, y, task="regression", tol=1e-8, max_sweeps=args.max_sweeps)
        rec["super_sparse"][str(m)] = {"mae": mae(res.decision_function(X_test)), "elbo": float(ev.elbo),
                                       "objective": res.objective, "steps": res.steps,
                                       "stop_reason": res.stop_reason}
        fits[m] = res
    for m in grid:
        rec["random"][str(m)] = {"mae": float(np.mean([mae(selected(X, y, rng.choice(len(X), m, replace=False),
                                                                    gamma, args.lam).decision_function(X_test))
                                                       for _ in range(args.random_draws)]))}
        rec["k_medoids"][str(m)] = {"mae": mae(selected(X, y, k_medoids(X, m, seed), gamma, args.lam)
                                               .decision_function(X_test))}
    elbos = {m: rec["super_sparse"][str(m)]["elbo"] for m in grid}
    rec["m_by_elbo"] = int(max(elbos, key=elbos.get))
    rec["mae_at_m_by_elbo"] = rec["super_sparse"][str(rec["m_by_elbo"])]["mae"]
    # the paper's rule (8): a fifth of the training points held out, MAE, mu = 0
    idx = np.random.default_rng(seed + 1).permutation(len(X))
    n_val = max(1, len(X) // 5)
    val, tr = idx[:n_val], idx[n_val:]
    best, _ = ss.select_m(X[tr], y[tr], X[val], y[val], grid=grid, loss="mae", mu=0.0, gamma=gamma, lam=args.lam,
                          max_steps=args.prototype_steps, seed=seed)
    rec["m_by_rule8"] = best.m
    rec["mae_at_m_by_rule8"] = rec["super_sparse"][str(best.m)]["mae"]
    return rec, fits


def regression(args):
    import numpy as np
    from scipy.optimize import linear_sum_assignment
    from sklearn.datasets import load_diabetes
    from sklearn.model_selection import KFold
    from sklearn.preprocessing import StandardScaler

    grid = sorted(set(args.reg_prototypes))
    out = {"prototypes": grid}
    Xd, yd = load_diabetes(return_X_y=True)
    if args.diabetes_points is not None and args.diabetes_points < len(yd):
        keep = np.sort(np.random.default_rng(args.seed).choice(len(yd), args.diabetes_points, replace=False))
        Xd, yd = Xd[keep], yd[keep]
    log(f"\n## regression: diabetes ({len(yd)} x {Xd.shape[1]}), {args.folds}-fold CV; m = {grid}")
    folds = []
    for k, (tr, te) in enumerate(KFold(args.folds, shuffle=True, random_state=args.seed).split(Xd)):
        sc = StandardScaler().fit(Xd[tr])
        rec, _ = regression_fold(sc.transform(Xd[tr]), yd[tr], sc.transform(Xd[te]), yd[te], grid, args,
                                 args.seed + k)
        folds.append(rec)
        log(f"fold {k}: KRR MAE {rec['kernel_ridge']['mae']:.2f} ({rec['kernel_ridge']['prototypes']} prototypes), "
            f"LASSO {rec['lasso']['mae']:.2f} ({rec['lasso']['prototypes']}), super-sparse " +
            " ".join(f"m{m}:{rec['super_sparse'][str(m)]['mae']:.2f}" for m in grid) +
            f"; m by ELBO {rec['m_by_elbo']}, by rule (8) {rec['m_by_rule8']}")
    out["diabetes"] = {"folds": folds, "summary": _regression_summary(folds, grid)}

    X, y, _ = generated(args.gen_train, args.seed)
    X_test, y_test, f_test = generated(args.gen_test, args.seed + 1000)
    rec, fits = regression_fold(X, y, X_test, y_test, grid, args, args.seed, known_gamma=TRUE_GAMMA)
    rec["noise_floor_mae"] = TRUE_NOISE * math.sqrt(2 / math.pi)
    rec["truth_mae"] = float(np.mean(np.abs(y_test - f_test)))
    if 3 in fits:
        C = fits[3].prototypes
        D = np.sqrt(((C[:, None, :] - np.asarray(TRUE_CENTRES)[None]) ** 2).sum(-1))
        r, c = linear_sum_assignment(D)
        rec["m3_centre_distances"] = D[r, c].tolist()
        rec["m3_beta_matched"] = fits[3].beta[r[np.argsort(c)]].tolist()
        rec["m3_b"] = fits[3].b
    log(f"generated (n={args.gen_train}, best possible MAE {rec['noise_floor_mae']:.4f}, the true f scores "
        f"{rec['truth_mae']:.4f}): KRR {rec['kernel_ridge']['mae']:.4f}, LASSO {rec['lasso']['mae']:.4f} "
        f"({rec['lasso']['prototypes']}), super-sparse " +
        " ".join(f"m{m}:{rec['super_sparse'][str(m)]['mae']:.4f}" for m in grid) +
        f"; m by ELBO {rec['m_by_elbo']}, by rule (8) {rec['m_by_rule8']}" +
        (f"; m=3 prototypes {np.round(rec['m3_centre_distances'], 3).tolist()} from the true centres"
         if "m3_centre_distances" in rec else ""))
    out["generated"] = {"fold": rec, "summary": _regression_summary([rec], grid),
                        "truth": {"centres": TRUE_CENTRES, "beta": TRUE_BETA, "b": TRUE_B, "gamma": TRUE_GAMMA,
                                  "noise_sd": TRUE_NOISE}}
    return out


def _regression_summary(folds, grid):
    import numpy as np

    mean = lambda f: float(np.mean([f(r) for r in folds]))  # noqa: E731
    rows = [{"method": "kernel ridge", "m": None, "prototypes": mean(lambda r: r["kernel_ridge"]["prototypes"]),
             "mae": mean(lambda r: r["kernel_ridge"]["mae"])},
            {"method": "lasso", "m": None, "prototypes": mean(lambda r: r["lasso"]["prototypes"]),
             "mae": mean(lambda r: r["lasso"]["mae"])}]
    for key in ("super_sparse", "random", "k_medoids"):
        for m in grid:
            rows.append({"method": key, "m": m, "prototypes": float(m),
                         "mae": mean(lambda r, m=m, key=key: r[key][str(m)]["mae"])})
    return {"table": rows, "elbo": {str(m): mean(lambda r, m=m: r["super_sparse"][str(m)]["elbo"]) for m in grid},
            "m_by_elbo": [r["m_by_elbo"] for r in folds], "mae_at_m_by_elbo": mean(lambda r: r["mae_at_m_by_elbo"]),
            "m_by_rule8": [r["m_by_rule8"] for r in folds], "mae_at_m_by_rule8": mean(lambda r: r["mae_at_m_by_rule8"])}


# ----------------------------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------------------------
LABELS = {"super_sparse": "super-sparse (learned prototypes)", "random": "random prototypes",
          "k_medoids": "k-medoids prototypes", "border": "border prototypes"}


def figures(record, out_dir, suffix):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = []
    ver = record["verification"]
    table = ver["summary"]["table"]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for a, field, title in ((ax[0], "auc", "area under the ROC curve"), (ax[1], "eer", "equal error rate")):
        for key, label in LABELS.items():
            rows = [r for r in table if r["method"] == key]
            a.plot([r["evaluations"] for r in rows], [r[field] for r in rows], "o-", ms=3, label=label)
        svc = table[0]
        a.plot([svc["evaluations"]], [svc[field]], "k*", ms=12, label="SVC (all support vectors)")
        a.set_xscale("log")
        a.set_xlabel("similarity evaluations per test image")
        a.set_title(f"digit verification, mean over classes: {title}", fontsize=9)
        a.grid(alpha=0.3)
    ax[0].legend(fontsize=7)
    fig.tight_layout()
    names.append(save_figure(fig, os.path.join(out_dir, f"super_sparse_verification{suffix}.png")))

    protos = ver["prototypes_m2"]
    if protos:
        classes = sorted(protos, key=int)
        fig, ax = plt.subplots(2, len(classes), figsize=(1.3 * len(classes) + 1, 3.2), squeeze=False)
        for j, c in enumerate(classes):
            images, beta = protos[c]
            for i in range(2):
                ax[i, j].imshow(np.clip(np.asarray(images[i]).reshape(8, 8), 0, 1), cmap="gray_r", vmin=0, vmax=1)
                ax[i, j].set_title(f"{c}: beta {beta[i]:+.2f}", fontsize=7)
                ax[i, j].axis("off")
        fig.suptitle("the two virtual prototypes of each class's verifier (beta > 0: client, < 0: impostors)",
                     fontsize=9)
        fig.tight_layout()
        names.append(save_figure(fig, os.path.join(out_dir, f"super_sparse_prototypes{suffix}.png")))

    reg = record["regression"]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for a, key, title in ((ax[0], "diabetes", "diabetes (test MAE, mean over folds)"),
                          (ax[1], "generated", "generated, three true prototypes (test MAE)")):
        summ = reg[key]["summary"]
        for method, label in list(LABELS.items())[:3]:
            rows = [r for r in summ["table"] if r["method"] == method]
            a.plot([r["m"] for r in rows], [r["mae"] for r in rows], "o-", ms=3, label=label)
        for r, style in zip(summ["table"][:2], ("--", ":")):
            a.axhline(r["mae"], color="k", ls=style, lw=1,
                      label=f"{r['method']} ({r['prototypes']:.0f} prototypes)")
        if key == "generated":
            a.axhline(reg[key]["fold"]["noise_floor_mae"], color="gray", lw=1, label="best possible (noise)")
        a.set_xlabel("m (prototypes)")
        a.set_ylabel("mean absolute error")
        a.set_title(title, fontsize=9)
        b = a.twinx()
        ms = sorted(int(m) for m in summ["elbo"])
        b.plot(ms, [summ["elbo"][str(m)] for m in ms], "s--", color="tab:purple", ms=3, alpha=0.6)
        b.set_ylabel("ELBO of the ARD RVM over the prototypes", color="tab:purple", fontsize=8)
        a.legend(fontsize=7)
    fig.tight_layout()
    names.append(save_figure(fig, os.path.join(out_dir, f"super_sparse_regression{suffix}.png")))
    return names


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------
# quick: the generated problem has as many training points as a diabetes fold (200 patients, two
# folds), so that the evidence RVMs of both problems share their compiled programs (one per m)
QUICK = {"n_train": 200, "classes": [3, 8], "prototypes": [1, 2], "svc_c": [1.0, 10.0], "prototype_steps": 30,
         "folds": 2, "reg_prototypes": [2, 3], "diabetes_points": 200, "gen_train": 100, "gen_test": 500,
         "random_draws": 2, "cv": 3, "max_sweeps": 200, "lasso_alphas": 20}
FULL = {"n_train": 1000, "classes": list(range(10)), "prototypes": list(range(1, 11)),
        "svc_c": [0.1, 1.0, 10.0, 100.0], "prototype_steps": 200, "folds": 5,
        "reg_prototypes": list(range(2, 21, 2)) + [3], "gen_train": 400, "gen_test": 4000, "random_draws": 5,
        "cv": 5, "max_sweeps": 2000, "lasso_alphas": 100}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: " + ", ".join(f"{k}={v}" for k, v in QUICK.items()))
    p.add_argument("--n-train", type=int, default=None, help="training digits (default 1000; the rest test)")
    p.add_argument("--classes", type=int, nargs="+", default=None, help="client classes (default 0-9)")
    p.add_argument("--prototypes", type=int, nargs="+", default=None, help="m for verification (default 1-10)")
    p.add_argument("--svc-c", type=float, nargs="+", default=None, help="the SVC's C grid (default 0.1 1 10 100)")
    p.add_argument("--lam", type=float, default=1e-3, help="the super-sparse ridge penalty lambda (default 1e-3)")
    p.add_argument("--prototype-steps", type=int, default=None, help="gradient steps per fit at most (default 200)")
    p.add_argument("--folds", type=int, default=None, help="diabetes cross-validation folds (default 5)")
    p.add_argument("--reg-prototypes", type=int, nargs="+", default=None,
                   help="m for regression (default 2, 3, 4, 6, ..., 20)")
    p.add_argument("--diabetes-points", type=int, default=None,
                   help="a random subset of the 442 diabetes patients (default: all)")
    p.add_argument("--gen-train", type=int, default=None, help="generated training points (default 400)")
    p.add_argument("--gen-test", type=int, default=None, help="generated test points (default 4000)")
    p.add_argument("--random-draws", type=int, default=None, help="random prototype draws averaged (default 5)")
    p.add_argument("--cv", type=int, default=None, help="folds of the inner cross-validations (default 5)")
    p.add_argument("--lasso-alphas", type=int, default=None, help="penalties on LassoCV's path (default 100)")
    p.add_argument("--max-sweeps", type=int, default=None, help="CAVI sweeps of the evidence RVMs (default 2000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-figures", action="store_true")
    p.add_argument("--out-dir", default=os.path.join(HERE, "results"),
                   help="where the JSON record and the PNG figures go (default experiments/results)")
    args = p.parse_args(argv)
    for k, v in (QUICK if args.quick else FULL).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    return args


def main(argv=None):
    args = parse_args(argv)
    import ppl_sbl  # noqa: F401  (float64 on)

    os.makedirs(args.out_dir, exist_ok=True)
    suffix = "_quick" if args.quick else ""
    env = environment("sklearn")
    mode = "quick" if args.quick else "full"
    log(f"# super-sparse experiments, Biggio et al. ({mode})  {env['date']}  backend={env['jax_backend']}  "
        f"cpus={env['cpu_count']}  load={env['load_average']}")
    t0 = time.perf_counter()
    record = {"experiment": "super-sparse virtual prototypes (Biggio et al.): digit verification and regression",
              "mode": mode, "args": vars(args), "environment": env}
    record["verification"] = verification(args)
    record["regression"] = regression(args)
    record["seconds"] = time.perf_counter() - t0
    if not args.no_figures:
        record["figures"] = figures(record, args.out_dir, suffix)
    report(record)
    # the prototypes' pixels are in the figure, not in the record
    record["verification"].pop("prototypes_m2")
    log(f"\n# {record['seconds']:.0f} s")
    write_record(record, os.path.join(args.out_dir, f"super_sparse_experiments{suffix}.json"))
    return 0


def report(record):
    import pandas as pd

    ver = record["verification"]["summary"]
    t = pd.DataFrame(ver["table"])
    wide = t[t.method != "SVC"].pivot(index="m", columns="method", values="auc")[list(LABELS)]
    wide_e = t[t.method != "SVC"].pivot(index="m", columns="method", values="eer")[list(LABELS)]
    with pd.option_context("display.width", 200, "display.float_format", "{:.4f}".format):
        log("\n## verification, mean over classes: AUC by m (test-time similarity evaluations = m)")
        log(wide.to_string())
        log("\nEER by m")
        log(wide_e.to_string())
    log(f"\nSVC: AUC {ver['svc_mean_auc']:.4f}, EER {ver['table'][0]['eer']:.4f}, support vectors "
        f"{ver['svc_mean_sv']:.1f} on average (test-time evaluations)")
    m_goal = ver["smallest_m_within_0.005_of_svc_mean_auc"]
    log(f"goal (m <= SVs / 10 = {ver['svc_mean_sv'] / 10:.1f} at a mean AUC within 0.005 of the SVC's): smallest "
        f"such m = {m_goal}; met: {ver['goal_met_on_means']}")
    log("per class (smallest m within 0.005 of its SVC's AUC / its SVs): " +
        ", ".join(f"{p['class']}: {p['m']}/{p['n_sv']}" for p in ver["per_class_goal"]) +
        f"; met in {sum(p['goal_met'] for p in ver['per_class_goal'])} of {len(ver['per_class_goal'])} classes")
    log("ELBO summed over classes by m: " + ", ".join(f"{m}: {v:.1f}" for m, v in ver["elbo_sum_over_classes"]
                                                        .items()) +
        f"; preferred m {ver['m_by_summed_elbo']}; per class {ver['m_by_elbo_per_class']}")
    for key in ("diabetes", "generated"):
        s = record["regression"][key]["summary"]
        t = pd.DataFrame(s["table"])
        log(f"\n## regression, {key}: test MAE" + (" (mean over folds)" if key == "diabetes" else ""))
        for r in s["table"][:2]:
            log(f"{r['method']}: {r['mae']:.4f} with {r['prototypes']:.1f} prototypes")
        wide = t[t.m.notna()].pivot(index="m", columns="method", values="mae")[["super_sparse", "random", "k_medoids"]]
        wide.index = wide.index.astype(int)
        wide["ELBO"] = [s["elbo"][str(m)] for m in wide.index]
        with pd.option_context("display.width", 200, "display.float_format", "{:.4f}".format):
            log(wide.to_string())
        log(f"m by ELBO {s['m_by_elbo']} (MAE {s['mae_at_m_by_elbo']:.4f}); m by rule (8) {s['m_by_rule8']} "
            f"(MAE {s['mae_at_m_by_rule8']:.4f})")


if __name__ == "__main__":
    sys.exit(main())
