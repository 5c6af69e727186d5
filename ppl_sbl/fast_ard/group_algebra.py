"""The algebra of one group of :mod:`ppl_sbl.fast_ard.groups` (see its docstring): the collapsed
ELBO of a group in the model (G1) and frozen (G2), their maximisers and the data's support test."""
from __future__ import annotations

import math

import numpy as np

from .algebra import check_hyperparameters

__all__ = ["group_in_model_value", "group_frozen_value", "group_in_model_optimum", "group_frozen_optimum",
           "group_supported"]

COLLINEAR = 1e-10  # a direction of S below this fraction of the group's data precision is unresolved
_GRID = 24  # points of the search of (G1)'s maximiser in ln x
_SUPPORT_GRID = 12  # points of the search of F_in^0's supremum (group_supported)
_NEWTON_STEPS = 12
_LOG_X_TOL = 1e-9  # Newton's method stops when no step moves ln x by more
_BISECTIONS = 80


# the one-group algebra ---------------------------------------------------------------------------------
def in_model_values(x, lam, q2, a0, b0):
    """(G1) at x (G, P) for groups of eigenvalues ``lam`` and squared projections ``q2`` (G, d)."""
    xe = x[..., None]
    lam, q2 = lam[:, None, :], q2[:, None, :]
    terms = 0.5 * q2 / (xe + lam) - 0.5 * np.log1p(lam / xe)
    value = np.sum(terms, axis=-1)
    return value + (a0 * np.log(x) - b0 * x) if a0 > 0 else value


def frozen_values(x, h, a0, b0):
    """(G2) at x (G,) for groups of data precisions ``h`` (G, d)."""
    return -0.5 * np.sum(np.log1p(h / x[:, None]), axis=1) + a0 * np.log(x) - b0 * x


def _slopes(x, lam, q2, a0, b0):
    """x F_in'(x) and its derivative in ln x, at x (G,)."""
    xe = x[:, None]
    u = xe + lam
    first = np.sum(-0.5 * q2 * xe / u**2 + 0.5 * lam / u, axis=1) + a0 - b0 * x
    second = x * (np.sum(-0.5 * q2 * (lam - xe) / u**3 - 0.5 * lam / u**2, axis=1) - b0)
    return first, second


