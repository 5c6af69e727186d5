"""Several outputs of the fast schedule (:func:`ppl_sbl.fast_ard.schedule` with a factor that has
``num_outputs``): the result type, one output of the factor as a single-output factor, the
Newton step on the outputs' means, and the passes over the outputs (:func:`schedule_outputs`)."""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import scipy.linalg

from .passes import ADD, MOVES_PER_COEFFICIENT, UPDATE

__all__ = ["NEWTON", "MultiFastFit", "OutputFactor", "newton_locations", "schedule_outputs"]

NEWTON = 3  # a trace event of the schedule with several outputs: an accepted second-order step


class MultiFastFit(NamedTuple):
    """The result of :func:`ppl_sbl.fast_ard.schedule` for a factor with several outputs.

    fits: one :class:`ppl_sbl.fast_ard.FastFit` per output (its own active set, q(w_c), E[alpha]
    and supported flags; each carries the shared ELBO trace, ``num_moves`` its own moves);
    elbo_trace the ELBO at the start, after every move of any output, after every update of the
    factor and after every accepted Newton step; trace_events (ADD, REESTIMATE, UPDATE, NEWTON) and trace_outputs
    (the output each move belongs to, -1 for the others), both of length len(elbo_trace) - 1;
    num_moves; num_passes; converged.

    ``x`` (M, C), and ``active`` and ``supported`` (the outputs' concatenated), so that
    ``active[supported]`` lists every coefficient some output's data support.
    """

    fits: tuple
    elbo_trace: np.ndarray
    trace_events: np.ndarray
    trace_outputs: np.ndarray
    num_moves: int
    num_passes: int
    converged: bool

    @property
    def elbo(self):
        return float(self.elbo_trace[-1])

    @property
    def x(self):
        return np.stack([f.x for f in self.fits], axis=1)

    @property
    def active(self):
        return np.concatenate([f.active for f in self.fits])

    @property
    def supported(self):
        return np.concatenate([f.supported for f in self.fits])


class OutputFactor:
    """Output c of a factor with several outputs as a single-output factor of the schedule:
    ``uniform`` and ``weights()`` = the factor's ``weights(c)``."""

    def __init__(self, factor, c):
        self.uniform = bool(factor.uniform)
        self._factor, self._c = factor, c

    def weights(self):
        return self._factor.weights(self._c)


def newton_locations(works, gradient, hessian, scale):
    """The Newton step for the profiled objective L(mu) = F(m(mu)) - 1/2 sum_c mu_c^T diag(x_c) mu_c
    over every output's active coefficients (E[alpha] held, q(w) means mu_c at ``scale`` times the
    current ones, m_c = Phi_{A_c} mu_c), from the factor's gradient (N, C) and Hessian (N, C, C) of F
    with respect to m: returns the means m' (N, C) of the step's end."""
    blocks = [w.A[:, :w.K] for w in works]
    means = [scale * w.mu[:w.K] for w in works]
    precisions = [w.x[w.active] for w in works]
    offsets = np.cumsum([0] + [w.K for w in works])
    D = int(offsets[-1])
    grad = np.zeros(D)
    hess = np.zeros((D, D))
    for c, (A, mu, x) in enumerate(zip(blocks, means, precisions)):
        rows = slice(offsets[c], offsets[c + 1])
        grad[rows] = A.T @ gradient[:, c] - x * mu
        for d in range(c, len(works)):
            cols = slice(offsets[d], offsets[d + 1])
            block = A.T @ (hessian[:, c, d][:, None] * blocks[d])
            hess[rows, cols] = block
            hess[cols, rows] = block.T
        hess[rows, rows] -= np.diag(x)
    # -hess = diag(x) + sum_n J_n^T (-d2F/dm2) J_n is positive definite where F is concave
    step = scipy.linalg.solve(-hess, grad, assume_a="pos")
    return np.stack([A @ (mu + step[offsets[c]:offsets[c + 1]]) for c, (A, mu) in enumerate(zip(blocks, means))],
                    axis=1)


def _set_factors(works, factor):
    """set_factor of every output; with a uniform factor the projections Phi^T (r_c / W_c) of all
    outputs come from one product with the design (the outputs' caches are filled with them)."""
    if factor.uniform and works:
        targets = []
        for c, work in enumerate(works):
            W, r = factor.weights(c)
            targets.append(r / float(W[0]))
        targets = np.stack(targets, axis=1)
        projected = works[0].Phi.T @ targets
        for c, work in enumerate(works):
            work._target = (targets[:, c], projected[:, c])
    for work in works:
        work.set_factor()


