"""Basis functions (design matrices) for the relevance-vector family.

``rbf(X, centres, delta)`` = exp(-delta ||x - c||^2) is the Gaussian RBF of the grid RVM paper
(section 6.1, its delta). The robust RVM paper writes the same kernel as exp(-||x - c||^2 / sigma)
(sigma = 1 / delta) and scikit-learn as exp(-gamma ||x - c||^2) (gamma = delta).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .validation import check_matrix, check_numeric, check_positive

__all__ = ["rbf", "rbf_table", "linear", "add_bias", "Dictionary", "DenseDictionary", "SparseDictionary",
           "KroneckerDictionary", "StackedDictionary", "as_dictionary", "haar_2d", "gaussian_rbf_2d"]


def _inputs(name, X):
    X = check_numeric(name, X)
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


# ----------------------------------------------------------------------------------------------
# Dictionaries as operators: image bases too large to hold densely
# ----------------------------------------------------------------------------------------------
class Dictionary:
    """A dictionary of M basis functions evaluated at P points, as a linear operator D (P, M).

    The sequential SBL (``ppl_sbl.models.sequential_sbl``) touches D only through products
    ``matvec(x) = D x``, ``rmatvec(v) = D^T v`` and a few columns and rows, so a dictionary does
    not need to be stored densely: :class:`SparseDictionary` holds a ``scipy.sparse`` matrix
    (compactly supported functions such as Haar wavelets), :class:`KroneckerDictionary` a
    separable one, D = A (x) B, in its two factors (Gaussian RBFs on a pixel grid),
    :class:`DenseDictionary` an array, and :class:`StackedDictionary` puts dictionaries side by
    side (new candidate functions joining a dictionary).
    """

    shape: tuple

    def matvec(self, x):
        raise NotImplementedError

    def rmatvec(self, v):
        raise NotImplementedError

    def matmat(self, X):
        """D X for X of shape (M, k), (P, k)."""
        return np.column_stack([self.matvec(X[:, k]) for k in range(X.shape[1])]) if X.shape[1] else \
            np.zeros((self.shape[0], 0))

    def rmatmat(self, V):
        """D^T V for V of shape (P, k), (M, k)."""
        return np.column_stack([self.rmatvec(V[:, k]) for k in range(V.shape[1])]) if V.shape[1] else \
            np.zeros((self.shape[1], 0))

    def columns(self, idx):
        """Dense (P, len(idx)) block of the given columns."""
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        out = np.empty((self.shape[0], len(idx)))
        e = np.zeros(self.shape[1])
        for k, m in enumerate(idx):
            e[m] = 1.0
            out[:, k] = self.matvec(e)
            e[m] = 0.0
        return out

    def rows(self, idx):
        """Dense (len(idx), M) block of the given rows."""
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        out = np.empty((len(idx), self.shape[1]))
        e = np.zeros(self.shape[0])
        for k, p in enumerate(idx):
            e[p] = 1.0
            out[k] = self.rmatvec(e)
            e[p] = 0.0
        return out

    def weighted_sq_norms(self, weights):
        """sum_p weights_p D[p, m]^2 for every column m, shape (M,)."""
        raise NotImplementedError

    def to_dense(self):
        return self.columns(np.arange(self.shape[1]))


class _MatrixDictionary(Dictionary):
    """A dictionary held as a matrix ``self.D`` (anything with ``@`` and ``.T``)."""

    D: Any

    def matvec(self, x):
        return self.D @ x

    def rmatvec(self, v):
        return self.D.T @ v

    matmat = matvec
    rmatmat = rmatvec


class DenseDictionary(_MatrixDictionary):
    """A dense (P, M) array as a dictionary."""

    def __init__(self, D):
        self.D = check_matrix("D", D)
        self.shape = self.D.shape

    def columns(self, idx):
        return self.D[:, np.asarray(idx, dtype=np.int64).reshape(-1)]

    def rows(self, idx):
        return self.D[np.asarray(idx, dtype=np.int64).reshape(-1)]

    def weighted_sq_norms(self, weights):
        weights = np.asarray(weights, dtype=np.float64)
        if np.all(weights == 1.0):
            return np.einsum("pm,pm->m", self.D, self.D)  # no (P, M) temporary
        rows = np.flatnonzero(weights)
        D = self.D[rows]
        return np.einsum("pm,pm->m", D * weights[rows, None], D)

    def to_dense(self):
        return self.D


class SparseDictionary(_MatrixDictionary):
    """A ``scipy.sparse`` (P, M) matrix as a dictionary."""

    def __init__(self, D):
        import scipy.sparse as sp

        self.D = sp.csc_matrix(D, dtype=np.float64)
        self.D_rows = sp.csr_matrix(self.D)  # the same matrix stored by rows, for row access
        self.shape = self.D.shape

    def __setstate__(self, fields):
        import scipy.sparse as sp

        fields = {k: v for k, v in fields.items() if k != "_rows"}
        self.__dict__.update(fields)
        self.D_rows = sp.csr_matrix(self.D)

    def columns(self, idx):
        return self.D[:, np.asarray(idx, dtype=np.int64).reshape(-1)].toarray()

    def rows(self, idx):
        return self.D_rows[np.asarray(idx, dtype=np.int64).reshape(-1)].toarray()

    def weighted_sq_norms(self, weights):
        return np.asarray(self.D.multiply(self.D).T @ np.asarray(weights, dtype=np.float64)).reshape(-1)

    def to_dense(self):
        return self.D.toarray()


class KroneckerDictionary(Dictionary):
    """D = A (x) B: point p = i * B.shape[0] + j, function m = k * B.shape[1] + l, D[p, m] =
    A[i, k] B[j, l]. On an image of shape (H, W) with A (H, K) and B (W, L) the products cost
    O(H W (K + L)) instead of O(H W K L): D x = A X B^T and D^T v = A^T V B with X, V reshaped."""

    def __init__(self, A, B):
        self.A = check_matrix("A", A)
        self.B = check_matrix("B", B)
        self.shape = (self.A.shape[0] * self.B.shape[0], self.A.shape[1] * self.B.shape[1])

    def matvec(self, x):
        X = np.asarray(x, dtype=np.float64).reshape(self.A.shape[1], self.B.shape[1])
        return (self.A @ X @ self.B.T).reshape(-1)

    def rmatvec(self, v):
        V = np.asarray(v, dtype=np.float64).reshape(self.A.shape[0], self.B.shape[0])
        return (self.A.T @ V @ self.B).reshape(-1)

    def matmat(self, X):
        # A (H, K) times X as (K, L c), then B (W, L) on each of the H slices (L, c): two GEMMs on
        # contiguous memory (no transposed copies of the (P, c) operand)
        X = np.ascontiguousarray(X, dtype=np.float64)
        c = X.reshape(self.shape[1], -1).shape[1]
        T = (self.A @ X.reshape(self.A.shape[1], -1)).reshape(self.A.shape[0], self.B.shape[1], c)
        return np.matmul(self.B, T).reshape(self.shape[0], c)

    def rmatmat(self, V):
        V = np.ascontiguousarray(V, dtype=np.float64)
        c = V.reshape(self.shape[0], -1).shape[1]
        T = (self.A.T @ V.reshape(self.A.shape[0], -1)).reshape(self.A.shape[1], self.B.shape[0], c)
        return np.matmul(self.B.T, T).reshape(self.shape[1], c)

    def columns(self, idx):
        k, l = np.divmod(np.asarray(idx, dtype=np.int64).reshape(-1), self.B.shape[1])
        return (self.A[:, k][:, None, :] * self.B[:, l][None, :, :]).reshape(self.shape[0], -1)

    def rows(self, idx):
        i, j = np.divmod(np.asarray(idx, dtype=np.int64).reshape(-1), self.B.shape[0])
        return (self.A[i][:, :, None] * self.B[j][:, None, :]).reshape(len(i), -1)

    def weighted_sq_norms(self, weights):
        W = np.asarray(weights, dtype=np.float64).reshape(self.A.shape[0], self.B.shape[0])
        return ((self.A**2).T @ W @ self.B**2).reshape(-1)


class StackedDictionary(Dictionary):
    """Dictionaries over the same P points side by side: D = [D_1 | D_2 | ...]."""

    def __init__(self, parts):
        parts = [as_dictionary(p) for p in parts]
        points = {p.shape[0] for p in parts}
        if len(points) != 1:
            raise ValueError(f"the dictionaries are evaluated at different numbers of points: {sorted(points)}.")
        self.parts = parts
        self.offsets = np.cumsum([0] + [p.shape[1] for p in parts])
        self.shape = (parts[0].shape[0], int(self.offsets[-1]))

    def matvec(self, x):
        return sum(p.matvec(x[a:b]) for p, a, b in zip(self.parts, self.offsets[:-1], self.offsets[1:]))

    def rmatvec(self, v):
        return np.concatenate([p.rmatvec(v) for p in self.parts])

    def matmat(self, X):
        return sum(p.matmat(X[a:b]) for p, a, b in zip(self.parts, self.offsets[:-1], self.offsets[1:]))

    def rmatmat(self, V):
        return np.vstack([p.rmatmat(V) for p in self.parts])

    def columns(self, idx):
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        out = np.empty((self.shape[0], len(idx)))
        part = np.searchsorted(self.offsets, idx, side="right") - 1
        for k, p in enumerate(self.parts):
            sel = np.flatnonzero(part == k)
            if len(sel):
                out[:, sel] = p.columns(idx[sel] - self.offsets[k])
        return out

    def rows(self, idx):
        return np.hstack([p.rows(idx) for p in self.parts])

    def weighted_sq_norms(self, weights):
        return np.concatenate([p.weighted_sq_norms(weights) for p in self.parts])


def as_dictionary(D):
    """A :class:`Dictionary` from a dictionary, a ``scipy.sparse`` matrix or a dense array."""
    if isinstance(D, Dictionary):
        return D
    try:
        import scipy.sparse as sp

        if sp.issparse(D):
            return SparseDictionary(D)
    except ImportError:  # pragma: no cover - scipy ships with jax
        pass
    return DenseDictionary(D)


def _haar_tile(scale):
    """The orthonormal 2-D Haar functions of one tile of 2**scale x 2**scale pixels, (n*n, n*n),
    one function per column, pixels of the tile in C order. Scale 1: the scaling function and the
    horizontal, vertical and diagonal details. Scale 2: the scaling function and three details on
    the whole 4 x 4 tile (constant on its 2 x 2 quadrants), then the three scale-1 details of each
    quadrant (the standard multiresolution, "non-standard" 2-D decomposition, two levels)."""
    h = np.array([[1.0, 1.0], [1.0, -1.0]]) / np.sqrt(2.0)
    base = np.einsum("ai,bj->ijab", h, h).reshape(4, 4).T  # column f = tensor product of 1-D pairs
    if scale == 1:
        return base
    if scale != 2:
        raise ValueError(f"`scale` must be 1 or 2; got {scale!r}.")
    tile = np.zeros((4, 4, 16))
    for f in range(4):  # coarse: the 2x2 pattern blown up to 4x4 quadrants, norm 1
        tile[:, :, f] = np.kron(base[:, f].reshape(2, 2), np.ones((2, 2))) / 2.0
    f = 4
    for qi in range(2):
        for qj in range(2):
            for d in range(1, 4):  # the three fine details inside each quadrant
                tile[2 * qi:2 * qi + 2, 2 * qj:2 * qj + 2, f] = base[:, d].reshape(2, 2)
                f += 1
    return tile.reshape(16, 16)


def haar_2d(shape, scale=1):
    """The orthonormal 2-D Haar basis on non-overlapping tiles of an image, as a sparse dictionary.

    ``scale=1``: tiles of 2 x 2 pixels, four functions each (scaling function, horizontal,
    vertical and diagonal detail); ``scale=2``: tiles of 4 x 4 pixels with the tile's 16
    functions (scaling function and three details on 4 x 4, three 2 x 2 details in each quadrant).
    Pixels are numbered in C order (p = row * width + column), functions tile by tile (tiles in C
    order). Each column has the support of its function (4 or 16 pixels), so the dictionary of a
    128 x 128 image is a (16384, 16384) sparse matrix with 4 or 16 non-zeros per column. An image
    whose sides are not multiples of the tile has its last tiles cut at the border (those
    functions are then no longer orthonormal).
    """
    import scipy.sparse as sp

    H, W = (int(s) for s in shape)
    if H < 1 or W < 1:
        raise ValueError(f"`shape` must be two positive sizes; got {shape!r}.")
    n = 2 ** int(scale)
    tile = _haar_tile(scale)
    rows, cols, vals = [], [], []
    ti, tj = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    ti, tj = ti.reshape(-1), tj.reshape(-1)
    m = 0
    for r0 in range(0, H, n):
        for c0 in range(0, W, n):
            r, c = r0 + ti, c0 + tj
            inside = (r < H) & (c < W)
            p = r[inside] * W + c[inside]
            for f in range(n * n):
                rows.append(p)
                cols.append(np.full(len(p), m))
                vals.append(tile[inside, f])
                m += 1
    D = sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(H * W, m))
    D.eliminate_zeros()
    return SparseDictionary(D)


def gaussian_rbf_2d(shape, sd=8.0):
    """Gaussian RBFs centred at every pixel of an image, d_m(p) = exp(-||p - c_m||^2 / (2 sd^2))
    with distances in pixels, as a Kronecker dictionary (A (x) B with A[i, k] = exp(-(i - k)^2 /
    (2 sd^2)) over rows and B likewise over columns): the (H W, H W) matrix is never formed. The
    sequential SBL paper's "radius of 8 pixels" is read as sd = 8."""
    check_positive("sd", sd)
    H, W = (int(s) for s in shape)
    g = lambda n: np.exp(-((np.arange(n)[:, None] - np.arange(n)[None, :]) ** 2) / (2.0 * sd**2))
    return KroneckerDictionary(g(H), g(W))
