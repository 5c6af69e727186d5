"""The compiled type-II fit's program (:mod:`.compiled`): its arrays (:class:`Data`, :class:`Fit`)
and its steps, each the host schedule's (:class:`.schedule.Schedule`, :class:`.workspace.Workspace`)
step of the same name, on buffers of a fixed capacity with the slots past K zero. :func:`steps`
runs them until the fit stops, a buffer needs room or the host asked for a pause, and returns the
fit and :func:`pack` of it."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .program import LOG_2PI

__all__ = ["Data", "Fit", "steps", "pack", "COUNTS", "KINDS", "RUNNING", "CONVERGED", "STOPPED", "GROW_ACTIVE",
           "GROW_TRACE", "BAIL"]

RUNNING, CONVERGED, STOPPED, GROW_ACTIVE, GROW_TRACE, BAIL = 0, 1, 2, 3, 4, 5
PRACTICAL, TOLERANCE, ROUNDING = 0, 1, 2
KINDS = ("add", "update", "delete", "noise", "joint")
ADD, UPDATE, DELETE, NOISE, JOINT = range(5)

_EPS = float(np.finfo(np.float64).eps)
_NOISE_HALVINGS = 6  # ``Workspace.reestimate_noise``'s max_halvings
_JOINT_HALVINGS = 6  # ``Workspace.joint_step``'s
_RADIUS = 1.0
_BISECTIONS = 30


class Data(NamedTuple):
    """The fit's arrays, padded with zeros (``columns`` marks the problem's own), and its settings
    (traced: a new value compiles no new program): ``DT`` the design transposed (M, N), a
    function's values over the samples a contiguous row; ``n`` the problem's own sample count;
    ``refresh_every`` 0: never; ``max_alignment`` inf: no pairwise guard."""

    DT: jax.Array
    y: jax.Array
    Dty: jax.Array
    sq: jax.Array
    n: jax.Array
    columns: jax.Array
    tol: jax.Array
    rounding: jax.Array
    practical: jax.Array
    update_noise: jax.Array
    noise_every: jax.Array
    max_steps: jax.Array
    refresh_every: jax.Array
    align_tol: jax.Array
    max_alignment: jax.Array
    log_noise_tol: jax.Array
    log_alpha_tol: jax.Array
    joint_max_active: jax.Array


class Fit(NamedTuple):
    """The workspace (``Workspace``'s buffers) and the schedule's counters (``Schedule``'s fields;
    NaN for None), with the trace entries and refresh drifts of this call."""

    A: jax.Array  # D_a (N, cap)
    B: jax.Array  # D^T D_a (M, cap)
    Sigma: jax.Array
    mu: jax.Array
    index: jax.Array
    K: jax.Array
    alpha: jax.Array
    S: jax.Array
    Q: jax.Array
    blocked: jax.Array
    noise: jax.Array
    L: jax.Array
    step: jax.Array
    until: jax.Array
    last_refresh: jax.Array
    interval: jax.Array
    drifting: jax.Array
    exact_L: jax.Array
    best_L: jax.Array
    checkpoint_L: jax.Array
    stalls: jax.Array
    quiet: jax.Array
    failed_at: jax.Array
    joint_after: jax.Array
    made: jax.Array  # the moves recorded so far in this run (``len(moves)`` less the start's)
    status: jax.Array
    reason: jax.Array
    trace: jax.Array
    kinds: jax.Array
    which: jax.Array
    length: jax.Array
    drift_at: jax.Array
    drift: jax.Array
    drift_n: jax.Array


# --------------------------------------------------------------------------------------------------
# the active block
def _valid(f):
    return jnp.arange(f.mu.shape[0]) < f.K


def _pair(valid):
    return valid[:, None] & valid[None, :]


def _alpha_a(f):
    """alpha of the active functions by slot, 1 past K."""
    return jnp.where(_valid(f), f.alpha[f.index], 1.0)


def _gram(f):
    """D_a^T D_a (cap, cap), zero outside the active block."""
    return jnp.where(_pair(_valid(f)), f.B[f.index], 0.0)


def _z(f, data):
    """D_a^T y by slot, 0 past K."""
    return jnp.where(_valid(f), data.Dty[f.index], 0.0)


def _likelihood(f, data, alpha_a, noise_var):
    """``algebra.likelihoods`` at one noise variance: (L, the Cholesky factor of H = A + D_a^T D_a /
    sigma^2 (the identity past K), ||y - D_a mu||^2), with L = log N(y | 0, C), C = sigma^2 I + D_a
    A^-1 D_a^T (Faul & Pilikos, section 2, whose equations carry no numbers), as
    -(N log 2 pi + N log sigma^2 - sum log alpha + log|H| + ||y - D_a mu||^2 / sigma^2 + mu^T A mu) / 2."""
    valid = _valid(f)
    beta = 1.0 / noise_var
    H = beta * _gram(f) + jnp.diag(jnp.where(valid, alpha_a, 1.0))
    chol = jnp.linalg.cholesky(H)
    mu = jax.scipy.linalg.cho_solve((chol, True), beta * _z(f, data))
    logdet = 2.0 * jnp.sum(jnp.log(jnp.diag(chol)))
    resid = data.y - f.A @ mu
    rr = resid @ resid
    yCy = beta * rr + jnp.sum(jnp.where(valid, mu * mu * alpha_a, 0.0))
    L = -0.5 * (data.n * LOG_2PI + data.n * jnp.log(noise_var) - jnp.sum(jnp.where(valid, jnp.log(alpha_a), 0.0))
                + logdet + yCy)
    return L, chol, rr


def _posterior(f, chol):
    """``algebra.posterior_from``: (F = chol^-1, Sigma = F^T F), zero outside the active block."""
    F = jnp.where(_pair(_valid(f)), jax.scipy.linalg.solve_triangular(chol, jnp.eye(chol.shape[0]), lower=True), 0.0)
    return F, F.T @ F


def _set_noise(f, data, noise_var, F, Sigma, L):
    """``Workspace._set_noise``: Sigma, mu = beta Sigma D_a^T y, S and Q from F
    (``algebra.statistics_from_factor`` with R = B F^T) at the noise variance, and L."""
    beta = 1.0 / noise_var
    z = _z(f, data)
    R = f.B @ F.T
    S = beta * data.sq - beta**2 * jnp.sum(R * R, axis=1)
    Q = beta * data.Dty - beta**2 * (R @ (F @ z))
    return f._replace(noise=noise_var, L=L, Sigma=Sigma, mu=beta * (Sigma @ z), S=S, Q=Q)


def _logdet_rounding(f):
    """``algebra.logdet_rounding``: eps / sigma^2 sum |Sigma| |D_a^T D_a| over the active block."""
    return _EPS / f.noise * jnp.sum(jnp.where(_pair(_valid(f)), jnp.abs(f.Sigma) * jnp.abs(_gram(f)), 0.0))


def _record(f, value, kind, m):
    """A trace entry: L after a move of ``kind`` (of function ``m``, -1 for none)."""
    i = f.length
    return f._replace(L=value, trace=f.trace.at[i].set(value), kinds=f.kinds.at[i].set(kind),
                      which=f.which.at[i].set(jnp.asarray(m).astype(f.which.dtype)), length=i + 1, made=f.made + 1)


def _scale(f):
    return jnp.maximum(1.0, jnp.abs(f.L))


# --------------------------------------------------------------------------------------------------
# the gains (``gains.move_gains`` and the guards of ``Workspace.gains``): l(alpha_m) and the best
# alpha_m = s_m^2 / (q_m^2 - s_m) of Tipping & Faul 2003 (summarised, unnumbered, in section 2 of
# Faul & Pilikos)
def _gains(f, data):
    """(gain, new alpha, whether a gain is NaN) of every function (``Workspace.gains``)."""
    valid = _valid(f)
    S, Q = f.S, f.Q
    Q2 = Q * Q
    theta = Q2 - S
    useful = theta > 0
    ratio = Q2 / S
    gain = jnp.where(useful, 0.5 * (ratio - 1.0 - jnp.log(ratio)), -jnp.inf)
    new = jnp.where(useful, S * S / jnp.where(useful, theta, 1.0), jnp.inf)
    al = _alpha_a(f)
    Sa, Qa = S[f.index], Q[f.index]
    sd = jnp.where(valid, jnp.diag(f.Sigma), 1.0)
    denom = al - Sa
    s = al * Sa / denom
    q = al * Qa / denom
    posterior = 2.0 * al * sd < 1.0
    s = jnp.where(posterior, 1.0 / sd - al, s)
    q = jnp.where(posterior, f.mu / sd, q)
    th = q * q - s
    keep = th > 0
    new_a = jnp.where(keep, s * s / jnp.where(keep, th, 1.0), jnp.inf)
    step = new_a - al
    update = 0.5 * (jnp.log1p(step / al) - jnp.log1p(step / (al + s)) - q * q * step / ((new_a + s) * (al + s)))
    delete = 0.5 * (jnp.log1p(s / al) - q * q / (al + s))
    slot = jnp.where(valid, f.index, f.alpha.shape[0])
    gain = gain.at[slot].set(jnp.where(keep, update, delete), mode="drop")
    new = new.at[slot].set(new_a, mode="drop")
    out = ~jnp.isfinite(f.alpha)
    aligned = out & (data.align_tol > 0) & (S < data.align_tol / f.noise * data.sq)
    gain = jnp.where(aligned | ((f.blocked > 0) & out) | ~data.columns, -jnp.inf, gain)
    return gain, new, jnp.any(jnp.isnan(gain) & data.columns)


def _significant(f, data, gain, new):
    """``schedule.significant`` under the practical rule; the gains as they are otherwise."""
    valid = _valid(f)
    old, target = _alpha_a(f), new[f.index]
    small = valid & jnp.isfinite(target) & (jnp.abs(jnp.log(target / old)) < data.log_alpha_tol)
    slot = jnp.where(small & data.practical, f.index, f.alpha.shape[0])
    return gain.at[slot].set(-jnp.inf, mode="drop")


def _schedule_gains(f, data):
    gain, new, _ = _gains(f, data)
    return _significant(f, data, gain, new)


# --------------------------------------------------------------------------------------------------
# the three moves (``Workspace.add``, ``update``, ``delete``): the rank-one updates of Sigma, mu, S
# and Q in the appendix of Tipping & Faul 2003 (and of Faul & Pilikos, with 1/sigma^2 for its
# misprinted 1/sigma*^2)
def _aligned_with(f, data, i, g):
    """The functions whose |cosine| with function i (``g`` = D^T d_i) exceeds max_alignment."""
    cosine = jnp.abs(g) / jnp.sqrt(data.sq[i] * data.sq)
    return (cosine > data.max_alignment) & (jnp.arange(g.shape[0]) != i)


def _add(f, data, i, alpha_i):
    K = f.K
    valid = _valid(f)
    beta = 1.0 / f.noise
    phi = data.DT[i]
    g = data.DT @ phi
    s_ii = 1.0 / (alpha_i + f.S[i])
    mu_i = s_ii * f.Q[i]
    ga = jnp.where(valid, g[f.index], 0.0)
    Sg = f.Sigma @ ga
    w = beta * Sg
    e = beta * g - beta * (beta * (f.B @ Sg))
    Sigma = f.Sigma + jnp.outer(s_ii * w, w)
    Sigma = Sigma.at[:, K].set(-s_ii * w).at[K, :].set(-s_ii * w).at[K, K].set(s_ii)
    mu = (f.mu - mu_i * w).at[K].set(mu_i)
    blocked = f.blocked + _aligned_with(f, data, i, g).astype(f.blocked.dtype)
    return f._replace(Sigma=Sigma, mu=mu, S=f.S - s_ii * e**2, Q=f.Q - mu_i * e, K=K + 1,
                      index=f.index.at[K].set(i.astype(f.index.dtype)), alpha=f.alpha.at[i].set(alpha_i),
                      A=f.A.at[:, K].set(phi), B=f.B.at[:, K].set(g), blocked=blocked)


def _slot_of(f, m):
    return jnp.argmax((f.index == m) & _valid(f))


def _update(f, data, m, alpha_new):
    j = _slot_of(f, m)
    beta = 1.0 / f.noise
    col = f.Sigma[:, j]
    kappa = 1.0 / (col[j] + 1.0 / (alpha_new - f.alpha[m]))
    mu_j = f.mu[j]
    u = beta * (f.B @ col)
    return f._replace(Sigma=f.Sigma + jnp.outer(-kappa * col, col), mu=f.mu - kappa * mu_j * col,
                      S=f.S + kappa * u**2, Q=f.Q + kappa * mu_j * u, alpha=f.alpha.at[m].set(alpha_new))


def _delete(f, data, m, _):
    j = _slot_of(f, m)
    beta = 1.0 / f.noise
    blocked = f.blocked - _aligned_with(f, data, m, f.B[:, j]).astype(f.blocked.dtype)
    col = f.Sigma[:, j]
    s_jj = col[j]
    mu_j = f.mu[j]
    u = beta * (f.B @ col)
    Sigma = f.Sigma + jnp.outer((-1.0 / s_jj) * col, col)
    mu = f.mu - mu_j / s_jj * col
    # the last active function takes the deleted one's place; its old slot is cleared
    last = f.K - 1
    Sigma = Sigma.at[j, :].set(Sigma[last, :])
    Sigma = Sigma.at[:, j].set(Sigma[:, last])
    Sigma = Sigma.at[j, j].set(Sigma[last, last])
    Sigma = Sigma.at[last, :].set(0.0).at[:, last].set(0.0)
    mu = mu.at[j].set(mu[last]).at[last].set(0.0)
    return f._replace(Sigma=Sigma, mu=mu, S=f.S + u**2 / s_jj, Q=f.Q + mu_j / s_jj * u, K=last,
                      index=f.index.at[j].set(f.index[last]).at[last].set(0),
                      A=f.A.at[:, j].set(f.A[:, last]).at[:, last].set(0.0),
                      B=f.B.at[:, j].set(f.B[:, last]).at[:, last].set(0.0),
                      alpha=f.alpha.at[m].set(jnp.inf), blocked=blocked)


# --------------------------------------------------------------------------------------------------
# the noise variance (``Workspace.reestimate_noise``, ``Schedule.noise_move``): Tipping & Faul 2003's
# re-estimate sigma^2 = ||y - D_a mu||^2 / (N - K + sum_k alpha_k Sigma_kk), kept where L does not fall
def _accept_noise(f, data, value, chol, L_value, ref):
    return _set_noise(f, data, value, *_posterior(f, chol), f.L + (L_value - ref))


def _reestimate_noise(f, data, min_log_change):
    """Returns (made, fit)."""
    valid = _valid(f)
    old = f.noise
    alpha_a = _alpha_a(f)
    dof = jnp.where(f.K > 0, data.n - f.K + jnp.sum(jnp.where(valid, alpha_a * jnp.diag(f.Sigma), 0.0)), data.n)
    resid = data.y - f.A @ f.mu
    guess = (resid @ resid) / jnp.maximum(dof, 1e-12)
    small = (min_log_change > 0) & (guess > 0) & (jnp.abs(jnp.log(guess / old)) < min_log_change)

    def attempt(f):
        two = jnp.isfinite(guess) & (guess > 0)
        ref, chol_old, rr = _likelihood(f, data, alpha_a, old)
        L_g, chol_g, _ = lax.cond(two, lambda v: _likelihood(f, data, alpha_a, v),
                                  lambda v: (jnp.asarray(-jnp.inf), chol_old, rr), jnp.where(two, guess, old))
        proposal = rr / jnp.maximum(dof, 1e-12)
        bad = ~jnp.isfinite(proposal) | (proposal <= 0)
        guessed = two & (jnp.abs(guess - proposal) <= 1e-9 * jnp.abs(proposal - old))
        proposal = jnp.where(guessed, guess, proposal)
        gain = 0.5 * dof * ((proposal - old) / old) ** 2
        tiny = (gain <= 1e-13 * _scale(f)) | (gain <= _logdet_rounding(f))
        fast = guessed & (L_g >= ref)
        values = old + 0.5 ** jnp.arange(_NOISE_HALVINGS) * (proposal - old)

        def cond(c):
            i, found = c[0], c[1]
            return (i < _NOISE_HALVINGS) & ~found

        def body(c):
            i = c[0]
            L_i, chol_i, _ = _likelihood(f, data, alpha_a, values[i])
            return i + 1, L_i >= ref, L_i, chol_i, values[i]

        def search(_):
            start = (jnp.where(guessed, 1, 0), jnp.asarray(False), jnp.asarray(-jnp.inf), chol_old, old)
            return lax.while_loop(cond, body, start)[1:]

        go = ~bad & ~tiny
        found, L_v, chol_v, value = lax.cond(go & ~fast, search, lambda _: (fast, L_g, chol_g, proposal), None)
        made = go & found
        return made, lax.cond(made, lambda f: _accept_noise(f, data, value, chol_v, L_v, ref), lambda f: f, f)

    return lax.cond(small, lambda f: (jnp.asarray(False), f), attempt, f)


def _noise_move(f, data):
    """``Schedule.noise_move``: returns (fit, the rise of L)."""
    skip = jnp.isfinite(f.failed_at) & (f.L - f.failed_at <= data.rounding * _scale(f))
    before = f.L
    min_log_change = jnp.where(data.practical, data.log_noise_tol, 0.0)
    made, new = lax.cond(skip, lambda f: (jnp.asarray(False), f),
                         lambda f: _reestimate_noise(f, data, min_log_change), f)
    made_fit = _record(new._replace(failed_at=jnp.asarray(jnp.nan)), new.L, NOISE, -1)
    new = lax.cond(made, lambda _: made_fit, lambda _: new._replace(
        failed_at=jnp.where(skip, new.failed_at, before)), None)
    return new, jnp.where(made, new.L - before, 0.0)


# --------------------------------------------------------------------------------------------------
# the joint Newton step (``Workspace.joint_derivatives``, ``joint_step``; ``Schedule.joint_move``)
# on L of Faul & Pilikos section 2 in (ln alpha, ln beta); the derivatives are written out in
# ``Workspace.joint_derivatives``
def _joint_derivatives(f, data):
    """(g, H) in (ln alpha by slot, ln beta) (cap + 1), zero past K."""
    valid = _valid(f)
    K = f.K
    alpha = jnp.where(valid, _alpha_a(f), 0.0)
    Sigma, mu = f.Sigma, jnp.where(valid, f.mu, 0.0)
    d = jnp.diag(Sigma)
    beta = 1.0 / f.noise
    g = jnp.where(valid, 0.5 * (1.0 - alpha * d - alpha * mu * mu), 0.0)
    H = 0.5 * (jnp.outer(alpha, alpha) * (Sigma * Sigma + 2.0 * jnp.outer(mu, mu) * Sigma)
               - jnp.diag(alpha * (d + mu * mu)))
    e = data.y - f.A @ mu
    ee = e @ e
    am = alpha * mu
    S_am = Sigma @ am
    rest = d - jnp.einsum("ij,j,ji->i", Sigma, alpha, Sigma)
    g_beta = 0.5 * (data.n - K + alpha @ d - beta * ee)
    cross = 0.5 * alpha * rest - alpha * mu * S_am
    H_beta = 0.5 * (-(alpha @ rest) - beta * ee) + am @ S_am
    g = jnp.append(g, g_beta)
    H = jnp.block([[H, cross[:, None]], [cross[None, :], H_beta[None, None]]])
    return g, H


def _joint_step(f, data, free, min_gain):
    """``Workspace.joint_step`` over the slots ``free`` and, with ``update_noise``, ln beta.
    Returns (made, fit)."""
    cap = f.mu.shape[0]
    noise = data.update_noise
    free = jnp.append(free & _valid(f), noise)
    g, H = _joint_derivatives(f, data)
    pair = _pair(free)
    neg = jnp.where(pair, -H, 0.0)
    finite = jnp.all(jnp.isfinite(neg)) & jnp.all(jnp.isfinite(jnp.where(jnp.append(_valid(f), noise), g, 0.0)))
    neg = jnp.where(finite, neg, 0.0) + jnp.diag(jnp.where(free, 0.0, 1.0))
    gf = jnp.where(free & finite, g, 0.0)
    w, V = jnp.linalg.eigh(0.5 * (neg + neg.T))
    c = V.T @ gf
    own = jnp.sum(jnp.where(free[:, None], V * V, 0.0), axis=0) > 0.5  # the eigenvalues of the free block
    lowest = jnp.min(jnp.where(own, w, jnp.inf))
    highest = jnp.max(jnp.where(own, w, -jnp.inf))

    def step_at(damping):
        return jnp.where(free, V @ (c / (w + damping)), 0.0)

    def too_long(damping):
        return jnp.max(jnp.abs(step_at(damping))) > _RADIUS

    low = jnp.maximum(0.0, -lowest) * 1.01 + 1e-10 * jnp.maximum(jnp.abs(highest), 1.0)
    damping = lax.while_loop(too_long, lambda dmp: 2.0 * dmp + 1e-12, low)

    def bisect(_, c):
        lo, hi = c
        mid = 0.5 * (lo + hi)
        longer = too_long(mid)
        return jnp.where(longer, mid, lo), jnp.where(longer, hi, mid)

    damping = lax.cond(damping > low, lambda d: lax.fori_loop(0, _BISECTIONS, bisect, (low, d))[1],
                       lambda d: d, damping)
    step = step_at(damping)
    min_gain = jnp.maximum(min_gain, 2.0 * _logdet_rounding(f))
    alpha_a = _alpha_a(f)
    old_noise = f.noise
    ref = _likelihood(f, data, alpha_a, old_noise)[0]

    def trial(h):
        t = step * 0.5**h
        alpha_new = alpha_a * jnp.exp(t[:cap])
        noise_var = jnp.where(noise, old_noise * jnp.exp(-t[cap]), old_noise)
        L, chol, _ = _likelihood(f, data, alpha_new, noise_var)
        return L, chol, alpha_new, noise_var

    def cond(c):
        return (c[0] < _JOINT_HALVINGS) & ~c[1]

    def body(c):
        h = c[0]
        L, chol, alpha_new, noise_var = trial(h.astype(jnp.float64))
        return h + 1, L - ref > min_gain, L, chol, alpha_new, noise_var

    start = (jnp.where(finite, 0, _JOINT_HALVINGS), jnp.asarray(False), jnp.asarray(-jnp.inf),
             jnp.eye(cap), alpha_a, old_noise)
    _, made, L, chol, alpha_new, noise_var = lax.while_loop(cond, body, start)

    def apply(f):
        slot = jnp.where(_valid(f), f.index, f.alpha.shape[0])
        f = f._replace(alpha=f.alpha.at[slot].set(alpha_new, mode="drop"))
        return _set_noise(f, data, noise_var, *_posterior(f, chol), f.L + (L - ref))

    return made, lax.cond(made, apply, lambda f: f, f)


def _joint_move(f, data, gain, new, best):
    """``Schedule.joint_move``: returns (made, fit)."""
    significant = gain > data.rounding * _scale(f)
    structural = ~jnp.isfinite(f.alpha) | ~jnp.isfinite(new)
    tried = (f.K <= data.joint_max_active) & (f.step >= f.joint_after) & ~jnp.any(significant & structural)
    free = jnp.isfinite(new[f.index])
    made, f = lax.cond(tried, lambda f: _joint_step(f, data, free, best), lambda f: (jnp.asarray(False), f), f)
    f = f._replace(joint_after=jnp.where(tried & ~made, f.step + f.K, f.joint_after))
    f = lax.cond(made, lambda f: _record(f, f.L, JOINT, -1), lambda f: f, f)
    return made, f


# --------------------------------------------------------------------------------------------------
# the exact refreshes (``Workspace.refresh``; ``Schedule.refresh``, ``after_refresh``, ``refresh_at``)
def _stuck(f):
    return (f.quiet >= 3) | (f.stalls >= 8)


def _refresh_at(f, data):
    """An exact refresh at this step; where the host schedule would go back to an earlier state, the
    status ``BAIL``."""
    moves = f.step - f.last_refresh
    claimed = f.L
    L, chol, _ = _likelihood(f, data, _alpha_a(f), f.noise)
    f = _set_noise(f, data, f.noise, *_posterior(f, chol), L)
    drift = claimed - L
    f = f._replace(drift_at=f.drift_at.at[f.drift_n].set(f.made), drift=f.drift.at[f.drift_n].set(drift),
                   drift_n=f.drift_n + 1)
    drifting = jnp.abs(drift) > 1e-9 * _scale(f)
    interval = jnp.where(drifting, jnp.maximum(16, f.interval // 4), jnp.minimum(data.refresh_every, 2 * f.interval))
    scale = moves * _scale(f)
    has_exact = jnp.isfinite(f.exact_L)
    stalled = has_exact & (moves > 0) & (f.L - f.best_L < data.tol * scale)
    quiet = stalled & (claimed - f.exact_L < data.rounding * scale)
    f = f._replace(drifting=drifting, interval=interval, stalls=jnp.where(stalled, f.stalls + 1, 0),
                   quiet=jnp.where(quiet, f.quiet + 1, 0), exact_L=f.L,
                   best_L=jnp.where(jnp.isfinite(f.best_L), jnp.maximum(f.best_L, f.L), f.L))
    cL = f.checkpoint_L
    has = jnp.isfinite(cL)
    fell = has & (f.L < cL - 1e-9 * jnp.maximum(1.0, jnp.abs(cL)) - 2.0 * _logdet_rounding(f))
    keep = ~has | (f.L >= cL)
    return f._replace(status=jnp.where(fell, BAIL, f.status), checkpoint_L=jnp.where(keep & ~fell, f.L, cL),
                      last_refresh=f.step)


def _corrupted(f, data):
    cap = data.sq / f.noise
    return ~(jnp.all(jnp.isfinite(f.S)) & jnp.all(jnp.isfinite(f.Q))
             & jnp.all(f.S >= -jnp.maximum(data.align_tol, 1e-9) * cap) & jnp.all(f.S <= (1.0 + 1e-9) * cap))


def _refresh_due(f, data):
    span = f.step - f.last_refresh
    return (data.refresh_every > 0) & (span > 0) & (
        (span >= jnp.where(f.drifting, f.interval, jnp.maximum(f.interval, f.K.astype(f.interval.dtype))))
        | _corrupted(f, data))


# --------------------------------------------------------------------------------------------------
# a step (``Schedule.run``'s loop body)
def _finish(f, data):
    """No move gains: ``Schedule.run``'s checks before it declares convergence."""
    before = f.noise
    f, raised = lax.cond(data.update_noise, lambda f: _noise_move(f, data), lambda f: (f, jnp.asarray(0.0)), f)
    go_on = data.update_noise & jnp.where(data.practical, jnp.abs(jnp.log(f.noise / before)) >= data.log_noise_tol,
                                          raised > data.tol * _scale(f))
    can_refresh = (data.refresh_every > 0) & (f.step > f.last_refresh)

    def check(f):
        f = _refresh_at(f, data)
        gain = _schedule_gains(f, data)
        return f, (jnp.max(gain) > data.tol * _scale(f)) & ~_stuck(f)

    f, again = lax.cond(~go_on & can_refresh, check, lambda f: (f, jnp.asarray(False)), f)
    done = ~go_on & ~again & (f.status == RUNNING)
    reason = jnp.where(_stuck(f), ROUNDING, jnp.where(data.practical, PRACTICAL, TOLERANCE))
    return f._replace(status=jnp.where(done, CONVERGED, f.status), reason=jnp.where(done, reason, f.reason))


def _make_move(f, data, m, alpha_new, gain):
    """``Schedule.make_move``."""
    kind = jnp.where(~jnp.isfinite(f.alpha[m]), ADD, jnp.where(jnp.isfinite(alpha_new), UPDATE, DELETE))
    f = lax.switch(kind, (_add, _update, _delete), f, data, m, alpha_new)
    f = _record(f, f.L + gain, kind, m)
    due = data.update_noise & ((f.step + 1) % data.noise_every == 0)
    return lax.cond(due, lambda f: _noise_move(f, data)[0], lambda f: f, f)


def _move(f, data, gain, new, m, best):
    reestimate = jnp.isfinite(f.alpha[m]) & jnp.isfinite(new[m])
    made, f = lax.cond(reestimate, lambda f: _joint_move(f, data, gain, new, best),
                       lambda f: (jnp.asarray(False), f), f)
    return lax.cond(made, lambda f: f, lambda f: _make_move(f, data, m, new[m], best), f)


def _step(f, data):
    room = (f.length + 4 <= f.trace.shape[0]) & (f.drift_n + 3 <= f.drift.shape[0])
    f = f._replace(status=jnp.where(room, f.status, GROW_TRACE))
    go = room
    due = go & _refresh_due(f, data)
    f = lax.cond(due, lambda f: _refresh_at(f, data), lambda f: f, f)
    go = go & (f.status == RUNNING)
    rounding = go & due & _stuck(f)
    f = f._replace(status=jnp.where(rounding, CONVERGED, f.status), reason=jnp.where(rounding, ROUNDING, f.reason))
    go = go & ~rounding
    gain, new, nan = _gains(f, data)
    f = f._replace(status=jnp.where(go & nan, BAIL, f.status))
    go = go & ~nan
    gain = _significant(f, data, gain, new)
    m = jnp.argmax(gain)
    best = gain[m]
    small = ~(best > data.tol * _scale(f))
    full = go & ~small & ~jnp.isfinite(f.alpha[m]) & (f.K >= f.mu.shape[0])
    f = f._replace(status=jnp.where(full, GROW_ACTIVE, f.status))
    go = go & ~full
    f = lax.cond(go & small, lambda f: _finish(f, data), lambda f: f, f)
    f = lax.cond(go & ~small, lambda f: _move(f, data, gain, new, m, best), lambda f: f, f)
    step = f.step + go
    stopped = (f.status == RUNNING) & (step >= data.max_steps)
    return f._replace(step=step, status=jnp.where(stopped, STOPPED, f.status))


def steps(f, data):
    """Steps until the fit stops, a buffer needs room, or step ``f.until``. Returns the fit and
    :func:`_pack` of it."""
    f = f._replace(status=jnp.where((f.status == GROW_ACTIVE) | (f.status == GROW_TRACE), RUNNING, f.status))
    f = lax.while_loop(lambda f: (f.status == RUNNING) & (f.step < f.until), lambda f: _step(f, data), f)
    f = f._replace(status=f.status.astype(jnp.int64), reason=f.reason.astype(jnp.int64))
    return f, pack(f)


COUNTS = ("status", "reason", "step", "K", "length", "drift_n")


def pack(f):
    """What the host reads of a fit, in two arrays (one transfer each): the counts
    (:data:`COUNTS`), the slots' functions, the trace's kinds and functions and the drifts'
    move counts (int64); sigma^2, L, alpha, mu, Sigma, S, Q, the trace and the drifts (float64)."""
    counts = jnp.stack([getattr(f, name).astype(jnp.int64) for name in COUNTS])
    ints = jnp.concatenate([counts, f.index.astype(jnp.int64), f.kinds.astype(jnp.int64),
                            f.which.astype(jnp.int64), f.drift_at.astype(jnp.int64)])
    floats = jnp.concatenate([jnp.stack([f.noise, f.L]), f.alpha, f.mu, f.Sigma.ravel(), f.S, f.Q, f.trace, f.drift])
    return ints, floats
