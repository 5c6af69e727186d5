"""Training the super-sparse machine: the beta-step (4) alternated with gradient steps on the
prototypes (5)-(6), with the repulsion penalty and the black-box rule (7)."""
from __future__ import annotations

import math
import time

import jax.numpy as jnp
import numpy as np

from .checks import check_inputs, check_int_in, check_positive
from .gradients import direction_prototype_gradient, direction_repulsion_gradient
from .program import beta_step_jit
from .result import SuperSparseResult
from .similarity import check_similarity, is_traceable, similarity_numpy
from .steps import evaluate_jit, jax_step, numpy_step

__all__ = ["fit", "GRADIENTS"]

GRADIENTS = ("auto", "autodiff", "analytic", "direction")
_TINY = 1e-300


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
    similarity = check_similarity(similarity)
    X, y, m, v, init = check_inputs(X, y, m, sample_weight, init)
    gamma = check_positive("gamma", gamma)
    lam = check_positive("lam", lam)
    tol = check_positive("tol", tol, allow_zero=True)
    repulsion = check_positive("repulsion", repulsion, allow_zero=True)
    max_steps = check_int_in("max_steps", max_steps, 0, 10**9, "Pass a non-negative number of steps.")
    if step_size is not None:
        step_size = check_positive("step_size", step_size)
    C = _initial_prototypes(X, m, seed) if init is None else init.copy()
    C0 = C.copy()
    mode = _resolve_gradient(gradient, similarity, X, C)
    numpy_path = mode == "direction"

    if numpy_path:
        S = similarity_numpy(X, C, similarity, gamma)
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
            return numpy_step(C, Xa, ya, va, lam, gamma, coef, eta, similarity)
        out = jax_step(jnp.asarray(C), Xa, ya, va, lam, gamma, coef, eta, spread, similarity, mode)
        return (np.asarray(out[0]), *(float(a) for a in out[1:6]), bool(out[6]))

    if step_size is not None:
        eta = step_size
    elif numpy_path:
        g = direction_prototype_gradient(C, X, y, v, lam, gamma, similarity)
        if repulsion > 0:
            g = g + repulsion * scale * direction_repulsion_gradient(C, similarity_numpy(C, C, similarity, gamma))
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
        S = similarity_numpy(X, C, similarity, gamma)
        beta, b = (np.asarray(a) for a in beta_step_jit(jnp.asarray(S), jnp.asarray(y), jnp.asarray(v), lam))
        final = float(np.sum(v * (y - S @ beta - b) ** 2) / len(y) + lam * beta @ beta)
    else:
        beta, b, final = (np.asarray(a) for a in evaluate_jit(jnp.asarray(C), Xa, ya, va, lam, gamma, similarity))
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
