"""The NumPyro programs of the Bayesian GPLVMs (Sauer's thesis, Fig. 5.1) and their guide (5.11),
with the GP-latent prior's covariance K_Y (5.2)."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import numpyro
import numpyro.distributions as dist

from ppl_sbl import sparse_gp as sg

__all__ = ["MODELS", "PRIOR_KERNELS", "PROGRAMS", "prior_cov", "supervised", "autoencoder", "unsupervised", "guide"]

MODELS = ("supervised", "autoencoder", "unsupervised")
PRIOR_KERNELS = ("rbf", "linear", "matern32")


@functools.partial(jax.jit, static_argnums=(1, 3))
def prior_cov(Y, prior_kernel, prior_params, jitter):
    """K_Y = k_prior(Y, Y) with jitter, the covariance of each latent dimension under the GP-latent
    prior X[:, q] ~ N(0, K_Y) (5.1-5.2)."""
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
    K_Y = prior_cov(Y, prior_kernel, prior_params, jitter)
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


# the program of each model name
PROGRAMS = {"supervised": supervised, "autoencoder": autoencoder, "unsupervised": unsupervised}


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
