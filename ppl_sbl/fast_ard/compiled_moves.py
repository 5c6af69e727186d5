"""The moves of the compiled fast schedule (:mod:`ppl_sbl.fast_ard.compiled`): the best move,
a re-estimate, an add and the joint Newton step of the polish, each on the program's state and
buffers (:mod:`ppl_sbl.fast_ard.compiled_state`), each the host schedule's
(:class:`ppl_sbl.fast_ard.schedule._Schedule`) move of the same name."""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from . import compiled_state as CS
from . import jax_algebra as J
from .compiled_state import (COLLINEAR, LOG_ALPHA_TOL, MAX_ALIGNMENT, MAX_SPREAD, active_spread, block, choose,
                             column, gather, leave_one_out, padded, project, slot_index, slots, statistics)
from .passes import ADD, REESTIMATE

__all__ = ["best_move", "reestimate", "add", "newton_polish"]

_LINE_SEARCH = 30  # halvings of the joint Newton step
_DAMPINGS = 40


# --------------------------------------------------------------------------------------------------
def best_move(st, data, floor, settle, axis_name=None):
    """(found, kind, k, target, gain, settling slots, (x, s, q, the maximiser of (1)) of the active
    coefficients by slot): ``_Schedule.best_move``. ``axis_name``: that of fits vmapped side by side
    (:func:`ppl_sbl.fast_ard.jax_algebra.warm_optimum`)."""
    cap = st.mu.shape[0]
    valid = slots(st)
    s, q = leave_one_out(st)
    resolved = (st.h > 0) & (s >= COLLINEAR * st.h) & ~st.held
    entering = data.exact | (~st.blocked & (jnp.abs(q) > jnp.sqrt(jnp.maximum(s, 0.0))))
    supported = ~st.active & resolved & entering
    moving = valid & resolved[st.index]
    root = jnp.sqrt(jnp.where(supported, s, 1.0))
    gap = (jnp.where(supported, q, 0.0) - root) * (jnp.where(supported, q, 0.0) + root)
    guess = jnp.where(st.active, st.x, jnp.where(gap > 0, s * s / jnp.where(gap > 0, gap, 1.0), st.x))
    rows = supported | jnp.zeros_like(supported).at[slot_index(st)].set(moving, mode="drop")
    x_in, value_in = J.warm_optimum(s, q, data.a0, data.b0, guess, rows, axis_name)
    # the active candidates, by slot
    xa, sa, qa, ha = (gather(v, st, 1.0) for v in (st.x, s, q, st.h))
    xa_in = gather(x_in, st, 1.0)
    gain_a = J.in_model_change(xa, xa_in, sa, qa, data.a0, data.b0)
    small = jnp.abs(jnp.log(xa_in / xa)) < LOG_ALPHA_TOL
    spread = active_spread(st)
    diag = jnp.diag(st.Sigma)
    own_a = (ha + xa_in) / (xa_in + sa) - (ha + xa) * diag
    wide_a = spread + own_a > jnp.maximum(MAX_SPREAD, spread)
    moved = sa / (xa + sa) * jnp.abs(xa_in - xa) / jnp.maximum(xa_in, xa)
    settling = moving & (moved >= settle) & (gain_a > 0) & ~wide_a
    gain_a = jnp.where(moving & ~small & ~wide_a, gain_a, -jnp.inf)
    # the frozen candidates, by coefficient
    own_f = (st.h + x_in) / (x_in + s)
    wide_f = spread + own_f > jnp.maximum(MAX_SPREAD, spread)
    gain_f = value_in - J.frozen_value(st.x, st.h, data.a0, data.b0)
    gain_f = jnp.where(supported & ~wide_f, gain_f, -jnp.inf)
    gains = jnp.concatenate([gain_a, gain_f])
    gains = jnp.where(jnp.isnan(gains), -jnp.inf, gains)
    j = jnp.argmax(gains)
    gain = gains[j]
    found = gain > floor
    is_add = j >= cap
    k = jnp.where(is_add, j - cap, st.index[jnp.minimum(j, cap - 1)])
    target = jnp.where(is_add, x_in[jnp.maximum(j - cap, 0)], xa_in[jnp.minimum(j, cap - 1)])
    return found, jnp.where(is_add, ADD, REESTIMATE), k, target, gain, settling & ~found, (xa, sa, qa, xa_in)


