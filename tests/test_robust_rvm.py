"""The robust RVM (Hwang & Jeong 2015): every check against an answer computed another way."""
import jax
import numpy as np
import numpyro
import pytest
from scipy.special import digamma, gammaln, log_expit

import ppl_sbl
from ppl_sbl.models import robust_rvm, rvm

from problems import random_classification, random_regression

LOG2PI = np.log(2 * np.pi)
R = 2.0 - np.log(2.0)


def _cavi(model, *args, **kw):
    opts = dict(progress_bar=False, schedule="sweep")  # the sweep unless a test names the schedule
    opts.update({k: kw.pop(k) for k in list(kw) if k in ("tol", "max_sweeps", "prune", "schedule")})
    return ppl_sbl.CAVI(model, **opts).run(*args, **kw)


def _gamma_kl_terms(a, b, a0, b0):
    """E_q[ln Gamma(x|a0,b0)] + H[Gamma(a,b)], summed: -KL(q || prior)."""
    e, elog = a / b, digamma(a) - np.log(b)
    logp = a0 * np.log(b0) - gammaln(a0) + (a0 - 1) * elog - b0 * e
    ent = a - np.log(b) + gammaln(a) + (1 - a) * digamma(a)
    return np.sum(logp + ent)


def numpy_robust_classification(Phi, t, sweeps, a=1e-5, b=1e-5, c=R, d=R):
    """The paper's sweep (10)-(16) and bound (17), written out with dense NumPy linear algebra."""
    N, M = Phi.shape
    lam = lambda x: np.tanh(x / 2) / (4 * x)
    # the start: q(omega) at its prior, xi = 1, E[alpha_k] = 2 E[omega] lambda(1) ||phi_k||^2 / N
    ct, dt, xi = np.full(N, c), np.full(N, d), np.ones(N)
    at = np.full(M, a + 0.5)
    bt = at / ((Phi**2).T @ (2 * ct / dt * lam(xi)) / N)
    s = 2 * t - 1
    out = []
    for _ in range(sweeps):
        Ew = ct / dt
        Sigma = np.linalg.inv(np.diag(at / bt) + 2 * (Phi.T * (Ew * lam(xi))) @ Phi)  # (10)
        mu = Sigma @ Phi.T @ (Ew * (t - 0.5))  # (11)
        Eb2 = mu**2 + np.diag(Sigma)
        at, bt = np.full(M, a + 0.5), b + 0.5 * Eb2  # (12), (13)
        m = Phi @ mu
        second = m**2 + np.einsum("nk,kl,nl->n", Phi, Sigma, Phi)
        e_log_h = log_expit(xi) + (t - 0.5) * m - xi / 2 - lam(xi) * (second - xi**2)  # (15), first line
        ct, dt = np.full(N, c), d - e_log_h  # (14), (15)
        xi = np.sqrt(second)  # (16)
        # (17) with the new xi
        e_log_h = log_expit(xi) + (s * m - xi) / 2 - lam(xi) * (second - xi**2)
        ea, ela = at / bt, digamma(at) - np.log(bt)
        elbo = (np.sum(ct / dt * e_log_h) + np.sum(0.5 * (ela - LOG2PI - ea * Eb2))
                + _gamma_kl_terms(at, bt, a, b) + _gamma_kl_terms(ct, dt, c, d)
                + 0.5 * M * (1 + LOG2PI) + 0.5 * np.linalg.slogdet(Sigma)[1])
        out.append(elbo)
    return dict(mu=mu, Sigma=Sigma, b=bt, d=dt, xi=xi, elbo=np.array(out))


