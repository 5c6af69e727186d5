"""The multinomial probit RVM (rvm.multiclass): every check against an answer computed another way
(adaptive quadrature and closed forms for the one-dimensional integrals, Monte Carlo for the cone
moments and the sampler, NumPyro's Trace_ELBO for the analytic ELBO, NUTS for the predictive
probabilities, independent single-output fits for the schedule with several outputs)."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from scipy import integrate, special, stats

import ppl_sbl
from ppl_sbl import fast_ard
from ppl_sbl import probit as P
from ppl_sbl.models import rvm


def clusters(seed, N=40, spread=1.0, C=3):
    """C Gaussian clusters in the plane (overlapping for spread ~1), design [1, x1, x2]."""
    r = np.random.default_rng(seed)
    angles = 2 * np.pi * np.arange(C) / C
    centres = 1.3 * np.column_stack([np.cos(angles), np.sin(angles)])
    t = np.concatenate([np.arange(C), r.integers(0, C, N - C)])  # every class present
    X = centres[t] + spread * r.standard_normal((N, 2))
    return np.column_stack([np.ones(N), X]), t


def inputs(seed, n=40):
    """n new rows of the same design, uniform on [-3, 3]^2."""
    return np.column_stack([np.ones(n), np.random.default_rng(seed).uniform(-3, 3, (n, 2))])


def _cavi(**kw):
    # the sweep unless a test names the schedule (CAVI's default, "auto", runs the fast one)
    return ppl_sbl.CAVI(rvm.multiclass, progress_bar=False, **{"schedule": "sweep", **kw})


# ---------------------------------------------------------------------------------------------
# The one-dimensional integrals against adaptive quadrature, closed forms and Monte Carlo
# ---------------------------------------------------------------------------------------------
def _npdf(x):
    return np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)


def _quad_cone(m, i):
    """ln Z, E[y] and E||y - m||^2 of N(m, I) on the cone of class i by scipy's adaptive quadrature
    of Girolami & Rogers's integrals (Z = E_u prod_j Phi(u + d_j), E[y_j] = m_j - E_u[N(u + d_j)
    prod_{k != j} Phi(u + d_k)] / Z) and of E[u^2] and E[v_j^2] written out directly."""
    others = [j for j in range(len(m)) if j != i]
    d = m[i] - m
    grid = np.linspace(-40, 60, 20001)
    log_f = -0.5 * grid**2 + sum(special.log_ndtr(grid + d[j]) for j in others)
    centre = grid[np.argmax(log_f)]
    log_scale = log_f.max()

    def log_prod_phi(u, skip=None):
        return sum(special.log_ndtr(u + d[k]) for k in others if k != skip)

    def integral(fn):  # int N(u) fn(u) du, fn returning a log factor and a plain one
        def f(u):
            log_part, part = fn(u)
            return np.exp(-0.5 * u * u - log_scale + log_part) * part
        return integrate.quad(f, centre - 14, centre + 14, points=[centre], epsabs=0, epsrel=1e-12,
                              limit=400)[0] * np.exp(log_scale) / np.sqrt(2 * np.pi)

    Z = integral(lambda u: (log_prod_phi(u), 1.0))
    mean = np.array(m, dtype=float)
    for j in others:
        mean[j] = m[j] - integral(lambda u: (log_prod_phi(u, j), _npdf(u + d[j]))) / Z
    mean[i] = m[i] - np.sum(mean[others] - m[others])
    # E[v_j^2] = E_u[Phi(b) (1 - b lambda(b)) prod_{k != j} Phi] / Z with b = u + d_j; E[u^2] likewise
    second = integral(lambda u: (log_prod_phi(u), u * u)) / Z
    for j in others:
        second += integral(lambda u: (log_prod_phi(u, j), special.ndtr(u + d[j]) - (u + d[j]) * _npdf(u + d[j]))) / Z
    return np.log(Z) if Z > 0 else -np.inf, mean, second


CONES = [
    (np.array([0.0, 5.0, -3.0, 1.0]), 0),  # a point on the wrong side of a boundary
    (np.array([2.0, -1.0, 0.5, 0.0, 1.5, -2.0, 0.3, 0.9, -0.4, 1.1]), 3),
    (np.array([0.0, 25.0, 24.0]), 0),  # Z ~ 1e-180: the log-space quadrature
    (np.array([6.0, -6.0, -5.0, -7.0, -5.5]), 0),  # Z ~ 1: every factor flat at the mode
]


@pytest.mark.parametrize("m,i", CONES)
def test_cone_moments_equal_adaptive_quadrature(m, i):
    log_z, mean, square, cov = (np.asarray(v) for v in P.cone_moments(m, i, square=True, covariance=True))
    ref_log_z, ref_mean, ref_square = _quad_cone(m, i)
    assert log_z == pytest.approx(ref_log_z, rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-9, atol=1e-10)
    assert square == pytest.approx(ref_square, rel=1e-8)
    # E||y - m||^2 = tr Cov + ||E[y] - m||^2, and the covariance is symmetric positive definite below I
    assert square == pytest.approx(np.trace(cov) + np.sum((mean - m) ** 2), rel=1e-10)
    eig = np.linalg.eigvalsh(cov)
    assert np.all(eig > 0) and np.all(eig < 1 + 1e-12)


def test_gradient_of_the_log_normaliser_is_the_mean_shift():
    """d ln Z / dm = E[y] - m (the score of the truncated Gaussian), by autodiff through the
    quadrature (the mode is held, as it must be: the integral does not depend on it), so the
    normaliser can serve a marginalised model under NUTS; finite everywhere, deep tails included."""
    r = np.random.default_rng(9)
    loc = np.concatenate([3.0 * r.standard_normal((6, 4)), [CONES[0][0]], [[0.0, 40.0, 39.0, -3.0]]])
    label = np.concatenate([r.integers(0, 4, 6), [0, 0]])
    grad = np.asarray(jax.jit(jax.grad(lambda m: jnp.sum(P.cone_log_normaliser(m, label))))(jnp.asarray(loc)))
    _, mean = P.compiled_cone_moments(loc, label)
    np.testing.assert_allclose(grad, np.asarray(mean) - loc, rtol=1e-9, atol=1e-11)
    x = jnp.array([-100.0, -37.5, -20.0, 0.0, 9.0, 40.0])
    assert np.all(np.isfinite(np.asarray(jax.vmap(jax.grad(P.log_ndtr))(x))))


@pytest.mark.parametrize("d", [-200.0, -40.0, -3.0, 0.0, 2.5, 30.0])
def test_two_classes_reduce_to_the_binary_probit(d):
    """C = 2: y_1 - y_0 ~ N(d, 2), so Z = Phi(d / sqrt 2), and only the difference is truncated:
    E[y_1] - m_1 = m_0 - E[y_0] = lambda(d / sqrt 2) / sqrt 2 (the binary probit's augmentation)."""
    r = d / np.sqrt(2.0)
    lam = np.exp(stats.norm.logpdf(r) - special.log_ndtr(r))
    log_z, mean = (np.asarray(v) for v in P.cone_moments(np.array([0.0, d]), 1))
    assert log_z == pytest.approx(special.log_ndtr(r), rel=1e-13, abs=1e-15)
    np.testing.assert_allclose(mean, [-lam / np.sqrt(2.0), d + lam / np.sqrt(2.0)], rtol=1e-11, atol=1e-15)


def test_cone_moments_and_sampler_against_monte_carlo():
    """Brute force: draws of N(m, I) kept when they fall in the cone (rejection, plain NumPy) give
    the acceptance rate Z and E[y]; the exact sampler's draws give the same mean and covariance,
    all inside the cone, and log_prob is the cone-restricted density."""
    r = np.random.default_rng(1)
    loc = np.array([[0.3, -0.2, 1.0], [0.0, 1.5, -1.0], [0.5, 0.5, 0.5]])
    label = np.array([0, 0, 2])
    log_z, mean, cov = (np.asarray(v) for v in P.cone_moments(loc, label, covariance=True))
    draws = P.ConeTruncatedNormal(jnp.asarray(loc), jnp.asarray(label)).sample(jax.random.PRNGKey(0), (20000,))
    draws = np.asarray(draws)
    n = 100000
    for k in range(3):
        y = loc[k] + r.standard_normal((n, 3))
        inside = np.argmax(y, axis=1) == label[k]
        z = inside.mean()
        assert z == pytest.approx(np.exp(log_z[k]), abs=4 * np.sqrt(z * (1 - z) / n))
        kept = y[inside]
        np.testing.assert_allclose(mean[k], kept.mean(0), atol=4 * kept.std(0).max() / np.sqrt(len(kept)))
        # the sampler
        assert np.all(np.argmax(draws[:, k], axis=1) == label[k])
        se = draws[:, k].std(0) / np.sqrt(len(draws))
        np.testing.assert_allclose(draws[:, k].mean(0), mean[k], atol=4 * se.max())
        np.testing.assert_allclose(np.cov(draws[:, k].T), cov[k], atol=0.04)
    # log_prob: ln N(y | m, I) - ln Z inside the cone, -inf outside
    lp = np.asarray(P.ConeTruncatedNormal(loc[0], 0).log_prob(jnp.asarray(draws[:5, 0])))
    want = stats.multivariate_normal(loc[0], np.eye(3)).logpdf(draws[:5, 0]) - log_z[0]
    np.testing.assert_allclose(lp, want, rtol=1e-12)
    assert P.ConeTruncatedNormal(loc[0], 0).log_prob(jnp.array([0.0, 1.0, 0.0])) == -np.inf


def test_truncated_normal_sampler_deep_in_the_lower_tail():
    """v ~ N(0, 1) given v <= b for b from -60 to 3: E[v] = -lambda(b) and Var[v] = 1 - b lambda(b)
    - lambda(b)^2 (closed forms), every draw below b."""
    bounds = np.array([-60.0, -30.0, -8.0, -1.0, 0.0, 3.0])
    draws = np.asarray(P.sample_normal_below(jax.random.PRNGKey(2), jnp.broadcast_to(bounds, (50000, 6))))
    lam = np.exp(stats.norm.logpdf(bounds) - special.log_ndtr(bounds))
    var = 1 - bounds * lam - lam**2
    assert np.all(draws <= bounds)
    assert np.all(np.abs(draws.mean(0) + lam) <= 4 * np.sqrt(var / 50000))
    np.testing.assert_allclose(draws.var(0), var, rtol=0.04)


def test_predictive_probabilities_sum_to_one_and_equal_quadrature():
    r = np.random.default_rng(3)
    mean = 3.0 * r.standard_normal((400, 6))
    scale = np.sqrt(1.0 + 3.0 * r.exponential(size=(400, 6)))
    p = np.asarray(P.class_probabilities(mean, scale))
    assert np.all(p >= 0)
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-13)  # no renormalisation inside
    # C = 2: P(y_1 > y_0) = Phi((m_1 - m_0) / sqrt(s_0^2 + s_1^2))
    p2 = np.asarray(P.class_probabilities(mean[:, :2], scale[:, :2]))
    want = special.ndtr((mean[:, 1] - mean[:, 0]) / np.sqrt(scale[:, 0] ** 2 + scale[:, 1] ** 2))
    np.testing.assert_allclose(p2[:, 1], want, rtol=1e-11, atol=1e-15)
    # one row against adaptive quadrature of P(t = i) = int N(y; m_i, s_i^2) prod_j Phi((y - m_j) / s_j)
    m, s = mean[0], scale[0]
    for i in range(6):
        ref = integrate.quad(lambda y: stats.norm.pdf(y, m[i], s[i]) * np.prod(
            [stats.norm.cdf((y - m[j]) / s[j]) for j in range(6) if j != i]), -80, 80, points=list(m), limit=400,
            epsabs=0, epsrel=1e-12)[0]
        assert p[0, i] == pytest.approx(ref, rel=1e-9, abs=1e-14)


