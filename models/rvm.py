"""The variational relevance vector machine (Bishop & Tipping 2000).

Models (plain NumPyro programs; they run unchanged under NUTS, SVI and ``Predictive``)::

    regression(Phi, t=None, *, a0=1e-6, b0=1e-6, e0=1e-6, f0=1e-6)
        alpha_k ~ Gamma(a0, b0),  w_k | alpha_k ~ N(0, 1/alpha_k),
        gamma ~ Gamma(e0, f0),    t_n | w, gamma ~ N(phi_n^T w, 1/gamma)
    classification(Phi, t=None, *, a0=1e-6, b0=1e-6)
        alpha, w as above,        t_n | w ~ Bernoulli(logits = phi_n^T w),  t_n in {0, 1}

Gamma is shape/rate. Closed-form guide: q(w) q(alpha) q(gamma) with q(w) = N(mu, Sigma),
q(alpha_k) = Gamma(a_k, b_k), q(gamma) = Gamma(e, f); for classification the Jaakkola-Jordan
bound with one xi_n per point. One sweep, in the equation numbers of the grid RVM paper
(Kropotov et al., ``shared/papers/grid_rvm_kropotov.txt``) with a single column (M2 = 1,
beta = 1), which are Bishop & Tipping's (2000) updates:

    Sigma = (diag E[alpha] + E[gamma] Phi^T Phi)^-1,  mu = E[gamma] Sigma Phi^T t     (15)
    a_k = a0 + 1/2,  b_k = b0 + E[w_k^2]/2                                             (16)
    e = e0 + N/2,    f = f0 + E||t - Phi w||^2 / 2                                     (18)
    (JJ)  Sigma = (diag E[alpha] + 2 Phi^T Lambda(xi) Phi)^-1,  mu = Sigma Phi^T (t - 1/2)  (29)
          xi_n^2 = phi_n^T (Sigma + mu mu^T) phi_n                                     (30)

The ELBO is the paper's (10) (with the JJ bound (27) in place of the logistic likelihood: (28)),
evaluated with the statistics (19)-(26) (E[gamma] = e/f, E[ln gamma] = psi(e) - ln f).
The paper writes labels as +-1 and mu = Sigma Phi^T t / 2; with t in {0, 1} that is
Sigma Phi^T (t - 1/2).

Notation: ``Phi`` (N, M) design matrix, ``t`` targets, ``alpha_shape/alpha_rate`` = (a_k, b_k),
``gamma_shape/gamma_rate`` = (e, f), ``w`` the Gaussian factor (``ppl_sbl.gaussian``).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from ppl_sbl import expfam
from ppl_sbl import gaussian as G
from ppl_sbl.bounds import expected_log_sigmoid, expected_sigmoid, jj_lambda, jj_log_sigmoid_bound
from ppl_sbl.inference import ClosedFormGuide, closed_form_guide
from ppl_sbl.validation import check_design, check_matrix, check_positive

__all__ = [
    "regression",
    "classification",
    "RegressionData",
    "RegressionState",
    "ClassificationData",
    "ClassificationState",
    "REGRESSION_GUIDE",
    "CLASSIFICATION_GUIDE",
]


# ----------------------------------------------------------------------------------------------
# Shared pieces of the two models
# ----------------------------------------------------------------------------------------------
def _groups(groups, M):
    """Validated group index of each coefficient, shape (M,): ARD (one per coefficient) by default."""
    if groups is None:
        return np.arange(M)
    g = np.asarray(groups)
    if g.shape != (M,) or not np.issubdtype(g.dtype, np.integer) or g.min() < 0:
        raise ValueError(
            f"`groups` must be {M} non-negative integers, one per column of Phi; got shape {g.shape}, "
            f"dtype {g.dtype}. Use np.zeros(M, int) for one shared precision (ridge)."
        )
    if len(np.unique(g)) != g.max() + 1:
        raise ValueError("`groups` must use every label 0, ..., G-1 at least once; relabel them.")
    return g


def _ard_prior(M, a0, b0, groups):
    g = _groups(groups, M)
    alpha = numpyro.sample("alpha", dist.Gamma(a0, b0).expand([int(g.max()) + 1]).to_event(1))
    w = numpyro.sample("w", dist.Normal(0.0, jax.lax.rsqrt(alpha[g])).to_event(1))
    return alpha, w


# ----------------------------------------------------------------------------------------------
# Shared pieces of the two guides
# ----------------------------------------------------------------------------------------------
def _scalar(name, value):
    return jnp.asarray(check_positive(name, value), dtype=jnp.float64)


def _alpha_terms(state, data, w_second_moment):
    """E[ln p(w|alpha)] + E[ln p(alpha)] + H[q(w)] + H[q(alpha)]: the w and alpha terms of (10)."""
    a0, b0 = data.a0, data.b0
    e_alpha = expfam.gamma_mean(state.alpha_shape, state.alpha_rate)
    e_log_alpha = expfam.gamma_mean_log(state.alpha_shape, state.alpha_rate)
    log_p_w = jnp.sum(
        expfam.normal_expected_log_density(w_second_moment, e_alpha[data.groups], e_log_alpha[data.groups])
    )
    log_p_alpha = jnp.sum(expfam.gamma_expected_log_density(a0, b0, e_alpha, e_log_alpha))
    entropy = G.entropy(state.w) + jnp.sum(expfam.gamma_entropy(state.alpha_shape, state.alpha_rate))
    return log_p_w + log_p_alpha + entropy


def _update_alpha(state, data, w_second_moment):
    """a_k = a0 + 1/2, b_k = b0 + E[w_k^2]/2 (grid RVM eq. (16) with M2 = 1, E[beta] = 1).

    With groups of coefficients sharing one precision: a_g = a0 + n_g/2,
    b_g = b0 + sum_{k in g} E[w_k^2]/2.
    """
    total = jax.ops.segment_sum(w_second_moment, data.groups, num_segments=data.group_sizes.shape[0])
    return data.a0 + 0.5 * data.group_sizes, data.b0 + 0.5 * total


def _prior_precision(state, data):
    """E[alpha] of each coefficient, shape (M,)."""
    return expfam.gamma_mean(state.alpha_shape, state.alpha_rate)[data.groups]


def _make_guide(has_gamma):
    def build(state):
        mean = state.w.mean
        scale_tril = jnp.linalg.cholesky(G.full_covariance(state.w))

        def guide(Phi, t=None, **hyper):
            numpyro.sample("alpha", dist.Gamma(state.alpha_shape, state.alpha_rate).to_event(1))
            numpyro.sample("w", dist.MultivariateNormal(mean, scale_tril=scale_tril))
            if has_gamma:
                numpyro.sample("gamma", dist.Gamma(state.gamma_shape, state.gamma_rate))

        return guide

    return build


# ----------------------------------------------------------------------------------------------
# Regression guide
# ----------------------------------------------------------------------------------------------
class RegressionData(NamedTuple):
    """Validated arguments of ``regression`` with the constants of every sweep.

    Phi (N, M); t (N,); gram = Phi^T Phi (M, M), or None when gram_factor holds it; phi_t = Phi^T t (M,); col_sq = ||phi_k||^2 (M,);
    gram_factor (M, r) with gram_factor gram_factor^T = gram when Phi has numerical rank r <= M/3
    (else None): then each q(w) update costs O(M^2 r) instead of O(M^3) (exact to rounding, see
    ``ppl_sbl.gaussian.low_rank_factor``); groups (M,) precision group of each coefficient;
    group_sizes (G,); a0, b0, e0, f0 scalars.
    """

    Phi: jax.Array
    t: jax.Array
    gram: Optional[jax.Array]
    phi_t: jax.Array
    col_sq: jax.Array
    gram_factor: Optional[jax.Array]
    groups: jax.Array
    group_sizes: jax.Array
    a0: jax.Array
    b0: jax.Array
    e0: jax.Array
    f0: jax.Array


class RegressionState(NamedTuple):
    """w: q(w) (ActiveGaussian); alpha_shape, alpha_rate (M,); gamma_shape, gamma_rate ()."""

    w: G.ActiveGaussian
    alpha_shape: jax.Array
    alpha_rate: jax.Array
    gamma_shape: jax.Array
    gamma_rate: jax.Array


def _regression_prepare(Phi, t=None, *, a0=1e-6, b0=1e-6, e0=1e-6, f0=1e-6, groups=None):
    if t is None:
        raise ValueError("`t` is required to fit the model; pass the observed targets.")
    Phi, t = check_design(Phi, t)
    groups = _groups(groups, Phi.shape[1])
    gram = Phi.T @ Phi
    factor = G.low_rank_factor(gram)
    Phi, t = jnp.asarray(Phi), jnp.asarray(t)
    return RegressionData(
        Phi=Phi,
        t=t,
        gram=jnp.asarray(gram) if factor is None else None,  # the factor replaces it
        gram_factor=None if factor is None else jnp.asarray(factor),
        phi_t=Phi.T @ t,
        col_sq=jnp.sum(Phi**2, axis=0),
        groups=jnp.asarray(groups),
        group_sizes=jnp.asarray(np.bincount(groups), dtype=jnp.float64),
        a0=_scalar("a0", a0),
        b0=_scalar("b0", b0),
        e0=_scalar("e0", e0),
        f0=_scalar("f0", f0),
    )


def _regression_init(data: RegressionData) -> RegressionState:
    M = data.Phi.shape[1]
    rank = None if data.gram_factor is None else data.gram_factor.shape[1]
    return RegressionState(
        w=G.init_active_gaussian(M, rank),
        alpha_shape=jnp.full_like(data.group_sizes, data.a0),
        alpha_rate=jnp.full_like(data.group_sizes, data.b0),
        gamma_shape=data.e0,
        gamma_rate=data.f0,
    )


def _expected_square_error(state: RegressionState, data: RegressionData):
    """E||t - Phi w||^2 = ||t - Phi mu||^2 + tr(Phi^T Phi Sigma) (+ pruned variances)."""
    w = state.w
    residual = data.t - data.Phi @ w.mean
    if data.gram_factor is None:
        trace = jnp.sum(G.gather_gram(data.gram, w.index) * G.dense_covariance(w))
    else:  # tr(F F^T Sigma) = tr(F^T Sigma F), O(B r^2)
        rows = jnp.take(data.gram_factor, w.index, axis=0, mode="fill", fill_value=0.0)
        trace = jnp.sum(rows * G.covariance_matmul(w, rows))
    trace = trace + jnp.sum(data.col_sq * w.frozen_var)
    return residual @ residual + trace


def _regression_update(state: RegressionState, data: RegressionData) -> RegressionState:
    e_alpha = _prior_precision(state, data)
    e_gamma = expfam.gamma_mean(state.gamma_shape, state.gamma_rate)
    idx = state.w.index
    # q(w): Sigma = (diag E[alpha] + E[gamma] Phi^T Phi)^-1, mu = E[gamma] Sigma Phi^T t  (15)
    factor = None
    if data.gram_factor is not None:
        rows = jnp.take(data.gram_factor, idx, axis=0, mode="fill", fill_value=0.0)
        factor = jnp.sqrt(e_gamma) * rows
    w = G.update_active_gaussian(
        state.w,
        e_alpha,
        lambda: e_gamma * G.gather_gram(data.gram, idx),
        e_gamma * jnp.take(data.phi_t, idx, mode="fill", fill_value=0.0),
        e_gamma * data.col_sq,
        data_factor=factor,
    )
    # q(alpha): a_k = a0 + 1/2, b_k = b0 + E[w_k^2]/2  (16)
    alpha_shape, alpha_rate = _update_alpha(state, data, G.second_moments(w))
    state = state._replace(w=w, alpha_shape=alpha_shape, alpha_rate=alpha_rate)
    # q(gamma): e = e0 + N/2, f = f0 + E||t - Phi w||^2 / 2  (18)
    N = data.t.shape[0]
    return state._replace(
        gamma_shape=data.e0 + 0.5 * N,
        gamma_rate=data.f0 + 0.5 * _expected_square_error(state, data),
    )


def _regression_elbo(state: RegressionState, data: RegressionData):
    """ELBO (10) = E[ln p(t|w,gamma)] + E[ln p(w|alpha)] + E[ln p(alpha)] + E[ln p(gamma)] + H[q]."""
    e_gamma = expfam.gamma_mean(state.gamma_shape, state.gamma_rate)
    e_log_gamma = expfam.gamma_mean_log(state.gamma_shape, state.gamma_rate)
    N = data.t.shape[0]
    log_lik = N * expfam.normal_expected_log_density(0.0, e_gamma, e_log_gamma) - 0.5 * e_gamma * (
        _expected_square_error(state, data)
    )
    gamma_terms = expfam.gamma_expected_log_density(data.e0, data.f0, e_gamma, e_log_gamma) + (
        expfam.gamma_entropy(state.gamma_shape, state.gamma_rate)
    )
    return log_lik + gamma_terms + _alpha_terms(state, data, G.second_moments(state.w))


def _regression_relevance(state: RegressionState, data: RegressionData):
    e_gamma = expfam.gamma_mean(state.gamma_shape, state.gamma_rate)
    return _prior_precision(state, data), e_gamma * data.col_sq


def _regression_predict(state: RegressionState, data: RegressionData, Phi_new):
    """Predictive mean Phi_new mu and variance 1/E[gamma] + phi^T Sigma phi of a new observation."""
    Phi_new = jnp.asarray(check_matrix("Phi_new", Phi_new))
    if Phi_new.shape[1] != data.Phi.shape[1]:
        raise ValueError(
            f"`Phi_new` has {Phi_new.shape[1]} columns but the model was fitted with "
            f"{data.Phi.shape[1]} basis functions; evaluate the same basis at the new inputs."
        )
    mean, var = G.linear_moments(state.w, Phi_new)
    return mean, var + state.gamma_rate / state.gamma_shape


REGRESSION_GUIDE = ClosedFormGuide(
    prepare=_regression_prepare,
    init=_regression_init,
    update=_regression_update,
    elbo=_regression_elbo,
    guide=_make_guide(has_gamma=True),
    predict=_regression_predict,
    relevance=_regression_relevance,
    elbo_exact=None,
    bound="none",
)


# ----------------------------------------------------------------------------------------------
# Classification guide (Jaakkola-Jordan)
# ----------------------------------------------------------------------------------------------
class ClassificationData(NamedTuple):
    """Phi (N, M); t (N,) in {0, 1}; groups (M,); group_sizes (G,); a0, b0 scalars."""

    Phi: jax.Array
    t: jax.Array
    groups: jax.Array
    group_sizes: jax.Array
    a0: jax.Array
    b0: jax.Array


class ClassificationState(NamedTuple):
    """w: q(w); alpha_shape, alpha_rate (M,); xi (N,) the JJ variational parameters."""

    w: G.ActiveGaussian
    alpha_shape: jax.Array
    alpha_rate: jax.Array
    xi: jax.Array


def _classification_prepare(Phi, t=None, *, a0=1e-6, b0=1e-6, groups=None):
    if t is None:
        raise ValueError("`t` is required to fit the model; pass the observed labels (0 or 1).")
    Phi, t = check_design(Phi, t, binary=True)
    groups = _groups(groups, Phi.shape[1])
    sizes = jnp.asarray(np.bincount(groups), dtype=jnp.float64)
    return ClassificationData(
        jnp.asarray(Phi), jnp.asarray(t), jnp.asarray(groups), sizes, _scalar("a0", a0), _scalar("b0", b0)
    )


def _classification_init(data: ClassificationData) -> ClassificationState:
    N, M = data.Phi.shape
    return ClassificationState(
        w=G.init_active_gaussian(M),
        alpha_shape=jnp.full_like(data.group_sizes, data.a0),
        alpha_rate=jnp.full_like(data.group_sizes, data.b0),
        xi=jnp.ones(N),
    )


def _jj_data_precision_diag(Phi, xi):
    """h_k = 2 sum_n lambda(xi_n) phi_nk^2."""
    return 2.0 * (Phi**2).T @ jj_lambda(xi)


def _classification_update(state: ClassificationState, data: ClassificationData) -> ClassificationState:
    e_alpha = _prior_precision(state, data)
    lam = jj_lambda(state.xi)
    phi_a = G.gather_columns(data.Phi, state.w.index)
    # q(w): Sigma = (diag E[alpha] + 2 Phi^T Lambda Phi)^-1, mu = Sigma Phi^T (t - 1/2)  (29)
    w = G.update_active_gaussian(
        state.w,
        e_alpha,
        2.0 * phi_a.T @ (lam[:, None] * phi_a),
        phi_a.T @ (data.t - 0.5),
        _jj_data_precision_diag(data.Phi, state.xi),
    )
    alpha_shape, alpha_rate = _update_alpha(state, data, G.second_moments(w))
    # xi_n^2 = phi_n^T (Sigma + mu mu^T) phi_n  (30)
    mean, var = G.linear_moments(w, data.Phi)
    return ClassificationState(w, alpha_shape, alpha_rate, jnp.sqrt(mean**2 + var))


def _classification_elbo_with(log_lik_fn):
    def elbo(state: ClassificationState, data: ClassificationData):
        mean, var = G.linear_moments(state.w, data.Phi)
        signed = (2.0 * data.t - 1.0) * mean
        log_lik = jnp.sum(log_lik_fn(signed, mean, var, state.xi))
        return log_lik + _alpha_terms(state, data, G.second_moments(state.w))

    return elbo


# JJ bound (grid RVM eq. (27)): the objective the sweeps maximise
_classification_elbo = _classification_elbo_with(
    lambda signed, mean, var, xi: jj_log_sigmoid_bound(signed, mean**2 + var, xi)
)
# exact E_q[ln sigma(s x)] by one-dimensional quadrature
_classification_elbo_exact = _classification_elbo_with(
    lambda signed, mean, var, xi: expected_log_sigmoid(signed, var)
)


def _classification_relevance(state: ClassificationState, data: ClassificationData):
    return _prior_precision(state, data), _jj_data_precision_diag(data.Phi, state.xi)


def _classification_predict(state: ClassificationState, data: ClassificationData, Phi_new):
    """P(t = 1 | t_train) = E_q[sigma(phi^T w)], shape (N_new,), by quadrature."""
    Phi_new = jnp.asarray(check_matrix("Phi_new", Phi_new))
    if Phi_new.shape[1] != data.Phi.shape[1]:
        raise ValueError(
            f"`Phi_new` has {Phi_new.shape[1]} columns but the model was fitted with "
            f"{data.Phi.shape[1]} basis functions; evaluate the same basis at the new inputs."
        )
    mean, var = G.linear_moments(state.w, Phi_new)
    return expected_sigmoid(mean, var)


CLASSIFICATION_GUIDE = ClosedFormGuide(
    prepare=_classification_prepare,
    init=_classification_init,
    update=_classification_update,
    elbo=_classification_elbo,
    guide=_make_guide(has_gamma=False),
    predict=_classification_predict,
    relevance=_classification_relevance,
    elbo_exact=_classification_elbo_exact,
    bound="jaakkola-jordan",
)


# ----------------------------------------------------------------------------------------------
# NumPyro programs (the guides above are attached to them)
# ----------------------------------------------------------------------------------------------
@closed_form_guide(REGRESSION_GUIDE)
def regression(Phi, t=None, *, a0=1e-6, b0=1e-6, e0=1e-6, f0=1e-6, groups=None):
    """RVM regression: t ~ N(Phi w, 1/gamma), w_k ~ N(0, 1/alpha_k), Gamma(shape, rate) priors.

    Parameters
    ----------
    Phi : (N, M) array, design matrix (basis functions evaluated at the inputs).
    t : (N,) array or None, targets (None: prior predictive).
    a0, b0 : shape and rate of the Gamma prior on each alpha_k.
    e0, f0 : shape and rate of the Gamma prior on the noise precision gamma.
    groups : (M,) ints or None. Coefficient k has precision alpha[groups[k]]; None (the RVM)
        gives every coefficient its own precision, ``np.zeros(M, int)`` one shared precision
        (Bayesian ridge regression).

    Sites: ``alpha`` (G,) with G groups (G = M by default), ``w`` (M,), ``gamma`` (), ``t`` (N,).

    Prior predictive draws (``t=None``) need proper, not vague, hyperpriors: with the default
    a0 = b0 = 1e-6 almost every draw of alpha underflows to 0 in float64 (P(alpha < 1e-308) is
    about 0.999), so w and t come out infinite or NaN. Use e.g. a0 = b0 = 1, e0 = 2, f0 = 0.1.
    """
    N, M = jnp.shape(Phi)
    _, w = _ard_prior(M, a0, b0, groups)
    gamma = numpyro.sample("gamma", dist.Gamma(e0, f0))
    with numpyro.plate("data", N):
        numpyro.sample("t", dist.Normal(Phi @ w, jax.lax.rsqrt(gamma)), obs=t)


@closed_form_guide(CLASSIFICATION_GUIDE)
def classification(Phi, t=None, *, a0=1e-6, b0=1e-6, groups=None):
    """RVM classification: t_n ~ Bernoulli(logits = phi_n^T w), t_n in {0, 1}, ARD prior on w.

    ``groups`` as for :func:`regression`. Sites: ``alpha`` (G,), ``w`` (M,), ``t`` (N,).
    """
    N, M = jnp.shape(Phi)
    _, w = _ard_prior(M, a0, b0, groups)
    with numpyro.plate("data", N):
        numpyro.sample("t", dist.Bernoulli(logits=Phi @ w), obs=t)