def numpy_robust_regression(Phi, t, sweeps, a=1e-6, b=1e-6, c=2.0, d=2.0, e0=1e-6, f0=1e-6):
    """Robust regression sweeps: q(w), q(alpha), q(gamma), q(omega) (the Gamma factors in the order
    the model declares them), dense NumPy."""
    N, M = Phi.shape
    # the start: q(omega) at its prior, E[gamma] = 10 / var(t), E[alpha_k] = E[gamma] E[omega] ||phi_k||^2 / N
    ct, dt = np.full(N, c), np.full(N, d)
    g0 = 10.0 / np.var(t)
    e = e0 + N / 2
    f = e / g0
    at = np.full(M, a + 0.5)
    bt = at / ((Phi**2).T @ (g0 * ct / dt) / N)
    out = []
    for _ in range(sweeps):
        W = (e / f) * ct / dt
        Sigma = np.linalg.inv(np.diag(at / bt) + (Phi.T * W) @ Phi)
        mu = Sigma @ Phi.T @ (W * t)
        Eb2 = mu**2 + np.diag(Sigma)
        at, bt = np.full(M, a + 0.5), b + 0.5 * Eb2
        sq = (t - Phi @ mu) ** 2 + np.einsum("nk,kl,nl->n", Phi, Sigma, Phi)
        e, f = e0 + N / 2, f0 + 0.5 * np.sum(ct / dt * sq)
        ct, dt = np.full(N, c + 0.5), d + 0.5 * (e / f) * sq
        eg, elg = e / f, digamma(e) - np.log(f)
        eo, elo = ct / dt, digamma(ct) - np.log(dt)
        ea, ela = at / bt, digamma(at) - np.log(bt)
        elbo = (np.sum(0.5 * (elg + elo - LOG2PI) - 0.5 * eg * eo * sq)
                + np.sum(0.5 * (ela - LOG2PI - ea * Eb2))
                + _gamma_kl_terms(at, bt, a, b) + _gamma_kl_terms(ct, dt, c, d)
                + _gamma_kl_terms(np.array([e]), np.array([f]), e0, f0)
                + 0.5 * M * (1 + LOG2PI) + 0.5 * np.linalg.slogdet(Sigma)[1])
        out.append(elbo)
    return dict(mu=mu, Sigma=Sigma, d=dt, f=f, elbo=np.array(out))


def _flipped(seed, N=40, M=6, share=0.15):
    Phi, t = random_classification(seed, N=N, M=M)
    r = np.random.default_rng(100 + seed)
    flip = r.choice(N, int(share * N), replace=False)
    t = t.copy()
    t[flip] = 1 - t[flip]
    return Phi, t, flip


