"""Fast variational sparse Bayesian learning for the ARD RVM: one coefficient at a time.

Shutin, Buchgraber, Kulkarni & Poor (2011), "Fast variational sparse Bayesian learning with
automatic relevance determination for superimposed signals", IEEE Trans. Signal Process. 59(12),
take the alternation of q(w) and q(alpha_k) for one coefficient k to its fixed point in closed
form and decide from it whether k belongs in the model. Their derivation has a0 = b0 = 0; here it
is carried out for the Gamma(a0, b0) hyperpriors (shape, rate) of ``ppl_sbl.models.rvm``.

Model and likelihood. alpha_k ~ Gamma(a0, b0), w_k | alpha_k ~ N(0, 1/alpha_k), and a
likelihood that, with gamma (regression) or xi (Jaakkola-Jordan bound) held, is quadratic in w:

    E ln p(t | w) = -1/2 w^T Phi^T diag(W) Phi w + r^T Phi w + const,

W = E[gamma] 1, r = E[gamma] t (regression); W_n = 2 omega_n lambda(xi_n), r_n = omega_n (t_n - 1/2)
(JJ, per-point weights omega_n of the robust RVM, 1 otherwise).

Restricted family. An active set A has a joint q(w_A) = N(mu, Sigma); every coefficient outside
A is frozen, q(w_k) = N(0, v_k) independent of the rest (the ``frozen_var`` of
:class:`ppl_sbl.gaussian.ActiveGaussian`). Every coefficient keeps q(alpha_k) = Gamma(a, b_k),
a = a0 + 1/2, and x_k := E[alpha_k] = a / b_k.

Collapsed ELBO of one coefficient. Maximising the ELBO over q(w) (given the x) and writing
q(alpha_k) through x_k, the ELBO as a function of coefficient k's factors, the others' q(alpha)
held and q(w) re-optimised, is a constant plus

    in the model:  f_in(x)  = 1/2 q_k^2 / (x + s_k) - 1/2 ln(1 + s_k / x) + a0 ln x - b0 x   (1)
    frozen:        f_out(x) = -1/2 ln(1 + h_k / x) + a0 ln x - b0 x                        (2)

(-1/2 ln(x + s) + a ln x = -1/2 ln(1 + s/x) + a0 ln x), with h_k = sum_n W_n phi_nk^2 the data
precision of w_k alone (frozen: v_k = 1 / (x + h_k) is optimal) and s_k, q_k its leave-one-out
precision and quality given the active set without k: with C = Phi_{A\\k}^T W Phi_{A\\k} +
diag(x_{A\\k}) and g = (Phi^T W phi_k)_{A\\k},

    s_k = h_k - g^T C^-1 g,    q_k = phi_k^T r - g^T C^-1 (Phi^T r)_{A\\k}                     (3)

(Tipping & Faul's s_m, q_m; for an active k, s_k = 1/Sigma_kk - x_k and q_k = mu_k / Sigma_kk).
With a0 = b0 = 0, (1) is Tipping & Faul's l(alpha) and (2) tends to 0 as x -> inf.

Stationary points. f_in'(x) = 0 is, with u = x / s, beta = b0 s and d = q^2/s - 1,

    2 beta u^3 + (4 beta - 2 a0) u^2 + (2 beta + d - 4 a0) u - (2 a0 + 1) = 0               (4)

(-2 x (x + s)^2 f_in'(x) = 2 b0 x^3 + (4 b0 s - 2 a0) x^2 + (2 b0 s^2 + q^2 - s - 4 a0 s) x -
(2 a0 + 1) s^2, with x = s u and divided by s^2); it has one or three positive
roots when b0 > 0, and with a0 = b0 = 0 the single root u = 1/d, x = s^2 / (q^2 - s), when
q^2 > s, else the supremum 0 at x = inf. The fixed point of alternating the coordinate updates of
q(w) and q(alpha_k) (b_k = b0 + (mu_k^2 + Sigma_kk)/2) is a root of (4); :func:`in_model_optimum`
returns the global maximiser over x > 0. f_out'(x) = 0 is

    2 b0 x^2 + 2 (b0 h - a0) x - (2 a0 + 1) h = 0                                          (5)

with one positive root when b0 > 0 (:func:`frozen_optimum`).

Moves (:func:`schedule`). An add (frozen -> in the model at the maximiser of (1)) or a
re-estimate (in the model, x -> the maximiser of (1)); the gain of a move is the difference of
the maximum of (1) and the current value of (1) or (2), the exact change of the restricted-family
ELBO. The moves update Sigma, mu and the statistics S_m = h_m - B_m^T Sigma B_m,
Q_m = (Phi^T r)_m - B_m^T mu of every coefficient (B = Phi^T diag(W) Phi_A) by rank-one formulas
(Tipping & Faul 2003, appendix), O(M K) per move plus one product with the design for an add.
Between passes the likelihood factor updates itself given q(w) (q(gamma), xi, the robust RVM's
weights), q(w) and the statistics are recomputed for its new (W, r), and each frozen q(alpha_k)
goes to the maximiser of (2). Every move and every update is a coordinate ascent step of the
restricted-family ELBO, so the ELBO never decreases.

Sparsity: the pruning condition. A frozen coefficient is the special case of an active one that
is independent of the rest with mean zero, and s_k <= h_k, so

    f_in(x) - f_out(x) = q_k^2 / (2 (x + s_k)) + 1/2 ln((x + h_k) / (x + s_k)) >= 0   for every x:

max f_in >= max f_out for every coefficient, with equality only when q_k = 0 and s_k = h_k.
With b0 > 0, taking a coefficient in never lowers the ELBO, and one the data do not support
(q_k^2 < s_k) still gains about sqrt(2 b0) (sqrt(h_k) - sqrt(s_k - q_k^2)) <= sqrt(2 b0 h_k)
nats by entering (for small b0 the maxima of (1) and (2) are near -sqrt(2 b0 (s_k - q_k^2))
and -sqrt(2 b0 h_k)): the ELBO's own optimum has every coefficient in the model, as the plain
sweep's fixed point does. The gains vanish with a0 = b0 = 0, where both maxima tend to 0 at
x = inf when q_k^2 <= s_k and the condition "k belongs in the model iff max f_in > max f_out"
becomes Shutin et al.'s (and Tipping & Faul's) q_k^2 > s_k. The schedule takes that as the
pruning condition for every prior: a frozen coefficient enters only when the data support it,
q_k^2 > s_k; an active one is never frozen (that would lower the ELBO) and one the data stop
supporting goes on at the maximiser of (1), a large E[alpha_k] of order sqrt(s_k / (2 b0)) with
a negligible mean; the relevant coefficients are the active ones the data support. The
frozen coefficients cost the ELBO the sum of their gains above against the dense fixed point.

A column of zeros (h_k = 0, hence s_k = q_k = 0) never enters the model; a frozen column whose
leave-one-out precision is below ``1e-10`` of its own data precision lies in the span of the
active columns to working precision, and one whose |cosine| with an active column exceeds
``MAX_ALIGNMENT`` (1 - 1e-3) is nearly collinear with it (Tipping's SparseBayes's alignment
test): neither is added.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import numpy as np
import scipy.linalg
from scipy.special import digamma, gammaln, log_expit

from .validation import check_design, check_positive

__all__ = [
    "in_model_value",
    "frozen_value",
    "in_model_optimum",
    "frozen_optimum",
    "restricted_elbo_regression",
    "restricted_elbo_classification",
    "Moments",
    "FastFit",
    "schedule",
    "GaussianNoise",
    "JaakkolaJordan",
    "RobustJaakkolaJordan",
    "RobustGaussianNoise",
    "active_gaussian",
    "alpha_factors",
    "ADD",
    "REESTIMATE",
    "UPDATE",
]

LOG_2PI = math.log(2.0 * math.pi)

# move kinds, and the two updates between passes, as recorded in ``FastResult.trace_events``
ADD, REESTIMATE, DELETE, RESET, LIKELIHOOD_UPDATE, REFRESH = 0, 1, 2, 3, 4, 5

# a frozen coefficient with s_k below this fraction of h_k is (numerically) in the span of the
# active columns: S_k = h_k - B_k^T Sigma B_k carries a rounding error of order 1e-16 h_k times the
# condition number of the active block, so its s_k would be noise
_COLLINEAR = 1e-10
_NEWTON_STEPS = 6
# regression starts with E[gamma] = 1 / (_NOISE_SHARE var(t)) (Tipping & Faul 2003, section 4)
_NOISE_SHARE = 0.1


# ----------------------------------------------------------------------------------------------
# One coefficient: the collapsed ELBO (1), (2) and its maximisers
# ----------------------------------------------------------------------------------------------
def _hyper(a0, b0):
    """Validated (a0, b0): both > 0, or both 0 (Tipping & Faul's limit)."""
    a0, b0 = float(a0), float(b0)
    if not (math.isfinite(a0) and math.isfinite(b0)) or a0 < 0 or b0 < 0:
        raise ValueError(f"`a0` and `b0` must be finite and >= 0; got a0={a0!r}, b0={b0!r}.")
    if (a0 == 0) != (b0 == 0):
        raise ValueError(
            f"`a0` and `b0` must both be > 0 (a proper Gamma prior) or both 0 (the limit of Tipping & "
            f"Faul); got a0={a0!r}, b0={b0!r}: with b0 = 0 < a0 the collapsed ELBO grows without bound "
            "in x, with a0 = 0 < b0 and s = 0 its supremum is at x = 0."
        )
    return a0, b0


def _prior_part(x, a0, b0):
    """a0 ln x - b0 x, with 0 for a0 = b0 = 0 (also at x = inf)."""
    if a0 == 0:
        return np.zeros_like(x)
    with np.errstate(divide="ignore"):
        return a0 * np.log(x) - b0 * x


def in_model_value(x, s, q, a0, b0):
    """f_in(x) of eq. (1): coefficient k's part of the ELBO in the model at E[alpha_k] = x.

    Parameters
    ----------
    x : array, E[alpha_k] > 0 (``inf`` allowed when a0 = b0 = 0).
    s, q : arrays, the leave-one-out precision (>= 0) and quality of eq. (3).
    a0, b0 : shape and rate of the Gamma prior on alpha_k (both > 0 or both 0).

    Returns
    -------
    array, 1/2 q^2/(x + s) - 1/2 ln(1 + s/x) + a0 ln x - b0 x (broadcast shape).
    """
    a0, b0 = _hyper(a0, b0)
    x, s, q = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (x, s, q)))
    with np.errstate(divide="ignore"):
        return 0.5 * q * q / (x + s) - 0.5 * np.log1p(s / x) + _prior_part(x, a0, b0)


