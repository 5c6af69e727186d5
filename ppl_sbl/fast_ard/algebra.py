"""One coefficient of the ARD family: its collapsed ELBO in the model and frozen, (1) and (2) of
:mod:`ppl_sbl.fast_ard`, their maximisers (the cubic (4) and the quadratic (5)), and the Gamma
terms of the restricted-family ELBO, in NumPy (the schedule runs on the host)."""
from __future__ import annotations

import cmath
import math

import numpy as np
import scipy.linalg
from scipy.special import digamma, gammaln

__all__ = ["in_model_value", "frozen_value", "in_model_optimum", "frozen_optimum"]

LOG_2PI = math.log(2.0 * math.pi)
_NEWTON_STEPS = 6
_WARM_STEPS = 8
_REAL = 1e-6  # |Im| / |root| below which a computed root of the cubic (4) counts as real


def check_hyperparameters(a0, b0):
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
    a0, b0 = check_hyperparameters(a0, b0)
    x, s, q = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (x, s, q)))
    return _f_in(x, s, q, a0, b0)


def _f_in(x, s, q, a0, b0):
    """f_in of eq. (1) for validated arrays (no broadcasting or checks)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return 0.5 * q * q / (x + s) - 0.5 * np.log1p(s / x) + _prior_part(x, a0, b0)


def _cubic(s, q, a0, b0):
    """The coefficients (c3, c2, c1, c0) of the cubic (4) in u = x / s (s > 0)."""
    beta = b0 * s
    d = _excess(q, s)
    return 2.0 * beta, 4.0 * beta - 2.0 * a0, 2.0 * beta + d - 4.0 * a0, -(2.0 * a0 + 1.0)


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
    a0, b0 = check_hyperparameters(a0, b0)
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
                             np.concatenate([c0, c3]))  # c0 = -(2 a0 + 1) != 0
        # a root whose imaginary part is not small against its size is one of a complex pair
        real = np.where(np.abs(roots.imag) <= _REAL * np.abs(roots), roots.real, np.nan)
        u = np.concatenate([real[:n], 1.0 / real[n:]], axis=1)
        u = np.where(np.isfinite(u) & (u > 0), u, np.nan)
        C = tuple(c[:, None] for c in (c3, c2, c1, c0))
        value = np.abs(((C[0] * u + C[1]) * u + C[2]) * u + C[3])
        for _ in range(_NEWTON_STEPS):
            trial, trial_value, accept = cubic_newton_step(u, value, *C)
            if not np.any(accept & (np.abs(trial - u) > 4e-16 * np.abs(u))):
                break  # converged to rounding
            u = np.where(accept, trial, u)
            value = np.where(accept, trial_value, value)
    return u


def cubic_newton_step(u, value, c3, c2, c1, c0, xp=np):
    """One safeguarded Newton step on c3 u^3 + c2 u^2 + c1 u + c0 from u, where |cubic(u)| = value:
    (the trial point, |cubic| there, whether it is kept: finite, positive and no larger in |cubic|).
    ``xp``: NumPy, or ``jax.numpy`` for the compiled schedule (:mod:`ppl_sbl.fast_ard.jax_algebra`)."""
    trial = u - (((c3 * u + c2) * u + c1) * u + c0) / ((3.0 * c3 * u + 2.0 * c2) * u + c1)
    trial_value = xp.abs(((c3 * trial + c2) * trial + c1) * trial + c0)
    return trial, trial_value, xp.isfinite(trial) & (trial > 0) & (trial_value <= value)


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
    a0, b0 = check_hyperparameters(a0, b0)
    s, q = np.broadcast_arrays(np.asarray(s, dtype=np.float64), np.asarray(q, dtype=np.float64))
    if not (np.all(np.isfinite(s)) and np.all(s >= 0)):
        raise ValueError("`s` (the leave-one-out precision) must be finite and >= 0.")
    if not np.all(np.isfinite(q)):
        raise ValueError("`q` (the leave-one-out quality) must be finite.")
    if np.any((s == 0) & (q != 0)):
        raise ValueError("`q` must be 0 where `s` is 0: with s = 0 < |q| f_in grows without bound as x -> 0.")
    return optimum_unchecked(s, q, a0, b0)


def optimum_unchecked(s, q, a0, b0):
    """:func:`in_model_optimum` for inputs it has validated (float64 arrays of one shape, s >= 0,
    q = 0 where s = 0, (a0, b0) from :func:`check_hyperparameters`): the schedule's inner loop."""
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
        c3, c2, c1, c0 = _cubic(sp, qp, a0, b0)
        u = _cubic_candidates(c3, c2, c1, np.full_like(sp, c0))
        xs = sp[:, None] * u
        f = _f_in(xs, sp[:, None], qp[:, None], a0, b0)
        f = np.where(np.isfinite(f), f, -np.inf)
        best = np.argmax(f, axis=1)
        rows = np.arange(len(sp))
        x[pos] = xs[rows, best]
        value[pos] = f[rows, best]
    return x.reshape(shape), value.reshape(shape)


