"""The state of the sequential SBL, :class:`SBLState`: the data, the fitted model and what the
moves and the online updates need to go on; and the predictive distribution at new points,
:func:`predict` (eq. (1) of Faul & Pilikos).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional

import numpy as np

from ppl_sbl.result import ResultMethods
from ppl_sbl.portable import Saveable

from .algebra import rank_one
from .design import design_rows, point_rows
from .program import guide, model

__all__ = ["SBLState", "predict"]


@dataclasses.dataclass
class SBLState(ResultMethods, Saveable):
    """The state of the sequential SBL: everything :func:`fit`, :func:`add_sample` and
    :func:`add_basis` need to go on, and the fitted model.

    Attributes
    ----------
    dictionary : ppl_sbl.basis.Dictionary
        The candidate functions at P points (for a plain design matrix, P = N and the points are
        the samples).
    rows : (N,) int
        The point of each sample (-1: a sample added by value, see ``extra_rows``).
    y : (N,)
    extra_rows : (E, M) array
        Dictionary rows of the samples added by value (``rows == -1``, in order).
    noise_var : float
    active : (K,) int
        The functions in the model, in the order of ``mu`` and ``Sigma``.
    alpha : (M,)
        Precisions; inf for the functions out of the model.
    mu, Sigma : (K,), (K, K)
        The posterior of the active coefficients.
    S, Q : (M,)
        Sparsity and quality factors d_m^T C^-1 d_m and d_m^T C^-1 y of every function.
    log_marginal_likelihood : float
        L for the current alpha and sigma^2 (exact: recomputed from the Gram matrix of the active
        functions at the end of a fit; after :func:`add_sample`, the old L plus delta_L).
    trace : list of float
        L after every move (the first entry: the model with no function).
    moves : list of (str, int)
        ("add" | "update" | "delete" | "noise", function index or -1; "sample", point or -1).
    trace_seconds : list of float
        Seconds since the start of the last :func:`fit`/:func:`resume` at each entry of the
        trace it added.
    refresh_drift : list of (int, float)
        At each exact refresh (see :func:`resume`): the move count and how far the L accumulated
        from the moves' gains had drifted from L recomputed from scratch (rounding of the rank-one
        updates; large only for ill-conditioned dictionaries).
    rollbacks : list of (int, float)
        Each time an exact refresh found L below the best exact L of the fit by more than the
        rounding of the two evaluations (moves chosen on drifted statistics): the move count and by
        how much; those moves were undone (see :func:`resume`).
    converged : bool
    stop_reason : str
        "practical" (the default rule: no significant move, see :func:`resume`), "tolerance" (with
        ``tol``: the largest gain is at most tol * max(1, |L|)), "rounding" (it is below the
        rounding level of the updated statistics, see :func:`resume`), "max_steps", or
        "ill-conditioned" (not converged: the exact statistics of some function are NaN, an
        active function nearly collinear with others on an ill-conditioned dictionary).
    """

    dictionary: Any
    rows: np.ndarray
    y: np.ndarray
    extra_rows: np.ndarray
    noise_var: float
    active: np.ndarray
    alpha: np.ndarray
    mu: np.ndarray
    # Sigma is held as a matrix and the rank-one corrections (coef, x) of the samples added since
    # (Sigma = _sigma + sum coef x x^T), formed on first use: add_sample then costs O(K) per
    # pending correction instead of a K x K copy
    _sigma: np.ndarray
    S: np.ndarray
    Q: np.ndarray
    log_marginal_likelihood: float
    trace: list
    moves: list
    converged: bool = False
    stop_reason: str = ""
    trace_seconds: list = dataclasses.field(default_factory=list)
    refresh_drift: list = dataclasses.field(default_factory=list)
    rollbacks: list = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    # cached statistics: D^T y and the sum of y^2
    Dty: Optional[np.ndarray] = None
    yty: float = 0.0
    _sigma_updates: tuple = ()

    _MAX_PENDING = 64  # corrections held before add_sample forms Sigma

    @property
    def Sigma(self):
        """(K, K): the posterior covariance of the active coefficients."""
        if self._sigma_updates:
            out = np.array(self._sigma)  # the earlier states share _sigma: never modify it
            self.sigma_into(out)
            self._sigma, self._sigma_updates = out, ()
        return self._sigma

    def sigma_into(self, out):
        """Write Sigma into ``out`` (K, K), applying the pending corrections."""
        if out is not self._sigma:
            out[...] = self._sigma
        for coef, x in self._sigma_updates:
            rank_one(out, coef, x)

    def sigma_matvec(self, v, nz=None):
        """Sigma v without forming Sigma (``nz``: the nonzeros of v, if few)."""
        if nz is None:
            out = self._sigma @ v
        else:
            out = self._sigma[:, nz] @ v[nz]
        for coef, x in self._sigma_updates:
            out = out + coef * x * float(x @ v)
        return out

    def replace(self, *, Sigma=None, sigma_correction=None, **changes):
        """A copy with the fields ``changes`` (as :func:`dataclasses.replace`) and Sigma given
        whole (``Sigma``, held as it is) or as this state's Sigma plus coef x x^T
        (``sigma_correction`` = (coef, x)), held pending until more than ``_MAX_PENDING`` are."""
        if Sigma is not None:
            changes.update(_sigma=Sigma, _sigma_updates=())
        elif sigma_correction is not None:
            updates = self._sigma_updates + (sigma_correction,)
            sigma = self._sigma
            if len(updates) > self._MAX_PENDING:
                sigma = np.array(self._sigma)
                for coef, x in updates:
                    rank_one(sigma, coef, x)
                updates = ()
            changes.update(_sigma=sigma, _sigma_updates=updates)
        return dataclasses.replace(self, **changes)

    # the shared result interface (``compare``, ``check_guide``) ------------------------------
    @property
    def num_samples(self):
        return len(self.y)

    @property
    def elbo(self):
        """The ELBO of the exact guide: the log marginal likelihood."""
        return self.log_marginal_likelihood

    @property
    def elbo_exact(self):
        return None

    bound = "none"

    @property
    def relevant(self):
        return np.isfinite(self.alpha)

    @property
    def effective_parameters(self):
        """sum_k 1 - alpha_k Sigma_kk (well-determined parameters)."""
        return float(np.sum(1.0 - self.alpha[self.active] * np.diag(self.Sigma)))

    @property
    def elbo_trace(self):
        return np.asarray(self.trace)

    @property
    def program(self):
        return model

    @property
    def model(self):
        """The NumPyro program (:func:`model`); the same as ``program``."""
        return model

    @property
    def guide(self):
        """:func:`guide` with this state's mu and Sigma."""
        return functools.partial(guide, mu=self.mu, Sigma=self.Sigma)

    @property
    def args(self):
        return (design_rows(self, np.arange(self.num_samples))[:, self.active], self.y)

    @property
    def kwargs(self):
        return {"alpha": self.alpha[self.active], "noise_var": self.noise_var}

    def check_guide(self, num_particles=100, seed=0, num_se=4.0, rtol=1e-8):
        """:func:`ppl_sbl.check_guide`: NumPyro's Monte Carlo ``Trace_ELBO`` of :func:`model` and
        :func:`guide` against L. Every draw gives L exactly (the guide is the exact posterior), so
        they must agree to ``rtol`` relative."""
        return super().check_guide(num_particles=num_particles, seed=seed, num_se=num_se, rtol=rtol)

    inference = "type-II maximum likelihood (fast marginal likelihood), exact Gaussian guide"

    def sample(self, key, num_samples):
        """Draws of the active coefficients from q(c) = N(mu, Sigma): {"c": (num_samples, K)}."""
        import jax

        draws = jax.random.multivariate_normal(key, self.mu, self.Sigma, shape=(int(num_samples),),
                                               method="eigh")
        return {"c": np.asarray(draws)}

    def predict(self, rows):
        """Predictive mean and variance at dictionary points or rows, eq. (1)."""
        return predict(self, rows)


# saved files and pickles name the class by ``module:qualname``; the package re-exports it, and files
# saved before the package was split into modules name it there
SBLState.__module__ = "ppl_sbl.models.sequential_sbl"


def predict(state: SBLState, rows):
    """The predictive N(m*, sigma*^2) of eq. (1) at dictionary points (int indices) or rows
    ((k, M) array): m* = d_a^T mu, sigma*^2 = sigma^2 + d_a^T Sigma d_a. Returns (mean, var)."""
    R = point_rows(state, rows)[:, state.active]
    mean = R @ state.mu
    var = state.noise_var + np.sum((R @ state.Sigma) * R, axis=1)
    return mean, var
