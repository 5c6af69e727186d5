"""Which coefficients the data support: the one relevance rule of every fitted guide.

Coefficient k is relevant when the data support it: with its own precision's hyperprior in the
vague limit, the ELBO with w_k in the model at its best precision exceeds the ELBO with it out
(eq. (1) and (2) of :mod:`ppl_sbl.fast_ard` at a0 = b0 = 0), which is

    q_k^2 > s_k,    s_k = 1/Sigma_kk - P_k,    q_k = mu_k / Sigma_kk,

with s_k and q_k the leave-one-out precision and quality of w_k given the fit's other factors
(Tipping & Faul's s and q, eq. (3) of :mod:`ppl_sbl.fast_ard`), read from the fit's Gaussian
factor q(w) = N(mu, Sigma) and the prior precisions P_k = E[alpha_k]. For a group of
coefficients that share one precision (the RVMs' ``groups=``, group ARD in derived models) the
block form: S = inv(Sigma_gg) - diag(P_g) and Q = inv(Sigma_gg) mu_g, S = U diag(l) U^T,
q = U^T Q, and the group is supported when :func:`ppl_sbl.fast_ard.group_supported` (l, q^2) is
(sup_x of (G1) of :mod:`ppl_sbl.fast_ard.groups` at a0 = b0 = 0 is positive); every coefficient
of a supported group is relevant. With a threshold r (``CAVIResult.relevance_ratio``) the test is
q_k^2 > r s_k (groups: ``group_supported(l, q^2 / r)``); r = 1 is the rule above.

Resolution. s_k = 1/Sigma_kk - P_k cancels where the prior dominates (P_k Sigma_kk near 1): the
data's share of w_k's precision, s_k Sigma_kk = 1 - P_k Sigma_kk, then holds only the rounding of
Sigma_kk. A coefficient (a direction of a group) whose share is at most :data:`RESOLVED_SHARE` is
not relevant: at the vague limit's optimum the share is 1 - s_k / q_k^2, so this leaves out only
coefficients with q_k^2 / s_k below 1 + 1e-6 (whose ELBO gain in the model is of order 1e-13
nats), and the ones a sweep is still taking out of the model (E[alpha_k] growing without bound).

A coefficient outside the active set (pruned by the sweep, frozen by the fast schedule) has
mean zero, so q_k = 0: never relevant. For an active coefficient of a fast fit this is the
schedule's own test (``FastFit.supported``; up to the resolution above), so fast and sweep
results count alike.
"""
from __future__ import annotations

import numpy as np

from .fast_ard import group_supported

__all__ = ["leave_one_out", "support_ratio", "judge", "UNRESOLVED", "RESOLVED_SHARE"]

RESOLVED_SHARE = 1e-6
"""The data's share of a coefficient's precision, 1 - P_k Sigma_kk, at or below which its s_k is
not resolved (module docstring, "Resolution")."""

UNRESOLVED = 1e-10
"""A direction of a group's S below this fraction of the group's largest leave-one-out precision
carries neither precision nor quality (its columns lie in the span of the others to working
precision), as in the group schedule (:mod:`ppl_sbl.fast_ard.groups`)."""


def leave_one_out(mean, var, prior):
    """(s, q, share): s_k = 1/Sigma_kk - P_k, q_k = mu_k / Sigma_kk and the data's share of the
    precision, 1 - P_k Sigma_kk, elementwise (any shape)."""
    mean, var, prior = (np.asarray(a, dtype=np.float64) for a in (mean, var, prior))
    with np.errstate(divide="ignore", invalid="ignore"):
        share = 1.0 - prior * var
        s = np.where(var > 0, share / var, 0.0)
        q = np.where(var > 0, mean / var, 0.0)
    return s, q, share


def support_ratio(s, q):
    """q_k^2 / s_k (0 where q_k = 0; +inf where s_k <= 0 < q_k^2, a column in the span of the others)."""
    q2 = q * q
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(s > 0, q2 / np.where(s > 0, s, 1.0), np.where(q2 > 0, np.inf, 0.0))


def _group_masks(cov, mean, prior, groups, multi, r):
    """Whether each group of several coefficients (labels ``multi``) is supported, for one output:
    {label: bool}."""
    members = [np.flatnonzero(groups == g) for g in multi]
    size = max(len(m) for m in members)
    lam = np.zeros((len(members), size))
    q2 = np.zeros((len(members), size))
    for i, idx in enumerate(members):
        block = cov[np.ix_(idx, idx)]
        precision = np.linalg.inv(block)
        S = precision - np.diag(prior[idx])
        S = 0.5 * (S + S.T)
        Q = precision @ mean[idx]
        l, U = np.linalg.eigh(S)
        proj = U.T @ Q
        scale = max(float(np.max(np.diag(S))), 0.0)
        top = float(np.max(prior[idx]))
        resolved = (l >= UNRESOLVED * scale) & (l * (1.0 - RESOLVED_SHARE) > RESOLVED_SHARE * top) & (scale > 0)
        lam[i, :len(idx)] = np.where(resolved, l, 0.0)
        q2[i, :len(idx)] = np.where(resolved, proj * proj, 0.0)
    return dict(zip(multi, group_supported(lam, q2 / r)))


def judge(mean, var, kept, prior, groups=None, covariance=None, r=1.0):
    """The relevance rule (module docstring) for C outputs of M coefficients: ``mean``, ``var``
    (diag of the full covariance, pruned coefficients' own variance included), ``kept`` (in the
    active set) and ``prior`` (P_k) are (C, M); ``groups`` (M,) labels of coefficients sharing one
    precision or None (each its own); ``covariance`` (C, M, M) the full covariance, needed only
    where a group has several coefficients. Returns (relevant (C, M), q_k^2 / s_k (C, M); 0 outside
    the active set and where s_k is not resolved)."""
    mean, var, prior = (np.atleast_2d(np.asarray(a, dtype=np.float64)) for a in (mean, var, prior))
    kept = np.atleast_2d(np.asarray(kept, dtype=bool))
    s, q, share = leave_one_out(mean, var, prior)
    relevant = (q * q > r * np.maximum(s, 0.0)) & (share > RESOLVED_SHARE)
    if groups is not None:
        groups = np.asarray(groups)
        labels, counts = np.unique(groups, return_counts=True)
        multi = labels[counts > 1]
        if len(multi):
            if covariance is None:
                raise ValueError("`covariance` is needed to judge groups of several coefficients.")
            covariance = np.asarray(covariance, dtype=np.float64).reshape(mean.shape + mean.shape[-1:])
            shared = np.isin(groups, multi)
            for c in range(mean.shape[0]):
                verdict = _group_masks(covariance[c], mean[c], prior[c], groups, multi, r)
                relevant[c, shared] = [verdict[g] for g in groups[shared]]
    return relevant & kept, np.where(kept & (share > RESOLVED_SHARE), support_ratio(s, q), 0.0)