def warm_optimum(s, q, a0, b0, start):
    """:func:`optimum_unchecked` for s > 0 from a guess ``start`` of each maximiser (the current
    E[alpha_k]): where the cubic (4) has one positive root (by Descartes' rule of signs, unless
    c2 < 0 < c1; or by its discriminant, clearly negative: one real root), that root is f_in's
    only stationary point and so its global maximiser, found by Newton steps from the guess; rows
    where the steps do not settle to rounding within ``_WARM_STEPS``, and rows that may have three
    positive roots, go through Cardano's formula."""
    if b0 == 0:
        return optimum_unchecked(s, q, a0, b0)
    c3, c2, c1, c0 = _cubic(s, q, a0, b0)
    with np.errstate(all="ignore"):
        u = start / s
        d3, d2 = 3.0 * c3, 2.0 * c2
        for _ in range(_WARM_STEPS):
            step = (((c3 * u + c2) * u + c1) * u + c0) / ((d3 * u + d2) * u + c1)
            u -= step
            settled = np.abs(step) <= 1e-14 * u
            if settled.all():
                break
        ok = settled & (u > 0) & np.isfinite(u)
        maybe = (c2 < 0) & (c1 > 0)
        if maybe.any():
            m3, m2, m1 = c3[maybe], c2[maybe], c1[maybe]
            terms = (18.0 * m3 * m2 * m1 * c0, -4.0 * m2**3 * c0, m2 * m2 * m1 * m1, -4.0 * m3 * m1**3,
                     -27.0 * m3 * m3 * c0 * c0)
            scale = np.maximum.reduce([np.abs(term) for term in terms])
            ok[maybe] &= sum(terms) < -1e-8 * scale
        x = s * u
    value = _f_in(x, s, q, a0, b0)
    if not np.all(ok):
        rest = ~ok
        x[rest], value[rest] = optimum_unchecked(s[rest], q[rest], a0, b0)
    return x, value


def scalar_optimum(s, q, a0, b0):
    """:func:`optimum_unchecked` for one coefficient (floats s > 0, q; validated (a0, b0)), in
    Python's own arithmetic: the same candidates (Cardano's formula for the cubic (4) and for its
    reversal, safeguarded Newton steps) without NumPy's per-call cost. Returns (x, f_in(x))."""
    if b0 == 0:
        d = (abs(q) - math.sqrt(s)) * (abs(q) + math.sqrt(s)) / s
        if d > 0:
            return s / d, 0.5 * float(_d_minus_log1p(d))
        return math.inf, 0.0
    beta = b0 * s
    d = (abs(q) - math.sqrt(s)) * (abs(q) + math.sqrt(s)) / s
    c = (2.0 * beta, 4.0 * beta - 2.0 * a0, 2.0 * beta + d - 4.0 * a0, -(2.0 * a0 + 1.0))

    def poly(v):
        return ((c[0] * v + c[1]) * v + c[2]) * v + c[3]

    best_x, best_f = math.nan, -math.inf
    for coefficients, reverse in ((c, False), (c[::-1], True)):
        for root in _scalar_cubic_roots(*coefficients):
            if abs(root.imag) > _REAL * abs(root) or root.real == 0.0:
                continue
            u = 1.0 / root.real if reverse else root.real
            if not (u > 0 and math.isfinite(u)):
                continue
            value = abs(poly(u))
            for _ in range(_NEWTON_STEPS):
                slope = (3.0 * c[0] * u + 2.0 * c[1]) * u + c[2]
                if slope == 0.0:
                    break
                trial = u - poly(u) / slope
                if not (trial > 0 and math.isfinite(trial)):
                    break
                trial_value = abs(poly(trial))
                if trial_value > value:
                    break
                moved = abs(trial - u) > 4e-16 * abs(u)
                u, value = trial, trial_value
                if not moved:
                    break
            x = s * u
            f = 0.5 * q * q / (x + s) - 0.5 * math.log1p(s / x) + (a0 * math.log(x) - b0 * x)
            if f > best_f:
                best_x, best_f = x, f
    return best_x, best_f


def _scalar_cubic_roots(c3, c2, c1, c0):
    """The three complex roots of c3 u^3 + c2 u^2 + c1 u + c0 (c3 != 0) by Cardano's formula, as
    :func:`_cubic_roots` computes them."""
    if c3 == 0.0:
        return ()
    p2, p1, p0 = c2 / c3, c1 / c3, c0 / c3
    P = p1 - p2 * p2 / 3.0
    Q = (2.0 * p2 * p2 * p2 / 27.0 - p2 * p1 / 3.0) + p0
    root = cmath.sqrt(complex(Q * Q / 4.0 + P * P * P / 27.0))
    inner = -Q / 2.0 + root if (root.conjugate() * -Q).real >= 0 else -Q / 2.0 - root
    C = inner ** (1.0 / 3.0) if inner != 0 else 0j
    roots = []
    for turn in _TURNS:
        Ck = C * turn
        t = Ck - P / (3.0 * Ck) if Ck != 0 else 0j
        roots.append(t - p2 / 3.0)
    return roots


