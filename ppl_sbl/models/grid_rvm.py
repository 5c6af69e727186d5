"""Grid relevance vector machines for table-shaped features (Kropotov, Vetrov, Wolf & Hassner,
"Variational relevance vector machine for tabular data", ACML 2010; equation numbers are theirs).

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

Closed-form guides: q(w) q(alpha) q(beta) q(gamma) (or xi), one sweep

    q(w)      Sigma = (diag(P) + E[gamma] Phi^T Phi)^-1, mu = E[gamma] Sigma Phi^T t      (15)
              (classification: 2 Phi^T Lambda(xi) Phi and mu = Sigma Phi^T (t - 1/2), (29)),
              P_ij = E[alpha_i] E[beta_j] (p) or E[alpha_i] + E[beta_j] (s)
    p-grid    a_i = a0 + M2/2, b_i = b0 + 1/2 sum_j E[beta_j] E[w_ij^2]                (16)
              c_j = c0 + M1/2, d_j = d0 + 1/2 sum_i E[alpha_i] E[w_ij^2] (new q(alpha))  (17)
    s-grid    a_i = a0 + 1/2 sum_j r_ij, b_i = b0 + 1/2 sum_j E[w_ij^2]                 (33)
              c_j = c0 + 1/2 sum_i (1 - r_ij), d_j = d0 + 1/2 sum_i E[w_ij^2]           (34)
              with r_ij = eta_ij / (eta_ij + zeta_ij)
    q(gamma)  (18), or xi (30)
    s-grid    eta_ij = exp(E[ln alpha_i]), zeta_ij = exp(E[ln beta_j])                  (35)

and for K axes the same, axis after axis, each with the newest factors of the others (for the
sum rule with r_k = eta_k / sum_l eta_l). The ELBO is (10) (with the JJ bound (27): (28); for the
s-grid with the log-sum bound (31): (32)), evaluated with (19)-(26), where (23) is read as
E[beta_j] = c_j / d_j and (26) as E[ln gamma] = psi(e) - ln f (the printed versions are
misprints). The sweeps start from the precision factors that match each cell's unit-information
prior (``_init_axes``; the s-grid's eta = zeta there, responsibilities 1/2, as the paper's eta =
zeta = 1); since both that start and (35) depend on one index only, eta and zeta are stored as one
vector per axis (``log_eta``). ``elbo_exact`` replaces
each local bound by the exact expectation (E[ln(alpha_i + beta_j)] by a one-dimensional
integral, see :func:`ppl_sbl.bounds.expected_log_sum_gamma`), and ``result.bound_gaps`` says how
many nats each bound loses.

Under the sum rule a row (or column) can hand all of its responsibility to the other axis:
r_ij -> 0 for every j leaves q(alpha_i) = Gamma(a0, b_i) with E[alpha_i] ~ a0 / b_i ~ 0, i.e.
the precision of w_ij is beta_j alone. That is a legitimate fixed point, but with a0 = 1e-6
draws of that factor are exact zeros in float64, so Monte Carlo checks need larger prior shapes.
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
from ppl_sbl import likelihoods as L
from ppl_sbl.bounds import expected_log_sum_gamma, expected_sigmoid, log_sum_bound
from ppl_sbl.guide import ClosedFormGuide, closed_form_guide
from ppl_sbl.priors import noise_rate, target_spread
from ppl_sbl.validation import check_binary, check_matrix, check_numeric, check_positive, check_targets

__all__ = ["regression", "classification", "GridData", "GridRegressionState", "GridClassificationState",
           "REGRESSION_GUIDE", "CLASSIFICATION_GUIDE", "S_REGRESSION_GUIDE", "S_CLASSIFICATION_GUIDE",
           "site_names"]


# ----------------------------------------------------------------------------------------------
# Shared pieces
# ----------------------------------------------------------------------------------------------
def site_names(num_axes: int):
    """``("alpha", "beta")`` for the paper's two axes, ``precision_k`` for K != 2."""
    return ("alpha", "beta") if num_axes == 2 else tuple(f"precision_{k}" for k in range(num_axes))


