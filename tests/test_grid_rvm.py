"""Grid RVM (product and sum rules): checks against an independent NumPy evaluation, the RVM,
quadrature and NumPyro."""
import numpy as np
import pytest
from scipy.special import digamma, gammaln

import ppl_sbl
from ppl_sbl import gaussian
from ppl_sbl.models import grid_rvm, rvm

LOG2PI = np.log(2 * np.pi)


def table_problem(seed, N=50, shape=(5, 3), noise=0.2):
    r = np.random.default_rng(seed)
    X = r.standard_normal((N,) + shape)
    W = np.zeros(shape)
    W[:2, :2] = [[1.0, -1.0], [2.0, 0.5]]
    t = np.einsum("nij,ij->n", X, W) + noise * r.standard_normal(N)
    return X, t


def _gamma_terms(a, b, a0, b0):
    e, elog = a / b, digamma(a) - np.log(b)
    return np.sum(a0 * np.log(b0) - gammaln(a0) + (a0 - 1) * elog - b0 * e + a - np.log(b) + gammaln(a)
                  + (1 - a) * digamma(a))


def numpy_grid_start(Phi, W0, M1, M2, kind, a0, c0, b0=None, d0=None):
    """The start: each cell's target is the unit-information prior h / N, h = sum_n W0_n phi_n^2;
    the product rule fits its logarithm by ln E[alpha_i] + ln E[beta_j] (least squares, the
    minimum-norm deviation from the prior log-means ln(a0 / b0), ln(c0 / d0)), the sum rule takes
    half of the exponentiated grand mean for every row and column. Shapes a0 + M2 / 2 and
    c0 + M1 / 2."""
    L = np.log((Phi**2).T @ W0 / Phi.shape[0]).reshape(M1, M2)
    grand = L.mean()
    if kind == "p":
        design = np.zeros((M1 * M2, M1 + M2))
        for i in range(M1):
            for j in range(M2):
                design[i * M2 + j, [i, M1 + j]] = 1.0
        prior = np.r_[np.full(M1, np.log(a0 / b0)), np.full(M2, np.log(c0 / d0))]
        u = np.linalg.lstsq(design, L.ravel() - design @ prior, rcond=None)[0] + prior
        row, col = np.exp(u[:M1]), np.exp(u[M1:])
    else:
        row, col = np.full(M1, np.exp(grand) / 2), np.full(M2, np.exp(grand) / 2)
    a, c = np.full(M1, a0 + M2 / 2), np.full(M2, c0 + M1 / 2)
    return a, a / row, c, c / col


def numpy_pgrid_regression(X, t, sweeps, a0=1e-6, b0=1e-6, c0=1e-6, d0=1e-6, e0=1e-6, f0=1e-6):
    """Eq. (15)-(18) of Kropotov et al. written out for two axes, and the bound (10)."""
    N, M1, M2 = X.shape
    Phi = X.reshape(N, -1)
    g0 = 10.0 / np.var(t)  # the start: E[gamma] = 10 / var(t)
    a, b, c, d = numpy_grid_start(Phi, np.full(N, g0), M1, M2, "p", a0, c0, b0, d0)
    e = e0 + N / 2
    f = e / g0
    elbos = []
    for _ in range(sweeps):
        prec = np.outer(a / b, c / d).ravel()
        Sigma = np.linalg.inv(np.diag(prec) + (e / f) * Phi.T @ Phi)
        mu = (e / f) * Sigma @ Phi.T @ t  # (15)
        Ew2 = (mu**2 + np.diag(Sigma)).reshape(M1, M2)
        a, b = a0 + M2 / 2, b0 + 0.5 * Ew2 @ (c / d)  # (16)
        a = np.full(M1, a)
        c, d = np.full(M2, c0 + M1 / 2), d0 + 0.5 * (a / b) @ Ew2  # (17), with the new q(alpha)
        sq = np.sum((t - Phi @ mu) ** 2) + np.trace(Phi.T @ Phi @ Sigma)
        e, f = e0 + N / 2, f0 + sq / 2  # (18)
        ela, elb = digamma(a) - np.log(b), digamma(c) - np.log(d)
        eg, elg = e / f, digamma(e) - np.log(f)
        elbo = (N / 2 * (elg - LOG2PI) - eg / 2 * sq
                + np.sum(0.5 * (ela[:, None] + elb[None, :] - LOG2PI - np.outer(a / b, c / d) * Ew2))
                + _gamma_terms(a, b, a0, b0) + _gamma_terms(c, d, c0, d0)
                + _gamma_terms(np.array([e]), np.array([f]), e0, f0)
                + 0.5 * M1 * M2 * (1 + LOG2PI) + 0.5 * np.linalg.slogdet(Sigma)[1])
        elbos.append(elbo)
    return dict(mu=mu, b=b, d=d, f=f, elbo=np.array(elbos))


