"""Supervised, autoencoder and unsupervised Bayesian GPLVMs (Sauer's thesis, chapter 5; Titsias &
Lawrence 2010; Damianou et al. 2011), on the sparse GP of :mod:`ppl_sbl.sparse_gp`.

The supervised model (Fig. 5.1 b), for inputs Y (N, P) and outputs Z (N, D)::

    X[:, q] ~ N(0, K_Y)                       q = 1..Q        (5.1-5.2; K_Y = k_prior(Y, Y))
    U[:, d] ~ N(0, K_uu)                      d = 1..D        (5.10; inducing inputs X_u, RBF-ARD)
    F[:, d] | U, X ~ p(F | U, X)              (the GP on X given U, so that F ~ N(0, K_X) (5.6))
    Z[n, d] ~ N(F[n, d], 1 / beta)

with the RBF-ARD kernel on X (5.7): a latent dimension whose alpha_q goes to zero drops out. The
autoencoder model (Fig. 5.1 c) is the same program with Z = Y; the unsupervised Bayesian GPLVM
(Fig. 5.1 a) has X ~ N(0, I) instead of the GP-latent prior.

The guide (5.11): q(X) = prod_q N(mu_q, S_q) in the reparametrisation of Opper & Archambeau
(5.28): S_q = (K_Y^-1 + Lambda_q)^-1, mu_q = K_Y mubar_q, with Lambda_q = diag(lambda_q) (2 Q N
free parameters); q(U) optimal and analytic; F drawn from p(F | U, X) as in the model (5.11), so
that it cancels. The collapsed bound (5.20), derived afresh (the printed one drops the factor D on
psi0 and tr(K_uu^-1 Psi2) and the +QN/2 of the KL term):

    F = sum_d [ log N(z_d | 0, ...) collapsed ]  - beta D (psi0 - tr(K_uu^-1 Psi2)) / 2  - KL(q(X) || p(X | Y))

(:func:`ppl_sbl.sparse_gp.collapsed_bound` with the Psi statistics (5.22-5.24) of q(X)), and with
B_q = I + Lambda_q^1/2 K_Y Lambda_q^1/2,

    KL = sum_q [ tr(B_q^-1) + mubar_q^T K_Y mubar_q - N + log|B_q| ] / 2,
    S_q = K_Y - K_Y Lambda_q^1/2 B_q^-1 Lambda_q^1/2 K_Y,

so K_Y is never inverted (one Cholesky factorisation of B_q per latent dimension, O(Q N^3),
section 5.4). The bound is maximised over (mubar, lambda), the inducing inputs and the kernels'
parameters (5.25-5.27): by default in sweeps of a damped natural-gradient step on q(X) (the
fixed point of 5.28, :func:`_fit_natural`) and L-BFGS on the hyperparameters, else by L-BFGS on
everything (``optimizer="lbfgs"``). The supervised model's signal variance and noise precision are
fixed at a high signal-to-noise ratio by default (section 5.5.3; ``snr=None`` frees them).
Outputs are centred by their column means (added back by ``predict``).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import numpyro
import numpyro.distributions as dist

from ppl_sbl import sparse_gp as sg
from ppl_sbl.result import ResultMethods
from ppl_sbl.saving import Saveable
from ppl_sbl.validation import check_matrix, warn_unconverged

__all__ = [
    "supervised",
    "autoencoder",
    "unsupervised",
    "guide",
    "latent_posterior",
    "natural_gradient",
    "bound",
    "fit",
    "initial_parameters",
    "GPLVMResult",
    "MODELS",
    "OPTIMIZERS",
    "PRIOR_KERNELS",
]

MODELS = ("supervised", "autoencoder", "unsupervised")
PRIOR_KERNELS = ("rbf", "linear", "matern32")
_TINY = 1e-12


# ----------------------------------------------------------------------------------------------
# The NumPyro programs
# ----------------------------------------------------------------------------------------------
@functools.partial(jax.jit, static_argnums=(1, 3))
def _prior_cov(Y, prior_kernel, prior_params, jitter):
    return sg.add_jitter(sg.kernel(prior_kernel, prior_params, Y), jitter)


def _f_given_u(X, U, kernel_params, inducing, jitter):
    """p(F | U, X) per output column: mean K_fu K_uu^-1 u_d, covariance K_ff - K_fu K_uu^-1 K_uf
    (K_ff and K_uu with jitter, so that F's marginal is N(0, K_ff + jitter))."""
    Luu = jnp.linalg.cholesky(sg.add_jitter(sg.kernel("rbf_ard", kernel_params, inducing), jitter))
    Kfu = sg.kernel("rbf_ard", kernel_params, X, inducing)
    A = jsl.solve_triangular(Luu, Kfu.T, lower=True)  # (M, N)
    mean = jsl.solve_triangular(Luu.T, jsl.solve_triangular(Luu, U.T, lower=True), lower=False).T @ Kfu.T
    cov = sg.add_jitter(sg.kernel("rbf_ard", kernel_params, X), jitter) - A.T @ A
    return mean, 0.5 * (cov + cov.T)


def _outputs(X, Z, *, output_dim, kernel_params, noise_var, inducing, jitter):
    """p(U) p(F | U, X) p(Z | F), the GP on X augmented with inducing variables (5.10)."""
    N = X.shape[0]
    D = Z.shape[1] if Z is not None else int(output_dim)
    Kuu = sg.add_jitter(sg.kernel("rbf_ard", kernel_params, inducing), jitter)
    with numpyro.plate("outputs", D, dim=-1):
        U = numpyro.sample("U", dist.MultivariateNormal(jnp.zeros(inducing.shape[0]), covariance_matrix=Kuu))
        mean, cov = _f_given_u(X, U, kernel_params, inducing, jitter)
        F = numpyro.sample("F", dist.MultivariateNormal(mean, covariance_matrix=cov))  # (D, N)
    with numpyro.plate("data", N, dim=-2), numpyro.plate("outputs", D, dim=-1):
        numpyro.sample("Z", dist.Normal(F.T, jnp.sqrt(noise_var)), obs=Z)


def _defaults(Y, Z, latent_dim, num_inducing, prior_kernel, prior_params, kernel_params, noise_var, inducing):
    Y = jnp.asarray(Y, dtype=jnp.float64)
    if prior_params is None:
        prior_params = sg.default_params(prior_kernel, np.asarray(Y))
    if kernel_params is None:
        kernel_params = {"variance": jnp.asarray(1.0), "alpha": jnp.ones(latent_dim)}
    if noise_var is None:
        noise_var = 0.01 * float(kernel_params["variance"])
    if inducing is None:  # any inducing inputs leave the model's marginal unchanged
        inducing = jax.random.normal(jax.random.PRNGKey(0), (int(num_inducing), int(latent_dim)))
    return Y, (None if Z is None else jnp.asarray(Z, dtype=jnp.float64)), prior_params, kernel_params, noise_var, \
        jnp.asarray(inducing)


def supervised(Y, Z=None, *, latent_dim, num_inducing, prior_kernel="rbf", prior_params=None, kernel_params=None,
               noise_var=None, inducing=None, output_dim=None, jitter=sg.JITTER):
    """The supervised Bayesian GPLVM (Fig. 5.1 b): X[:, q] ~ N(0, K_Y) (5.2), Z from a GP on X
    with the RBF-ARD kernel (5.6-5.7). Sites: ``X`` (Q, N), row q the latent dimension q over
    the N points; ``U`` (D, M) and ``F`` (D, N), the inducing and function values of each output
    column; ``Z`` (N, D) observed. ``Z=None`` draws outputs (give ``output_dim``)."""
    Y, Z, prior_params, kernel_params, noise_var, inducing = _defaults(
        Y, Z, latent_dim, num_inducing, prior_kernel, prior_params, kernel_params, noise_var, inducing)
    K_Y = _prior_cov(Y, prior_kernel, prior_params, jitter)
    with numpyro.plate("latent_dims", int(latent_dim), dim=-1):
        Xt = numpyro.sample("X", dist.MultivariateNormal(jnp.zeros(Y.shape[0]), covariance_matrix=K_Y))
    _outputs(Xt.T, Z, output_dim=output_dim, kernel_params=kernel_params, noise_var=noise_var, inducing=inducing,
             jitter=jitter)


def autoencoder(Y, Z=None, *, latent_dim, num_inducing, **kwargs):
    """The autoencoder GPLVM (Fig. 5.1 c): :func:`supervised` with the inputs as outputs, Z = Y
    (pass ``Z`` only to override; ``Z=None`` with ``output_dim`` draws)."""
    if Z is None and kwargs.get("output_dim") is None:
        Z = Y
    return supervised(Y, Z, latent_dim=latent_dim, num_inducing=num_inducing, **kwargs)


def unsupervised(Y, Z=None, *, latent_dim, num_inducing, kernel_params=None, noise_var=None, inducing=None,
                 output_dim=None, jitter=sg.JITTER, **unused):
    """The Bayesian GPLVM of Titsias & Lawrence (2010) (Fig. 5.1 a): X ~ N(0, I), the data Y (or
    ``Z``) from a GP on X. ``X`` (Q, N) as in :func:`supervised`."""
    Y, Z, _, kernel_params, noise_var, inducing = _defaults(
        Y, Z, latent_dim, num_inducing, "linear", {"variance": 1.0}, kernel_params, noise_var, inducing)
    Z = Y if Z is None and output_dim is None else Z
    with numpyro.plate("latent_dims", int(latent_dim), dim=-1):
        Xt = numpyro.sample("X", dist.Normal(jnp.zeros(Y.shape[0]), 1.0).to_event(1))
    _outputs(Xt.T, Z, output_dim=output_dim, kernel_params=kernel_params, noise_var=noise_var, inducing=inducing,
             jitter=jitter)


_PROGRAMS = {"supervised": supervised, "autoencoder": autoencoder, "unsupervised": unsupervised}


def guide(Y, Z=None, *, latent_dim, num_inducing, q_mean, q_cov, u_mean, u_cov, kernel_params, inducing,
          jitter=sg.JITTER, **unused):
    """q(X) q(U) p(F | U, X) (5.11): X[q] ~ N(mu_q, S_q) (``q_mean`` (N, Q), ``q_cov`` (Q, N, N),
    full covariances; diagonal ones (Q, N) for the unsupervised model), U[d] ~ N(u_mean[d],
    u_cov), F from the model's conditional."""
    q_mean = jnp.asarray(q_mean)
    with numpyro.plate("latent_dims", int(latent_dim), dim=-1):
        if q_cov.ndim == 3:
            Xt = numpyro.sample("X", dist.MultivariateNormal(q_mean.T, covariance_matrix=q_cov))
        else:
            Xt = numpyro.sample("X", dist.Normal(q_mean.T, jnp.sqrt(q_cov)).to_event(1))
    with numpyro.plate("outputs", u_mean.shape[0], dim=-1):
        U = numpyro.sample("U", dist.MultivariateNormal(u_mean, covariance_matrix=u_cov))
        mean, cov = _f_given_u(Xt.T, U, kernel_params, inducing, jitter)
        numpyro.sample("F", dist.MultivariateNormal(mean, covariance_matrix=cov))


# ----------------------------------------------------------------------------------------------
# The bound
# ----------------------------------------------------------------------------------------------
LAMBDA_FLOOR = 1e-6  # lambda >= LAMBDA_FLOOR / mean(diag K_Y), see ``precisions``


def precisions(K_Y, log_lam):
    """lambda = exp(log_lam) + 1e-6 / mean(diag K_Y): the floor keeps S_q = A^-1 (I - B^-1) A^-1
    accurate (it bounds the cancellation in 1 - (B^-1)_nn) and changes q(X) by at most one part
    in a million of the prior's scale where lambda would be smaller."""
    return jnp.exp(log_lam) + LAMBDA_FLOOR / jnp.mean(jnp.diagonal(K_Y))


def _host_inverse(K, lam):
    """B^-1 and log|B| for B = I + A K A, A = diag(lam)^1/2, of a stack of precision vectors
    ``lam`` (..., N) (``K`` (N, N), or broadcast against ``lam``'s batch), by LAPACK's potrf and
    potri (the inverse from the Cholesky factor, 2 N^3 / 3 flops; JAX has no potri, and
    cho_solve with the identity costs 2 N^3). Each B is written straight into the output buffer
    and factorised and inverted there: LAPACK gets its transpose, a Fortran-ordered view of the
    same memory (B is symmetric), so no transposing copies are made. Only the upper triangle (in
    row-major terms) of each inverse is written; the lower one holds B."""
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


def _host_lapack():
    """Whether to use LAPACK's potri through a host callback: on CPU with at least two cores
    available to the process. With one, XLA's CPU runtime has no thread left to hand a callback
    its operands while the computation waits for it, and the callback would wait forever."""
    if jax.default_backend() != "cpu":
        return False
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return cores > 1


def _inverse_and_logdet(K, lam):
    """(B^-1 with at least its upper triangle right, log|B|), B = I + A K A, A = diag(lam)^1/2:
    by :func:`_host_inverse` where :func:`_host_lapack`, else by JAX's Cholesky and cho_solve."""
    N = K.shape[-1]
    if _host_lapack():
        shapes = (jax.ShapeDtypeStruct(lam.shape + (N,), lam.dtype), jax.ShapeDtypeStruct(lam.shape[:-1], lam.dtype))
        return jax.pure_callback(_host_inverse, shapes, K, lam, vmap_method="expand_dims")
    a = jnp.sqrt(lam)
    L = jnp.linalg.cholesky(jnp.eye(N, dtype=K.dtype) + a[..., :, None] * K * a[..., None, :])
    eye = jnp.broadcast_to(jnp.eye(N, dtype=K.dtype), L.shape)
    return jsl.cho_solve((L, True), eye), 2.0 * jnp.sum(jnp.log(jnp.diagonal(L, axis1=-2, axis2=-1)), -1)


def _core_impl(K, lam):
    Binv, logdet = _inverse_and_logdet(K, lam)
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
    var = jnp.maximum(var, _TINY)
    out = (mu, var.T, kl)
    if full:
        def cov(l):
            V = _whiten(K_Y, l, K_Y)
            return K_Y - V.T @ V

        out = out + (jax.vmap(cov)(lam.T),)
    return out


def _whiten(K_Y, lam, R):
    """chol(B)^-1 A R with B = I + A K_Y A, A = diag(lambda)^1/2: then R^T A B^-1 A R = V^T V, the
    term subtracted from the prior in S_q (5.28) and in the variance of q(x*) (5.30)."""
    a = jnp.sqrt(lam)
    LB = jnp.linalg.cholesky(jnp.eye(K_Y.shape[0], dtype=K_Y.dtype) + a[:, None] * K_Y * a[None, :])
    return jsl.solve_triangular(LB, a[:, None] * R, lower=True)


def _unpack(free, fixed):
    p = {**fixed, **free}
    kernel_params = {"variance": jnp.exp(p["log_variance"]), "alpha": jnp.exp(p["log_alpha"])}
    prior_params = {k: jnp.exp(v) for k, v in p.get("log_prior", {}).items()}
    if p.get("log_prior_variance") is not None:
        prior_params["variance"] = jnp.exp(p["log_prior_variance"])
    return p, kernel_params, prior_params, jnp.exp(p["log_beta"])


def _q_x(model, p, prior_params, Y, prior_kernel, jitter, full=False, k_grad=False):
    if model == "unsupervised":
        mu, var = p["mean"], jnp.exp(p["log_var"])
        kl = 0.5 * jnp.sum(mu**2 + var - 1.0 - jnp.log(var))
        return (mu, var, kl) + ((var.T,) if full else ())
    K_Y = _prior_cov(Y, prior_kernel, prior_params, jitter)
    return latent_posterior(K_Y, p["mubar"], p["log_lam"], full=full, k_grad=k_grad)


# q(X) of a fitted result (its covariances too), compiled once per model, kernel and shape
_q_x_compiled = jax.jit(_q_x, static_argnums=(0, 4, 5), static_argnames=("full", "k_grad"))


def bound(free, fixed, Y, Z, *, model, prior_kernel, jitter=sg.JITTER):
    """The collapsed bound (5.20, derived with the factor D) of a parameter set: ``free`` the
    optimised parameters, ``fixed`` the others (same keys: ``mubar``/``log_lam`` (N, Q) or, for
    the unsupervised model, ``mean``/``log_var``; ``inducing`` (M, Q); ``log_alpha`` (Q,);
    ``log_variance``; ``log_beta``; ``log_prior`` the latent-prior kernel's)."""
    p, _, prior_params, _ = _unpack(free, fixed)
    mu, var, kl = _q_x(model, p, prior_params, Y, prior_kernel, jitter, k_grad="log_prior" in free)
    return _data_term(mu, var, free, fixed, Z, jitter) - kl


def _q_u(kp, inducing, stats, Z, beta, jitter):
    """q(U) at its optimum (Titsias 2009; the thesis's 3.28-3.29 with Psi1, Psi2 for K_NM, K_MN K_NM):
    Sigma_u = K_uu (K_uu + beta Psi2)^-1 K_uu, m_d = beta K_uu (K_uu +
    beta Psi2)^-1 Psi1^T z_d; with K_uu = Lm Lm^T and B = I + beta Lm^-1 Psi2 Lm^-T = LB LB^T:
    Sigma_u = (Lm LB^-T)(Lm LB^-T)^T, m = beta Lm LB^-T LB^-1 Lm^-1 Psi1^T Z."""
    f = sg._factors(sg.kernel("rbf_ard", kp, inducing), stats, Z, beta, jitter)
    W = f.Lm @ jsl.solve_triangular(f.LB.T, jnp.eye(f.LB.shape[0], dtype=Z.dtype), lower=False)
    mean = (beta * W @ f.c).T  # (D, M)
    return mean, W @ W.T


# ----------------------------------------------------------------------------------------------
# Fitting
# ----------------------------------------------------------------------------------------------
OPTIMIZERS = ("natural", "lbfgs")
_MIN_RHO = 2.0**-30  # below it the natural step is refused for this sweep (the bound's rounding)
_FULL_SWEEP_EVERY = 10  # natural sweeps: every latent dimension's q(X) is updated at least this often


def _triangular_inverse(L, base=64):
    """L <- L^-1 in place, for a lower-triangular Fortran-ordered float64 array (its strict upper
    triangle zero), by the recursive blocking [[A, 0], [C, D]]^-1 = [[A^-1, 0], [-D^-1 C A^-1, D^-1]]:
    N^3 / 3 flops, as LAPACK's trtri, but nearly all of them in two triangular matrix products
    (trmm) per level, which run closer to the speed of the Cholesky factorisation than trtri's
    unblocked inner steps do at these sizes. Blocks of at most ``base`` rows go to trtri."""
    import scipy.linalg.blas as blas
    import scipy.linalg.lapack as lapack

    n = L.shape[0]
    if n <= base:
        v, _ = lapack.dtrtri(L, lower=1, overwrite_c=1)
        if v is not L:  # a block of a larger array is copied in and out
            L[...] = v
        return L
    h = n // 2
    _triangular_inverse(L[:h, :h], base)
    _triangular_inverse(L[h:, h:], base)
    CA = blas.dtrmm(1.0, L[:h, :h], L[h:, :h], side=1, lower=1)  # C A^-1
    L[h:, :h] = blas.dtrmm(-1.0, L[h:, h:], CA, side=0, lower=1, overwrite_b=1)  # -D^-1 C A^-1
    return L


def _host_factor(K, lam, r=None, *, chunk_elements=2**17):
    """What one step of :func:`_fit_natural` needs of B_q = I + A K A, A = diag(lam_q)^1/2 (S_q =
    (K^-1 + Lambda_q)^-1 = A^-1 (I - B_q^-1) A^-1 in the parametrisation (5.28)), for each latent
    dimension (``lam`` (Q, N), positive), by LAPACK: log|B_q|, diag(B_q^-1) (the bound
    needs the diagonal of B_q^-1 only, not B_q^-1 in full), and with ``r`` (Q, N) the natural
    direction of the means, A B_q^-1 A^-1 r_q = (I + Lambda_q K)^-1 r_q = K^-1 S_q r_q. Returns
    (diag B^-1 (Q, N), log|B| (Q,), direction (Q, N) or None); a factorisation that fails gives NaN
    (the step is then refused).

    B_q = A C_q A with C_q = K + Lambda_q^-1, so B_q's Cholesky factor is A L_q with L_q C_q's
    (potrf), and

        log|B_q| = sum log lam_q + 2 sum log diag L_q,   diag(B_q^-1) = diag(C_q^-1) / lam_q,
        (I + Lambda_q K)^-1 r_q = C_q^-1 (r_q / lam_q)  (potrs),

    diag(C_q^-1) being the squared column norms of the triangular inverse L_q^-1
    (:func:`_triangular_inverse`; N^3 / 3 flops, as many as the factorisation). C_q and B_q differ
    by a diagonal scaling, to which the rounding errors of the Cholesky factorisation and of the
    triangular inverse are blind (van der Sluis): the two routes agree to rounding (the tests
    compare them with numpy's inverse of B_q), and C_q is built in one pass over K where B_q took
    two.

    The latent dimensions go in chunks of up to ``chunk_elements`` / N^2 (1 MB by default, the
    size of one core's L2 cache on the benchmark machine; at least one dimension): each chunk's
    C_q are built in one C-ordered stack by two whole-array operations (K is symmetric, so each
    C_q's transpose, a Fortran-ordered view of the same memory, is what LAPACK factorises and
    inverts in place), and the log-determinants and the column norms of L_q^-1 are taken over the
    whole chunk: per latent dimension only the LAPACK calls remain, and the chunk is still in
    cache when they and the reductions read it. (At N = 100, Q = 20 whole-chunk operations are
    1.2x faster than building and reducing one matrix at a time, whose dozen small numpy calls per
    dimension cost about two thirds of a factorisation; against one 8 MB stack of every
    dimension, 1 MB chunks took 25.2 against 27.8 ms at N = 400 and 4.9 against 5.1 ms at N =
    200, medians of 60 interleaved rounds; building C_q instead of B_q took 1.06 against 1.15 ms at
    N = 100 and 4.49 against 4.83 ms at N = 200, medians of 80.)"""
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
            _triangular_inverse(c)
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


# up to this N, updates of every latent dimension of q(X) factorise in one compiled program
# (:func:`_device_factor`); above it the host route (:func:`_host_factor`), which needs no N x N
# stack of Q matrices. ``bench/gplvm_crossover.py`` (record bench/results/gplvm_cpu_crossover.log:
# digits, Q = 20, each route over JAX's batched Cholesky, interleaved in one process, medians /
# minima): device against host 2.12 / 2.38 against 2.61 / 4.09 at N = 100, 1.38 / 1.56 against
# 2.10 / 2.82 at 256, 1.37 / 2.09 against 1.82 / 2.79 at 400, 1.44 / 1.71 against 1.78 / 2.32 at
# 512, but 1.95 / 2.02 against 1.62 / 1.78 at 600
_DEVICE_FACTOR_MAX_N = 512


def _stacked_triangular_inverse(L, base=64):
    """L^-1 of a stack (B, n, n) of lower-triangular matrices, in JAX, by the blocking
    [[A, 0], [C, D]]^-1 = [[A^-1, 0], [-D^-1 C A^-1, D^-1]], the two diagonal blocks of every
    matrix inverted together as one stack of twice the size (an odd n pads D by one row and
    column of the identity, whose inverse is itself), down to blocks of at most ``base`` rows,
    which one batched triangular solve against the identity inverts. One LAPACK call for the
    whole stack and two batched matrix products per level: 2 n^3 / 3 flops against trtri's n^3 / 3
    (the products do not skip the zero triangles), but no per-matrix call at all."""
    B, n, _ = L.shape
    if n <= base:
        eye = jnp.broadcast_to(jnp.eye(n, dtype=L.dtype), L.shape)
        return jax.lax.linalg.triangular_solve(L, eye, left_side=True, lower=True)
    h = (n + 1) // 2
    A, C, D = L[:, :h, :h], L[:, h:, :h], L[:, h:, h:]
    if n - h < h:
        D = jnp.zeros((B, h, h), L.dtype).at[:, : n - h, : n - h].set(D).at[:, h - 1, h - 1].set(1.0)
    both = _stacked_triangular_inverse(jnp.concatenate([A, D], 0), base)
    Ai, Di = both[:B], both[B:, : n - h, : n - h]
    top = jnp.concatenate([Ai, jnp.zeros((B, h, n - h), L.dtype)], 2)
    return jnp.concatenate([top, jnp.concatenate([-(Di @ (C @ Ai)), Di], 2)], 1)


def _stacked_cholesky_inverse(C, base=128):
    """(L^-1, sum_i log L_ii) of each of a stack (B, n, n) of symmetric positive definite matrices
    C = L L^T, in JAX, by the blocked factorisation

        [[C11, C21^T], [C21, C22]]:  L11 L11^T = C11,  L21 = C21 L11^-T,
        L22 L22^T = C22 - L21 L21^T (the Schur complement),
        L^-1 = [[L11^-1, 0], [-L22^-1 L21 L11^-1, L22^-1]],

    recursively on C11 and on the Schur complement down to blocks of at most ``base`` rows, which
    one batched Cholesky factorisation and :func:`_stacked_triangular_inverse` handle. Above the
    base everything is batched matrix products, which run faster per flop than LAPACK's potrf on
    these sizes: the factorisation's own flops shrink to a quarter per level, for four products of
    half size (their zero triangles not skipped). A failed factorisation of any
    block gives NaN in its matrix only."""
    B, n, _ = C.shape
    if n <= base:
        L = jnp.linalg.cholesky(C)
        return _stacked_triangular_inverse(L), jnp.sum(jnp.log(jnp.diagonal(L, axis1=1, axis2=2)), 1)
    h = n // 2
    W11, log11 = _stacked_cholesky_inverse(C[:, :h, :h], base)
    L21 = C[:, h:, :h] @ jnp.swapaxes(W11, 1, 2)
    W22, log22 = _stacked_cholesky_inverse(C[:, h:, h:] - L21 @ jnp.swapaxes(L21, 1, 2), base)
    top = jnp.concatenate([W11, jnp.zeros((B, h, n - h), C.dtype)], 2)
    return jnp.concatenate([top, jnp.concatenate([-(W22 @ (L21 @ W11)), W22], 2)], 1), log11 + log22


@jax.jit
def _device_factor(K, lam, r):
    """:func:`_host_factor` (q(X)'s moments in the parametrisation (5.28)) as one compiled JAX
    program, for N up to ``_DEVICE_FACTOR_MAX_N``, where the per-dimension LAPACK calls of the host
    route (potrf, and a triangular inverse in LAPACK-sized steps) cost more than the batched matrix
    products of :func:`_stacked_cholesky_inverse` with their extra flops: the Q matrices C_q = K +
    Lambda_q^-1, L_q^-1 of each, diag(C_q^-1) as its squared column norms, and C_q^-1 (r_q / lam_q)
    = L_q^-T L_q^-1 (r_q / lam_q) by two batched products (``r`` (Q, N), zeros when no direction is
    wanted). A failed factorisation gives NaN in its dimension only. Returns (diag B^-1, log|B|,
    direction) as :func:`_host_factor`."""
    inv = 1.0 / lam
    C = K[None] + inv[:, :, None] * jnp.eye(K.shape[0], dtype=K.dtype)[None]
    W, log_diag = _stacked_cholesky_inverse(C)
    logdet = jnp.sum(jnp.log(lam), 1) + 2.0 * log_diag
    sol = jnp.einsum("qji,qj->qi", W, jnp.einsum("qij,qj->qi", W, r * inv))
    return jnp.sum(W**2, 1) * inv, logdet, sol


def _data_term(mu, var, hyper, fixed, Z, jitter):
    """F~(mu, diag S; hyperparameters): the bound (5.20) without its KL term (it depends on q(X) only
    through the means and marginal variances, via the Psi statistics)."""
    p, kp, _, beta = _unpack(hyper, fixed)
    stats = sg.psi_statistics("rbf_ard", kp, mu, var, p["inducing"])
    return sg.collapsed_bound(Z, stats, sg.kernel("rbf_ard", kp, p["inducing"]), beta, jitter)


@functools.lru_cache(maxsize=None)
def _data_term_functions(jitter):
    """F~ compiled once per jitter: its value; its value and gradient in (mu, diag S, the
    hyperparameters); in (mu, diag S) only (the q(X) step, which does not use the rest); in the
    hyperparameters only (their L-BFGS steps)."""
    f = functools.partial(_data_term, jitter=jitter)
    return (jax.jit(f), jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2))),
            jax.jit(jax.value_and_grad(f, argnums=(0, 1))), jax.jit(jax.value_and_grad(f, argnums=2)))


