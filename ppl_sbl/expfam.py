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


def gamma_expected_log_density(prior_shape, prior_rate, mean, mean_log):
    """E_q[ln Gamma(x | a0, b0)] given E_q[x] and E_q[ln x].

    a0 ln b0 - ln Gamma(a0) + (a0 - 1) E[ln x] - b0 E[x].
    """
    return (
        prior_shape * jnp.log(prior_rate)
        - gammaln(prior_shape)
        + (prior_shape - 1.0) * mean_log
        - prior_rate * mean
    )


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
