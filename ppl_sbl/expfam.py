"""Gaussian and Gamma algebra shared by every closed-form guide.

Each family has its moments, its entropy and its expected log density written once here
(the layout of BayesPy's ``nodes/gamma.py``); the guides in ``ppl_sbl.models`` only combine
them. Gamma is parametrised by shape and rate throughout, as in NumPyro.

Notation (Bishop & Tipping 2000; Bishop, *PRML*, appendix B):

=====================  ==================================================
paper                  code
=====================  ==================================================
Gamma(x | a, b)        ``shape=a``, ``rate=b``
<x> = a / b            :func:`gamma_mean`
<ln x> = psi(a) - ln b :func:`gamma_mean_log`
H[Gamma(a, b)]         :func:`gamma_entropy`
<ln Gamma(x|a0, b0)>   :func:`gamma_expected_log_density`
<ln N(x|m, 1/tau)>     :func:`normal_expected_log_density`
H[N(mu, Sigma)]        :func:`gaussian_entropy`
=====================  ==================================================
"""
from __future__ import annotations

import math

import jax.numpy as jnp
from jax.scipy.special import digamma, gammaln

__all__ = [
    "LOG_2PI",
    "gamma_mean",
    "gamma_mean_log",
    "gamma_entropy",
    "gamma_expected_log_density",
    "gamma_log_normaliser",
    "gamma_expected_log_kernel",
    "gamma_parts",
    "normal_expected_log_density",
    "gaussian_entropy",
]

LOG_2PI = math.log(2.0 * math.pi)


def gamma_mean(shape, rate):
    """E[x] = a / b for x ~ Gamma(a, b) (shape, rate)."""
    return shape / rate


def gamma_mean_log(shape, rate):
    """E[ln x] = psi(a) - ln b for x ~ Gamma(a, b)."""
    return digamma(shape) - jnp.log(rate)


def gamma_entropy(shape, rate):
    """Differential entropy of Gamma(a, b): a - ln b + ln Gamma(a) + (1 - a) psi(a)."""
    return shape - jnp.log(rate) + gammaln(shape) + (1.0 - shape) * digamma(shape)


def gamma_log_normaliser(prior_shape, prior_rate):
    """ln of the normalising constant b0^a0 / Gamma(a0) of Gamma(x | a0, b0): a0 ln b0 - ln Gamma(a0)."""
    return prior_shape * jnp.log(prior_rate) - gammaln(prior_shape)


def gamma_expected_log_kernel(prior_shape, prior_rate, mean, mean_log):
    """E_q of the kernel of ln Gamma(x | a0, b0): (a0 - 1) E[ln x] - b0 E[x]."""
    return (prior_shape - 1.0) * mean_log - prior_rate * mean


def gamma_expected_log_density(prior_shape, prior_rate, mean, mean_log):
    """E_q[ln Gamma(x | a0, b0)] given E_q[x] and E_q[ln x].

    a0 ln b0 - ln Gamma(a0) + (a0 - 1) E[ln x] - b0 E[x].
    """
    return gamma_log_normaliser(prior_shape, prior_rate) + gamma_expected_log_kernel(prior_shape, prior_rate, mean,
                                                                                      mean_log)


def gamma_parts(name, prior_shape, prior_rate, shape, rate):
    """The ELBO terms of a Gamma factor q(x) = Gamma(a, b) (elementwise) under the prior
    Gamma(a0, b0), in the naming of :meth:`ppl_sbl.result.FitResult.elbo_parts`:

    ``-kl_<name>``: sum E_q[(a0 - 1) ln x - b0 x] + H[q(x)], minus the KL divergence of q from the
    prior's kernel; ``log_norm_<name>``: sum (a0 ln b0 - ln Gamma(a0)) over the elements, the
    prior's log normalising constant (it depends on neither the data nor q).
    """
    mean, mean_log = gamma_mean(shape, rate), gamma_mean_log(shape, rate)
    size = jnp.broadcast_shapes(jnp.shape(shape), jnp.shape(prior_shape), jnp.shape(prior_rate))
    norm = jnp.broadcast_to(gamma_log_normaliser(prior_shape, prior_rate), size)
    kernel = gamma_expected_log_kernel(prior_shape, prior_rate, mean, mean_log) + gamma_entropy(shape, rate)
    return {f"-kl_{name}": jnp.sum(kernel), f"log_norm_{name}": jnp.sum(norm)}


def normal_expected_log_density(expected_square_error, precision_mean, precision_mean_log):
    """E_q[ln N(x | m, 1/tau)] with tau independent of (x, m) under q.

    = 1/2 E[ln tau] - 1/2 ln 2 pi - 1/2 E[tau] E[(x - m)^2]. Works elementwise; sum the result
    over independent terms.
    """
    return 0.5 * (precision_mean_log - LOG_2PI - precision_mean * expected_square_error)


def gaussian_entropy(log_det_cov, dim):
    """Entropy of a ``dim``-dimensional Gaussian with log|Sigma| = ``log_det_cov``.

    H = dim/2 (1 + ln 2 pi) + 1/2 ln |Sigma|.
    """
    return 0.5 * dim * (1.0 + LOG_2PI) + 0.5 * log_det_cov
