"""Super-sparse machines with learned virtual prototypes (Biggio et al.).

A discriminant (or regression function) that needs only ``m`` similarity evaluations per point,
against ``m`` *virtual* prototypes learned jointly with the coefficients. Equation numbers are
the paper's, as restated in ``shared/papers/super_sparse_equations.md``::

    f(x) = sum_j beta_j s(x, c_j) + b                                                   (1)
    Omega(beta, b, C) = (1/n) sum_i v_i (y_i - f(x_i))^2 + lam beta^T beta              (2)
                      = (1/n) (y - S beta - b 1)^T V (y - S beta - b 1) + lam beta^T beta  (3)

with ``S_ij = s(x_i, c_j)`` (n x m), ``V = diag(v)`` (per-sample weights, default 1) and ``lam``
a ridge penalty. Sparsity comes from the small ``m``, not from the penalty.

* beta-step (prototypes fixed): the weighted ridge normal equations (4),
  ``[[S^T V S + n lam I, S^T V 1], [1^T V S, 1^T V 1]] [beta; b] = [S^T V y; 1^T V y]``
  (:func:`beta_step`).
* c-step: gradient descent on ``Omega`` with respect to the prototypes (5)-(6), ``beta`` and ``b``
  re-solved after each move. The total derivative, including ``d beta / d c_k`` and
  ``d b / d c_k`` from differentiating (4), is obtained by automatic differentiation through the
  solve (:func:`prototype_gradient`); at an exact solution of (4) the implicit terms cancel, so
  for the RBF it also has the closed form of :func:`rbf_prototype_gradient`.
* a black-box similarity (a callable JAX cannot trace) uses rule (7): ``d s(x_i, c_k) / d c_k``
  is replaced by the direction ``x_i - c_k`` (:func:`direction_prototype_gradient`).
* repulsion (the paper's initialisation penalty): the gradient of ``c_k`` gets the extra term
  ``(rho sigma_y^2 / t) d R / d c_k`` with ``R(C) = sum_{j<k} s(c_j, c_k)``
  (:func:`repulsion_penalty`), which pushes ``c_k`` away from each ``c_j`` in proportion to
  ``s(c_k, c_j)``, with a coefficient decaying with the iteration count ``t``. (The factor
  ``sigma_y^2``, the ``v``-weighted variance of the targets, is not in the paper: it puts ``R``
  on the scale of ``Omega``, so that ``rho`` does not depend on the units of ``y``.)
* choosing ``m`` (8): ``L_val(m) + mu m`` over a decreasing grid, each ``m`` warm-started from
  the previous solution with the prototypes of smallest ``|beta_j|`` dropped (:func:`prune`,
  :func:`select_m`).
* reducing a trained kernel machine: its decision values as regression targets
  (:func:`fit_to_decision_values`).

The probabilistic reading (:func:`model`): with ``beta ~ N(0, 1 / (n lam tau))``, a flat prior on
``b`` and ``y_i ~ N(f(x_i), 1 / (tau v_i))``, the log posterior of ``(beta, b)`` given the
prototypes is ``-(n tau / 2) Omega + const``, a Gaussian whose mean (and mode) is the beta-step
(4) for every noise precision ``tau``.

Similarities: ``"rbf"``, ``s(x, c) = exp(-gamma ||x - c||^2)`` (scikit-learn's ``gamma``), or any
callable ``s(X, C) -> (n, m)``; a JAX-traceable callable gets exact gradients, any other one is a
black box handled with rule (7).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import time
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

from ppl_sbl import basis
from ppl_sbl.saving import Saveable
from ppl_sbl.validation import check_matrix, check_targets

__all__ = [
    "model",
    "similarity_matrix",
    "beta_step",
    "objective",
    "prototype_gradient",
    "rbf_prototype_gradient",
    "direction_prototype_gradient",
    "repulsion_penalty",
    "is_traceable",
    "fit",
    "prune",
    "select_m",
    "fit_to_decision_values",
    "evidence",
    "evidence_over_m",
    "SuperSparseResult",
    "GRADIENTS",
]

GRADIENTS = ("auto", "autodiff", "analytic", "direction")
_MAX_HALVINGS = 40
_TINY = 1e-300


# ----------------------------------------------------------------------------------------------
# Similarities
# ----------------------------------------------------------------------------------------------
class _Hashable:
    """A callable similarity that cannot be hashed (a static argument of jit must be), keyed by id."""

    def __init__(self, fun):
        self.fun = fun

    def __call__(self, X, C):
        return self.fun(X, C)

    def __hash__(self):
        return id(self.fun)

    def __eq__(self, other):
        return isinstance(other, _Hashable) and other.fun is self.fun


def _check_similarity(similarity):
    if callable(similarity):
        try:
            hash(similarity)
        except TypeError:
            return _Hashable(similarity)
        return similarity
    if isinstance(similarity, str) and similarity == "rbf":
        return similarity
    raise ValueError(
        f"`similarity` must be 'rbf' or a callable s(X, C) -> (n, m) array; got {similarity!r}."
    )


def similarity_matrix(X, C, similarity="rbf", gamma=1.0):
    """The similarity matrix ``S_ij = s(x_i, c_j)`` of (3), shape (n, m).

    Parameters
    ----------
    X : (n, d) inputs.
    C : (m, d) prototypes.
    similarity : "rbf" (``exp(-gamma ||x - c||^2)``, scikit-learn's parametrisation) or a callable
        ``s(X, C) -> (n, m)``. A JAX-traceable callable is differentiated exactly; a callable
        that only accepts NumPy arrays (a black box) works outside of JAX transformations.
    gamma : the RBF's inverse squared width (ignored for a callable).

    Returns
    -------
    jax.Array (n, m)
    """
    similarity = _check_similarity(similarity)
    if callable(similarity):
        return jnp.asarray(similarity(X, C))
    X, C = jnp.asarray(X), jnp.asarray(C)
    # explicit differences (not |x|^2 + |c|^2 - 2 x.c): exact at x = c, and so are its gradients
    sq = jnp.sum((X[:, None, :] - C[None, :, :]) ** 2, axis=-1)
    return jnp.exp(-gamma * sq)


def _similarity_numpy(X, C, similarity, gamma):
    """S as a NumPy array, for black-box similarities (no JAX tracing)."""
    if callable(similarity):
        return np.asarray(similarity(np.asarray(X), np.asarray(C)), dtype=np.float64)
    return basis.rbf(np.asarray(X), np.asarray(C), gamma)


def is_traceable(similarity, X, C):
    """Whether ``similarity(X, C)`` can be traced by JAX (and so differentiated exactly).

    A callable that converts its inputs to NumPy arrays, calls ``float`` on them, or otherwise
    needs concrete values is a black box: the fit then uses the direction rule (7).
    """
    similarity = _check_similarity(similarity)
    if not callable(similarity):
        return True
    X = jnp.asarray(X, dtype=jnp.float64)
    try:
        out = jax.eval_shape(lambda c: jnp.asarray(similarity(X, c)), jax.ShapeDtypeStruct(np.shape(C), jnp.float64))
    except Exception:  # noqa: BLE001  (any failure to trace makes it a black box)
        return False
    return tuple(out.shape) == (X.shape[0], np.shape(C)[0])


# ----------------------------------------------------------------------------------------------
# The NumPyro program
# ----------------------------------------------------------------------------------------------
def model(X, y=None, *, prototypes, gamma=1.0, lam=1e-3, tau=1.0, sample_weight=None, similarity="rbf"):
    """The super-sparse machine as a probabilistic model, prototypes given::

        beta_j ~ N(0, 1 / (n lam tau)),   j = 1..m
        b ~ flat (ImproperUniform on the real line)
        y_i | beta, b ~ N(f(x_i), 1 / (tau v_i)),   f(x) = sum_j beta_j s(x, c_j) + b     (1)

    so that ``log p(beta, b | y) = -(n tau / 2) Omega(beta, b, C) + const`` with ``Omega`` the
    objective (2): the posterior of ``(beta, b)`` is Gaussian and its mean is the beta-step (4),
    whatever the noise precision ``tau``. The prototypes are parameters, not sampled.

    Parameters
    ----------
    X : (n, d) inputs.
    y : (n,) targets (None to sample them, e.g. under ``Predictive`` with ``b`` given).
    prototypes : (m, d) the virtual prototypes ``c_j``.
    gamma : the RBF's ``gamma`` (ignored for a callable similarity).
    lam : the ridge penalty ``lambda`` of (2).
    tau : the noise precision.
    sample_weight : (n,) the weights ``v_i > 0`` of (2); default 1.
    similarity : "rbf" or a callable ``s(X, C) -> (n, m)``.
    """
    X = jnp.asarray(X, dtype=jnp.float64)
    C = jnp.asarray(prototypes, dtype=jnp.float64)
    if X.ndim != 2:
        raise ValueError(f"`X` must be 2-dimensional (n, d); got shape {X.shape}.")
    if C.ndim != 2 or C.shape[1] != X.shape[1]:
        raise ValueError(
            f"`prototypes` must be (m, {X.shape[1]}), one row per prototype in the space of `X`; got shape {C.shape}."
        )
    n, m = X.shape[0], C.shape[0]
    v = jnp.ones(n) if sample_weight is None else jnp.asarray(sample_weight, dtype=jnp.float64)
    S = similarity_matrix(X, C, similarity, gamma)
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0 / jnp.sqrt(n * lam * tau)).expand([m]).to_event(1))
    b = numpyro.sample("b", dist.ImproperUniform(constraints.real, (), ()))
    f = S @ beta + b
    with numpyro.plate("data", n):
        numpyro.sample("y", dist.Normal(f, 1.0 / jnp.sqrt(tau * v)), obs=y)


# ----------------------------------------------------------------------------------------------
# beta-step, objective, gradients
# ----------------------------------------------------------------------------------------------
def beta_step(S, y, v, lam):
    """The beta-step (4): the minimiser ``(beta, b)`` of (3) for a fixed similarity matrix.

    Solves the weighted ridge normal equations
    ``[[S^T V S + n lam I, S^T V 1], [1^T V S, 1^T V 1]] [beta; b] = [S^T V y; 1^T V y]``
    by eliminating ``b`` with the second row (``b = (1^T V y - 1^T V S beta) / 1^T V 1``): what is
    left is the m x m system ``(S_c^T V S_c + n lam I) beta = S_c^T V y_c`` in the columns and
    targets centred by their ``v``-weighted means, symmetric positive definite for ``lam > 0``,
    solved by Cholesky. The same solution as (4), better conditioned; differentiable (JAX).

    Parameters
    ----------
    S : (n, m) similarity matrix.
    y : (n,) targets.
    v : (n,) sample weights ``v_i > 0`` (None: all 1).
    lam : ridge penalty ``lambda > 0``.

    Returns
    -------
    beta : (m,)
    b : ()
    """
    S = jnp.asarray(S)
    y = jnp.asarray(y)
    n, m = S.shape
    v = jnp.ones(n, dtype=S.dtype) if v is None else jnp.asarray(v)
    w = v / jnp.sum(v)
    s_mean = w @ S
    y_mean = w @ y
    Sc = S - s_mean
    yc = y - y_mean
    A = (Sc * v[:, None]).T @ Sc + n * lam * jnp.eye(m, dtype=S.dtype)
    L = jnp.linalg.cholesky(A)
    beta = jax.scipy.linalg.cho_solve((L, True), Sc.T @ (v * yc))
    b = y_mean - s_mean @ beta
    return beta, b


def _omega(S, y, v, lam, beta, b):
    r = y - S @ beta - b
    return jnp.sum(v * r**2) / y.shape[0] + lam * beta @ beta


def objective(C, X, y, v=None, lam=1e-3, gamma=1.0, similarity="rbf"):
    """``Omega`` (2) at the beta-step solution (4) for the prototypes ``C``: the function of the
    prototypes that the c-step (5)-(6) descends. Differentiable in ``C`` (through the solve of
    (4)) for a JAX-traceable similarity.

    Parameters
    ----------
    C : (m, d) prototypes.
    X : (n, d) inputs.  y : (n,) targets.  v : (n,) sample weights (None: all 1).
    lam : ridge penalty.  gamma : RBF ``gamma``.  similarity : "rbf" or a callable.
    """
    y = jnp.asarray(y)
    v = jnp.ones(y.shape[0]) if v is None else jnp.asarray(v)
    S = similarity_matrix(X, C, similarity, gamma)
    beta, b = beta_step(S, y, v, lam)
    return _omega(S, y, v, lam, beta, b)


def prototype_gradient(C, X, y, v=None, lam=1e-3, gamma=1.0, similarity="rbf"):
    """The total derivative ``d Omega / d C`` (5)-(6), (m, d), by automatic differentiation of
    :func:`objective` through the solve of (4) (so ``d beta / d c_k`` and ``d b / d c_k`` are
    included). Needs a JAX-traceable similarity."""
    return jax.grad(objective)(jnp.asarray(C, dtype=jnp.float64), X, y, v, lam, gamma, similarity)


def _residual_weights(S, y, v, lam):
    beta, b = beta_step(S, y, v, lam)
    r = y - S @ beta - b
    return beta, b, v * r


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
    beta, _, vr = _residual_weights(S, y, v, lam)
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
        S = _similarity_numpy(X, C, _check_similarity(similarity), gamma)
    beta, _, vr = (np.asarray(a) for a in _beta_residual_jit(jnp.asarray(S), jnp.asarray(y), jnp.asarray(v), lam))
    return _direction(C, X, beta, vr)


def _direction(C, X, beta, vr):
    """Rule (7) for the rows of C (beta and vr = v r matching them): -(2/n) beta_k sum_i vr_i (x_i - c_k)."""
    moved = vr @ X - np.sum(vr) * C  # (m, d): sum_i vr_i (x_i - c_k)
    return -(2.0 / len(vr)) * beta[:, None] * moved


_beta_residual_jit = jax.jit(_residual_weights)


def repulsion_penalty(C, similarity="rbf", gamma=1.0):
    """``R(C) = sum_{j<k} s(c_j, c_k)``: the penalty whose gradient, times ``rho / t``, is the
    paper's repulsion term (it pushes ``c_k`` away from ``c_j`` in proportion to ``s(c_k, c_j)``).
    For a non-symmetric similarity the pair's two values are averaged."""
    K = similarity_matrix(C, C, similarity, gamma)
    return 0.5 * (jnp.sum(K) - jnp.trace(K))


def _rbf_repulsion_gradient(C, gamma):
    """d R / d c_k = sum_{j != k} 2 gamma (c_j - c_k) s(c_k, c_j) for the RBF."""
    K = similarity_matrix(C, C, "rbf", gamma)
    K = K - jnp.diag(jnp.diag(K))
    return 2.0 * gamma * (K @ C - jnp.sum(K, axis=1)[:, None] * C)


def _direction_repulsion_gradient(C, K):
    """Rule (7) on R: d s(c_k, c_j) / d c_k ~ (c_j - c_k); K the (symmetrised) s(C, C)."""
    K = 0.5 * (K + K.T)
    K = K - np.diag(np.diag(K))
    return K @ C - np.sum(K, axis=1)[:, None] * C


# ----------------------------------------------------------------------------------------------
# The jitted c-step (traceable similarities)
# ----------------------------------------------------------------------------------------------
def _augmented(C, X, y, v, lam, gamma, coef, similarity):
    """(Omega + coef R, Omega) at the prototypes C."""
    om = objective(C, X, y, v, lam, gamma, similarity)
    return om + coef * repulsion_penalty(C, similarity, gamma), om


def _gradient(C, X, y, v, lam, gamma, coef, similarity, mode):
    if mode == "analytic":
        return rbf_prototype_gradient(C, X, y, v, lam, gamma) + coef * _rbf_repulsion_gradient(C, gamma)
    return jax.grad(lambda c: _augmented(c, X, y, v, lam, gamma, coef, similarity)[0])(C)


@functools.partial(jax.jit, static_argnames=("similarity",))
def _evaluate_jit(C, X, y, v, lam, gamma, similarity):
    """beta, b (4) and Omega (2) at the prototypes C."""
    S = similarity_matrix(X, C, similarity, gamma)
    beta, b = beta_step(S, y, v, lam)
    return beta, b, _omega(S, y, v, lam, beta, b)


@functools.partial(jax.jit, static_argnames=("similarity", "mode"))
def _jax_step(C, X, y, v, lam, gamma, coef, eta, spread, similarity, mode):
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


def _numpy_step(C, X, y, v, lam, gamma, coef, etas, similarity):
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

    def omega(S):
        beta, b, vr = (np.asarray(a) for a in _beta_residual_jit(jnp.asarray(S), yj, vj, lam))
        return float(np.sum(vr * (y - S @ beta - b)) / n + lam * beta @ beta), beta, vr

    def rep(K):
        return 0.5 * float(np.sum(K) - np.trace(K)) if coef > 0 else 0.0

    S = _similarity_numpy(X, C, similarity, gamma)
    K = _similarity_numpy(C, C, similarity, gamma) if coef > 0 else None
    om, beta, vr = omega(S)
    om_old = om
    a_old = a_cur = om + coef * rep(K)
    moved = False
    for k in range(C.shape[0]):
        g = _direction(C[k:k + 1], X, beta[k:k + 1], vr)[0]
        if coef > 0:
            g = g + coef * _direction_repulsion_gradient(C, K)[k]
        if not np.any(g):
            continue
        eta = etas[k]
        for _ in range(_MAX_HALVINGS + 1):
            c_new = C[k] - eta * g
            S_try = S.copy()
            S_try[:, k] = _similarity_numpy(X, c_new[None], similarity, gamma)[:, 0]
            K_try = None
            if coef > 0:
                C_try = C.copy()
                C_try[k] = c_new
                K_try = K.copy()
                K_try[k, :] = _similarity_numpy(c_new[None], C_try, similarity, gamma)[0]
                K_try[:, k] = _similarity_numpy(C_try, c_new[None], similarity, gamma)[:, 0]
            om_try, beta_try, vr_try = omega(S_try)
            a_try = om_try + coef * rep(K_try)
            if a_try <= a_cur:  # False for NaN
                moved = moved or a_try < a_cur
                C[k], S, K, a_cur, om, beta, vr = c_new, S_try, K_try, a_try, om_try, beta_try, vr_try
                etas[k] = eta
                break
            eta *= 0.5
    return C, om, om_old, a_cur, a_old, etas, moved


_beta_step_jit = jax.jit(beta_step)


# ----------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class SuperSparseResult(Saveable):
    """A fitted super-sparse machine: ``f(x) = sum_j beta_j s(x, c_j) + b`` (1).

    Attributes
    ----------
    prototypes : (m, d) the virtual prototypes ``c_j``.
    beta : (m,) coefficients; b : the bias (the beta-step (4) at the final prototypes).
    objective : ``Omega`` (2) at the final prototypes.
    objective_trace : ``Omega`` at the initial prototypes (entry 0) and after each accepted step
        (entry t), length ``steps + 1``.
    converged : True when the relative decrease of the (repulsion-augmented) objective fell
        below ``tol`` or no step could lower it; False when ``max_steps`` ran out.
    stop_reason : "tol", "line_search" (no step lowered the objective) or "max_steps".
    steps : accepted c-steps.
    gradient : the gradient used: "autodiff", "analytic" or "direction" (rule (7)).
    initial_prototypes : (m, d) where the descent started.
    step_size : the step size to try next (per prototype, an array, for rule (7)).
    fixed_step_size : the ``step_size`` argument of :func:`fit` (None: adaptive).
    seconds : wall-clock time of the fit.
    prototype_trace : (steps + 1, m, d) the prototypes at the start and after each accepted step,
        aligned with ``objective_trace`` (only with ``fit(..., trace_prototypes=True)``).
    """

    prototypes: np.ndarray
    beta: np.ndarray
    b: float
    objective: float
    objective_trace: np.ndarray
    converged: bool
    stop_reason: str
    steps: int
    similarity: Any
    gamma: float
    lam: float
    sample_weight: np.ndarray
    gradient: str
    repulsion: float
    tol: float
    max_steps: int
    initial_prototypes: np.ndarray
    step_size: float
    fixed_step_size: Optional[float] = None
    seconds: float = 0.0
    prototype_trace: Optional[np.ndarray] = None

    @property
    def m(self):
        """The number of prototypes."""
        return int(self.prototypes.shape[0])

    @property
    def similarity_evaluations_per_point(self):
        """Similarity evaluations a prediction costs: m (one per prototype)."""
        return self.m

    def similarities(self, X_new):
        """``s(x, c_j)`` for the rows of ``X_new``, (n_new, m)."""
        X_new = check_matrix("X_new", X_new)
        if X_new.shape[1] != self.prototypes.shape[1]:
            raise ValueError(
                f"`X_new` has {X_new.shape[1]} features but the prototypes have {self.prototypes.shape[1]}; "
                "pass inputs in the space the machine was fitted in."
            )
        if self.gradient == "direction":
            return _similarity_numpy(X_new, self.prototypes, self.similarity, self.gamma)
        return np.asarray(similarity_matrix(jnp.asarray(X_new), jnp.asarray(self.prototypes), self.similarity,
                                            self.gamma))

    def decision_function(self, X_new):
        """``f(x)`` (1) at the rows of ``X_new``, (n_new,)."""
        return self.similarities(X_new) @ self.beta + self.b

    predict = decision_function


def _int_in(name, value, low, high, fix):
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            value = int(value)
        else:
            raise ValueError(f"`{name}` must be an integer; got {value!r}.")
    value = int(value)
    if not low <= value <= high:
        raise ValueError(f"`{name}` must be between {low} and {high}; got {value}. {fix}")
    return value


def _positive(name, value, *, allow_zero=False):
    try:
        out = float(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"`{name}` must be a number; got {value!r}.") from err
    if not math.isfinite(out) or out < 0 or (out == 0 and not allow_zero):
        raise ValueError(f"`{name}` must be a finite number {'>= 0' if allow_zero else '> 0'}; got {value!r}.")
    return out


def _check_weights(sample_weight, n):
    if sample_weight is None:
        return np.ones(n)
    v = check_targets("sample_weight", sample_weight, n, rows_name="X")
    if np.any(v <= 0):
        raise ValueError(
            "`sample_weight` must be > 0 for every sample (the v_i of (2)); drop the samples you want "
            "to ignore instead of giving them weight 0."
        )
    return v


def _check_inputs(X, y, m, sample_weight, init):
    X = check_matrix("X", X)
    y = check_targets("y", y, X.shape[0], rows_name="X")
    n = X.shape[0]
    if init is not None:
        init = check_matrix("init", init)
        if init.shape[1] != X.shape[1]:
            raise ValueError(f"`init` must be (m, {X.shape[1]}) prototypes in the space of `X`; got {init.shape}.")
        if m is None:
            m = init.shape[0]
    if m is None:
        raise ValueError("`m` (the number of prototypes) is required.")
    m = _int_in("m", m, 1, n, "Use at least one prototype and at most one per training sample.")
    if init is not None and init.shape[0] != m:
        raise ValueError(f"`init` has {init.shape[0]} rows but `m` is {m}; pass one initial prototype per row.")
    return X, y, m, _check_weights(sample_weight, n), init


def _initial_prototypes(X, m, seed):
    """m training samples drawn at random (distinct rows where there are enough)."""
    rng = np.random.default_rng(seed)
    _, first = np.unique(X, axis=0, return_index=True)
    pool = np.sort(first) if len(first) >= m else np.arange(len(X))
    return X[rng.choice(pool, m, replace=False)].copy()


def _resolve_gradient(gradient, similarity, X, C):
    if gradient not in GRADIENTS:
        raise ValueError(f"`gradient` must be one of {GRADIENTS}; got {gradient!r}.")
    traceable = is_traceable(similarity, X, C)
    if gradient == "auto":
        return "autodiff" if traceable else "direction"
    if gradient == "analytic" and not (isinstance(similarity, str) and similarity == "rbf"):
        raise ValueError("`gradient='analytic'` is available for similarity='rbf' only; use 'autodiff' or 'direction'.")
    if gradient == "autodiff" and not traceable:
        raise ValueError(
            "`similarity` cannot be traced by JAX, so gradient='autodiff' is impossible; use gradient='direction' "
            "(rule (7)) or write the similarity with jax.numpy."
        )
    return gradient


def fit(X, y, *, m, similarity="rbf", gamma=1.0, lam=1e-3, sample_weight=None, max_steps=200, tol=1e-7,
        step_size=None, repulsion=1.0, seed=0, init=None, gradient="auto", trace_prototypes=False,
        progress_bar=False):
    """Learn ``m`` virtual prototypes and the coefficients of (1) by alternating the beta-step (4)
    and gradient steps on the prototypes (5)-(6).

    Each step t = 1, 2, ...: the beta-step, the gradient of ``Omega + rho_t R`` with respect to
    all prototypes (``R`` = :func:`repulsion_penalty`, ``rho_t = repulsion sigma_y^2 / t`` with
    ``sigma_y^2`` the ``v``-weighted variance of ``y``), and a step along it halved until
    ``Omega + rho_t R`` does not increase. With ``repulsion=0`` the objective ``Omega`` itself
    never increases; with repulsion, ``Omega`` can rise by at most ``rho_t (R_before - R_after)``
    in a step (at most ``rho_t m (m - 1) / 2`` for a similarity in [0, 1], as the RBF). Stops when
    the relative decrease of ``Omega + rho_t R`` falls below ``tol``, when no step lowers it, or
    after ``max_steps``. With rule (7) the prototypes move one at a time (each with its own
    step size), re-solving (4) after each move.

    Parameters
    ----------
    X : (n, d) inputs.  y : (n,) targets (labels coded -1/+1 for classification).
    m : the number of prototypes, 1 <= m <= n.
    similarity : "rbf" or a callable ``s(X, C) -> (n, m)`` (see :func:`similarity_matrix`).
    gamma : the RBF's ``gamma``.  lam : the ridge penalty ``lambda > 0`` of (2).
    sample_weight : (n,) weights ``v_i > 0`` of (2); default 1.
    max_steps : upper limit on the c-steps.  tol : relative decrease at which to stop.
    step_size : the step tried first at each iteration (then halved as needed); None: chosen
        from the data (a first move of a tenth of the inputs' spread), then twice the last
        accepted step at each iteration.
    repulsion : ``rho``, the repulsion coefficient at t = 1 in units of ``sigma_y^2`` (it decays
        as ``rho / t``); 0 turns it off.
    seed : the random choice of the initial prototypes (m distinct training samples).
    init : (m, d) initial prototypes instead (a warm start).
    gradient : "auto" (automatic differentiation for a traceable similarity, rule (7) for a black
        box), "autodiff", "analytic" (the RBF's closed form :func:`rbf_prototype_gradient`) or
        "direction" (rule (7), evaluating the similarity with NumPy).
    trace_prototypes : keep the prototypes after every accepted step in the result's
        ``prototype_trace`` (to draw them moving during training).
    progress_bar : show a tqdm bar.

    Returns
    -------
    SuperSparseResult
    """
    start = time.perf_counter()
    similarity = _check_similarity(similarity)
    X, y, m, v, init = _check_inputs(X, y, m, sample_weight, init)
    gamma = _positive("gamma", gamma)
    lam = _positive("lam", lam)
    tol = _positive("tol", tol, allow_zero=True)
    repulsion = _positive("repulsion", repulsion, allow_zero=True)
    max_steps = _int_in("max_steps", max_steps, 0, 10**9, "Pass a non-negative number of steps.")
    if step_size is not None:
        step_size = _positive("step_size", step_size)
    C = _initial_prototypes(X, m, seed) if init is None else init.copy()
    C0 = C.copy()
    mode = _resolve_gradient(gradient, similarity, X, C)
    numpy_path = mode == "direction"

    if numpy_path:
        S = _similarity_numpy(X, C, similarity, gamma)
        if S.shape != (X.shape[0], m) or not np.all(np.isfinite(S)):
            raise ValueError(
                f"`similarity` must return a finite (n, m) = ({X.shape[0]}, {m}) array for s(X, C); "
                f"got shape {S.shape}."
            )
        Xa, ya, va = X, y, v
    else:
        Xa, ya, va = jnp.asarray(X), jnp.asarray(y), jnp.asarray(v)

    spread = math.sqrt(float(np.sum(np.var(X, axis=0)))) or 1.0
    scale = float(np.average((y - np.average(y, weights=v)) ** 2, weights=v)) or 1.0

    def step(C, coef, eta):
        if numpy_path:
            return _numpy_step(C, Xa, ya, va, lam, gamma, coef, eta, similarity)
        out = _jax_step(jnp.asarray(C), Xa, ya, va, lam, gamma, coef, eta, spread, similarity, mode)
        return (np.asarray(out[0]), *(float(a) for a in out[1:6]), bool(out[6]))

    if step_size is not None:
        eta = step_size
    elif numpy_path:
        g = direction_prototype_gradient(C, X, y, v, lam, gamma, similarity)
        if repulsion > 0:
            g = g + repulsion * scale * _direction_repulsion_gradient(C, _similarity_numpy(C, C, similarity, gamma))
        gmax = float(np.max(np.linalg.norm(g, axis=1)))
        eta = 0.1 * spread / gmax if gmax > 0 and np.isfinite(gmax) else 1.0
    else:
        eta = math.nan  # chosen inside the first step
    if numpy_path:  # one step size per prototype (they move one at a time)
        eta = np.full(m, eta)

    bar = None
    if progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=max_steps, desc="super-sparse", unit="step")
    trace = []
    path = [C.copy()] if trace_prototypes else None
    stop_reason = "max_steps"
    for t in range(1, max_steps + 1):
        coef = repulsion * scale / t
        C_new, om_new, om_old, a_new, a_old, eta_taken, ok = step(C, coef, eta)
        if not trace:
            trace.append(om_old)
        if not ok:
            stop_reason = "line_search"
            break
        C = C_new
        trace.append(om_new)
        if path is not None:
            path.append(np.asarray(C).copy())
        if step_size is not None:
            eta = np.full(m, step_size) if numpy_path else step_size
        else:
            eta = 2.0 * eta_taken
        if bar is not None:
            bar.update(1)
            bar.set_postfix(objective=f"{om_new:.6g}", refresh=False)
        if a_old - a_new <= tol * max(abs(a_old), _TINY):
            stop_reason = "tol"
            break
    if bar is not None:
        bar.close()

    if numpy_path:
        S = _similarity_numpy(X, C, similarity, gamma)
        beta, b = (np.asarray(a) for a in _beta_step_jit(jnp.asarray(S), jnp.asarray(y), jnp.asarray(v), lam))
        final = float(np.sum(v * (y - S @ beta - b) ** 2) / len(y) + lam * beta @ beta)
    else:
        beta, b, final = (np.asarray(a) for a in _evaluate_jit(jnp.asarray(C), Xa, ya, va, lam, gamma, similarity))
        final = float(final)
    if not trace:
        trace.append(final)
    return SuperSparseResult(
        prototypes=np.asarray(C), beta=beta, b=float(b), objective=final, objective_trace=np.asarray(trace),
        converged=stop_reason != "max_steps", stop_reason=stop_reason, steps=len(trace) - 1, similarity=similarity,
        gamma=gamma, lam=lam, sample_weight=v, gradient=mode, repulsion=repulsion, tol=tol, max_steps=max_steps,
        initial_prototypes=C0, step_size=np.asarray(eta) if numpy_path else float(eta), fixed_step_size=step_size,
        seconds=time.perf_counter() - start, prototype_trace=None if path is None else np.stack(path),
    )