# ---------------------------------------------------------------------------------------------
# The analytic ELBO against NumPyro's Monte Carlo Trace_ELBO, on the same model and guide
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_fits():
    Phi, t = clusters(0)
    # num_classes given: the results' Monte Carlo ELBO then runs in one program whose inputs are the
    # state and the data (with C read from the labels it cannot trace them, and compiles the values
    # of each call into a program of its own)
    sweep = _cavi().run(Phi, t, num_classes=3)
    fast = _cavi(schedule="fast").run(Phi, t, num_classes=3)
    return dict(Phi=Phi, t=t, sweep=sweep, fast=fast)


@pytest.fixture(scope="module")
def two_class_fit(small_fits):
    """The sweep on the fixture's design with the labels t % 2 (C = 2 read from the labels)."""
    return _cavi().run(small_fits["Phi"], small_fits["t"] % 2)


def test_elbo_equals_monte_carlo_at_a_non_optimal_state(small_fits):
    """Three sweeps from the start, then q(y)'s location moved off E[W]^T phi and q(alpha) off its
    update: the general expression of the ELBO (m~ != m) against Trace_ELBO."""
    Phi, t = small_fits["Phi"], small_fits["t"]
    from ppl_sbl import engine

    g = rvm.MULTICLASS_GUIDE
    data = engine.strong(g.prepare(Phi, t))
    state = engine.strong(g.init(data))
    sweep = engine.compiled_step(g)  # the sweep the fixture's fits compiled
    for _ in range(3):
        state, _ = sweep(state, data)
    r = np.random.default_rng(4)
    state = state._replace(y_loc=state.y_loc + 0.7 * r.standard_normal(state.y_loc.shape),
                           alpha_rate=state.alpha_rate * np.exp(0.5 * r.standard_normal(state.alpha_rate.shape)))
    # Trace_ELBO of the model and g.guide(state) (the values of diagnostics.monte_carlo_elbo) in the
    # fitted result's program, whose inputs are the state and the data
    at_state = dataclasses.replace(small_fits["sweep"], state=state)
    assert at_state.model is rvm.multiclass and at_state.guide_spec is g
    values = np.asarray(at_state.monte_carlo_elbo(num_particles=2000, seed=1))
    se = values.std(ddof=1) / np.sqrt(len(values))
    elbo = float(jax.jit(g.elbo)(state, data))
    assert abs(elbo - values.mean()) <= 4 * se, (elbo, values.mean(), se)