def _axis_priors(num_axes, a0, b0, c0, d0, axis_priors, X=None, t=None, kind="p"):
    """The (shape, rate) of each axis. Rates left ``None`` are on the data's scale
    (:mod:`ppl_sbl.priors`): with v = var(t) (1 for labels, ``t=None``) and m the mean square of
    the table's entries, the product rule puts the scale on the rows, b0 = a0 v / m and d0 = c0
    (E[alpha_i beta_j] = m / v), the sum rule on both, b0 = a0 v / m and d0 = c0 v / m."""
    if axis_priors is None:
        if num_axes != 2:
            raise ValueError(
                f"`X` has {num_axes} table axes; pass `axis_priors=[(shape, rate)] * {num_axes}` "
                "(a0, b0, c0, d0 name the priors of two axes only)."
            )
        if b0 is None or d0 is None:
            scale = target_spread(t) / jnp.maximum(jnp.mean(jnp.square(jnp.asarray(X, dtype=jnp.float64))), 1e-300)
            b0 = a0 * scale if b0 is None else b0
            d0 = (c0 * scale if kind == "s" else c0) if d0 is None else d0
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
    prior_shapes, prior_rates: the Gamma prior of each axis, tuples of scalars; table_shape:
    static (M1, ..., MK); kind: static "p" or "s"."""

    lik: object
    prior_shapes: tuple
    prior_rates: tuple
    table_shape: tuple
    kind: str = "p"

    @property
    def Phi(self):
        return self.lik.Phi

    @property
    def t(self):
        return self.lik.t


jax.tree_util.register_pytree_node(
    GridData,
    lambda d: ((d.lik, d.prior_shapes, d.prior_rates), (d.table_shape, d.kind)),
    lambda static, children: GridData(*children, *static),
)


class GridRegressionState(NamedTuple):
    """w: q(w); shapes, rates: tuples of (M_k,) Gamma parameters, one per axis; gamma_shape,
    gamma_rate; log_eta: s-grid only, one (M_k,) vector of ln eta per axis (eta_ij = eta_i,
    zeta_ij = zeta_j: the start and update (35) both depend on one index only),
    an empty tuple for the p-grid."""

    w: G.ActiveGaussian
    shapes: tuple
    rates: tuple
    gamma_shape: jax.Array
    gamma_rate: jax.Array
    log_eta: tuple = ()


class GridClassificationState(NamedTuple):
    """w: q(w); shapes, rates: one pair of (M_k,) Gamma parameters per axis; xi (N,); log_eta as
    in :class:`GridRegressionState`."""

    w: G.ActiveGaussian
    shapes: tuple
    rates: tuple
    xi: jax.Array
    log_eta: tuple = ()


def _prepare(X, t, kind, priors, binary):
    _check_kind(kind)
    X = check_numeric("X", X)
    N, shape = _table_shape(X)
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


def _mean_logs(shapes, rates):
    return [expfam.gamma_mean_log(a, b) for a, b in zip(shapes, rates)]


def _along(vector, axis, table_shape):
    """A per-index vector of one axis, shaped to broadcast against the table."""
    shape = [1] * len(table_shape)
    shape[axis] = table_shape[axis]
    return vector.reshape(shape)


def _prior_precision(state, data):
    """E[precision of w_k] per cell: prod_k E[x_k] (p) or sum_k E[x_k] (s), flattened in C order."""
    return _combine(_means(state.shapes, state.rates), data.kind)


def _log_sum(state, data, exact=False):
    """Per cell: the log-sum bound (31) on E[ln sum_k x_k] and the responsibilities r_k
    (s-grid), or with ``exact`` the quadrature value of E[ln sum_k x_k] itself."""
    ts = data.table_shape
    if exact:
        shapes = [_along(a, k, ts) for k, a in enumerate(state.shapes)]
        rates = [_along(b, k, ts) for k, b in enumerate(state.rates)]
        return expected_log_sum_gamma(shapes, rates), None
    logs = [_along(m, k, ts) for k, m in enumerate(_mean_logs(state.shapes, state.rates))]
    log_etas = [_along(e, k, ts) for k, e in enumerate(state.log_eta)]
    value, r = log_sum_bound(logs, log_etas)
    return jnp.broadcast_to(value, ts), [jnp.broadcast_to(rk, ts) for rk in r]


def _update_axes(state, data, w_second_moment):
    """p-grid (16)-(17) / s-grid (33)-(34) for every axis in turn, each with the newest factors
    of the others (the s-grid updates need only the responsibilities r_k = eta_k / sum eta)."""
    ts = data.table_shape
    table = w_second_moment.reshape(ts)
    K = len(ts)
    size = int(np.prod(ts))
    shapes, rates = list(state.shapes), list(state.rates)
    if data.kind == "s":
        _, r = _log_sum(state, data)
    means = _means(state.shapes, state.rates)
    for k in range(K):
        other = tuple(l for l in range(K) if l != k)
        if data.kind == "p":
            weighted = table
            for l in other:
                weighted = weighted * _along(means[l], l, ts)
            shapes[k] = data.prior_shapes[k] + 0.5 * (size // ts[k]) * jnp.ones(ts[k])
        else:
            weighted = table
            shapes[k] = data.prior_shapes[k] + 0.5 * jnp.sum(r[k], axis=other)
        rates[k] = data.prior_rates[k] + 0.5 * jnp.sum(weighted, axis=other)
        means[k] = expfam.gamma_mean(shapes[k], rates[k])
    return tuple(shapes), tuple(rates)


def _update_eta(shapes, rates, data):
    """Eq. (35): eta_ij = exp(E[ln alpha_i]), zeta_ij = exp(E[ln beta_j]) (s-grid), stored as logs."""
    return tuple(_mean_logs(shapes, rates)) if data.kind == "s" else ()


def _prior_terms(state, data, w_second_moment, exact=False):
    """E[ln p(w | precisions)] (p-grid exact; s-grid with the log-sum bound, or with ``exact``
    by quadrature) + sum over axes of E[ln p(precision)] + H[q(precision)] + H[q(w)]: the sum of
    :func:`_prior_parts`."""
    return sum(_prior_parts(state, data, w_second_moment, exact).values())


def _prior_parts(state, data, w_second_moment, exact=True):
    """The terms of :func:`_prior_terms`: ``-kl_w`` = E[ln p(w | precisions)] + H[q(w)] ((20)-(22);
    for the s-grid E[ln sum_k x_k] by quadrature, or with ``exact=False`` the log-sum bound (31)),
    and for every axis ``-kl_<site>``, ``log_norm_<site>`` (its Gamma prior, (23), (25);
    :func:`ppl_sbl.expfam.gamma_parts`)."""
    means = _means(state.shapes, state.rates)
    if data.kind == "p":
        log_precision = _combine(_mean_logs(state.shapes, state.rates), "s")  # E[ln prod_k x_k] = sum_k E[ln x_k]
    else:
        log_precision = _log_sum(state, data, exact)[0].reshape(-1)
    log_p_w = jnp.sum(expfam.normal_expected_log_density(w_second_moment, _combine(means, data.kind), log_precision))
    parts = {"-kl_w": log_p_w + G.entropy(state.w)}
    for name, a, b, a0, b0 in zip(site_names(len(state.shapes)), state.shapes, state.rates, data.prior_shapes,
                                  data.prior_rates):
        parts.update(expfam.gamma_parts(name, a0, b0, a, b))
    return parts


def _log_sum_gap(state, data):
    """Nats lost by the log-sum bound: 1/2 sum_cells (E[ln sum_k x_k] - bound) >= 0."""
    exact = _log_sum(state, data, exact=True)[0]
    bound = _log_sum(state, data)[0]
    return 0.5 * jnp.sum(exact - bound)


def _init_axes(data, data_precision):
    """The precision factors at the start, from ``data_precision`` (M,), the precision the data
    give each cell at the likelihood's start: each cell's target is the unit-information prior
    h / N (:func:`ppl_sbl.gaussian.start_prior_precision`); the product rule matches its logarithm
    by least squares, sum_k ln E[x_k] = main effects (one effect per index of each axis) plus the
    grand mean, whose excess over the sum of the axes' prior log-means ln(a_k / b_k) is shared
    among the axes as the minimum-norm solution shares it (in proportion to 1 / M_k), the sum rule gives every axis an equal share of its geometric mean (derived guides
    start the same way, :mod:`ppl_sbl.derived`).
    Shapes start at their value after a sweep of the product rule, a0 + (cells per index) / 2, and
    the s-grid's eta at exp(ln E[x]) (so eta = zeta, responsibilities 1/2, as the paper's eta =
    zeta = 1)."""
    ts = data.table_shape
    K = len(ts)
    size = int(np.prod(ts))
    log_target = jnp.log(G.start_prior_precision(data_precision, data.Phi.shape[0])).reshape(ts)
    grand = jnp.mean(log_target)
    if data.kind == "p":
        # the grand mean is shared relative to the axes' prior means ln(a_k / b_k): with the data's
        # scale in one axis's prior (the default rates), rescaling t or X moves that axis alone
        prior_logs = [jnp.log(a / b) for a, b in zip(data.prior_shapes, data.prior_rates)]
        excess = grand - sum(prior_logs)
        logs = []
        inverse = sum(1.0 / m for m in ts)
        for k in range(K):
            other = tuple(l for l in range(K) if l != k)
            effect = jnp.mean(log_target, axis=other) - grand
            logs.append(effect + excess / (ts[k] * inverse) + prior_logs[k])
    else:
        logs = [jnp.full(m, grand - np.log(K)) for m in ts]
    shapes = tuple(a + 0.5 * (size // m) * jnp.ones(m) for m, a in zip(ts, data.prior_shapes))
    rates = tuple(a / jnp.exp(lg) for a, lg in zip(shapes, logs))
    log_eta = tuple(logs) if data.kind == "s" else ()
    return shapes, rates, log_eta


def _make_guide(has_gamma):
    def build(state):
        mean = state.w.mean
        scale_tril = jnp.linalg.cholesky(G.full_covariance(state.w))
        names = site_names(len(state.shapes))

        def guide(X, t=None, **hyper):
            for name, a, b in zip(names, state.shapes, state.rates):
                numpyro.sample(name, dist.Gamma(a, b).to_event(1))
            numpyro.sample("w", dist.MultivariateNormal(mean, scale_tril=scale_tril, validate_args=False))
            if has_gamma:
                numpyro.sample("gamma", dist.Gamma(state.gamma_shape, state.gamma_rate))

        return guide

    return build


def _flat_new(X_new, data):
    X_new = check_numeric("X_new", X_new)
    if X_new.ndim < 3 or tuple(X_new.shape[1:]) != tuple(data.table_shape):
        raise ValueError(f"`X_new` must have shape (N, {', '.join(map(str, data.table_shape))}); got {X_new.shape}.")
    return jnp.asarray(check_matrix("X_new", X_new.reshape(X_new.shape[0], -1)))


# regression ---------------------------------------------------------------------------------------
def _reg_prepare(X, t=None, *, kind="p", a0=1e-6, b0=None, c0=1e-6, d0=None, e0=1e-6, f0=None, axis_priors=None):
    _check_kind(kind)
    _table_shape(np.asarray(X))
    if t is None:
        raise ValueError("`t` is required to fit the model; pass the observed targets.")
    t_checked = check_targets("t", t, np.shape(X)[0], rows_name="X")
    priors = _axis_priors(len(np.shape(X)) - 1, check_positive("a0", a0), b0, check_positive("c0", c0), d0,
                          axis_priors, check_matrix("X", np.reshape(X, (np.shape(X)[0], -1))), t_checked, kind)
    Phi, t, shapes, rates, table = _prepare(X, t, kind, priors, binary=False)
    e0 = check_positive("e0", e0)
    lik = L.prepare_gaussian(Phi, t, jnp.asarray(e0), jnp.asarray(check_positive("f0", noise_rate(t, e0, f0))))
    return GridData(lik, shapes, rates, table, kind)


def _reg_init(data):
    """The start: E[gamma] = 10 / var(t) (:func:`ppl_sbl.likelihoods.start_noise_precision`), the
    precision factors from the data precision E[gamma] ||phi_k||^2 (:func:`_init_axes`)."""
    e_gamma = L.start_noise_precision(data.t)
    gamma_shape = data.lik.e0 + 0.5 * data.Phi.shape[0]
    shapes, rates, log_eta = _init_axes(data, e_gamma * data.lik.col_sq)
    w = G.init_active_gaussian(data.Phi.shape[1], L.gaussian_rank(data.lik), factor=data.lik.gram_factor)
    return GridRegressionState(w, shapes, rates, gamma_shape, gamma_shape / e_gamma, log_eta)


def _reg_update(state, data):
    w = L.gaussian_update_w(state.w, _prior_precision(state, data), state.gamma_shape, state.gamma_rate, data.lik)  # (15)
    shapes, rates = _update_axes(state, data, G.second_moments(w))  # (16)-(17) / (33)-(34)
    gamma_shape, gamma_rate = L.gaussian_update_gamma(w, data.lik)  # (18)
    return GridRegressionState(w, shapes, rates, gamma_shape, gamma_rate, _update_eta(shapes, rates, data))  # (35)


def _reg_elbo(state, data, exact=False):
    return L.gaussian_elbo_terms(state.w, state.gamma_shape, state.gamma_rate, data.lik) + _prior_terms(
        state, data, G.second_moments(state.w), exact
    )


def _reg_elbo_parts(state, data):
    """``log_lik`` (19), ``-kl_gamma``, ``log_norm_gamma`` and the prior's parts (:func:`_prior_parts`)."""
    parts = L.gaussian_parts(state.w, state.gamma_shape, state.gamma_rate, data.lik)
    return {"log_lik": parts.pop("log_lik"), **_prior_parts(state, data, G.second_moments(state.w)), **parts}