# ----------------------------------------------------------------------------------------------
# Choosing m (8), reducing a kernel machine
# ----------------------------------------------------------------------------------------------
def _settings(result):
    return dict(similarity=result.similarity, gamma=result.gamma, lam=result.lam, sample_weight=result.sample_weight,
                max_steps=result.max_steps, tol=result.tol, repulsion=result.repulsion,
                step_size=result.fixed_step_size,
                gradient="direction" if result.gradient == "direction" else result.gradient)


def prune(result, X, y, m_new, **fit_kwargs):
    """One step of the incremental procedure of (8): keep the ``m_new`` prototypes with the
    largest ``|beta_j|`` and re-run :func:`fit` warm-started from them.

    The settings of ``result`` (similarity, gamma, lam, sample_weight, max_steps, tol, step size,
    gradient) are reused unless overridden in ``fit_kwargs``; the repulsion is off (``repulsion=0``)
    unless given: the kept prototypes are already apart, and a repulsion restarted at t = 1 would
    push them off the solution being continued.
    """
    if not isinstance(result, SuperSparseResult):
        raise ValueError(f"`result` must be a SuperSparseResult from fit(); got {type(result).__name__}.")
    m_new = _int_in("m_new", m_new, 1, result.m, f"Keep between 1 and the {result.m} prototypes of `result`.")
    keep = np.sort(np.argsort(-np.abs(result.beta), kind="stable")[:m_new])
    kwargs = {**_settings(result), "repulsion": 0.0, **fit_kwargs}
    kwargs.pop("m", None)
    kwargs.pop("init", None)
    return fit(X, y, m=m_new, init=result.prototypes[keep], **kwargs)


