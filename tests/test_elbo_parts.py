"""The ELBO's parts (``elbo_parts()``) of the derived guides, the sequential SBL and the Bayesian
GPLVM against independent answers: the hand-written RVM guides' parts term by term, direct
formulas and N x N algebra, and the exact leave-one-out of the sequential SBL against refits on
N - 1 samples. Small random problems."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import ppl_sbl
from ppl_sbl import expfam
from ppl_sbl import gaussian as G
from ppl_sbl import sparse_gp as sg
from ppl_sbl.bounds import expected_log_sigmoid
from ppl_sbl.derived import DerivedState, derived_guide
from ppl_sbl.inference import resolve_guide
from ppl_sbl.models import gplvm, robust_rvm, rvm
from ppl_sbl.models import sequential_sbl as ss
from ppl_sbl.models.gplvm import collapsed
from ppl_sbl.result import ordered_parts

from problems import random_classification, random_regression

RTOL = 1e-10  # the parts sum to the objective to rounding (FitResult.elbo_parts)


def _sums_to(parts, total, rtol=RTOL):
    assert math.fsum(parts.values()) == pytest.approx(total, rel=rtol, abs=0.0), (parts, total)


def _floats(parts):
    return {k: float(v) for k, v in parts.items()}


def _call(guide, name, state, data):
    """The guide's function ``name`` (elbo, elbo_exact, elbo_parts) at (state, data), compiled
    once per guide as the results run it."""
    value = guide.compiled(name, getattr(guide, name))(state, data)
    return _floats(value) if name == "elbo_parts" else float(value)


# ----------------------------------------------------------------------------------------------
# Derived guides: the parts are functions of q, evaluated here at random q (no sweeps)
# ----------------------------------------------------------------------------------------------
def _random_gaussian(rng, M):
    B = rng.normal(size=(M, M))
    cov = B @ B.T / M + 0.1 * np.eye(M)
    return rng.normal(size=M), cov


def _random_gamma(rng, size):
    return rng.uniform(0.5, 5.0, size), rng.uniform(0.2, 3.0, size)


def _hand_gaussian(mean, cov):
    """q(w) = N(mean, cov) in the hand-written guides' dense form (every coefficient active)."""
    M = len(mean)
    return G.ActiveGaussian(mean=jnp.asarray(mean), cov=jnp.asarray(cov), base=jnp.zeros(0),
                            index=jnp.arange(M, dtype=jnp.int32), frozen_var=jnp.zeros(M),
                            log_det=jnp.asarray(np.linalg.slogdet(cov)[1]), factor_var=jnp.zeros(0))


def _derived_state(gaussians, gammas, jj=()):
    """A derived guide's state with q the given factors ({site: (mean, cov)}, {site: (shape,
    rate)}); the Jaakkola-Jordan parameters of the Bernoulli sites ``jj`` at 1 (the parts do not
    read them)."""
    return DerivedState(mean={f: jnp.asarray(m) for f, (m, _) in gaussians.items()},
                        cov={f: jnp.asarray(c) for f, (_, c) in gaussians.items()},
                        shape={n: jnp.asarray(a).reshape(-1) for n, (a, _) in gammas.items()},
                        rate={n: jnp.asarray(b).reshape(-1) for n, (_, b) in gammas.items()},
                        xi={n: jnp.ones(len(size)) for n, size in jj},
                        logdet={f: jnp.asarray(np.linalg.slogdet(c)[1]) for f, (_, c) in gaussians.items()})


