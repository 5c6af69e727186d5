"""Batched linear algebra of symmetric positive definite matrices, float64: inverses,
log-determinants and triangular inverses of stacks of matrices, by LAPACK from the host or as
compiled JAX programs.

Most functions here work with the matrices

    B_q = I + A_q K A_q,   A_q = diag(lam_q)^1/2,   C_q = K + Lambda_q^-1 = A_q^-1 B_q A_q^-1

of one symmetric K (N, N) and a stack of positive precision vectors lam_q (N,), q = 1..Q, the
matrices whose factorisation gives S_q = (K^-1 + Lambda_q)^-1 = A_q^-1 (I - B_q^-1) A_q^-1 without
inverting K (Opper & Archambeau 2009, "The variational Gaussian approximation revisited"; the
parametrisation of eq. 5.28 of Sauer's thesis). Two routes compute the same things:

* the host route (:func:`host_inverse_and_logdet`, :func:`host_factor`, :func:`triangular_inverse`):
  LAPACK's potrf, potri, potrs and a blocked triangular inverse on numpy arrays, one matrix at a
  time, in place. :func:`inverse_and_logdet` calls it from JAX through a host callback where
  :func:`use_host_lapack` allows, else it takes JAX's own Cholesky factorisation;
* the compiled route (:func:`stacked_triangular_inverse`, :func:`stacked_cholesky_inverse`,
  :func:`device_factor`): blocked factorisations and inverses of the whole stack in batched matrix
  products around small batched LAPACK calls, one JAX program. :data:`DEVICE_FACTOR_MAX_N` is the
  largest N for which callers take it over :func:`host_factor`.

A factorisation that fails (a matrix that is not positive definite) gives NaN in the results of
that matrix only.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

__all__ = [
    "use_host_lapack",
    "host_inverse_and_logdet",
    "inverse_and_logdet",
    "triangular_inverse",
    "host_factor",
    "stacked_triangular_inverse",
    "stacked_cholesky_inverse",
    "device_factor",
    "DEVICE_FACTOR_MAX_N",
]

# up to this N, :func:`device_factor` (one compiled program for the whole stack) is the faster
# route on CPU; above it :func:`host_factor`, which also needs no (Q, N, N) stack in memory
DEVICE_FACTOR_MAX_N = 512


# ----------------------------------------------------------------------------------------------
# B^-1 and log|B| of B = I + A K A
# ----------------------------------------------------------------------------------------------
def use_host_lapack():
    """Whether :func:`inverse_and_logdet` may call LAPACK through a host callback: on CPU with at
    least two cores available to the process. With one, XLA's CPU runtime has no thread left to
    hand a callback its operands while the computation waits for it, and the callback would wait
    forever."""
    if jax.default_backend() != "cpu":
        return False
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return cores > 1


def host_inverse_and_logdet(K, lam):
    """(B^-1, log|B|) for B = I + A K A, A = diag(lam)^1/2, of a stack of precision vectors ``lam``
    (..., N) (``K`` (N, N), or a stack broadcast against ``lam``'s batch), by LAPACK's potrf and
    potri on numpy arrays: B = L L^T, log|B| = 2 sum_i log L_ii, B^-1 = L^-T L^-1 (potri, 2 N^3 / 3
    flops, where a solve against the identity costs 2 N^3).

    Only the upper triangle (in row-major terms) of each B^-1 is written; the strict lower one
    holds B's. Each B is built straight into the output buffer and factorised and inverted there:
    LAPACK gets its transpose, a Fortran-ordered view of the same memory (B is symmetric), so no
    transposing copies are made. A failed factorisation gives NaN for that B^-1 and log|B|."""
    import scipy.linalg.lapack as lapack

    N = lam.shape[-1]
    batch = np.broadcast_shapes(np.shape(K)[:-2], lam.shape[:-1])
    K = np.broadcast_to(K, batch + (N, N))
    a = np.sqrt(np.broadcast_to(lam, batch + (N,)))
    inv = np.empty(batch + (N, N), dtype=np.float64)
    logdet = np.empty(batch, dtype=np.float64)
    for i in np.ndindex(*batch):
        B = inv[i]
        np.multiply(K[i], a[i][:, None], out=B)
        B *= a[i][None, :]
        B.flat[:: N + 1] += 1.0
        c, info = lapack.dpotrf(B.T, lower=1, clean=0, overwrite_a=1)
        if info != 0:
            B[...], logdet[i] = np.nan, np.nan
            continue
        logdet[i] = 2.0 * np.sum(np.log(np.diagonal(c)))
        lapack.dpotri(c, lower=1, overwrite_c=1)
    return inv, logdet


def inverse_and_logdet(K, lam):
    """(B^-1, log|B|) for B = I + A K A, A = diag(lam)^1/2, in JAX, ``lam`` (..., N): by
    :func:`host_inverse_and_logdet` in a host callback where :func:`use_host_lapack` (then only the
    upper triangle of B^-1 is right), else by JAX's Cholesky factorisation B = L L^T and cho_solve
    against the identity (all of B^-1), log|B| = 2 sum_i log L_ii. Not differentiable itself."""
    N = K.shape[-1]
    if use_host_lapack():
        shapes = (jax.ShapeDtypeStruct(lam.shape + (N,), lam.dtype), jax.ShapeDtypeStruct(lam.shape[:-1], lam.dtype))
        return jax.pure_callback(host_inverse_and_logdet, shapes, K, lam, vmap_method="expand_dims")
    a = jnp.sqrt(lam)
    L = jnp.linalg.cholesky(jnp.eye(N, dtype=K.dtype) + a[..., :, None] * K * a[..., None, :])
    eye = jnp.broadcast_to(jnp.eye(N, dtype=K.dtype), L.shape)
    return jsl.cho_solve((L, True), eye), 2.0 * jnp.sum(jnp.log(jnp.diagonal(L, axis1=-2, axis2=-1)), -1)


# ----------------------------------------------------------------------------------------------
# The host route
# ----------------------------------------------------------------------------------------------
def triangular_inverse(L, base=64):
    """L <- L^-1 in place, for a lower-triangular Fortran-ordered float64 array (its strict upper
    triangle zero); returns L. By the recursive blocking

        [[A, 0], [C, D]]^-1 = [[A^-1, 0], [-D^-1 C A^-1, D^-1]]

    with the halves inverted in place first: N^3 / 3 flops, as LAPACK's trtri, nearly all of them
    in two triangular matrix products (trmm) per level. Blocks of at most ``base`` rows go to
    trtri."""
    import scipy.linalg.blas as blas
    import scipy.linalg.lapack as lapack

    n = L.shape[0]
    if n <= base:
        v, _ = lapack.dtrtri(L, lower=1, overwrite_c=1)
        if v is not L:  # a block of a larger array is copied in and out
            L[...] = v
        return L
    h = n // 2
    triangular_inverse(L[:h, :h], base)
    triangular_inverse(L[h:, h:], base)
    CA = blas.dtrmm(1.0, L[:h, :h], L[h:, :h], side=1, lower=1)  # C A^-1
    L[h:, :h] = blas.dtrmm(-1.0, L[h:, h:], CA, side=0, lower=1, overwrite_b=1)  # -D^-1 C A^-1
    return L


def host_factor(K, lam, r=None, *, chunk_elements=2**17):
    """For each q of ``lam`` (Q, N) (positive), with B_q = I + A_q K A_q, A_q = diag(lam_q)^1/2, by
    LAPACK on numpy arrays: log|B_q|, diag(B_q^-1) and, given ``r`` (Q, N), the solve

        (I + Lambda_q K)^-1 r_q = A_q B_q^-1 A_q^-1 r_q.

    Returns (diag B^-1 (Q, N), log|B| (Q,), the solves (Q, N) or None); a factorisation that fails
    gives NaN in its row (and entry) only.

    Through C_q = K + Lambda_q^-1 = L_q L_q^T (potrf), B_q = A_q C_q A_q, so

        log|B_q| = sum_n log lam_qn + 2 sum_n log (L_q)_nn,   diag(B_q^-1) = diag(C_q^-1) / lam_q,
        (I + Lambda_q K)^-1 r_q = C_q^-1 (r_q / lam_q)   (potrs),

    diag(C_q^-1) being the squared column norms of L_q^-1 (:func:`triangular_inverse`, N^3 / 3
    flops, as many as the factorisation). C_q and B_q differ by a diagonal scaling, to which the
    rounding errors of the Cholesky factorisation and of the triangular inverse are blind (van der
    Sluis), so this agrees with the factorisation of B_q to rounding.

    The stack goes in chunks of up to ``chunk_elements`` / N^2 matrices (1 MB by default, about one
    core's L2 cache; at least one matrix): each chunk's C_q are built in one C-ordered stack by two
    whole-array operations (K is symmetric, so each C_q's transpose, a Fortran-ordered view of the
    same memory, is what LAPACK factorises and inverts in place), and the log-determinants and
    column norms are reduced over the whole chunk, so per matrix only the LAPACK calls remain."""
    import scipy.linalg.lapack as lapack

    Q, N = lam.shape
    K = np.ascontiguousarray(K, dtype=np.float64)
    inv = 1.0 / lam
    dinv, logdet = np.empty((Q, N)), np.empty(Q)
    sol = None if r is None else np.empty((Q, N))
    chunk = max(1, min(Q, int(chunk_elements) // N**2))
    buf = np.empty((chunk, N, N))
    for start in range(0, Q, chunk):
        stop = min(Q, start + chunk)
        C = buf[: stop - start]
        C[...] = K
        C.reshape(len(C), N * N)[:, :: N + 1] += inv[start:stop]
        failed = np.zeros(len(C), dtype=bool)
        for j in range(len(C)):
            # C[j].T: F-ordered, the same memory; the factor and then its inverse stay in it
            c, info = lapack.dpotrf(C[j].T, lower=1, clean=1, overwrite_a=1)
            if info != 0:
                failed[j] = True
                continue
            if sol is not None:
                sol[start + j] = lapack.dpotrs(c, r[start + j] * inv[start + j], lower=1)[0]
            triangular_inverse(c)
        # the inverse L^-1 sits transposed in each C (row-major): its columns are C's rows
        diagonal = np.diagonal(C, axis1=1, axis2=2)
        with np.errstate(invalid="ignore", divide="ignore"):
            logdet[start:stop] = np.sum(np.log(lam[start:stop]), 1) - 2.0 * np.sum(np.log(diagonal), 1)
        np.einsum("qij,qij->qi", C, C, out=dinv[start:stop])
        dinv[start:stop] *= inv[start:stop]
        if failed.any():
            dinv[start:stop][failed], logdet[start:stop][failed] = np.nan, np.nan
            if sol is not None:
                sol[start:stop][failed] = np.nan
    return dinv, logdet, sol


# ----------------------------------------------------------------------------------------------
# The compiled route
# ----------------------------------------------------------------------------------------------
def stacked_triangular_inverse(L, base=64):
    """L^-1 of each of a stack (B, n, n) of lower-triangular matrices, in JAX, by the blocking

        [[A, 0], [C, D]]^-1 = [[A^-1, 0], [-D^-1 C A^-1, D^-1]],

    the two diagonal blocks of every matrix inverted together as one stack of twice the size (an
    odd n pads D by one row and column of the identity, whose inverse is itself), down to blocks of
    at most ``base`` rows, which one batched triangular solve against the identity inverts. Two
    batched matrix products per level and no per-matrix call (2 n^3 / 3 flops, the products not
    skipping the zero triangles)."""
    B, n, _ = L.shape
    if n <= base:
        eye = jnp.broadcast_to(jnp.eye(n, dtype=L.dtype), L.shape)
        return jax.lax.linalg.triangular_solve(L, eye, left_side=True, lower=True)
    h = (n + 1) // 2
    A, C, D = L[:, :h, :h], L[:, h:, :h], L[:, h:, h:]
    if n - h < h:
        D = jnp.zeros((B, h, h), L.dtype).at[:, : n - h, : n - h].set(D).at[:, h - 1, h - 1].set(1.0)
    both = stacked_triangular_inverse(jnp.concatenate([A, D], 0), base)
    Ai, Di = both[:B], both[B:, : n - h, : n - h]
    top = jnp.concatenate([Ai, jnp.zeros((B, h, n - h), L.dtype)], 2)
    return jnp.concatenate([top, jnp.concatenate([-(Di @ (C @ Ai)), Di], 2)], 1)


def stacked_cholesky_inverse(C, base=128):
    """(L^-1, sum_i log L_ii) of each of a stack (B, n, n) of symmetric positive definite matrices
    C = L L^T (L lower-triangular; so log|C| = 2 sum_i log L_ii and C^-1 = L^-T L^-1), in JAX, by
    the blocked factorisation

        [[C11, C21^T], [C21, C22]]:  L11 L11^T = C11,  L21 = C21 L11^-T,
        L22 L22^T = C22 - L21 L21^T (the Schur complement),
        L^-1 = [[L11^-1, 0], [-L22^-1 L21 L11^-1, L22^-1]],

    recursively on C11 and on the Schur complement down to blocks of at most ``base`` rows, which
    one batched Cholesky factorisation and :func:`stacked_triangular_inverse` handle; above the base
    everything is batched matrix products. A failed factorisation of any block gives NaN in its
    matrix only."""
    B, n, _ = C.shape
    if n <= base:
        L = jnp.linalg.cholesky(C)
        return stacked_triangular_inverse(L), jnp.sum(jnp.log(jnp.diagonal(L, axis1=1, axis2=2)), 1)
    h = n // 2
    W11, log11 = stacked_cholesky_inverse(C[:, :h, :h], base)
    L21 = C[:, h:, :h] @ jnp.swapaxes(W11, 1, 2)
    W22, log22 = stacked_cholesky_inverse(C[:, h:, h:] - L21 @ jnp.swapaxes(L21, 1, 2), base)
    top = jnp.concatenate([W11, jnp.zeros((B, h, n - h), C.dtype)], 2)
    return jnp.concatenate([top, jnp.concatenate([-(W22 @ (L21 @ W11)), W22], 2)], 1), log11 + log22


@jax.jit
def device_factor(K, lam, r):
    """:func:`host_factor` as one compiled JAX program, for the whole stack ``lam`` (Q, N) at once
    (N up to :data:`DEVICE_FACTOR_MAX_N`): C_q = K + Lambda_q^-1, L_q^-1 of each by
    :func:`stacked_cholesky_inverse`, and

        log|B_q| = sum_n log lam_qn + 2 sum_n log (L_q)_nn,
        diag(B_q^-1) = (squared column norms of L_q^-1) / lam_q,
        (I + Lambda_q K)^-1 r_q = C_q^-1 (r_q / lam_q) = L_q^-T L_q^-1 (r_q / lam_q)

    (``r`` (Q, N), zeros when no solve is wanted). Returns (diag B^-1 (Q, N), log|B| (Q,), the
    solves (Q, N)); a failed factorisation gives NaN in its row only."""
    inv = 1.0 / lam
    C = K[None] + inv[:, :, None] * jnp.eye(K.shape[0], dtype=K.dtype)[None]
    W, log_diag = stacked_cholesky_inverse(C)
    logdet = jnp.sum(jnp.log(lam), 1) + 2.0 * log_diag
    sol = jnp.einsum("qji,qj->qi", W, jnp.einsum("qij,qj->qi", W, r * inv))
    return jnp.sum(W**2, 1) * inv, logdet, sol
