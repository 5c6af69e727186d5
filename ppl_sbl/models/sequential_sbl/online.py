"""Online updates of a fitted state (Faul & Pilikos, section 3 and the appendix): a new sample
(:func:`add_sample`), new candidate functions (:func:`add_basis`), each without a refit (continue
with :func:`.schedule.resume` to re-optimise alpha); and L evaluated directly
(:func:`log_marginal_likelihood`), the reference the updates are checked against.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.linalg

from ppl_sbl import basis as _basis

from .design import Design, design_of, design_rows
from .program import LOG_2PI
from .state import SBLState

__all__ = ["add_sample", "add_basis", "log_marginal_likelihood"]


def log_marginal_likelihood(state: SBLState, alpha=None, noise_var=None):
    """L = log N(y | 0, sigma^2 I + D_a A^-1 D_a^T) computed directly in O(N K^2 + K^3) (from
    the active columns, never an N x N matrix), for the state's or the given alpha, sigma^2:
    log|C| = N log sigma^2 - sum log alpha + log|H| and y^T C^-1 y = ||y - D_a mu||^2 / sigma^2
    + mu^T A mu with H = A + D_a^T D_a / sigma^2, mu = H^-1 D_a^T y / sigma^2."""
    alpha = state.alpha if alpha is None else np.asarray(alpha, dtype=np.float64)
    noise_var = state.noise_var if noise_var is None else float(noise_var)
    a = np.flatnonzero(np.isfinite(alpha))
    N = len(state.y)
    beta = 1.0 / noise_var
    if len(a) == 0:
        return float(-0.5 * (N * LOG_2PI + N * math.log(noise_var) + beta * state.y @ state.y))
    Da = design_rows(state, np.arange(N))[:, a]
    chol = scipy.linalg.cho_factor(np.diag(alpha[a]) + beta * Da.T @ Da, lower=True)
    mu = scipy.linalg.cho_solve(chol, beta * Da.T @ state.y)
    resid = state.y - Da @ mu
    # y^T C^-1 y = ||y - D_a mu||^2 / sigma^2 + mu^T A mu (no cancellation at small sigma^2)
    return float(-0.5 * (N * LOG_2PI + N * math.log(noise_var) - np.sum(np.log(alpha[a]))
                         + 2.0 * np.sum(np.log(np.diag(chol[0]))) + beta * resid @ resid + alpha[a] @ mu**2))


def add_sample(state: SBLState, d_row, y_new):
    """A new sample (section 3 and the appendix): rank-one updates of Sigma, mu, S and Q with
    alpha and sigma^2 unchanged. Returns ``(state, delta_L)`` with delta_L = log N(y_new | m*,
    sigma*^2), the log predictive density of the new value (the exact change of L).

    ``d_row``: the new sample's dictionary row (length M), or the index of a dictionary point.
    Continue with :func:`resume` to re-optimise alpha.
    """
    y_new = float(y_new)
    if not math.isfinite(y_new):
        raise ValueError("`y_new` must be finite.")
    by_point = np.ndim(d_row) == 0 and np.asarray(d_row).dtype.kind in "iu"
    if by_point:
        p = int(d_row)
        if not 0 <= p < state.dictionary.shape[0]:
            raise ValueError(f"`d_row` = {p} is not a point of the dictionary (0 .. {state.dictionary.shape[0] - 1}).")
        row = state.dictionary.rows([p])[0]
    else:
        row = np.asarray(d_row, dtype=np.float64).reshape(-1)
        if row.shape[0] != state.dictionary.shape[1]:
            raise ValueError(f"`d_row` must have one entry per dictionary function ({state.dictionary.shape[1]}); "
                             f"got {row.shape[0]}.")
        if not np.all(np.isfinite(row)):
            raise ValueError("`d_row` contains NaN or infinite values.")
    a = state.active
    beta = 1.0 / state.noise_var
    da = row[a]
    nz = np.flatnonzero(da)
    Sd = state.sigma_matvec(da, nz if 2 * len(nz) < len(da) else None)
    m_star = float(da @ state.mu)
    var_star = state.noise_var + float(da @ Sd)
    delta_L = -0.5 * (LOG_2PI + math.log(var_star) + (y_new - m_star) ** 2 / var_star)
    # beta d_*^T Sigma D^T d_m for every m (over the old samples), then the bracket of the appendix
    design = design_of(state)
    proj = beta * design.rmatvec(design.active_matvec(a, Sd)) if len(a) else np.zeros_like(state.S)
    err = proj - row
    S = state.S + err**2 / var_star
    Q = state.Q + err * (m_star - y_new) / var_star
    mu = state.mu - (m_star - y_new) / var_star * Sd
    new = state.replace(
        sigma_correction=(-1.0 / var_star, Sd),  # Sigma -= Sd Sd^T / sigma*^2
        rows=np.append(state.rows, p if by_point else -1),
        y=np.append(state.y, y_new),
        extra_rows=state.extra_rows if by_point else np.vstack([state.extra_rows, row]),
        mu=mu, S=S, Q=Q,
        log_marginal_likelihood=state.log_marginal_likelihood + delta_L,
        trace=state.trace + [state.log_marginal_likelihood + delta_L],
        moves=state.moves + [("sample", p if by_point else -1)],
        converged=False,
        Dty=state.Dty + row * y_new,
        yty=state.yty + y_new**2,
    )
    return new, float(delta_L)


def add_basis(state: SBLState, new_columns):
    """New candidate functions join the dictionary (out of the model, alpha = inf): their S and
    Q are computed at the current alpha and sigma^2, so :func:`resume` can add them.

    ``new_columns``: a :class:`ppl_sbl.basis.Dictionary` or array over the same P points as the
    state's dictionary, (P, k).
    """
    new = _basis.as_dictionary(new_columns)
    if new.shape[0] != state.dictionary.shape[0]:
        raise ValueError(f"`new_columns` must be evaluated at the dictionary's {state.dictionary.shape[0]} points; "
                         f"got {new.shape[0]}.")
    if (state.rows < 0).any():
        raise ValueError("the state has samples added by value (add_sample with a row), whose values of the new "
                         "functions are unknown; add those samples by point index instead.")
    k = new.shape[1]
    sub = Design(new, state.rows, np.zeros((0, k)))
    beta = 1.0 / state.noise_var
    Dty_new = sub.rmatvec(state.y)
    norms = sub.sq_norms()
    S_new, Q_new = beta * norms, beta * Dty_new
    a = state.active
    if len(a):
        # S_m = beta ||phi_m||^2 - beta^2 phi_m^T D_a Sigma D_a^T phi_m; same for Q with y
        old = design_of(state)
        cross = sub.rmatvec(old.columns(a))  # D_new^T D_a, (k, K)
        CS = cross @ state.Sigma
        S_new = S_new - beta**2 * np.sum(CS * cross, axis=1)
        Q_new = Q_new - beta**2 * CS @ state.Dty[a]
    dictionary = _basis.StackedDictionary([state.dictionary, new])
    return state.replace(
        dictionary=dictionary,
        extra_rows=np.zeros((0, dictionary.shape[1])),
        alpha=np.append(state.alpha, np.full(k, np.inf)), S=np.append(state.S, S_new), Q=np.append(state.Q, Q_new),
        Dty=np.append(state.Dty, Dty_new), converged=False)
