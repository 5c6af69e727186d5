"""The sparse GP module against independent answers: the exact GP, Monte Carlo, scikit-learn's
GaussianProcessRegressor and finite differences."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_sbl import sparse_gp as sg

PARAMS = {
    "rbf": {"variance": 1.3, "alpha": 0.7},
    "rbf_ard": {"variance": 0.8, "alpha": np.array([0.5, 2.0])},
    "linear": {"variance": np.array([0.6, 1.5])},
    "matern32": {"variance": 1.1, "lengthscale": 1.4},
}


def data(n=12, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    Y = np.stack([np.sin(X[:, 0]) + 0.1 * rng.normal(size=n), X[:, 1] ** 2 + 0.1 * rng.normal(size=n)], 1)
    return jnp.asarray(X), jnp.asarray(Y)


def params(name):
    return {k: jnp.asarray(v, dtype=jnp.float64) for k, v in PARAMS[name].items()}


def bound_at(name, X, Y, Z, beta, jitter=sg.JITTER):
    p = params(name)
    stats = sg.fixed_input_statistics(name, p, X, Z)
    return sg.collapsed_bound(Y, stats, sg.kernel(name, p, Z), beta, jitter)


@pytest.mark.parametrize("name", ["rbf", "rbf_ard", "matern32", "linear"])
def test_bound_is_exact_with_inducing_inputs_at_the_data_and_below_otherwise(name):
    # the linear kernel has rank 2 on 2-d inputs: compare it where K_NN is full rank (N = 2 points
    # would be trivial, so use the Nystrom-exact case: any Z spanning the inputs' span)
    X, Y = data()
    beta = 4.0
    exact = float(sg.exact_log_marginal(name, params(name), X, Y, beta))
    Z = X[:2] if name == "linear" else X
    at_data = float(bound_at(name, X, Y, Z, beta, jitter=1e-11))
    assert at_data == pytest.approx(exact, rel=1e-7, abs=1e-7)
    if name != "linear":
        for seed in range(3):
            Z = jnp.asarray(np.random.default_rng(seed).normal(size=(4, 2)))
            assert float(bound_at(name, X, Y, Z, beta)) < exact


@pytest.mark.parametrize("name", ["rbf_ard", "linear"])
def test_psi_statistics_against_monte_carlo(name):
    rng = np.random.default_rng(3)
    N, Q, M = 5, 2, 3
    mu, S = rng.normal(size=(N, Q)), rng.uniform(0.1, 0.8, size=(N, Q))
    Z = rng.normal(size=(M, Q))
    p = params(name)
    exact = sg.psi_statistics(name, p, jnp.asarray(mu), jnp.asarray(S), jnp.asarray(Z))
    T = 40000
    x = mu[None] + np.sqrt(S)[None] * rng.normal(size=(T, N, Q))
    Kxz = jax.vmap(lambda xs: sg.kernel(name, p, xs, jnp.asarray(Z)))(jnp.asarray(x))  # (T, N, M)
    Kxx = jax.vmap(lambda xs: sg.kernel_diag(name, p, xs))(jnp.asarray(x))  # (T, N)
    draws = {
        "psi0": np.asarray(Kxx.sum(1)),
        "Psi1": np.asarray(Kxz),
        "Psi2": np.asarray(jnp.einsum("tnm,tnk->tmk", Kxz, Kxz)),
    }
    for key, d in draws.items():
        mean, se = d.mean(0), d.std(0) / math.sqrt(T)
        np.testing.assert_array_less(np.abs(mean - np.asarray(getattr(exact, key))), 5 * se + 1e-12)


def test_rbf_ard_psi_statistics_against_gauss_hermite_quadrature():
    """To rounding: the RBF-ARD kernel factorises over latent dimensions and q(x_n) is diagonal, so
    each expectation is a product over q of one-dimensional Gaussian integrals, done here by
    Gauss-Hermite quadrature (160 nodes: converged to ~1e-15 at these widths). Several inducing
    inputs (every pair m <= m' of Psi2 and its mirror), variances from 1e-10 to 3."""
    rng = np.random.default_rng(11)
    N, Q, M = 6, 3, 7
    mu, Z = rng.normal(size=(N, Q)), rng.normal(size=(M, Q))
    S = np.exp(rng.uniform(np.log(1e-10), np.log(3.0), size=(N, Q)))
    p = {"variance": jnp.asarray(1.7), "alpha": jnp.asarray([0.4, 1.3, 2.5])}
    a, s2 = np.asarray(p["alpha"]), 1.7
    t, wts = np.polynomial.hermite_e.hermegauss(160)
    wts = wts / wts.sum()
    x = mu[:, :, None] + np.sqrt(S)[:, :, None] * t  # (N, Q, T) nodes of x_nq
    k = np.exp(-0.5 * a[None, None, :, None] * (x[:, None] - Z[None, :, :, None]) ** 2)  # (N, M, Q, T)
    Psi1 = s2 * np.prod(np.sum(k * wts, -1), -1)
    Psi2 = s2**2 * np.einsum("nmqt,nkqt,t->nmkq", k, k, wts).prod(-1).sum(0)
    exact = sg.psi_statistics("rbf_ard", p, jnp.asarray(mu), jnp.asarray(S), jnp.asarray(Z))
    np.testing.assert_allclose(np.asarray(exact.Psi1), Psi1, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(np.asarray(exact.Psi2), Psi2, rtol=1e-12)
    assert float(exact.psi0) == pytest.approx(N * s2, rel=1e-15)


@pytest.mark.parametrize("name", ["rbf", "matern32"])
def test_predictions_equal_scikit_learns_gp_with_inducing_inputs_at_the_data(name):
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern

    X, Y = data(15)
    p = params(name)
    noise = 0.05
    if name == "rbf":
        k = ConstantKernel(PARAMS[name]["variance"], "fixed") * RBF(1 / math.sqrt(PARAMS[name]["alpha"]), "fixed")
    else:
        k = ConstantKernel(PARAMS[name]["variance"], "fixed") * Matern(PARAMS[name]["lengthscale"], "fixed", nu=1.5)
    gp = GaussianProcessRegressor(k, alpha=noise, optimizer=None).fit(np.asarray(X), np.asarray(Y[:, 0]))
    Xs = np.random.default_rng(5).normal(size=(7, 2))
    m_ref, s_ref = gp.predict(Xs, return_std=True)
    stats = sg.fixed_input_statistics(name, p, X, X)
    mean, var = sg.predict_f(name, p, X, stats, Y[:, :1], 1 / noise, jnp.asarray(Xs), jitter=1e-11)
    np.testing.assert_allclose(np.asarray(mean[:, 0]), m_ref, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(var), s_ref**2, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["rbf", "rbf_ard", "matern32", "linear"])
def test_gradients_are_finite_and_match_finite_differences(name):
    X, Y = data()
    Z0 = X[:5]  # the Matern kernel at zero distance (inducing inputs on data points)

    def f(logp, Z, lognoise):
        p = jax.tree_util.tree_map(jnp.exp, logp)
        stats = sg.fixed_input_statistics(name, p, X, Z)
        return sg.collapsed_bound(Y, stats, sg.kernel(name, p, Z), jnp.exp(-lognoise))

    logp = jax.tree_util.tree_map(jnp.log, params(name))
    args = (logp, Z0, jnp.asarray(math.log(0.3)))
    grads = jax.grad(f, argnums=(0, 1, 2))(*args)
    flat, unravel = jax.flatten_util.ravel_pytree(args)
    g = np.asarray(jax.flatten_util.ravel_pytree(grads)[0])
    assert np.all(np.isfinite(g))
    rng = np.random.default_rng(0)
    for _ in range(4):
        d = rng.normal(size=flat.shape)
        h = 1e-5
        fd = (f(*unravel(flat + h * d)) - f(*unravel(flat - h * d))) / (2 * h)
        assert float(fd) == pytest.approx(float(g @ d), rel=1e-5, abs=1e-6)


def test_jitter_makes_a_rank_deficient_linear_kernel_work():
    """64 features, 100 points: K_MM of the linear kernel with 100 inducing inputs has rank 64."""
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.normal(size=(100, 64)))
    Y = jnp.asarray(rng.normal(size=(100, 2)))
    p = {"variance": jnp.asarray(1.0 / 64)}
    Kmm = sg.kernel("linear", p, X)
    assert np.linalg.matrix_rank(np.asarray(Kmm)) == 64
    with pytest.raises(Exception):
        np.linalg.cholesky(np.asarray(Kmm))
    stats = sg.fixed_input_statistics("linear", p, X, X)
    value, grad = jax.value_and_grad(lambda v: sg.collapsed_bound(Y, stats, sg.kernel("linear", {"variance": v}, X), 2.0))(
        p["variance"])
    assert np.isfinite(float(value)) and np.isfinite(float(grad))
    # the bound is the exact GP's, whose covariance needs no inverse of K_NN (Nystrom exact)
    exact = float(sg.exact_log_marginal("linear", p, X, Y, 2.0))
    assert float(value) == pytest.approx(exact, rel=1e-5)


def test_fit_raises_the_bound_and_predicts():
    rng = np.random.default_rng(2)
    X = rng.uniform(-3, 3, size=(60, 1))
    y = np.sinc(X[:, 0]) + 0.05 * rng.normal(size=60)
    res = sg.fit(X, y, kernel="rbf", num_inducing=10, max_steps=300)
    assert res.info["trace"][-1] >= res.info["trace"][0]
    mean, var = res.predict(np.array([[0.0], [1.0]]))
    np.testing.assert_allclose(mean[:, 0], np.sinc([0.0, 1.0]), atol=0.1)
    assert np.all(var > 0)
    assert res.noise_var == pytest.approx(0.05**2, rel=0.6)
    with pytest.raises(ValueError, match="`Y` has 59 rows"):
        sg.fit(X, y[:-1])
    with pytest.raises(ValueError, match="`kernel` must be one of"):
        sg.kernel("cosine", {}, X)