@pytest.mark.parametrize("which", ["sweep", "fast"])
def test_elbo_equals_monte_carlo_at_the_fitted_state(small_fits, which):
    res = small_fits[which]
    check = ppl_sbl.check_guide(res, num_particles=2000)
    assert check.passed, check.message


# ---------------------------------------------------------------------------------------------
# The ELBO never decreases; the fast fit's ELBO is exact for its restricted family
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed,prior", [(0, 1e-6), (1, 1e-2), (2, 1.0), (3, 1e-6)])
def test_elbo_never_decreases_over_sweeps(seed, prior):
    Phi, t = clusters(seed, spread=[1.0, 0.6, 1.5, 0.3][seed])
    res = _cavi(max_sweeps=150, tol=1e-300).run(Phi, t, a0=prior, b0=prior)
    steps = np.diff(res.elbo_trace)
    assert np.all(steps >= -1e-10 * np.abs(res.elbo_trace[1:])), steps.min()
    assert res.elbo_trace[-1] > res.elbo_trace[0] + 1.0


@pytest.mark.parametrize("seed,prior", [(0, 1e-6), (1, 1e-2), (3, 1e-6)])
def test_fast_fit_never_decreases_and_its_elbo_is_the_guides(seed, prior):
    r = np.random.default_rng(seed)
    Phi, t = clusters(seed, spread=[1.0, 0.6, 1.5, 0.3][seed])
    Phi = np.column_stack([Phi, r.standard_normal((40, 5)), np.zeros(40), Phi[:, 1]])  # noise, zero, duplicate
    res = _cavi(schedule="fast").run(Phi, t, a0=prior, b0=prior)
    assert res.converged and res.schedule == "fast"
    steps = np.diff(res.elbo_trace)
    assert np.all(steps >= -1e-9 * np.abs(res.elbo_trace[1:])), steps.min()
    assert res.elbo == pytest.approx(float(rvm.MULTICLASS_GUIDE.elbo(res.state, res.data)), rel=1e-11)
    # relevant = a basis function some class's data support; the zero column is never in a model
    np.testing.assert_array_equal(res.relevant, res.class_supported.any(axis=1))
    assert not any(bool(np.any(np.asarray(q.index) == 8)) for q in res.state.w)


