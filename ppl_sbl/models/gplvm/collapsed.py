"""The collapsed bound of the Bayesian GPLVMs (Sauer's thesis, 5.20, derived with the factor D):
the data term F~ through the Psi statistics of q(X) (5.22-5.24) minus KL(q(X) || p(X | Y)), the
parameters it is written in, the optimal q(U) it collapses, and F~ split into the expected
log-likelihood and the KL of q(U)."""
from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.linalg as jsl

from ppl_sbl import sparse_gp as sg

from .latent import latent_posterior
from .programs import prior_cov

__all__ = ["unpack", "q_x", "bound", "data_term", "data_term_parts", "optimal_q_u"]


def unpack(free, fixed):
    """(every parameter by name, the RBF-ARD kernel's parameters, the latent prior's parameters, the
    noise precision beta) of the parameters ``free`` and ``fixed`` of :func:`bound` (log scale
    where named ``log_*``)."""
    p = {**fixed, **free}
    kernel_params = {"variance": jnp.exp(p["log_variance"]), "alpha": jnp.exp(p["log_alpha"])}
    prior_params = {k: jnp.exp(v) for k, v in p.get("log_prior", {}).items()}
    if p.get("log_prior_variance") is not None:
        prior_params["variance"] = jnp.exp(p["log_prior_variance"])
    return p, kernel_params, prior_params, jnp.exp(p["log_beta"])


def q_x(model, p, prior_params, Y, prior_kernel, jitter, full=False, k_grad=False):
    """(means (N, Q), marginal variances (N, Q), KL term, and with ``full`` the covariances) of
    q(X): :func:`latent_posterior` for the supervised and autoencoder models, the factorised
    Gaussian (``mean``, ``log_var``) against N(0, I) for the unsupervised one (its covariances
    the variances (Q, N))."""
    if model == "unsupervised":
        mu, var = p["mean"], jnp.exp(p["log_var"])
        kl = 0.5 * jnp.sum(mu**2 + var - 1.0 - jnp.log(var))
        return (mu, var, kl) + ((var.T,) if full else ())
    K_Y = prior_cov(Y, prior_kernel, prior_params, jitter)
    return latent_posterior(K_Y, p["mubar"], p["log_lam"], full=full, k_grad=k_grad)


def bound(free, fixed, Y, Z, *, model, prior_kernel, jitter=sg.JITTER):
    """The collapsed bound (5.20, derived with the factor D) of a parameter set: ``free`` the
    optimised parameters, ``fixed`` the others (same keys: ``mubar``/``log_lam`` (N, Q) or, for
    the unsupervised model, ``mean``/``log_var``; ``inducing`` (M, Q); ``log_alpha`` (Q,);
    ``log_variance``; ``log_beta``; ``log_prior`` the latent-prior kernel's)."""
    p, _, prior_params, _ = unpack(free, fixed)
    mu, var, kl = q_x(model, p, prior_params, Y, prior_kernel, jitter, k_grad="log_prior" in free)
    return data_term(mu, var, free, fixed, Z, jitter) - kl


def data_term(mu, var, hyper, fixed, Z, jitter):
    """F~(mu, diag S; hyperparameters): the bound (5.20) without its KL term (it depends on q(X) only
    through the means and marginal variances, via the Psi statistics)."""
    p, kp, _, beta = unpack(hyper, fixed)
    stats = sg.psi_statistics("rbf_ard", kp, mu, var, p["inducing"])
    return sg.collapsed_bound(Z, stats, sg.kernel("rbf_ard", kp, p["inducing"]), beta, jitter)