_TURNS = tuple(cmath.exp(2j * math.pi * k / 3.0) for k in range(3))


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
    a0, b0 = check_hyperparameters(a0, b0)
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


def in_model_change(x, x_new, s, q, a0, b0):
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


def gamma_prior_and_entropy(shape, rate, a0, b0):
    """sum of E_q[ln Gamma(x | a0, b0)] + H[Gamma(shape, rate)]; a0 = b0 = 0 drops the improper
    prior's infinite normaliser a0 ln b0 - ln Gamma(a0), keeping -E[ln x]."""
    mean, mean_log = shape / rate, digamma(shape) - np.log(rate)
    log_prior = (a0 - 1.0) * mean_log - b0 * mean
    if a0 > 0:
        log_prior = log_prior + a0 * math.log(b0) - gammaln(a0)
    entropy = shape - np.log(rate) + gammaln(shape) + (1.0 - shape) * digamma(shape)
    return float(np.sum(log_prior + entropy))


def w_alpha_terms(active, mu, Sigma, frozen_var, alpha_shape, alpha_rate, a0, b0, groups=None, log_det=None):
    """E[ln p(w|alpha)] + E[ln p(alpha)] + H[q(w)] + H[q(alpha)] over all M coefficients: q(w) the
    active block N(mu, Sigma) and the frozen coefficients' N(0, frozen_var); q(alpha_g) =
    Gamma(alpha_shape_g, alpha_rate_g) for each precision g, w_k's precision alpha_{groups_k}
    (``groups`` None: one precision per coefficient). ``log_det`` is ln|Sigma| where the caller
    has it."""
    M = frozen_var.shape[0]
    second = np.array(frozen_var, dtype=np.float64)
    second[active] = mu**2 + np.diag(Sigma)
    e_alpha = alpha_shape / alpha_rate
    e_log_alpha = digamma(alpha_shape) - np.log(alpha_rate)
    if groups is not None:
        e_alpha, e_log_alpha = e_alpha[groups], e_log_alpha[groups]
    log_p_w = np.sum(0.5 * (e_log_alpha - LOG_2PI - e_alpha * second))
    frozen = np.ones(M, dtype=bool)
    frozen[active] = False
    if log_det is None:
        log_det = np.linalg.slogdet(Sigma)[1] if len(active) else 0.0
    entropy_w = 0.5 * M * (1.0 + LOG_2PI) + 0.5 * (log_det + np.sum(np.log(frozen_var[frozen])))
    return log_p_w + gamma_prior_and_entropy(alpha_shape, alpha_rate, a0, b0) + entropy_w


def inverse_and_mean(precision, linear):
    """(precision^-1, precision^-1 linear) by a Jacobi-scaled Cholesky factorisation."""
    if precision.shape[0] == 0:
        return np.zeros((0, 0)), np.zeros(0)
    d = 1.0 / np.sqrt(np.diag(precision))
    factor = scipy.linalg.cho_factor(precision * d[:, None] * d[None, :], lower=True)
    inv = scipy.linalg.cho_solve(factor, np.eye(len(d))) * d[:, None] * d[None, :]
    inv = 0.5 * (inv + inv.T)
    return inv, inv @ linear


def log_newton_step(x, g, H, free):
    """The Newton step in ln x (over the entries ``free``) of a function F of positive x with
    gradient ``g`` and Hessian ``H`` in x: in t = ln x the gradient is x g and the Hessian
    x H x + diag(x g); minus that Hessian, where it is not positive definite, is damped (+ c I, c
    doubling from 1e-12 of its largest diagonal entry) until it is. Returns the step, or None where
    no damping up to 2^38 times that makes it so."""
    grad = (x * g)[free]
    neg = -(x[:, None] * H * x[None, :] + np.diag(x * g))[np.ix_(free, free)]
    neg = 0.5 * (neg + neg.T)
    if not np.all(np.isfinite(neg)):
        return None
    try:  # positive definite as it is: no damping
        factor = scipy.linalg.cho_factor(neg, check_finite=False)
        return scipy.linalg.cho_solve(factor, grad, check_finite=False)
    except np.linalg.LinAlgError:
        pass
    base = 1e-12 * (float(np.max(np.abs(np.diag(neg)))) or 1.0)
    # the damping sequence base, 2 base, ... 2^38 base, entered where its terms first exceed
    # minus the lowest eigenvalue (the factorisation decides: rounding may need one more)
    lowest = float(np.linalg.eigvalsh(neg)[0])
    power = 1 if lowest > 0 else 1 + max(0, math.ceil(math.log2(max(-lowest / base, 1.0))))
    for attempt in range(power, 40):
        damping = base * 2.0 ** (attempt - 1)
        try:
            factor = scipy.linalg.cho_factor(neg + damping * np.eye(len(grad)), check_finite=False)
            return scipy.linalg.cho_solve(factor, grad, check_finite=False)
        except np.linalg.LinAlgError:
            continue
    return None
