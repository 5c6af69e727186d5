"""A fast fit (:class:`ppl_sbl.fast_ard.FastFit`) as the state of the ARD guides: q(w) as an
:class:`ppl_sbl.gaussian.ActiveGaussian` and the q(alpha_k) as Gamma factors."""
from __future__ import annotations

import numpy as np

from .. import gaussian as G
from .schedule import FastFit

__all__ = ["active_gaussian", "alpha_factors"]


def active_gaussian(fit: FastFit):
    """The fit's q(w) as the :class:`ppl_sbl.gaussian.ActiveGaussian` of the guides: the active
    coefficients in a bucket of slots (a power of two; padding slots hold M and an identity block),
    Sigma in the dense form, the frozen variances elsewhere."""
    M = fit.x.shape[0]
    K = len(fit.active)
    size = G.bucket_size(K, M) if K else min(8, M)
    index = np.full(size, M, dtype=np.int32)
    index[:K] = fit.active
    cov = np.eye(size)
    cov[:K, :K] = fit.Sigma
    mean = np.zeros(M)
    mean[fit.active] = fit.mu
    log_det = float(np.linalg.slogdet(fit.Sigma)[1]) if K else 0.0
    return G.ActiveGaussian(mean=mean, cov=cov, base=np.zeros(0), index=index,
                            frozen_var=np.asarray(fit.frozen_var, dtype=np.float64),
                            log_det=np.float64(log_det), factor_var=np.zeros(0))


def alpha_factors(fit: FastFit, a0):
    """q(alpha_k) = Gamma(a0 + 1/2, (a0 + 1/2) / E[alpha_k]) of every coefficient: (shape, rate)."""
    shape = np.full(fit.x.shape[0], a0 + 0.5)
    return shape, shape / fit.x