def _own_optima(lam, q2):
    """Each direction's own maximiser l^2 / (q^2 - l) where q^2 > l > 0, else NaN."""
    supported = (q2 > lam) & (lam > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(supported, lam * lam / np.where(supported, q2 - lam, 1.0), np.nan)


def _polish(t, value, lo, hi, lam, q2, a0, b0):
    """Newton's method on F_in'(x) = 0 in t = ln x from (t, F_in there), inside [lo, hi] (G,): each
    iteration takes the Newton step (a step of 1 in the direction of the slope where F_in is not
    concave there), or its half, quarter or eighth, whichever raises F_in most, and none where none
    does; it stops when no step moves t by more than ``_LOG_X_TOL``, or after ``_NEWTON_STEPS``."""
    scales = np.array([1.0, 0.5, 0.25, 0.125])
    rows = np.arange(t.shape[0])
    for _ in range(_NEWTON_STEPS):
        first, second = _slopes(np.exp(t), lam, q2, a0, b0)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = np.where(second < 0, -first / second, np.sign(first))
        step = np.where(np.isfinite(step), step, 0.0)
        trial = np.clip(t[:, None] + step[:, None] * scales[None, :], lo[:, None], hi[:, None])
        values = in_model_values(np.exp(trial), lam, q2, a0, b0)
        best = np.argmax(values, axis=1)
        better = values[rows, best] > value
        moved = better & (np.abs(trial[rows, best] - t) > _LOG_X_TOL)
        t = np.where(better, trial[rows, best], t)
        value = np.where(better, values[rows, best], value)
        if not np.any(moved):
            break
    return t, value


def _search(low, high, lam, q2, a0, b0, points=_GRID):
    """The best point of a grid of ``points`` in [low, high] (ln x, (G,)), polished by :func:`_polish`
    inside its neighbours: (t, F_in there)."""
    grid = low[:, None] + (high - low)[:, None] * np.linspace(0.0, 1.0, points)[None, :]
    values = in_model_values(np.exp(grid), lam, q2, a0, b0)
    best = np.argmax(values, axis=1)
    rows = np.arange(grid.shape[0])
    lo, hi = grid[rows, np.maximum(best - 1, 0)], grid[rows, np.minimum(best + 1, points - 1)]
    return _polish(grid[rows, best], values[rows, best], lo, hi, lam, q2, a0, b0)


def _bracket(lam, q2, a0, b0):
    """ln x bounds (G,) that hold the maximiser of (G1) (module docstring, "Maximisers")."""
    own = _own_optima(lam, q2)
    low = np.minimum(np.min(np.where(np.isnan(own), np.inf, own), axis=1), a0 / b0)
    low = np.maximum(low, 1e-12 * np.maximum(np.max(lam, axis=1), a0 / b0))
    high = (a0 + np.sqrt(a0 * a0 + 2.0 * b0 * np.sum(lam, axis=1))) / (2.0 * b0)
    return np.log(low), np.log(np.maximum(high, low))


def in_model_maximiser(lam, q2, a0, b0, start=None):
    """The maximiser of (G1) and (G1) there for each row: from a finite ``start`` (ln x) by Newton's
    method (a local maximiser, for the re-estimates), elsewhere by the grid search over the bracket,
    polished (the global one)."""
    low, high = _bracket(lam, q2, a0, b0)
    warm = np.zeros(lam.shape[0], dtype=bool) if start is None else np.isfinite(start)
    t, value = np.empty(lam.shape[0]), np.empty(lam.shape[0])
    if np.any(warm):
        t0 = np.clip(start[warm], low[warm], high[warm])
        v0 = in_model_values(np.exp(t0)[:, None], lam[warm], q2[warm], a0, b0)[:, 0]
        t[warm], value[warm] = _polish(t0, v0, low[warm], high[warm], lam[warm], q2[warm], a0, b0)
    cold = ~warm
    if np.any(cold):
        t[cold], value[cold] = _search(low[cold], high[cold], lam[cold], q2[cold], a0, b0)
    return np.exp(t), value


def _proper(a0, b0):
    a0, b0 = check_hyperparameters(a0, b0)
    if a0 == 0:
        raise ValueError("the group schedule needs a proper Gamma prior (a0, b0 > 0).")
    return a0, b0


def group_in_model_value(x, lam, q2, a0, b0):
    """F_in(x) of (G1) for each group: x (G,), ``lam`` and ``q2`` (G, d) the eigenvalues of its
    leave-group-out precision S and the squared projections of Q on their eigenvectors (zero-padded)."""
    a0, b0 = check_hyperparameters(a0, b0)
    x = np.asarray(x, dtype=np.float64)
    return in_model_values(x[:, None], np.atleast_2d(lam), np.atleast_2d(q2), a0, b0)[:, 0]


def group_frozen_value(x, h, a0, b0):
    """F_out(x) of (G2) for each group: x (G,), ``h`` (G, d) the data precisions of its coefficients
    (zero-padded)."""
    a0, b0 = check_hyperparameters(a0, b0)
    return frozen_values(np.asarray(x, dtype=np.float64), np.atleast_2d(h), a0, b0)


def group_in_model_optimum(lam, q2, a0, b0):
    """The maximiser of (G1) over x > 0 and (G1) there, for each group (rows of ``lam``, ``q2``): a
    grid in ln x over the bracket of the module docstring ("Maximisers"), then Newton's method on
    F_in' = 0 from the grid's best point, each step kept inside its neighbours and taken only where
    it raises F_in. Needs a0, b0 > 0."""
    a0, b0 = _proper(a0, b0)
    return in_model_maximiser(np.atleast_2d(lam), np.atleast_2d(q2), a0, b0)


def group_frozen_optimum(h, a0, b0):
    """The maximiser of (G2) over x > 0 and (G2) there, for each group (rows of ``h``): the one
    root of sum_k h_k / (2 (x + h_k)) + a0 - b0 x = 0, by bisection in ln x between a0 / b0 and the
    positive root of b0 x^2 - a0 x - sum_k h_k / 2. Needs a0, b0 > 0."""
    a0, b0 = _proper(a0, b0)
    h = np.atleast_2d(h)
    lo = np.full(h.shape[0], math.log(a0 / b0))
    hi = np.log((a0 + np.sqrt(a0 * a0 + 2.0 * b0 * np.sum(h, axis=1))) / (2.0 * b0))
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        x = np.exp(mid)
        rising = np.sum(0.5 * h / (x[:, None] + h), axis=1) + a0 - b0 * x > 0
        lo, hi = np.where(rising, mid, lo), np.where(rising, hi, mid)
    x = np.exp(0.5 * (lo + hi))
    return x, frozen_values(x, h, a0, b0)


def group_supported(lam, q2):
    """Whether the data support each group (rows of ``lam``, ``q2``): sup_x F_in^0(x) > 0 with
    F_in^0 (G1) at a0 = b0 = 0. F_in^0 tends to sum_j (q_j^2 - l_j) / (2 x) as x -> inf, so a group
    with sum_j (q_j^2 - l_j) > 0 is supported; a direction with q_j^2 <= l_j contributes at most 0
    for every x (ln(1 + u) >= u / (1 + u)), so a group with none of q_j^2 > l_j is not; for the
    rest F_in^0 rises below the least l_j^2 / (q_j^2 - l_j), and the group is supported where F_in^0
    is positive on a grid of ``_SUPPORT_GRID`` points in ln x from there to 10^4 times the largest,
    polished by Newton's method."""
    lam, q2 = np.atleast_2d(lam), np.atleast_2d(q2)
    supported = np.sum(q2 - lam, axis=1) > 0
    own = _own_optima(lam, q2)
    some = np.any(np.isfinite(own), axis=1) & ~supported
    if np.any(some):
        own = own[some]
        low = np.log(np.nanmin(own, axis=1))
        high = np.log(np.nanmax(own, axis=1)) + math.log(1e4)
        _, value = _search(low, high, lam[some], q2[some], 0.0, 0.0, _SUPPORT_GRID)
        supported[np.flatnonzero(some)] = value > 0
    return supported