_LOSSES = {
    "mse": lambda y, f: float(np.mean((y - f) ** 2)),
    "mae": lambda y, f: float(np.mean(np.abs(y - f))),
    "error": lambda y, f: float(np.mean(np.where(f > 0, 1.0, -1.0) != np.sign(y))),
}


def _incremental(X, y, grid, fit_kwargs):
    """The incremental procedure of (8): yields (m, result) for the m of ``grid`` in decreasing
    order, the largest fitted from scratch, each smaller one by :func:`prune` of the previous."""
    try:
        values = sorted({int(g) for g in grid}, reverse=True)
    except (TypeError, ValueError) as err:
        raise ValueError(f"`grid` must be a sequence of integers (values of m); got {grid!r}.") from err
    if not values:
        raise ValueError("`grid` is empty; pass the values of m to try, e.g. (10, 8, 6, 4, 2, 1).")
    fit_kwargs = {k: val for k, val in fit_kwargs.items() if k not in ("init", "m")}
    # the warm starts continue without repulsion (see prune) and need no seed
    prune_kwargs = {k: val for k, val in fit_kwargs.items() if k not in ("repulsion", "seed")}
    result = None
    for m in values:
        result = fit(X, y, m=m, **fit_kwargs) if result is None else prune(result, X, y, m, **prune_kwargs)
        yield m, result