@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_derived_rvm_parts_equal_the_hand_written_ones_term_by_term(kind):
    """At the same q (random, three draws), the derived guide's parts of rvm.regression /
    rvm.classification equal the hand-written guide's, term by term, to rounding; without a bound
    they sum to elbo, with the Jaakkola-Jordan bound (exact expectations by quadrature) to
    elbo_exact."""
    model = getattr(rvm, kind)
    Phi, t = random_regression(0) if kind == "regression" else random_classification(1)
    M = Phi.shape[1]
    hand = resolve_guide(model.closed_form_guide, (Phi, t), {})
    derived = derived_guide(model, Phi, t)
    dh, dd = hand.prepare(Phi, t), derived.prepare(Phi, t)
    names = ["log_lik", "-kl_w", "-kl_alpha", "log_norm_alpha"]
    names += ["-kl_gamma", "log_norm_gamma"] if kind == "regression" else []
    for seed in range(3):
        rng = np.random.default_rng(seed)
        (mean, cov), (a, b), (e, f) = _random_gaussian(rng, M), _random_gamma(rng, M), _random_gamma(rng, 1)
        w = _hand_gaussian(mean, cov)
        if kind == "regression":
            sh = rvm.RegressionState(w, jnp.asarray(a), jnp.asarray(b), jnp.asarray(e[0]), jnp.asarray(f[0]))
            gammas = {"alpha": (a, b), "gamma": (e, f)}
        else:
            sh = rvm.ClassificationState(w, jnp.asarray(a), jnp.asarray(b), jnp.ones(len(t)))
            gammas = {"alpha": (a, b)}
        sd = _derived_state({"w": (mean, cov)}, gammas, jj=[("t", t)] if kind == "classification" else ())
        ph, pd = ordered_parts(_call(hand, "elbo_parts", sh, dh)), ordered_parts(_call(derived, "elbo_parts", sd, dd))
        assert list(pd) == list(ph) == names
        # the derived -kl_alpha is its site's term less the normaliser: rounding of the normaliser's size
        for name in names:
            assert pd[name] == pytest.approx(ph[name], rel=1e-10, abs=1e-10 * abs(ph["log_norm_alpha"])), name
        if kind == "regression":
            assert derived.elbo_exact is None
            _sums_to(pd, _call(derived, "elbo", sd, dd))
        else:
            _sums_to(pd, _call(derived, "elbo_exact", sd, dd))


def test_derived_parts_with_a_factored_q_w_equal_the_hand_written_ones():
    """A wide design (N < M/3): both guides hold q(w) in factored form (Woodbury), here their
    starts (covariance I) with one random mean and random Gamma factors set in both; the parts
    agree term by term and sum to elbo."""
    rng = np.random.default_rng(7)
    Phi = rng.normal(size=(5, 18))
    t = Phi[:, 0] - Phi[:, 3] + 0.1 * rng.normal(size=5)
    hand = resolve_guide(rvm.regression.closed_form_guide, (Phi, t), {})
    derived = derived_guide(rvm.regression, Phi, t)
    dh, dd = hand.prepare(Phi, t), derived.prepare(Phi, t)
    sh, sd = hand.init(dh), derived.init(dd)
    assert isinstance(sd.cov["w"], G.ActiveGaussian) and sh.w.base.shape == (18,)  # both factored
    mean, (a, b), (e, f) = rng.normal(size=18), _random_gamma(rng, 18), _random_gamma(rng, 1)
    sh = sh._replace(w=sh.w._replace(mean=jnp.asarray(mean)), alpha_shape=jnp.asarray(a), alpha_rate=jnp.asarray(b),
                     gamma_shape=jnp.asarray(e[0]), gamma_rate=jnp.asarray(f[0]))
    sd = sd._replace(mean={"w": jnp.asarray(mean)}, cov={"w": sd.cov["w"]._replace(mean=jnp.asarray(mean))},
                     shape={"alpha": jnp.asarray(a), "gamma": jnp.asarray(e)},
                     rate={"alpha": jnp.asarray(b), "gamma": jnp.asarray(f)})
    ph, pd = _call(hand, "elbo_parts", sh, dh), _call(derived, "elbo_parts", sd, dd)
    assert set(pd) == set(ph)
    for name in ph:
        assert pd[name] == pytest.approx(ph[name], rel=1e-10, abs=1e-10 * abs(ph["log_norm_alpha"])), name
    _sums_to(pd, _call(derived, "elbo", sd, dd))


def scaled_rvm(Phi, t=None, *, scale=2.0):
    """The RVM with its likelihood's log density multiplied by a constant."""
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 1e-2).expand([Phi.shape[1]]).to_event(1))
    w = numpyro.sample("w", dist.Normal(0.0, jax.lax.rsqrt(alpha)).to_event(1))
    gamma = numpyro.sample("gamma", dist.Gamma(2.0, 0.5))
    with numpyro.handlers.scale(scale=scale):
        numpyro.sample("t", dist.Normal(Phi @ w, jax.lax.rsqrt(gamma)), obs=t)


