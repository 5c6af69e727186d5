"""The Gaussian factor q(w) of an ARD model, with an active set for pruning.

Every model of the relevance-vector family has one Gaussian factor over M coefficients whose
prior precision is diagonal (E[alpha_k] for the RVM, E[alpha_i] E[beta_j] for the p-grid RVM,
...) and whose likelihood contributes a quadratic form Phi^T W Phi (W = E[gamma] I for Gaussian
noise, W = 2 Lambda(xi) with the Jaakkola-Jordan bound) and a linear term Phi^T r. Its update
(Bishop & Tipping 2000; eq. (15) and (29) of the grid RVM paper)

    Sigma = (diag(P) + Phi^T W Phi)^-1,      mu = Sigma Phi^T r

is the only O(M^3) step of a sweep, so it is the one place where pruning acts.

Pruning. ``q(w)`` is the product of a full Gaussian over the *active* coefficients and an
independent zero-mean Gaussian N(0, s_k^2) for each *pruned* (frozen) coefficient k. Within that
restricted family the coordinate update of s_k^2 is s_k^2 = 1 / (P_k + h_k), with
h_k = sum_n W_n phi_nk^2 the data precision of w_k alone, an O(N) computation per coefficient
with no linear algebra. A coefficient is pruned between sweeps when its prior precision
exceeds ``threshold`` times its data precision (P_k > threshold * h_k): its posterior is then
within a fraction 1/threshold of the prior, its mean is set to zero and it leaves the
Cholesky factorisation. Every term of the ELBO is kept (a pruned w_k still contributes its
variance to the likelihood and its prior and entropy terms), so the ELBO of a pruned fit is a
true lower bound on the log evidence.

Shapes are fixed inside a jitted sweep: the active coefficients occupy ``index`` (a bucket of
slots, padding slots hold the value M). Between sweeps :func:`compact` moves the active set into
a smaller bucket (powers of two), so only a handful of shapes is ever compiled.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .expfam import LOG_2PI

__all__ = [
    "ActiveGaussian",
    "init_active_gaussian",
    "update_active_gaussian",
    "second_moments",
    "linear_moments",
    "entropy",
    "full_covariance",
    "prune",
    "compact",
    "num_active",
    "bucket_size",
    "low_rank_factor",
    "design_low_rank_factor",
    "covariance_diagonal",
    "covariance_matmul",
    "dense_covariance",
    "freeze_cost",
    "conditional_data_precision",
    "start_prior_precision",
    "factor_variance",
    "REFINE_STEPS",
    "REFINE_ABOVE",
]


class ActiveGaussian(NamedTuple):
    """q(w) = N(mean_A, Sigma_A) x prod_{k pruned} N(0, frozen_var_k).

    mean:        (M,) float64, E[w]; zero on pruned coefficients.
    cov:         dense form: (B, B) Sigma_A itself (identity on padding slots);
                 factored form (low-rank designs): (r, B) Z with Sigma_A = diag(base) - Z^T Z.
    base:        (B,) in the factored form, (0,) in the dense form.
    index:       (B,) int32, coefficient held by each slot; M marks a padding slot.
    frozen_var:  (M,) float64, variance of each pruned coefficient; zero where active.
    log_det:     () float64, ln|Sigma_A| over the active slots.
    factor_var:  factored form: (r,) Var_q[f_j^T w_A] = f_j^T Sigma_A f_j for each column f_j of
                 the likelihood's own factor of the data precision (``GaussianLikelihood.gram_factor``
                 on the slots, or the active columns of Phi^T with per-point weights: then one
                 entry per point), as of the last update (:func:`factor_variance`); dense
                 form: (0,).

    Use :func:`covariance_diagonal`, :func:`covariance_matmul` and :func:`dense_covariance`
    rather than reading ``cov`` directly.
    """

    mean: jax.Array
    cov: jax.Array
    base: jax.Array
    index: jax.Array
    frozen_var: jax.Array
    log_det: jax.Array
    factor_var: jax.Array


def init_active_gaussian(num_coefficients: int, rank=None, dtype=jnp.float64, factor=None) -> ActiveGaussian:
    """Every coefficient active, q(w) = N(0, I) (a placeholder: the first sweep replaces it).

    ``rank`` selects the factored form used with a rank-``rank`` data precision; ``factor``
    (M, rank), the likelihood's own factor, gives ``factor_var`` (its squared column norms under
    Sigma = I; zeros without it).
    """
    m = num_coefficients
    if rank is None:
        cov, base, factor_var = jnp.eye(m, dtype=dtype), jnp.zeros(0, dtype), jnp.zeros(0, dtype)
    else:
        cov, base = jnp.zeros((int(rank), m), dtype), jnp.ones(m, dtype)
        factor_var = jnp.zeros(int(rank), dtype) if factor is None else jnp.sum(jnp.asarray(factor) ** 2, axis=0)
    return ActiveGaussian(
        mean=jnp.zeros(m, dtype),
        cov=cov,
        base=base,
        index=jnp.arange(m, dtype=jnp.int32),
        frozen_var=jnp.zeros(m, dtype),
        log_det=jnp.zeros((), dtype),
        factor_var=factor_var,
    )


def factor_variance(q: ActiveGaussian, scale=None) -> ActiveGaussian:
    """``q`` with ``factor_var`` divided by ``scale`` (r,) or (): after an update with the data
    factor F_0 diag(sqrt(scale)) (e.g. sqrt(E[gamma]) times the Gram factor, or sqrt(W_n) times
    each point's row of Phi), the variances of the columns of F_0 itself. The likelihood terms
    then read f_j^T Sigma f_j from it without the cancellation of f_j^T D f_j - ||Z f_j||^2, which
    loses every digit where the data dominate the prior by 1e16."""
    if not _factored(q):
        return q
    return q._replace(factor_var=q.factor_var if scale is None else q.factor_var / scale)


def start_prior_precision(data_precision, num_points, groups=None, num_groups=None):
    """The prior precision P_k that the sweeps start from: the unit-information prior,
    P_k = h_k / N, with h_k the precision the data give w_k at the start (the likelihood's
    factors at their own start) and N the number of observations; with groups of coefficients
    sharing one precision (``groups`` (M,), ``num_groups``), the geometric mean of h_k / N over
    each group (the least-squares fit in logarithm, as derived guides start, :mod:`ppl_sbl.derived`).

    A start that scales with the data: scaling a column of Phi by s scales its h_k, hence its
    starting P_k, by s^2, so the whole sequence of sweeps (and its number) is that of the
    unscaled problem with w_k scaled by 1/s (up to the hyperpriors' small influence). Starting
    instead at the prior mean E[alpha] = a0 / b0 (1 for the default a0 = b0) puts the start
    12 orders of magnitude away from the fit when Phi is scaled by 1e-6, where every sweep then
    changes the state by about 1e-8: a plateau that the ELBO cannot tell from convergence, or,
    when Phi is scaled by 1e6, makes the first q(w) updates numerically singular.

    Coefficients with h_k = 0 (a column of zeros) start at the mean of the others (1 if all are).
    """
    h = jnp.asarray(data_precision)
    positive = h > 0
    count = jnp.sum(positive)
    fallback = jnp.where(count > 0, jnp.sum(jnp.where(positive, h, 0.0)) / jnp.maximum(count, 1), float(num_points))
    start = jnp.where(positive, h, fallback) / float(max(int(num_points), 1))
    if groups is None:
        return start
    total = jax.ops.segment_sum(jnp.log(start), groups, num_segments=num_groups)
    sizes = jax.ops.segment_sum(jnp.ones_like(start), groups, num_segments=num_groups)
    return jnp.exp(total / sizes)


def _factored(q: ActiveGaussian) -> bool:
    return q.base.shape[0] > 0


def covariance_diagonal(q: ActiveGaussian):
    """diag(Sigma_A), shape (B,)."""
    if _factored(q):
        return q.base - jnp.sum(q.cov**2, axis=0)
    return jnp.diag(q.cov)


def covariance_matmul(q: ActiveGaussian, x):
    """Sigma_A @ x for x of shape (B,) or (B, k)."""
    if _factored(q):
        zx = q.cov @ x
        return (q.base * x.T).T - q.cov.T @ zx
    return q.cov @ x


def dense_covariance(q: ActiveGaussian):
    """Sigma_A as a (B, B) matrix."""
    if _factored(q):
        return jnp.diag(q.base) - q.cov.T @ q.cov
    return q.cov


def _valid(q: ActiveGaussian):
    return q.index < q.mean.shape[0]


def gather_columns(Phi, index):
    """Phi[:, index] with zero columns for padding slots (index == M)."""
    return jnp.take(Phi, index, axis=-1, mode="fill", fill_value=0.0)


def gather_gram(gram, index):
    """gram[index][:, index] with zeros for padding slots."""
    g = jnp.take(gram, index, axis=0, mode="fill", fill_value=0.0)
    return jnp.take(g, index, axis=1, mode="fill", fill_value=0.0)


def _pivoted_cholesky(diagonal, column, rtol, max_rank):
    """F (M, r) with F F^T ~= G by Cholesky factorisation with diagonal pivoting, from G's diagonal
    and a function giving its column j; stops once every diagonal entry of G - F F^T is at most
    ``rtol`` times the largest of G's (so every entry of the residual is, G being positive
    semi-definite), or returns None past ``max_rank`` columns. O(r) columns and O(M r^2)."""
    diagonal = np.array(diagonal, dtype=np.float64)
    top = float(np.max(diagonal, initial=0.0))
    F = np.zeros((diagonal.shape[0], max(0, min(max_rank, diagonal.shape[0]))))
    for k in range(F.shape[1] + 1):
        j = int(np.argmax(diagonal))
        if diagonal[j] <= rtol * top:
            return F[:, :k]
        if k == F.shape[1]:
            return None
        col = column(j) - F[:, :k] @ F[j, :k]
        F[:, k] = col / np.sqrt(diagonal[j])
        diagonal = np.maximum(diagonal - F[:, k] ** 2, 0.0)
        diagonal[j] = 0.0
    return None


def low_rank_factor(gram, rtol=1e-13):
    """F with gram ~= F F^T (pivoted Cholesky: every entry of gram - F F^T at most ``rtol`` times
    gram's largest diagonal entry), or ``None`` when that takes more than a third of the size (then
    the dense update is cheaper).

    Entries below ~1e-13 of the largest are rounding noise of the Gram matrix itself in float64,
    so the truncation changes no digit that the dense computation can resolve.
    """
    g = np.asarray(gram, dtype=np.float64)
    factor = _pivoted_cholesky(np.diag(g), lambda j: g[:, j], rtol, g.shape[0] // 3)
    return None if factor is None or factor.shape[1] == 0 else factor


def design_low_rank_factor(Phi, rtol=1e-13):
    """:func:`low_rank_factor` of the Gram matrix Phi^T Phi, without forming it: each pivot takes
    one column Phi^T phi_j, so a design of numerical rank r costs O(N M r), not O(N M^2 + M^3)."""
    Phi = np.asarray(Phi, dtype=np.float64)
    factor = _pivoted_cholesky(np.einsum("nm,nm->m", Phi, Phi), lambda j: Phi.T @ Phi[:, j], rtol,
                               Phi.shape[1] // 3)
    return None if factor is None or factor.shape[1] == 0 else factor


REFINE_STEPS = 2
"""Steps of refinement of the mean of q(w) after each update (:func:`update_active_gaussian`)."""

REFINE_ABOVE = 1e6
"""The spread max_k h_k / min_k P_k of the data over the prior precisions above which
:func:`update_active_gaussian` refines the mean: below it, the solve (and a Gram factor truncated
at 1e-13 of its largest pivot) perturb the mean by about 1e-13 times the spread, at most 1e-7
relative, which changes the ELBO (at its maximum in the mean) by a second-order 1e-14."""


def update_active_gaussian(
    q: ActiveGaussian, prior_precision, data_precision, data_linear, data_precision_diag, data_factor=None,
    data_matvec=None,
) -> ActiveGaussian:
    """Closed-form update of q(w) on the active slots (grid RVM eq. (15), (29)).

    Parameters
    ----------
    q : ActiveGaussian
        Current factor; only its active set (``index``, ``frozen_var`` pattern) is used.
    prior_precision : (M,) array
        Diagonal prior precision P_k = E[alpha_k] (or a product/sum of precisions).
    data_precision : (B, B) array, or a function returning it
        Phi_A^T W Phi_A on the slots (zero rows/columns for padding); a function is called only
        when ``data_factor`` is not given.
    data_linear : (B,) array
        Phi_A^T r on the slots (zero for padding).
    data_precision_diag : (M,) array
        h_k = sum_n W_n phi_nk^2 for every coefficient (used for the pruned ones).
    data_factor : (B, r) array, optional
        F with F F^T = ``data_precision`` and r << B (a low-rank design). Then
        Sigma = D - D F (I_r + F^T D F)^-1 F^T D with D = diag(P)^-1 (Woodbury), and
        ln|Sigma| = -sum ln P - ln|I_r + F^T D F| (determinant lemma): O(B r^2), not O(B^3).
        ``factor_var`` holds f_j^T Sigma f_j for its columns (rescale it with
        :func:`factor_variance`).
    data_matvec : callable, optional
        x -> Phi_A^T W Phi_A x on the slots through the design itself. Where the data's
        precisions exceed the prior's by more than :data:`REFINE_ABOVE` (max h_k / min P_k), the
        mean is refined (:data:`REFINE_STEPS` steps mu += Sigma (b - diag(P) mu -
        data_matvec(mu))) so that it maximises the ELBO's mean part as the likelihood evaluates
        it, through Phi, even where the data precision above (the rounded Gram matrix, or its
        low-rank factor) differs from Phi^T W Phi by more than the prior precision: with a prior
        1e10 weaker than the data, without the refinement, the first digits of mu are off, and a
        sweep can lower the ELBO. Each step reads the design twice, so it is skipped where the
        spread is small enough for the solve to be accurate.
    """
    m = q.mean.shape[0]
    valid = _valid(q)
    p_slot = jnp.where(valid, jnp.take(prior_precision, q.index, mode="fill", fill_value=1.0), 1.0)
    if data_factor is None:
        if callable(data_precision):
            data_precision = data_precision()
        # Sigma^-1 = diag(P) + Phi^T W Phi  (eq. (15) / (29)); Jacobi-scaled so that the Cholesky factor
        # is insensitive to the scale of each basis function.
        precision = data_precision + jnp.diag(p_slot)
        d = 1.0 / jnp.sqrt(jnp.diag(precision))
        chol = jnp.linalg.cholesky(precision * d[:, None] * d[None, :])
        inv_scaled = jax.scipy.linalg.cho_solve((chol, True), jnp.eye(chol.shape[0], dtype=chol.dtype))
        cov = inv_scaled * d[:, None] * d[None, :]
        cov = 0.5 * (cov + cov.T)
        base = q.base
        log_det = 2.0 * jnp.sum(jnp.log(d)) - 2.0 * jnp.sum(jnp.log(jnp.diag(chol)))
        factor_var = q.factor_var
    else:
        # the same Sigma by Woodbury: (D^-1 + F F^T)^-1 = D - D F (I + F^T D F)^-1 F^T D, kept in
        # factored form diag(D) - Z^T Z with Z = L^-1 (D F)^T, L L^T = I + F^T D F. L^T = R from
        # the QR factorisation of the stacked (r + B, r) matrix [I; D^1/2 F] = [Q1; Q2] R, whose
        # condition number is the square root of that of I + F^T D F: Q2 = D^1/2 F R^-1 is
        # orthonormal with Q1 = R^-1 to rounding, so Z = Q2^T D^1/2 and F^T Sigma F = I - Q1 Q1^T
        # keep their digits where the data dominate the prior by many orders of magnitude (the
        # Cholesky factor of I + F^T D F does not, nor does F^T D F - (Z F)^T (Z F))
        base = 1.0 / p_slot
        root = jnp.sqrt(base)
        r = data_factor.shape[1]
        stack = jnp.concatenate([jnp.eye(r, dtype=data_factor.dtype), data_factor * root[:, None]], axis=0)
        orth, tri = jnp.linalg.qr(stack)
        cov = orth[r:].T * root[None, :]  # Z, (r, B)
        log_det = jnp.sum(jnp.log(base)) - 2.0 * jnp.sum(jnp.log(jnp.abs(jnp.diag(tri))))
        factor_var = jnp.maximum(1.0 - jnp.sum(orth[:r] ** 2, axis=1), 0.0)  # diag(F^T Sigma F)
    # mu = Sigma Phi^T r  (eq. (15) / (29))
    q_new = q._replace(cov=cov, base=base)
    mean_slot = covariance_matmul(q_new, data_linear)
    if data_matvec is None:
        if data_factor is not None:
            data_matvec = lambda x: data_factor @ (data_factor.T @ x)  # noqa: E731
        else:
            data_matvec = lambda x: data_precision @ x  # noqa: E731

    def refine(mean_slot):
        for _ in range(REFINE_STEPS):
            residual = data_linear - p_slot * mean_slot - data_matvec(mean_slot)
            mean_slot = mean_slot + covariance_matmul(q_new, residual)
        return mean_slot

    h_slot = jnp.take(data_precision_diag, q.index, mode="fill", fill_value=0.0)
    spread = jnp.max(jnp.where(valid, h_slot, 0.0)) / jnp.min(jnp.where(valid, p_slot, jnp.inf))
    mean_slot = jax.lax.cond(spread > REFINE_ABOVE, refine, lambda m: m, mean_slot)
    mean = jnp.zeros(m, cov.dtype).at[q.index].set(jnp.where(valid, mean_slot, 0.0), mode="drop")
    # s_k^2 = 1 / (P_k + h_k) for the pruned coefficients (coordinate update in the restricted family)
    frozen = q.frozen_var > 0
    frozen_var = jnp.where(frozen, 1.0 / (prior_precision + data_precision_diag), 0.0)
    return ActiveGaussian(mean, cov, base, q.index, frozen_var, log_det, factor_var)


def second_moments(q: ActiveGaussian):
    """E[w_k^2] = mu_k^2 + Sigma_kk for all M coefficients (pruned ones: s_k^2)."""
    valid = _valid(q)
    var = jnp.zeros_like(q.mean).at[q.index].set(jnp.where(valid, covariance_diagonal(q), 0.0), mode="drop")
    return q.mean**2 + var + q.frozen_var


def linear_moments(q: ActiveGaussian, Phi):
    """Mean and variance of x_n = phi_n^T w under q: (Phi mu, diag(Phi Sigma Phi^T))."""
    phi_a = gather_columns(Phi, q.index)
    mean = Phi @ q.mean
    var = jnp.sum(phi_a * covariance_matmul(q, phi_a.T).T, axis=1) + (Phi**2) @ q.frozen_var
    return mean, var


def entropy(q: ActiveGaussian):
    """H[q(w)]: the active block plus the independent pruned coordinates."""
    m = q.mean.shape[0]
    frozen = q.frozen_var > 0
    log_det = q.log_det + jnp.sum(jnp.where(frozen, jnp.log(jnp.where(frozen, q.frozen_var, 1.0)), 0.0))
    return 0.5 * m * (1.0 + LOG_2PI) + 0.5 * log_det


def full_covariance(q: ActiveGaussian):
    """The (M, M) covariance of q(w), for guides, sampling and prediction on small problems."""
    m = q.mean.shape[0]
    valid = _valid(q)
    cov = jnp.where(valid[:, None] & valid[None, :], dense_covariance(q), 0.0)
    full = jnp.zeros((m, m), q.cov.dtype).at[q.index[:, None], q.index[None, :]].set(cov, mode="drop")
    return full + jnp.diag(q.frozen_var)


def freeze_cost(q: ActiveGaussian, prior_precision, data_precision_diag):
    """ELBO lost by freezing each active coefficient, other factors held fixed, shape (B,).

    With A = diag(P) + Phi^T W Phi the precision of q(w) and b its linear term, the best q(w) has
    free energy 1/2 b^T A^-1 b - 1/2 ln|A|; the best q(w) in which w_k is independent with zero
    mean loses exactly (rank-one Schur complement identities)

        cost_k = 1/2 mu_k^2 / Sigma_kk + 1/2 ln(A_kk Sigma_kk),   A_kk = P_k + h_k >= 1/Sigma_kk.

    Both terms vanish as E[alpha_k] grows: the cost is the scale-free measure of how much a
    coefficient still matters. Padding slots get +inf.
    """
    valid = _valid(q)
    p_slot = jnp.take(prior_precision, q.index, mode="fill", fill_value=1.0)
    h_slot = jnp.take(data_precision_diag, q.index, mode="fill", fill_value=0.0)
    mean_slot = jnp.take(q.mean, q.index, mode="fill", fill_value=0.0)
    var = covariance_diagonal(q)
    cost = 0.5 * mean_slot**2 / var + 0.5 * jnp.log(jnp.maximum((p_slot + h_slot) * var, 1.0))
    return jnp.where(valid, cost, jnp.inf)


def prune(q: ActiveGaussian, prior_precision, data_precision_diag, threshold) -> ActiveGaussian:
    """Freeze the active coefficients whose :func:`freeze_cost` is below ``threshold`` nats.

    A frozen coefficient gets mean 0 and variance 1 / (P_k + h_k), the optimum of its
    independent zero-mean factor. Shape-preserving (jit-friendly): frozen slots become padding.
    """
    m = q.mean.shape[0]
    drop = freeze_cost(q, prior_precision, data_precision_diag) < threshold
    p_slot = jnp.take(prior_precision, q.index, mode="fill", fill_value=0.0)
    h_slot = jnp.take(data_precision_diag, q.index, mode="fill", fill_value=1.0)
    target = jnp.where(drop, q.index, m)
    frozen_var = q.frozen_var.at[target].set(1.0 / (p_slot + h_slot), mode="drop")
    mean = q.mean.at[target].set(0.0, mode="drop")
    index = jnp.where(drop, m, q.index).astype(q.index.dtype)
    # the remaining slots keep their (marginal) covariance; cov, log_det and factor_var are
    # recomputed by the q(w) update that follows, the only consumer of a pruned state inside CAVI
    return ActiveGaussian(mean, q.cov, q.base, index, frozen_var, q.log_det, q.factor_var)


def conditional_data_precision(q: ActiveGaussian, prior_precision, data_precision_diag):
    """The precision the data give each coefficient *given the others*.

    For an active coefficient 1/Sigma_kk - P_k (the Schur complement of the likelihood's
    quadratic form, which accounts for collinear basis functions); for a pruned one, which is
    independent of the rest under q, h_k itself.
    """
    m = q.mean.shape[0]
    valid = _valid(q)
    p_slot = jnp.take(prior_precision, q.index, mode="fill", fill_value=0.0)
    cond_slot = jnp.maximum(1.0 / covariance_diagonal(q) - p_slot, 0.0)
    cond = data_precision_diag.at[jnp.where(valid, q.index, m)].set(cond_slot, mode="drop")
    return cond


def num_active(q: ActiveGaussian) -> int:
    return int(np.sum(np.asarray(q.index) < q.mean.shape[0]))


def bucket_size(count: int, total: int, minimum: int = 8) -> int:
    """The smallest power of two >= count (at least ``minimum``, at most ``total``)."""
    size = max(minimum, 1 << max(0, int(count - 1).bit_length()))
    return min(size, total)


def compact(q: ActiveGaussian, size: int) -> ActiveGaussian:
    """Move the active slots of ``q`` into a bucket of ``size`` slots (host-side, between sweeps)."""
    m = q.mean.shape[0]
    index = np.asarray(q.index)
    slots = np.flatnonzero(index < m)
    if len(slots) > size:
        raise ValueError(f"cannot compact {len(slots)} active coefficients into {size} slots")
    pad = size - len(slots)
    new_index = np.concatenate([index[slots], np.full(pad, m, dtype=index.dtype)])
    if _factored(q):  # padding slots: base 1, no low-rank part
        z = np.zeros((q.cov.shape[0], size))
        z[:, : len(slots)] = np.asarray(q.cov)[:, slots]
        base = np.ones(size)
        base[: len(slots)] = np.asarray(q.base)[slots]
        return q._replace(cov=jnp.asarray(z), base=jnp.asarray(base), index=jnp.asarray(new_index))
    cov = np.asarray(q.cov)[np.ix_(slots, slots)]
    new_cov = np.eye(size, dtype=cov.dtype)
    new_cov[: len(slots), : len(slots)] = cov
    return q._replace(cov=jnp.asarray(new_cov), index=jnp.asarray(new_index))
