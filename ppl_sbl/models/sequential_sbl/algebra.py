"""The linear algebra of the sequential SBL's workspace: rank-one updates in place, and the exact
evaluations from scratch, block by block.

Functions in different connected components of the Gram matrix D_a^T D_a share no sample, so
Sigma^-1 = H = A + D_a^T D_a / sigma^2 is block-diagonal over them and a factorisation costs
sum_c k_c^3 / 3 rather than K^3 / 3 (tile-local dictionaries such as the Haar bases split into
blocks of at most 4 or 16 functions; overlapping RBFs are one block). :func:`likelihoods` gives L
and the block Cholesky factors of H, :func:`posterior_from` Sigma = F^T F (F = chol^-1) from them,
and :func:`statistics_from_factor` S and Q of every function.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.linalg.lapack
import scipy.sparse
import scipy.sparse.csgraph

from .program import LOG_2PI

__all__ = ["rank_one", "components", "blocks_of", "gram_blocks", "likelihoods", "posterior_from",
           "logdet_rounding", "statistics_from_factor"]

_REFRESH_BLOCK = 256  # columns of D^T D_a F^T formed at a time by an exact refresh


def rank_one(A, coef, x, chunk=256):
    """A += coef x x^T in place: on the nonzeros of x only where they are few (x lies in one
    or a few components, see :func:`blocks_of`), otherwise a block of rows at a time."""
    nz = np.flatnonzero(x)
    if 2 * len(nz) < len(x):
        A[np.ix_(nz, nz)] += np.multiply.outer(coef * x[nz], x[nz])
        return
    for r in range(0, len(x), chunk):
        A[r:r + chunk] += np.multiply.outer(coef * x[r:r + chunk], x)


def components(G):
    """A label per active function: the connected components of ``G`` = D_a^T D_a != 0 (dense
    or sparse, K x K; stored zeros do not count; O(K^2))."""
    K = G.shape[0]
    r, c = G.nonzero()
    return scipy.sparse.csgraph.connected_components(
        scipy.sparse.coo_matrix((np.ones(len(r)), (r, c)), shape=(K, K)), directed=False)[1]


def blocks_of(labels):
    """The active functions grouped by component ``labels``, components of equal size stacked
    ((n_k, k) index arrays)."""
    order = np.argsort(labels, kind="stable")
    ordered = labels[order]
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
    sizes = np.diff(np.append(starts, len(ordered)))
    return [order[starts[sizes == k][:, None] + np.arange(k)] for k in np.unique(sizes)]


def gram_blocks(G, idx):
    """The blocks G[idx_b, idx_b] (n, k, k) of the dense or sparse Gram matrix ``G``."""
    if isinstance(G, np.ndarray):
        return G[idx[:, :, None], idx[:, None, :]]
    shape = idx.shape + idx.shape[1:]
    r = np.broadcast_to(idx[:, :, None], shape).ravel()
    c = np.broadcast_to(idx[:, None, :], shape).ravel()
    return np.asarray(G[r, c]).reshape(shape)


def likelihoods(noise_vars, blocks, G, alpha, z, y, yty, product, residuals=False):
    """L at each of the noise variances with alpha fixed, and for each the block Cholesky
    factors H = chol chol^T of Sigma^-1 = H = A + D_a^T D_a / sigma^2 it comes from:

        log|C| = N log sigma^2 - sum log alpha + log|H|,
        y^T C^-1 y = ||y - D_a mu||^2 / sigma^2 + mu^T A mu,  mu = H^-1 D_a^T y / sigma^2,

    the second form free of the cancellation in (y^T y - z^T H^-1 z / sigma^2) / sigma^2 that
    loses most digits when sigma^2 is small. All the values are factorised in one stacked call
    (the noise re-estimate tries several): small components padded to one size, larger ones
    by size, components of one function in closed form.

    ``blocks``: :func:`blocks_of` the components of ``G`` = D_a^T D_a (dense or sparse);
    ``alpha`` (K,) the active precisions; ``z`` = D_a^T y; ``y`` (N,) the samples, ``yty`` =
    y^T y; ``product(X)`` = D_a X over the samples for X (K, c). ``residuals``: also return
    ||y - D_a mu||^2 at each value.
    """
    noise_vars = np.asarray(noise_vars, dtype=np.float64).reshape(-1)
    c = len(noise_vars)
    N, beta = len(y), 1.0 / noise_vars
    if len(alpha) == 0:
        L = -0.5 * (N * LOG_2PI + N * np.log(noise_vars) + beta * yty)
        return (L, [None] * c, np.full(c, yty)) if residuals else (L, [None] * c)
    factors = [[] for _ in range(c)]
    logdet, mu = np.zeros(c), np.empty((c, len(alpha)))
    for idx in blocks:
        if idx.shape[1] == 1:
            i = idx[:, 0]
            h = beta[:, None] * gram_blocks(G, idx)[:, 0, 0][None] + alpha[i][None]  # (c, n_1)
            mu[:, i] = beta[:, None] * z[i][None] / h
            logdet += np.sum(np.log(h), axis=1)
            root = np.sqrt(h)
            for j in range(c):
                factors[j].append((idx, root[j][:, None, None]))
    # components of 2 to 8 functions in one stack, each padded to the largest size with an
    # identity block (H = chol = 1, z = 0 there: no change to log|H| or mu); larger ones by size
    small = [idx for idx in blocks if 1 < idx.shape[1] <= 8]
    stacks = [idx for idx in blocks if idx.shape[1] > 8]
    if small:
        k = max(idx.shape[1] for idx in small)
        rows = np.cumsum([0] + [len(idx) for idx in small])
        Gb, al, zb = np.zeros((rows[-1], k, k)), np.ones((rows[-1], k)), np.zeros((rows[-1], k))
        for r, idx in zip(rows, small):
            n, kb = idx.shape
            Gb[r:r + n, :kb, :kb] = gram_blocks(G, idx)
            al[r:r + n, :kb] = alpha[idx]
            zb[r:r + n, :kb] = z[idx]
        stacks.append((small, rows, Gb, al, zb))
    for item in stacks:
        if isinstance(item, tuple):
            small, rows, Gb, al, zb = item
        else:
            Gb, al, zb = gram_blocks(G, item), alpha[item], z[item]  # (n_k, k, k) ...
        k = Gb.shape[1]
        H = beta[:, None, None, None] * Gb[None]  # (c, n_k, k, k)
        H[:, :, np.arange(k), np.arange(k)] += al[None]
        chol = np.linalg.cholesky(H)
        rhs = beta[:, None, None] * zb[None]  # (c, n_k, k)
        if k <= 32:  # small blocks: one stacked LU solve costs less than two stacked calls
            sol = np.linalg.solve(H, rhs[..., None])[..., 0]
        else:  # large blocks (overlapping functions): triangular solves with the factor
            sol = np.empty_like(rhs)
            for j in range(c):
                for b in range(len(Gb)):
                    sol[j, b] = scipy.linalg.cho_solve((chol[j, b], True), rhs[j, b])
        logdet += 2.0 * np.sum(np.log(np.diagonal(chol, axis1=2, axis2=3)), axis=(1, 2))
        if isinstance(item, tuple):
            for r, idx in zip(rows, small):
                n, kb = idx.shape
                mu[:, idx] = sol[:, r:r + n, :kb]
                for j in range(c):
                    factors[j].append((idx, chol[j, r:r + n, :kb, :kb]))
        else:
            mu[:, item] = sol
            for j in range(c):
                factors[j].append((item, chol[j]))
    resid = y[:, None] - product(mu.T)  # (N, c)
    yCy = beta * np.einsum("nc,nc->c", resid, resid) + mu**2 @ alpha
    L = -0.5 * (N * LOG_2PI + N * np.log(noise_vars) - np.sum(np.log(alpha)) + logdet + yCy)
    if residuals:
        return L, factors, np.einsum("nc,nc->c", resid, resid)
    return L, factors


def posterior_from(factors):
    """Sigma = F^T F with F = chol^-1, block by block: (index, Sigma-block, F-block) triples."""
    out = []
    for idx, chol in factors or []:
        if idx.shape[1] == 1:  # components of one function: chol is sqrt(H)
            Fb = 1.0 / chol
            out.append((idx, Fb**2, Fb))
            continue
        if len(idx) == 1:
            Fb, _ = scipy.linalg.lapack.dtrtri(chol[0], lower=1)
            Sb, _ = scipy.linalg.lapack.dlauum(Fb, lower=1)  # F^T F in the lower triangle
            Sb = np.tril(Sb) + np.tril(Sb, -1).T
            Fb, Sb = Fb[None], Sb[None]
        else:
            Fb = np.tril(np.linalg.inv(chol))
            Sb = np.swapaxes(Fb, 1, 2) @ Fb
        out.append((idx, Sb, Fb))
    return out


def logdet_rounding(Sigma, G, blocks, beta):
    """First-order bound on the rounding of log|H| computed from H = A + D_a^T D_a / sigma^2 in
    float64: each entry of the second term is rounded by eps relative, which moves log|H| by
    at most eps / sigma^2 sum_ij |Sigma_ij| |D_a^T D_a|_ij (Sigma = H^-1, block-diagonal over
    ``blocks``; ``G`` = D_a^T D_a, ``beta`` = 1 / sigma^2). Large where sigma^2 is tiny and the
    Gram blocks are rank-deficient."""
    total = 0.0
    for idx in blocks:
        total += float(np.sum(np.abs(gram_blocks(Sigma, idx)) * np.abs(gram_blocks(G, idx))))
    return np.finfo(np.float64).eps * beta * total


def statistics_from_factor(design, active, F_blocks, beta, sq_norms, Dty, cross=None):
    """S and Q of every function from the factor F of Sigma = F^T F (blocks of
    :func:`posterior_from`: (index, F-block) pairs) with R = D^T D_a F^T (M, K):

        S_m = beta ||d_m||^2 - beta^2 ||R_m||^2,   Q_m = beta d_m^T y - beta^2 R_m . (F D_a^T y).

    R is formed from ``cross`` = D^T D_a (M, K) where it is held, with sparse products where the
    dictionary is sparse (O(nonzeros)), otherwise through the ``design``, ``_REFRESH_BLOCK``
    columns at a time (2K products with it). ``sq_norms``: ||d_m||^2; ``Dty``: D^T y.
    """
    a = active
    K = len(a)
    z = Dty[a]
    S = beta * sq_norms
    Q = beta * Dty
    if K == 0:
        return S, Q
    if cross is not None:  # R = B F^T
        Ft = np.zeros((K, K))
        for idx, Fb in F_blocks:
            Ft[idx[:, None, :], idx[:, :, None]] = Fb
        R = cross @ Ft
        S -= beta**2 * np.einsum("mk,mk->m", R, R)
        Q -= beta**2 * (R @ (Ft.T @ z))
        return S, Q
    rows = np.concatenate([np.broadcast_to(idx[:, :, None], Fb.shape).ravel() for idx, Fb in F_blocks])
    cols = np.concatenate([np.broadcast_to(idx[:, None, :], Fb.shape).ravel() for idx, Fb in F_blocks])
    vals = np.concatenate([Fb.ravel() for _, Fb in F_blocks])
    Ft = scipy.sparse.csr_matrix((vals, (cols, rows)), shape=(K, K))  # F^T
    Fz = Ft.T @ z
    Ds = design.sparse
    if Ds is not None:
        # R = D^T D_a F^T, from the sparse Gram matrix D^T D where it is cheap to hold
        GG = design.sparse_gram
        R = (GG[:, a] @ Ft if GG is not None else Ds.T @ (design.sparse_columns[:, a] @ Ft)).tocsr()
        rows_of = np.repeat(np.arange(R.shape[0]), np.diff(R.indptr))
        S -= beta**2 * np.bincount(rows_of, weights=R.data**2, minlength=R.shape[0])
        Q -= beta**2 * (R @ Fz)
        return S, Q
    Ft = Ft.toarray()
    block = _REFRESH_BLOCK
    for c0 in range(0, K, block):  # column blocks of R: the peak stays O(M block)
        X = np.zeros((design.dictionary.shape[1], min(block, K - c0)))
        X[a] = Ft[:, c0:c0 + block]
        R = design.rmatmat(design.matmat(X))
        S -= beta**2 * np.einsum("mk,mk->m", R, R)
        Q -= beta**2 * R @ Fz[c0:c0 + block]
    return S, Q
