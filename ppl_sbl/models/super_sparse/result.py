"""The result of a super-sparse fit: the machine ``f(x) = sum_j beta_j s(x, c_j) + b`` (1)."""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax.numpy as jnp
import numpy as np

from ppl_sbl.portable import Saveable
from ppl_sbl.validation import check_matrix

from .similarity import similarity_matrix, similarity_numpy

__all__ = ["SuperSparseResult"]


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
            return similarity_numpy(X_new, self.prototypes, self.similarity, self.gamma)
        return np.asarray(similarity_matrix(jnp.asarray(X_new), jnp.asarray(self.prototypes), self.similarity,
                                            self.gamma))

    def decision_function(self, X_new):
        """``f(x)`` (1) at the rows of ``X_new``, (n_new,)."""
        return self.similarities(X_new) @ self.beta + self.b

    predict = decision_function


# saved results (ppl_sbl.saving) and pickles name the class by the package, which re-exports it:
# ``ppl_sbl.models.super_sparse:SuperSparseResult``, whichever file of the package defines it
SuperSparseResult.__module__ = "ppl_sbl.models.super_sparse"