def select_m(X, y, X_val, y_val, *, grid=(10, 8, 6, 4, 2, 1), mu=0.0, loss="mse", **fit_kwargs):
    """Choose m by (8), ``L_val(m) + mu m``, with the incremental procedure: fit with the largest
    m of ``grid``, then for each smaller m drop the prototypes with the smallest ``|beta_j|`` and
    refit warm-started (:func:`prune`).

    Parameters
    ----------
    X, y : training data.  X_val, y_val : validation data.
    grid : the values of m (distinct, used in decreasing order, each at most n).
    mu : the price per prototype in (8).
    loss : the validation loss: "mse", "mae", "error" (the misclassification rate of sign(f) for
        labels -1/+1) or a callable ``loss(y_val, f_val) -> float``.
    fit_kwargs : passed to :func:`fit` (similarity, gamma, lam, seed, repulsion, ...); the warm
        starts for the smaller m reuse them, except ``repulsion`` (off, as in :func:`prune`).

    Returns
    -------
    best : SuperSparseResult, the m minimising (8) (ties go to the smaller m).
    table : pandas.DataFrame with columns m, validation_loss, score (= loss + mu m), objective,
        steps, converged, one row per m in decreasing order.
    """
    import pandas as pd

    loss_fn = _LOSSES.get(loss) if isinstance(loss, str) else loss
    if not callable(loss_fn):
        raise ValueError(f"`loss` must be one of {tuple(_LOSSES)} or a callable loss(y_val, f_val); got {loss!r}.")
    mu = _positive("mu", mu, allow_zero=True)
    X_val = check_matrix("X_val", X_val)
    y_val = check_targets("y_val", y_val, X_val.shape[0], rows_name="X_val")
    rows, results = [], []
    for m, result in _incremental(X, y, grid, fit_kwargs):
        val = loss_fn(y_val, result.decision_function(X_val))
        rows.append(dict(m=m, validation_loss=val, score=val + mu * m, objective=result.objective,
                         steps=result.steps, converged=result.converged))
        results.append(result)
    table = pd.DataFrame(rows)
    scores = table["score"].to_numpy()
    best = int(np.flatnonzero(scores == scores.min())[-1])  # ties: the smallest m
    return results[best], table


