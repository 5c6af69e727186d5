"""Super-sparse machines with learned virtual prototypes (Biggio et al.).

A discriminant (or regression function) that needs only ``m`` similarity evaluations per point,
against ``m`` *virtual* prototypes learned jointly with the coefficients. Equation numbers are
those of Biggio et al.'s paper on super-sparse learning::

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

The package, each file one part:

* :mod:`.similarity`: the similarities, :func:`similarity_matrix`, :func:`is_traceable`;
* :mod:`.program`: the NumPyro :func:`model`, the beta-step (4) :func:`beta_step`, :func:`objective` (2);
* :mod:`.gradients`: the prototype gradients (5)-(7) and the repulsion penalty;
* :mod:`.steps`: one c-step, jitted or with rule (7);
* :mod:`.checks`: the checks of the arguments;
* :mod:`.result`: :class:`SuperSparseResult`;
* :mod:`.fit`: :func:`fit`;
* :mod:`.selection`: :func:`prune`, :func:`select_m`, :func:`fit_to_decision_values`,
  :func:`evidence`, :func:`evidence_over_m`.
"""
from .fit import GRADIENTS, fit
from .gradients import direction_prototype_gradient, prototype_gradient, rbf_prototype_gradient, repulsion_penalty
from .program import beta_step, model, objective
from .result import SuperSparseResult
from .selection import evidence, evidence_over_m, fit_to_decision_values, prune, select_m
from .similarity import is_traceable, similarity_matrix

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