def reestimate(st, buf, k, x_new, j):
    """E[alpha_k] of active k (slot j) to x_new: ``_Schedule.reestimate``. Returns (made, state)."""
    valid = slots(st)
    delta = x_new - st.x[k]
    col = st.Sigma[:, j]
    denom = 1.0 + delta * col[j]
    ok = (denom > 0) & (col[j] > 0) & jnp.isfinite(x_new)
    kappa = delta / denom
    weight = jnp.where(valid, gather(st.h + st.x, st), 0.0)
    spread = weight @ jnp.diag(st.Sigma)
    after = spread - kappa * (weight @ (col * col)) + delta * col[j] / denom
    ok = ok & ~((after > MAX_SPREAD) & (after > spread))

    def apply(st):
        mu_j = st.mu[j]
        e = st.g * (buf.C @ col)
        return st._replace(Sigma=st.Sigma - kappa * jnp.outer(col, col), mu=st.mu - kappa * mu_j * col,
                           S=st.S + kappa * e * e, Q=st.Q + kappa * mu_j * e, x=st.x.at[k].set(x_new))

    return ok, choose(ok, apply(st), st)


def add(st, buf, data, k, x_new, kind):
    """Coefficient k joins the model with E[alpha_k] = x_new: ``_Schedule.add``. Returns (made,
    state, its column of C): the caller writes phi_k and that column into the buffers' slot K."""
    K = st.K
    valid = slots(st)
    z = st.Sigma @ (st.g * buf.C[k])
    sigma_kk = 1.0 / (x_new + st.S[k])
    ok = (sigma_kk > 0) & jnp.isfinite(sigma_kk)
    weight = jnp.where(valid, gather(st.h + st.x, st), 0.0)
    spread = weight @ jnp.diag(st.Sigma)
    after = spread + sigma_kk * (weight @ (z * z)) + (st.h[k] + x_new) * sigma_kk
    ok = ok & ~((after > MAX_SPREAD) & (after > spread))

    def apply(st):
        phi = column(data, k, kind)
        c = project(data, phi, kind)
        blocked = st.blocked | (jnp.abs(c) > MAX_ALIGNMENT * jnp.sqrt(data.col_sq[k] * data.col_sq))
        if not CS.uniform(kind):
            c = project(data, st.W * phi, kind)  # B's column: Phi^T diag(W) phi_k
        mu_k = sigma_kk * st.Q[k]
        e = st.g * (c - buf.C @ z)
        Sigma = st.Sigma + sigma_kk * jnp.outer(z, z)
        Sigma = Sigma.at[:, K].set(-sigma_kk * z).at[K, :].set(-sigma_kk * z).at[K, K].set(sigma_kk)
        mu = (st.mu - mu_k * z).at[K].set(mu_k)
        return st._replace(Sigma=Sigma, mu=mu, S=st.S - sigma_kk * e * e, Q=st.Q - mu_k * e,
                           index=st.index.at[K].set(k.astype(jnp.int32)), K=K + 1, x=st.x.at[k].set(x_new),
                           active=st.active.at[k].set(True), blocked=blocked), c

    new, c = lax.cond(ok, apply, lambda st: (st, jnp.zeros_like(st.S)), st)
    return ok, new, c


def _joint_value(st, buf, x_active):
    """(F, Sigma, ok) of ``_Schedule.joint_value`` at the active precisions ``x_active`` (cap,)."""
    valid = slots(st)
    P = padded(block(st, buf) + jnp.diag(x_active), valid)
    L, d = J.scaled_cholesky(P)
    ok = jnp.all(jnp.isfinite(L))
    Lsafe = jnp.where(ok, L, jnp.eye(L.shape[0]))
    Sigma = jnp.where(valid[:, None] & valid[None, :], J.inverse_from_cholesky(Lsafe, d), 0.0)
    ba = gather(st.b, st)
    mu = Sigma @ ba
    log_det = 2.0 * jnp.sum(jnp.log(jnp.diag(Lsafe))) - 2.0 * jnp.sum(jnp.where(valid, jnp.log(d), 0.0))
    return 0.5 * ba @ mu - 0.5 * log_det, Sigma, ok