def test_fast_fit_matches_the_sweep_on_a_well_determined_problem(small_fits):
    """Same model, two fits: close ELBOs (the fast one in its restricted family, a little lower) and
    the same predicted classes on a grid."""
    sweep, fast = small_fits["sweep"], small_fits["fast"]
    assert sweep.elbo - 0.01 * abs(sweep.elbo) < fast.elbo < sweep.elbo + 1e-6 * abs(sweep.elbo)
    grid = inputs(5)
    p_sweep, p_fast = sweep.predict(grid), fast.predict(grid)
    assert np.max(np.abs(p_sweep - p_fast)) < 0.1
    confident = np.sort(p_sweep, axis=1)[:, -1] - np.sort(p_sweep, axis=1)[:, -2] > 0.1
    assert np.all(p_sweep.argmax(1)[confident] == p_fast.argmax(1)[confident])


# ---------------------------------------------------------------------------------------------
# The schedule with several outputs against independent single-output fits
# ---------------------------------------------------------------------------------------------
class IndependentNoise:
    """C regressions on one design, each with its own q(gamma_c): the multi-output factor whose
    schedule must reproduce C single-output schedules (fast_ard.GaussianNoise) exactly."""

    uniform = True

    def __init__(self, T, e0, f0):
        self.parts = [fast_ard.GaussianNoise(T[:, c], e0, f0) for c in range(T.shape[1])]
        self.num_outputs = T.shape[1]

    def weights(self, c):
        return self.parts[c].weights()

    def update(self, moments):
        for part, m in zip(self.parts, moments):
            part.update(m)

    def elbo_terms(self, moments):
        return sum(part.elbo_terms(m) for part, m in zip(self.parts, moments))