def _flat(tree):
    """(the leaves of ``tree`` as one float64 numpy vector, the inverse: a vector to the same tree
    of numpy arrays): ``ravel_pytree`` without its per-call JAX operations, for the L-BFGS loop,
    whose jitted objective takes numpy leaves directly."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    shapes = [np.shape(leaf) for leaf in leaves]
    ends = np.cumsum([int(np.prod(s)) for s in shapes])

    def unflatten(v):
        parts = np.split(np.asarray(v, dtype=np.float64), ends[:-1])
        return jax.tree_util.tree_unflatten(treedef, [x.reshape(s) for x, s in zip(parts, shapes)])

    return np.concatenate([np.ravel(np.asarray(leaf, dtype=np.float64)) for leaf in leaves]), unflatten


class _NaturalProblem:
    """The pieces of the bound that the natural-gradient fit evaluates, for the supervised or
    autoencoder model with the latent prior fixed: K_Y (computed once), the data term F~ and its
    gradients (compiled once per jitter), and q(X)'s moments from (mubar, lambda) by
    :func:`_device_factor` (every latent dimension, N <= ``_DEVICE_FACTOR_MAX_N``) or
    :func:`_host_factor` (larger N, or some of the dimensions)."""

    def __init__(self, free, fixed, Y, Z, *, prior_kernel, jitter):
        self.F_value, self.F_grad, self.F_q, self.F_hyper = _data_term_functions(jitter)
        _, _, prior_params, _ = _unpack(free, fixed)
        self.K = np.asarray(_prior_cov(Y, prior_kernel, prior_params, jitter))
        self.K_device = jnp.asarray(self.K)  # for _device_factor, transferred once
        self.floor = LAMBDA_FLOOR / float(np.mean(np.diag(self.K)))
        self.fixed, self.Z = fixed, Z

    def moments(self, mubar, lam, r=None, rho=0.0):
        """(mubar, mu, diag S, KL) of q(X) at (mubar, lambda) (N, Q); with ``r`` (N, Q), mubar first
        moves by rho (I + Lambda_q K_Y)^-1 r_q (the same factorisations)."""
        state = self.update(None, mubar, lam, slice(None), r, rho)  # a slice: views, not copies
        return state[0], state[1], state[2], float(np.sum(state[3]))

    def update(self, state, mubar, lam, dims, r=None, rho=0.0):
        """q(X)'s moments with the latent dimensions ``dims`` recomputed at (mubar, lambda) (and
        moved along ``r`` as in :meth:`moments`) and the others taken from ``state``, the tuple
        (mubar, mu, diag S, KL per dimension (Q,)) this returns (None: ``dims`` must be all of
        them). Only ``dims`` are factorised: the bound stays exact, each dimension's q(x_q)
        entering the KL term on its own."""
        N, Q = lam.shape
        if N <= _DEVICE_FACTOR_MAX_N and len(np.arange(Q)[dims]) == Q:  # every dimension: one program
            rr = np.zeros((Q, N)) if r is None else r.T
            dinv, logdet, sol = (np.asarray(x) for x in _device_factor(self.K_device, np.ascontiguousarray(lam.T), rr))
            sol = None if r is None else sol
        else:
            dinv, logdet, sol = _host_factor(self.K, lam[:, dims].T, None if r is None else r[:, dims].T)
        if state is None:
            mubar_new, mu, var, kl = np.array(mubar, dtype=np.float64), np.empty((N, Q)), np.empty((N, Q)), np.empty(Q)
        else:
            mubar_new, mu, var, kl = (np.array(x) for x in state)
        m = mubar[:, dims] if sol is None else mubar[:, dims] + rho * sol.T
        mubar_new[:, dims] = m
        mu[:, dims] = self.K @ m
        var[:, dims] = np.maximum((1.0 - dinv.T) / lam[:, dims], _TINY)
        # KL(q(x_q) || N(0, K_Y)), the KL term of (5.20) in the parameters of (5.28): tr(K_Y^-1 S_q) =
        # tr(B_q^-1) = sum dinv, mu_q^T K_Y^-1 mu_q = mubar_q^T mu_q, log|K_Y| - log|S_q| = log|B_q|
        kl[dims] = 0.5 * (np.sum(dinv, 1) + np.sum(m * mu[:, dims], 0) - N + logdet)
        return mubar_new, mu, var, kl

    def value(self, mu, var, kl, hyper):
        v = float(self.F_value(mu, var, hyper, self.fixed, self.Z)) - kl  # numpy in: no device_put per array
        return v if np.isfinite(v) else -np.inf

    def gradient(self, mu, var, hyper):
        """F~ and its gradients in the means, the marginal variances and the hyperparameters."""
        return self.F_grad(mu, var, hyper, self.fixed, self.Z)

    def q_gradient(self, mu, var, hyper):
        """F~ and its gradients in the means and marginal variances only (the q(X) step)."""
        return self.F_q(mu, var, hyper, self.fixed, self.Z)


def natural_gradient(free, fixed, Y, Z, *, prior_kernel="rbf", jitter=sg.JITTER):
    """The bound and its gradient in the coordinates the natural-gradient fit moves in: q(X)'s
    means mu_q and marginal variances s_q = diag S_q (within the Opper-Archambeau family (5.28),
    where the KL term's gradient is free: d(-KL)/dmu_q = -mubar_q, d(-KL)/ds_q = lambda_q / 2),
    and the hyperparameters. One Cholesky factorisation and one triangular inverse per latent
    dimension, where the gradient in (mubar, lambda) needs B_q^-1 in full. Returns (bound,
    {"mean": (N, Q), "var": (N, Q), and the hyperparameters' keys}). For the supervised or
    autoencoder model with the latent prior fixed."""
    prob = _NaturalProblem(free, fixed, Y, Z, prior_kernel=prior_kernel, jitter=jitter)
    lam = np.asarray(precisions(jnp.asarray(prob.K), free["log_lam"]))
    mubar, mu, var, kl = prob.moments(np.asarray(free["mubar"], dtype=np.float64), lam)
    hyper = {k: v for k, v in free.items() if k not in ("mubar", "log_lam")}
    F, (g_mu, g_var, g_hyper) = prob.gradient(mu, var, hyper)
    return float(F) - kl, {**g_hyper, "mean": np.asarray(g_mu) - mubar, "var": np.asarray(g_var) + 0.5 * lam}


def _fit_natural(free, fixed, Y, Z, *, prior_kernel, jitter, max_steps, tol, hyper_steps, progress_bar, prune):
    """Maximise the bound of the supervised or autoencoder model (the latent prior fixed) by
    alternating two ascent steps, each accepted only if the bound does not fall:

    * q(X): the fixed point of (5.28) as a damped natural-gradient step (Opper & Archambeau 2009;
      Khan & Lin 2017). With g_mu, g_s the gradients of the data term F~ in the means and
      marginal variances, lambda* = -2 g_s and rho in (0, 1]:

          lambda <- lambda + rho (lambda* - lambda),     mu <- mu + rho S_q' (g_mu - mubar_q)

      (S_q' the new covariance; in mubar: mubar += rho (I + Lambda_q' K_Y)^-1 (g_mu - mubar)), the
      step in the natural parameters (S^-1, S^-1 mu) of q(X); rho = 1 is the fixed point itself.
      rho is halved until the bound does not fall, and doubled (up to 1) at the next step. Both
      parts are ascent directions: d bound / d lambda = (S o S)(lambda* - lambda) / 2 with S o S
      positive semi-definite, d bound / d mubar = K_Y (g_mu - mubar). The step needs, per
      latent dimension, the Cholesky factor of B_q, log|B_q| and diag(B_q^-1) only
      (:func:`_host_factor` / :func:`_device_factor`, :func:`natural_gradient`): the gradient in (mu, diag S) is free,
      where the gradient in (mubar, lambda) needs B_q^-1 in full.
    * the hyperparameters (inducing inputs, ARD alphas, and the signal variance and noise
      precision where free): ``hyper_steps`` L-BFGS iterations on F~ with q(X) held, which costs
      no N x N work at all (the KL term is constant).

    The q(X) step skips the latent dimensions that sit at their fixed point, as those ARD has
    switched off soon do (the data term no longer depends on them: g_mu, g_s -> 0): a dimension
    whose step would raise the bound by less than ``prune`` times the most any one dimension's
    would (to first order, with S_q by its diagonal: sum_n s_qn r_qn^2 + sum_n (s_qn (lambda*_qn -
    lambda_qn))^2 / 2, r_q = g_mu - mubar_q) keeps its q(x_q), and its factorisation drops out of
    the sweep (fits keep a few of 20 dimensions). q(X) factorises over the dimensions, so this is
    block-coordinate ascent: the bound stays exact and each accepted step still raises it. Every
    dimension is updated at the first sweep, every ``_FULL_SWEEP_EVERY``-th, and after a sweep
    that stalls; convergence is declared only on a full sweep. ``prune`` = 0 updates every
    dimension in every sweep.

    Converged when one sweep over every dimension raises the bound by at most ``tol`` |bound|.
    Returns (free, bound, info) like :func:`ppl_sbl.sparse_gp.maximize`."""
    import scipy.optimize

    prob = _NaturalProblem(free, fixed, Y, Z, prior_kernel=prior_kernel, jitter=jitter)
    floor = prob.floor
    lam = np.asarray(precisions(jnp.asarray(prob.K), free["log_lam"]))
    flat, unravel = _flat({k: v for k, v in free.items() if k not in ("mubar", "log_lam")})
    hyper = unravel(flat)
    Q = lam.shape[1]
    everything = np.arange(Q)
    state = prob.update(None, np.asarray(free["mubar"], dtype=np.float64), lam, everything)
    mubar, mu, var, kl = state[0], state[1], state[2], float(np.sum(state[3]))
    current = prob.value(mu, var, kl, hyper)
    if not np.isfinite(current):
        raise FloatingPointError("the bound is not finite at the starting point; check the inputs for extreme values.")
    rho, trace, rhos, live_counts, converged, message = 1.0, [], [], [], False, "max_steps reached"
    full_due = True  # the first sweep updates every latent dimension
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=int(max_steps), desc="natural steps")
    for step in range(int(max_steps)):
        start = current
        # q(X): the damped fixed-point step
        _, (g_mu, g_var) = prob.q_gradient(mu, var, hyper)
        target = -2.0 * np.asarray(g_var)
        r = np.asarray(g_mu) - mubar
        # the latent dimensions this sweep updates: all of them every _FULL_SWEEP_EVERY sweeps and
        # after a sweep that stalled, else those whose step would raise the bound by at least
        # ``prune`` times the most any one would: the first-order rise of a full step (rho = 1),
        # r_q^T S_q r_q + (lambda* - lambda)^T (S_q o S_q) (lambda* - lambda) / 2, with S_q by its
        # diagonal (no N x N work)
        full = full_due or prune <= 0 or step % _FULL_SWEEP_EVERY == 0
        if full:
            dims = everything
        else:
            gain = np.sum(var * r**2, 0) + 0.5 * np.sum((var * (target - lam)) ** 2, 0)
            dims = np.flatnonzero(gain >= prune * gain.max())
        live_counts.append(len(dims))
        rho = min(1.0, 2.0 * rho)
        while rho >= _MIN_RHO:
            lam_new = lam.copy()
            lam_new[:, dims] = np.maximum(lam[:, dims] + rho * (target[:, dims] - lam[:, dims]), floor * (1.0 + 1e-3))
            trial = prob.update(state, mubar, lam_new, dims, r, rho)
            trial_kl = float(np.sum(trial[3]))
            v = prob.value(trial[1], trial[2], trial_kl, hyper)
            if v >= current:
                lam, state, current = lam_new, trial, v
                mubar, mu, var, kl = state[0], state[1], state[2], trial_kl
                break
            rho *= 0.5
        rhos.append(rho)
        # hyperparameters with q(X) held
        def negative(v, mu=mu, var=var):
            val, g = prob.F_hyper(mu, var, unravel(v), fixed, Z)
            val, g = float(val), _flat(g)[0]
            if not np.isfinite(val) or not np.all(np.isfinite(g)):
                return np.inf, np.zeros_like(g)
            return -val, -g

        res = scipy.optimize.minimize(negative, flat, jac=True, method="L-BFGS-B",
                                      options={"maxiter": int(hyper_steps), "maxcor": 20})
        if np.isfinite(res.fun) and -res.fun - kl >= current:
            flat = np.asarray(res.x)
            hyper, current = unravel(flat), -float(res.fun) - kl
        trace.append(current)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(bound=f"{current:.4f}", rho=f"{rho:.2g}", dims=len(dims))
        stalled = current - start <= tol * abs(current)
        if stalled and full:
            converged, message = True, "the bound rose by at most tol |bound| in one sweep over every latent dimension"
            break
        full_due = stalled  # a pruned sweep that stalls: the next one revisits every dimension
    if bar is not None:
        bar.close()
    out = {**jax.tree_util.tree_map(jnp.asarray, hyper), "mubar": jnp.asarray(mubar),
           "log_lam": jnp.asarray(np.log(lam - floor))}
    return out, current, {"steps": step + 1, "converged": converged, "message": message, "trace": trace,
                          "optimizer": "natural", "step_sizes": np.asarray(rhos),
                          "updated_dims": np.asarray(live_counts)}


def _pca(Y, Q):
    Yc = Y - Y.mean(0)
    _, s, Vt = np.linalg.svd(Yc, full_matrices=False)
    X = Yc @ Vt[:Q].T
    return X / max(float(X[:, 0].std()), 1e-12)


def _check(Y, Z, model, latent_dim, num_inducing, prior_kernel):
    if model not in MODELS:
        raise ValueError(f"`model` must be one of {MODELS}; got {model!r}.")
    if prior_kernel not in PRIOR_KERNELS:
        raise ValueError(f"`prior_kernel` must be one of {PRIOR_KERNELS}; got {prior_kernel!r}.")
    Y = check_matrix("Y", Y)
    if Z is not None:
        if np.ndim(Z) == 1:
            raise ValueError("`Z` must be 2-dimensional, one row of outputs per input row; got a vector. Code class "
                             "labels 1-of-K with ppl_sbl.datasets.one_of_k(labels), or pass a single output as "
                             "Z.reshape(-1, 1).")
        Z = check_matrix("Z", Z)
        if len(Z) != len(Y):
            raise ValueError(f"`Z` has {len(Z)} rows but `Y` has {len(Y)}; pass one output row per input row.")
    elif model == "supervised":
        raise ValueError("`Z` is required for model='supervised' (the outputs, e.g. labels coded 1-of-K in "
                         "{-1, 1}); use model='autoencoder' or 'unsupervised' to reconstruct Y.")
    latent_dim = int(latent_dim)
    if not 1 <= latent_dim <= Y.shape[1]:
        raise ValueError(f"`latent_dim` must be between 1 and the data dimension {Y.shape[1]}; got {latent_dim}.")
    if not 1 <= int(num_inducing) <= len(Y):
        raise ValueError(f"`num_inducing` must be between 1 and the number of points {len(Y)}; got {num_inducing}.")
    return Y, Z, latent_dim, int(num_inducing)


def fit(Y, Z=None, *, model="supervised", latent_dim=10, num_inducing=30, prior_kernel="rbf", snr="default",
        optimize_prior=False, optimizer=None, max_steps=300, tol=1e-10, hyper_steps=20, prune=1e-6, seed=0,
        jitter=sg.JITTER, progress_bar=None):
    """Fit a Bayesian GPLVM by maximising the collapsed bound.

    Parameters
    ----------
    Y : (N, P) inputs (the data for the autoencoder and unsupervised models).
    Z : (N, D) outputs of the supervised model (e.g. labels 1-of-K in {-1, 1}); ignored otherwise.
    model : "supervised", "autoencoder" or "unsupervised".
    latent_dim : Q, the latent dimensions ARD starts from (at most P).
    num_inducing : M inducing inputs, initialised at M latent means chosen at random.
    prior_kernel : the kernel of the GP-latent prior (5.2): "rbf" (5.4), "linear" (5.3) or
        "matern32" (5.5), its parameters set from the inputs' median squared distance (section
        5.5.3) and kept (default), or with ``optimize_prior`` its length-scale optimised (5.26;
        its variance stays fixed: with it free, the bound is flat along a joint rescaling of the
        prior, q(X), the inducing inputs and the ARD alphas).
    snr : signal-to-noise ratio sigma_f^2 beta at which the signal variance (the outputs'
        variance) and the noise precision are fixed; None frees both; "default": 100 for the
        supervised model (section 5.5.3), None for the others.
    optimizer : "natural" (the default for the supervised and autoencoder models with the latent
        prior fixed): sweeps of a damped natural-gradient step on q(X), the fixed point of (5.28)
        (see :func:`_fit_natural`), and ``hyper_steps`` L-BFGS iterations on the inducing inputs and
        kernel parameters with q(X) held; each sweep needs one Cholesky factorisation and one
        triangular inverse per latent dimension and trial step. "lbfgs" (the only choice for the
        unsupervised model and with ``optimize_prior``): L-BFGS on all parameters at once with
        the exact gradient in (mubar, lambda), which needs B_q^-1 in full.
    max_steps, tol : sweeps ("natural") or L-BFGS iterations ("lbfgs"), and the relative
        tolerance on the bound (the rise over one sweep; for L-BFGS scipy's ``ftol``). The
        default cap returns within a minute on a few hundred points (the bound is then usually
        still rising: a :class:`ppl_sbl.ConvergenceWarning` says so); with the signal-to-noise
        ratio fixed high, the further the bound climbs, the fewer latent dimensions ARD keeps, and
        test accuracy can fall, so the cap is worth a cross-validation.
    hyper_steps : L-BFGS iterations on the hyperparameters per natural sweep.
    prune : natural sweeps update only the latent dimensions whose step would raise the bound by
        at least this fraction of the most any one dimension's would (those ARD has switched off
        sit at their fixed point), and every dimension every 10th sweep and before declaring
        convergence (the bound stays exact; see :func:`_fit_natural`); 0 updates all of them in
        every sweep.
    progress_bar : show one (tqdm) with the bound; None: only for fits expected to take more than a
        few seconds (N x Q x max_steps above 10^6).

    Returns
    -------
    GPLVMResult
    """
    if optimizer is not None and optimizer not in OPTIMIZERS:
        raise ValueError(f"`optimizer` must be one of {OPTIMIZERS} (or None for the model's default); "
                         f"got {optimizer!r}.")
    if progress_bar is None:
        progress_bar = len(np.asarray(Y)) * int(latent_dim) * int(max_steps) > 1e6
    free, fixed, Yj, Zj, z_mean = initial_parameters(Y, Z, model=model, latent_dim=latent_dim,
                                                     num_inducing=num_inducing, prior_kernel=prior_kernel, snr=snr,
                                                     optimize_prior=optimize_prior, seed=seed, jitter=jitter)
    natural_applies = model != "unsupervised" and "log_prior" not in free
    if optimizer is None:
        optimizer = "natural" if natural_applies else "lbfgs"
    if optimizer == "natural" and not natural_applies:
        raise ValueError("optimizer='natural' needs the GP-latent prior held fixed (model 'supervised' or "
                         "'autoencoder' with optimize_prior=False); use optimizer='lbfgs'.")
    start = time.perf_counter()
    if optimizer == "natural":
        free, value, info = _fit_natural(free, fixed, Yj, Zj, prior_kernel=prior_kernel, jitter=jitter,
                                         max_steps=max_steps, tol=tol, hyper_steps=hyper_steps,
                                         progress_bar=progress_bar, prune=prune)
    else:
        objective = functools.partial(bound, model=model, prior_kernel=prior_kernel, jitter=jitter)
        free, value, info = sg.maximize(objective, free, args=(fixed, Yj, Zj), max_steps=max_steps, tol=tol,
                                        progress_bar=progress_bar)
        info["optimizer"] = "lbfgs"
    if not info["converged"] and info["steps"] >= int(max_steps):
        warn_unconverged(f"gplvm.fit ({info['optimizer']})", max_steps, "max_steps")
    return GPLVMResult(model=model, prior_kernel=prior_kernel, free=free, fixed=fixed, Y=Yj, Z=Zj,
                       z_mean=jnp.asarray(z_mean), elbo=value, elbo_trace=np.asarray(info["trace"]),
                       converged=info["converged"], info=info, seconds=time.perf_counter() - start, jitter=jitter)


def initial_parameters(Y, Z=None, *, model="supervised", latent_dim=10, num_inducing=30, prior_kernel="rbf",
                       snr="default", optimize_prior=False, seed=0, jitter=sg.JITTER):
    """The starting point of :func:`fit` (section 5.5.3): q(X) means by PCA (mubar = K_Y^-1 mu by a
    ridge solve), lambda = 10 / mean(diag K_Y), inducing inputs at M latent means chosen at random,
    ARD alphas from the latent means' median squared distance, the latent prior from the inputs'.
    Returns (free, fixed, Y, centred Z, Z's column means), the arguments of :func:`bound`."""
    Y, Z, Q, M = _check(Y, Z, model, latent_dim, num_inducing, prior_kernel)
    if model != "supervised":
        Z = Y
    if snr == "default":
        snr = 100.0 if model == "supervised" else None
    z_mean = Z.mean(0)
    Zc = Z - z_mean
    N = len(Y)
    Yj, Zj = jnp.asarray(Y), jnp.asarray(Zc)
    X0 = _pca(Y, Q)
    signal = max(float(np.mean(np.var(Zc, 0))), 1e-12)
    med = np.median(np.asarray(sg._sqdist(jnp.asarray(X0), jnp.asarray(X0)))[np.triu_indices(N, 1)]) if N > 1 else 1.0
    rng = np.random.default_rng(seed)
    params = {
        "inducing": jnp.asarray(X0[rng.choice(N, M, replace=False)]),
        "log_alpha": jnp.full(Q, -math.log(max(med, 1e-12))),
        "log_variance": jnp.asarray(math.log(signal)),
        "log_beta": jnp.asarray(math.log((snr if snr else 100.0) / signal)),
    }
    fixed = {}
    if model == "unsupervised":
        params["mean"] = jnp.asarray(X0)
        params["log_var"] = jnp.full((N, Q), math.log(0.5))
    else:
        prior0 = sg.default_params(prior_kernel, Y)
        K_Y = np.asarray(_prior_cov(Yj, prior_kernel, prior0, jitter))
        # mubar such that mu = K_Y mubar starts at the PCA projection (scaled to K_Y's scale)
        X0 = X0 * math.sqrt(float(np.mean(np.diag(K_Y))))
        ridge = K_Y + 1e-3 * float(np.mean(np.diag(K_Y))) * np.eye(N)
        params["mubar"] = jnp.asarray(np.linalg.solve(ridge, X0))
        params["log_lam"] = jnp.full((N, Q), math.log(10.0 / float(np.mean(np.diag(K_Y)))))
        log_prior = {k: jnp.log(jnp.asarray(v, dtype=jnp.float64)) for k, v in prior0.items()}
        # the prior's variance stays fixed: scaling it by c^2 with q(X) and the inducing inputs by c
        # and alpha by 1 / c^2 leaves the bound unchanged (a flat direction); its length-scale
        # (alpha_p of (5.26), or the Matern length-scale) is optimised
        shape = {k: v for k, v in log_prior.items() if k != "variance"}
        if optimize_prior and shape:
            params["log_prior"] = shape
            fixed["log_prior_variance"] = log_prior.get("variance")
        else:
            fixed["log_prior"] = log_prior
        params["inducing"] = jnp.asarray(np.asarray(params["inducing"]) * math.sqrt(float(np.mean(np.diag(K_Y)))))
        params["log_alpha"] = params["log_alpha"] - math.log(float(np.mean(np.diag(K_Y))))
    if snr is not None:
        fixed["log_variance"] = params.pop("log_variance")
        fixed["log_beta"] = params.pop("log_beta")
    return params, fixed, Yj, Zj, z_mean


@functools.partial(jax.jit, static_argnums=(5, 6))
def _latent_predictive(Y, Y_new, mubar, log_lam, prior, prior_kernel, jitter):
    """q(x*) of new inputs (5.30): per latent dimension, mean k_*^T mubar_q (5.32) and variance
    k_** - k_*^T (K_Y + Lambda_q^-1)^-1 k_*. Returns (n*, Q) means and variances."""
    K_Y = _prior_cov(Y, prior_kernel, prior, jitter)
    k_s = sg.kernel(prior_kernel, prior, Y, Y_new)  # (N, n*)
    k_ss = sg.kernel_diag(prior_kernel, prior, Y_new)

    def one(mb, ll):
        w = _whiten(K_Y, precisions(K_Y, ll), k_s)
        return k_s.T @ mb, jnp.maximum(k_ss - jnp.sum(w**2, 0), _TINY)  # (5.32), (5.30)

    mean, var = jax.vmap(one, in_axes=(1, 1))(mubar, log_lam)
    return mean.T, var.T


@functools.partial(jax.jit, static_argnums=6)
def _predictive_means(kernel_params, inducing, stats, Z, beta, draws, jitter):
    """E[f_*] under q(U) (3.28) at each of the (S, n*, Q) draws of x*: (S, n*, D)."""
    return jax.vmap(lambda x: sg.predict_f("rbf_ard", kernel_params, inducing, stats, Z, beta, x, jitter)[0])(draws)


# ----------------------------------------------------------------------------------------------
# The result
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class GPLVMResult(ResultMethods, Saveable):
    """A fitted Bayesian GPLVM: the bound (``elbo``), q(X), the kernels and the predictions."""

    model: str
    prior_kernel: str
    free: dict
    fixed: dict
    Y: Any
    Z: Any  # the centred outputs
    z_mean: Any
    elbo: float
    elbo_trace: np.ndarray
    converged: bool
    info: dict
    seconds: float
    jitter: float = sg.JITTER

    bound = "none"  # the collapsed bound equals the uncollapsed ELBO with q(U) at its optimum
    elbo_exact = None
    @property
    def inference(self):
        how = ("natural-gradient steps on q(X) (the fixed point of 5.28) and L-BFGS on the hyperparameters"
               if self.info.get("optimizer") == "natural" else "L-BFGS")
        return f"collapsed variational bound (Titsias & Lawrence 2010) maximised by {how}"

    # parameters ------------------------------------------------------------------------------
    @functools.cached_property
    def _unpacked(self):
        return _unpack(self.free, self.fixed)

    @property
    def kernel_params(self):
        return self._unpacked[1]

    @property
    def prior_params(self):
        return self._unpacked[2]

    @property
    def noise_var(self):
        return float(1.0 / self._unpacked[3])

    @property
    def inducing(self):
        return self._unpacked[0]["inducing"]

    @property
    def ard_alpha(self):
        """The RBF-ARD inverse squared length-scales alpha_q (5.7)."""
        return np.asarray(self.kernel_params["alpha"])

    @functools.cached_property
    def _qx(self):
        p, _, prior, _ = self._unpacked
        return _q_x_compiled(self.model, p, prior, self.Y, self.prior_kernel, self.jitter, full=True)

    @property
    def latent_mean(self):
        """(N, Q) the means of q(X)."""
        return np.asarray(self._qx[0])

    @property
    def latent_var(self):
        """(N, Q) the marginal variances of q(X)."""
        return np.asarray(self._qx[1])

    @property
    def relevance(self):
        """alpha_q E[x_q^2] (mean over the points): the scale-free weight of dimension q in the
        RBF-ARD kernel's exponent."""
        return self.ard_alpha * np.mean(self.latent_mean**2 + self.latent_var, 0)

    @property
    def relevant(self):
        """Dimensions whose relevance is at least 1e-3 of the largest (ARD kept them)."""
        r = self.relevance
        return r >= 1e-3 * r.max()

    @property
    def relevant_dims(self):
        """The indices of the latent dimensions ARD kept, by decreasing relevance."""
        r = self.relevance
        keep = np.flatnonzero(self.relevant)
        return keep[np.argsort(-r[keep])]

    effective_parameters = float("nan")

    @property
    def stats(self):
        mu, var = self._qx[0], self._qx[1]
        return sg.psi_statistics("rbf_ard", self.kernel_params, mu, var, self.inducing)

    # prediction ------------------------------------------------------------------------------
    def predict_latent(self, Y_new):
        """q(x*) of new inputs (5.30): per latent dimension q, mean k_*^T mubar_q (5.32) and
        variance k_** - k_*^T (K_Y + Lambda_q^-1)^-1 k_* (the conditional prior averaged over
        q(X)). Returns means and variances (n*, Q). Not for the unsupervised model (no K_Y; see
        :meth:`transform`)."""
        if self.model == "unsupervised":
            raise ValueError("the unsupervised GPLVM has no latent prior over inputs; use `transform`, which "
                             "optimises q(x*) for each new point.")
        Y_new = jnp.asarray(self._check_new(Y_new))
        p, _, prior, _ = self._unpacked
        mean, var = _latent_predictive(self.Y, Y_new, p["mubar"], p["log_lam"], prior, self.prior_kernel, self.jitter)
        return np.asarray(mean), np.asarray(var)

    def transform(self, Y_new, *, max_steps=500):
        """Latent means of new inputs: eq. (5.32) for the supervised and autoencoder models; for
        the unsupervised model q(x*) maximising the bound on the training and new points together
        (the other parameters fixed)."""
        if self.model != "unsupervised":
            return self.predict_latent(Y_new)[0]
        Y_new = jnp.asarray(self._check_new(Y_new))
        p, kp, _, beta = self._unpacked
        mu, var = self._qx[0], self._qx[1]
        # start each new point at the latent mean of its nearest training input
        d = np.asarray(sg._sqdist(Y_new, self.Y))
        start = {"mean": mu[np.argmin(d, 1)], "log_var": jnp.log(var[np.argmin(d, 1)])}
        Zall = jnp.concatenate([self.Z, Y_new - self.z_mean])

        def objective(q, mu, var, Zall):
            m = jnp.concatenate([mu, q["mean"]])
            v = jnp.concatenate([var, jnp.exp(q["log_var"])])
            stats = sg.psi_statistics("rbf_ard", kp, m, v, p["inducing"])
            kl = 0.5 * jnp.sum(q["mean"] ** 2 + jnp.exp(q["log_var"]) - 1.0 - q["log_var"])
            return sg.collapsed_bound(Zall, stats, sg.kernel("rbf_ard", kp, p["inducing"]), beta, self.jitter) - kl

        q, _, _ = sg.maximize(objective, start, args=(mu, var, Zall), max_steps=max_steps)
        return np.asarray(q["mean"])

    def predict(self, Y_new, *, num_samples=64, seed=0, return_draws=False):
        """The predictive mean of the outputs at new inputs (5.29): E[f_*] under q(U), averaged over
        ``num_samples`` draws of x* ~ q(x*) (5.30); the column means added back. For labels coded
        1-of-K, the class is the argmax. ``return_draws``: also the (num_samples, n*, D) means
        given each draw."""
        mean, var = self.predict_latent(Y_new)
        rng = np.random.default_rng(seed)
        draws = mean[None] + np.sqrt(var)[None] * rng.normal(size=(int(num_samples),) + mean.shape)
        f = _predictive_means(self.kernel_params, self.inducing, self.stats, self.Z, 1.0 / self.noise_var,
                              jnp.asarray(draws), self.jitter)
        f = np.asarray(f) + np.asarray(self.z_mean)
        return (f.mean(0), f) if return_draws else f.mean(0)

    def _check_new(self, Y_new):
        Y_new = check_matrix("Y_new", Y_new)
        if Y_new.shape[1] != self.Y.shape[1]:
            raise ValueError(f"`Y_new` has {Y_new.shape[1]} columns; the model was fitted on {self.Y.shape[1]}.")
        return Y_new

    # the shared result interface -------------------------------------------------------------
    @property
    def latent_dim(self):
        return int(self.ard_alpha.shape[0])

    @property
    def num_inducing(self):
        return int(self.inducing.shape[0])

    @property
    def program(self):
        return _PROGRAMS[self.model]

    @property
    def args(self):
        return (self.Y, self.Z)

    @property
    def kwargs(self):
        kw = {"latent_dim": self.latent_dim, "num_inducing": self.num_inducing, "kernel_params": self.kernel_params,
              "noise_var": self.noise_var, "inducing": self.inducing, "jitter": self.jitter}
        if self.model != "unsupervised":
            kw.update(prior_kernel=self.prior_kernel, prior_params=self.prior_params)
        return kw

    @property
    def guide(self):
        """:func:`guide` with q(X) and the optimal q(U) of this fit."""
        mu, var, _, cov = self._qx
        u_mean, u_cov = _q_u(self.kernel_params, self.inducing, self.stats, self.Z, 1.0 / self.noise_var, self.jitter)
        return functools.partial(guide, q_mean=mu, q_cov=cov, u_mean=u_mean, u_cov=u_cov)

    def check_guide(self, num_particles=2000, seed=0, num_se=4.0, rtol=1e-6):
        """NumPyro's Monte Carlo ``Trace_ELBO`` of the program and :attr:`guide` (the uncollapsed
        ELBO with q(U) at its optimum) against the collapsed bound: equal up to Monte Carlo error
        (and the jitter on K_ff, O(jitter N D beta))."""
        return super().check_guide(num_particles=num_particles, seed=seed, num_se=num_se, rtol=rtol)

    def sample(self, key, num_samples):
        from numpyro.infer import Predictive

        pred = Predictive(self.program, guide=self.guide, num_samples=int(num_samples), return_sites=["X", "U", "F"])
        return {k: np.asarray(v) for k, v in pred(key, *self.args, **self.kwargs).items()}

    def to_inference_data(self, num_samples=500, seed=0):
        """ArviZ ``InferenceData``: draws of X (latent dimension, point), U and F from the guide,
        pointwise log-likelihoods of the outputs, the outputs, and the bound's trace."""
        return super().to_inference_data(num_samples=num_samples, seed=seed)
