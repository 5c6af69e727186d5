"""The units the fast schedule works in (:func:`ppl_sbl.fast_ard.schedule`): a reparametrisation
that gives every coefficient's precision the same Gamma prior and the targets a noise prior of
mean 1, and the map of a fit back to the caller's units."""
from __future__ import annotations

import math

import numpy as np

from .algebra import check_hyperparameters

__all__ = ["standard_units", "column_scale", "original_units"]


def standard_units(Phi, a0, b0, target_scale=1.0, scale_design=True):
    """The design in the units the schedule works in, and what maps its fit back.

    With one rate per coefficient, column k is multiplied by g_k = sqrt(b0_k / a0): then w'_k =
    w_k / g_k has precision alpha'_k = g_k^2 alpha_k ~ Gamma(a0, a0), one scalar prior for all
    (the same model, reparametrised); with ``target_scale`` s every column is divided by s as
    well. Returns (Phi', a0, b0', g (M,) or None where b0 is a scalar, the ELBO offset -N ln s).
    ``scale_design=False``: Phi as it is, for a caller that multiplies its columns by
    :func:`column_scale` itself (the compiled schedule, into its padded copy).
    """
    Phi = np.asarray(Phi)
    N, M = Phi.shape
    s = float(target_scale)
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"`target_scale` must be finite and > 0; got {target_scale!r}.")
    rates = np.asarray(b0, dtype=np.float64)
    gain = None
    if rates.ndim == 0:
        a0, b0 = check_hyperparameters(a0, float(rates))
    else:
        if rates.shape != (M,):
            raise ValueError(f"`b0` must be a scalar or one rate per column of Phi ({M}); got shape {rates.shape}.")
        a0, _ = check_hyperparameters(a0, float(np.max(rates)))
        if a0 == 0 or not np.all(np.isfinite(rates)) or np.any(rates <= 0):
            raise ValueError("`b0` given per coefficient must be finite and > 0, with `a0` > 0.")
        gain = np.sqrt(rates / a0)
        b0 = a0
    if scale_design and (gain is not None or s != 1.0):
        Phi = Phi * column_scale(gain, s)
    offset = -N * math.log(s) if s != 1.0 else 0.0
    return Phi, a0, b0, gain, offset


def column_scale(gain, target_scale):
    """What :func:`standard_units` multiplies the design's columns by: g_k / s ((M,) or a scalar), or
    None where that is 1."""
    s = float(target_scale)
    if gain is None and s == 1.0:
        return None
    return (1.0 if gain is None else gain) / s


def original_units(fit, gain, offset):
    """A :class:`FastFit` of :func:`standard_units`' design in the caller's: w_k = g_k w'_k,
    E[alpha_k] = E[alpha'_k] / g_k^2, and the ELBO plus ``offset``."""
    trace = fit.elbo_trace + offset
    if gain is None:
        return fit._replace(elbo_trace=trace)
    g = gain[fit.active]
    return fit._replace(mu=g * fit.mu, Sigma=fit.Sigma * g[:, None] * g[None, :], x=fit.x / gain**2,
                        frozen_var=fit.frozen_var * gain**2, elbo_trace=trace)