# ---------------------------------------------------------------------------------------------
# Updates and bound equal the independent transcription
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1])
def test_classification_sweeps_and_bound_equal_numpy_transcription(seed):
    Phi, t, _ = _flipped(seed)
    # the default rate on each column's scale, b0_k = a0 / mean_n phi_nk^2 (ppl_sbl.priors)
    ref = numpy_robust_classification(Phi, t, 12, b=1e-5 / np.mean(Phi**2, axis=0))
    res = _cavi(robust_rvm.classification, Phi, t, max_sweeps=12, tol=1e-300, prune=False)
    np.testing.assert_allclose(res.elbo_trace, ref["elbo"], rtol=1e-9)
    np.testing.assert_allclose(res.state.w.mean, ref["mu"], rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(res.state.omega_rate, ref["d"], rtol=1e-9)
    np.testing.assert_allclose(res.state.xi, ref["xi"], rtol=1e-9)


def test_woodbury_form_equals_the_dense_transcription():
    """N <= M/3 uses the factored q(w) (rank N); the sweeps must not change."""
    r = np.random.default_rng(3)
    Phi = r.standard_normal((8, 30))
    t = (r.uniform(size=8) < 0.5).astype(float)
    ref = numpy_robust_classification(Phi, t, 10)
    res = _cavi(robust_rvm.classification, Phi, t, max_sweeps=10, tol=1e-300, prune=False, b0=1e-5)
    assert res.state.w.base.shape[0] > 0  # the factored form is in use
    np.testing.assert_allclose(res.elbo_trace, ref["elbo"], rtol=1e-8)


@pytest.mark.parametrize("seed", [0, 1])
def test_regression_sweeps_and_elbo_equal_numpy_transcription(seed):
    Phi, t = random_regression(seed)
    t = t.copy()
    t[:3] += 8.0  # gross outliers
    # the default rates on the data's scale: b0_k = a0 var(t) / mean_n phi_nk^2, f0 = e0 var(t)
    ref = numpy_robust_regression(Phi, t, 12, b=1e-6 * np.var(t) / np.mean(Phi**2, axis=0), f0=1e-6 * np.var(t))
    res = _cavi(robust_rvm.regression, Phi, t, max_sweeps=12, tol=1e-300, prune=False)
    np.testing.assert_allclose(res.elbo_trace, ref["elbo"], rtol=1e-9)
    np.testing.assert_allclose(res.state.w.mean, ref["mu"], rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(res.state.omega_rate, ref["d"], rtol=1e-9)


# ---------------------------------------------------------------------------------------------
# Monotone sweeps, Monte Carlo checks, Proposition 2
# ---------------------------------------------------------------------------------------------
# the random problems' sizes (N, M): their data, hyperparameters and labels are random; two sizes,
# so that the problems share their compiled sweeps (one program per model and shape)
SHAPES = ((24, 5), (56, 11))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("model", ["classification", "regression"])
@pytest.mark.parametrize("prune", [False, True])
def test_elbo_never_decreases(seed, model, prune):
    r = np.random.default_rng(seed)
    N, M = SHAPES[seed % len(SHAPES)]
    if model == "classification":
        Phi, t, _ = _flipped(seed, N=N, M=M)
        hyper = dict(c=float(r.uniform(0.5, 4)), d=float(r.uniform(0.5, 4)))
    else:
        Phi, t = random_regression(seed, N=N, M=M)
        t = t + np.where(r.uniform(size=t.shape) < 0.1, 10 * r.standard_normal(t.shape), 0.0)
        hyper = dict(c=float(r.uniform(0.5, 4)), d=float(r.uniform(0.5, 4)))
    res = _cavi(getattr(robust_rvm, model), Phi, t, max_sweeps=400, prune=prune, **hyper)
    steps = np.diff(res.elbo_trace)
    assert steps.min() >= -1e-9 * np.abs(res.elbo_trace).max(), steps.min()


def test_check_guide_classification_bound_below_quadrature_equal():
    Phi, t, _ = _flipped(0)
    res = _cavi(robust_rvm.classification, Phi, t, a0=1.0, b0=1.0)
    check = ppl_sbl.check_guide(res, num_particles=4000)
    assert check.passed, check.message
    assert res.elbo < res.elbo_exact  # the JJ bound is strictly loose away from xi -> infinity


def test_check_guide_regression_equals_monte_carlo():
    Phi, t = random_regression(2)
    t = t.copy()
    t[:2] += 6.0
    res = _cavi(robust_rvm.regression, Phi, t, a0=1.0, b0=1.0, e0=2.0, f0=1.0)
    check = ppl_sbl.check_guide(res, num_particles=4000)
    assert check.passed, check.message


@pytest.mark.parametrize("seed", range(6))
def test_weights_stay_in_unit_interval_when_c_equals_d(seed):
    """Proposition 2: c = d keeps every E[omega_n] in [0, 1] ..."""
    r = np.random.default_rng(seed)
    N, M = SHAPES[seed % len(SHAPES)]
    Phi, t, _ = _flipped(seed, N=N, M=M, share=0.2)
    cd = float(r.uniform(0.05, 20))
    res = _cavi(robust_rvm.classification, Phi, t, c0=cd, d0=cd, max_sweeps=300)
    score = res.outlier_score
    assert np.all(score >= 0) and np.all(score <= 1), (score.min(), score.max())
    np.testing.assert_allclose(score, robust_rvm.outlier_score(res))


def test_weights_exceed_one_when_c_is_larger_than_d():
    """... and only then: with c > d the well-fitted points get E[omega_n] > 1."""
    Phi, t, _ = _flipped(0)
    res = _cavi(robust_rvm.classification, Phi, t, c0=3.0, d0=1.0, max_sweeps=300)
    assert res.outlier_score.max() > 1.0


def test_flipped_labels_get_the_smallest_weights():
    """Points far on the wrong side of a clear boundary are the ones down-weighted."""
    r = np.random.default_rng(5)
    N = 120
    X = r.standard_normal((N, 2))
    t = (X[:, 0] + X[:, 1] > 0).astype(float)
    far = np.argsort(-np.abs(X[:, 0] + X[:, 1]))[:6]  # the six points farthest from the boundary
    t[far] = 1 - t[far]
    Phi = ppl_sbl.basis.linear(X)
    res = _cavi(robust_rvm.classification, Phi, t)
    lowest = np.argsort(res.outlier_score)[:6]
    assert set(lowest) == set(far)


def test_large_equal_c_and_d_give_the_rvm():
    """omega_n ~ Gamma(c, c) concentrates at 1 as c grows: the sweeps become the RVM's. The
    difference shrinks like 1/c (E[omega_n] = c / (c - E ln h_n) = 1 - O(1/c), KL = O(1/c)),
    compared over the same 150 sweeps (a fixed count: the omega terms of the ELBO are sums of
    numbers of size c that cancel, so at large c a relative stopping rule would see rounding)."""
    Phi, t, _ = _flipped(1)
    opts = dict(a0=1e-5, b0=1e-5, max_sweeps=150, tol=1e-300, prune=False)
    plain = _cavi(rvm.classification, Phi, t, a0=1e-5, b0=1e-5, max_sweeps=150, tol=1e-300, prune=False)
    gaps = []
    for c in (1e4, 1e5, 1e6):
        robust = _cavi(robust_rvm.classification, Phi, t, c0=c, d0=c, **opts)
        np.testing.assert_allclose(robust.state.w.mean, plain.state.w.mean, rtol=300 / c, atol=1e-12)
        np.testing.assert_allclose(robust.outlier_score, 1.0, atol=30 / c)
        gaps.append(abs(robust.elbo - plain.elbo))
    assert gaps[2] < 1e-3
    assert gaps[1] < 0.2 * gaps[0] and gaps[2] < 0.2 * gaps[1], gaps


# ---------------------------------------------------------------------------------------------
# The NumPyro program: scale handler, Predictive, log-likelihood, NUTS
# ---------------------------------------------------------------------------------------------
def test_trace_shows_the_bernoulli_site_scaled_by_omega():
    Phi, t, _ = _flipped(0)
    hyper = dict(a0=1.0, b0=1.0)  # proper priors: with a = 1e-5 prior draws of alpha underflow to 0
    tr = numpyro.handlers.trace(numpyro.handlers.seed(robust_rvm.classification, 0)).get_trace(Phi, t, **hyper)
    assert tr["t"]["fn"].__class__.__name__.startswith("Bernoulli")
    np.testing.assert_allclose(np.asarray(tr["t"]["scale"]), np.asarray(tr["omega"]["value"]))
    # Trace_ELBO sees omega_n ln p(t_n | w): the scaled log density of the site
    lp = numpyro.infer.util.log_density(robust_rvm.classification, (Phi, t), hyper, {
        "alpha": tr["alpha"]["value"], "w": tr["w"]["value"], "omega": tr["omega"]["value"]})[0]
    unscaled = numpyro.infer.util.log_density(rvm.classification, (Phi, t), {"a0": 1.0, "b0": 1.0}, {
        "alpha": tr["alpha"]["value"], "w": tr["w"]["value"]})[0]
    logits = Phi @ np.asarray(tr["w"]["value"])
    bern = t * log_expit(logits) + (1 - t) * log_expit(-logits)
    omega = np.asarray(tr["omega"]["value"])
    prior_omega = np.sum(R * np.log(R) - gammaln(R) + (R - 1) * np.log(omega) - R * omega)
    assert float(lp) == pytest.approx(float(unscaled) - bern.sum() + (omega * bern).sum() + prior_omega, rel=1e-9)


def test_predictive_draws_unweighted_labels_and_loo_uses_unweighted_likelihood():
    Phi, t, _ = _flipped(0)
    res = _cavi(robust_rvm.classification, Phi, t)
    draws = numpyro.infer.Predictive(robust_rvm.classification, posterior_samples=res.sample(0, 200))(
        jax.random.PRNGKey(1), Phi)
    assert set(np.unique(np.asarray(draws["t"]))) <= {0, 1}
    idata = res.to_inference_data(num_samples=100)
    w = idata.posterior["w"].values[0]
    logits = w @ Phi.T
    expect = t * log_expit(logits) + (1 - t) * log_expit(-logits)
    np.testing.assert_allclose(idata.log_likelihood["t"].values[0], expect, rtol=1e-9, atol=1e-12)


def test_predictions_agree_with_nuts_on_a_small_problem():
    """Informative precision prior, 3 coefficients, 80 points with 8 flipped labels: the mean-field
    predictive probabilities stay within 0.05 of NUTS's on a grid of inputs."""
    from numpyro.infer import MCMC, NUTS

    r = np.random.default_rng(7)
    N = 80
    X = r.standard_normal((N, 2))
    t = (X @ np.array([1.5, -1.0]) + 0.3 > r.logistic(size=N) * 0.3).astype(float)
    t[:8] = 1 - t[:8]
    Phi = ppl_sbl.basis.linear(X)
    hyper = dict(a=2.0, b=2.0)
    res = _cavi(robust_rvm.classification, Phi, t, **hyper)
    mcmc = MCMC(NUTS(robust_rvm.classification), num_warmup=500, num_samples=1500, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), Phi, t, **hyper)
    w = np.asarray(mcmc.get_samples()["w"])
    grid = ppl_sbl.basis.linear(r.standard_normal((50, 2)))
    p_nuts = (1.0 / (1.0 + np.exp(-grid @ w.T))).mean(1)
    np.testing.assert_allclose(res.predict(grid), p_nuts, atol=0.05)


# ---------------------------------------------------------------------------------------------
# Robust regression on sinc with gross outliers; width selection; bad inputs
# ---------------------------------------------------------------------------------------------
def test_robust_regression_resists_gross_outliers_on_sinc():
    d = ppl_sbl.datasets.sinc(100, 300, seed=0)
    t = d.t_train.copy()
    bad = np.random.default_rng(0).choice(100, 10, replace=False)
    t[bad] += np.random.default_rng(1).choice([-1, 1], 10) * 2.0
    Phi = ppl_sbl.basis.rbf(d.X_train, delta=5.55, bias=True)
    Pt = ppl_sbl.basis.rbf(d.X_test, d.X_train, delta=5.55, bias=True)
    robust = _cavi(robust_rvm.regression, Phi, t)
    plain = _cavi(rvm.regression, Phi, t)
    rmse = lambda res: np.sqrt(np.mean((res.predict(Pt)[0] - d.t_test) ** 2))
    assert rmse(robust) < 0.5 * rmse(plain), (rmse(robust), rmse(plain))
    assert set(np.argsort(robust.outlier_score)[:10]) == set(bad)


@pytest.fixture(scope="module")
def width_problem():
    """Ripley's 20 + 20 training points, RBF designs at three widths, and each design's own CAVI
    run (the reference of every batching below)."""
    d = ppl_sbl.datasets.ripley()
    rows = np.r_[0:20, 125:145]  # the training set is sorted by class: 20 points of each
    X, t = d.X_train[rows], d.t_train[rows]
    widths = [0.5, 2.0, 8.0]
    designs = [ppl_sbl.basis.rbf(X, delta=w, bias=True) for w in widths]
    cavi = ppl_sbl.CAVI(robust_rvm.classification, tol=1e-8, max_sweeps=3000, prune=False, progress_bar=False,
                        schedule="sweep")
    return widths, designs, t, [cavi.run(Phi, t) for Phi in designs]


@pytest.mark.parametrize("batch_size", [None, 2, 3])
def test_fit_grid_equals_one_by_one_fits(width_problem, batch_size):
    """Whatever the batching (one at a time, a vmapped batch of 2 plus a remainder, all three
    vmapped), every fit equals its own CAVI run sweep for sweep."""
    widths, designs, t, ones = width_problem
    grid = ppl_sbl.fit_grid(robust_rvm.classification, designs, t, names=widths, tol=1e-8, max_sweeps=3000,
                            batch_size=batch_size)
    assert list(grid) == widths
    for w, one in zip(widths, ones):
        g = grid[w]
        assert g.num_sweeps == one.num_sweeps
        np.testing.assert_allclose(g.elbo_trace, one.elbo_trace, rtol=1e-9)
    table = ppl_sbl.compare(grid)
    assert table.index[0] == max(grid, key=lambda k: grid[k].elbo)


def test_bad_inputs_are_named():
    Phi, t, _ = _flipped(0)
    with pytest.raises(ValueError, match="`t` must hold labels 0 or 1"):
        _cavi(robust_rvm.classification, Phi, 2 * t - 1)
    with pytest.raises(ValueError, match="`c0`"):
        _cavi(robust_rvm.classification, Phi, t, c0=0.0)
    bad = Phi.copy()
    bad[0, 1] = np.nan
    with pytest.raises(ValueError, match="Phi"):
        _cavi(robust_rvm.classification, bad, t)
    with pytest.raises(ValueError, match="`t`"):
        _cavi(robust_rvm.regression, Phi, t[:-1])
    with pytest.raises(ValueError, match="`t` is required"):
        _cavi(robust_rvm.regression, Phi)


def test_weighted_loss_is_bounded_by_r_and_steepest_at_the_boundary():
    """Proposition 1 (bounded by r) and the choice r = 2 - ln 2: the slope of the weighted loss
    is largest in magnitude at u = 0, checked by finite differences."""
    u = np.linspace(-40, 40, 8001)
    g = robust_rvm.weighted_loss(u)
    assert g.max() <= R and g.max() > R * 0.95
    slope = np.gradient(g, u)
    assert abs(u[np.argmax(-slope)]) < 0.02
    other = robust_rvm.weighted_loss(u, r=1.0)
    assert abs(u[np.argmax(-np.gradient(other, u))]) > 0.1


# ---------------------------------------------------------------------------------------------
# Data and command line
# ---------------------------------------------------------------------------------------------
def test_biopsy_is_the_original_683_row_wisconsin_set():
    X, t = ppl_sbl.datasets.biopsy_data()
    assert X.shape == (683, 9)
    assert int(t.sum()) == 239 and int((t == 0).sum()) == 444  # malignant / benign after removing 16 rows
    assert X.min() == 1 and X.max() == 10 and np.all(X == np.round(X))


@pytest.mark.parametrize("share", [0.0, 0.05, 0.1])
def test_split_flips_exactly_the_stated_share_of_training_labels(share):
    X, t = ppl_sbl.datasets.ripley_pooled()
    assert X.shape == (1250, 2)
    d = ppl_sbl.datasets.split_with_label_noise(X, t, label_noise=share, normalize=False, seed=3)
    assert len(d.t_train) == 750 and len(d.t_test) == 500
    # recover the clean training labels by matching the rows back to the pooled set
    rows = {tuple(x): y for x, y in zip(X, t)}
    clean = np.array([rows[tuple(x)] for x in d.X_train])
    assert int(np.sum(clean != d.t_train)) == round(share * 750)
    assert all(rows[tuple(x)] == y for x, y in zip(d.X_test, d.t_test))  # test labels stay clean


def test_cli_ranks_rvm_and_robust_rvm_with_label_noise(tmp_path):
    from scripts import run_cli

    # --widths 4: the width table at the default width alone, the fit already made (the table of
    # several widths: test_inputs_and_api)
    out = run_cli("compare", "--dataset", "ripley", "--label-noise", "0.1", "--max-sweeps", "300", "--widths", "4",
                  cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    for text in ("rvm (ARD)", "robust rvm", "25 training labels flipped", "test error rate"):
        assert text in out.stdout
    bad = run_cli("compare", "--dataset", "sinc", "--label-noise", "0.1", cwd=tmp_path)
    assert bad.returncode == 2 and "--label-noise" in bad.stderr
