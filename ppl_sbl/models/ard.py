"""The ARD pieces the relevance vector machines share (:mod:`ppl_sbl.models.rvm`,
:mod:`ppl_sbl.models.robust_rvm`): the hierarchical prior alpha_k ~ Gamma(a0, b0),
w_k | alpha_k ~ N(0, 1/alpha_k), the validated data, and the closed-form q(alpha) factor.

The equation numbers are those of the grid RVM paper (Kropotov et al., the gridRVM for
table-structured data) with a single column (M2 = 1, beta = 1), which are Bishop & Tipping's (2000) updates.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from ppl_sbl import expfam
from ppl_sbl import gaussian as G
from ppl_sbl.priors import check_rate
from ppl_sbl.validation import check_matrix, check_positive

__all__ = ["RVMData", "coefficient_groups", "ard_prior", "positive_scalar", "alpha_terms", "alpha_parts",
           "update_alpha",
           "prior_precision", "make_guide", "rvm_data", "start_alpha", "check_new_design",
           "check_new_args"]


def coefficient_groups(groups, M):
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


def ard_prior(M, a0, b0, groups):
    g = coefficient_groups(groups, M)
    alpha = numpyro.sample("alpha", dist.Gamma(a0, b0).expand([int(g.max()) + 1]).to_event(1))
    w = numpyro.sample("w", dist.Normal(0.0, jax.lax.rsqrt(alpha[g])).to_event(1))
    return alpha, w


def positive_scalar(name, value):
    return np.asarray(check_positive(name, value), dtype=np.float64)


def alpha_terms(state, data, w_second_moment):
    """E[ln p(w|alpha)] + E[ln p(alpha)] + H[q(w)] + H[q(alpha)]: the w and alpha terms of (10), the
    sum of :func:`alpha_parts`."""
    return sum(alpha_parts(state, data, w_second_moment).values())


def alpha_parts(state, data, w_second_moment):
    """The w and alpha terms of (10) as ELBO parts (:meth:`ppl_sbl.result.FitResult.elbo_parts`):
    ``-kl_w`` = E[ln p(w|alpha)] + H[q(w)] (the grid RVM paper's (20)-(22) with M2 = 1),
    ``-kl_alpha`` = E[(a0 - 1) ln alpha - b0 alpha] + H[q(alpha)] and ``log_norm_alpha`` =
    G (a0 ln b0 - ln Gamma(a0)) ((23), (25))."""
    e_alpha = expfam.gamma_mean(state.alpha_shape, state.alpha_rate)
    e_log_alpha = expfam.gamma_mean_log(state.alpha_shape, state.alpha_rate)
    log_p_w = jnp.sum(
        expfam.normal_expected_log_density(w_second_moment, e_alpha[data.groups], e_log_alpha[data.groups])
    )
    return {"-kl_w": log_p_w + G.entropy(state.w),
            **expfam.gamma_parts("alpha", data.a0, data.b0, state.alpha_shape, state.alpha_rate)}


def update_alpha(state, data, w_second_moment):
    """a_k = a0 + 1/2, b_k = b0 + E[w_k^2]/2 (grid RVM eq. (16) with M2 = 1, E[beta] = 1).

    With groups of coefficients sharing one precision: a_g = a0 + n_g/2,
    b_g = b0 + sum_{k in g} E[w_k^2]/2.
    """
    total = jax.ops.segment_sum(w_second_moment, data.groups, num_segments=data.group_sizes.shape[0])
    return data.a0 + 0.5 * data.group_sizes, data.b0 + 0.5 * total


def prior_precision(state, data):
    """E[alpha] of each coefficient, shape (M,)."""
    return expfam.gamma_mean(state.alpha_shape, state.alpha_rate)[data.groups]


def make_guide(has_gamma, extra_sites=None):
    """guide(state) for the ARD family: q(alpha) q(w) (q(gamma)), and ``extra_sites(state, Phi)``
    for the factors a derived model adds (e.g. the robust RVM's q(omega))."""

    def build(state):
        mean = state.w.mean
        scale_tril = jnp.linalg.cholesky(G.full_covariance(state.w))  # a Cholesky factor: not validated

        def guide(Phi, t=None, **hyper):
            numpyro.sample("alpha", dist.Gamma(state.alpha_shape, state.alpha_rate).to_event(1))
            numpyro.sample("w", dist.MultivariateNormal(mean, scale_tril=scale_tril, validate_args=False))
            if has_gamma:
                numpyro.sample("gamma", dist.Gamma(state.gamma_shape, state.gamma_rate))
            if extra_sites is not None:
                extra_sites(state, Phi)

        return guide

    return build


class RVMData(NamedTuple):
    """Validated arguments of ``regression`` or ``classification``: the likelihood's constants
    ``lik`` (:class:`ppl_sbl.likelihoods.GaussianLikelihood` or ``BernoulliLikelihood``),
    groups (M,) the precision group of each coefficient, group_sizes (G,), and a0, b0 the Gamma
    prior of the precisions."""

    lik: object
    groups: jax.Array
    group_sizes: jax.Array
    a0: jax.Array
    b0: jax.Array  # () or (G,)

    @property
    def Phi(self):
        return self.lik.Phi

    @property
    def t(self):
        return self.lik.t


def rvm_data(lik, groups, a0, b0):
    """``b0``: the rate of every precision's prior, a scalar or one per group (G,) (the defaults of
    :mod:`ppl_sbl.priors`, resolved by the caller)."""
    groups = coefficient_groups(groups, lik.Phi.shape[1])
    sizes = np.bincount(groups).astype(np.float64)
    return RVMData(lik, np.asarray(groups), sizes, positive_scalar("a0", a0), check_rate("b0", b0, sizes.shape[0]))


def start_alpha(data: RVMData, data_precision):
    """q(alpha) at the start: shape a0 + n_g/2 (its value after every sweep) and the mean
    :func:`ppl_sbl.gaussian.start_prior_precision` of ``data_precision`` (M,), the precision the
    data give each coefficient at the likelihood's start."""
    shape = data.a0 + 0.5 * data.group_sizes
    prior = G.start_prior_precision(data_precision, data.Phi.shape[0], data.groups, data.group_sizes.shape[0])
    return shape, shape / prior


def check_new_design(Phi_new, data):
    Phi_new = jnp.asarray(check_matrix("Phi_new", Phi_new))
    if Phi_new.shape[1] != data.Phi.shape[1]:
        raise ValueError(
            f"`Phi_new` has {Phi_new.shape[1]} columns but the model was fitted with "
            f"{data.Phi.shape[1]} basis functions; evaluate the same basis at the new inputs."
        )
    return Phi_new


def check_new_args(data, Phi_new):
    """``check_new`` of the RVM guides: ``Phi_new`` as a float64 matrix with the fit's columns."""
    return (check_new_design(Phi_new, data),)