def frozen_value(x, h, a0, b0):
    """f_out(x) of eq. (2): coefficient k's part of the ELBO when frozen, v_k = 1/(x + h) optimal.

    Parameters
    ----------
    x : array, E[alpha_k] > 0 (``inf`` allowed when a0 = b0 = 0).
    h : array, the data precision h_k = sum_n W_n phi_nk^2 >= 0.
    a0, b0 : shape and rate of the Gamma prior on alpha_k.

    Returns
    -------
    array, -1/2 ln(1 + h/x) + a0 ln x - b0 x.
    """
    a0, b0 = _hyper(a0, b0)
    x, h = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (x, h)))
    with np.errstate(divide="ignore"):
        return -0.5 * np.log1p(h / x) + _prior_part(x, a0, b0)


def _d_minus_log1p(d):
    """d - ln(1 + d) for d > -1, by its series where |d| < 1e-3 (no cancellation near d = 0)."""
    d = np.asarray(d, dtype=np.float64)
    small = np.abs(d) < 1e-3
    series = d * d * (1.0 / 2.0 - d * (1.0 / 3.0 - d * (1.0 / 4.0 - d * (1.0 / 5.0 - d / 6.0))))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(small, series, d - np.log1p(d))


def _excess(q, s):
    """d = q^2/s - 1 = (|q| - sqrt s)(|q| + sqrt s)/s, without forming q^2 - s (s > 0)."""
    root = np.sqrt(s)
    aq = np.abs(q)
    return (aq - root) * (aq + root) / s


def _cubic_roots(c3, c2, c1, c0):
    """Roots of c3 u^3 + c2 u^2 + c1 u + c0 (c3 != 0), (n, 3) complex, by Cardano's formula on the
    depressed cubic (the three complex cube roots; the Newton steps of :func:`_cubic_candidates`
    polish them)."""
    p2, p1, p0 = c2 / c3, c1 / c3, c0 / c3
    P = p1 - p2 * p2 / 3.0
    Q = (2.0 * p2 * p2 * p2 / 27.0 - p2 * p1 / 3.0) + p0
    root = np.sqrt((Q * Q / 4.0 + P * P * P / 27.0).astype(complex))
    # the cube root of the larger of -Q/2 +- sqrt: no cancellation, and zero only where P = Q = 0
    inner = np.where(np.real(np.conj(root) * -Q) >= 0, -Q / 2.0 + root, -Q / 2.0 - root)
    C = inner ** (1.0 / 3.0)
    turns = np.exp(2j * np.pi * np.arange(3) / 3.0)
    Ck = C[:, None] * turns[None, :]
    safe = np.where(Ck == 0, 1.0, Ck)
    t = np.where(Ck == 0, 0.0, Ck - P[:, None] / (3.0 * safe))
    return t - p2[:, None] / 3.0


