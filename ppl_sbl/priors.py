"""Default hyperpriors on the data's own scale.

A Gamma(a0, b0) prior on a precision is not scale-free: its rate b0 has the units of the
precision's inverse. With an absolute default rate (b0 = 1e-6 whatever the data), targets in
small units look like pure noise and columns of large norm look irrelevant: the fit changes with
the units. The defaults of the RVM-family models therefore state each rate relative to a scale
read from the data, so that the prior mean of every precision is the precision that scale
suggests:

    noise precision gamma:      f0 = e0 * v_t                      (E[gamma] = 1 / v_t)
    weight precision alpha_k:   b0_k = a0 * v_t / m_k              (E[alpha_k] = m_k / v_t)
    a group g of coefficients:  b0_g = a0 * v_t / mean_{k in g} m_k

with v_t the variance of the targets (1 for labels, which have no units) and m_k = mean_n
phi_nk^2 the mean square of column k (1 for a column of zeros). A weight of prior scale
sqrt(v_t / m_k) lets one basis function explain the whole spread of the targets. Rescaling t by r
and column k by c_k (t -> r t, phi_k -> c_k phi_k) rescales v_t by r^2 and m_k by c_k^2, so the
prior maps onto itself under w_k -> r w_k / c_k, gamma -> gamma / r^2, alpha_k -> alpha_k c_k^2 /
r^2: the fit, its relevant set and its predictions (in the new units) are the same, and the
ELBO changes by the constant -N ln r of the targets' density. The shapes a0, e0 are unitless and
keep their values; hyperpriors given explicitly are used as given.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["VAGUE_SHAPE", "is_vague", "target_spread", "column_spread", "weight_rate", "noise_rate", "check_rate"]

VAGUE_SHAPE = 1e-3
"""The shape below which a Gamma(a0, b0) hyperprior on a precision is vague (:func:`is_vague`).

A coefficient's q(alpha_k) has shape a0 + 1/2: the hyperprior gives it a0, the one draw w_k of
N(0, 1/alpha_k) the other 1/2. Below 1e-3 the hyperprior's share a0 / (a0 + 1/2) is under 0.2%,
so q(alpha_k) is the data's to that accuracy, and its normalising constant a0 ln b0 - ln Gamma(a0)
(about ln a0, below -6.9 nats per precision) is a constant of the prior rather than of the data,
one that grows without bound as a0 -> 0. The library's defaults (a0 = 1e-6; 1e-5 for the robust
RVM classifier) are vague; a0 = 1e-2, a common weakly informative choice (2% of the shape), and
larger shapes are not. Used by the fast schedule's entry rule (:mod:`ppl_sbl.fast_ard`,
"Sparsity") and by ``CAVI``'s ``schedule="auto"``, which runs the fast schedule only under vague
priors."""


def is_vague(shape):
    """Whether a Gamma hyperprior of shape ``shape`` (a0) is vague: ``shape < VAGUE_SHAPE``. Shape 0
    (the improper limit a0 = b0 = 0) is vague."""
    return float(shape) < VAGUE_SHAPE


def _xp(*arrays):
    """NumPy for host arrays (no program to compile for a few reductions), else jax.numpy."""
    return np if all(a is None or isinstance(a, (np.ndarray, float, int)) for a in arrays) else jnp


def target_spread(t):
    """v_t: the variance of ``t``, its mean square where ``t`` is constant, 1 where it is all zero
    or ``None``."""
    xp = _xp(t)
    if t is None:
        return xp.asarray(1.0)
    t = xp.asarray(t, dtype=xp.float64)
    spread = xp.var(t)
    spread = xp.where(spread > 0, spread, xp.mean(t * t))
    return xp.where(spread > 0, spread, 1.0)


def column_spread(Phi):
    """m_k = mean_n phi_nk^2 of every column, shape (M,); 1 for a column of zeros."""
    xp = _xp(Phi)
    Phi = xp.asarray(Phi, dtype=xp.float64)
    m = xp.einsum("n...,n...->...", Phi, Phi) / Phi.shape[0]  # no (N, M) temporary
    return xp.where(m > 0, m, 1.0)


def weight_rate(Phi, t, a0, b0, groups=None):
    """The rate of the Gamma prior of each precision: ``b0`` where given, else a0 v_t / m_k (one
    per column; with ``groups`` (M,) ints, a0 v_t / mean_{k in g} m_k per group). ``t=None`` for
    labels (v_t = 1)."""
    if b0 is not None:
        return b0
    m = column_spread(Phi)
    if groups is not None:
        groups = np.asarray(groups)
        count = np.bincount(groups)
        if isinstance(m, np.ndarray):
            m = np.bincount(groups, weights=m, minlength=count.shape[0]) / count
        else:
            m = jax.ops.segment_sum(m, jnp.asarray(groups), num_segments=count.shape[0]) / count
    return a0 * target_spread(t) / m


def noise_rate(t, e0, f0):
    """The rate of the Gamma prior of the noise precision: ``f0`` where given, else e0 v_t."""
    return e0 * target_spread(t) if f0 is None else f0


def check_rate(name, value, size):
    """A finite, strictly positive rate: a scalar, or an array of ``size`` entries (one per
    precision); returned as a float64 array of shape () or (size,)."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"`{name}` must be a positive number or an array of {size} positive numbers; "
                         f"got {value!r}.") from err
    if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] != size):
        raise ValueError(f"`{name}` must be a positive number or an array of {size} positive numbers (one per "
                         f"precision); got shape {arr.shape}.")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"`{name}` must be finite and > 0; got {value!r}.")
    return arr
