"""The gains of the three moves of the fast marginal likelihood maximisation (Tipping & Faul 2003):
add a function, re-estimate its alpha, or delete it, each given the others.

In terms of the sparsity and quality factors S_m = d_m^T C^-1 d_m and Q_m = d_m^T C^-1 y (and
s_m, q_m: the same with function m's own contribution taken out), the best alpha_m given the rest
is s_m^2 / (q_m^2 - s_m) where q_m^2 > s_m, and inf otherwise.
"""
from __future__ import annotations

import numpy as np

__all__ = ["small_factors", "move_gains"]


def small_factors(alpha, S, Q, sigma_diag=None, mu=None):
    """s_m, q_m: S and Q with function m's own contribution taken out (Tipping & Faul 2003).

    Out of the model s = S, q = Q. For an active function two forms are equal: s_m = alpha_m S_m /
    (alpha_m - S_m), q_m = alpha_m Q_m / (alpha_m - S_m), and, from the posterior of c_m given the
    others (precision alpha_m + s_m, mean q_m / (alpha_m + s_m); Sigma and mu as in section 2 of
    Faul & Pilikos, Sigma = (A + D^T D / sigma^2)^-1), s_m = 1 / Sigma_mm - alpha_m,
    q_m = mu_m / Sigma_mm (``sigma_diag`` and ``mu`` in the order of the active entries). The first
    subtracts alpha_m - S_m = alpha_m^2 / (alpha_m + s_m), which falls below the rounding of S_m
    where alpha_m << s_m (a function whose coefficient the data determine, alpha_m -> 0 on
    overlapping dictionaries: S_m computed by updates can then be zero or negative); the second
    subtracts alpha_m from alpha_m + s_m, accurate there. Given ``sigma_diag``, each active function
    takes the form without cancellation: the posterior one where alpha_m Sigma_mm = alpha_m /
    (alpha_m + s_m) < 1/2 (decided by alpha and Sigma, not by S, which may be rounding there).
    """
    finite = np.isfinite(alpha)
    a = np.where(finite, alpha, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        denom = np.where(finite, a - S, 1.0)
        s = np.where(finite, a * S / denom, S)
        q = np.where(finite, a * Q / denom, Q)
        if sigma_diag is not None:
            sd = np.where(finite, sigma_diag, 1.0)
            posterior = finite & (2.0 * a * sd < 1.0)
            s = np.where(posterior, 1.0 / sd - a, s)
            q = np.where(posterior, mu / sd, q)
    return s, q


def move_gains(alpha, S, Q, active=None, sigma_diag=None, mu=None):
    """The exact change of L and the new alpha of the best move for every function.

    With l(alpha) = (ln alpha - ln(alpha + s) + q^2 / (alpha + s)) / 2, function m's part of L
    given the others (Tipping & Faul 2003, ref. [6] of Faul & Pilikos, whose section 2 summarises
    the three moves without numbering them), and s_m, q_m from :func:`small_factors`
    (``sigma_diag``, ``mu``: the posterior's, in the order of ``active``):

    add (alpha_m = inf, q^2 > s):  dL = ((Q^2 - S) / S + ln(S / Q^2)) / 2
    re-estimate (finite -> a):     dL = l(a) - l(alpha_m), a = s^2 / (q^2 - s)
    delete (finite, q^2 <= s):     dL = -l(alpha_m)

    the last two written without the cancellation of ln(a / alpha_m) against ln((a + s) / (alpha_m
    + s)). ``active``: the indices of the finite alpha, if known (the add formulas are evaluated
    for every function and overwritten on these).
    """
    if active is None:
        active = np.flatnonzero(np.isfinite(alpha))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        Q2 = Q * Q
        theta = Q2 - S  # s = S, q = Q for the functions out of the model
        useful = theta > 0
        ratio = Q2 / S
        gain = np.where(useful, 0.5 * (ratio - 1.0 - np.log(ratio)), -np.inf)
        new = np.where(useful, S * S / np.where(useful, theta, 1.0), np.inf)
        if len(active):
            al = alpha[active]
            s, q = small_factors(al, S[active], Q[active], sigma_diag, mu)
            th = q**2 - s
            keep = th > 0
            new_a = np.where(keep, s**2 / np.where(keep, th, 1.0), np.inf)
            step = new_a - al
            # l(a) - l(alpha) = (ln(1 + step / alpha) - ln(1 + step / (alpha + s)) - q^2 step / ((a + s)(alpha + s))) / 2
            update = 0.5 * (np.log1p(step / al) - np.log1p(step / (al + s)) - q**2 * step / ((new_a + s) * (al + s)))
            delete = 0.5 * (np.log1p(s / al) - q**2 / (al + s))  # -l(alpha)
            gain[active] = np.where(keep, update, delete)
            new[active] = new_a
    return gain, new