def _reg_relevance(state, data):
    return _prior_precision(state, data), L.gaussian_data_precision(state.gamma_shape, state.gamma_rate, data.lik)


def _check_new_args(data, X_new):
    """``check_new`` of the grid RVM guides: ``X_new`` (N, table shape) as the flat design."""
    return (_flat_new(X_new, data),)


def _reg_predict(state, data, X_new):
    """Predictive mean and variance of a new observation (``X_new`` flattened by :func:`_check_new_args`)."""
    mean, var = G.linear_moments(state.w, X_new)
    return mean, var + state.gamma_rate / state.gamma_shape


def _reg_unit_offset(data):
    """-N ln s with s = sqrt(f0 / e0): the ELBO's part that depends on the targets' units."""
    return -0.5 * data.Phi.shape[0] * jnp.log(data.lik.f0 / data.lik.e0)


REGRESSION_GUIDE = ClosedFormGuide(
    prepare=_reg_prepare, init=_reg_init, update=_reg_update, elbo=_reg_elbo, elbo_parts=_reg_elbo_parts,
    loo=lambda state, data: L.gaussian_loo(state.w, state.gamma_shape, state.gamma_rate, data.lik),
    guide=_make_guide(True),
    predict=_reg_predict, check_new=_check_new_args, relevance=_reg_relevance, elbo_exact=None, bound="none",
    unit_offset=_reg_unit_offset,
)
S_REGRESSION_GUIDE = REGRESSION_GUIDE.replace(
    elbo_exact=lambda state, data: _reg_elbo(state, data, exact=True), bound="log-sum",
    bound_gaps=lambda state, data: {"log-sum": _log_sum_gap(state, data)},
)