def test_a_constant_scale_stays_inside_its_site_term():
    """At one q, scaling the likelihood by 2 doubles log_lik and leaves every other part."""
    Phi, t = random_regression(4)
    scaled, plain = derived_guide(scaled_rvm, Phi, t, scale=2.0), derived_guide(scaled_rvm, Phi, t, scale=1.0)
    d2, d1 = scaled.prepare(Phi, t, scale=2.0), plain.prepare(Phi, t, scale=1.0)
    rng = np.random.default_rng(4)
    q = ({"w": _random_gaussian(rng, Phi.shape[1])}, {"alpha": _random_gamma(rng, Phi.shape[1]),
                                                      "gamma": _random_gamma(rng, 1)})
    state = _derived_state(*q)
    p2, p1 = _call(scaled, "elbo_parts", state, d2), _call(plain, "elbo_parts", state, d1)
    assert p2["log_lik"] == pytest.approx(2.0 * p1["log_lik"], rel=1e-12)
    for name in p1:
        if name != "log_lik":
            assert p2[name] == pytest.approx(p1[name], rel=1e-12), name
    _sums_to(p2, _call(scaled, "elbo", state, d2))


def test_a_gamma_scaled_likelihood_keeps_its_scale_inside_log_lik():
    """The robust RVM classifier (t scaled by omega_n ~ Gamma(c0, d0)): log_lik = sum_n E[omega_n]
    E_q[ln sigma(s_n phi_n^T w)] by quadrature from q(w) directly, -kl_omega and log_norm_omega
    those of a Gamma factor under Gamma(c0, d0) (:func:`ppl_sbl.expfam.gamma_parts`), and the
    parts sum to elbo_exact."""
    Phi, t = random_classification(5)
    N, M = Phi.shape
    c0, d0 = 1.5, 0.7
    guide = derived_guide(robust_rvm.classification, Phi, t, c0=c0, d0=d0)
    data = guide.prepare(Phi, t, c0=c0, d0=d0)
    rng = np.random.default_rng(5)
    (mean, cov), omega = _random_gaussian(rng, M), _random_gamma(rng, N)
    state = _derived_state({"w": (mean, cov)}, {"alpha": _random_gamma(rng, M), "omega": omega}, jj=[("t", t)])
    parts = _call(guide, "elbo_parts", state, data)
    _sums_to(parts, _call(guide, "elbo_exact", state, data))
    var = np.sum((Phi @ cov) * Phi, 1)
    pointwise = expected_log_sigmoid(jnp.asarray((2 * t - 1) * (Phi @ mean)), jnp.asarray(var))
    assert parts["log_lik"] == pytest.approx(float(np.sum(omega[0] / omega[1] * np.asarray(pointwise))), rel=1e-10)
    expect = _floats(expfam.gamma_parts("omega", c0, d0, omega[0], omega[1]))
    assert parts["-kl_omega"] == pytest.approx(expect["-kl_omega"], rel=1e-10)
    assert parts["log_norm_omega"] == pytest.approx(N * (c0 * math.log(d0) - math.lgamma(c0)), rel=1e-12)
    assert expect["log_norm_omega"] == pytest.approx(parts["log_norm_omega"], rel=1e-12)


# ----------------------------------------------------------------------------------------------
# Sequential SBL
# ----------------------------------------------------------------------------------------------
def _sbl_problem(seed, N=30, M=20):
    rng = np.random.default_rng(seed)
    D = rng.normal(size=(N, M))
    c = np.zeros(M)
    c[rng.choice(M, 3, replace=False)] = rng.normal(scale=2.0, size=3)
    return D, D @ c + 0.3 * rng.normal(size=N)


def _direct_log_evidence(D, y, alpha, noise_var):
    """log N(y | 0, sigma^2 I + D_a A^-1 D_a^T) with the N x N covariance."""
    a = np.isfinite(alpha)
    C = noise_var * np.eye(len(y)) + (D[:, a] / alpha[a]) @ D[:, a].T
    return -0.5 * (len(y) * math.log(2 * math.pi) + np.linalg.slogdet(C)[1] + y @ np.linalg.solve(C, y))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("update_noise", [False, True])
