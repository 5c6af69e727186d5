"""Grid relevance vector machines for table-shaped features (Kropotov et al.).

Each object is a table X_n of shape (M1, M2) (or (M1, ..., MK)), flattened in C order to the
basis vector phi_n (weight k = i * M2 + j). One precision per row (alpha_i) and per column
(beta_j); the weight w_ij has precision

    kind="p" (p-grid, eq. (1)):  alpha_i * beta_j
    kind="s" (s-grid, eq. (4)):  alpha_i + beta_j

with alpha_i ~ Gamma(a0, b0), beta_j ~ Gamma(c0, d0) (shape, rate) and the likelihood of the RVM
(Gaussian noise with gamma ~ Gamma(e0, f0), or Bernoulli-logit with labels in {0, 1}). Beyond the
paper: tables with K >= 2 axes, one precision per index of each axis, combined by the product or
the sum rule; for K > 2 the precision sites are ``precision_0`` ... ``precision_{K-1}`` with
priors ``axis_priors=[(shape, rate), ...]``. K = 2 is exactly the paper's model.

Closed-form guide (this module: the product rule; the sum rule needs the log-sum bound (31) and
is not implemented yet): q(w) q(alpha) q(beta) q(gamma) (or xi), one sweep

    q(w)      Sigma = (diag(E alpha_i E beta_j) + E[gamma] Phi^T Phi)^-1, mu = ...     (15) / (29)
    q(alpha)  a_i = a0 + M2/2, b_i = b0 + 1/2 sum_j E[beta_j] E[w_ij^2]                 (16)
    q(beta)   c_j = c0 + M1/2, d_j = d0 + 1/2 sum_i E[alpha_i] E[w_ij^2] (new q(alpha))  (17)
    q(gamma)  (18), or xi (30)

and for K axes the same, axis after axis, each with the newest factors of the others. The ELBO
is (10) (with the JJ bound (27): (28)), evaluated with (19)-(26), where (23) is read as
E[beta_j] = c_j / d_j and (26) as E[ln gamma] = psi(e) - ln f (the printed versions are misprints).
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
from ppl_sbl import likelihoods as L
from ppl_sbl.bounds import expected_sigmoid
from ppl_sbl.inference import ClosedFormGuide, closed_form_guide
from ppl_sbl.validation import check_binary, check_matrix, check_positive, check_targets

__all__ = ["regression", "classification", "GridData", "GridRegressionState", "GridClassificationState",
           "REGRESSION_GUIDE", "CLASSIFICATION_GUIDE", "site_names"]


# ----------------------------------------------------------------------------------------------
# Shared pieces
# ----------------------------------------------------------------------------------------------
def site_names(num_axes: int):
    """``("alpha", "beta")`` for the paper's two axes, ``precision_k`` for K != 2."""
    return ("alpha", "beta") if num_axes == 2 else tuple(f"precision_{k}" for k in range(num_axes))


def _axis_priors(num_axes, a0, b0, c0, d0, axis_priors):
    if axis_priors is None:
        if num_axes != 2:
            raise ValueError(
                f"`X` has {num_axes} table axes; pass `axis_priors=[(shape, rate)] * {num_axes}` "
                "(a0, b0, c0, d0 name the priors of two axes only)."
            )
        return ((a0, b0), (c0, d0))
    priors = tuple(tuple(p) for p in axis_priors)
    if len(priors) != num_axes or any(len(p) != 2 for p in priors):
        raise ValueError(f"`axis_priors` must hold {num_axes} (shape, rate) pairs, one per table axis; got {axis_priors!r}.")
    return priors


def _check_kind(kind):
    if kind not in ("p", "s"):
        raise ValueError(f"`kind` must be 'p' (product of precisions) or 's' (sum); got {kind!r}.")


def _combine(precisions, kind):
    """The precision of every w, flattened in C order, from one precision vector per axis."""
    total = precisions[0]
    for p in precisions[1:]:
        total = total[..., None] * p if kind == "p" else total[..., None] + p
    return total.reshape(-1)


def _grid_prior(shape, kind, priors):
    precisions = [
        numpyro.sample(name, dist.Gamma(a, b).expand([m]).to_event(1))
        for name, m, (a, b) in zip(site_names(len(shape)), shape, priors)
    ]
    return numpyro.sample("w", dist.Normal(0.0, jax.lax.rsqrt(_combine(precisions, kind))).to_event(1))