# classification -----------------------------------------------------------------------------------
def _clf_prepare(X, t=None, *, kind="p", a0=1e-6, b0=None, c0=1e-6, d0=None, axis_priors=None):
    _check_kind(kind)
    _table_shape(np.asarray(X))
    priors = _axis_priors(len(np.shape(X)) - 1, check_positive("a0", a0), b0, check_positive("c0", c0), d0,
                          axis_priors, check_matrix("X", np.reshape(X, (np.shape(X)[0], -1))), None, kind)
    Phi, t, shapes, rates, table = _prepare(X, t, kind, priors, binary=True)
    return GridData(L.prepare_bernoulli(Phi, t), shapes, rates, table, kind)


def _clf_init(data):
    """The start: xi = 1, the precision factors from the data precision 2 lambda(1) ||phi_k||^2
    (:func:`_init_axes`)."""
    xi = jnp.ones(data.Phi.shape[0])
    shapes, rates, log_eta = _init_axes(data, L.jj_data_precision(xi, data.lik))
    return GridClassificationState(
        G.init_active_gaussian(data.Phi.shape[1], L.jj_rank(data.lik), factor=data.Phi.T), shapes, rates, xi,
        log_eta
    )


def _clf_update(state, data):
    w = L.jj_update_w(state.w, _prior_precision(state, data), state.xi, data.lik)  # (29)
    shapes, rates = _update_axes(state, data, G.second_moments(w))  # (16)-(17) / (33)-(34)
    xi = L.jj_update_xi(w, data.lik)  # (30)
    return GridClassificationState(w, shapes, rates, xi, _update_eta(shapes, rates, data))  # (35)