def test_sbl_parts_sum_to_the_log_evidence(seed, update_noise):
    """log_lik + -kl_c = L (the N x N evidence), -kl_c the textbook Gaussian KL of q(c) from
    N(0, A^-1)."""
    D, y = _sbl_problem(seed)
    st = ss.fit(D, y, noise_var=0.1, update_noise=update_noise)
    parts = st.elbo_parts()
    assert list(parts) == ["log_lik", "-kl_c"]
    _sums_to(parts, st.elbo)
    assert math.fsum(parts.values()) == pytest.approx(_direct_log_evidence(D, y, st.alpha, st.noise_var), rel=1e-9)
    A = np.diag(st.alpha[st.active])
    S, mu = st.Sigma, st.mu
    kl = 0.5 * (np.trace(A @ S) + mu @ A @ mu - len(mu) - np.linalg.slogdet(A)[1] - np.linalg.slogdet(S)[1])
    assert parts["-kl_c"] == pytest.approx(-kl, rel=1e-9)
    assert parts["-kl_c"] <= 0.0


def _loo_by_refits(D, y, active, alpha, noise_var):
    """ln p(y_n | y_{-n}) by the posterior of c refitted on the other N - 1 samples (alpha and
    sigma^2 held), then the predictive N(d_n^T mu, sigma^2 + d_n^T Sigma d_n) at sample n."""
    out = []
    for n in range(len(y)):
        keep = np.arange(len(y)) != n
        Da = D[keep][:, active]
        Sigma = np.linalg.inv(np.diag(alpha) + Da.T @ Da / noise_var)
        mu = Sigma @ Da.T @ y[keep] / noise_var
        d = D[n, active]
        v = noise_var + d @ Sigma @ d
        out.append(-0.5 * (math.log(2 * math.pi * v) + (y[n] - d @ mu) ** 2 / v))
    return np.array(out)


@pytest.mark.parametrize("seed", range(3))
def test_sbl_exact_loo_equals_refits_on_n_minus_one_samples(seed):
    """The rank-one downdate against N refits by matrix inversion (rtol 1e-9: the refits' own
    rounding on these well-conditioned problems is below 1e-12)."""
    D, y = _sbl_problem(seed)
    st = ss.fit(D, y, noise_var=0.1, update_noise=True)
    loo = st.loo_exact()
    assert loo.shape == (len(y),)
    expect = _loo_by_refits(D, y, st.active, st.alpha[st.active], st.noise_var)
    np.testing.assert_allclose(loo, expect, rtol=1e-9)
    # after samples added by value (Sigma with pending rank-one corrections), with alpha held
    more, extra = _sbl_problem(seed + 10, N=4)
    grown = st
    for row, value in zip(more, extra):
        grown, _ = ss.add_sample(grown, row, value)
    D2, y2 = np.vstack([D, more]), np.concatenate([y, extra])
    np.testing.assert_allclose(grown.loo_exact(), _loo_by_refits(D2, y2, st.active, st.alpha[st.active],
                                                                 st.noise_var), rtol=1e-9)
    _sums_to(grown.elbo_parts(), _direct_log_evidence(D2, y2, st.alpha, st.noise_var), rtol=1e-9)


def test_sbl_parts_and_loo_of_the_empty_model():
    D, y = _sbl_problem(0, N=10, M=4)
    st = ss.fit(D, y, noise_var=0.5)
    empty = st.replace(active=np.zeros(0, int), alpha=np.full(4, np.inf), mu=np.zeros(0), Sigma=np.zeros((0, 0)))
    parts = empty.elbo_parts()
    _sums_to(parts, _direct_log_evidence(D, y, empty.alpha, 0.5))
    assert parts["-kl_c"] == 0.0
    np.testing.assert_allclose(empty.loo_exact(), -0.5 * (np.log(2 * np.pi * 0.5) + y**2 / 0.5), rtol=1e-12)


