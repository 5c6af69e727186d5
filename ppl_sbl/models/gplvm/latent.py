"""q(X) of the supervised and autoencoder GPLVMs in the reparametrisation of Opper & Archambeau
(Sauer's thesis, 5.28): S_q = (K_Y^-1 + Lambda_q)^-1, mu_q = K_Y mubar_q, with its KL from the
GP-latent prior, by one factorisation of B_q = I + Lambda_q^1/2 K_Y Lambda_q^1/2 per latent
dimension (K_Y is never inverted), and a custom gradient that costs O(N^2) beyond it."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

from ppl_sbl import linalg

__all__ = ["LAMBDA_FLOOR", "VARIANCE_FLOOR", "precisions", "latent_posterior", "whiten"]

LAMBDA_FLOOR = 1e-6  # lambda >= LAMBDA_FLOOR / mean(diag K_Y), see ``precisions``
VARIANCE_FLOOR = 1e-12  # the smallest marginal variance of q(X) or q(x*) passed on


def precisions(K_Y, log_lam):
    """lambda = exp(log_lam) + 1e-6 / mean(diag K_Y): the floor keeps S_q = A^-1 (I - B^-1) A^-1
    accurate (it bounds the cancellation in 1 - (B^-1)_nn) and changes q(X) by at most one part
    in a million of the prior's scale where lambda would be smaller."""
    return jnp.exp(log_lam) + LAMBDA_FLOOR / jnp.mean(jnp.diagonal(K_Y))


def _core_impl(K, lam):
    Binv, logdet = linalg.inverse_and_logdet(K, lam)
    return (1.0 - jnp.diagonal(Binv, axis1=-2, axis2=-1)) / lam, logdet, Binv


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _core(K, lam, k_grad):
    """(diag S, log|B|) with S = (K^-1 + Lambda)^-1 (S_q of 5.28) = A^-1 (I - B^-1) A^-1, B = I + A K A,
    A = Lambda^1/2: one factorisation and one inverse from it. The gradient (custom, so that it
    costs O(N^2) more): with g and c the cotangents of diag S and log|B|,

        d/dlambda = -(S o S) g + c diag(S)              (dS = -S dLambda S; dlog|B|/dlambda = diag S)
        d/dK = R^T diag(g) R + c A B^-1 A,  R = I - K A B^-1 A   (dS = R dK R^T; only if ``k_grad``)
    """
    var, logdet, _ = _core_impl(K, lam)
    return var, logdet


def _core_fwd(K, lam, k_grad):
    var, logdet, Binv = _core_impl(K, lam)
    # K is a residual only where its gradient is wanted: under ``lax.map`` each residual is stacked
    # once per latent dimension (Q copies of an N x N matrix)
    return (var, logdet), (K if k_grad else None, lam, Binv)


def _core_bwd(k_grad, res, ct):
    K, lam, Binv = res  # Binv: only its upper triangle is used
    g, c = ct
    N = Binv.shape[-1]
    a = jnp.sqrt(lam)
    upper = jnp.triu(jnp.ones((N, N), dtype=bool))
    strict_upper = jnp.triu(upper, 1)
    # (S o S) g with S = Lambda^-1 - A^-1 B^-1 A^-1: off the diagonal S_nm^2 = (B^-1)_nm^2 / (lam_n
    # lam_m), so from the strict upper triangle W of B^-1 and h = g / lam, row sums of W o W h^T
    # plus column sums of W o W h (reductions that XLA fuses with the squaring), over lam; on the
    # diagonal S_nn = (1 - (B^-1)_nn) / lam_n, the forward's variance (no cancellation)
    W2 = jnp.square(jnp.where(strict_upper, Binv, 0.0))
    h = g / lam
    var = (1.0 - jnp.diagonal(Binv)) / lam
    SSg = (W2 @ h + h @ W2) / lam + var * var * g
    d_lam = -SSg + c * var
    if not k_grad:
        return jnp.zeros((N, N), dtype=Binv.dtype), d_lam
    P = a[:, None] * jnp.where(upper, Binv, Binv.T) * a[None, :]
    R = jnp.eye(N, dtype=K.dtype) - K @ P
    return (R.T * g) @ R + c * P, d_lam


_core.defvjp(_core_fwd, _core_bwd)


def latent_posterior(K_Y, mubar, log_lam, *, full=False, k_grad=True):
    """q(X) from the Opper-Archambeau parameters (5.28), one latent dimension at a time:
    S_q = (K_Y^-1 + Lambda_q)^-1 = A^-1 (I - B^-1) A^-1 with A = Lambda_q^1/2, B = I + A K_Y A,
    mu_q = K_Y mubar_q, lambda from :func:`precisions`. Returns means (N, Q), marginal variances
    (N, Q), KL(q(X) || p(X | Y)) = sum_q [tr(B^-1) + mubar_q^T K_Y mubar_q - N + log|B|] / 2
    (tr(B^-1) = N - sum_n lambda_n S_nn), and with ``full`` the covariances (Q, N, N) (by the
    stabler K_Y - K_Y A B^-1 A K_Y). ``k_grad=False``: no gradient with respect to K_Y (a fixed
    latent prior), which saves three N x N products per dimension."""
    N = K_Y.shape[0]
    lam = precisions(K_Y, log_lam)  # (N, Q)
    # latent dimensions in batches of up to 2^25 / N^2 (256 MB per N x N stack)
    batch = max(1, min(lam.shape[1], 2**25 // N**2))
    var, logdet = jax.lax.map(lambda l: _core(K_Y, l, k_grad), lam.T, batch_size=batch)
    mu = K_Y @ mubar
    # tr(B^-1) = N - sum_n lambda_n S_nn with S_nn before the floor below (exact, where a floored
    # variance times a huge lambda would not be)
    kl = 0.5 * jnp.sum(N - jnp.sum(lam.T * var, 1) + jnp.sum(mubar * mu, 0) - N + logdet)
    var = jnp.maximum(var, VARIANCE_FLOOR)
    out = (mu, var.T, kl)
    if full:
        def cov(l):
            V = whiten(K_Y, l, K_Y)
            return K_Y - V.T @ V

        out = out + (jax.vmap(cov)(lam.T),)
    return out


def whiten(K_Y, lam, R):
    """chol(B)^-1 A R with B = I + A K_Y A, A = diag(lambda)^1/2: then R^T A B^-1 A R = V^T V, the
    term subtracted from the prior in S_q (5.28) and in the variance of q(x*) (5.30)."""
    a = jnp.sqrt(lam)
    LB = jnp.linalg.cholesky(jnp.eye(K_Y.shape[0], dtype=K_Y.dtype) + a[:, None] * K_Y * a[None, :])
    return jsl.solve_triangular(LB, a[:, None] * R, lower=True)
