"""The design matrix of the sequential SBL over its samples, D[n, m] = d_m(x_n), through the
dictionary: dense rows of it, and products with it (dense, sparse or through the dictionary's own
operators).

A state's samples are points of its dictionary (``rows``, int indices) or, for samples added by
value, rows given whole (``rows == -1``, held in ``extra_rows`` in order).
"""
from __future__ import annotations

import functools

import numpy as np
import scipy.sparse

from ppl_sbl import basis as _basis

__all__ = ["point_rows", "design_rows", "Design", "design_of"]


def point_rows(state, rows):
    """Dense dictionary rows for ``rows``: int point indices or an (k, M) array of rows."""
    rows = np.asarray(rows)
    if rows.dtype.kind in "iu":
        return state.dictionary.rows(rows.reshape(-1))
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim == 1:
        rows = rows[None, :]
    if rows.shape[1] != state.dictionary.shape[1]:
        raise ValueError(f"`rows` must have one entry per dictionary function ({state.dictionary.shape[1]}); "
                         f"got rows of length {rows.shape[1]}.")
    return rows


def design_rows(state, samples):
    """Dense rows of the design matrix (samples x M) for the given sample indices."""
    samples = np.asarray(samples, dtype=np.int64)
    out = np.empty((len(samples), state.dictionary.shape[1]))
    pts = state.rows[samples]
    by_point = pts >= 0
    if by_point.any():
        out[by_point] = state.dictionary.rows(pts[by_point])
    if (~by_point).any():
        extra_index = np.cumsum(state.rows < 0) - 1
        out[~by_point] = state.extra_rows[extra_index[samples[~by_point]]]
    return out


class Design:
    """The design matrix over the samples, D[n, m] = d_m(x_n), through the dictionary."""

    def __init__(self, dictionary, rows, extra_rows, prefer_sparse=False):
        self.dictionary = dictionary
        # products through ``sparse`` (built once, O(nonzeros)) for a run of many moves; a single
        # product (add_sample) goes through the dictionary
        self.prefer_sparse = prefer_sparse
        self.rows = np.asarray(rows, dtype=np.int64)
        self.by_point = self.rows >= 0
        self.point_rows = self.rows[self.by_point]
        self.extra = np.asarray(extra_rows, dtype=np.float64).reshape(-1, dictionary.shape[1])
        self.n = len(self.rows)
        # a point sampled twice adds twice (np.add.at); otherwise a plain scatter
        self.unique = len(np.unique(self.point_rows)) == len(self.point_rows)

    def _scatter(self, v):
        full = np.zeros((self.dictionary.shape[0],) + v.shape[1:])
        if self.unique:
            full[self.point_rows] = v[self.by_point]
        else:
            np.add.at(full, self.point_rows, v[self.by_point])
        return full

    @functools.cached_property
    def dense(self):
        """The design over the samples as a dense (N, M) array where the dictionary is a dense
        matrix (``D`` itself when the samples are its rows in order), else None."""
        if not isinstance(self.dictionary, _basis.DenseDictionary):
            return None
        D = self.dictionary.D
        if not len(self.extra) and self.n == D.shape[0] and np.array_equal(self.rows, np.arange(self.n)):
            return D
        out = np.empty((self.n, D.shape[1]))
        out[self.by_point] = D[self.point_rows]
        out[~self.by_point] = self.extra
        return out

    def matvec(self, x):
        """D x over the samples: x of shape (M,) or (M, k) gives (N,) or (N, k)."""
        x = np.asarray(x, dtype=np.float64)
        if self.prefer_sparse and self.dense is not None:
            return self.dense @ x
        if self.prefer_sparse and self.sparse is not None:  # over the samples only
            return self.sparse @ x
        out = np.empty((self.n,) + x.shape[1:])
        if self.by_point.any():
            op = self.dictionary.matvec if x.ndim == 1 else self.dictionary.matmat
            out[self.by_point] = op(x)[self.point_rows]
        if len(self.extra):
            out[~self.by_point] = self.extra @ x
        return out

    def rmatvec(self, v):
        """D^T v: v of shape (N,) or (N, k) gives (M,) or (M, k)."""
        v = np.asarray(v, dtype=np.float64)
        if self.prefer_sparse and self.dense is not None:
            return self.dense.T @ v
        if self.prefer_sparse and self.sparse is not None:
            return self.sparse_rows_t @ v
        op = self.dictionary.rmatvec if v.ndim == 1 else self.dictionary.rmatmat
        out = op(self._scatter(v))
        if len(self.extra):
            out = out + self.extra.T @ v[~self.by_point]
        return out

    matmat = matvec
    rmatmat = rmatvec

    def columns(self, idx):
        """The design matrix's columns ``idx`` over the samples, dense (N, len(idx))."""
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if self.prefer_sparse and self.dense is not None:
            return self.dense[:, idx]
        X = np.zeros((self.dictionary.shape[1], len(idx)))
        X[idx, np.arange(len(idx))] = 1.0
        return self.matvec(X)

    def active_matvec(self, active, z):
        """D_a z over the samples for coefficients z of the functions ``active``."""
        x = np.zeros(self.dictionary.shape[1])
        np.add.at(x, active, z)
        return self.matvec(x)

    @functools.cached_property
    def sparse(self):
        """The design over the samples as a ``scipy.sparse`` CSR matrix (N, M) where the dictionary
        is sparse, else None."""
        if not isinstance(self.dictionary, _basis.SparseDictionary):
            return None
        parts = [self.dictionary.D_rows[self.point_rows]]
        if len(self.extra):
            parts.append(scipy.sparse.csr_matrix(self.extra))
        stacked = scipy.sparse.vstack(parts, format="csr")
        order = np.empty(self.n, dtype=np.int64)  # the samples' rows within ``stacked``
        order[self.by_point] = np.arange(len(self.point_rows))
        order[~self.by_point] = len(self.point_rows) + np.arange(len(self.extra))
        return stacked[order]

    @functools.cached_property
    def sparse_rows_t(self):
        """``sparse`` transposed, in CSR form (M, N)."""
        return self.sparse.T.tocsr()

    @functools.cached_property
    def sparse_gram(self):
        """D^T D (M, M) in CSC form where the dictionary is sparse and it has at most 16 times the
        nonzeros of D (tile-local dictionaries), else None."""
        if self.sparse is None:
            return None
        if np.sum(np.diff(self.sparse.indptr).astype(np.float64) ** 2) > 16 * max(self.sparse.nnz, 1):
            return None
        return (self.sparse_rows_t @ self.sparse).tocsc()

    @functools.cached_property
    def sparse_columns(self):
        """``sparse`` in CSC form, for taking columns."""
        return None if self.sparse is None else self.sparse.tocsc()

    def sq_norms(self):
        """||d_m||^2 over the samples for every m (a point sampled twice counts twice)."""
        counts = np.bincount(self.point_rows, minlength=self.dictionary.shape[0]).astype(np.float64)
        out = self.dictionary.weighted_sq_norms(counts)
        if len(self.extra):
            out = out + np.sum(self.extra**2, axis=0)
        return out


def design_of(state, prefer_sparse=False):
    """The :class:`Design` over a state's samples."""
    return Design(state.dictionary, state.rows, state.extra_rows, prefer_sparse)
