"""Super-sparse virtual-prototype machines (Biggio et al.): ``ppl_sbl.models.super_sparse`` and the
``SuperSparseClassifier`` / ``SuperSparseRegressor`` estimators, each checked against an answer
computed independently (scikit-learn's Ridge, a direct solve of (4), NumPyro's log density, finite
differences, an RBF SVC)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.spatial.distance import cdist

import ppl_sbl
from ppl_sbl.estimators import SuperSparseClassifier, SuperSparseRegressor
from ppl_sbl.models import super_sparse as ss

sklearn = pytest.importorskip("sklearn")
from sklearn.base import clone  # noqa: E402
from sklearn.datasets import make_blobs, make_classification  # noqa: E402
from sklearn.linear_model import Ridge  # noqa: E402
from sklearn.model_selection import GridSearchCV, cross_val_score  # noqa: E402
from sklearn.svm import SVC  # noqa: E402


def _rbf(X, C, gamma):
    return np.exp(-gamma * cdist(X, C, "sqeuclidean"))


def _solve_eq4(S, y, v, lam):
    """(4) as printed: the (m+1) x (m+1) weighted ridge normal equations, by np.linalg.solve."""
    n, m = S.shape
    one = np.ones(n)
    A = np.block([[S.T @ (v[:, None] * S) + n * lam * np.eye(m), (S.T @ (v * one))[:, None]],
                  [(one @ (v[:, None] * S))[None, :], np.array([[one @ (v * one)]])]])
    sol = np.linalg.solve(A, np.concatenate([S.T @ (v * y), [one @ (v * y)]]))
    return sol[:m], sol[m]


def _omega_numpy(S, y, v, lam, beta, b):
    """(2) written out in NumPy."""
    return float(np.mean(v * (y - S @ beta - b) ** 2) + lam * beta @ beta)


def _sine(seed, n=80):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 1))
    return X, np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(n)


# ---------------------------------------------------------------------------------------------
# beta-step (4)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lam", [1e-3, 0.3])
def test_beta_step_is_sklearn_weighted_ridge(lam):
    # Ridge minimises sum_i v_i (y_i - s_i^T w - b)^2 + alpha |w|^2 = n Omega for alpha = n lam
    rng = np.random.default_rng(1)
    n, m = 40, 5
    S, y, v = rng.standard_normal((n, m)), rng.standard_normal(n), rng.uniform(0.2, 3.0, n)
    beta, b = ss.beta_step(S, y, v, lam)
    ridge = Ridge(alpha=n * lam, fit_intercept=True, solver="cholesky", tol=1e-12).fit(S, y, sample_weight=v)
    np.testing.assert_allclose(np.asarray(beta), ridge.coef_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(float(b), ridge.intercept_, rtol=1e-8, atol=1e-10)


def test_beta_step_with_prototypes_at_the_training_points_is_a_direct_solve_of_eq4():
    rng = np.random.default_rng(2)
    n, gamma, lam = 25, 0.7, 1e-2
    X = rng.standard_normal((n, 2))
    y, v = rng.standard_normal(n), rng.uniform(0.5, 2.0, n)
    S = _rbf(X, X, gamma)  # the full kernel matrix
    beta_ref, b_ref = _solve_eq4(S, y, v, lam)
    np.testing.assert_allclose(np.asarray(ss.similarity_matrix(X, X, "rbf", gamma)), S, rtol=1e-12, atol=1e-14)
    beta, b = ss.beta_step(S, y, v, lam)
    np.testing.assert_allclose(np.asarray(beta), beta_ref, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(float(b), b_ref, rtol=1e-7, atol=1e-9)
    # fit with m = n prototypes fixed there (no c-step) reports the same coefficients and Omega
    res = ss.fit(X, y, m=n, init=X, gamma=gamma, lam=lam, sample_weight=v, max_steps=0)
    np.testing.assert_allclose(res.beta, beta_ref, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(res.objective, _omega_numpy(S, y, v, lam, beta_ref, b_ref), rtol=1e-10)
    assert res.similarity_evaluations_per_point == n


def test_beta_step_is_the_posterior_mean_of_the_numpyro_model():
    from numpyro.infer.util import log_density

    rng = np.random.default_rng(3)
    n, m, gamma, lam, tau = 30, 3, 0.5, 0.05, 2.5
    X = rng.standard_normal((n, 2))
    y, v = rng.standard_normal(n), rng.uniform(0.5, 2.0, n)
    C = rng.standard_normal((m, 2))
    kwargs = dict(prototypes=C, gamma=gamma, lam=lam, tau=tau, sample_weight=v)

    @jax.jit
    def logp(theta):
        return log_density(ss.model, (X, y), kwargs, {"beta": theta[:m], "b": theta[m]})[0]

    # the log density is quadratic (Gaussian posterior): one Newton step from 0 lands on its mode = mean
    zero = jnp.zeros(m + 1)
    mode = -np.linalg.solve(np.asarray(jax.hessian(logp)(zero)), np.asarray(jax.grad(logp)(zero)))
    beta, b = ss.beta_step(_rbf(X, C, gamma), y, v, lam)
    np.testing.assert_allclose(mode[:m], np.asarray(beta), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(mode[m], float(b), rtol=1e-8, atol=1e-10)
    # and log p(beta, b | y) = -(n tau / 2) Omega + const, Omega (2) written out independently
    S = _rbf(X, C, gamma)
    thetas = rng.standard_normal((3, m + 1))
    lp = np.array([float(logp(jnp.asarray(t))) for t in thetas])
    om = np.array([_omega_numpy(S, y, v, lam, t[:m], t[m]) for t in thetas])
    np.testing.assert_allclose(lp - lp[0], -(n * tau / 2) * (om - om[0]), rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------------------------------------
# c-step gradients (5)-(7)
# ---------------------------------------------------------------------------------------------
def _central_differences(fun, C, h=1e-6):
    g = np.zeros_like(C)
    for idx in np.ndindex(C.shape):
        up, down = C.copy(), C.copy()
        up[idx] += h
        down[idx] -= h
        g[idx] = (float(fun(up)) - float(fun(down))) / (2 * h)
    return g


def test_prototype_gradient_matches_finite_differences_and_the_rbf_closed_form():
    rng = np.random.default_rng(4)
    n, m, gamma, lam = 40, 3, 0.8, 1e-2
    X = rng.standard_normal((n, 2))
    y, v = np.sign(X[:, 0] * X[:, 1]), rng.uniform(0.5, 2.0, n)
    C = rng.standard_normal((m, 2))
    fd = _central_differences(lambda c: ss.objective(c, X, y, v, lam, gamma, "rbf"), C)
    auto = np.asarray(ss.prototype_gradient(C, X, y, v, lam, gamma, "rbf"))
    closed = np.asarray(ss.rbf_prototype_gradient(C, X, y, v, lam, gamma))
    assert np.max(np.abs(fd)) > 1e-3  # not a flat spot
    np.testing.assert_allclose(auto, fd, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(closed, auto, rtol=1e-9, atol=1e-12)

    # a traceable user similarity (not PSD-specific) is differentiated through the solve of (4) too
    def cauchy(A, B):
        return 1.0 / (1.0 + jnp.sum((A[:, None, :] - B[None, :, :]) ** 2, -1))

    assert ss.is_traceable(cauchy, X, C)
    fd = _central_differences(lambda c: ss.objective(c, X, y, v, lam, gamma, cauchy), C)
    np.testing.assert_allclose(np.asarray(ss.prototype_gradient(C, X, y, v, lam, gamma, cauchy)), fd,
                               rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_objective_never_increases_without_repulsion(seed):
    X, y = _sine(seed)
    v = np.random.default_rng(seed).uniform(0.5, 2.0, len(y))
    res = ss.fit(X, y, m=4, gamma=1.0, lam=1e-3, sample_weight=v, repulsion=0.0, gradient="analytic", max_steps=80,
                 seed=seed)
    trace = res.objective_trace
    assert len(trace) == res.steps + 1 and res.steps > 5
    assert np.all(np.diff(trace) <= 1e-12 * np.abs(trace[:-1]))
    assert trace[-1] < 0.5 * trace[0]
    # the reported objective is (2) at the final prototypes, recomputed independently
    S = _rbf(X, res.prototypes, 1.0)
    beta, b = _solve_eq4(S, y, v, 1e-3)
    np.testing.assert_allclose(res.beta, beta, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(trace[-1], _omega_numpy(S, y, v, 1e-3, beta, b), rtol=1e-9)
    np.testing.assert_allclose(res.decision_function(X), S @ beta + b, rtol=1e-6, atol=1e-9)


def test_prototype_trace_follows_the_objective_trace():
    X, y = _sine(3)
    res = ss.fit(X, y, m=3, gamma=1.0, lam=1e-3, max_steps=25, seed=3, trace_prototypes=True)
    path = res.prototype_trace
    assert path.shape == (res.steps + 1, 3, X.shape[1]) and res.steps > 3
    np.testing.assert_array_equal(path[0], res.initial_prototypes)
    np.testing.assert_array_equal(path[-1], res.prototypes)
    v = np.ones(len(y))
    for t in (0, res.steps // 2, res.steps):  # each recorded state scores the recorded objective
        S = _rbf(X, path[t], 1.0)
        np.testing.assert_allclose(res.objective_trace[t], _omega_numpy(S, y, v, 1e-3, *_solve_eq4(S, y, v, 1e-3)),
                                   rtol=1e-9)
    assert ss.fit(X, y, m=3, max_steps=5).prototype_trace is None


def test_repulsion_helps_from_coincident_starts_and_never_lets_the_objective_explode():
    X, y = _sine(5)
    sigma2 = np.var(y)
    ends = {0.0: [], 1.0: []}
    for i in range(10):  # three almost coincident prototypes at each of 10 training points
        init = np.repeat(X[i:i + 1], 3, axis=0) + 1e-3 * np.arange(3)[:, None]
        for rho in ends:
            res = ss.fit(X, y, m=3, init=init, gamma=1.0, max_steps=300, repulsion=rho)
            ends[rho].append(res.objective)
            # Omega_t <= Omega_0 + rho sigma_y^2 R(C_0): the augmented objective never increases
            R0 = np.sum(np.triu(_rbf(init, init, 1.0), 1))
            np.testing.assert_allclose(float(ss.repulsion_penalty(init, "rbf", 1.0)), R0, rtol=1e-12)
            assert np.all(np.isfinite(res.objective_trace))
            assert np.max(res.objective_trace) <= res.objective_trace[0] + rho * sigma2 * R0 + 1e-12
    # the paper's point: repelling the prototypes early avoids the poor local minima of coincident
    # starts (on average over the starts)
    assert np.mean(ends[1.0]) < 0.7 * np.mean(ends[0.0]), ends


def test_two_steps_follow_the_documented_update_with_decaying_repulsion():
    # C_t = C_{t-1} - eta grad(Omega + rho sigma_y^2 / t R)(C_{t-1}), gradients from the public
    # functions (jax.grad through (4) and of R); eta small enough that no halving happens
    X, y = _sine(12, n=40)
    v = np.linspace(0.5, 1.5, 40)
    rho, eta, gamma, lam = 3.0, 0.05, 1.0, 1e-3
    sigma2 = np.average((y - np.average(y, weights=v)) ** 2, weights=v)
    C = X[:3] + np.array([[0.0], [0.2], [0.4]])
    grad_R = jax.grad(lambda c: ss.repulsion_penalty(c, "rbf", gamma))
    for t in (1, 2):
        coef = rho * sigma2 / t
        g = np.asarray(ss.prototype_gradient(C, X, y, v, lam, gamma)) + coef * np.asarray(grad_R(jnp.asarray(C)))
        C_next = C - eta * g
        aug = lambda c: float(ss.objective(c, X, y, v, lam, gamma)) + coef * float(ss.repulsion_penalty(c))  # noqa
        assert aug(C_next) < aug(C)  # so the fit takes the full step
        C = C_next
    res = ss.fit(X, y, m=3, init=X[:3] + np.array([[0.0], [0.2], [0.4]]), sample_weight=v, gamma=gamma, lam=lam,
                 repulsion=rho, step_size=eta, max_steps=2, tol=0.0)
    assert res.steps == 2
    np.testing.assert_allclose(res.prototypes, C, rtol=1e-10, atol=1e-12)


def test_analytic_and_autodiff_fits_take_the_same_steps_with_repulsion():
    # the closed-form RBF gradient of Omega + rho_t R against jax.grad of the same, over a fit
    X, y = _sine(11, n=50)
    kw = dict(m=4, gamma=1.0, repulsion=2.0, max_steps=15, tol=0.0, seed=3)
    auto, closed = ss.fit(X, y, gradient="autodiff", **kw), ss.fit(X, y, gradient="analytic", **kw)
    assert closed.gradient == "analytic" and auto.steps == closed.steps == 15
    np.testing.assert_allclose(closed.objective_trace, auto.objective_trace, rtol=1e-7)
    np.testing.assert_allclose(closed.prototypes, auto.prototypes, rtol=1e-6, atol=1e-8)


def test_black_box_similarity_uses_rule_7_and_lowers_the_objective():
    def laplacian_numpy(A, B):  # NumPy only: JAX cannot trace it
        A, B = np.asarray(A), np.asarray(B)
        return np.exp(-np.sqrt(((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)))

    X, y = _sine(6, n=60)
    assert not ss.is_traceable(laplacian_numpy, X, X[:2])
    res = ss.fit(X, y, m=3, similarity=laplacian_numpy, repulsion=0.0, max_steps=40, seed=0)
    assert res.gradient == "direction"
    trace = res.objective_trace
    assert res.steps >= 2 and np.all(np.diff(trace) <= 1e-12 * np.abs(trace[:-1]))
    assert trace[-1] < 0.5 * trace[0]
    np.testing.assert_allclose(res.decision_function(X[:5]),
                               laplacian_numpy(X[:5], res.prototypes) @ res.beta + res.b, rtol=1e-12)
    # rule (7) is the total derivative with d s / d c_k replaced by (x_i - c_k)
    C, v = X[:3], np.ones(len(y))
    S = laplacian_numpy(X, C)
    beta, b = _solve_eq4(S, y, v, 1e-3)
    r = y - S @ beta - b
    expected = np.stack([-(2 / len(y)) * beta[k] * np.sum(r[:, None] * (X - C[k]), 0) for k in range(3)])
    np.testing.assert_allclose(ss.direction_prototype_gradient(C, X, y, v, 1e-3, 1.0, laplacian_numpy), expected,
                               rtol=1e-8, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Choosing m (8), reducing an SVM
# ---------------------------------------------------------------------------------------------
def test_prune_keeps_the_largest_coefficients_and_select_m_minimises_eq8():
    X, y = _sine(7, n=100)
    Xv, yv = _sine(8, n=60)
    res = ss.fit(X, y, m=6, gamma=1.0, max_steps=60)
    top = np.sort(np.argsort(-np.abs(res.beta))[:3])
    kept = ss.prune(res, X, y, 3, max_steps=0)
    np.testing.assert_allclose(kept.prototypes, res.prototypes[top])
    assert kept.gamma == res.gamma and kept.lam == res.lam and kept.repulsion == 0.0 and res.repulsion == 1.0
    best, table = ss.select_m(X, y, Xv, yv, grid=(1, 6, 3), mu=0.0, gamma=1.0, max_steps=60)
    assert list(table["m"]) == [6, 3, 1]
    np.testing.assert_allclose(table["score"], table["validation_loss"])
    assert best.m == table["m"][int(np.argmin(table["validation_loss"]))]
    fv = best.decision_function(Xv)
    np.testing.assert_allclose(table["validation_loss"].min(), np.mean((yv - fv) ** 2), rtol=1e-10)
    best_priced, table_priced = ss.select_m(X, y, Xv, yv, grid=(6, 3, 1), mu=10.0, gamma=1.0, max_steps=60)
    assert best_priced.m == 1
    np.testing.assert_allclose(table_priced["score"], table_priced["validation_loss"] + 10.0 * table_priced["m"])


def test_reducing_an_svm_to_a_few_virtual_prototypes():
    X, labels = make_classification(200, 2, n_informative=2, n_redundant=0, n_clusters_per_class=1, class_sep=1.5,
                                     random_state=1)
    svc = SVC(gamma=0.5).fit(X, labels)
    res = ss.fit_to_decision_values(svc, X, m=3, gamma=0.5, max_steps=100)
    g = svc.decision_function(X)
    assert res.m == 3 < len(svc.support_)
    assert np.mean(np.sign(res.decision_function(X)) == np.sign(g)) > 0.95
    assert np.corrcoef(res.decision_function(X), g)[0, 1] > 0.95
    # the targets were the decision values: (2) against g at the final prototypes
    S = _rbf(X, res.prototypes, 0.5)
    beta, b = _solve_eq4(S, g, np.ones(len(g)), 1e-3)
    np.testing.assert_allclose(res.objective, _omega_numpy(S, g, np.ones(len(g)), 1e-3, beta, b), rtol=1e-8)


# ---------------------------------------------------------------------------------------------
# Estimators
# ---------------------------------------------------------------------------------------------
def _split(X, y, n_train):
    return X[:n_train], y[:n_train], X[n_train:], y[n_train:]


def test_classifier_reaches_the_accuracy_of_an_rbf_svc_with_few_prototypes():
    X, labels = make_classification(400, 4, n_informative=2, n_redundant=0, class_sep=1.0, random_state=3)
    labels = np.array(["no", "yes"])[labels]
    Xtr, ytr, Xte, yte = _split(X, labels, 200)
    svc = SVC(gamma=0.25).fit(Xtr, ytr).score(Xte, yte)
    for m in (2, 4):
        clf = SuperSparseClassifier(m=m, gamma=0.25).fit(Xtr, ytr)
        assert list(clf.classes_) == ["no", "yes"] and clf.similarity_evaluations_per_point_ == m
        assert clf.score(Xte, yte) >= svc - 0.05, (m, clf.score(Xte, yte), svc)
    assert set(clf.predict(Xte)) <= {"no", "yes"} and clf.decision_function(Xte).shape == (200,)


def test_grid_search_over_m_and_clone():
    X, labels = make_blobs(90, centers=2, cluster_std=1.5, random_state=1)
    est = SuperSparseClassifier(gamma=0.1, max_steps=50)
    assert clone(est).get_params() == est.get_params()
    assert est.set_params(m=2).m == 2
    search = GridSearchCV(est, {"m": [1, 2, 4]}, cv=3).fit(X, labels)
    svc = cross_val_score(SVC(gamma=0.1), X, labels, cv=3).mean()
    assert search.best_score_ >= svc - 0.05
    assert search.best_estimator_.results_[0].m == search.best_params_["m"]
    assert list(search.cv_results_["param_m"]) == [1, 2, 4]


def test_multiclass_one_vs_all_on_three_blobs():
    X, labels = make_blobs(240, centers=3, cluster_std=1.0, random_state=0)
    Xtr, ytr, Xte, yte = _split(X, labels + 10, 150)
    gamma = 1.0 / (2 * X.var(0).sum())
    clf = SuperSparseClassifier(m=2, gamma=gamma).fit(Xtr, ytr)
    assert list(clf.classes_) == [10, 11, 12] and len(clf.results_) == 3
    assert clf.decision_function(Xte).shape == (90, 3) and clf.prototypes_.shape == (6, 2)
    assert clf.similarity_evaluations_per_point_ == 6
    np.testing.assert_array_equal(clf.predict(Xte), clf.classes_[np.argmax(clf.decision_function(Xte), 1)])
    assert clf.score(Xte, yte) >= SVC(gamma=gamma).fit(Xtr, ytr).score(Xte, yte) - 0.03


def test_regressor_and_sample_weight():
    X, y = _sine(9, n=150)
    Xtr, ytr, Xte, yte = _split(X, y, 100)
    reg = SuperSparseRegressor(m=6, gamma=1.0).fit(Xtr, ytr)
    assert reg.score(Xte, yte) > 0.9
    # sample weights reach (2): weighting one half up pulls the fit towards it
    v = np.where(Xtr[:, 0] > 0, 10.0, 1.0)
    weighted = SuperSparseRegressor(m=2, gamma=1.0, max_steps=0).fit(Xtr, ytr, sample_weight=v)
    np.testing.assert_allclose(weighted.result_.sample_weight, v)
    S = _rbf(Xtr, weighted.result_.prototypes, 1.0)
    np.testing.assert_allclose(weighted.result_.beta, _solve_eq4(S, ytr, v, 1e-3)[0], rtol=1e-7, atol=1e-9)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------
_X = np.random.default_rng(0).standard_normal((10, 2))
_y = np.where(_X[:, 0] > 0, 1.0, -1.0)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: ss.fit(np.where(np.eye(10, 2) > 0, np.nan, _X), _y, m=2), "`X`.*NaN"),
        (lambda: ss.fit(_X, _y[:7], m=2), "`y` has 7 entries but `X` has 10 rows"),
        (lambda: ss.fit(_X, _y, m=0), "`m` must be between 1 and 10"),
        (lambda: ss.fit(_X, _y, m=11), "`m` must be between 1 and 10"),
        (lambda: ss.fit(_X, _y, m=2, lam=0.0), "`lam`"),
        (lambda: ss.fit(_X, _y, m=2, sample_weight=np.zeros(10)), "`sample_weight`"),
        (lambda: ss.fit(_X, _y, m=2, similarity="cosine"), "`similarity`"),
        (lambda: ss.fit(_X, _y, m=2, init=np.zeros((2, 3))), "`init`"),
        (lambda: ss.fit(_X, _y, m=2, gradient="analytic", similarity=lambda A, B: A @ B.T), "`gradient='analytic'`"),
        (lambda: SuperSparseClassifier(m=2).fit(_X, np.ones(10)), "`y` holds only one class"),
        (lambda: SuperSparseClassifier(m=2).fit(_X, _y[:9]), "inconsistent numbers of samples: \\[10, 9\\]"),
        (lambda: SuperSparseClassifier(m=2).fit(np.where(np.eye(10, 2) > 0, np.nan, _X), _y), "Input X contains NaN"),
        (lambda: SuperSparseClassifier(m=20).fit(_X, _y), "`m` must be between 1 and 10"),
        (lambda: SuperSparseRegressor(m=2).fit(_X, np.r_[_y[:9], np.nan]), "Input y contains NaN"),
        (lambda: SuperSparseRegressor(m=2).predict(_X), "not fitted"),
        (lambda: SuperSparseRegressor(m=2, max_steps=0).fit(_X, _y).predict(np.ones((2, 3))),
         "X has 3 features, but SuperSparseRegressor is expecting 2"),
    ],
)
def test_bad_input_raises_a_value_error_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_model_runs_under_nuts_and_rejects_mismatched_prototypes():
    import numpyro
    from numpyro.diagnostics import effective_sample_size
    from numpyro.infer import MCMC, NUTS

    X, y = _sine(10, n=20)
    C, v, lam = X[:2], np.linspace(0.5, 2.0, 20), 0.05
    mcmc = MCMC(NUTS(ss.model), num_warmup=400, num_samples=2000, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), X, y, prototypes=C, lam=lam, tau=4.0, sample_weight=v)
    draws = mcmc.get_samples()
    beta, b = ss.beta_step(_rbf(X, C, 1.0), y, v, lam)
    for name, exact in (("beta", np.asarray(beta)), ("b", float(b))):
        d = np.asarray(draws[name])
        se = d.std(0) / np.sqrt(effective_sample_size(d[None]))
        assert np.all(np.abs(d.mean(0) - exact) < 5 * se), (name, d.mean(0), exact, se)
    tr = numpyro.handlers.trace(numpyro.handlers.substitute(numpyro.handlers.seed(ss.model, 0), {"b": 0.0})).get_trace(
        X, y, prototypes=C)
    assert tr["beta"]["value"].shape == (2,) and tr["y"]["is_observed"]
    with pytest.raises(ValueError, match="`prototypes`"):
        ss.model(X, y, prototypes=np.zeros((3, 2)))
    assert ppl_sbl.estimators.SuperSparseClassifier is SuperSparseClassifier


def test_evidence_ranks_m_and_agrees_with_monte_carlo():
    """m by evidence: data from three RBF bumps; the variational RVM over the learned prototypes
    has a much higher ELBO with m = 3 or 6 than with m = 1 (which cannot fit the three bumps),
    `compare` ranks them by that ELBO, and the ELBO equals NumPyro's Monte Carlo Trace_ELBO of
    the same model and guide."""
    rng = np.random.default_rng(5)
    centres = np.array([[-2.0, 0.0], [0.0, 1.5], [2.0, -1.0]])
    X = rng.uniform(-3.5, 3.5, size=(120, 2))
    y = _rbf(X, centres, 0.8) @ np.array([1.5, -1.0, 2.0]) + 0.05 * rng.normal(size=120)
    scores, fits = ss.evidence_over_m(X, y, grid=(6, 3, 1), gamma=0.8, lam=1e-4, max_steps=150, seed=0)
    assert sorted(scores) == [1, 3, 6] and all(fits[m].m == m for m in scores)
    elbo = {m: float(r.elbo) for m, r in scores.items()}
    assert elbo[3] > elbo[1] + 50 and elbo[6] > elbo[1] + 50, elbo
    table = ppl_sbl.compare({f"m={m}": r for m, r in scores.items()})
    assert table.index[-1] == "m=1"
    np.testing.assert_allclose(table.loc["m=3", "elbo"], elbo[3])
    check = ppl_sbl.check_guide(scores[3], num_particles=2000)
    assert check.passed, check.message
    # the fitted machine with m = 3 found the three bumps: its training error is near the noise
    assert np.sqrt(np.mean((fits[3].decision_function(X) - y) ** 2)) < 0.15


def test_evidence_classification_and_bad_labels():
    X, y01 = make_blobs(n_samples=80, centers=2, cluster_std=1.0, random_state=1)
    y = np.where(y01 == 1, 1.0, -1.0)
    res = ss.fit(X, y, m=2, gamma=0.2, max_steps=30)
    ev = ss.evidence(res, X, y, task="classification")
    assert np.isfinite(float(ev.elbo))
    mean = np.asarray(ev.predict(np.column_stack([res.similarities(X), np.ones(len(X))])))
    assert np.mean((mean > 0.5) == (y > 0)) > 0.9
    with pytest.raises(ValueError, match="-1/\\+1"):
        ss.evidence(res, X, y01 + 1.0, task="classification")
    with pytest.raises(ValueError, match="`task`"):
        ss.evidence(res, X, y, task="ranking")
    with pytest.raises(ValueError, match="`result`"):
        ss.evidence("not a result", X, y)


def test_cli_digit_verification_table():
    """`ppl-sbl compare --dataset digits-verification`: the SVC against super-sparse machines with
    the test-time cost (support vectors against m) and the ELBO ranking; the SVC's row against the
    same pipeline recomputed here with scikit-learn."""
    from scripts import run_cli
    from sklearn.decomposition import PCA
    from sklearn.metrics import roc_auc_score

    out = run_cli("compare", "--dataset", "digits-verification", "--classes", "3", "--prototypes", "1", "2",
                  "--n-train", "100", "--prototype-steps", "30")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {}
    for line in out.stdout.splitlines():
        for name in ("SVC (RBF)", "super-sparse, m = 1", "super-sparse, m = 2"):
            if line.startswith(name + " ") and name not in rows:  # the first table (the second ranks by ELBO)
                rows[name] = [float(v) for v in line[len(name):].split()]  # auc, error, evaluations, ELBO, rank
    assert set(rows) == {"SVC (RBF)", "super-sparse, m = 1", "super-sparse, m = 2"}, out.stdout
    d = ppl_sbl.datasets.digits(100, seed=0)
    pca = PCA(20, random_state=0).fit(d.X_train)
    X, X_test = pca.transform(d.X_train), pca.transform(d.X_test)
    gamma = 1.0 / np.median(cdist(X, X, "sqeuclidean")[np.triu_indices(len(X), 1)])
    y, y_test = np.where(d.t_train == 3, 1.0, -1.0), np.where(d.t_test == 3, 1.0, -1.0)
    svc = SVC(kernel="rbf", gamma=gamma, C=1.0).fit(X, y)
    g = svc.decision_function(X_test)
    np.testing.assert_allclose(rows["SVC (RBF)"][:3], [roc_auc_score(y_test, g), np.mean(np.sign(g) != y_test),
                                                       len(svc.support_)], atol=1e-4)
    for m in (1, 2):
        auc, error, evaluations, elbo, rank = rows[f"super-sparse, m = {m}"]
        assert evaluations == m and 0.5 < auc <= 1.0 and 0.0 <= error < 0.5 and np.isfinite(elbo)
    assert sorted(r[4] for n, r in rows.items() if n != "SVC (RBF)") == [1.0, 2.0]
    assert "ranked by ELBO" in out.stdout