def test_schedule_with_several_outputs_equals_one_schedule_per_output():
    r = np.random.default_rng(6)
    Phi = r.standard_normal((50, 12))
    W = np.zeros((12, 3))
    W[[0, 3, 5], 0], W[[1, 2], 1], W[[4, 5, 9, 10], 2] = [2.0, -1.0, 1.5], [1.0, 3.0], [1.0, -2.0, 0.5, 1.0]
    T = Phi @ W + 0.3 * r.standard_normal((50, 3))
    multi = fast_ard.schedule(Phi, IndependentNoise(T, 1e-6, 1e-6), tol=1e-13)
    singles = [fast_ard.schedule(Phi, fast_ard.GaussianNoise(T[:, c], 1e-6, 1e-6), tol=1e-13) for c in range(3)]
    assert multi.converged and all(s.converged for s in singles)
    # the single-output schedule also makes the re-estimates its floor leaves (polish) and stops
    # only at a pass with none left; the multi-output one stops on the pass's ELBO change, here
    # 6e-7 nats (1e-9 relative) lower
    assert multi.elbo <= sum(s.elbo for s in singles) + 1e-12 * abs(multi.elbo)
    assert multi.elbo == pytest.approx(sum(s.elbo for s in singles), rel=1e-8)
    for fit, single in zip(multi.fits, singles):
        assert sorted(fit.active.tolist()) == sorted(single.active.tolist())
        order, other = np.argsort(fit.active), np.argsort(single.active)
        np.testing.assert_array_equal(fit.supported[order], single.supported[other])
        # a coefficient the data barely support (q^2 near s) has a small mean at a flat optimum
        # of (1), which follows where each schedule stopped
        np.testing.assert_allclose(fit.mu[order], single.mu[other], rtol=1e-6, atol=1e-5 * np.max(np.abs(single.mu)))
    assert np.all(np.diff(multi.elbo_trace) >= -1e-9 * np.abs(multi.elbo_trace[1:]))
    assert set(np.unique(multi.trace_outputs)) == {-1, 0, 1, 2}
    assert multi.x.shape == (12, 3)


# ---------------------------------------------------------------------------------------------
# Predictions: against NUTS, rows summing to one, symmetry under relabelling
# ---------------------------------------------------------------------------------------------
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(24)