def _log_newton_step(x, g, H, free):
    """``algebra.log_newton_step`` on the ``free`` slots (the others' entries of the step are 0).
    Returns (step, ok)."""
    grad = jnp.where(free, x * g, 0.0)
    neg = -(x[:, None] * H * x[None, :] + jnp.diag(x * g))
    neg = 0.5 * (neg + neg.T)
    neg = padded(neg, free)
    finite = jnp.all(jnp.isfinite(neg))
    neg = jnp.where(finite, neg, jnp.eye(neg.shape[0]))
    top = jnp.max(jnp.where(free, jnp.abs(jnp.diag(neg)), 0.0))
    base = 1e-12 * jnp.where(top > 0, top, 1.0)
    eye = jnp.diag(jnp.where(free, 1.0, 0.0))

    def attempt(n):
        damping = jnp.where(n == 0, 0.0, base * 2.0 ** (n - 1))
        return J.cholesky(neg + damping * eye)

    def damped_start(_):  # not positive definite as it is: the damping past minus the lowest eigenvalue
        lowest = J.eigvalsh(neg)[0]
        return jnp.where(lowest > 0, 1, 1 + jnp.maximum(0, jnp.ceil(jnp.log2(jnp.maximum(-lowest / base, 1.0)))))

    undamped = attempt(0)
    plain = jnp.all(jnp.isfinite(undamped))
    power = lax.cond(plain, lambda _: jnp.zeros((), jnp.float64), damped_start, None)

    def cond(carry):
        n, L = carry
        return (n < _DAMPINGS) & ~jnp.all(jnp.isfinite(L))

    def body(carry):
        n, _ = carry
        return n + 1, attempt(n + 1)

    n0 = power.astype(jnp.int32)
    n, L = lax.while_loop(cond, body, (n0, lax.cond(plain, lambda _: undamped, lambda _: attempt(n0), None)))
    ok = finite & (n < _DAMPINGS) & jnp.all(jnp.isfinite(L))
    L = jnp.where(ok, L, jnp.eye(L.shape[0]))
    step = J.cho_solve(L, grad)
    return jnp.where(free, step, 0.0), ok


def newton_polish(st, buf, data, settle):
    """One Newton step on F in ln x over the free active precisions: ``_Schedule.newton_polish``.
    Returns (made, gain, state)."""
    valid = slots(st)
    s, _ = leave_one_out(st)
    xa = gather(st.x, st, 1.0)
    sa, ha = gather(s, st), gather(st.h, st)
    free = valid & (sa >= COLLINEAR * ha) & ~gather(st.held, st, False)
    shape = data.a0 + 0.5
    diag = jnp.diag(st.Sigma)
    g = shape / xa - data.b0 - 0.5 * (st.mu * st.mu + diag)
    H = jnp.outer(st.mu, st.mu) * st.Sigma + 0.5 * st.Sigma * st.Sigma - jnp.diag(shape / (xa * xa))
    step, step_ok = _log_newton_step(xa, g, H, free)
    weight = jnp.where(free, sa / (xa + sa), 0.0)

    # F at the current precisions (n = 0), then along the step halved until F rises (n >= 1):
    # outcome 0 searching, 1 found, 2 none
    def cond(carry):
        return (carry[0] <= _LINE_SEARCH) & (carry[2] == 0)

    def body(carry):
        n, t, _, start, _, _, _ = carry
        point = jnp.where(free & (n > 0), xa * jnp.exp(t * step), xa)
        finite = jnp.all(jnp.isfinite(point) & (point > 0))
        safe = jnp.where(finite, point, xa)
        moved = jnp.max(weight * jnp.abs(safe - xa) / jnp.maximum(safe, xa))
        value, Sigma, ok = _joint_value(st, buf, safe)
        value = value + jnp.sum(jnp.where(valid, shape * jnp.log(safe) - data.b0 * safe, 0.0))
        wide = (ha + safe) @ jnp.where(valid, jnp.diag(Sigma), 0.0) > MAX_SPREAD
        outcome = jnp.where(~finite, 0, jnp.where(~(moved >= settle), 2, jnp.where(
            ok & wide, 2, jnp.where(ok & (value > start), 1, 0))))
        first = n == 0
        outcome = jnp.where(first, jnp.where(ok, 0, 2), outcome)
        return (n + 1, jnp.where(first, 1.0, 0.5 * t), outcome, jnp.where(first, value, start), safe, value,
                Sigma)

    go = jnp.any(free) & step_ok & (st.K > 0)
    start = (jnp.where(go, 0, _LINE_SEARCH + 1), jnp.asarray(1.0), jnp.asarray(0), jnp.asarray(0.0), xa,
             jnp.asarray(0.0), st.Sigma)
    _, _, outcome, start, trial, value, Sigma = lax.while_loop(cond, body, start)
    made = go & (outcome == 1)

    def apply(st):
        return statistics(st._replace(x=st.x.at[slot_index(st)].set(trial, mode="drop")), buf, Sigma)

    return made, value - start, lax.cond(made, apply, lambda st: st, st)