# ----------------------------------------------------------------------------------------------
# NumPyro programs
# ----------------------------------------------------------------------------------------------
def _table_shape(X):
    shape = jnp.shape(X)
    if len(shape) < 3:
        raise ValueError(
            f"`X` must have shape (N, M1, M2, ...), one table per object; got shape {tuple(shape)}. "
            "For a flat design matrix use ppl_sbl.models.rvm."
        )
    return shape[0], tuple(shape[1:])


# ----------------------------------------------------------------------------------------------
# Closed-form guide (product rule)
# ----------------------------------------------------------------------------------------------
class GridData(NamedTuple):
    """lik: the likelihood's constants on the flattened table Phi (N, M1 * ... * MK);
    table_shape: static (M1, ..., MK) (a tuple, not traced); prior_shapes, prior_rates: the Gamma
    prior of each axis, tuples of scalars."""

    lik: object
    prior_shapes: tuple
    prior_rates: tuple
    table_shape: tuple

    @property
    def Phi(self):
        return self.lik.Phi

    @property
    def t(self):
        return self.lik.t


jax.tree_util.register_pytree_node(
    GridData,
    lambda d: ((d.lik, d.prior_shapes, d.prior_rates), d.table_shape),
    lambda shape, children: GridData(*children, shape),
)


class GridRegressionState(NamedTuple):
    """w: q(w); shapes, rates: tuples of (M_k,) Gamma parameters, one per axis; gamma_shape, gamma_rate."""

    w: G.ActiveGaussian
    shapes: tuple
    rates: tuple
    gamma_shape: jax.Array
    gamma_rate: jax.Array


class GridClassificationState(NamedTuple):
    """w: q(w); shapes, rates: one pair of (M_k,) Gamma parameters per axis; xi (N,)."""

    w: G.ActiveGaussian
    shapes: tuple
    rates: tuple
    xi: jax.Array


def _prepare(X, t, kind, priors, binary):
    _check_kind(kind)
    X = np.asarray(X, dtype=np.float64)
    N, shape = _table_shape(X)
    if kind == "s":
        raise NotImplementedError(
            "the closed-form guide of the s-grid (log-sum bound (31), updates (33)-(35)) is not "
            "implemented yet; the model itself runs under NUTS and SVI."
        )
    if t is None:
        raise ValueError("`t` is required to fit the model; pass the observed targets.")
    Phi = check_matrix("X", X.reshape(N, -1))
    t = check_binary("t", t, N, rows_name="X") if binary else check_targets("t", t, N, rows_name="X")
    names = site_names(len(shape))
    shapes = tuple(jnp.asarray(check_positive(f"{n} prior shape", a)) for n, (a, _) in zip(names, priors))
    rates = tuple(jnp.asarray(check_positive(f"{n} prior rate", b)) for n, (_, b) in zip(names, priors))
    return Phi, t, shapes, rates, shape


def _means(shapes, rates):
    return [expfam.gamma_mean(a, b) for a, b in zip(shapes, rates)]


def _prior_precision(state):
    return _combine(_means(state.shapes, state.rates), "p")