def fit_to_decision_values(estimator, X, *, m, **kw):
    """Reduce a trained kernel machine (e.g. a scikit-learn ``SVC``) to ``m`` virtual prototypes:
    fit (1) to its decision values ``g(x_i) = estimator.decision_function(X)`` as regression
    targets (which works better than the raw labels because the loss (2) is quadratic).

    ``kw`` are passed to :func:`fit`. For a multi-class estimator (a 2-d decision function) fit
    one machine per column yourself.
    """
    if not hasattr(estimator, "decision_function"):
        raise ValueError(f"`estimator` must have a decision_function method; {type(estimator).__name__} has none.")
    X = check_matrix("X", X)
    g = np.asarray(estimator.decision_function(X), dtype=np.float64)
    if g.ndim == 2 and g.shape[1] == 1:
        g = g[:, 0]
    if g.ndim != 1:
        raise ValueError(
            f"`estimator.decision_function(X)` has shape {g.shape}; one column is needed. For a multi-class "
            "estimator fit one machine per column: [fit(X, g[:, k], m=m) for k in range(g.shape[1])]."
        )
    return fit(X, g, m=m, **kw)


# ----------------------------------------------------------------------------------------------
# Choosing m by evidence: a variational RVM over the virtual prototypes
# ----------------------------------------------------------------------------------------------
def evidence(result, X, y, *, task="regression", **cavi_kwargs):
    """The variational RVM (:mod:`ppl_sbl.models.rvm`) over the virtual prototypes of ``result``:
    the design ``[s(x_i, c_1) .. s(x_i, c_m), 1]`` with an ARD precision on each coefficient and
    on the bias, fitted by closed-form CAVI. Its ELBO bounds the log evidence of the data for
    these prototypes, so :func:`ppl_sbl.compare` ranks machines with different m (or similarity
    widths) by it, and its ARD precisions say which prototypes the data support
    (``relevant``).

    Parameters
    ----------
    result : SuperSparseResult from :func:`fit` (only its prototypes and similarity are used).
    X, y : the data; ``y`` real targets (``task="regression"``: Gaussian noise with a Gamma
        precision) or two labels -1/+1 (``task="classification"``: Bernoulli-logit with the
        Jaakkola-Jordan bound, +1 the positive class).
    cavi_kwargs : options of :class:`ppl_sbl.CAVI` (``tol``, ``max_sweeps``, ``prune``, ...) and
        the model's hyperparameters (``a0``, ``b0``, ...), each passed where it belongs.

    Returns
    -------
    ppl_sbl.CAVIResult
    """
    from ppl_sbl.inference import CAVI
    from ppl_sbl.models import rvm

    if not isinstance(result, SuperSparseResult):
        raise ValueError(f"`result` must be a SuperSparseResult from fit(); got {type(result).__name__}.")
    if task not in ("regression", "classification"):
        raise ValueError(f"`task` must be 'regression' or 'classification'; got {task!r}.")
    X = check_matrix("X", X)
    y = check_targets("y", y, X.shape[0], rows_name="X")
    Phi = np.column_stack([result.similarities(X), np.ones(X.shape[0])])
    options = {f.name for f in dataclasses.fields(CAVI)} - {"model", "guide"}
    engine = {k: v for k, v in cavi_kwargs.items() if k in options}
    cavi_kwargs = {k: v for k, v in cavi_kwargs.items() if k not in options}
    if task == "classification":
        labels = np.unique(y)
        if not set(labels.tolist()) <= {-1.0, 1.0}:
            raise ValueError(f"`y` must be coded -1/+1 for task='classification'; got the values {labels[:5]}.")
        return CAVI(rvm.classification, **engine).run(Phi, (y > 0).astype(np.float64), **cavi_kwargs)
    return CAVI(rvm.regression, **engine).run(Phi, y, **cavi_kwargs)


def evidence_over_m(X, y, *, grid=(10, 8, 6, 4, 2, 1), task="regression", cavi_kwargs=None, **fit_kwargs):
    """m chosen by evidence instead of by a validation set: the prototypes for each m of ``grid``
    by the incremental procedure of (8) (:func:`fit` with the largest m, then :func:`prune`),
    each scored by :func:`evidence`. Returns ``({m: CAVIResult}, {m: SuperSparseResult})``; pass
    the first to :func:`ppl_sbl.compare` for the table ranked by ELBO."""
    fits, scores = {}, {}
    for m, result in _incremental(X, y, grid, fit_kwargs):
        fits[m] = result
        scores[m] = evidence(result, X, y, task=task, **(cavi_kwargs or {}))
    return scores, fits