def _clf_elbo(state, data):
    return L.jj_elbo_terms(state.w, state.xi, data.lik) + _prior_terms(state, data, G.second_moments(state.w))


def _clf_elbo_exact(state, data):
    return L.bernoulli_exact_terms(state.w, data.lik) + _prior_terms(
        state, data, G.second_moments(state.w), exact=data.kind == "s"
    )


def _clf_elbo_parts(state, data):
    """``log_lik`` = sum_n E_q[ln sigma(s_n phi_n^T w)] by quadrature and the prior's parts
    (:func:`_prior_parts`); they sum to ``elbo_exact``."""
    return {"log_lik": L.bernoulli_exact_terms(state.w, data.lik), **_prior_parts(state, data, G.second_moments(state.w))}


def _clf_gaps(state, data):
    jj = L.bernoulli_exact_terms(state.w, data.lik) - L.jj_elbo_terms(state.w, state.xi, data.lik)
    gaps = {"jaakkola-jordan": jj}
    if data.kind == "s":
        gaps["log-sum"] = _log_sum_gap(state, data)
    return gaps


def _clf_relevance(state, data):
    return _prior_precision(state, data), L.jj_data_precision(state.xi, data.lik)


def _clf_predict(state, data, X_new):
    """P(t = 1 | t_train) by quadrature (``X_new`` flattened by :func:`_check_new_args`)."""
    mean, var = G.linear_moments(state.w, X_new)
    return expected_sigmoid(mean, var)