def _update_axes(state, data, w_second_moment):
    """Eq. (16)-(17) for every axis in turn, each with the newest factors of the others."""
    table = w_second_moment.reshape(data.table_shape)
    K = len(data.table_shape)
    means = _means(state.shapes, state.rates)
    shapes, rates = list(state.shapes), list(state.rates)
    size = int(np.prod(data.table_shape))
    for k in range(K):
        weighted = table
        for l in range(K):
            if l != k:
                bshape = [1] * K
                bshape[l] = data.table_shape[l]
                weighted = weighted * means[l].reshape(bshape)
        other = tuple(l for l in range(K) if l != k)
        shapes[k] = data.prior_shapes[k] + 0.5 * (size // data.table_shape[k]) * jnp.ones(data.table_shape[k])
        rates[k] = data.prior_rates[k] + 0.5 * jnp.sum(weighted, axis=other)
        means[k] = expfam.gamma_mean(shapes[k], rates[k])
    return tuple(shapes), tuple(rates)


def _prior_terms(state, data, w_second_moment):
    """E[ln p(w | precisions)] + sum over axes of E[ln p(precision)] + H[q(precision)] + H[q(w)]."""
    means = _means(state.shapes, state.rates)
    logs = [expfam.gamma_mean_log(a, b) for a, b in zip(state.shapes, state.rates)]
    log_p_w = jnp.sum(expfam.normal_expected_log_density(w_second_moment, _combine(means, "p"), _combine(logs, "s")))
    total = log_p_w + G.entropy(state.w)
    for a, b, a0, b0, m, lg in zip(state.shapes, state.rates, data.prior_shapes, data.prior_rates, means, logs):
        total = total + jnp.sum(expfam.gamma_expected_log_density(a0, b0, m, lg) + expfam.gamma_entropy(a, b))
    return total


def _init_axes(data):
    shapes = tuple(jnp.full(m, a) for m, a in zip(data.table_shape, data.prior_shapes))
    rates = tuple(jnp.full(m, b) for m, b in zip(data.table_shape, data.prior_rates))
    return shapes, rates


def _make_guide(has_gamma):
    def build(state):
        mean = state.w.mean
        scale_tril = jnp.linalg.cholesky(G.full_covariance(state.w))
        names = site_names(len(state.shapes))

        def guide(X, t=None, **hyper):
            for name, a, b in zip(names, state.shapes, state.rates):
                numpyro.sample(name, dist.Gamma(a, b).to_event(1))
            numpyro.sample("w", dist.MultivariateNormal(mean, scale_tril=scale_tril))
            if has_gamma:
                numpyro.sample("gamma", dist.Gamma(state.gamma_shape, state.gamma_rate))

        return guide

    return build


def _flat_new(X_new, data):
    X_new = np.asarray(X_new, dtype=np.float64)
    if X_new.ndim < 3 or tuple(X_new.shape[1:]) != tuple(data.table_shape):
        raise ValueError(f"`X_new` must have shape (N, {', '.join(map(str, data.table_shape))}); got {X_new.shape}.")
    return jnp.asarray(check_matrix("X_new", X_new.reshape(X_new.shape[0], -1)))


# regression ---------------------------------------------------------------------------------------
def _reg_prepare(X, t=None, *, kind="p", a0=1e-6, b0=1e-6, c0=1e-6, d0=1e-6, e0=1e-6, f0=1e-6, axis_priors=None):
    _check_kind(kind)
    _table_shape(np.asarray(X))
    priors = _axis_priors(len(np.shape(X)) - 1, a0, b0, c0, d0, axis_priors)
    Phi, t, shapes, rates, table = _prepare(X, t, kind, priors, binary=False)
    lik = L.prepare_gaussian(Phi, t, jnp.asarray(check_positive("e0", e0)), jnp.asarray(check_positive("f0", f0)))
    return GridData(lik, shapes, rates, table)


def _reg_init(data):
    shapes, rates = _init_axes(data)
    w = G.init_active_gaussian(data.Phi.shape[1], L.gaussian_rank(data.lik))
    return GridRegressionState(w, shapes, rates, data.lik.e0, data.lik.f0)


def _reg_update(state, data):
    w = L.gaussian_update_w(state.w, _prior_precision(state), state.gamma_shape, state.gamma_rate, data.lik)  # (15)
    shapes, rates = _update_axes(state, data, G.second_moments(w))  # (16), (17)
    gamma_shape, gamma_rate = L.gaussian_update_gamma(w, data.lik)  # (18)
    return GridRegressionState(w, shapes, rates, gamma_shape, gamma_rate)


def _reg_elbo(state, data):
    return L.gaussian_elbo_terms(state.w, state.gamma_shape, state.gamma_rate, data.lik) + _prior_terms(
        state, data, G.second_moments(state.w)
    )


def _reg_relevance(state, data):
    return _prior_precision(state), L.gaussian_data_precision(state.gamma_shape, state.gamma_rate, data.lik)


def _reg_predict(state, data, X_new):
    mean, var = G.linear_moments(state.w, _flat_new(X_new, data))
    return mean, var + state.gamma_rate / state.gamma_shape


REGRESSION_GUIDE = ClosedFormGuide(
    prepare=_reg_prepare, init=_reg_init, update=_reg_update, elbo=_reg_elbo, guide=_make_guide(True),
    predict=_reg_predict, relevance=_reg_relevance, elbo_exact=None, bound="none",
)


# classification -----------------------------------------------------------------------------------
def _clf_prepare(X, t=None, *, kind="p", a0=1e-6, b0=1e-6, c0=1e-6, d0=1e-6, axis_priors=None):
    _check_kind(kind)
    _table_shape(np.asarray(X))
    priors = _axis_priors(len(np.shape(X)) - 1, a0, b0, c0, d0, axis_priors)
    Phi, t, shapes, rates, table = _prepare(X, t, kind, priors, binary=True)
    return GridData(L.prepare_bernoulli(Phi, t), shapes, rates, table)


def _clf_init(data):
    shapes, rates = _init_axes(data)
    return GridClassificationState(G.init_active_gaussian(data.Phi.shape[1]), shapes, rates, jnp.ones(data.Phi.shape[0]))


def _clf_update(state, data):
    w = L.jj_update_w(state.w, _prior_precision(state), state.xi, data.lik)  # (29)
    shapes, rates = _update_axes(state, data, G.second_moments(w))  # (16), (17)
    return GridClassificationState(w, shapes, rates, L.jj_update_xi(w, data.lik))  # (30)


def _clf_elbo(state, data):
    return L.jj_elbo_terms(state.w, state.xi, data.lik) + _prior_terms(state, data, G.second_moments(state.w))


def _clf_elbo_exact(state, data):
    return L.bernoulli_exact_terms(state.w, data.lik) + _prior_terms(state, data, G.second_moments(state.w))


def _clf_relevance(state, data):
    return _prior_precision(state), L.jj_data_precision(state.xi, data.lik)


def _clf_predict(state, data, X_new):
    mean, var = G.linear_moments(state.w, _flat_new(X_new, data))
    return expected_sigmoid(mean, var)


CLASSIFICATION_GUIDE = ClosedFormGuide(
    prepare=_clf_prepare, init=_clf_init, update=_clf_update, elbo=_clf_elbo, guide=_make_guide(False),
    predict=_clf_predict, relevance=_clf_relevance, elbo_exact=_clf_elbo_exact, bound="jaakkola-jordan",
)


# ----------------------------------------------------------------------------------------------
# NumPyro programs (the guides above are attached to them)
# ----------------------------------------------------------------------------------------------
@closed_form_guide(REGRESSION_GUIDE)
def regression(X, t=None, *, kind="p", a0=1e-6, b0=1e-6, c0=1e-6, d0=1e-6, e0=1e-6, f0=1e-6, axis_priors=None):
    """Grid RVM regression: t ~ N(<X_n, W>, 1/gamma), W_ij ~ N(0, 1/(alpha_i beta_j)) (p) or
    N(0, 1/(alpha_i + beta_j)) (s).

    Parameters
    ----------
    X : (N, M1, M2) or (N, M1, ..., MK) array, one table of features per object (flattened in
        C order: weight k = i * M2 + j).
    t : (N,) targets or None (prior predictive).
    kind : "p" (product of precisions, eq. (1)) or "s" (sum, eq. (4)).
    a0, b0 / c0, d0 : Gamma(shape, rate) priors of the row precisions alpha / column precisions beta.
    e0, f0 : Gamma prior of the noise precision gamma.
    axis_priors : [(shape, rate), ...] one per axis, required for K != 2 axes.

    Sites: ``alpha`` (M1,), ``beta`` (M2,) (``precision_k`` for K != 2), ``w`` (M1 M2,), ``gamma``, ``t``.
    """
    _check_kind(kind)
    N, shape = _table_shape(X)
    w = _grid_prior(shape, kind, _axis_priors(len(shape), a0, b0, c0, d0, axis_priors))
    gamma = numpyro.sample("gamma", dist.Gamma(e0, f0))
    with numpyro.plate("data", N):
        numpyro.sample("t", dist.Normal(jnp.reshape(X, (N, -1)) @ w, jax.lax.rsqrt(gamma)), obs=t)


@closed_form_guide(CLASSIFICATION_GUIDE)
def classification(X, t=None, *, kind="p", a0=1e-6, b0=1e-6, c0=1e-6, d0=1e-6, axis_priors=None):
    """Grid RVM classification: t_n ~ Bernoulli(logits = <X_n, W>), t_n in {0, 1}; the grid
    prior of :func:`regression`. Sites: ``alpha``, ``beta`` (or ``precision_k``), ``w``, ``t``."""
    _check_kind(kind)
    N, shape = _table_shape(X)
    w = _grid_prior(shape, kind, _axis_priors(len(shape), a0, b0, c0, d0, axis_priors))
    with numpyro.plate("data", N):
        numpyro.sample("t", dist.Bernoulli(logits=jnp.reshape(X, (N, -1)) @ w), obs=t)
