"""The passes of the fast schedule (:func:`ppl_sbl.fast_ard.schedule`), shared by the coefficients'
state and the groups' (:mod:`ppl_sbl.fast_ard.groups`): the best move at a time, the re-estimates'
polish, the likelihood factor's update between passes and the extrapolation of its tail, and the
stopping rule."""
from __future__ import annotations

import math

import numpy as np

from .factors import weights_change

__all__ = ["ADD", "MOVES_PER_COEFFICIENT", "REESTIMATE", "UPDATE", "Extrapolation", "run_passes"]

ADD, REESTIMATE, UPDATE = 0, 1, 2  # the trace events of a fit: a coefficient added, re-estimated, the factor updated

# a pass makes at most this many moves per coefficient (M; per output with several), so that
# ``max_passes`` bounds the work of a fit
MOVES_PER_COEFFICIENT = 10


def run_passes(work, factor, tol, max_passes, max_moves, progress, per_pass):
    """The passes of :func:`schedule` on a schedule's state ``work`` (the coefficients' one,
    :class:`_Schedule`, or the groups' of :mod:`ppl_sbl.fast_ard.groups`: ``held``, ``settle``,
    ``best_move(floor)``, ``polish(budget)``, ``add``, ``reestimate``, ``moments()``,
    ``set_factor()``, ``elbo()``, ``result(...)``): in each, the best move above tol |ELBO| at a
    time and, where none is left, the re-estimates below that floor, until neither moves or the pass
    has made ``per_pass`` moves; then the likelihood factor's update; the stopping rule of
    :func:`schedule`. Returns ``work.result(trace, events, moves, passes, converged)``."""
    max_moves = np.inf if max_moves is None else int(max_moves)
    work.settle = math.sqrt(tol)
    extrapolate = Extrapolation(work, factor) if getattr(factor, "extrapolates", False) else None
    value = work.elbo()
    trace, events = [value], []
    moves, passes, converged = 0, 0, False
    while passes < int(max_passes):
        passes += 1
        start, first = value, moves
        work.held[:] = False
        while moves < max_moves and moves - first < per_pass:
            move = work.best_move(tol * max(1.0, abs(value)))
            if move is None:
                gains = work.polish(min(max_moves - moves, per_pass - (moves - first)))
                if not gains:
                    break
                moves += len(gains)
                for gain in gains:
                    value += gain
                    trace.append(value)
                    events.append(REESTIMATE)
                continue
            kind, k, target, gain = move
            if not (work.add if kind == ADD else work.reestimate)(k, target):
                work.held[k] = True
                continue
            moves += 1
            value += gain
            trace.append(value)
            events.append(kind)
        before = factor.weights()
        factor.update(work.moments())
        work.set_factor()
        value = work.elbo()
        trace.append(value)
        events.append(UPDATE)
        if extrapolate is not None:
            gain = extrapolate(value)
            if gain:
                value += gain
                trace.append(value)
                events.append(UPDATE)
        if progress is not None:
            progress(passes, moves, value, work.K)
        if moves >= max_moves:
            break
        if (moves == first and abs(value - start) <= tol * abs(value)
                and weights_change(before, factor.weights()) <= math.sqrt(tol)):
            release = getattr(factor, "release", None)
            if release is not None and release():
                continue
            converged = True
            break
    return work.result(trace, events, moves, passes, converged)


class Extrapolation:
    """Where the likelihood factor's parameters v (the JJ bound's xi, the robust weights' rates)
    converge linearly from pass to pass (v_p - v* ~ r^p: the coupling of the factor and the
    precisions, which the passes alternate), the tail of that sequence at once: after four
    passes that ended with the same active set, with steps d_i = v_i - v_{i-1} all aligned and
    ratios r = |d_p| / |d_{p-1}| that agree over the last two steps (to ``RATE_AGREEMENT``, r <
    ``MAX_RATE``: a geometric tail), the step v_p + d_p r / (1 - r) (Aitken's, on the whole vector),
    kept only where the ELBO after it (q(w) and the frozen precisions at their optimum for the new
    factor) is higher than before; where it is not (the rate still drifts, and the full step
    overshoots), the step shortened by ``SHORTEN`` at a time, down to d_p itself; where none gains,
    the factor is put back. Either way the passes go on from
    there, so the ELBO never falls and the fit ends at a fixed point of the passes; the path to it
    differs from the plain alternation's, and where the greedy passes have several fixed points
    within reach it can end at another one."""

    MAX_RATE = 0.9999  # an extrapolated step is at most 10^4 times the last step d
    RATE_AGREEMENT = 0.05  # the last two ratios agree to this share: the tail is geometric
    SHORTEN = 0.5  # a step that lowers the ELBO is tried again this much shorter, down to one step d

    def __init__(self, work, factor):
        self.work, self.factor = work, factor
        self.history = []

    def __call__(self, value):
        """After a pass's factor update, at ELBO ``value``. Returns the ELBO gain of an extrapolation
        kept, else 0."""
        work, factor = self.work, self.factor
        current = factor.parameters()
        key = (tuple(np.sort(np.asarray(work.active)).tolist()), current.shape[0])
        if self.history and self.history[-1][0] != key:
            self.history = []
        self.history.append((key, current, value))
        if len(self.history) < 4:
            return 0.0
        points = [v for _, v, _ in self.history[-4:]]
        value = self.history[-1][2]
        steps = [b - a for a, b in zip(points, points[1:])]
        norms = [float(np.linalg.norm(step)) for step in steps]
        self.history = self.history[-3:]
        if not (min(norms) > 0 and all(float(a @ b) > 0 for a, b in zip(steps, steps[1:]))):
            return 0.0
        rates = norms[1] / norms[0], norms[2] / norms[1]
        rate = rates[1]
        if not (rate < self.MAX_RATE and abs(rates[1] - rates[0]) <= self.RATE_AGREEMENT * rate):
            return 0.0
        self.history = self.history[-1:]
        new, d = points[-1], steps[-1]
        length = rate / (1.0 - rate)
        while length >= 1.0:
            factor.set_parameters(new + d * length)
            work.set_factor()
            gain = work.elbo() - value
            if gain > 0:
                self.history = []
                return gain
            length *= self.SHORTEN
        factor.set_parameters(new)
        work.set_factor()  # the active precisions did not move: the state is the one before
        return 0.0
