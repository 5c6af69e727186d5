"""Gradients of the super-sparse objective with respect to the prototypes, (5)-(7), and the
repulsion penalty with its gradients.

* :func:`prototype_gradient`: the total derivative (5)-(6) by automatic differentiation through
  the solve of the beta-step (4);
* :func:`rbf_prototype_gradient`: its closed form for the RBF;
* :func:`direction_prototype_gradient`: the black-box rule (7);
* :func:`repulsion_penalty`: ``R(C) = sum_{j<k} s(c_j, c_k)``, whose gradient is the repulsion
  term, in closed form for the RBF (:func:`rbf_repulsion_gradient`) and by rule (7)
  (:func:`direction_repulsion_gradient`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .program import beta_residual_jit, objective, residual_weights
from .similarity import check_similarity, similarity_matrix, similarity_numpy

__all__ = [
    "prototype_gradient",
    "rbf_prototype_gradient",
    "direction_prototype_gradient",
    "direction",
    "repulsion_penalty",
    "rbf_repulsion_gradient",
    "direction_repulsion_gradient",
]


def prototype_gradient(C, X, y, v=None, lam=1e-3, gamma=1.0, similarity="rbf"):
    """The total derivative ``d Omega / d C`` (5)-(6), (m, d), by automatic differentiation of
    :func:`objective` through the solve of (4) (so ``d beta / d c_k`` and ``d b / d c_k`` are
    included). Needs a JAX-traceable similarity."""
    return jax.grad(objective)(jnp.asarray(C, dtype=jnp.float64), X, y, v, lam, gamma, similarity)


def rbf_prototype_gradient(C, X, y, v=None, lam=1e-3, gamma=1.0):
    """The total derivative (5) for the RBF similarity in closed form, (m, d)::

        d Omega / d c_k = -(2/n) sum_i v_i r_i beta_k d s(x_i, c_k) / d c_k,
        d s(x, c) / d c = 2 gamma (x - c) s(x, c),

    with ``r = y - f`` the residuals at the beta-step (4). The implicit terms through
    ``d beta / d c_k`` and ``d b / d c_k`` (6) vanish at an exact solution of (4), whose normal
    equations make the partial derivatives of (3) in ``beta`` and ``b`` zero.
    """
    C = jnp.asarray(C, dtype=jnp.float64)
    X = jnp.asarray(X, dtype=jnp.float64)
    y = jnp.asarray(y, dtype=jnp.float64)
    n = y.shape[0]
    v = jnp.ones(n) if v is None else jnp.asarray(v)
    S = similarity_matrix(X, C, "rbf", gamma)
    beta, _, vr = residual_weights(S, y, v, lam)
    # sum_i vr_i S_ik (x_i - c_k) = (S^T vr)-weighted mean of the inputs minus c_k times the weight
    a = S * vr[:, None]  # (n, m)
    moved = a.T @ X - jnp.sum(a, axis=0)[:, None] * C  # (m, d)
    return -(2.0 / n) * (beta * 2.0 * gamma)[:, None] * moved


def direction_prototype_gradient(C, X, y, v=None, lam=1e-3, gamma=1.0, similarity="rbf", S=None):
    """The black-box rule (7): the total derivative (5) with ``d s(x_i, c_k) / d c_k`` replaced by
    the direction ``x_i - c_k`` (moving ``c_k`` towards ``x_i`` raises the similarity)::

        g_k = -(2/n) sum_i v_i r_i beta_k (x_i - c_k).

    The similarity is evaluated with NumPy (it may be any black box). ``S`` may be passed when
    already computed. Returns a NumPy array (m, d).
    """
    C = np.asarray(C, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = y.shape[0]
    v = np.ones(n) if v is None else np.asarray(v, dtype=np.float64)
    if S is None:
        S = similarity_numpy(X, C, check_similarity(similarity), gamma)
    beta, _, vr = (np.asarray(a) for a in beta_residual_jit(jnp.asarray(S), jnp.asarray(y), jnp.asarray(v), lam))
    return direction(C, X, beta, vr)


def direction(C, X, beta, vr):
    """Rule (7) for the rows of C (beta and vr = v r matching them): -(2/n) beta_k sum_i vr_i (x_i - c_k)."""
    moved = vr @ X - np.sum(vr) * C  # (m, d): sum_i vr_i (x_i - c_k)
    return -(2.0 / len(vr)) * beta[:, None] * moved


def repulsion_penalty(C, similarity="rbf", gamma=1.0):
    """``R(C) = sum_{j<k} s(c_j, c_k)``: the penalty whose gradient, times ``rho / t``, is the
    paper's repulsion term (it pushes ``c_k`` away from ``c_j`` in proportion to ``s(c_k, c_j)``).
    For a non-symmetric similarity the pair's two values are averaged."""
    K = similarity_matrix(C, C, similarity, gamma)
    return 0.5 * (jnp.sum(K) - jnp.trace(K))


def rbf_repulsion_gradient(C, gamma):
    """d R / d c_k = sum_{j != k} 2 gamma (c_j - c_k) s(c_k, c_j) for the RBF."""
    K = similarity_matrix(C, C, "rbf", gamma)
    K = K - jnp.diag(jnp.diag(K))
    return 2.0 * gamma * (K @ C - jnp.sum(K, axis=1)[:, None] * C)


def direction_repulsion_gradient(C, K):
    """Rule (7) on R: d s(c_k, c_j) / d c_k ~ (c_j - c_k); K the (symmetrised) s(C, C)."""
    K = 0.5 * (K + K.T)
    K = K - np.diag(np.diag(K))
    return K @ C - np.sum(K, axis=1)[:, None] * C