# ----------------------------------------------------------------------------------------------
# Bayesian GPLVM (collapsed bound)
# ----------------------------------------------------------------------------------------------
def _gplvm_at_random_parameters(model, seed, N=12, Q=2, M=4):
    """A GPLVMResult at the starting point perturbed at random (no fit), with its elbo the bound
    (5.20) there."""
    rng = np.random.default_rng(seed)
    Y = rng.normal(size=(N, 3))
    Z = np.column_stack([np.sin(Y[:, 0]), Y[:, 1] ** 2]) + 0.1 * rng.normal(size=(N, 2))
    free, fixed, Yj, Zj, z_mean = gplvm.initial_parameters(Y, Z, model=model, latent_dim=Q, num_inducing=M,
                                                           snr=None, seed=seed)
    free = jax.tree.map(lambda v: v + 0.3 * jnp.asarray(rng.normal(size=np.shape(v))), free)
    p, _, prior, _ = collapsed.unpack(free, fixed)
    mu, var, kl = collapsed.q_x(model, p, prior, Yj, "rbf", sg.JITTER)
    elbo = float(collapsed.data_term(mu, var, free, fixed, Zj, sg.JITTER) - kl)  # gplvm.bound, with the same q(X)
    return gplvm.GPLVMResult(model=model, prior_kernel="rbf", free=free, fixed=fixed, Y=Yj, Z=Zj, z_mean=z_mean,
                             elbo=elbo, elbo_trace=np.array([elbo]), converged=False, info={}, seconds=0.0)


@pytest.mark.parametrize("model", ["supervised", "unsupervised"])
@pytest.mark.parametrize("seed", range(2))
def test_gplvm_parts_equal_direct_gaussian_algebra_and_sum_to_the_bound(model, seed):
    """log_lik = E_q[ln p(Z | F)] and -kl_U from q(U)'s mean and covariance (optimal_q_u) and K_uu
    by the textbook formulas with K_uu^-1; -kl_X the Gaussian KL of q(X)'s full covariances from
    N(0, K_Y) (N(0, I) unsupervised); their sum the collapsed bound (5.20). The direct formulas
    go through the inverse of K_uu (condition number up to ~1e6 here), hence 1e-7 relative to
    the largest part."""
    res = _gplvm_at_random_parameters(model, seed)
    parts = res.elbo_parts()
    assert list(parts) == ["log_lik", "-kl_X", "-kl_U"]
    _sums_to(parts, res.elbo)
    g = res.guide.keywords
    u_mean, u_cov = np.asarray(g["u_mean"]), np.asarray(g["u_cov"])
    Kuu = np.asarray(sg.add_jitter(sg.kernel("rbf_ard", res.kernel_params, res.inducing), res.jitter))
    Ki = np.linalg.inv(Kuu)
    stats = res.stats
    P1, P2, p0 = np.asarray(stats.Psi1), np.asarray(stats.Psi2), float(stats.psi0)
    Z, beta = np.asarray(res.Z), 1.0 / res.noise_var
    (N, D), M = Z.shape, Kuu.shape[0]
    squares = kl_u = 0.0
    for d in range(D):
        m = u_mean[d]
        squares += (Z[:, d] @ Z[:, d] - 2 * Z[:, d] @ P1 @ Ki @ m + m @ Ki @ P2 @ Ki @ m
                    + np.trace(Ki @ u_cov @ Ki @ P2) + p0 - np.trace(Ki @ P2))
        kl_u += 0.5 * (np.trace(Ki @ u_cov) + m @ Ki @ m - M + np.linalg.slogdet(Kuu)[1] - np.linalg.slogdet(u_cov)[1])
    log_lik = 0.5 * N * D * math.log(beta / (2 * math.pi)) - 0.5 * beta * squares
    mu, cov = np.asarray(g["q_mean"]), np.asarray(g["q_cov"])
    if model == "unsupervised":
        kl_x = 0.5 * np.sum(mu**2 + cov.T - 1.0 - np.log(cov.T))
    else:
        K_Y = np.asarray(gplvm.programs.prior_cov(res.Y, "rbf", res.prior_params, res.jitter))
        kl_x = sum(0.5 * (np.trace(np.linalg.solve(K_Y, S)) + m @ np.linalg.solve(K_Y, m) - N
                          + np.linalg.slogdet(K_Y)[1] - np.linalg.slogdet(S)[1]) for m, S in zip(mu.T, cov))
    scale = max(abs(v) for v in parts.values())
    for name, value in (("log_lik", log_lik), ("-kl_U", -kl_u), ("-kl_X", -kl_x)):
        assert parts[name] == pytest.approx(value, rel=0.0, abs=1e-7 * scale), name
    assert parts["-kl_U"] <= 0.0 and parts["-kl_X"] <= 0.0
