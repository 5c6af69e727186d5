"""Choosing the number of prototypes m by (8) with the incremental procedure (:func:`prune`,
:func:`select_m`), or by evidence (:func:`evidence`, :func:`evidence_over_m`), and reducing a
trained kernel machine (:func:`fit_to_decision_values`)."""
from __future__ import annotations

import dataclasses

import numpy as np

from ppl_sbl.validation import check_matrix, check_targets

from .checks import check_int_in, check_positive
from .fit import fit
from .result import SuperSparseResult

__all__ = ["prune", "select_m", "fit_to_decision_values", "evidence", "evidence_over_m"]


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
    m_new = check_int_in("m_new", m_new, 1, result.m, f"Keep between 1 and the {result.m} prototypes of `result`.")
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
    mu = check_positive("mu", mu, allow_zero=True)
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
        the model's hyperparameters (``a0``, ``b0``, ...), each passed where it belongs. The fit is
        the sweep (``schedule="sweep"``: the dense fixed point, every prototype in the model)
        unless ``schedule`` is given.

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
    engine = {"schedule": "sweep", **{k: v for k, v in cavi_kwargs.items() if k in options}}
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
