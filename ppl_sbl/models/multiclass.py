"""The multinomial probit relevance vector machine for several classes.

Multiclass (Girolami & Rogers, "Variational Bayesian multinomial probit regression with Gaussian
process priors", Neural Computation 18(8), 2006, with the RVM's ARD prior on each class's weights
as in the multiclass RVM of Damoulas & Girolami 2008). Closed-form guide q(W) q(alpha) q(Y):
q(w_c) = N(mu_c, Sigma_c), q(alpha_mc) Gamma, q(y_n) the Gaussian N(m~_n, I) restricted to the
cone {y_{t_n} >= y_j for all j}. A sweep (:func:`_multiclass_update`):

    Sigma_c = (diag E[alpha_c] + Phi^T Phi)^-1,  mu_c = Sigma_c Phi^T E[y_c]   ((15), gamma = 1)
    a_mc = a0 + 1/2,  b_mc = b0 + E[w_mc^2] / 2                                 (16)
    (W, alpha) -> (c W, alpha / c^2) at the best c (parameter expansion, exact)
    m~_n = E[W]^T phi_n;  E[y_n] = Girolami & Rogers's one-dimensional integrals

(``ppl_sbl.probit``: E[y_nj] = m~_nj - E_u[N(u + d_j) prod_{k != t, j} Phi(u + d_k)] / Z_n,
Z_n = E_u[prod_{j != t} Phi(u + d_j)], d_j = m~_nt - m~_nj, u ~ N(0, 1), by quadrature). The ELBO
is exact up to that quadrature: per point ln Z_n - 1/2 sum_c phi_n^T Sigma_c phi_n (plus terms in
m~_n - E[W]^T phi_n, zero after a sweep), and the W and alpha terms of (10). ``result.predict(
Phi_new)`` returns the predictive class probabilities (N_new, C). The fast schedule fits each
class's column as a unit-noise regression on E[y_c] (:mod:`ppl_sbl.fast_ard`, several outputs).

Notation: ``Phi`` (N, M) design matrix, ``t`` labels in {0, ..., C-1}, ``w`` a tuple of C
Gaussian factors (``ppl_sbl.gaussian``), ``alpha_shape/alpha_rate`` (M, C), ``y_loc`` (N, C) = m~.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

from ppl_sbl import expfam
from ppl_sbl import fast_ard
from ppl_sbl import gaussian as G
from ppl_sbl import probit as P
from ppl_sbl.guide import ClosedFormGuide, closed_form_guide
from ppl_sbl.priors import check_rate, weight_rate
from ppl_sbl.validation import check_matrix, check_positive, check_targets

from .ard import check_new_args, positive_scalar

__all__ = ["multiclass", "MulticlassData", "MulticlassState", "MULTICLASS_GUIDE"]


class MulticlassData(NamedTuple):
    """Validated arguments of :func:`multiclass`: Phi (N, M); t (N,) int32 labels; onehot (N, C)
    (its shape carries the number of classes C); gram = Phi^T Phi (M, M), or None (then formed over
    the active slots where needed: the fast schedule's data); col_sq = ||phi_k||^2 (M,); a0, b0
    the Gamma prior of every alpha_mc (b0 () or (M, 1): one rate per basis function)."""

    Phi: jax.Array
    t: jax.Array
    onehot: jax.Array
    gram: object
    col_sq: jax.Array
    a0: jax.Array
    b0: jax.Array


class MulticlassState(NamedTuple):
    """w: tuple of C :class:`ppl_sbl.gaussian.ActiveGaussian`, q(w_c) of each class's column of W;
    alpha_shape, alpha_rate (M, C) the Gamma factors q(alpha_mc); y_loc (N, C) the location m~_n of
    each q(y_n), N(m~_n, I_C) restricted to the cone of class t_n (its untruncated mean: the
    sweep sets it to E[W]^T phi_n; E[y_n] follows from it by quadrature)."""

    w: tuple
    alpha_shape: jax.Array
    alpha_rate: jax.Array
    y_loc: jax.Array


def _check_num_classes(num_classes):
    if num_classes is None:
        return None
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 2:
        raise ValueError(f"`num_classes` must be an integer >= 2 (or None: max(t) + 1); got {num_classes!r}.")
    return int(num_classes)


def _multiclass_labels(t, num_rows, num_classes):
    """Labels t (N,) as int32 in 0..C-1 and C; every class must have a sample."""
    if t is None:
        raise ValueError("`t` is required to fit the model; pass the observed labels, integers 0, ..., C-1.")
    arr = check_targets("t", t, num_rows, text_fix=(
        "The model takes integer class labels 0, ..., C-1: encode them with codes = np.unique(labels, "
        "return_inverse=True)[1], or use ppl_sbl.RVC, which takes any labels (strings included) and keeps them "
        "in `classes_`."))
    if not np.all(arr == np.round(arr)):
        found = np.unique(arr[arr != np.round(arr)])[:5]
        raise ValueError(
            f"`t` must hold integer class labels 0, ..., C-1; found non-integer values {found.tolist()}. Encode "
            "labels with codes = np.unique(labels, return_inverse=True)[1]."
        )
    if arr.min() < 0:
        raise ValueError(
            f"`t` must hold class labels 0, ..., C-1; found negative label {int(arr.min())}. Relabel, e.g. "
            "codes = np.unique(labels, return_inverse=True)[1]."
        )
    C = _check_num_classes(num_classes)
    if C is None:
        C = int(arr.max()) + 1
    elif arr.max() >= C:
        raise ValueError(
            f"`t` has label {int(arr.max())} but num_classes={C}: labels must be 0, ..., {C - 1}. Raise "
            "`num_classes` or relabel."
        )
    counts = np.bincount(arr.astype(np.int64), minlength=C)
    empty = np.flatnonzero(counts == 0)
    if C < 2:
        raise ValueError("`t` holds a single class (0); the multiclass model needs labels of at least two classes.")
    if len(empty):
        raise ValueError(
            f"`t` has no samples of class(es) {empty[:10].tolist()} of 0, ..., {C - 1}: every class needs at "
            "least one training point. Relabel the classes present to 0, ..., K-1 (codes = np.unique(t, "
            "return_inverse=True)[1])" + (" or leave `num_classes` unset." if num_classes is not None else ".")
        )
    return arr.astype(np.int32), C


def _multiclass_data(Phi, t, a0, b0, num_classes, gram=True):
    Phi = check_matrix("Phi", Phi)
    labels, C = _multiclass_labels(t, Phi.shape[0], num_classes)
    return MulticlassData(
        Phi=jnp.asarray(Phi),
        t=jnp.asarray(labels),
        onehot=jnp.asarray(np.eye(C)[labels]),
        gram=jnp.asarray(Phi.T @ Phi) if gram else None,
        col_sq=jnp.asarray(np.einsum("nm,nm->m", Phi, Phi)),
        a0=positive_scalar("a0", a0),
        b0=_rate(Phi, a0, b0),
    )


def _rate(Phi, a0, b0):
    """b0 of every alpha_mc: () as given, or (M, 1), by default a0 / mean_n phi_nm^2 on the scale of
    each column (:mod:`ppl_sbl.priors`; labels have no units)."""
    a0 = check_positive("a0", a0)
    rate = check_rate("b0", weight_rate(Phi, None, a0, b0), Phi.shape[1])
    return rate if rate.ndim == 0 else rate[:, None]


def _multiclass_prepare(Phi, t=None, *, a0=1e-6, b0=None, num_classes=None):
    return _multiclass_data(Phi, t, a0, b0, num_classes)


def _multiclass_init(data: MulticlassData) -> MulticlassState:
    """Every q(w_c) a placeholder N(0, I), q(alpha_mc) at the prior, q(y_n) located at 0 (the first
    sweep's q(W) then sees E[y_n] = the mean of N(0, I) in the cone of t_n)."""
    N, C = data.onehot.shape
    M = data.Phi.shape[1]
    return MulticlassState(
        w=tuple(G.init_active_gaussian(M) for _ in range(C)),
        alpha_shape=jnp.full((M, C), data.a0),
        alpha_rate=jnp.full((M, C), data.b0),
        y_loc=jnp.zeros((N, C)),
    )


def _slot_gram(q, data):
    """Phi_A^T Phi_A on the slots of q (zero rows and columns for padding)."""
    if data.gram is None:
        phi_a = G.gather_columns(data.Phi, q.index)
        return phi_a.T @ phi_a
    return G.gather_gram(data.gram, q.index)


def _variance_sum(q, data):
    """sum_n Var_q[phi_n^T w_c] = tr(Phi^T Phi Sigma_c) (frozen variances included)."""
    return jnp.sum(_slot_gram(q, data) * G.dense_covariance(q)) + data.col_sq @ q.frozen_var


def _scaled_gaussian(q, c):
    """q(w) of c w (c > 0): mean c mu, covariance c^2 Sigma (active block and frozen variances)."""
    z = c * c
    valid = q.index < q.mean.shape[0]
    if q.base.shape[0] > 0:  # factored form diag(base) - Z^T Z
        cov, base = q.cov * c, q.base * z
    else:
        cov, base = q.cov * jnp.where(valid[:, None] & valid[None, :], z, 1.0), q.base
    return q._replace(mean=q.mean * c, cov=cov, base=base, frozen_var=q.frozen_var * z,
                      log_det=q.log_det + jnp.sum(valid) * jnp.log(z))


def _expansion_scale(state, data, w, e_y, square):
    """z = c^2 of the parameter-expansion step (see :func:`_multiclass_update`) for the state with
    q(W) = ``w``, q(alpha) of ``state`` and q(y) at ``state.y_loc`` (whose E[y] and E||y - m~||^2
    are ``e_y`` and ``square``)."""
    N, C = state.y_loc.shape
    mean = jnp.stack([data.Phi @ q.mean for q in w], axis=1)
    offset = state.y_loc - mean
    S = (jnp.sum(square) + 2.0 * jnp.sum(offset * (e_y - state.y_loc)) + jnp.sum(offset * offset)
         + sum(_variance_sum(q, data) for q in w))
    A = jnp.sum(data.b0 * expfam.gamma_mean(state.alpha_shape, state.alpha_rate))  # sum b0_m E[alpha_mc]
    K = N * C - 2.0 * data.a0 * state.alpha_shape.size
    return (K + jnp.sqrt(K * K + 8.0 * S * A)) / (2.0 * S)


def _multiclass_update(state: MulticlassState, data: MulticlassData) -> MulticlassState:
    """One sweep: q(W), q(alpha), a parameter-expansion step, then q(y).

    q(w_c): Sigma_c = (diag E[alpha_c] + Phi^T Phi)^-1, mu_c = Sigma_c Phi^T E[y_c]: the grid RVM
        paper's (15) with E[gamma] = 1 and targets E[y_c] (Girolami & Rogers's q(W), one Gaussian
        per class since the likelihood of y factorises over the classes);
    q(alpha_mc): a = a0 + 1/2, b = b0 + E[w_mc^2] / 2  (16);
    expansion: the model is invariant under (W, alpha, y) -> (c W, alpha / c^2, c y) but for the
        unit noise of y and (slightly) the Gamma prior. The transformed q gains exactly
        f(z) = -(z - 1) S / 2 + K/2 ln z - b0 (1/z - 1) A over q (z = c^2; S = sum_n E||y_n -
        W^T phi_n||^2, A = sum E[alpha], K = N C - 2 a0 M C: the Jacobian (N C - M C) ln c, the
        likelihood of y, the Gamma prior; E[ln p(w | alpha)] and the entropies of W and alpha are
        invariant), concave in ln z, largest at z = (K + sqrt(K^2 + 8 S b0 A)) / (2 S); q(W) and
        q(alpha) are replaced by those of c W and alpha / z (PX-VB, Qi & Jaakkola 2006). Without
        it the alternation of q(W) and q(y) drifts along this direction for thousands of sweeps
        on separable data;
    q(y_n): N(m_n, I) restricted to the cone of t_n, m_n = E[W]^T phi_n, the optimum given q(W);
        E[y_n] by the quadrature of :func:`ppl_sbl.probit.cone_moments` when it is next needed.
    Every step is a coordinate ascent step of the ELBO, which therefore never decreases.
    """
    _, e_y, square = P.cone_moments(state.y_loc, data.t, square=True)
    prior = expfam.gamma_mean(state.alpha_shape, state.alpha_rate)
    linear = data.Phi.T @ e_y  # (M, C)
    w = tuple(
        G.update_active_gaussian(
            q, prior[:, c], lambda q=q: _slot_gram(q, data),
            jnp.take(linear[:, c], q.index, mode="fill", fill_value=0.0), data.col_sq)
        for c, q in enumerate(state.w)
    )
    second = jnp.stack([G.second_moments(q) for q in w], axis=1)
    alpha_shape = jnp.full_like(second, data.a0 + 0.5)
    alpha_rate = data.b0 + 0.5 * second
    z = _expansion_scale(state._replace(alpha_shape=alpha_shape, alpha_rate=alpha_rate), data, w, e_y, square)
    w = tuple(_scaled_gaussian(q, jnp.sqrt(z)) for q in w)
    alpha_rate = alpha_rate * z
    y_loc = jnp.stack([data.Phi @ q.mean for q in w], axis=1)
    return MulticlassState(w, alpha_shape, alpha_rate, y_loc)


def _multiclass_elbo(state: MulticlassState, data: MulticlassData):
    """The ELBO, exact up to the one-dimensional quadrature of ln Z_n and E[y_n].

    With q(y_n) = N(m~_n, I) restricted to the cone of t_n (normaliser Z_n = Z(m~_n)), m_n =
    E[W]^T phi_n and v_nc = phi_n^T Sigma_c phi_n, the terms of y cancel to

        E[ln p(y_n | W)] + H[q(y_n)] = ln Z_n - (m~_n - m_n)^T (E[y_n] - m~_n)
                                       - 1/2 ||m~_n - m_n||^2 - 1/2 sum_c v_nc

    (E||y - W^T phi||^2 = E||y - m~||^2 + 2 (m~ - m)^T (E[y] - m~) + ||m~ - m||^2 + sum_c v_c and
    H[q(y)] = C/2 ln 2 pi + 1/2 E||y - m~||^2 + ln Z; p(t_n | y_n) = 1 on the cone), which is
    ln Z_n - 1/2 sum_c v_nc after a sweep (m~ = m). Plus, for every class, E[ln p(w_c | alpha_c)] +
    H[q(w_c)], and E[ln p(alpha)] + H[q(alpha)] (the grid RVM paper's (10) with (19)-(26)).
    """
    return sum(_multiclass_elbo_parts(state, data).values())


def _multiclass_elbo_parts(state: MulticlassState, data: MulticlassData):
    """The terms of :func:`_multiclass_elbo`: ``log_lik`` = sum_n E[ln p(t_n, y_n | W)] + H[q(y_n)]
    (the auxiliary y's contribution, ln Z_n - 1/2 sum_c v_nc after a sweep), ``-kl_w`` = sum over
    classes of E[ln p(w_c | alpha_c)] + H[q(w_c)], ``-kl_alpha`` and ``log_norm_alpha``."""
    log_z, e_y = P.cone_moments(state.y_loc, data.t)
    mean = jnp.stack([data.Phi @ q.mean for q in state.w], axis=1)
    offset = state.y_loc - mean
    var_sum = sum(_variance_sum(q, data) for q in state.w)
    likelihood = (jnp.sum(log_z) - jnp.sum(offset * (e_y - state.y_loc)) - 0.5 * jnp.sum(offset * offset)
                  - 0.5 * var_sum)
    e_alpha = expfam.gamma_mean(state.alpha_shape, state.alpha_rate)
    e_log_alpha = expfam.gamma_mean_log(state.alpha_shape, state.alpha_rate)
    second = jnp.stack([G.second_moments(q) for q in state.w], axis=1)
    log_p_w = jnp.sum(expfam.normal_expected_log_density(second, e_alpha, e_log_alpha))
    return {"log_lik": likelihood, "-kl_w": log_p_w + sum(G.entropy(q) for q in state.w),
            **expfam.gamma_parts("alpha", data.a0, data.b0, state.alpha_shape, state.alpha_rate)}


def _class_precisions(state: MulticlassState, data: MulticlassData):
    """(E[alpha_mc], the precision the data give w_mc given the class's other coefficients), (M, C)."""
    prior = expfam.gamma_mean(state.alpha_shape, state.alpha_rate)
    cond = jnp.stack([G.conditional_data_precision(q, prior[:, c], data.col_sq) for c, q in enumerate(state.w)],
                     axis=1)
    return prior, cond


def _multiclass_relevance(state: MulticlassState, data: MulticlassData):
    """Per basis function, the class in which it matters most: (E[alpha_mc*], its conditional data
    precision), c* the class with the smallest ratio of the two (the result's ``precision_ratio``
    and pruning; ``relevant`` reads every class's factor, :func:`_multiclass_coefficients`)."""
    prior, cond = _class_precisions(state, data)
    ratio = prior / jnp.maximum(cond, 1e-300)
    best = jnp.argmin(ratio, axis=1)[:, None]
    return jnp.take_along_axis(prior, best, axis=1)[:, 0], jnp.take_along_axis(cond, best, axis=1)[:, 0]


def _multiclass_coefficients(state: MulticlassState, data: MulticlassData):
    """The factors the relevance rule judges (``ClosedFormGuide.coefficients``): q(w_c) of every
    class, E[alpha_mc] (M, C), no shared precisions; the result's ``relevant`` marks a basis
    function the data support in at least one class."""
    return tuple(state.w), expfam.gamma_mean(state.alpha_shape, state.alpha_rate), None


def _class_supported(q, prior):
    """Active coefficients the data support, q_k^2 > s_k (Tipping & Faul's criterion, the fast
    schedule's relevance rule; s_k = 1/Sigma_kk - x_k, q_k = mu_k / Sigma_kk), (M,)."""
    M = q.mean.shape[0]
    valid = q.index < M
    diag = G.covariance_diagonal(q)
    x = jnp.take(prior, q.index, mode="fill", fill_value=1.0)
    mean = jnp.take(q.mean, q.index, mode="fill", fill_value=0.0)
    quality = mean / diag
    supported = valid & (quality * quality > 1.0 / diag - x)
    return jnp.zeros(M, dtype=bool).at[jnp.where(valid, q.index, M)].set(supported, mode="drop")


def _multiclass_extras(state: MulticlassState, data: MulticlassData):
    """``class_precision_ratio`` (M, C): E[alpha_mc] over the precision the data give w_mc given the
    class's other coefficients; ``class_supported`` (M, C): coefficients in the model that the data
    support (q^2 > s, the relevance rule per class: ``relevant`` is its any over the classes)."""
    prior, cond = _class_precisions(state, data)
    supported = jnp.stack([_class_supported(q, prior[:, c]) for c, q in enumerate(state.w)], axis=1)
    return {"class_precision_ratio": prior / jnp.maximum(cond, 1e-300), "class_supported": supported}


class _ClassColumns(dist.Distribution):
    """The independent columns w_c ~ N(mu_c, Sigma_c) of W as one (M, C) matrix: ``base`` is a
    MultivariateNormal with batch shape (C,) and event shape (M,)."""

    arg_constraints = {}
    support = constraints.independent(constraints.real, 2)
    pytree_data_fields = ("base",)

    def __init__(self, base, *, validate_args=None):
        self.base = base
        C, M = base.batch_shape[-1], base.event_shape[0]
        super().__init__(batch_shape=(), event_shape=(M, C), validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        return jnp.swapaxes(self.base.sample(key, sample_shape), -1, -2)

    def log_prob(self, value):
        return jnp.sum(self.base.log_prob(jnp.swapaxes(value, -1, -2)), axis=-1)


def _multiclass_guide(state: MulticlassState):
    """q(alpha) q(W) q(Y) under the model's site names: ``alpha`` (M, C), ``w`` (M, C), ``y`` (N, C)."""
    means = jnp.stack([q.mean for q in state.w])
    scale_tril = jnp.stack([jnp.linalg.cholesky(G.full_covariance(q)) for q in state.w])

    def guide(Phi, t=None, *, a0=1e-6, b0=None, num_classes=None):
        if t is None:
            raise ValueError("the multiclass guide needs the labels `t`: q(y_n) lives on the cone of t_n.")
        numpyro.sample("alpha", dist.Gamma(state.alpha_shape, state.alpha_rate).to_event(2))
        numpyro.sample("w", _ClassColumns(dist.MultivariateNormal(means, scale_tril=scale_tril, validate_args=False)))
        with numpyro.plate("data", state.y_loc.shape[0]):
            numpyro.sample("y", P.ConeTruncatedNormal(state.y_loc, jnp.asarray(t).astype(jnp.int32)))

    return guide


def _multiclass_predict(state: MulticlassState, data: MulticlassData, Phi_new):
    """P(t* = i | t) (N_new, C), rows summing to 1: with q(W) integrated out, y*_c ~ N(m_c, s_c^2)
    independently, m_c = mu_c^T phi*, s_c^2 = 1 + phi*^T Sigma_c phi*, and P(t* = i) =
    E_u[prod_{j != i} Phi((s_i u + m_i - m_j) / s_j)], Girolami & Rogers's predictive
    distribution, by quadrature (:func:`ppl_sbl.probit.class_probabilities`; ``Phi_new`` checked
    by :func:`check_new_args`)."""
    moments = [G.linear_moments(q, Phi_new) for q in state.w]
    mean = jnp.stack([m for m, _ in moments], axis=1)
    var = jnp.stack([v for _, v in moments], axis=1)
    return P.class_probabilities(mean, jnp.sqrt(1.0 + var))


def _multiclass_fast(Phi, t=None, *, a0=1e-6, b0=None, num_classes=None, tol=1e-9, max_passes=1000,
                     progress=None, vague_only=False, compiled=False):
    """The fast schedule with C outputs (:func:`ppl_sbl.fast_ard.schedule`): given E[y], class c's
    column is a regression on targets E[y_c] with unit noise precision; the per-class moves
    alternate with the update of q(y) (:class:`ppl_sbl.fast_ard.MultinomialProbit`); ``compiled``: as one
    compiled program (:mod:`ppl_sbl.fast_ard.compiled_outputs`), the same fit."""
    data = _multiclass_data(Phi, t, a0, b0, num_classes, gram=False)
    C = data.onehot.shape[1]
    factor = fast_ard.MultinomialProbit(np.asarray(data.t), C)
    a0 = float(data.a0)
    b0 = np.asarray(data.b0)
    fit = fast_ard.schedule(np.asarray(data.Phi), factor, a0=a0, b0=b0 if b0.ndim == 0 else b0[:, 0], tol=tol,
                            max_passes=max_passes, progress=progress, vague_only=vague_only, compiled=compiled)
    w = tuple(fast_ard.active_gaussian(f) for f in fit.fits)
    shapes, rates = zip(*(fast_ard.alpha_factors(f, float(a0)) for f in fit.fits))
    state = MulticlassState(w, jnp.stack(shapes, axis=1), jnp.stack(rates, axis=1), jnp.asarray(factor.loc))
    return data, state, fit


MULTICLASS_GUIDE = ClosedFormGuide(
    prepare=_multiclass_prepare,
    init=_multiclass_init,
    update=_multiclass_update,
    elbo=_multiclass_elbo,
    elbo_parts=_multiclass_elbo_parts,
    guide=_multiclass_guide,
    predict=_multiclass_predict,
    check_new=check_new_args,
    relevance=_multiclass_relevance,
    elbo_exact=None,
    bound="none",
    extras=_multiclass_extras,
    fast=_multiclass_fast,
    coefficients=_multiclass_coefficients,
)


def _model_num_classes(t, num_classes):
    C = _check_num_classes(num_classes)
    if C is not None:
        return C
    if t is None:
        raise ValueError("pass `num_classes` to draw from the prior predictive (t=None): C cannot be read "
                         "from the labels.")
    try:
        return int(np.max(np.asarray(t))) + 1
    except (TypeError, jax.errors.TracerArrayConversionError) as err:
        raise ValueError("pass `num_classes` when `t` is traced (e.g. under jax.jit): C must be known "
                         "before the labels' values.") from err


def _argmax_logits(y):
    """Logits of a Categorical that puts all its mass on argmax_c y_c: 0 there, -inf elsewhere."""
    return jnp.where(y >= jnp.max(y, axis=-1, keepdims=True), 0.0, -jnp.inf)


@closed_form_guide(MULTICLASS_GUIDE)
def multiclass(Phi, t=None, *, a0=1e-6, b0=None, num_classes=None):
    """Multinomial probit RVM (Girolami & Rogers 2006; the multiclass RVM of Damoulas & Girolami
    2008): for classes c = 0, ..., C-1,

        alpha_mc ~ Gamma(a0, b0),  w_mc | alpha_mc ~ N(0, 1/alpha_mc)   (W is (M, C)),
        y_n | W ~ N(W^T phi_n, I_C),  t_n = argmax_c y_nc.

    Parameters
    ----------
    Phi : (N, M) array, design matrix.
    t : (N,) integer labels in 0, ..., C-1, or None (prior predictive; needs ``num_classes``).
        Numbers only: strings are refused, also ones that read as numbers such as "1";
        :class:`ppl_sbl.RVC` takes any labels and maps them through its ``classes_``.
    a0, b0 : shape and rate of the Gamma prior on each alpha_mc. ``b0=None`` (the default): b0_m =
        a0 / mean_n phi_nm^2, on the scale of each column, so that the fit does not depend on the
        columns' units (:mod:`ppl_sbl.priors`); a number or M rates are used as given.
    num_classes : int >= 2 or None. C; None reads it from the labels as max(t) + 1. Every class
        must have a training point.

    Sites: ``alpha`` (M, C), ``w`` (M, C), ``y`` (N, C) the auxiliary variables (latent), ``t`` (N,)
    observed through a Categorical that puts all its mass on argmax_c y_nc (ln p(t_n | y_n) is 0
    on the cone of t_n and -inf off it). For NUTS marginalise y: P(t_n = i | W) =
    E_u[prod_{j != i} Phi(u + m_ni - m_nj)] (:func:`ppl_sbl.probit.cone_log_normaliser`).

    The closed-form guide (``CAVI(rvm.multiclass)``): q(W) q(alpha) q(Y) with q(w_c) Gaussian,
    q(alpha_mc) Gamma and q(y_n) the Gaussian restricted to the cone of t_n; ``result.predict(
    Phi_new)`` gives the predictive class probabilities (N_new, C). CAVI's default schedule
    (``"auto"``, as ``schedule="fast"``) fits each class's column one basis function at a time
    (:mod:`ppl_sbl.fast_ard`); ``schedule="sweep"`` updates every coefficient at every sweep.
    """
    N, M = jnp.shape(Phi)
    C = _model_num_classes(t, num_classes)
    rate = weight_rate(Phi, None, a0, b0)
    rate = rate[:, None] if jnp.ndim(rate) == 1 else rate
    alpha = numpyro.sample("alpha", dist.Gamma(a0, rate).expand([M, C]).to_event(2))
    w = numpyro.sample("w", dist.Normal(0.0, jax.lax.rsqrt(alpha)).to_event(2))
    labels = None if t is None else jnp.asarray(t).astype(jnp.int32)
    with numpyro.plate("data", N):
        y = numpyro.sample("y", dist.Normal(Phi @ w, 1.0).to_event(1))
        numpyro.sample("t", dist.Categorical(logits=_argmax_logits(y)), obs=labels)
