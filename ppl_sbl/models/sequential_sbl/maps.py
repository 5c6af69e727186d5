"""Uncertainty maps of a fitted state over points not sampled yet (Faul & Pilikos, section 4): the
expected change of L at a new sample (:func:`expected_delta_L`) from the statistics of its
neighbours (:func:`neighbour_statistics`), and the predictive variance after a function centred
there joins the model (:func:`augmented_variance`).
"""
from __future__ import annotations

import numpy as np

from .design import design_of
from .program import LOG_2PI
from .state import SBLState, predict

__all__ = ["expected_delta_L", "neighbour_statistics", "augmented_variance"]


def expected_delta_L(state: SBLState, rows, neighbour_means, neighbour_vars):
    """E[delta L] at points not sampled yet (section 4): with y* ~ N(m_bar, v_bar) estimated from
    the neighbours (v_bar a variance) and the predictive N(m*, sigma*^2),

        E[delta L] = -log(sqrt(2 pi) sigma*) - (v_bar + (m_bar - m*)^2) / (2 sigma*^2).
    """
    m_star, var_star = predict(state, rows)
    m_bar = np.asarray(neighbour_means, dtype=np.float64)
    v_bar = np.asarray(neighbour_vars, dtype=np.float64)
    if np.any(v_bar < 0):
        raise ValueError("`neighbour_vars` are variances and must be >= 0.")
    return -0.5 * (LOG_2PI + np.log(var_star)) - (v_bar + (m_bar - m_star) ** 2) / (2.0 * var_star)


def neighbour_statistics(query, samples, values, k=8):
    """Mean and variance of the values of the ``k`` nearest samples of every query point
    (``k=None``: all samples), the set S of section 4. ``query`` (n, d), ``samples`` (N, d)."""
    query = np.asarray(query, dtype=np.float64).reshape(len(query), -1)
    samples = np.asarray(samples, dtype=np.float64).reshape(len(samples), -1)
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if k is None or k >= len(values):
        return np.full(len(query), values.mean()), np.full(len(query), values.var())
    from scipy.spatial import cKDTree

    _, idx = cKDTree(samples).query(query, k=int(k))
    idx = idx.reshape(len(query), -1)
    return values[idx].mean(axis=1), values[idx].var(axis=1)


def augmented_variance(state: SBLState, rows, new_functions, alpha_new):
    """The predictive variance after a function centred at each query point joins the model
    with precision ``alpha_new`` (Rasmussen & Quinonero-Candela 2005, the paper's Fig. 5e):
    sigma*^2 + e^2 / (alpha_new + S_new), e = phi_new(x*) - beta d_a^T Sigma D_a^T phi_new.

    ``new_functions(p)`` returns the new function's values at all P points for query point p.
    """
    if (state.rows < 0).any():
        raise ValueError("the state has samples added by value (add_sample with a row), where the new functions' "
                         "values are unknown; add those samples by point index instead.")
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    _, var = predict(state, rows)
    design = design_of(state)
    beta = 1.0 / state.noise_var
    a = state.active
    R = state.dictionary.rows(rows)[:, a]
    out = np.empty(len(rows))
    Da = design.columns(a)
    for k, p in enumerate(rows):
        f = np.asarray(new_functions(p), dtype=np.float64)
        phi = f[design.rows]
        proj = Da.T @ phi
        S_new = beta * phi @ phi - beta**2 * proj @ state.Sigma @ proj
        e = f[p] - beta * R[k] @ state.Sigma @ proj
        out[k] = var[k] + e**2 / (alpha_new + S_new)
    return out