def data_term_parts(mu, var, hyper, fixed, Z, jitter):
    """F~ of :func:`data_term` as the two terms of the uncollapsed ELBO (5.11, 5.20) with q(U) at
    its optimum (:func:`optimal_q_u`), ``(log_lik, kl_u)`` with F~ = log_lik - kl_u:

        log_lik = E_q(X) q(U) p(F|U,X)[ln p(Z | F)]
                = N D / 2 ln(beta / 2 pi) - beta / 2 sum_d E||z_d - f_d||^2,
        E||z_d - f_d||^2 = ||z_d||^2 - 2 z_d^T Psi1 K_uu^-1 m_d + m_d^T K_uu^-1 Psi2 K_uu^-1 m_d
                           + tr(K_uu^-1 Sigma_u K_uu^-1 Psi2) + psi0 - tr(K_uu^-1 Psi2),
        kl_u = sum_d KL(N(m_d, Sigma_u) || N(0, K_uu))

    (Titsias 2009; Titsias & Lawrence 2010: E[f_nd] = <k_n> K_uu^-1 m_d and the conditional
    variance of f_nd given U averaged over q(x_n), through psi0, Psi1, Psi2 (5.22-5.24); K_ff
    without the jitter, as in the bound; the last two terms are the bound's trace term
    -beta D (psi0 - tr(K_uu^-1 Psi2)) / 2). In the whitened coordinates of
    :func:`ppl_sbl.sparse_gp.bound_factors` (K_uu = Lm Lm^T, A = Lm^-1 Psi2 Lm^-T, I + beta A =
    LB LB^T, c = LB^-1 Lm^-1 Psi1^T Z), q(U) is v_d = Lm^-1 m_d = beta LB^-T c_d and Lm^-1 Sigma_u
    Lm^-T = (I + beta A)^-1, so that z_d^T Psi1 K_uu^-1 m_d = beta ||c_d||^2 and

        sum_d E||z_d - f_d||^2 = ||Z||^2 - 2 beta ||c||^2 + sum_d v_d^T A v_d + D tr((I + beta A)^-1 A)
                                 + D (psi0 - tr A),
        kl_u = D (tr((I + beta A)^-1) - M + ln|I + beta A|) / 2 + sum_d ||v_d||^2 / 2."""
    p, kp, _, beta = unpack(hyper, fixed)
    inducing = p["inducing"]
    stats = sg.psi_statistics("rbf_ard", kp, mu, var, inducing)
    f = sg.bound_factors(sg.kernel("rbf_ard", kp, inducing), stats, Z, beta, jitter)
    N, D = Z.shape
    M = f.LB.shape[0]
    eye = jnp.eye(M, dtype=Z.dtype)
    half = jsl.solve_triangular(f.Lm, stats.Psi2, lower=True)
    A = jsl.solve_triangular(f.Lm, half.T, lower=True)
    A = 0.5 * (A + A.T)  # Lm^-1 Psi2 Lm^-T, as in bound_factors
    V = beta * jsl.solve_triangular(f.LB.T, f.c, lower=False)  # (M, D): the whitened means v_d
    LBinv = jsl.solve_triangular(f.LB, eye, lower=True)
    S_w = LBinv.T @ LBinv  # (I + beta A)^-1
    squares = (jnp.sum(Z**2) - 2.0 * beta * jnp.sum(f.c**2) + jnp.sum(V * (A @ V)) + D * jnp.sum(S_w * A)
               + D * (stats.psi0 - f.trace_A))
    log_lik = 0.5 * N * D * (jnp.log(beta) - sg.LOG_2PI) - 0.5 * beta * squares
    kl_u = 0.5 * D * (jnp.trace(S_w) - M + 2.0 * jnp.sum(jnp.log(jnp.diagonal(f.LB)))) + 0.5 * jnp.sum(V**2)
    return log_lik, kl_u


def optimal_q_u(kp, inducing, stats, Z, beta, jitter):
    """q(U) at its optimum (Titsias 2009; the thesis's 3.28-3.29 with Psi1, Psi2 for K_NM, K_MN K_NM):
    Sigma_u = K_uu (K_uu + beta Psi2)^-1 K_uu, m_d = beta K_uu (K_uu +
    beta Psi2)^-1 Psi1^T z_d; with K_uu = Lm Lm^T and B = I + beta Lm^-1 Psi2 Lm^-T = LB LB^T:
    Sigma_u = (Lm LB^-T)(Lm LB^-T)^T, m = beta Lm LB^-T LB^-1 Lm^-1 Psi1^T Z. Returns the means (D, M)
    and the covariance (M, M)."""
    f = sg.bound_factors(sg.kernel("rbf_ard", kp, inducing), stats, Z, beta, jitter)
    W = f.Lm @ jsl.solve_triangular(f.LB.T, jnp.eye(f.LB.shape[0], dtype=Z.dtype), lower=False)
    mean = (beta * W @ f.c).T  # (D, M)
    return mean, W @ W.T
