"""Likelihood terms of the relevance-vector family, written once for every prior structure.

A model of the family is a prior on the coefficients w (ARD, grouped, p-grid, ...) times one of
two likelihoods of the linear predictor x = Phi w. For each likelihood this module gives the
pieces a closed-form guide needs; the prior supplies the diagonal prior precision P (M,).

Gaussian noise, t_n ~ N(phi_n^T w, 1/gamma), gamma ~ Gamma(e0, f0) (grid RVM eq. (15), (18)):
    q(w):      Sigma = (diag P + E[gamma] Phi^T Phi)^-1, mu = E[gamma] Sigma Phi^T t
    q(gamma):  e = e0 + N/2, f = f0 + E||t - Phi w||^2 / 2
Bernoulli-logit with the Jaakkola-Jordan bound, t_n in {0, 1} (eq. (27), (29), (30)):
    q(w):      Sigma = (diag P + 2 Phi^T Lambda(xi) Phi)^-1, mu = Sigma Phi^T (t - 1/2)
    xi:        xi_n^2 = phi_n^T (Sigma + mu mu^T) phi_n
The JJ functions take optional per-point weights omega_n multiplying each point's
log-likelihood (the robust RVM of Hwang & Jeong 2015, eq. (3), (10)-(11)).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from . import expfam
from . import gaussian as G
from .bounds import expected_log_sigmoid, jj_lambda, jj_log_sigmoid_bound

__all__ = [
    "GaussianLikelihood",
    "prepare_gaussian",
    "gaussian_update_w",
    "gaussian_update_gamma",
    "gaussian_elbo_terms",
    "gaussian_parts",
    "gaussian_loo",
    "gaussian_data_precision",
    "BernoulliLikelihood",
    "prepare_bernoulli",
    "jj_rank",
    "jj_update_w",
    "jj_update_xi",
    "jj_pointwise",
    "jj_elbo_terms",
    "bernoulli_exact_pointwise",
    "bernoulli_exact_terms",
    "jj_data_precision",
    "diagonal_rank",
    "weighted_update_w",
    "start_noise_precision",
    "training_moments",
]


# ----------------------------------------------------------------------------------------------
# Gaussian noise with a Gamma precision
# ----------------------------------------------------------------------------------------------
class GaussianLikelihood(NamedTuple):
    """Constants of the Gaussian likelihood.

    Phi (N, M); t (N,); gram = Phi^T Phi (M, M), or None when ``gram_factor`` holds it;
    gram_factor (M, r) with gram_factor gram_factor^T = gram when Phi has numerical rank
    r <= M/3 (else None; both None: formed over the active slots where needed): each q(w) update then costs O(M^2 r) instead of O(M^3), exact to
    rounding (``ppl_sbl.gaussian.design_low_rank_factor``, which never forms the Gram matrix);
    phi_t = Phi^T t (M,); col_sq = ||phi_k||^2 (M,); e0, f0 the Gamma prior of gamma.
    """

    Phi: jax.Array
    t: jax.Array
    gram: Optional[jax.Array]
    gram_factor: Optional[jax.Array]
    phi_t: jax.Array
    col_sq: jax.Array
    e0: jax.Array
    f0: jax.Array


def held_copy(a):
    """A read-only copy of the array ``a``: data a fit keeps, which later changes to the caller's
    array do not reach (and which nothing writes to in place)."""
    out = np.array(a)
    out.flags.writeable = False
    return out


def prepare_gaussian(Phi, t, e0, f0, gram=True) -> GaussianLikelihood:
    """From validated NumPy ``Phi`` and ``t`` and scalar hyperparameters. ``gram=False``: neither
    the Gram matrix nor its factor (for a q(w) whose active set is small: the functions below then
    form Phi_A^T Phi_A over its slots, O(N B^2))."""
    Phi, t = held_copy(Phi), held_copy(t)
    factor = G.design_low_rank_factor(Phi) if gram else None
    gram = Phi.T @ Phi if gram and factor is None else None  # the factor replaces it
    return GaussianLikelihood(
        Phi=Phi,
        t=t,
        gram=gram,
        gram_factor=factor,
        phi_t=Phi.T @ t,
        col_sq=np.einsum("nm,nm->m", Phi, Phi),  # no (N, M) temporary
        e0=e0,
        f0=f0,
    )


def start_noise_precision(t):
    """E[gamma] that the sweeps start from: 10 / var(t), the noise level a tenth of the targets'
    variance that Tipping & Faul (2003, section 4) and the fast schedule (:mod:`ppl_sbl.fast_ard`)
    start from (mean(t^2) where the targets are constant, 1 where they are all 0). It scales with
    the targets (t -> r t gives E[gamma] / r^2), unlike the prior mean e0 / f0."""
    t = jnp.asarray(t)
    spread = jnp.var(t)
    spread = jnp.where(spread > 0, spread, jnp.mean(t * t))
    return 10.0 / jnp.where(spread > 0, spread, 1.0)


def gaussian_rank(lik: GaussianLikelihood):
    """Rank of the factored form of q(w), or None for the dense form."""
    return None if lik.gram_factor is None else lik.gram_factor.shape[1]


def gaussian_update_w(q: G.ActiveGaussian, prior_precision, gamma_shape, gamma_rate, lik: GaussianLikelihood):
    """q(w) for Gaussian noise: eq. (15)."""
    e_gamma = expfam.gamma_mean(gamma_shape, gamma_rate)
    idx = q.index
    factor = None
    if lik.gram_factor is not None:
        factor = jnp.sqrt(e_gamma) * jnp.take(lik.gram_factor, idx, axis=0, mode="fill", fill_value=0.0)

    def data_matvec(x):  # gathers the active columns only where the update refines the mean
        phi_a = G.gather_columns(lik.Phi, idx)
        return e_gamma * (phi_a.T @ (phi_a @ x))

    q = G.update_active_gaussian(
        q,
        prior_precision,
        lambda: e_gamma * _active_gram(q, lik),
        e_gamma * jnp.take(lik.phi_t, idx, mode="fill", fill_value=0.0),
        e_gamma * lik.col_sq,
        data_factor=factor,
        data_matvec=data_matvec,
    )
    return G.factor_variance(q, e_gamma)  # f_j^T Sigma f_j for the Gram factor's own columns


def _active_gram(q: G.ActiveGaussian, lik: GaussianLikelihood):
    """Phi_A^T Phi_A on the slots of q (zero rows and columns for padding)."""
    if lik.gram is None:
        phi_a = G.gather_columns(lik.Phi, q.index)
        return phi_a.T @ phi_a
    return G.gather_gram(lik.gram, q.index)


def expected_square_error(q: G.ActiveGaussian, lik: GaussianLikelihood):
    """E||t - Phi w||^2 = ||t - Phi mu||^2 + tr(Phi^T Phi Sigma) (+ pruned variances)."""
    residual = lik.t - lik.Phi @ q.mean
    if lik.gram_factor is None:
        trace = jnp.sum(_active_gram(q, lik) * G.dense_covariance(q))
    else:  # tr(F F^T Sigma) = sum_j f_j^T Sigma f_j, kept by the update (``factor_var``)
        trace = jnp.sum(q.factor_var)
    return residual @ residual + trace + jnp.sum(lik.col_sq * q.frozen_var)


def gaussian_update_gamma(q: G.ActiveGaussian, lik: GaussianLikelihood):
    """q(gamma): e = e0 + N/2, f = f0 + E||t - Phi w||^2 / 2, eq. (18)."""
    return lik.e0 + 0.5 * lik.t.shape[0], lik.f0 + 0.5 * expected_square_error(q, lik)


def gaussian_elbo_terms(q: G.ActiveGaussian, gamma_shape, gamma_rate, lik: GaussianLikelihood):
    """E[ln p(t | w, gamma)] + E[ln p(gamma)] + H[q(gamma)]: the likelihood and gamma terms of (10),
    the sum of :func:`gaussian_parts`."""
    return sum(gaussian_parts(q, gamma_shape, gamma_rate, lik).values())


def gaussian_parts(q: G.ActiveGaussian, gamma_shape, gamma_rate, lik: GaussianLikelihood):
    """:func:`gaussian_elbo_terms` as ELBO parts: ``log_lik`` = E[ln p(t | w, gamma)] (the grid RVM
    paper's (19)), ``-kl_gamma`` and ``log_norm_gamma`` (its (24), (26); :func:`ppl_sbl.expfam.gamma_parts`)."""
    e_gamma = expfam.gamma_mean(gamma_shape, gamma_rate)
    e_log_gamma = expfam.gamma_mean_log(gamma_shape, gamma_rate)
    N = lik.t.shape[0]
    log_lik = N * expfam.normal_expected_log_density(0.0, e_gamma, e_log_gamma) - 0.5 * e_gamma * (
        expected_square_error(q, lik)
    )
    return {"log_lik": log_lik, **expfam.gamma_parts("gamma", lik.e0, lik.f0, gamma_shape, gamma_rate)}


def gaussian_loo(q: G.ActiveGaussian, gamma_shape, gamma_rate, lik: GaussianLikelihood):
    """Exact leave-one-out log predictive densities of a Gaussian linear model with q(w) =
    N(mu, Sigma), Sigma^-1 = D + g Phi^T Phi (D the prior precisions, g = E[gamma] the noise
    precision; the hyperparameters held at their fitted means): (loo_n, lpd_n), each (N,).

    Leaving point n out removes g phi_n phi_n^T from Sigma^-1 and g phi_n t_n from Sigma^-1 mu; with
    m_n = phi_n^T mu and s_n = phi_n^T Sigma phi_n the rank-one downdate (Sherman-Morrison) gives
    phi_n^T Sigma_-n phi_n = s_n / (1 - g s_n) and phi_n^T mu_-n = (m_n - g s_n t_n) / (1 - g s_n), so

        ln p(t_n | t_-n) = ln N(t_n | (m_n - g s_n t_n) / (1 - g s_n), 1/g + s_n / (1 - g s_n)),

    and lpd_n = ln N(t_n | m_n, 1/g + s_n), the fitted predictive at the training point. Only the
    coefficients in the model enter (frozen ones have mean 0 and no data term).
    """
    g = expfam.gamma_mean(gamma_shape, gamma_rate)
    mean, var = G.linear_moments(q, lik.Phi)
    s = var - (lik.Phi ** 2) @ q.frozen_var
    shrink = 1.0 - g * s
    loo_mean = (mean - g * s * lik.t) / shrink
    loo_var = 1.0 / g + s / shrink

    def log_normal(x, m, v):  # ln N(x | m, v): the expected log density of a point mass
        return expfam.normal_expected_log_density((x - m) ** 2, 1.0 / v, -jnp.log(v))

    return log_normal(lik.t, loo_mean, loo_var), log_normal(lik.t, mean, 1.0 / g + s)


def gaussian_data_precision(gamma_shape, gamma_rate, lik: GaussianLikelihood):
    """h_k = E[gamma] ||phi_k||^2: the precision the data give w_k on its own."""
    return expfam.gamma_mean(gamma_shape, gamma_rate) * lik.col_sq


# ----------------------------------------------------------------------------------------------
# Bernoulli-logit with the Jaakkola-Jordan bound
# ----------------------------------------------------------------------------------------------
class BernoulliLikelihood(NamedTuple):
    """Phi (N, M); t (N,) labels in {0, 1}."""

    Phi: jax.Array
    t: jax.Array


def prepare_bernoulli(Phi, t) -> BernoulliLikelihood:
    return BernoulliLikelihood(held_copy(Phi), held_copy(t))


def _weights(weights, like):
    return jnp.ones_like(like) if weights is None else weights


def jj_data_precision(xi, lik: BernoulliLikelihood, weights=None):
    """h_k = 2 sum_n omega_n lambda(xi_n) phi_nk^2 (omega_n = 1 without ``weights``)."""
    return 2.0 * (lik.Phi**2).T @ (_weights(weights, xi) * jj_lambda(xi))


def diagonal_rank(Phi):
    """Rank of the factored form of q(w) for a data precision Phi^T diag(W) Phi that changes every
    sweep (N, when N <= M / 3: it has rank <= N and the Woodbury update costs O(M N^2) instead of
    O(M^3)), or None for the dense form."""
    N, M = Phi.shape
    return N if N <= M // 3 else None


def jj_rank(lik: BernoulliLikelihood):
    """Rank of the factored form of q(w) under the JJ bound (see :func:`diagonal_rank`)."""
    return diagonal_rank(lik.Phi)


def weighted_update_w(q: G.ActiveGaussian, prior_precision, W, r, Phi):
    """q(w) for a likelihood that is quadratic in w with a diagonal weight per point:
    Sigma = (diag P + Phi^T diag(W) Phi)^-1, mu = Sigma Phi^T r. In the factored form (see
    :func:`diagonal_rank`) the data precision is passed as its factor (sqrt(W) Phi_A)^T."""
    phi_a = G.gather_columns(Phi, q.index)
    factor = (jnp.sqrt(W)[:, None] * phi_a).T if q.base.shape[0] > 0 else None
    q = G.update_active_gaussian(
        q,
        prior_precision,
        lambda: phi_a.T @ (W[:, None] * phi_a),
        phi_a.T @ r,
        (Phi**2).T @ W,
        data_factor=factor,
        data_matvec=lambda x: phi_a.T @ (W * (phi_a @ x)),
    )
    return G.factor_variance(q, W)  # in the factored form, phi_n^T Sigma phi_n for every point


def training_moments(q: G.ActiveGaussian, Phi):
    """(Phi mu, diag(Phi Sigma Phi^T) + frozen variances) on the training design ``Phi``: as
    :func:`ppl_sbl.gaussian.linear_moments`, but in the factored form of a weighted likelihood
    (:func:`weighted_update_w`, one factor column per point) the variances kept by the update,
    free of the cancellation of phi^T D phi - ||Z phi||^2."""
    if q.base.shape[0] == 0 or q.factor_var.shape[0] != Phi.shape[0]:
        return G.linear_moments(q, Phi)
    return Phi @ q.mean, q.factor_var + (Phi**2) @ q.frozen_var


def jj_update_w(q: G.ActiveGaussian, prior_precision, xi, lik: BernoulliLikelihood, weights=None):
    """q(w) under the JJ bound: eq. (29); with per-point ``weights`` omega_n (the robust RVM's
    E[omega_n], its eq. (10)-(11)): Sigma = (diag P + 2 Phi^T diag(omega lambda) Phi)^-1,
    mu = Sigma Phi^T (omega (t - 1/2))."""
    omega = _weights(weights, xi)
    return weighted_update_w(q, prior_precision, 2.0 * omega * jj_lambda(xi), omega * (lik.t - 0.5), lik.Phi)


def jj_update_xi(q: G.ActiveGaussian, lik: BernoulliLikelihood):
    """xi_n^2 = phi_n^T (Sigma + mu mu^T) phi_n, eq. (30)."""
    mean, var = training_moments(q, lik.Phi)
    return jnp.sqrt(mean**2 + var)


def jj_pointwise(q: G.ActiveGaussian, xi, lik: BernoulliLikelihood):
    """E_q of the JJ bound (27) on ln p(t_n | w) for every point, shape (N,)."""
    mean, var = training_moments(q, lik.Phi)
    return jj_log_sigmoid_bound((2.0 * lik.t - 1.0) * mean, mean**2 + var, xi)


def jj_elbo_terms(q: G.ActiveGaussian, xi, lik: BernoulliLikelihood, weights=None):
    """sum_n omega_n E_q of the JJ bound (27) on ln p(t_n | w) (omega_n = 1 without ``weights``)."""
    return jnp.sum(_weights(weights, xi) * jj_pointwise(q, xi, lik))


def bernoulli_exact_pointwise(q: G.ActiveGaussian, lik: BernoulliLikelihood):
    """E_q[ln sigma(s_n phi_n^T w)], s_n = 2 t_n - 1, for every point, by quadrature, shape (N,)."""
    mean, var = training_moments(q, lik.Phi)
    return expected_log_sigmoid((2.0 * lik.t - 1.0) * mean, var)


def bernoulli_exact_terms(q: G.ActiveGaussian, lik: BernoulliLikelihood, weights=None):
    """sum_n omega_n E_q[ln sigma(s_n phi_n^T w)] by one-dimensional quadrature."""
    pointwise = bernoulli_exact_pointwise(q, lik)
    return jnp.sum(_weights(weights, pointwise) * pointwise)