def schedule_outputs(Phi, factor, a0, b0, tol, max_passes, max_moves, progress, exact, state):
    """:func:`schedule` for C outputs: C coefficient vectors w_c on the design ``Phi``, each with its
    ARD prior, its restricted family (active set, frozen coefficients) and its own buffers, and a
    likelihood factor that, held fixed, is quadratic in each w_c separately:

        E ln p = sum_c ( -1/2 w_c^T Phi^T diag(W_c) Phi w_c + r_c^T Phi w_c ) + const.

    The factor has ``num_outputs`` = C, ``uniform``, ``weights(c)`` -> (W_c, r_c),
    ``update(moments)`` and ``elbo_terms(moments)`` with ``moments`` the list of the outputs'
    :class:`Moments`. Given the factor the ELBO is a sum over the outputs, so each output's moves
    (in turn, each to exhaustion) change it by exactly their gains; between passes the factor
    updates itself given every output's q(w_c), and each output's q(w_c), statistics and frozen
    q(alpha) are recomputed for its new (W_c, r_c). Every step is a coordinate ascent step of the
    restricted-family ELBO. ``max_moves`` counts the moves of all outputs (default: no limit but
    ``max_passes``; in a pass each output makes at most ``MOVES_PER_COEFFICIENT`` M moves).

    Two optional accelerations of the factor's update, for a factor whose own latent variables v
    make the alternation of q(v) and q(w) slow (the multinomial probit's auxiliary y: an EM-like
    iteration, thousands of passes on separable data):

    * Parameter expansion. A factor whose model is invariant under (w, v) -> (c w, c v) but for a
      unit-variance Gaussian noise term may have ``expansion(moments, alpha_sum, num_coefficients,
      a0, b0)`` -> z: the z = c^2 > 0 at which the transformed q (w -> c w and alpha -> alpha / z
      for every coefficient of every output, v -> c v) has the largest ELBO, an exact gain over q
      in closed form. The schedule then divides every E[alpha] by z and calls ``update(moments,
      scale=c, curvature=...)``, the factor's coordinate update given the transformed q(w) (whose
      means are c times the moments'); q(w)'s updates follow, and each step only adds to the gain
      (PX-VB, Qi & Jaakkola 2006; PX-EM, Liu, Rubin & Wu 1998).
    * Newton steps. With E[alpha] and the active sets held, and the factor's q(v) at its optimum
      given q(w), the ELBO is a function of the means mu_c alone, L(mu) = F(m) - 1/2 sum_c
      mu_c^T diag(E[alpha_c]) mu_c + const (m_c = Phi mu_c; q(w)'s covariances are optimal
      whatever the means); the plain update is one EM step on it. A factor with ``curvature()``
      -> (dF/dm (N, C), d2F/dm_n^2 (N, C, C)) at the point of its last update (made with
      ``curvature=True``), ``relocate(m)`` (its update for means m), ``snapshot()`` and
      ``restore(state)`` gets, on every pass that added no coefficient, a Newton step on L from
      the plain update's point: the factor relocated to the step's end, q(w) updated, the result
      kept only if its ELBO is at least the plain update's (event NEWTON in the trace), else the
      plain update restored. While coefficients are being added the plain path is kept: Newton
      steps from a small model jump to its optimum and can leave later coefficients unsupported,
      ending in a lower local optimum.
    """
    C = int(factor.num_outputs)
    if C < 1:
        raise ValueError(f"`factor.num_outputs` must be >= 1; got {factor.num_outputs!r}.")
    M = Phi.shape[1]
    max_moves = np.inf if max_moves is None else int(max_moves)
    expansion = getattr(factor, "expansion", None)
    second_order = getattr(factor, "curvature", None) is not None
    works = [state(Phi, OutputFactor(factor, c), a0, b0, exact) for c in range(C)]

    def total():
        return factor.elbo_terms([w.moments() for w in works]) + sum(w.prior_terms() for w in works)

    value = total()
    trace, events, outputs = [value], [], []
    moves, passes, converged = 0, 0, False
    own_moves = [0] * C
    per_pass = MOVES_PER_COEFFICIENT * M
    while passes < int(max_passes):
        passes += 1
        start = value
        added = False
        for c, work in enumerate(works):
            work.held[:] = False
            first = moves
            while moves < max_moves and moves - first < per_pass:
                move = work.best_move(tol * max(1.0, abs(value)))
                if move is None:
                    break
                kind, k, target, gain = move
                if not (work.add if kind == ADD else work.reestimate)(k, target):
                    work.held[k] = True
                    continue
                added |= kind == ADD
                moves += 1
                own_moves[c] += 1
                value += gain
                trace.append(value)
                events.append(kind)
                outputs.append(c)
        moments = [w.moments() for w in works]
        newton = second_order and not added and any(w.K for w in works)
        scale = 1.0
        if expansion is not None:
            z = expansion(moments, sum(float(np.sum(w.x)) for w in works), M * C, a0, b0)
            for work in works:
                work.x /= z
            scale = math.sqrt(z)
            factor.update(moments, scale=scale, curvature=newton)
        elif second_order:
            factor.update(moments, curvature=newton)
        else:
            factor.update(moments)
        proposal = newton_locations(works, *factor.curvature(), scale) if newton else None
        _set_factors(works, factor)
        value = total()
        trace.append(value)
        events.append(UPDATE)
        outputs.append(-1)
        if proposal is not None:
            plain = factor.snapshot()
            factor.relocate(proposal)
            _set_factors(works, factor)
            stepped = total()
            if stepped >= value:
                value = stepped
                trace.append(value)
                events.append(NEWTON)
                outputs.append(-1)
            else:
                factor.restore(plain)
                _set_factors(works, factor)
        if progress is not None:
            progress(passes, moves, value, sum(w.K for w in works))
        if abs(value - start) <= tol * abs(value):
            converged = True
            break
    fits = tuple(w.result(trace, events, own_moves[c], passes, converged) for c, w in enumerate(works))
    return MultiFastFit(fits=fits, elbo_trace=np.asarray(trace), trace_events=np.asarray(events, dtype=int),
                        trace_outputs=np.asarray(outputs, dtype=int), num_moves=moves, num_passes=passes,
                        converged=converged)
