"""The variational relevance vector machine (Bishop & Tipping 2000), and its multinomial probit
form for several classes (Girolami & Rogers 2006).

Models (plain NumPyro programs; they run unchanged under NUTS, SVI and ``Predictive``, but for
``multiclass``'s auxiliary y, see below)::

    regression(Phi, t=None, *, a0=1e-6, b0=None, e0=1e-6, f0=None)
        alpha_k ~ Gamma(a0, b0_k),  w_k | alpha_k ~ N(0, 1/alpha_k),
        gamma ~ Gamma(e0, f0),    t_n | w, gamma ~ N(phi_n^T w, 1/gamma)
    classification(Phi, t=None, *, a0=1e-6, b0=None)
        alpha, w as above,        t_n | w ~ Bernoulli(logits = phi_n^T w),  t_n in {0, 1}
    multiclass(Phi, t=None, *, a0=1e-6, b0=None, num_classes=None)
        alpha_mc ~ Gamma(a0, b0), w_mc | alpha_mc ~ N(0, 1/alpha_mc)   (W is (M, C)),
        y_n | W ~ N(W^T phi_n, I_C),  t_n = argmax_c y_nc,  t_n in {0, ..., C-1}

Gamma is shape/rate. The default rates are on the data's scale (:mod:`ppl_sbl.priors`):
b0_k = a0 var(t) / mean_n phi_nk^2 and f0 = e0 var(t) for regression, b0_k = a0 / mean_n phi_nk^2
for the classifiers, so that a fit does not depend on the units of t or of the columns of Phi.
Closed-form guide: q(w) q(alpha) q(gamma) with q(w) = N(mu, Sigma),
q(alpha_k) = Gamma(a_k, b_k), q(gamma) = Gamma(e, f); for classification the Jaakkola-Jordan
bound with one xi_n per point. One sweep, in the equation numbers of the grid RVM paper
(Kropotov et al., the gridRVM for table-structured data) with a single
column (M2 = 1, beta = 1), which are Bishop & Tipping's (2000) updates:

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
The multiclass model is in :mod:`ppl_sbl.models.multiclass` (``rvm.multiclass`` is the same function).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from ppl_sbl import fast_ard
from ppl_sbl import gaussian as G
from ppl_sbl import likelihoods as L
from ppl_sbl.bounds import expected_sigmoid
from ppl_sbl.guide import ClosedFormGuide, closed_form_guide
from ppl_sbl.priors import noise_rate, weight_rate
from ppl_sbl.validation import check_design, check_positive

from .ard import (RVMData, alpha_parts, alpha_terms, ard_prior, check_new_args, coefficient_groups, make_guide, positive_scalar,
                  prior_precision, rvm_data, start_alpha, update_alpha)
from .multiclass import MULTICLASS_GUIDE, MulticlassData, MulticlassState, multiclass

__all__ = [
    "regression",
    "classification",
    "multiclass",
    "RVMData",
    "RegressionState",
    "ClassificationState",
    "MulticlassData",
    "MulticlassState",
    "REGRESSION_GUIDE",
    "CLASSIFICATION_GUIDE",
    "MULTICLASS_GUIDE",
]


# ----------------------------------------------------------------------------------------------
# Regression guide
# ----------------------------------------------------------------------------------------------
RegressionData = ClassificationData = RVMData


class RegressionState(NamedTuple):
    """w: q(w) (ActiveGaussian); alpha_shape, alpha_rate (G,); gamma_shape, gamma_rate ()."""

    w: G.ActiveGaussian
    alpha_shape: jax.Array
    alpha_rate: jax.Array
    gamma_shape: jax.Array
    gamma_rate: jax.Array


def _regression_priors(Phi, t, a0, b0, e0, f0, groups):
    """Validated (a0, b0, e0, f0), the rates that are ``None`` on the data's scale
    (:mod:`ppl_sbl.priors`)."""
    a0, e0 = check_positive("a0", a0), check_positive("e0", e0)
    g = None if groups is None else coefficient_groups(groups, Phi.shape[1])
    f0 = check_positive("f0", noise_rate(t, e0, f0))
    return a0, weight_rate(Phi, t, a0, b0, g), e0, f0


def _regression_prepare(Phi, t=None, *, a0=1e-6, b0=None, e0=1e-6, f0=None, groups=None):
    if t is None:
        raise ValueError("`t` is required to fit the model; pass the observed targets.")
    Phi, t = check_design(Phi, t)
    a0, b0, e0, f0 = _regression_priors(Phi, t, a0, b0, e0, f0, groups)
    return rvm_data(L.prepare_gaussian(Phi, t, positive_scalar("e0", e0), positive_scalar("f0", f0)), groups, a0, b0)


def _regression_init(data: RegressionData) -> RegressionState:
    """The start: E[gamma] = 10 / var(t) (:func:`ppl_sbl.likelihoods.start_noise_precision`) and
    E[alpha_k] = E[gamma] ||phi_k||^2 / N (the unit-information prior,
    :func:`ppl_sbl.gaussian.start_prior_precision`), both scaling with the data."""
    e_gamma = L.start_noise_precision(data.t)
    gamma_shape = data.lik.e0 + 0.5 * data.Phi.shape[0]
    alpha_shape, alpha_rate = start_alpha(data, e_gamma * data.lik.col_sq)
    return RegressionState(
        w=G.init_active_gaussian(data.Phi.shape[1], L.gaussian_rank(data.lik), factor=data.lik.gram_factor),
        alpha_shape=alpha_shape,
        alpha_rate=alpha_rate,
        gamma_shape=gamma_shape,
        gamma_rate=gamma_shape / e_gamma,
    )


def _regression_update(state: RegressionState, data: RegressionData) -> RegressionState:
    # q(w): Sigma = (diag E[alpha] + E[gamma] Phi^T Phi)^-1, mu = E[gamma] Sigma Phi^T t  (15)
    w = L.gaussian_update_w(state.w, prior_precision(state, data), state.gamma_shape, state.gamma_rate, data.lik)
    # q(alpha): a_k = a0 + 1/2, b_k = b0 + E[w_k^2]/2  (16)
    alpha_shape, alpha_rate = update_alpha(state, data, G.second_moments(w))
    # q(gamma): e = e0 + N/2, f = f0 + E||t - Phi w||^2 / 2  (18)
    gamma_shape, gamma_rate = L.gaussian_update_gamma(w, data.lik)
    return RegressionState(w, alpha_shape, alpha_rate, gamma_shape, gamma_rate)


def _regression_elbo(state: RegressionState, data: RegressionData):
    """ELBO (10) = E[ln p(t|w,gamma)] + E[ln p(w|alpha)] + E[ln p(alpha)] + E[ln p(gamma)] + H[q]."""
    return L.gaussian_elbo_terms(state.w, state.gamma_shape, state.gamma_rate, data.lik) + alpha_terms(
        state, data, G.second_moments(state.w)
    )


def _regression_elbo_parts(state: RegressionState, data: RegressionData):
    """The terms of (10): ``log_lik`` (19), ``-kl_w``, ``-kl_alpha``, ``log_norm_alpha``,
    ``-kl_gamma``, ``log_norm_gamma`` (:func:`~ppl_sbl.models.ard.alpha_parts`,
    :func:`ppl_sbl.likelihoods.gaussian_parts`)."""
    parts = L.gaussian_parts(state.w, state.gamma_shape, state.gamma_rate, data.lik)
    return {"log_lik": parts.pop("log_lik"), **alpha_parts(state, data, G.second_moments(state.w)), **parts}


def _regression_relevance(state: RegressionState, data: RegressionData):
    return prior_precision(state, data), L.gaussian_data_precision(state.gamma_shape, state.gamma_rate, data.lik)


def _regression_predict(state: RegressionState, data: RegressionData, Phi_new):
    """Predictive mean Phi_new mu and variance 1/E[gamma] + phi^T Sigma phi of a new observation
    (``Phi_new`` checked by :func:`check_new_args`)."""
    mean, var = G.linear_moments(state.w, Phi_new)
    return mean, var + state.gamma_rate / state.gamma_shape


def _fast_plan(Phi, factor, a0, data, groups, finish, **kw):
    """The fast schedule of ARD (:func:`ppl_sbl.fast_ard.schedule`) or, with ``groups``, of grouped
    precisions (:func:`ppl_sbl.fast_ard.group_schedule`), set up: a :class:`ppl_sbl.fast_ard.Plan`
    whose ``finish`` passes the fit and its q(alpha) (shape, rate) to ``finish(fit, shape, rate)``."""
    if groups is None:
        def done(fit):
            return finish(fit, *fast_ard.alpha_factors(fit, a0))

        return fast_ard.Plan(Phi, factor, dict(a0=a0, b0=np.asarray(data.b0), **kw), done)
    g = np.asarray(data.groups)
    shape = a0 + 0.5 * np.asarray(data.group_sizes)
    rates = np.broadcast_to(np.asarray(data.b0, dtype=np.float64), shape.shape)
    first = np.zeros(len(shape), dtype=np.intp)
    first[g[::-1]] = np.arange(len(g))[::-1]  # a coefficient of each group

    def grouped(fit):
        return finish(fit, shape, shape / np.asarray(fit.x)[first])

    return fast_ard.Plan(Phi, factor, dict(a0=a0, b0=rates[g], **kw), grouped,
                         run=lambda Phi, factor, **options: fast_ard.group_schedule(Phi, factor, g, **options))


def _compiled_option(compiled, groups):
    """The fast schedule's ``compiled`` keyword (:func:`ppl_sbl.fast_ard.schedule`): one precision per
    coefficient only."""
    if compiled and groups is not None:
        raise ValueError("`compiled=True` fits one precision per coefficient; with `groups=` use compiled=False.")
    return {"compiled": True} if compiled else {}


def _regression_plan(Phi, t=None, *, a0=1e-6, b0=None, e0=1e-6, f0=None, groups=None, tol=1e-9, max_passes=1000,
                     progress=None, vague_only=False, compiled=False):
    """The fast schedule (:func:`ppl_sbl.fast_ard.schedule`; with ``groups``,
    :func:`ppl_sbl.fast_ard.group_schedule`) with q(gamma) as the likelihood factor, on the targets
    in units of s = sqrt(f0 / e0) (where the noise prior's mean is 1), set up: a
    :class:`ppl_sbl.fast_ard.Plan`."""
    if t is None:
        raise ValueError("`t` is required to fit the model; pass the observed targets.")
    Phi, t = check_design(Phi, t)
    a0, b0, e0, f0 = _regression_priors(Phi, t, a0, b0, e0, f0, groups)
    data = rvm_data(L.prepare_gaussian(Phi, t, positive_scalar("e0", e0), positive_scalar("f0", f0), gram=False),
                    groups, a0, b0)
    s = math.sqrt(f0 / e0)
    noise = fast_ard.GaussianNoise(t / s, e0, e0)

    def finish(fit, shape, rate):
        state = RegressionState(fast_ard.active_gaussian(fit), shape, rate, np.float64(noise.e),
                                np.float64(noise.f * s * s))
        return data, state, fit

    return _fast_plan(Phi, noise, a0, data, groups, finish, tol=tol, max_passes=max_passes, progress=progress,
                      target_scale=s, vague_only=vague_only, **_compiled_option(compiled, groups))


_regression_fast = fast_ard.Planned(_regression_plan)


def _regression_unit_offset(data: RegressionData):
    """-N ln s with s = sqrt(f0 / e0): the ELBO's part that depends on the targets' units."""
    return -0.5 * data.Phi.shape[0] * jnp.log(data.lik.f0 / data.lik.e0)


REGRESSION_GUIDE = ClosedFormGuide(
    prepare=_regression_prepare,
    init=_regression_init,
    update=_regression_update,
    elbo=_regression_elbo,
    elbo_parts=_regression_elbo_parts,
    loo=lambda state, data: L.gaussian_loo(state.w, state.gamma_shape, state.gamma_rate, data.lik),
    guide=make_guide(has_gamma=True),
    predict=_regression_predict,
    check_new=check_new_args,
    relevance=_regression_relevance,
    elbo_exact=None,
    bound="none",
    fast=_regression_fast,
    fast_plan=_regression_plan,
    unit_offset=_regression_unit_offset,
)


# ----------------------------------------------------------------------------------------------
# Classification guide (Jaakkola-Jordan)
# ----------------------------------------------------------------------------------------------
class ClassificationState(NamedTuple):
    """w: q(w); alpha_shape, alpha_rate (G,); xi (N,) the JJ variational parameters."""

    w: G.ActiveGaussian
    alpha_shape: jax.Array
    alpha_rate: jax.Array
    xi: jax.Array


def _classification_rate(Phi, a0, b0, groups):
    """Validated (a0, b0), b0 = a0 / m_k where it is ``None`` (:mod:`ppl_sbl.priors`: labels have
    no units)."""
    a0 = check_positive("a0", a0)
    g = None if groups is None else coefficient_groups(groups, Phi.shape[1])
    return a0, weight_rate(Phi, None, a0, b0, g)


def _classification_prepare(Phi, t=None, *, a0=1e-6, b0=None, groups=None):
    if t is None:
        raise ValueError("`t` is required to fit the model; pass the observed labels (0 or 1).")
    Phi, t = check_design(Phi, t, binary=True)
    a0, b0 = _classification_rate(Phi, a0, b0, groups)
    return rvm_data(L.prepare_bernoulli(Phi, t), groups, a0, b0)


def _classification_init(data: ClassificationData) -> ClassificationState:
    """The start: xi = 1 and E[alpha_k] = h_k / N with h_k = 2 lambda(1) ||phi_k||^2 (the
    unit-information prior, :func:`ppl_sbl.gaussian.start_prior_precision`)."""
    N, M = data.Phi.shape
    xi = jnp.ones(N)
    alpha_shape, alpha_rate = start_alpha(data, L.jj_data_precision(xi, data.lik))
    return ClassificationState(
        w=G.init_active_gaussian(M, L.jj_rank(data.lik), factor=data.Phi.T),
        alpha_shape=alpha_shape,
        alpha_rate=alpha_rate,
        xi=xi,
    )


def _classification_update(state: ClassificationState, data: ClassificationData) -> ClassificationState:
    # q(w): Sigma = (diag E[alpha] + 2 Phi^T Lambda Phi)^-1, mu = Sigma Phi^T (t - 1/2)  (29)
    w = L.jj_update_w(state.w, prior_precision(state, data), state.xi, data.lik)
    alpha_shape, alpha_rate = update_alpha(state, data, G.second_moments(w))  # (16)
    # xi_n^2 = phi_n^T (Sigma + mu mu^T) phi_n  (30)
    return ClassificationState(w, alpha_shape, alpha_rate, L.jj_update_xi(w, data.lik))


def _classification_elbo(state: ClassificationState, data: ClassificationData):
    """The objective (28): the JJ bound (27) in place of the logistic likelihood."""
    return L.jj_elbo_terms(state.w, state.xi, data.lik) + alpha_terms(state, data, G.second_moments(state.w))


def _classification_elbo_exact(state: ClassificationState, data: ClassificationData):
    """The ELBO (10) of q itself, E_q[ln sigma] by quadrature."""
    return L.bernoulli_exact_terms(state.w, data.lik) + alpha_terms(state, data, G.second_moments(state.w))


def _classification_elbo_parts(state: ClassificationState, data: ClassificationData):
    """The terms of the ELBO (10) of q: ``log_lik`` = sum_n E_q[ln sigma(s_n phi_n^T w)] by
    quadrature, ``-kl_w``, ``-kl_alpha``, ``log_norm_alpha`` (:func:`~ppl_sbl.models.ard.alpha_parts`);
    they sum to ``elbo_exact``."""
    return {"log_lik": L.bernoulli_exact_terms(state.w, data.lik), **alpha_parts(state, data, G.second_moments(state.w))}


def _classification_relevance(state: ClassificationState, data: ClassificationData):
    return prior_precision(state, data), L.jj_data_precision(state.xi, data.lik)


def _classification_predict(state: ClassificationState, data: ClassificationData, Phi_new):
    """P(t = 1 | t_train) = E_q[sigma(phi^T w)], shape (N_new,), by quadrature (``Phi_new`` checked
    by :func:`check_new_args`)."""
    mean, var = G.linear_moments(state.w, Phi_new)
    return expected_sigmoid(mean, var)


def _classification_plan(Phi, t=None, *, a0=1e-6, b0=None, groups=None, tol=1e-9, max_passes=1000, progress=None,
                         vague_only=False, compiled=False):
    """The fast schedule (:func:`ppl_sbl.fast_ard.schedule`; with ``groups``,
    :func:`ppl_sbl.fast_ard.group_schedule`) with the JJ bound's xi as the likelihood factor, set up: a :class:`ppl_sbl.fast_ard.Plan`."""
    if t is None:
        raise ValueError("`t` is required to fit the model; pass the observed labels (0 or 1).")
    Phi, t = check_design(Phi, t, binary=True)
    a0, b0 = _classification_rate(Phi, a0, b0, groups)
    data = rvm_data(L.prepare_bernoulli(Phi, t), groups, a0, b0)
    bound = fast_ard.JaakkolaJordan(t)

    def finish(fit, shape, rate):
        return data, ClassificationState(fast_ard.active_gaussian(fit), shape, rate, np.asarray(bound.xi)), fit

    return _fast_plan(Phi, bound, a0, data, groups, finish, tol=tol, max_passes=max_passes, progress=progress,
                      vague_only=vague_only, **_compiled_option(compiled, groups))


_classification_fast = fast_ard.Planned(_classification_plan)


CLASSIFICATION_GUIDE = ClosedFormGuide(
    prepare=_classification_prepare,
    init=_classification_init,
    update=_classification_update,
    elbo=_classification_elbo,
    elbo_parts=_classification_elbo_parts,
    guide=make_guide(has_gamma=False),
    predict=_classification_predict,
    check_new=check_new_args,
    relevance=_classification_relevance,
    elbo_exact=_classification_elbo_exact,
    bound="jaakkola-jordan",
    fast=_classification_fast,
    fast_plan=_classification_plan,
)


# ----------------------------------------------------------------------------------------------
# NumPyro programs (the guides above are attached to them)
# ----------------------------------------------------------------------------------------------
@closed_form_guide(REGRESSION_GUIDE)
def regression(Phi, t=None, *, a0=1e-6, b0=None, e0=1e-6, f0=None, groups=None):
    """RVM regression: t ~ N(Phi w, 1/gamma), w_k ~ N(0, 1/alpha_k), Gamma(shape, rate) priors.

    Parameters
    ----------
    Phi : (N, M) array, design matrix (basis functions evaluated at the inputs).
    t : (N,) array or None, targets (None: prior predictive).
    a0, b0 : shape and rate of the Gamma prior on each alpha_k. ``b0=None`` (the default): one
        rate per coefficient on the data's scale, b0_k = a0 var(t) / mean_n phi_nk^2 (per group,
        with the group's mean of mean_n phi_nk^2), so that the fit does not depend on the units
        of t or of the columns (:mod:`ppl_sbl.priors`); a number or an array of G rates is used as given.
    e0, f0 : shape and rate of the Gamma prior on the noise precision gamma. ``f0=None`` (the
        default): f0 = e0 var(t), a prior mean E[gamma] = 1 / var(t); a number is used as given.
    groups : (M,) ints or None. Coefficient k has precision alpha[groups[k]]; None (the RVM)
        gives every coefficient its own precision, ``np.zeros(M, int)`` one shared precision
        (Bayesian ridge regression). The result's ``relevant`` judges each group as a whole
        (:attr:`ppl_sbl.CAVIResult.relevant`): a ridge fit whose precision the data support
        reports every coefficient it keeps as relevant.

    Sites: ``alpha`` (G,) with G groups (G = M by default), ``w`` (M,), ``gamma`` (), ``t`` (N,).

    Prior predictive draws (``t=None``) need proper, not vague, hyperpriors: with the default
    a0 = b0 = 1e-6 almost every draw of alpha underflows to 0 in float64 (P(alpha < 1e-308) is
    about 0.999), so w and t come out infinite or NaN. Use e.g. a0 = b0 = 1, e0 = 2, f0 = 0.1.
    Without ``t`` the default rates take var(t) = 1.
    """
    N, M = jnp.shape(Phi)
    g = None if groups is None else coefficient_groups(groups, M)
    _, w = ard_prior(M, a0, weight_rate(Phi, t, a0, b0, g), groups)
    gamma = numpyro.sample("gamma", dist.Gamma(e0, noise_rate(t, e0, f0)))
    with numpyro.plate("data", N):
        numpyro.sample("t", dist.Normal(Phi @ w, jax.lax.rsqrt(gamma)), obs=t)


@closed_form_guide(CLASSIFICATION_GUIDE)
def classification(Phi, t=None, *, a0=1e-6, b0=None, groups=None):
    """RVM classification: t_n ~ Bernoulli(logits = phi_n^T w), t_n in {0, 1}, ARD prior on w.

    ``t`` : (N,) labels 0 or 1 as numbers (or booleans); strings are refused, also ones that
    read as numbers such as "1" (map them, e.g. ``(labels == positive_label).astype(float)``, or
    use :class:`ppl_sbl.RVC`, which takes any labels and keeps them in ``classes_``).
    ``groups`` as for :func:`regression`. ``b0=None`` (the default): b0_k = a0 / mean_n phi_nk^2,
    on the scale of each column (labels have no units; :mod:`ppl_sbl.priors`).
    Sites: ``alpha`` (G,), ``w`` (M,), ``t`` (N,).
    """
    N, M = jnp.shape(Phi)
    g = None if groups is None else coefficient_groups(groups, M)
    _, w = ard_prior(M, a0, weight_rate(Phi, None, a0, b0, g), groups)
    with numpyro.plate("data", N):
        numpyro.sample("t", dist.Bernoulli(logits=Phi @ w), obs=t)
