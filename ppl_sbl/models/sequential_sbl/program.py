"""The NumPyro program of the sequential SBL and its exact guide.

Over the active set a of the dictionary, c_m ~ N(0, 1/alpha_m) and y_n ~ N(d_n^T c, sigma^2), with
alpha and sigma^2 fixed (type-II maximum likelihood parameters, not sites); the guide is the exact
posterior N(mu, Sigma) given them, so the ELBO of the pair equals the log marginal likelihood L
for every draw.
"""
from __future__ import annotations

import math

import numpy as np
import numpyro
import numpyro.distributions as dist

__all__ = ["LOG_2PI", "model", "guide"]

LOG_2PI = math.log(2.0 * math.pi)


def model(D_active, y=None, *, alpha, noise_var):
    """y ~ N(D_a c, sigma^2 I), c_m ~ N(0, 1 / alpha_m) over the active functions only.

    ``D_active`` (N, K): the active columns of the design matrix; ``alpha`` (K,) their precisions
    and ``noise_var`` = sigma^2, both fixed (type-II maximum likelihood parameters, not sites).
    """
    D_active = np.asarray(D_active, dtype=np.float64)
    alpha = np.asarray(alpha, dtype=np.float64)
    c = numpyro.sample("c", dist.Normal(0.0, 1.0 / np.sqrt(alpha)).to_event(1))
    with numpyro.plate("data", D_active.shape[0]):
        numpyro.sample("y", dist.Normal(D_active @ c, math.sqrt(noise_var)), obs=y)


def guide(D_active, y=None, *, alpha, noise_var, mu, Sigma):
    """q(c) = N(mu, Sigma), the exact posterior given alpha and sigma^2."""
    numpyro.sample("c", dist.MultivariateNormal(np.asarray(mu), covariance_matrix=np.asarray(Sigma)))