CLASSIFICATION_GUIDE = ClosedFormGuide(
    prepare=_clf_prepare, init=_clf_init, update=_clf_update, elbo=_clf_elbo, elbo_parts=_clf_elbo_parts,
    guide=_make_guide(False),
    predict=_clf_predict, check_new=_check_new_args, relevance=_clf_relevance, elbo_exact=_clf_elbo_exact,
    bound="jaakkola-jordan",
    bound_gaps=_clf_gaps,
)
S_CLASSIFICATION_GUIDE = CLASSIFICATION_GUIDE.replace(bound="jaakkola-jordan+log-sum")


def _regression_guide(X, t=None, *, kind="p", **hyper):
    _check_kind(kind)
    return S_REGRESSION_GUIDE if kind == "s" else REGRESSION_GUIDE


def _classification_guide(X, t=None, *, kind="p", **hyper):
    _check_kind(kind)
    return S_CLASSIFICATION_GUIDE if kind == "s" else CLASSIFICATION_GUIDE


# ----------------------------------------------------------------------------------------------
# NumPyro programs (the guides above are attached to them)
# ----------------------------------------------------------------------------------------------
@closed_form_guide(_regression_guide)
def regression(X, t=None, *, kind="p", a0=1e-6, b0=None, c0=1e-6, d0=None, e0=1e-6, f0=None, axis_priors=None):
    """Grid RVM regression: t ~ N(<X_n, W>, 1/gamma), W_ij ~ N(0, 1/(alpha_i beta_j)) (p) or
    N(0, 1/(alpha_i + beta_j)) (s).

    Parameters
    ----------
    X : (N, M1, M2) or (N, M1, ..., MK) array, one table of features per object (flattened in
        C order: weight k = i * M2 + j).
    t : (N,) targets or None (prior predictive).
    kind : "p" (product of precisions, eq. (1)) or "s" (sum, eq. (4)).
    a0, b0 / c0, d0 : Gamma(shape, rate) priors of the row precisions alpha / column precisions
        beta. Rates ``None`` (the default) are on the data's scale, so that the fit does not depend
        on the units of t or X: with v = var(t) and m the mean square of X's entries, b0 = a0 v / m
        and d0 = c0 (product rule: E[alpha_i beta_j] = m / v) or d0 = c0 v / m (sum rule)
        (:mod:`ppl_sbl.priors`); numbers are used as given.
    e0, f0 : Gamma prior of the noise precision gamma; ``f0=None`` (default): e0 var(t).
    axis_priors : [(shape, rate), ...] one per axis, required for K != 2 axes (used as given).

    Sites: ``alpha`` (M1,), ``beta`` (M2,) (``precision_k`` for K != 2), ``w`` (M1 M2,), ``gamma``, ``t``.
    """
    _check_kind(kind)
    N, shape = _table_shape(X)
    w = _grid_prior(shape, kind, _axis_priors(len(shape), a0, b0, c0, d0, axis_priors, X, t, kind))
    gamma = numpyro.sample("gamma", dist.Gamma(e0, noise_rate(t, e0, f0)))
    with numpyro.plate("data", N):
        numpyro.sample("t", dist.Normal(jnp.reshape(X, (N, -1)) @ w, jax.lax.rsqrt(gamma)), obs=t)


@closed_form_guide(_classification_guide)
def classification(X, t=None, *, kind="p", a0=1e-6, b0=None, c0=1e-6, d0=None, axis_priors=None):
    """Grid RVM classification: t_n ~ Bernoulli(logits = <X_n, W>), t_n in {0, 1}; the grid
    prior of :func:`regression` (default rates with v = 1: labels have no units). Sites:
    ``alpha``, ``beta`` (or ``precision_k``), ``w``, ``t``."""
    _check_kind(kind)
    N, shape = _table_shape(X)
    w = _grid_prior(shape, kind, _axis_priors(len(shape), a0, b0, c0, d0, axis_priors, X, None, kind))
    with numpyro.plate("data", N):
        numpyro.sample("t", dist.Bernoulli(logits=jnp.reshape(X, (N, -1)) @ w), obs=t)
