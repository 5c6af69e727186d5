"""One c-step of the super-sparse fit (5)-(6): a gradient step on ``Omega + coef R`` halved until
it does not increase, jitted for traceable similarities (:func:`jax_step`), one prototype at a
time with rule (7) for black boxes (:func:`numpy_step`)."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .gradients import (direction, direction_repulsion_gradient, rbf_prototype_gradient, rbf_repulsion_gradient,
                        repulsion_penalty)
from .program import beta_residual_jit, beta_step, objective, omega
from .similarity import similarity_matrix, similarity_numpy

__all__ = ["evaluate_jit", "jax_step", "numpy_step"]

_MAX_HALVINGS = 40


def _augmented(C, X, y, v, lam, gamma, coef, similarity):
    """(Omega + coef R, Omega) at the prototypes C."""
    om = objective(C, X, y, v, lam, gamma, similarity)
    return om + coef * repulsion_penalty(C, similarity, gamma), om


def _gradient(C, X, y, v, lam, gamma, coef, similarity, mode):
    if mode == "analytic":
        return rbf_prototype_gradient(C, X, y, v, lam, gamma) + coef * rbf_repulsion_gradient(C, gamma)
    return jax.grad(lambda c: _augmented(c, X, y, v, lam, gamma, coef, similarity)[0])(C)


@functools.partial(jax.jit, static_argnames=("similarity",))
def evaluate_jit(C, X, y, v, lam, gamma, similarity):
    """beta, b (4) and Omega (2) at the prototypes C."""
    S = similarity_matrix(X, C, similarity, gamma)
    beta, b = beta_step(S, y, v, lam)
    return beta, b, omega(S, y, v, lam, beta, b)


@functools.partial(jax.jit, static_argnames=("similarity", "mode"))
def jax_step(C, X, y, v, lam, gamma, coef, eta, spread, similarity, mode):
    """One c-step: the gradient of Omega + coef R, then a step halved until Omega + coef R does
    not increase (at most _MAX_HALVINGS times). Returns the new prototypes (the old ones if no
    step was accepted), Omega after and before, Omega + coef R after and before, the step taken,
    acceptance. ``eta`` NaN: the first step moves the prototype of largest gradient by a tenth of
    ``spread``."""
    a_old, om_old = _augmented(C, X, y, v, lam, gamma, coef, similarity)
    g = _gradient(C, X, y, v, lam, gamma, coef, similarity, mode)
    gmax = jnp.max(jnp.linalg.norm(g, axis=1))
    auto = jnp.where((gmax > 0) & jnp.isfinite(gmax), 0.1 * spread / jnp.where(gmax > 0, gmax, 1.0), 1.0)
    eta = jnp.where(jnp.isnan(eta), auto, eta)

    def trial(eta):
        c_new = C - eta * g
        a_new, om_new = _augmented(c_new, X, y, v, lam, gamma, coef, similarity)
        return c_new, a_new, om_new

    def cond(state):
        _, _, a_new, _, k = state
        return jnp.logical_not(a_new <= a_old) & (k < _MAX_HALVINGS)  # also rejects NaN

    def body(state):
        eta = 0.5 * state[0]
        return (eta, *trial(eta), state[4] + 1)

    eta, c_new, a_new, om_new, _ = jax.lax.while_loop(cond, body, (eta, *trial(eta), 0))
    ok = a_new <= a_old
    return (jnp.where(ok, c_new, C), jnp.where(ok, om_new, om_old), om_old, jnp.where(ok, a_new, a_old), a_old,
            eta, ok)


def numpy_step(C, X, y, v, lam, gamma, coef, etas, similarity):
    """One sweep of the c-step with rule (7) for black-box similarities, one prototype at a time
    (as the paper does): for each k, the direction of :func:`direction_prototype_gradient` for
    ``c_k`` (plus rule (7) on the repulsion), a step halved until the true Omega + coef R does not
    increase, and ``beta, b`` re-solved. Only the column ``s(X, c_k)`` (and the row of
    ``s(C, c_k)``) is re-evaluated per trial. Returns the new prototypes, Omega after and before,
    the augmented objective after and before, the step sizes, and whether any prototype moved."""
    C = np.array(C, dtype=np.float64)
    etas = np.array(etas, dtype=np.float64)
    n = len(y)
    yj, vj = jnp.asarray(y), jnp.asarray(v)

    def omega_at(S):
        beta, b, vr = (np.asarray(a) for a in beta_residual_jit(jnp.asarray(S), yj, vj, lam))
        return float(np.sum(vr * (y - S @ beta - b)) / n + lam * beta @ beta), beta, vr

    def rep(K):
        return 0.5 * float(np.sum(K) - np.trace(K)) if coef > 0 else 0.0

    S = similarity_numpy(X, C, similarity, gamma)
    K = similarity_numpy(C, C, similarity, gamma) if coef > 0 else None
    om, beta, vr = omega_at(S)
    om_old = om
    a_old = a_cur = om + coef * rep(K)
    moved = False
    for k in range(C.shape[0]):
        g = direction(C[k:k + 1], X, beta[k:k + 1], vr)[0]
        if coef > 0:
            g = g + coef * direction_repulsion_gradient(C, K)[k]
        if not np.any(g):
            continue
        eta = etas[k]
        for _ in range(_MAX_HALVINGS + 1):
            c_new = C[k] - eta * g
            S_try = S.copy()
            S_try[:, k] = similarity_numpy(X, c_new[None], similarity, gamma)[:, 0]
            K_try = None
            if coef > 0:
                C_try = C.copy()
                C_try[k] = c_new
                K_try = K.copy()
                K_try[k, :] = similarity_numpy(c_new[None], C_try, similarity, gamma)[0]
                K_try[:, k] = similarity_numpy(C_try, c_new[None], similarity, gamma)[:, 0]
            om_try, beta_try, vr_try = omega_at(S_try)
            a_try = om_try + coef * rep(K_try)
            if a_try <= a_cur:  # False for NaN
                moved = moved or a_try < a_cur
                C[k], S, K, a_cur, om, beta, vr = c_new, S_try, K_try, a_try, om_try, beta_try, vr_try
                etas[k] = eta
                break
            eta *= 0.5
    return C, om, om_old, a_cur, a_old, etas, moved