def _cubic_candidates(c3, c2, c1, c0):
    """Positive real candidates for the roots of (4), (n, 6): the real parts of the roots of the
    cubic and of its reversal (accurate for the large and for the small roots respectively), each
    polished by safeguarded Newton steps until none moves; NaN where none."""
    n = c3.shape[0]
    with np.errstate(all="ignore"):
        roots = _cubic_roots(np.concatenate([c3, c0]), np.concatenate([c2, c1]), np.concatenate([c1, c2]),
                                 np.concatenate([c0, c3])).real  # c0 = -(2 a0 + 1) != 0
        u = np.concatenate([roots[:n], 1.0 / roots[n:]], axis=1)
        u = np.where(np.isfinite(u) & (u > 0), u, np.nan)
        C3, C2, C1, C0 = (c[:, None] for c in (c3, c2, c1, c0))

        def poly(v):
            return ((C3 * v + C2) * v + C1) * v + C0

        value = np.abs(poly(u))
        for _ in range(_NEWTON_STEPS):
            slope = (3.0 * C3 * u + 2.0 * C2) * u + C1
            trial = u - poly(u) / slope
            trial_value = np.abs(poly(trial))
            accept = np.isfinite(trial) & (trial > 0) & (trial_value <= value)
            if not np.any(accept & (np.abs(trial - u) > 4e-16 * np.abs(u))):
                break  # converged to rounding
            u = np.where(accept, trial, u)
            value = np.where(accept, trial_value, value)
    return u


def in_model_optimum(s, q, a0, b0):
    """The global maximiser of f_in (eq. (1)) over x > 0, and f_in there.

    The candidates are the positive roots of the cubic (4) in u = x/s (scaled so that its
    coefficients are O(1) in the data), found by Cardano's formula for the cubic and for its
    reversal and polished by Newton steps; f_in is evaluated at each and the largest kept.
    With a0 = b0 = 0 the maximiser is Tipping & Faul's s^2 / (q^2 - s) where q^2 > s, else
    x = inf (f_in -> 0).

    Parameters
    ----------
    s : array, leave-one-out precision s_k >= 0 (eq. (3)).
    q : array, quality q_k; where s = 0 it must be 0 (else f_in is unbounded as x -> 0).
    a0, b0 : shape and rate of the Gamma prior on alpha_k (both > 0 or both 0).

    Returns
    -------
    x : array, the maximiser (``inf`` only when a0 = b0 = 0).
    value : array, f_in(x).
    """
    a0, b0 = _hyper(a0, b0)
    s, q = np.broadcast_arrays(np.asarray(s, dtype=np.float64), np.asarray(q, dtype=np.float64))
    if not (np.all(np.isfinite(s)) and np.all(s >= 0)):
        raise ValueError("`s` (the leave-one-out precision) must be finite and >= 0.")
    if not np.all(np.isfinite(q)):
        raise ValueError("`q` (the leave-one-out quality) must be finite.")
    if np.any((s == 0) & (q != 0)):
        raise ValueError("`q` must be 0 where `s` is 0: with s = 0 < |q| f_in grows without bound as x -> 0.")
    shape = s.shape
    s, q = s.ravel(), q.ravel()
    x = np.empty_like(s)
    value = np.empty_like(s)
    zero = s == 0
    pos = ~zero
    if b0 == 0:
        # a0 = b0 = 0: f_in = 1/2 (q^2 / (x + s) - ln(1 + s/x)), stationary at u = x/s = 1/d
        x[zero], value[zero] = np.inf, 0.0
        d = _excess(q[pos], s[pos])
        finite = d > 0
        with np.errstate(divide="ignore"):
            x[pos] = np.where(finite, s[pos] / np.where(finite, d, 1.0), np.inf)
        value[pos] = np.where(finite, 0.5 * _d_minus_log1p(np.where(finite, d, 0.0)), 0.0)
        return x.reshape(shape), value.reshape(shape)
    # s = 0 (then q = 0): f_in = a0 ln x - b0 x
    x[zero] = a0 / b0
    value[zero] = a0 * math.log(a0 / b0) - a0
    if np.any(pos):
        sp, qp = s[pos], q[pos]
        beta = b0 * sp
        d = _excess(qp, sp)
        c3 = 2.0 * beta
        c2 = 4.0 * beta - 2.0 * a0
        c1 = 2.0 * beta + d - 4.0 * a0
        c0 = np.full_like(sp, -(2.0 * a0 + 1.0))
        u = _cubic_candidates(c3, c2, c1, c0)
        xs = sp[:, None] * u
        with np.errstate(invalid="ignore"):
            f = in_model_value(xs, sp[:, None], qp[:, None], a0, b0)
        f = np.where(np.isfinite(f), f, -np.inf)
        best = np.argmax(f, axis=1)
        rows = np.arange(len(sp))
        x[pos] = xs[rows, best]
        value[pos] = f[rows, best]
    return x.reshape(shape), value.reshape(shape)


def frozen_optimum(h, a0, b0):
    """The maximiser of f_out (eq. (2)) over x > 0, and f_out there.

    The positive root of the quadratic (5), by the form without cancellation; with a0 = b0 = 0
    the supremum 0 at x = inf.

    Parameters
    ----------
    h : array, data precision h_k >= 0.
    a0, b0 : shape and rate of the Gamma prior on alpha_k (both > 0 or both 0).

    Returns
    -------
    x, value : arrays.
    """
    a0, b0 = _hyper(a0, b0)
    h = np.asarray(h, dtype=np.float64)
    if not (np.all(np.isfinite(h)) and np.all(h >= 0)):
        raise ValueError("`h` (the data precision) must be finite and >= 0.")
    if b0 == 0:
        return np.full_like(h, np.inf), np.zeros_like(h)
    # 2 b0 x^2 + 2 P x - (2 a0 + 1) h = 0, P = b0 h - a0
    p = b0 * h - a0
    disc = np.hypot(p, np.sqrt(2.0 * b0 * (2.0 * a0 + 1.0) * h))
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(p > 0, (2.0 * a0 + 1.0) * h / (p + disc), (disc - p) / (2.0 * b0))
    return x, frozen_value(x, h, a0, b0)


def _in_model_change(x, x_new, s, q, a0, b0):
    """f_in(x_new) - f_in(x) written without the cancellation of the two values (both finite)."""
    step = x_new - x
    out = 0.5 * (-q * q * step / ((x_new + s) * (x + s)) - np.log1p(step / (x + s)) + np.log1p(step / x))
    if a0 > 0:
        out = out + a0 * np.log1p(step / x) - b0 * step
    return out