def _log_class_probabilities(m):
    """ln P(argmax_c (m_c + e_c) = i), e ~ N(0, I), for every i, (..., C): 24-node Gauss-Hermite
    quadrature of E_u prod_{j != i} Phi(u + m_i - m_j), written independently of ppl_sbl.probit
    (accurate to ~1e-7 for the moderate |m_i - m_j| of this test)."""
    C = m.shape[-1]
    d = m[..., :, None] - m[..., None, :]  # (..., i, j)
    x = jnp.asarray(_NODES)[:, None, None] + d[..., None, :, :]  # (..., node, i, j)
    prod = jnp.prod(jnp.where(jnp.eye(C, dtype=bool), 1.0, jax.scipy.special.ndtr(x)), axis=-1)
    return jnp.log(jnp.tensordot(jnp.asarray(_WEIGHTS / np.sqrt(2 * np.pi)), prod, axes=(0, -2)))


def _marginal_model(Phi, t, alpha):
    """The multinomial probit with y integrated out and alpha fixed, for NUTS: ln P(t_n | W) by the
    same quadrature, for the observed class only."""
    w = numpyro.sample("w", dist.Normal(0.0, 1.0 / jnp.sqrt(alpha)).to_event(2))
    m = Phi @ w
    d = jnp.take_along_axis(m, t[:, None], axis=1) - m  # (N, C), 0 at t_n
    x = jnp.asarray(_NODES)[:, None, None] + d[None]  # (node, N, C)
    prod = jnp.prod(jnp.where(jnp.arange(m.shape[1]) == t[:, None], 1.0, jax.scipy.special.ndtr(x)), axis=-1)
    numpyro.factor("t", jnp.sum(jnp.log(jnp.asarray(_WEIGHTS / np.sqrt(2 * np.pi)) @ prod)))


def test_predictive_probabilities_agree_with_nuts():
    """60 points of three overlapping clusters, a0 = b0 = 1: the VB predictive probabilities against
    NUTS's posterior mean of P(t* | W) on the marginal model with alpha at the VB E[alpha]. Mean-field
    q(W) q(y) shrinks the weights (about 10% on this kind of problem) and so the probabilities a
    little; measured here: differences 0.047 at most and 0.008 on average, the same with twice the
    draws (so the VB's, not NUTS's Monte Carlo error; with 90 points 0.03 and 0.005, with 40 points
    0.09 and 0.014)."""
    from numpyro.infer import MCMC, NUTS

    r = np.random.default_rng(4)
    angles = 2 * np.pi * np.arange(3) / 3
    t = r.integers(0, 3, 60)
    X = 1.2 * np.column_stack([np.cos(angles), np.sin(angles)])[t] + r.standard_normal((60, 2))
    Phi = np.column_stack([np.ones(60), X])
    grid = inputs(5)
    res = _cavi().run(Phi, t, a0=1.0, b0=1.0)
    alpha = jnp.asarray(res.state.alpha_shape / res.state.alpha_rate)
    mcmc = MCMC(NUTS(_marginal_model, dense_mass=True), num_warmup=250, num_samples=500, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), jnp.asarray(Phi), jnp.asarray(t), alpha)
    W = mcmc.get_samples()["w"]
    p_nuts = np.asarray(jax.jit(lambda W: jnp.exp(_log_class_probabilities(grid @ W)).mean(0))(W))
    p_vb = res.predict(grid)
    assert p_vb.shape == (40, 3)
    np.testing.assert_allclose(p_vb.sum(1), 1.0, atol=1e-12)
    np.testing.assert_allclose(p_nuts.sum(1), 1.0, atol=1e-6)  # the reference quadrature
    assert np.max(np.abs(p_vb - p_nuts)) < 0.1
    assert np.mean(np.abs(p_vb - p_nuts)) < 0.02
    top = np.sort(p_nuts, axis=1)
    clear = top[:, -1] - top[:, -2] > 0.05
    assert clear.sum() >= 33 and np.all(p_vb.argmax(1)[clear] == p_nuts.argmax(1)[clear])