def numpy_pgrid_classification(X, t, sweeps, a0=1e-6, b0=1e-6, c0=1e-6, d0=1e-6):
    """p-grid classification: (29), (16), (17) with the new q(alpha), (30), and the bound (28)."""
    N, M1, M2 = X.shape
    Phi = X.reshape(N, -1)
    xi = np.ones(N)
    a, b, c, d = numpy_grid_start(Phi, 2 * np.tanh(xi / 2) / (4 * xi), M1, M2, "p", a0, c0, b0, d0)
    elbos = []
    for _ in range(sweeps):
        lam = np.tanh(xi / 2) / (4 * xi)
        Sigma = np.linalg.inv(np.diag(np.outer(a / b, c / d).ravel()) + 2 * Phi.T @ (lam[:, None] * Phi))
        mu = Sigma @ Phi.T @ (t - 0.5)  # (29)
        Ew2 = (mu**2 + np.diag(Sigma)).reshape(M1, M2)
        a, b = np.full(M1, a0 + M2 / 2), b0 + 0.5 * Ew2 @ (c / d)  # (16)
        c, d = np.full(M2, c0 + M1 / 2), d0 + 0.5 * (a / b) @ Ew2  # (17)
        z2 = np.einsum("nk,kl,nl->n", Phi, Sigma + np.outer(mu, mu), Phi)
        xi = np.sqrt(z2)  # (30)
        lam = np.tanh(xi / 2) / (4 * xi)
        ela, elb = digamma(a) - np.log(b), digamma(c) - np.log(d)
        elbo = (np.sum(-np.log1p(np.exp(-xi)) + 0.5 * ((2 * t - 1) * (Phi @ mu) - xi) - lam * (z2 - xi**2))
                + np.sum(0.5 * (ela[:, None] + elb[None, :] - LOG2PI - np.outer(a / b, c / d) * Ew2))
                + _gamma_terms(a, b, a0, b0) + _gamma_terms(c, d, c0, d0)
                + 0.5 * M1 * M2 * (1 + LOG2PI) + 0.5 * np.linalg.slogdet(Sigma)[1])
        elbos.append(elbo)
    return dict(mu=mu, b=b, d=d, xi=xi, elbo=np.array(elbos))