def _frozen_change(x, x_new, h, a0, b0):
    """f_out(x_new) - f_out(x) without cancellation (both finite)."""
    step = x_new - x
    out = 0.5 * (np.log1p(step / x) - np.log1p(step / (x + h)))
    if a0 > 0:
        out = out + a0 * np.log1p(step / x) - b0 * step
    return out


# ----------------------------------------------------------------------------------------------
# The restricted-family ELBO, transcribed term by term
# ----------------------------------------------------------------------------------------------
def _gamma_prior_and_entropy(shape, rate, a0, b0):
    """sum of E_q[ln Gamma(x | a0, b0)] + H[Gamma(shape, rate)]; a0 = b0 = 0 drops the improper
    prior's infinite normaliser a0 ln b0 - ln Gamma(a0), keeping -E[ln x]."""
    mean, mean_log = shape / rate, digamma(shape) - np.log(rate)
    log_prior = (a0 - 1.0) * mean_log - b0 * mean
    if a0 > 0:
        log_prior = log_prior + a0 * math.log(b0) - gammaln(a0)
    entropy = shape - np.log(rate) + gammaln(shape) + (1.0 - shape) * digamma(shape)
    return float(np.sum(log_prior + entropy))


def _w_alpha_terms(active, mu, Sigma, frozen_var, alpha_shape, alpha_rate, a0, b0):
    """E[ln p(w|alpha)] + E[ln p(alpha)] + H[q(w)] + H[q(alpha)] over all M coefficients."""
    M = alpha_shape.shape[0]
    second = np.array(frozen_var, dtype=np.float64)
    second[active] = mu**2 + np.diag(Sigma)
    e_alpha = alpha_shape / alpha_rate
    e_log_alpha = digamma(alpha_shape) - np.log(alpha_rate)
    log_p_w = np.sum(0.5 * (e_log_alpha - LOG_2PI - e_alpha * second))
    frozen = np.ones(M, dtype=bool)
    frozen[active] = False
    log_det = (np.linalg.slogdet(Sigma)[1] if len(active) else 0.0) + np.sum(np.log(frozen_var[frozen]))
    entropy_w = 0.5 * M * (1.0 + LOG_2PI) + 0.5 * log_det
    return log_p_w + _gamma_prior_and_entropy(alpha_shape, alpha_rate, a0, b0) + entropy_w


def _linear_moments(Phi, active, mu, Sigma, frozen_var):
    """E[phi_n^T w] and Var[phi_n^T w] under the restricted q(w), shape (N,) each."""
    phi_a = Phi[:, active]
    mean = phi_a @ mu
    var = np.einsum("nk,kl,nl->n", phi_a, Sigma, phi_a) + (Phi * Phi) @ frozen_var
    return mean, var


def _elbo_args(Phi, active, mu, Sigma, frozen_var, alpha_shape, alpha_rate):
    Phi = np.asarray(Phi, dtype=np.float64)
    active = np.asarray(active, dtype=np.intp).reshape(-1)
    return (Phi, active, np.asarray(mu, dtype=np.float64).reshape(-1),
            np.asarray(Sigma, dtype=np.float64).reshape(len(active), len(active)),
            np.asarray(frozen_var, dtype=np.float64), np.asarray(alpha_shape, dtype=np.float64),
            np.asarray(alpha_rate, dtype=np.float64))


def restricted_elbo_regression(Phi, t, active, mu, Sigma, frozen_var, alpha_shape, alpha_rate, gamma_shape,
                               gamma_rate, *, a0=1e-6, b0=1e-6, e0=1e-6, f0=1e-6):
    """ELBO of RVM regression under the restricted family, every term and constant.

    E[ln p(t|w,gamma)] + E[ln p(w|alpha)] + E[ln p(alpha)] + E[ln p(gamma)] + H[q(w)] + H[q(alpha)]
    + H[q(gamma)], with q(w) = N(mu, Sigma) on ``active`` times N(0, frozen_var_k) elsewhere:

        E[ln p(t|w,gamma)] = N/2 (E ln gamma - ln 2 pi) - E[gamma]/2 (||t - Phi_A mu||^2
                             + tr(Phi_A^T Phi_A Sigma) + sum_k ||phi_k||^2 frozen_var_k)
        H[q(w)] = M/2 (1 + ln 2 pi) + 1/2 ln|Sigma| + 1/2 sum_frozen ln frozen_var_k

    Parameters
    ----------
    Phi : (N, M); t : (N,); active : (K,) ints; mu : (K,); Sigma : (K, K);
    frozen_var : (M,) (ignored on ``active``); alpha_shape, alpha_rate : (M,);
    gamma_shape, gamma_rate : scalars; a0, b0, e0, f0 : the Gamma priors (a0 = b0 = 0 leaves out
    the improper prior's infinite normaliser).

    Returns
    -------
    float.
    """
    Phi, active, mu, Sigma, frozen_var, alpha_shape, alpha_rate = _elbo_args(
        Phi, active, mu, Sigma, frozen_var, alpha_shape, alpha_rate)
    t = np.asarray(t, dtype=np.float64)
    N = t.shape[0]
    phi_a = Phi[:, active]
    frozen = np.ones(Phi.shape[1], dtype=bool)
    frozen[active] = False
    residual = t - phi_a @ mu
    square_error = (residual @ residual + np.sum((phi_a.T @ phi_a) * Sigma)
                    + np.sum(np.sum(Phi[:, frozen] ** 2, axis=0) * frozen_var[frozen]))
    e_gamma = gamma_shape / gamma_rate
    e_log_gamma = digamma(gamma_shape) - math.log(gamma_rate)
    log_lik = 0.5 * N * (e_log_gamma - LOG_2PI) - 0.5 * e_gamma * square_error
    gamma_terms = _gamma_prior_and_entropy(np.asarray([gamma_shape], float), np.asarray([gamma_rate], float), e0, f0)
    return float(log_lik + gamma_terms + _w_alpha_terms(active, mu, Sigma, frozen_var, alpha_shape, alpha_rate, a0, b0))


