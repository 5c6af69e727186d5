"""Basis functions (design matrices) for the relevance-vector family.

``rbf(X, centres, delta)`` = exp(-delta ||x - c||^2) is the Gaussian RBF of the grid RVM paper
(section 6.1, its delta). The robust RVM paper writes the same kernel as exp(-||x - c||^2 / sigma)
(sigma = 1 / delta) and scikit-learn as exp(-gamma ||x - c||^2) (gamma = delta).
"""
from __future__ import annotations

import numpy as np

from .validation import check_matrix, check_positive

__all__ = ["rbf", "rbf_table", "linear", "add_bias"]


def _inputs(name, X):
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    return check_matrix(name, X)


def add_bias(Phi):
    """Prepend a column of ones (the bias basis function) to ``Phi``."""
    Phi = check_matrix("Phi", Phi)
    return np.hstack([np.ones((Phi.shape[0], 1)), Phi])


def rbf(X, centres=None, delta=1.0, *, bias=False):
    """Gaussian RBF design matrix Phi[n, j] = exp(-delta ||x_n - c_j||^2).

    Parameters
    ----------
    X : (N, d) or (N,) array of inputs.
    centres : (M, d) array, default ``X`` (one basis function per training point, as in the RVM).
    delta : float > 0, inverse squared width (sigma = 1/delta in the robust RVM paper).
    bias : bool, prepend a constant column.

    Returns
    -------
    (N, M) or (N, M + 1) float64 array.
    """
    X = _inputs("X", X)
    C = X if centres is None else _inputs("centres", centres)
    if C.shape[1] != X.shape[1]:
        raise ValueError(f"`centres` has {C.shape[1]} input dimensions but `X` has {X.shape[1]}; they must match.")
    delta = check_positive("delta", delta)
    sq = np.sum(X**2, 1)[:, None] + np.sum(C**2, 1)[None, :] - 2.0 * X @ C.T
    Phi = np.exp(-delta * np.maximum(sq, 0.0))
    return add_bias(Phi) if bias else Phi


def rbf_table(X, centres=None, delta=1.0):
    """Per-dimension RBF table of the grid RVM paper (section 6.1), shape (N, M, d).

    Entry [n, j, i] = exp(-delta (x_n(i) - c_j(i))^2) for centre j and input dimension i, so that
    a p-grid or s-grid model has one precision per centre (rows) and one per input dimension
    (columns): an input dimension that carries no signal can be switched off as a whole.
    ``centres`` defaults to ``X``.
    """
    X = _inputs("X", X)
    C = X if centres is None else _inputs("centres", centres)
    if C.shape[1] != X.shape[1]:
        raise ValueError(f"`centres` has {C.shape[1]} input dimensions but `X` has {X.shape[1]}; they must match.")
    delta = check_positive("delta", delta)
    return np.exp(-delta * (X[:, None, :] - C[None, :, :]) ** 2)


def linear(X, *, bias=True):
    """Linear basis Phi = [1, X] (or X with ``bias=False``)."""
    X = _inputs("X", X)
    return add_bias(X) if bias else X
