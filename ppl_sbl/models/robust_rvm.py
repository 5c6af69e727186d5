"""The robust relevance vector machine (Hwang & Jeong 2015): Gamma-weighted likelihoods.

Each point's log-likelihood is multiplied by its own weight omega_n ~ Gamma(c, d) (eq. (3)), so
a point the fit cannot explain gets a small weight and its influence on the boundary is bounded
(Proposition 1). Models (plain NumPyro programs; they run unchanged under NUTS, SVI and
``Predictive``)::

    classification(Phi, t=None, *, a0=1e-5, b0=None, c0=2 - ln 2, d0=2 - ln 2)
        alpha_k ~ Gamma(a0, b0_k),  w_k | alpha_k ~ N(0, 1/alpha_k),  omega_n ~ Gamma(c0, d0),
        p(t | w, omega) = prod_n Bernoulli(t_n | sigma(phi_n^T w))^omega_n,  t_n in {0, 1}
    regression(Phi, t=None, *, a0=1e-6, b0=None, c0=2, d0=2, e0=1e-6, f0=None)     (beyond the paper)
        alpha, w as above, gamma ~ Gamma(e0, f0), omega_n ~ Gamma(c0, d0),
        t_n | w, gamma, omega_n ~ N(phi_n^T w, 1 / (gamma omega_n))
        (with c0 = d0 = nu/2, t_n is Student-t with nu degrees of freedom given w and gamma)

The paper's (a, b, c, d) are the keyword arguments a0, b0, c0, d0 (the names of the other RVM
models; a, b, c, d still work, with a FutureWarning). The default rates b0 and f0 are on the
data's scale (:mod:`ppl_sbl.priors`): b0_k = a0 v / mean_n phi_nk^2 and f0 = e0 v, v = var(t) for
regression and 1 for labels, so that a fit does not depend on the units of t or of the columns.

Gamma is shape/rate. The paper's symbols and the sites:

    paper                      site       here
    beta (coefficients)        ``w``      q(w) = N(mu, Sigma)              (7)
    alpha (precisions)         ``alpha``  q(alpha_k) = Gamma(a~, b~_k)     (8)
    w_i (point weights)        ``omega``  q(omega_n) = Gamma(c~, d~_n)     (9)
    t_i                        ``t``      observed, 0/1
    xi_i                       -          Jaakkola-Jordan parameter, state ``xi``

The weighting is a ``numpyro.handlers.scale`` with ``omega`` as the scale around the Bernoulli
site, so the trace shows the Bernoulli site and its weight, NUTS samples the same joint, and
``Trace_ELBO`` sees omega_n ln p(t_n | w). The weighted likelihood is unnormalised in t, as in
the paper (renormalising it would change the bound (17)). Under ``Predictive`` with ``t=None``
labels are drawn from the unweighted Bernoulli, and the pointwise log-likelihood exported for
``az.loo`` (``to_inference_data``) is the unweighted ln p(t_n | w).

Closed-form guide (classification), one sweep in the paper's order, from q(omega) at its prior, xi = 1
and E[alpha_k] at the unit-information prior (``ppl_sbl.gaussian.start_prior_precision``):

    Sigma = (diag E[alpha] + 2 sum_n E[omega_n] lambda(xi_n) phi_n phi_n^T)^-1       (10)
    mu = Sigma sum_n E[omega_n] (t_n - 1/2) phi_n                                    (11)
    a~ = a + 1/2,  b~_k = b + E[w_k^2]/2                                             (12)-(13)
    c~ = c,  d~_n = d - E_q(w)[ln h(w, xi_n)]                                         (14)-(15)
    xi_n^2 = phi_n^T E[w w^T] phi_n                                                   (16)

with ln h(w, xi) the Jaakkola-Jordan bound (5) on ln p(t_n | w). Eq. (15) has a misprint: its
first line (E[ln h], the expected bound) is right and agrees with (17); the second line's
ln E[h] is not what the first line says. The ELBO is (17): sum_n E[omega_n] E[ln h_n] plus the
prior and entropy terms; ``elbo_exact`` replaces E[ln h_n] by E_q[ln sigma(s_n phi_n^T w)]
(quadrature). Each point's E[omega_n] = c / d~_n is its **outlier score** (``result.outlier_score``):
small means down-weighted. Since ln h <= 0, d~_n >= d, so with c = d every weight lies in
[0, 1] (Proposition 2).

Regression guide (the same structure, all conjugate): with r_n = t_n - phi_n^T w,

    Sigma = (diag E[alpha] + E[gamma] Phi^T diag(E[omega]) Phi)^-1,
    mu = E[gamma] Sigma Phi^T (E[omega] t)
    a~, b~ as above;  c~_n = c + 1/2,  d~_n = d + E[gamma] E[r_n^2] / 2
    e = e0 + N/2,  f = f0 + sum_n E[omega_n] E[r_n^2] / 2

and the ELBO is exact (no local bound).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from ppl_sbl import expfam
from ppl_sbl import fast_ard
from ppl_sbl import gaussian as G
from ppl_sbl import likelihoods as L
from ppl_sbl.bounds import expected_sigmoid
from ppl_sbl.guide import ClosedFormGuide, closed_form_guide
from ppl_sbl.priors import noise_rate, weight_rate
from ppl_sbl.validation import check_design, check_positive

from .ard import (RVMData, alpha_parts, alpha_terms, ard_prior, check_new_design, positive_scalar, prior_precision, rvm_data,
                  start_alpha, update_alpha)
from .ard import make_guide as ard_guide

__all__ = [
    "classification",
    "regression",
    "outlier_score",
    "weighted_loss",
    "DEFAULT_R",
    "RobustData",
    "ClassificationState",
    "RegressionState",
    "CLASSIFICATION_GUIDE",
    "REGRESSION_GUIDE",
]

DEFAULT_R = 2.0 - math.log(2.0)
"""The paper's c = d = r = 2 - ln 2 (section 3.2): the r at which the weighted logistic loss
g(u) = r l(u) / (r + l(u)) changes fastest at the boundary u = 0, i.e. g''(0) = 0 (the paper
prints the first derivative, g'(0) = 0, which has no solution: g'(0) = -r^2 / (2 (r + ln 2)^2);
its second derivative vanishes exactly when r + ln 2 = 2). See :func:`weighted_loss`."""


class _Observed(NamedTuple):
    Phi: jax.Array
    t: jax.Array


class RobustData(NamedTuple):
    """Validated arguments: ``base`` (the RVM's data: likelihood constants, ARD groups, a, b),
    c, d the Gamma prior of every omega_n, and e0, f0 the prior of gamma (regression)."""

    base: RVMData
    c: jax.Array
    d: jax.Array
    e0: jax.Array
    f0: jax.Array

    @property
    def Phi(self):
        return self.base.lik.Phi

    @property
    def t(self):
        return self.base.lik.t


_RENAMED = {"a": "a0", "b": "b0", "c": "c0", "d": "d0"}


def _hyperparameters(hyper, old):
    """The hyperparameters under their names a0, b0, c0, d0 (``hyper``), with a value given under
    a deprecated name a, b, c, d (``old``, None where not given) taking its place."""
    import warnings

    hyper = dict(hyper)
    for name, value in old.items():
        if value is not None:
            new = _RENAMED[name]
            warnings.warn(f"the robust RVM's `{name}=` is deprecated; use `{new}=` (the names of the other "
                          "RVM models: a0, b0 the precisions' prior, c0, d0 the weights', e0, f0 the noise's).",
                          FutureWarning, stacklevel=4)
            hyper[new] = value
    return hyper


def _prepare(lik_factory, Phi, t, binary, a0, b0, c0, d0, e0, f0):
    """Validated data; the rates left ``None`` on the data's scale (:mod:`ppl_sbl.priors`):
    b0_k = a0 v / mean_n phi_nk^2 and f0 = e0 v with v = var(t) (regression) or 1 (labels)."""
    if t is None:
        what = "labels (0 or 1)" if binary else "targets"
        raise ValueError(f"`t` is required to fit the model; pass the observed {what}.")
    Phi, t = check_design(Phi, t, binary=binary)
    a0, e0 = check_positive("a0", a0), check_positive("e0", e0)
    scale = None if binary else t
    base = rvm_data(lik_factory(Phi, t), None, a0, weight_rate(Phi, scale, a0, b0))
    f0 = noise_rate(scale, e0, f0)
    return RobustData(base, positive_scalar("c0", c0), positive_scalar("d0", d0), positive_scalar("e0", e0),
                      positive_scalar("f0", f0))


def _omega_terms(shape, rate, data: RobustData):
    """E[ln p(omega)] + H[q(omega)] = -KL(q(omega) || p(omega)), summed over the points."""
    return sum(expfam.gamma_parts("omega", data.c, data.d, shape, rate).values())


def _omega_sites(state, Phi):
    with numpyro.plate("data", jnp.shape(Phi)[0]):
        numpyro.sample("omega", dist.Gamma(state.omega_shape, state.omega_rate))


def _make_guide(has_gamma):
    return ard_guide(has_gamma, extra_sites=_omega_sites)


def _omega_mean(state):
    return expfam.gamma_mean(state.omega_shape, state.omega_rate)


# ----------------------------------------------------------------------------------------------
# Classification (the paper's model)
# ----------------------------------------------------------------------------------------------
class ClassificationState(NamedTuple):
    """w: q(w); alpha_shape, alpha_rate (M,); omega_shape, omega_rate (N,); xi (N,)."""

    w: G.ActiveGaussian
    alpha_shape: jax.Array
    alpha_rate: jax.Array
    omega_shape: jax.Array
    omega_rate: jax.Array
    xi: jax.Array


def _classification_prepare(Phi, t=None, *, a0=1e-5, b0=None, c0=DEFAULT_R, d0=DEFAULT_R, a=None, b=None, c=None,
                            d=None):
    h = _hyperparameters(dict(a0=a0, b0=b0, c0=c0, d0=d0), dict(a=a, b=b, c=c, d=d))
    return _prepare(L.prepare_bernoulli, Phi, t, True, h["a0"], h["b0"], h["c0"], h["d0"], 1.0, 1.0)


def _classification_init(data: RobustData) -> ClassificationState:
    """The start: q(omega_n) at its prior, xi = 1, E[alpha_k] = h_k / N with h_k the data
    precision 2 E[omega] lambda(1) ||phi_k||^2 there (:func:`ppl_sbl.gaussian.start_prior_precision`)."""
    N, M = data.Phi.shape
    omega_shape, omega_rate, xi = jnp.full((N,), data.c), jnp.full((N,), data.d), jnp.ones(N)
    alpha_shape, alpha_rate = start_alpha(data.base, L.jj_data_precision(xi, data.base.lik, omega_shape / omega_rate))
    return ClassificationState(
        w=G.init_active_gaussian(M, L.jj_rank(data.base.lik), factor=data.Phi.T),
        alpha_shape=alpha_shape,
        alpha_rate=alpha_rate,
        omega_shape=omega_shape,
        omega_rate=omega_rate,
        xi=xi,
    )


def _classification_update(state: ClassificationState, data: RobustData) -> ClassificationState:
    lik = data.base.lik
    # q(w): (10)-(11), the JJ update with each point weighted by E[omega_n]
    w = L.jj_update_w(state.w, prior_precision(state, data.base), state.xi, lik, weights=_omega_mean(state))
    # q(alpha): (12)-(13)
    alpha_shape, alpha_rate = update_alpha(state, data.base, G.second_moments(w))
    # q(omega): c~ = c, d~_n = d - E[ln h(w, xi_n)]  (14)-(15), with the new q(w) and the current xi
    omega_rate = data.d - L.jj_pointwise(w, state.xi, lik)
    # xi: (16)
    xi = L.jj_update_xi(w, lik)
    return ClassificationState(w, alpha_shape, alpha_rate, jnp.full_like(omega_rate, data.c), omega_rate, xi)


def _classification_elbo(state: ClassificationState, data: RobustData):
    """The bound (17): sum_n E[omega_n] E[ln h(w, xi_n)] + prior and entropy terms."""
    return (
        L.jj_elbo_terms(state.w, state.xi, data.base.lik, weights=_omega_mean(state))
        + alpha_terms(state, data.base, G.second_moments(state.w))
        + _omega_terms(state.omega_shape, state.omega_rate, data)
    )


def _classification_elbo_exact(state: ClassificationState, data: RobustData):
    """The ELBO of q itself: sum_n E[omega_n] E_q[ln sigma(s_n phi_n^T w)] by quadrature."""
    return (
        L.bernoulli_exact_terms(state.w, data.base.lik, weights=_omega_mean(state))
        + alpha_terms(state, data.base, G.second_moments(state.w))
        + _omega_terms(state.omega_shape, state.omega_rate, data)
    )


def _classification_elbo_parts(state: ClassificationState, data: RobustData):
    """The terms of the ELBO of q: ``log_lik`` = sum_n E[omega_n] E_q[ln sigma(s_n phi_n^T w)] (by
    quadrature; the weighted likelihood of eq. (3), not normalised over the labels), ``-kl_w``,
    ``-kl_alpha``, ``log_norm_alpha``, ``-kl_omega``, ``log_norm_omega`` (the Gamma(c0, d0) prior of
    each weight); they sum to ``elbo_exact``."""
    return {"log_lik": L.bernoulli_exact_terms(state.w, data.base.lik, weights=_omega_mean(state)),
            **alpha_parts(state, data.base, G.second_moments(state.w)),
            **expfam.gamma_parts("omega", data.c, data.d, state.omega_shape, state.omega_rate)}


def _classification_relevance(state: ClassificationState, data: RobustData):
    return prior_precision(state, data.base), L.jj_data_precision(state.xi, data.base.lik, _omega_mean(state))


def _check_new_args(data: RobustData, Phi_new):
    """``check_new`` of the robust RVM guides: ``Phi_new`` as a float64 matrix with the fit's columns."""
    return (check_new_design(Phi_new, data.base),)


def _classification_predict(state: ClassificationState, data: RobustData, Phi_new):
    """P(t = 1 | t_train) = E_q[sigma(phi^T w)], shape (N_new,), by quadrature (unweighted;
    ``Phi_new`` checked by :func:`_check_new_args`)."""
    mean, var = G.linear_moments(state.w, Phi_new)
    return expected_sigmoid(mean, var)


def _extras(state, data):
    return {"outlier_score": _omega_mean(state)}


def _classification_plan(Phi, t=None, *, a0=1e-5, b0=None, c0=DEFAULT_R, d0=DEFAULT_R, a=None, b=None, c=None,
                         d=None, tol=1e-9, max_passes=1000, progress=None, vague_only=False, compiled=False):
    """The fast schedule (:func:`ppl_sbl.fast_ard.schedule`) with the weighted JJ bound, q(omega)
    and xi as the likelihood factor, set up: a :class:`ppl_sbl.fast_ard.Plan`."""
    h = _hyperparameters(dict(a0=a0, b0=b0, c0=c0, d0=d0), dict(a=a, b=b, c=c, d=d))
    data = _prepare(L.prepare_bernoulli, Phi, t, True, h["a0"], h["b0"], h["c0"], h["d0"], 1.0, 1.0)
    a0 = float(data.base.a0)
    factor = fast_ard.RobustJaakkolaJordan(np.asarray(data.t), float(data.c), float(data.d))

    def finish(fit):
        shape, rate = fast_ard.alpha_factors(fit, a0)
        state = ClassificationState(fast_ard.active_gaussian(fit), shape, rate, np.full(len(factor.t), data.c),
                                    np.asarray(factor.omega_rate), np.asarray(factor.xi))
        return data, state, fit

    return fast_ard.Plan(np.asarray(data.Phi), factor, dict(a0=a0, b0=np.asarray(data.base.b0), tol=tol,
                                                            max_passes=max_passes, progress=progress,
                                                            vague_only=vague_only, compiled=compiled), finish)


_classification_fast = fast_ard.Planned(_classification_plan)


CLASSIFICATION_GUIDE = ClosedFormGuide(
    prepare=_classification_prepare,
    init=_classification_init,
    update=_classification_update,
    elbo=_classification_elbo,
    elbo_parts=_classification_elbo_parts,
    likelihood_normalised=False,
    guide=_make_guide(has_gamma=False),
    predict=_classification_predict,
    check_new=_check_new_args,
    relevance=_classification_relevance,
    elbo_exact=_classification_elbo_exact,
    bound="jaakkola-jordan",
    extras=_extras,
    fast=_classification_fast,
    fast_plan=_classification_plan,
)


# ----------------------------------------------------------------------------------------------
# Regression (Student-t noise by Gamma-scaled precisions)
# ----------------------------------------------------------------------------------------------
class RegressionState(NamedTuple):
    """w: q(w); alpha_shape, alpha_rate (M,); omega_shape, omega_rate (N,); gamma_shape,
    gamma_rate ()."""

    w: G.ActiveGaussian
    alpha_shape: jax.Array
    alpha_rate: jax.Array
    omega_shape: jax.Array
    omega_rate: jax.Array
    gamma_shape: jax.Array
    gamma_rate: jax.Array


def _regression_prepare(Phi, t=None, *, a0=1e-6, b0=None, c0=2.0, d0=2.0, e0=1e-6, f0=None, a=None, b=None, c=None,
                        d=None):
    h = _hyperparameters(dict(a0=a0, b0=b0, c0=c0, d0=d0), dict(a=a, b=b, c=c, d=d))
    return _prepare(_Observed, Phi, t, False, h["a0"], h["b0"], h["c0"], h["d0"], e0, f0)


def _regression_init(data: RobustData) -> RegressionState:
    """The start: q(omega_n) at its prior, E[gamma] = 10 / var(t)
    (:func:`ppl_sbl.likelihoods.start_noise_precision`), E[alpha_k] = h_k / N with h_k =
    E[gamma] E[omega] ||phi_k||^2 (:func:`ppl_sbl.gaussian.start_prior_precision`)."""
    N, M = data.Phi.shape
    omega_shape, omega_rate = jnp.full((N,), data.c), jnp.full((N,), data.d)
    e_gamma = L.start_noise_precision(data.t)
    gamma_shape = data.e0 + 0.5 * N
    weights = e_gamma * omega_shape / omega_rate
    alpha_shape, alpha_rate = start_alpha(data.base, (data.Phi**2).T @ weights)
    return RegressionState(
        w=G.init_active_gaussian(M, L.diagonal_rank(data.Phi), factor=data.Phi.T),
        alpha_shape=alpha_shape,
        alpha_rate=alpha_rate,
        omega_shape=omega_shape,
        omega_rate=omega_rate,
        gamma_shape=gamma_shape,
        gamma_rate=gamma_shape / e_gamma,
    )


def _square_errors(w, data):
    """E[r_n^2] = (t_n - phi_n^T mu)^2 + phi_n^T Sigma phi_n, shape (N,)."""
    mean, var = L.training_moments(w, data.Phi)
    return (data.t - mean) ** 2 + var


def _regression_update(state: RegressionState, data: RobustData) -> RegressionState:
    e_gamma = expfam.gamma_mean(state.gamma_shape, state.gamma_rate)
    weights = e_gamma * _omega_mean(state)
    w = L.weighted_update_w(state.w, prior_precision(state, data.base), weights, weights * data.t, data.Phi)
    alpha_shape, alpha_rate = update_alpha(state, data.base, G.second_moments(w))
    sq = _square_errors(w, data)
    # the Gamma factors in the order the model declares them (gamma, then omega), as derived CAVI does
    gamma_shape = data.e0 + 0.5 * sq.shape[0]
    gamma_rate = data.f0 + 0.5 * jnp.sum(_omega_mean(state) * sq)
    e_gamma = expfam.gamma_mean(gamma_shape, gamma_rate)
    omega_shape = jnp.full_like(sq, data.c + 0.5)
    omega_rate = data.d + 0.5 * e_gamma * sq
    return RegressionState(w, alpha_shape, alpha_rate, omega_shape, omega_rate, gamma_shape, gamma_rate)


def _regression_elbo(state: RegressionState, data: RobustData):
    """E[ln p(t | w, gamma, omega)] + E[ln p(w|alpha)] + E[ln p(alpha)] + E[ln p(omega)]
    + E[ln p(gamma)] + H[q], every term exact: the sum of :func:`_regression_elbo_parts`."""
    return sum(_regression_elbo_parts(state, data).values())


def _regression_elbo_parts(state: RegressionState, data: RobustData):
    """The terms of the ELBO: ``log_lik`` = E[ln p(t | w, gamma, omega)] (t_n ~
    N(phi_n^T w, 1 / (gamma omega_n)), a normalised Student-t mixture), ``-kl_w``, ``-kl_alpha``,
    ``log_norm_alpha``, ``-kl_gamma``, ``log_norm_gamma``, ``-kl_omega``, ``log_norm_omega``."""
    e_gamma = expfam.gamma_mean(state.gamma_shape, state.gamma_rate)
    e_log_gamma = expfam.gamma_mean_log(state.gamma_shape, state.gamma_rate)
    e_log_omega = expfam.gamma_mean_log(state.omega_shape, state.omega_rate)
    log_lik = jnp.sum(expfam.normal_expected_log_density(
        _square_errors(state.w, data), e_gamma * _omega_mean(state), e_log_gamma + e_log_omega))
    return {"log_lik": log_lik, **alpha_parts(state, data.base, G.second_moments(state.w)),
            **expfam.gamma_parts("gamma", data.e0, data.f0, state.gamma_shape, state.gamma_rate),
            **expfam.gamma_parts("omega", data.c, data.d, state.omega_shape, state.omega_rate)}


def _regression_relevance(state: RegressionState, data: RobustData):
    weights = expfam.gamma_mean(state.gamma_shape, state.gamma_rate) * _omega_mean(state)
    return prior_precision(state, data.base), (data.Phi**2).T @ weights


def _regression_predict(state: RegressionState, data: RobustData, Phi_new):
    """Predictive mean Phi_new mu and the variance phi^T Sigma phi + E[1/(gamma omega)] of a new
    observation whose weight is drawn from the prior (E[1/omega] = d/(c-1) for c > 1; for c <= 1
    the predictive variance is infinite; ``Phi_new`` checked by :func:`_check_new_args`)."""
    mean, var = G.linear_moments(state.w, Phi_new)
    e_inv_gamma = state.gamma_rate / (state.gamma_shape - 1.0)
    e_inv_omega = jnp.where(data.c > 1.0, data.d / (data.c - 1.0), jnp.inf)
    return mean, var + e_inv_gamma * e_inv_omega


def _regression_plan(Phi, t=None, *, a0=1e-6, b0=None, c0=2.0, d0=2.0, e0=1e-6, f0=None, a=None, b=None, c=None,
                     d=None, tol=1e-9, max_passes=1000, progress=None, vague_only=False, compiled=False):
    """The fast schedule (:func:`ppl_sbl.fast_ard.schedule`) with q(gamma) and q(omega) as the
    likelihood factor, on the targets in units of s = sqrt(f0 / e0) (where the noise prior's mean
    is 1), set up: a :class:`ppl_sbl.fast_ard.Plan`."""
    h = _hyperparameters(dict(a0=a0, b0=b0, c0=c0, d0=d0), dict(a=a, b=b, c=c, d=d))
    data = _prepare(_Observed, Phi, t, False, h["a0"], h["b0"], h["c0"], h["d0"], e0, f0)
    a0, e0 = float(data.base.a0), float(data.e0)
    s = math.sqrt(float(data.f0) / e0)
    factor = fast_ard.RobustGaussianNoise(np.asarray(data.t) / s, float(data.c), float(data.d), e0, e0)

    def finish(fit):
        shape, rate = fast_ard.alpha_factors(fit, a0)
        state = RegressionState(fast_ard.active_gaussian(fit), shape, rate, np.asarray(factor.omega_shape),
                                np.asarray(factor.omega_rate), np.float64(factor.e), np.float64(factor.f * s * s))
        return data, state, fit

    return fast_ard.Plan(np.asarray(data.Phi), factor, dict(a0=a0, b0=np.asarray(data.base.b0), tol=tol,
                                                            max_passes=max_passes, progress=progress, target_scale=s,
                                                            vague_only=vague_only, compiled=compiled), finish)


_regression_fast = fast_ard.Planned(_regression_plan)


def _regression_unit_offset(data: RobustData):
    """-N ln s with s = sqrt(f0 / e0): the ELBO's part that depends on the targets' units."""
    return -0.5 * data.Phi.shape[0] * jnp.log(data.f0 / data.e0)


REGRESSION_GUIDE = ClosedFormGuide(
    prepare=_regression_prepare,
    init=_regression_init,
    update=_regression_update,
    elbo=_regression_elbo,
    elbo_parts=_regression_elbo_parts,
    guide=_make_guide(has_gamma=True),
    predict=_regression_predict,
    check_new=_check_new_args,
    relevance=_regression_relevance,
    elbo_exact=None,
    bound="none",
    extras=_extras,
    fast=_regression_fast,
    fast_plan=_regression_plan,
    unit_offset=_regression_unit_offset,
)


# ----------------------------------------------------------------------------------------------
# NumPyro programs
# ----------------------------------------------------------------------------------------------
@closed_form_guide(CLASSIFICATION_GUIDE)
def classification(Phi, t=None, *, a0=1e-5, b0=None, c0=DEFAULT_R, d0=DEFAULT_R, a=None, b=None, c=None, d=None):
    """Robust RVM classification (Hwang & Jeong 2015, eq. (3), (6)).

    Parameters
    ----------
    Phi : (N, M) design matrix (include a bias column yourself, e.g. ``basis.rbf(..., bias=True)``).
    t : (N,) labels in {0, 1}, or None (labels drawn from the unweighted Bernoulli). Numbers
        only: strings are refused, also "0" and "1"; :class:`ppl_sbl.RVC` takes any labels.
    a0, b0 : Gamma(shape, rate) prior of each precision alpha_k (paper: a = b = 1e-5,
        non-informative). ``b0=None`` (the default): b0_k = a0 / mean_n phi_nk^2, on the scale of
        each column, so that the fit does not depend on the columns' units (:mod:`ppl_sbl.priors`);
        a number or M rates are used as given.
    c0, d0 : Gamma(shape, rate) prior of each point weight omega_n (the paper's c, d); c0 = d0
        keeps every E[omega_n] in [0, 1] (Proposition 2), the paper's choice is c = d = 2 - ln 2
        (section 3.2).
    a, b, c, d : deprecated names of a0, b0, c0, d0.

    Sites: ``alpha`` (M,), ``w`` (M,), ``omega`` (N,), ``t`` (N,) (scaled by ``omega``).
    """
    h = _hyperparameters(dict(a0=a0, b0=b0, c0=c0, d0=d0), dict(a=a, b=b, c=c, d=d))
    N, M = jnp.shape(Phi)
    _, w = ard_prior(M, h["a0"], weight_rate(Phi, None, h["a0"], h["b0"]), None)
    with numpyro.plate("data", N):
        omega = numpyro.sample("omega", dist.Gamma(h["c0"], h["d0"]))
        with numpyro.handlers.scale(scale=omega):
            numpyro.sample("t", dist.Bernoulli(logits=Phi @ w), obs=t)


@closed_form_guide(REGRESSION_GUIDE)
def regression(Phi, t=None, *, a0=1e-6, b0=None, c0=2.0, d0=2.0, e0=1e-6, f0=None, a=None, b=None, c=None, d=None):
    """Robust RVM regression: t_n ~ N(phi_n^T w, 1/(gamma omega_n)), omega_n ~ Gamma(c0, d0).

    Integrating omega_n out gives Student-t noise (nu = 2 c0 degrees of freedom when c0 = d0), so
    gross outliers get small E[omega_n] (``result.outlier_score``) instead of pulling the fit.
    ``a0, b0`` the precision prior, ``e0, f0`` the noise-precision prior, as for
    :func:`ppl_sbl.models.rvm.regression`: by default on the data's scale, b0_k = a0 var(t) /
    mean_n phi_nk^2 and f0 = e0 var(t), so that the fit does not depend on the units of t or of
    the columns (:mod:`ppl_sbl.priors`). ``a, b, c, d``: deprecated names of a0, b0, c0, d0.

    Sites: ``alpha`` (M,), ``w`` (M,), ``gamma`` (), ``omega`` (N,), ``t`` (N,).
    """
    h = _hyperparameters(dict(a0=a0, b0=b0, c0=c0, d0=d0), dict(a=a, b=b, c=c, d=d))
    N, M = jnp.shape(Phi)
    _, w = ard_prior(M, h["a0"], weight_rate(Phi, t, h["a0"], h["b0"]), None)
    gamma = numpyro.sample("gamma", dist.Gamma(e0, noise_rate(t, e0, f0)))
    with numpyro.plate("data", N):
        omega = numpyro.sample("omega", dist.Gamma(h["c0"], h["d0"]))
        numpyro.sample("t", dist.Normal(Phi @ w, jax.lax.rsqrt(gamma * omega)), obs=t)


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------
def outlier_score(result) -> np.ndarray:
    """E[omega_n] of every training point under q: the weight its likelihood term gets (small:
    treated as an outlier). The same as ``result.outlier_score``."""
    return np.asarray(_omega_mean(result.state))


def weighted_loss(u, r=DEFAULT_R):
    """The weighted logistic loss r l(u) / (r + l(u)) of section 3.2, l(u) = ln(1 + e^-u) at
    margin u = (2t - 1) f: what a point costs once its weight E[omega] ~ r / (r + l(u)) is
    plugged in (Fig. 2). Bounded by r (Proposition 1)."""
    loss = np.logaddexp(0.0, -np.asarray(u, dtype=float))
    return r * loss / (r + loss)