def restricted_elbo_classification(Phi, t, active, mu, Sigma, frozen_var, alpha_shape, alpha_rate, xi, *,
                                   a0=1e-6, b0=1e-6, weights=None):
    """ELBO of RVM classification with the Jaakkola-Jordan bound under the restricted family.

    sum_n omega_n [ln sigma(xi_n) + (s_n m_n - xi_n)/2 - lambda(xi_n)(m_n^2 + v_n - xi_n^2)]
    + E[ln p(w|alpha)] + E[ln p(alpha)] + H[q(w)] + H[q(alpha)], with s_n = 2 t_n - 1,
    m_n = E[phi_n^T w], v_n = Var[phi_n^T w] (frozen variances included), omega_n = 1 without
    ``weights``. Arguments as :func:`restricted_elbo_regression`, with ``xi`` (N,).
    """
    Phi, active, mu, Sigma, frozen_var, alpha_shape, alpha_rate = _elbo_args(
        Phi, active, mu, Sigma, frozen_var, alpha_shape, alpha_rate)
    t = np.asarray(t, dtype=np.float64)
    xi = np.abs(np.asarray(xi, dtype=np.float64))
    omega = np.ones_like(t) if weights is None else np.asarray(weights, dtype=np.float64)
    frozen = frozen_var.copy()
    frozen[active] = 0.0
    mean, var = _linear_moments(Phi, active, mu, Sigma, frozen)
    safe = np.where(xi > 1e-6, xi, 1.0)
    lam = np.where(xi > 1e-6, np.tanh(safe / 2.0) / (4.0 * safe), 0.125 - xi**2 / 96.0)
    bound = log_expit(xi) + 0.5 * ((2.0 * t - 1.0) * mean - xi) - lam * (mean**2 + var - xi**2)
    return float(np.sum(omega * bound) + _w_alpha_terms(active, mu, Sigma, frozen_var, alpha_shape, alpha_rate, a0, b0))


# ----------------------------------------------------------------------------------------------
# The schedule
# ----------------------------------------------------------------------------------------------
LOG_ALPHA_TOL = 1e-3  # the smallest change of ln E[alpha_k] a re-estimate makes
MAX_ALIGNMENT = 1.0 - 1e-3  # the largest |cosine| of a coefficient added with an active one


class Moments:
    """The moments of phi_n^T w under the restricted q(w), for the likelihood factor's updates:
    ``mean`` (N,), ``var`` (N,) (frozen variances included; formed on first use, O(N M)) and
    ``var_sum`` = sum_n var_n (O(M + K^2))."""

    def __init__(self, schedule):
        self._schedule = schedule
        K = schedule.K
        A = schedule.A[:, :K]
        self.mean = A @ schedule.mu[:K]
        frozen_var = schedule.frozen_var()
        self.var_sum = float(np.sum(schedule.gram_active() * schedule.Sigma[:K, :K]) + schedule.col_sq @ frozen_var)
        self._var = None
        self._frozen_var = frozen_var

    @property
    def var(self):
        if self._var is None:
            s = self._schedule
            K = s.K
            A = s.A[:, :K]
            self._var = np.einsum("nk,nk->n", A @ s.Sigma[:K, :K], A) + s.squared() @ self._frozen_var
        return self._var


class FastFit(NamedTuple):
    """The result of :func:`schedule`.

    active (K,) the coefficients in the model, in the order of ``mu`` and ``Sigma``; mu (K,),
    Sigma (K, K) their q(w); x (M,) E[alpha_k] of every coefficient (q(alpha_k) = Gamma(a0 + 1/2,
    (a0 + 1/2) / x_k)); frozen_var (M,) the variances of the frozen coefficients (0 on
    ``active``); supported (K,) whether the data support each active coefficient (q_k^2 > s_k);
    elbo_trace the ELBO at the start, after every move (the previous value plus the move's exact
    gain) and after every update of the likelihood factor (evaluated afresh); trace_events
    (len(elbo_trace) - 1,) ADD, REESTIMATE or UPDATE; num_moves; num_passes; converged.
    """

    active: np.ndarray
    mu: np.ndarray
    Sigma: np.ndarray
    x: np.ndarray
    frozen_var: np.ndarray
    supported: np.ndarray
    elbo_trace: np.ndarray
    trace_events: np.ndarray
    num_moves: int
    num_passes: int
    converged: bool

    @property
    def elbo(self):
        return float(self.elbo_trace[-1])


ADD, REESTIMATE, UPDATE = 0, 1, 2


def _jj_lambda(xi):
    """lambda(xi) = tanh(xi/2) / (4 xi), 1/8 at xi = 0 (``ppl_sbl.bounds.jj_lambda`` in NumPy)."""
    xi = np.abs(xi)
    small = xi < 1e-6
    safe = np.where(small, 1.0, xi)
    return np.where(small, 0.125 - xi**2 / 96.0, np.tanh(safe / 2.0) / (4.0 * safe))


def _inverse_and_mean(precision, linear):
    """(precision^-1, precision^-1 linear) by a Jacobi-scaled Cholesky factorisation."""
    if precision.shape[0] == 0:
        return np.zeros((0, 0)), np.zeros(0)
    d = 1.0 / np.sqrt(np.diag(precision))
    factor = scipy.linalg.cho_factor(precision * d[:, None] * d[None, :], lower=True)
    inv = scipy.linalg.cho_solve(factor, np.eye(len(d))) * d[:, None] * d[None, :]
    inv = 0.5 * (inv + inv.T)
    return inv, inv @ linear