def test_relabelling_the_classes_permutes_the_fit(small_fits, two_class_fit):
    """The model is symmetric in the classes: fitting labels pi(t) gives the same ELBO, the columns
    of W and of the predictive probabilities permuted. With C = 2 (and 1 - t) likewise."""
    Phi, t, res = small_fits["Phi"], small_fits["t"], small_fits["sweep"]
    perm = np.array([2, 0, 1])
    other = _cavi().run(Phi, perm[t], num_classes=3)
    assert other.elbo == pytest.approx(res.elbo, rel=1e-9)
    grid = inputs(7)
    np.testing.assert_allclose(other.predict(grid)[:, perm], res.predict(grid), atol=1e-7)
    two = t % 2
    a, b = two_class_fit, _cavi().run(Phi, 1 - two)
    assert a.elbo == pytest.approx(b.elbo, rel=1e-9)
    np.testing.assert_allclose(a.predict(grid)[:, ::-1], b.predict(grid), atol=1e-7)


def test_two_class_predictions_are_the_binary_probit_of_the_difference(two_class_fit):
    """C = 2: P(t* = 1) = Phi((m_1 - m_0) / sqrt(s_0^2 + s_1^2)) with the fit's predictive means and
    variances (closed form), and the rows of ``predict`` sum to one."""
    res = two_class_fit
    grid = inputs(8)
    p = res.predict(grid)
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-13)
    m = np.stack([grid @ np.asarray(q.mean) for q in res.state.w], axis=1)
    v = np.stack([np.einsum("nk,kl,nl->n", grid, np.asarray(ppl_sbl.gaussian.full_covariance(q)), grid)
                  for q in res.state.w], axis=1)
    np.testing.assert_allclose(p[:, 1], special.ndtr((m[:, 1] - m[:, 0]) / np.sqrt(2.0 + v.sum(1))), rtol=1e-10)


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
def test_bad_labels_and_inputs_raise_named_errors():
    Phi, t = clusters(0)
    g = rvm.MULTICLASS_GUIDE
    with pytest.raises(ValueError, match="`t`.*non-integer"):
        g.prepare(Phi, t + 0.5)
    with pytest.raises(ValueError, match="`t`.*negative"):
        g.prepare(Phi, t - 1)
    with pytest.raises(ValueError, match="`t` has label 2 but num_classes=2"):
        g.prepare(Phi, t, num_classes=2)
    with pytest.raises(ValueError, match=r"`t` has no samples of class\(es\) \[3, 4\]"):
        g.prepare(Phi, t, num_classes=5)
    with pytest.raises(ValueError, match=r"`t` has no samples of class\(es\) \[1\]"):
        g.prepare(Phi, np.where(t == 1, 0, t))
    with pytest.raises(ValueError, match="`t` holds a single class"):
        g.prepare(Phi, np.zeros(40, int))
    with pytest.raises(ValueError, match="`t`.*NaN"):
        g.prepare(Phi, np.where(np.arange(40) == 3, np.nan, t))
    with pytest.raises(ValueError, match="`t` has 39 entries but `Phi` has 40 rows"):
        g.prepare(Phi, t[:-1])
    with pytest.raises(ValueError, match=r"`t` must be a numeric array; got dtype <U1 \(strings\)\. The model takes "
                                         "integer class labels"):
        g.prepare(Phi, np.array(["a", "b"] * 20))
    with pytest.raises(ValueError, match="`t` is required"):
        g.prepare(Phi)
    bad = Phi.copy()
    bad[2, 1] = np.inf
    with pytest.raises(ValueError, match="`Phi`"):
        g.prepare(bad, t)
    with pytest.raises(ValueError, match="`num_classes`"):
        g.prepare(Phi, t, num_classes=2.5)
    with pytest.raises(ValueError, match="`num_classes`"):
        _cavi(schedule="fast").run(Phi, t, num_classes=1)
    with pytest.raises(ValueError, match="`num_classes`"):
        numpyro.handlers.seed(rvm.multiclass, 0)(Phi)  # prior predictive: C is not in the labels
    draws = numpyro.infer.Predictive(rvm.multiclass, num_samples=3)(jax.random.PRNGKey(0), Phi, a0=2.0, b0=2.0,
                                                                      num_classes=4)
    assert draws["t"].shape == (3, 40) and draws["w"].shape == (3, 3, 4)
    np.testing.assert_array_equal(draws["t"], np.argmax(np.asarray(draws["y"]), axis=-1))
    res = _cavi(max_sweeps=5).run(Phi, t)
    with pytest.raises(ValueError, match="`Phi_new` has 2 columns"):
        res.predict(Phi[:, :2])