def test_pgrid_classification_equals_numpy_transcription():
    X, t = table_problem(5)
    t = (t > 0).astype(float)
    res = _fit(grid_rvm.classification, X, t, max_sweeps=10, tol=1e-300, prune=False)
    ref = numpy_pgrid_classification(X, t, 10, b0=1e-6 / np.mean(X**2))  # labels: b0 = a0 / mean(X^2)
    np.testing.assert_allclose(res.elbo_trace, ref["elbo"], rtol=1e-9)
    np.testing.assert_allclose(res.state.w.mean, ref["mu"], rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(res.state.xi, ref["xi"], rtol=1e-9)
    np.testing.assert_allclose(res.state.rates[1], ref["d"], rtol=1e-8)


def numpy_sgrid(X, t, sweeps, classification=False, a0=1e-2, b0=1e-2, c0=1e-2, d0=1e-2, e0=1e-2, f0=1e-2):
    """The s-grid of Kropotov et al. written out: q(w) by (15) or (29), (33), (34), then (18) or
    (30), then (35), with eta and zeta kept as full (M1, M2) tables as in the paper, and the
    bound (32) (with (27) for classification)."""
    N, M1, M2 = X.shape
    Phi = X.reshape(N, -1)
    xi, g0 = np.ones(N), 10.0 / np.var(t)
    W0 = 2 * np.tanh(xi / 2) / (4 * xi) if classification else np.full(N, g0)
    a, b, c, d = numpy_grid_start(Phi, W0, M1, M2, "s", a0, c0)
    e = e0 + N / 2
    f = e / g0
    eta, zeta = np.ones((M1, M2)), np.ones((M1, M2))  # equal: responsibilities 1/2
    elbos = []
    for _ in range(sweeps):
        prec = ((a / b)[:, None] + (c / d)[None, :]).ravel()
        if classification:
            lam = np.tanh(xi / 2) / (4 * xi)
            Sigma = np.linalg.inv(np.diag(prec) + 2 * Phi.T @ (lam[:, None] * Phi))
            mu = Sigma @ Phi.T @ (t - 0.5)  # (29)
        else:
            Sigma = np.linalg.inv(np.diag(prec) + (e / f) * Phi.T @ Phi)
            mu = (e / f) * Sigma @ Phi.T @ t  # (15)
        Ew2 = (mu**2 + np.diag(Sigma)).reshape(M1, M2)
        R = eta / (eta + zeta)
        a, b = a0 + 0.5 * R.sum(axis=1), b0 + 0.5 * Ew2.sum(axis=1)  # (33)
        c, d = c0 + 0.5 * (1 - R).sum(axis=0), d0 + 0.5 * Ew2.sum(axis=0)  # (34)
        ela, elb = digamma(a) - np.log(b), digamma(c) - np.log(d)
        second = Sigma + np.outer(mu, mu)
        if classification:
            xi = np.sqrt(np.einsum("nk,kl,nl->n", Phi, second, Phi))  # (30)
            lam = np.tanh(xi / 2) / (4 * xi)
            lik = np.sum(-np.log1p(np.exp(-xi)) + 0.5 * ((2 * t - 1) * (Phi @ mu) - xi)
                         - lam * (np.einsum("nk,kl,nl->n", Phi, second, Phi) - xi**2))
        else:
            sq = np.sum((t - Phi @ mu) ** 2) + np.trace(Phi.T @ Phi @ Sigma)
            e, f = e0 + N / 2, f0 + sq / 2  # (18)
            eg, elg = e / f, digamma(e) - np.log(f)
            lik = N / 2 * (elg - LOG2PI) - eg / 2 * sq + _gamma_terms(np.array([e]), np.array([f]), e0, f0)
        eta, zeta = np.exp(ela)[:, None] * np.ones((1, M2)), np.exp(elb)[None, :] * np.ones((M1, 1))  # (35)
        S = eta + zeta
        G = 0.5 * np.sum(np.log(S) + eta / S * (ela[:, None] - np.log(eta)) + zeta / S * (elb[None, :] - np.log(zeta)))
        G -= 0.5 * np.sum(((a / b)[:, None] + (c / d)[None, :]) * Ew2) + 0.5 * M1 * M2 * LOG2PI
        elbo = (lik + G + _gamma_terms(a, b, a0, b0) + _gamma_terms(c, d, c0, d0)
                + 0.5 * M1 * M2 * (1 + LOG2PI) + 0.5 * np.linalg.slogdet(Sigma)[1])
        elbos.append(elbo)
    return dict(mu=mu, a=a, b=b, c=c, d=d, elbo=np.array(elbos))


def _fit(model, *args, **kw):
    opts = {k: kw.pop(k) for k in list(kw) if k in ("tol", "max_sweeps", "prune")}
    return ppl_sbl.CAVI(model, progress_bar=False, **opts).run(*args, **kw)


def test_pgrid_sweeps_and_elbo_equal_numpy_transcription():
    X, t = table_problem(0)
    res = _fit(grid_rvm.regression, X, t, max_sweeps=10, tol=1e-300, prune=False)
    # the default rates on the data's scale: b0 = a0 var(t) / mean(X^2), d0 = c0, f0 = e0 var(t)
    ref = numpy_pgrid_regression(X, t, 10, b0=1e-6 * np.var(t) / np.mean(X**2), f0=1e-6 * np.var(t))
    np.testing.assert_allclose(res.elbo_trace, ref["elbo"], rtol=1e-9)
    np.testing.assert_allclose(res.state.w.mean, ref["mu"], rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(res.state.rates[0], ref["b"], rtol=1e-8)
    np.testing.assert_allclose(res.state.rates[1], ref["d"], rtol=1e-8)


@pytest.mark.parametrize("classification", [False, True])
def test_sgrid_sweeps_and_elbo_equal_numpy_transcription(classification):
    X, t = table_problem(3)
    t = (t > 0).astype(float) if classification else t
    model = grid_rvm.classification if classification else grid_rvm.regression
    hyper = dict(a0=1e-2, b0=1e-2, c0=1e-2, d0=1e-2) if classification else dict(
        a0=1e-2, b0=1e-2, c0=1e-2, d0=1e-2, e0=1e-2, f0=1e-2)
    res = _fit(model, X, t, kind="s", max_sweeps=10, tol=1e-300, prune=False, **hyper)
    ref = numpy_sgrid(X, t, 10, classification=classification)
    np.testing.assert_allclose(res.elbo_trace, ref["elbo"], rtol=1e-9)
    np.testing.assert_allclose(res.state.w.mean, ref["mu"], rtol=1e-7, atol=1e-10)
    for ours, theirs in zip(res.state.shapes + res.state.rates, [ref[k] for k in "acbd"]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9)


def test_log_sum_bound_is_tightest_at_eq_35_and_below_the_quadrature():
    """The bound on E[ln(alpha_i + beta_j)] at eta = exp(E ln alpha), zeta = exp(E ln beta) is
    the largest over random (eta, zeta), and lies below the exact expectation by the gap that
    the result reports; the gap is checked against Monte Carlo draws of q."""
    from ppl_sbl.bounds import expected_log_sum_gamma, log_sum_bound

    X, t = table_problem(4)
    res = _fit(grid_rvm.regression, X, t, kind="s", a0=0.5, b0=0.5, c0=0.5, d0=0.5)
    (a, c), (b, d) = res.state.shapes, res.state.rates
    ela, elb = digamma(a)[:, None] - np.log(b)[:, None], digamma(c)[None, :] - np.log(d)[None, :]
    best, _ = log_sum_bound([ela, elb], [ela, elb])
    np.testing.assert_allclose(best, np.logaddexp(ela, elb), rtol=1e-12)
    r = np.random.default_rng(0)
    for _ in range(20):
        other, _ = log_sum_bound([ela, elb], [ela + r.normal(size=ela.shape), elb + r.normal(size=elb.shape)])
        assert np.all(np.asarray(other) <= np.asarray(best) + 1e-12)
    exact = np.asarray(expected_log_sum_gamma([a[:, None], c[None, :]], [b[:, None], d[None, :]]))
    draws = np.log(r.gamma(a[:, None, None], 1 / b[:, None, None], (len(a), 1, 400_000))
                   + r.gamma(c[None, :, None], 1 / d[None, :, None], (1, len(c), 400_000)))
    se = draws.std(axis=-1) / np.sqrt(draws.shape[-1])
    assert np.all(np.abs(exact - draws.mean(axis=-1)) < 5 * se + 1e-12)
    gap = 0.5 * np.sum(exact - np.asarray(best))
    assert gap > 0
    assert res.bound_gaps["log-sum"] == pytest.approx(gap, rel=1e-9)
    assert res.elbo_exact - res.elbo == pytest.approx(gap, rel=1e-9)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("shape", [(5, 3), (3, 2, 2)])
@pytest.mark.parametrize("kind", ["p", "s"])
def test_elbo_never_decreases(seed, shape, kind):
    X, t = table_problem(seed, shape=shape) if len(shape) == 2 else (None, None)
    if X is None:
        r = np.random.default_rng(seed)
        X = r.standard_normal((50,) + shape)
        t = X[:, 0, 0, 0] - X[:, 1, 1, 0] + 0.2 * r.standard_normal(50)
    priors = dict(axis_priors=[(1e-6, 1e-6)] * len(shape)) if len(shape) != 2 else {}
    for model, target in [(grid_rvm.regression, t), (grid_rvm.classification, (t > 0).astype(float))]:
        res = _fit(model, X, target, kind=kind, max_sweeps=600, **priors)
        steps = np.diff(res.elbo_trace)
        assert np.all(steps >= -1e-9 * np.abs(res.elbo_trace[1:])), (model.__name__, steps.min())


def test_check_guide_pgrid_regression_equal_classification_above_bound():
    X, t = table_problem(1)
    res = _fit(grid_rvm.regression, X, t)
    check = ppl_sbl.check_guide(res, num_particles=3000)
    assert check.passed and check.bound == "none", check.message
    res = _fit(grid_rvm.classification, X, (t > 0).astype(float))
    check = ppl_sbl.check_guide(res, num_particles=3000)
    assert check.passed and res.elbo < res.elbo_exact, check.message


def test_check_guide_sgrid_lies_above_both_bounds():
    """Moderate priors (shape 0.5): with the default shape 1e-6 a row whose responsibility goes
    to zero keeps q(alpha_i) = Gamma(1e-6, b), whose draws underflow to 0 in float64, and a Monte
    Carlo check cannot evaluate ln q there."""
    X, t = table_problem(1)
    hyper = dict(a0=0.5, b0=0.5, c0=0.5, d0=0.5)
    res = _fit(grid_rvm.regression, X, t, kind="s", **hyper)
    check = ppl_sbl.check_guide(res, num_particles=4000)
    assert check.passed and res.bound == "log-sum" and res.elbo < res.elbo_exact, check.message
    res = _fit(grid_rvm.classification, X, (t > 0).astype(float), kind="s", **hyper)
    check = ppl_sbl.check_guide(res, num_particles=4000)
    assert check.passed and set(res.bound_gaps) == {"jaakkola-jordan", "log-sum"}, check.message
    assert res.elbo_exact - res.elbo == pytest.approx(sum(res.bound_gaps.values()), rel=1e-9)


def test_single_column_with_a_pinned_beta_is_the_rvm():
    """M2 = 1 and beta ~ Gamma(c0, d0) with c0 = d0 = 1e8 (E[beta] = 1, sd 1e-4): the p-grid is
    the RVM on the same features, up to the tiny uncertainty left in beta."""
    r = np.random.default_rng(2)
    Phi = r.standard_normal((40, 6))
    t = Phi[:, 0] - 2 * Phi[:, 1] + 0.3 * r.standard_normal(40)
    # the same number of sweeps for both, so that only beta's residual uncertainty differs
    # and the same explicit rates (the default rates differ: per column for the RVM, per table for the grid)
    rates = dict(b0=1e-6, f0=1e-6)
    grid = _fit(grid_rvm.regression, Phi[:, :, None], t, c0=1e8, d0=1e8, prune=False, tol=1e-300, max_sweeps=200,
                **rates)
    flat = _fit(rvm.regression, Phi, t, prune=False, tol=1e-300, max_sweeps=200, **rates)
    np.testing.assert_allclose(grid.state.w.mean, flat.state.w.mean, rtol=1e-3, atol=1e-7)
    np.testing.assert_allclose(grid.state.rates[0], flat.state.alpha_rate, rtol=1e-3)
    # the ELBOs differ by beta's own terms only: KL(q(beta) || p(beta)) is ~0 for a pinned beta
    assert grid.elbo == pytest.approx(flat.elbo, abs=0.05)


def test_sgrid_single_column_with_a_vanishing_beta_is_the_rvm():
    """s-grid, M2 = 1, beta pinned at 1e-8 (Gamma(1e8, 1e16)): the precision alpha_i + beta is
    alpha_i, the responsibilities go to alpha, and the fit is the RVM's."""
    r = np.random.default_rng(2)
    Phi = r.standard_normal((40, 6))
    t = Phi[:, 0] - 2 * Phi[:, 1] + 0.3 * r.standard_normal(40)
    rates = dict(b0=1e-6, f0=1e-6)  # the same explicit rates (the default ones differ: per column, per table)
    grid = _fit(grid_rvm.regression, Phi[:, :, None], t, kind="s", c0=1e8, d0=1e16, prune=False, tol=1e-300,
                max_sweeps=200, **rates)
    flat = _fit(rvm.regression, Phi, t, prune=False, tol=1e-300, max_sweeps=200, **rates)
    np.testing.assert_allclose(grid.state.w.mean, flat.state.w.mean, rtol=1e-5, atol=1e-8)
    assert grid.elbo == pytest.approx(flat.elbo, abs=0.05)


def test_bad_inputs_are_named():
    X, t = table_problem(0)
    with pytest.raises(ValueError, match="`X` must have shape \\(N, M1, M2"):
        _fit(grid_rvm.regression, X.reshape(50, -1), t)
    with pytest.raises(ValueError, match="`t` has 49 entries but `X` has 50 rows"):
        _fit(grid_rvm.regression, X, t[:-1])
    with pytest.raises(ValueError, match="labels 0 or 1"):
        _fit(grid_rvm.classification, X, np.sign(t))
    with pytest.raises(ValueError, match="`kind`"):
        _fit(grid_rvm.regression, X, t, kind="q")
    with pytest.raises(ValueError, match="axis_priors"):
        _fit(grid_rvm.regression, X[:, :, :, None], t)
    bad = X.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="`X`.*NaN"):
        _fit(grid_rvm.regression, bad, t)


def test_models_run_under_numpyro_predictive_with_flattened_sites():
    import jax
    from numpyro.infer import Predictive

    X, _ = table_problem(0, N=10)
    S = 400
    draws = Predictive(grid_rvm.regression, num_samples=S)(jax.random.PRNGKey(0), X, a0=2.0, b0=2.0, c0=2.0, d0=2.0,
                                                           e0=2.0, f0=1.0)
    assert draws["alpha"].shape == (S, 5) and draws["beta"].shape == (S, 3) and draws["w"].shape == (S, 15)
    assert draws["t"].shape == (S, 10)
    # the flattened sites fit together: t_n = vec(X_n)^T w + noise of precision gamma, and
    # w_kl | alpha, beta ~ N(0, 1 / (alpha_k beta_l)) (p-grid), so both standardise to N(0, 1)
    residual = (np.asarray(draws["t"]) - np.einsum("nf,sf->sn", X.reshape(10, -1), draws["w"]))
    z_noise = residual * np.sqrt(np.asarray(draws["gamma"]))[:, None]
    precision = np.asarray(draws["alpha"])[:, :, None] * np.asarray(draws["beta"])[:, None, :]
    z_w = np.asarray(draws["w"]).reshape(S, 5, 3) * np.sqrt(precision)
    for z in (z_noise, z_w):
        assert abs(np.mean(z)) < 0.1 and abs(np.var(z) - 1.0) < 0.12


def test_rbf_table_entries_by_brute_force():
    r = np.random.default_rng(0)
    X, C = r.standard_normal((4, 3)), r.standard_normal((5, 3))
    T = ppl_sbl.basis.rbf_table(X, C, delta=0.7)
    assert T.shape == (4, 5, 3)
    for n in range(4):
        for j in range(5):
            for i in range(3):
                assert T[n, j, i] == pytest.approx(np.exp(-0.7 * (X[n, i] - C[j, i]) ** 2))
    # the product over dimensions of the table is the ordinary RBF
    np.testing.assert_allclose(T.prod(axis=2), ppl_sbl.basis.rbf(X, C, delta=0.7))


def test_grid_relevance_plot_shows_each_axis_and_the_cell_image():
    import matplotlib

    matplotlib.use("Agg")
    X, t = table_problem(0)
    res = _fit(grid_rvm.regression, X, t, kind="s", max_sweeps=200)
    axes = ppl_sbl.plot_relevance(res)
    assert len(axes) == 3
    bars = [p.get_height() for p in axes[0].patches]
    np.testing.assert_allclose(bars, np.asarray(res.state.rates[0]) / np.asarray(res.state.shapes[0]))
    prior, _ = res.guide_spec.relevance(res.state, res.data)
    np.testing.assert_allclose(axes[2].images[0].get_array(), -np.log10(np.asarray(prior)).reshape(5, 3))
    with pytest.raises(ValueError, match="not a fitted grid model"):
        ppl_sbl.plot_grid_relevance(_fit(rvm.regression, X.reshape(50, -1), t, max_sweeps=20))


def test_cli_compares_grid_models_on_pixel_tables(tmp_path):
    from scripts import run_cli

    out = run_cli("compare", "--dataset", "digits", "--n-train", "40", "--max-sweeps", "200", "--gplvm-dims", "2", "3",
                  "--num-inducing", "6", "--gplvm-steps", "10", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    for name in ("rvm (ARD)", "ridge (shared precision)", "p-grid rvm", "s-grid rvm", "test error rate"):
        assert name in out.stdout
    # the same command then ranks the Bayesian GPLVMs on the ten classes
    assert "Bayesian GPLVMs on scikit-learn digits" in out.stdout
    for name in ("supervised, Q = 2", "supervised, Q = 3", "autoencoder, Q = 3", "unsupervised, Q = 3"):
        assert name in out.stdout
    bad = run_cli("compare", "--dataset", "digits", "--basis", "rbf-table", cwd=tmp_path)
    assert bad.returncode == 2 and "--basis" in bad.stderr