class _Schedule:
    """Buffers of one fit: the active columns Phi_A (N, K), B = Phi^T diag(W) Phi_A (M, K) (and
    Phi^T Phi_A where W is uniform, so that a new E[gamma] rescales it), Sigma, mu, and the
    statistics S_m = h_m - B_m^T Sigma B_m, Q_m = b_m - B_m^T mu of every coefficient, with
    h = Phi^2^T W and b = Phi^T r (Tipping & Faul 2003's S and Q for the quadratic factor)."""

    def __init__(self, Phi, factor, a0, b0):
        self.Phi, self.factor, self.a0, self.b0 = Phi, factor, a0, b0
        N, M = Phi.shape
        self.col_sq = np.einsum("nm,nm->m", Phi, Phi)
        self._sq = None
        self._target = None  # r / W where W is uniform, and Phi^T of it
        cap = 16
        self.A = np.zeros((N, cap), order="F")
        self.B = np.zeros((M, cap))
        self.C = np.zeros((M, cap)) if factor.uniform else None  # Phi^T Phi_A
        self.Sigma = np.zeros((cap, cap))
        self.mu = np.zeros(cap)
        self.index = np.zeros(cap, dtype=np.intp)
        self.K = 0
        self.x = np.ones(M)
        self.blocked = np.zeros(M, dtype=bool)  # nearly collinear with an active coefficient
        self.set_factor()

    # buffers -------------------------------------------------------------------------------------
    @property
    def active(self):
        return self.index[:self.K]

    def squared(self):
        if self._sq is None:
            self._sq = self.Phi * self.Phi
        return self._sq

    def gram_active(self):
        """Phi_A^T Phi_A (K, K)."""
        K = self.K
        if self.C is not None:
            return self.C[self.active, :K]
        A = self.A[:, :K]
        return A.T @ A

    def frozen_var(self):
        v = 1.0 / (self.x + self.h)
        v[self.active] = 0.0
        return v

    def _grow(self):
        cap = 2 * self.A.shape[1]
        K = self.K

        def grown(old, shape, order="C"):
            new = np.zeros(shape, order=order)
            new[tuple(slice(0, n) for n in old.shape)] = old
            return new

        self.A = grown(self.A[:, :K], (self.A.shape[0], cap), "F")
        self.B = grown(self.B[:, :K], (self.B.shape[0], cap))
        if self.C is not None:
            self.C = grown(self.C[:, :K], (self.C.shape[0], cap))
        self.Sigma = grown(self.Sigma[:K, :K], (cap, cap))
        self.mu = grown(self.mu[:K], (cap,))
        self.index = grown(self.index[:K], (cap,)).astype(np.intp)

    # the likelihood factor -------------------------------------------------------------------------
    def set_factor(self):
        """(W, r) from the factor; h, b, B for them; the frozen q(alpha) at their optimum (2); then
        q(w) and the statistics exactly (:meth:`refresh`)."""
        W, r = self.factor.weights()
        K, a = self.K, self.active
        if self.factor.uniform:
            g = float(W[0])
            target = r / g
            if self._target is None or not np.array_equal(target, self._target[0]):
                self._target = (target, self.Phi.T @ target)
            self.h = g * self.col_sq
            self.b = g * self._target[1]
            self.B[:, :K] = g * self.C[:, :K]
        else:
            self.h = self.squared().T @ W
            self.b = self.Phi.T @ r
            self.B[:, :K] = self.Phi.T @ (W[:, None] * self.A[:, :K])
        self.W = W
        x_out, _ = frozen_optimum(self.h, self.a0, self.b0)
        frozen = np.ones(self.x.shape[0], dtype=bool)
        frozen[a] = False
        self.x[frozen] = x_out[frozen]
        self.refresh()

    def refresh(self):
        """q(w) = N(mu, Sigma) for the active set at the current E[alpha], and S, Q, exactly."""
        K, a = self.K, self.active
        Sigma, mu = _inverse_and_mean(self.B[a, :K] + np.diag(self.x[a]), self.b[a])
        self.Sigma[:K, :K], self.mu[:K] = Sigma, mu
        B = self.B[:, :K]
        self.S = self.h - np.einsum("mk,mk->m", B @ Sigma, B)
        self.Q = self.b - B @ mu

    # moves ------------------------------------------------------------------------------------------
    def leave_one_out(self):
        """s_k and q_k of eq. (3) for every coefficient (M,): S and Q for the frozen ones; for the
        active ones q = mu_k / Sigma_kk and s = x S / (x - S) where x Sigma_kk > 1/2, else
        s = 1/Sigma_kk - x (each form where it has no cancellation)."""
        s, q = self.S.copy(), self.Q.copy()
        K, a = self.K, self.active
        if K:
            xa, diag, sa = self.x[a], np.diag(self.Sigma)[:K], self.S[a]
            with np.errstate(divide="ignore", invalid="ignore"):
                s[a] = np.where(xa * diag > 0.5, xa * sa / (xa - sa), 1.0 / diag - xa)
            q[a] = self.mu[:K] / diag
        return s, q

    def best_move(self, floor):
        """(kind, coefficient, target E[alpha], gain) of the significant move with the largest gain,
        or None: an add of a frozen coefficient the data support (q^2 > s, eq. (1) at its
        maximiser against (2) at x_k) and that is not nearly collinear with an active one
        (|cosine| > MAX_ALIGNMENT, Tipping's SparseBayes's alignment test), or a re-estimate of an active one to the maximiser of (1)
        that changes ln E[alpha_k] by at least LOG_ALPHA_TOL; either must gain more than
        ``floor`` nats."""
        s, q = self.leave_one_out()
        M = s.shape[0]
        is_active = np.zeros(M, dtype=bool)
        is_active[self.active] = True
        with np.errstate(invalid="ignore"):
            supported = ((~is_active) & (~self.blocked) & (self.h > 0) & (s >= _COLLINEAR * self.h)
                         & (np.abs(q) > np.sqrt(np.maximum(s, 0.0))))
        candidates = np.concatenate([self.active, np.flatnonzero(supported)])
        if len(candidates) == 0:
            return None
        sc = np.maximum(s[candidates], _COLLINEAR * np.maximum(self.h[candidates], 1e-300))
        qc = q[candidates]
        x_in, value_in = in_model_optimum(sc, qc, self.a0, self.b0)
        xc = self.x[candidates]
        K = self.K
        gain = np.empty(len(candidates))
        with np.errstate(invalid="ignore", divide="ignore"):
            gain[:K] = _in_model_change(xc[:K], x_in[:K], sc[:K], qc[:K], self.a0, self.b0)
            if self.b0 == 0:
                gain[:K] = np.where(np.isfinite(x_in[:K]), gain[:K], value_in[:K] - in_model_value(
                    xc[:K], sc[:K], qc[:K], self.a0, self.b0))
            small = np.abs(np.log(x_in[:K] / xc[:K])) < LOG_ALPHA_TOL
        gain[:K][small] = -np.inf
        gain[K:] = value_in[K:] - frozen_value(xc[K:], self.h[candidates[K:]], self.a0, self.b0)
        j = int(np.argmax(gain))
        if not gain[j] > floor:
            return None
        return (REESTIMATE if j < K else ADD), int(candidates[j]), float(x_in[j]), float(gain[j])

    def add(self, k, x_new):
        """Coefficient k joins the model with E[alpha_k] = x_new: with z = Sigma B_k, Sigma_kk' =
        1/(x_new + S_k), mu_k' = Sigma_kk' Q_k, e = Phi^T W phi_k - B z, the old block gains
        Sigma_kk' z z^T, mu loses mu_k' z, S_m -= Sigma_kk' e_m^2, Q_m -= mu_k' e_m
        (Tipping & Faul 2003, appendix). One product with the design, then O(M K)."""
        if self.K == self.A.shape[1]:
            self._grow()
        K = self.K
        phi = self.Phi[:, k]
        c = self.Phi.T @ phi
        column = float(self.W[0]) * c if self.C is not None else self.Phi.T @ (self.W * phi)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.blocked |= np.abs(c) > MAX_ALIGNMENT * np.sqrt(self.col_sq[k] * self.col_sq)
        z = self.Sigma[:K, :K] @ self.B[k, :K]
        sigma_kk = 1.0 / (x_new + self.S[k])
        mu_k = sigma_kk * self.Q[k]
        e = column - self.B[:, :K] @ z
        self.Sigma[:K, :K] += sigma_kk * np.outer(z, z)
        self.Sigma[:K, K] = self.Sigma[K, :K] = -sigma_kk * z
        self.Sigma[K, K] = sigma_kk
        self.mu[:K] -= mu_k * z
        self.mu[K] = mu_k
        self.S -= sigma_kk * e * e
        self.Q -= mu_k * e
        self.A[:, K] = phi
        self.B[:, K] = column
        if self.C is not None:
            self.C[:, K] = c
        self.index[K] = k
        self.K = K + 1
        self.x[k] = x_new

    def reestimate(self, k, x_new):
        """E[alpha_k] of active k to x_new: with Delta = x_new - x_k, kappa = Delta / (1 + Delta
        Sigma_jj): Sigma -= kappa Sigma_j Sigma_j^T, mu -= kappa mu_j Sigma_j, S_m += kappa e_m^2,
        Q_m += kappa mu_j e_m with e = B Sigma_j. O(M K)."""
        K = self.K
        j = int(np.flatnonzero(self.active == k)[0])
        delta = x_new - self.x[k]
        col = self.Sigma[:K, j].copy()
        kappa = delta / (1.0 + delta * col[j])
        mu_j = self.mu[j]
        e = self.B[:, :K] @ col
        self.Sigma[:K, :K] -= kappa * np.outer(col, col)
        self.mu[:K] -= kappa * mu_j * col
        self.S += kappa * e * e
        self.Q += kappa * mu_j * e
        self.x[k] = x_new

    # the ELBO ---------------------------------------------------------------------------------------
    def moments(self):
        return Moments(self)

    def elbo(self, moments=None):
        """The restricted-family ELBO: the likelihood factor's terms (from the moments of Phi w)
        plus E[ln p(w|alpha)] + E[ln p(alpha)] + H[q(w)] + H[q(alpha)]."""
        moments = self.moments() if moments is None else moments
        K = self.K
        shape = np.full(self.x.shape[0], self.a0 + 0.5)
        return self.factor.elbo_terms(moments) + _w_alpha_terms(
            self.active, self.mu[:K], self.Sigma[:K, :K], 1.0 / (self.x + self.h), shape, shape / self.x,
            self.a0, self.b0)

    def supported(self):
        s, q = self.leave_one_out()
        a = self.active
        return np.abs(q[a]) > np.sqrt(np.maximum(s[a], 0.0))

    def result(self, trace, events, moves, passes, converged):
        K = self.K
        return FastFit(active=self.active.copy(), mu=self.mu[:K].copy(), Sigma=self.Sigma[:K, :K].copy(),
                       x=self.x.copy(), frozen_var=self.frozen_var(), supported=self.supported(),
                       elbo_trace=np.asarray(trace), trace_events=np.asarray(events, dtype=int),
                       num_moves=moves, num_passes=passes, converged=converged)


