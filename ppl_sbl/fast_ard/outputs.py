"""Several outputs of the fast schedule (:func:`ppl_sbl.fast_ard.schedule` with a factor that has
``num_outputs``): the result type, one output of the factor as a single-output factor, and the
Newton step on the outputs' means."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.linalg

__all__ = ["NEWTON", "MultiFastFit", "OutputFactor", "newton_locations"]

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