def schedule(Phi, factor, *, a0=1e-6, b0=1e-6, tol=1e-9, max_passes=1000, max_moves=None, progress=None):
    """The fast variational schedule: from the empty model, the best significant move at a time
    (:meth:`_Schedule.best_move`: adds of the coefficients the data support, re-estimates to the
    maximiser of (1)) until none is left, then the likelihood factor's own updates given q(w)
    (``factor.update``), q(w) and the statistics recomputed for its new (W, r), the frozen
    q(alpha) put at their optima (2); passes until the ELBO changes by at most ``tol`` (relative)
    over one. Every move and every update is a coordinate ascent step of the restricted-family
    ELBO, so it never decreases.

    No coefficient leaves the model: freezing one always lowers the ELBO (module docstring,
    "Sparsity"), and one the data stop supporting goes on at the maximiser of (1), a large
    E[alpha_k] of order sqrt(s_k / (2 b0)); ``FastFit.supported`` tells them apart.

    Parameters
    ----------
    Phi : (N, M) float64 design matrix.
    factor : the likelihood's other factors, with ``uniform`` (W the same for every point: then
        r / W must stay the same too), ``weights()`` -> (W, r), ``update(moments)`` (coordinate
        updates given :class:`Moments`) and ``elbo_terms(moments)`` (its part of the ELBO).
    a0, b0 : the Gamma prior of each alpha_k (both > 0, or both 0).
    tol : relative change of the ELBO over a pass that stops the fit; a move must gain more than
        ``tol |ELBO|`` nats.
    max_passes, max_moves : upper limits (default moves: 100 M).
    progress : callable(passes, moves, elbo, active), called after every pass, or None.

    Returns
    -------
    FastFit.
    """
    a0, b0 = _hyper(a0, b0)
    if not (tol > 0):
        raise ValueError(f"`tol` must be > 0; got {tol!r}.")
    M = Phi.shape[1]
    max_moves = 100 * M if max_moves is None else int(max_moves)
    work = _Schedule(Phi, factor, a0, b0)
    value = work.elbo()
    trace, events = [value], []
    moves, passes, converged = 0, 0, False
    while passes < int(max_passes):
        passes += 1
        start = value
        while moves < max_moves:
            move = work.best_move(tol * max(1.0, abs(value)))
            if move is None:
                break
            kind, k, target, gain = move
            (work.add if kind == ADD else work.reestimate)(k, target)
            moves += 1
            value += gain
            trace.append(value)
            events.append(kind)
        factor.update(work.moments())
        work.set_factor()
        value = work.elbo()
        trace.append(value)
        events.append(UPDATE)
        if progress is not None:
            progress(passes, moves, value, work.K)
        if abs(value - start) <= tol * abs(value):
            converged = True
            break
    return work.result(trace, events, moves, passes, converged)


class GaussianNoise:
    """q(gamma) = Gamma(e, f) of RVM regression as the schedule's likelihood factor: W = E[gamma],
    r = E[gamma] t; update e = e0 + N/2, f = f0 + E||t - Phi w||^2 / 2 (grid RVM eq. (18), the
    frozen variances included). Starts at E[gamma] = 10 / var(t), the noise level Tipping & Faul
    (2003, section 4) start from, a tenth of the target variance."""

    uniform = True

    def __init__(self, t, e0, f0):
        self.t, self.e0, self.f0 = t, e0, f0
        N = t.shape[0]
        spread = float(np.var(t)) if np.var(t) > 0 else float(np.mean(t * t)) or 1.0
        self.e = e0 + 0.5 * N
        self.f = f0 + 0.5 * N * _NOISE_SHARE * spread

    def weights(self):
        g = self.e / self.f
        return np.full(self.t.shape[0], g), g * self.t

    def _square_error(self, moments):
        residual = self.t - moments.mean
        return float(residual @ residual + moments.var_sum)

    def update(self, moments):
        self.e = self.e0 + 0.5 * self.t.shape[0]
        self.f = self.f0 + 0.5 * self._square_error(moments)

    def elbo_terms(self, moments):
        e_gamma = self.e / self.f
        e_log_gamma = digamma(self.e) - math.log(self.f)
        N = self.t.shape[0]
        return float(0.5 * N * (e_log_gamma - LOG_2PI) - 0.5 * e_gamma * self._square_error(moments)
                     + _gamma_prior_and_entropy(np.asarray([self.e]), np.asarray([self.f]), self.e0, self.f0))


class JaakkolaJordan:
    """The Jaakkola-Jordan bound of a Bernoulli-logit likelihood as the schedule's likelihood
    factor (grid RVM eq. (27)-(30)): W = 2 omega lambda(xi), r = omega (t - 1/2), with per-point
    weights omega (1, or the robust RVM's E[omega_n]); update xi_n^2 = E[(phi_n^T w)^2] (30),
    the frozen variances included. Starts at xi = 0."""

    uniform = False

    def __init__(self, t, weights=None):
        self.t = t
        self.omega = np.ones_like(t) if weights is None else np.asarray(weights, dtype=np.float64)
        self.xi = np.zeros_like(t)

    def weights(self):
        lam = _jj_lambda(self.xi)
        return 2.0 * self.omega * lam, self.omega * (self.t - 0.5)

    def update(self, moments):
        self.xi = np.sqrt(moments.mean**2 + moments.var)

    def pointwise(self, moments):
        """The bound (27) on ln p(t_n | w), in expectation under q(w), for every point."""
        xi = self.xi
        lam = _jj_lambda(xi)
        mean = moments.mean
        return log_expit(xi) + 0.5 * ((2.0 * self.t - 1.0) * mean - xi) - lam * (mean**2 + moments.var - xi**2)

    def elbo_terms(self, moments):
        return float(np.sum(self.omega * self.pointwise(moments)))


def active_gaussian(fit: FastFit):
    """The fit's q(w) as the :class:`ppl_sbl.gaussian.ActiveGaussian` of the guides: the active
    coefficients in a bucket of slots (a power of two; padding slots hold M and an identity block),
    Sigma in the dense form, the frozen variances elsewhere."""
    import jax.numpy as jnp

    from . import gaussian as G

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
    return G.ActiveGaussian(mean=jnp.asarray(mean), cov=jnp.asarray(cov), base=jnp.zeros(0),
                            index=jnp.asarray(index), frozen_var=jnp.asarray(fit.frozen_var),
                            log_det=jnp.asarray(log_det))


def alpha_factors(fit: FastFit, a0):
    """q(alpha_k) = Gamma(a0 + 1/2, (a0 + 1/2) / E[alpha_k]) of every coefficient: (shape, rate)."""
    import jax.numpy as jnp

    shape = np.full(fit.x.shape[0], a0 + 0.5)
    return jnp.asarray(shape), jnp.asarray(shape / fit.x)


class RobustJaakkolaJordan(JaakkolaJordan):
    """The robust RVM's classification likelihood (Hwang & Jeong 2015) as the schedule's factor:
    the JJ bound with each point's term weighted by E[omega_n], q(omega_n) = Gamma(c, d~_n);
    update in the paper's order: d~_n = d - E_q(w)[ln h(w, xi_n)] (14)-(15) at the current xi,
    then xi (16). Starts at q(omega_n) = Gamma(c, d), xi = 0."""

    def __init__(self, t, c, d):
        super().__init__(t)
        self.c, self.d = c, d
        self.omega_rate = np.full_like(t, d)

    def _omega(self):
        return self.c / self.omega_rate

    def weights(self):
        self.omega = self._omega()
        return super().weights()

    def update(self, moments):
        self.omega_rate = self.d - self.pointwise(moments)
        super().update(moments)

    def elbo_terms(self, moments):
        shape = np.full_like(self.omega_rate, self.c)
        return float(np.sum(self._omega() * self.pointwise(moments))
                     + _gamma_prior_and_entropy(shape, self.omega_rate, self.c, self.d))


class RobustGaussianNoise:
    """The robust RVM's regression likelihood, t_n ~ N(phi_n^T w, 1/(gamma omega_n)), as the
    schedule's factor: W_n = E[gamma] E[omega_n], r_n = W_n t_n; update in the model's order,
    q(gamma): e = e0 + N/2, f = f0 + sum_n E[omega_n] E[r_n^2] / 2, then q(omega_n):
    c~ = c + 1/2, d~_n = d + E[gamma] E[r_n^2] / 2. Starts at E[gamma] = 10 / var(t) (as
    :class:`GaussianNoise`) and q(omega_n) = Gamma(c, d)."""

    uniform = False

    def __init__(self, t, c, d, e0, f0):
        self.t, self.c, self.d, self.e0, self.f0 = t, c, d, e0, f0
        N = t.shape[0]
        spread = float(np.var(t)) if np.var(t) > 0 else float(np.mean(t * t)) or 1.0
        self.e = e0 + 0.5 * N
        self.f = f0 + 0.5 * N * _NOISE_SHARE * spread
        self.omega_shape = np.full(N, c)
        self.omega_rate = np.full(N, d)

    def weights(self):
        W = (self.e / self.f) * self.omega_shape / self.omega_rate
        return W, W * self.t

    def _square_errors(self, moments):
        return (self.t - moments.mean) ** 2 + moments.var

    def update(self, moments):
        sq = self._square_errors(moments)
        self.e = self.e0 + 0.5 * self.t.shape[0]
        self.f = self.f0 + 0.5 * float(np.sum(self.omega_shape / self.omega_rate * sq))
        self.omega_shape = np.full_like(sq, self.c + 0.5)
        self.omega_rate = self.d + 0.5 * (self.e / self.f) * sq

    def elbo_terms(self, moments):
        e_gamma, e_log_gamma = self.e / self.f, digamma(self.e) - math.log(self.f)
        e_omega = self.omega_shape / self.omega_rate
        e_log_omega = digamma(self.omega_shape) - np.log(self.omega_rate)
        log_lik = 0.5 * np.sum(e_log_gamma + e_log_omega - LOG_2PI) - 0.5 * e_gamma * np.sum(
            e_omega * self._square_errors(moments))
        return float(log_lik + _gamma_prior_and_entropy(np.asarray([self.e]), np.asarray([self.f]), self.e0, self.f0)
                     + _gamma_prior_and_entropy(self.omega_shape, self.omega_rate, self.c, self.d))
