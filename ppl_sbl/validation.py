"""Input checks shared by models, guides, estimators and the CLI.

Every check raises ``ValueError`` naming the argument and saying how to fix it.
"""
from __future__ import annotations

import numbers

import numpy as np

__all__ = ["check_matrix", "check_targets", "check_binary", "check_positive", "check_design", "ConvergenceWarning",
           "warn_unconverged"]


class ConvergenceWarning(UserWarning):
    """A fit stopped by its iteration cap before its convergence test held."""


def warn_unconverged(what, cap, name="max_sweeps", stacklevel=3):
    """Warn that ``what`` stopped at its cap ``name`` = ``cap`` before converging."""
    import warnings

    warnings.warn(f"{what} stopped at {name}={cap} before converging; the result is not the fixed point: raise "
                  f"{name} (or loosen tol) to go on.", ConvergenceWarning, stacklevel=stacklevel)


def _as_float_array(name, value):
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"`{name}` must be a numeric array; got {type(value).__name__}.") from err
    return arr


def _check_finite(name, arr):
    if not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.sum(np.isfinite(arr)))
        raise ValueError(
            f"`{name}` contains {bad} NaN or infinite value(s); remove or impute them before fitting."
        )


def check_matrix(name, value, *, ndim=2, min_rows=1):
    """A finite float64 array with ``ndim`` dimensions and at least ``min_rows`` rows."""
    arr = _as_float_array(name, value)
    if arr.ndim != ndim:
        hint = " (reshape a single feature with X.reshape(-1, 1))" if ndim == 2 and arr.ndim == 1 else ""
        raise ValueError(f"`{name}` must be {ndim}-dimensional; got shape {arr.shape}{hint}.")
    if arr.shape[0] < min_rows or arr.size == 0:
        raise ValueError(f"`{name}` is empty (shape {arr.shape}); pass at least {min_rows} row(s) and one column.")
    _check_finite(name, arr)
    return arr


def check_targets(name, value, num_rows, *, rows_name="Phi"):
    """A finite 1-d float64 vector with ``num_rows`` entries."""
    arr = _as_float_array(name, value)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"`{name}` must be a 1-d vector of length {num_rows}; got shape {arr.shape}.")
    if arr.shape[0] != num_rows:
        raise ValueError(
            f"`{name}` has {arr.shape[0]} entries but `{rows_name}` has {num_rows} rows; "
            f"pass one target per row of `{rows_name}`."
        )
    _check_finite(name, arr)
    return arr


def check_binary(name, value, num_rows, *, rows_name="Phi"):
    """Labels coded 0/1 (NumPyro's Bernoulli convention)."""
    arr = check_targets(name, value, num_rows, rows_name=rows_name)
    bad = ~np.isin(arr, (0.0, 1.0))
    if np.any(bad):
        found = np.unique(arr[bad])[:5]
        raise ValueError(
            f"`{name}` must hold labels 0 or 1 (NumPyro's Bernoulli convention); found {found.tolist()}. "
            "Recode them, e.g. t = (labels == positive_label).astype(float), or use ppl_sbl.RVC, "
            "which accepts any two labels."
        )
    if arr.size and np.all(arr == arr[0]):
        raise ValueError(f"`{name}` holds only label {arr[0]:g}; a classifier needs samples of both labels 0 and 1.")
    return arr


def check_positive(name, value):
    """A finite, strictly positive scalar hyperparameter."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        try:
            value = float(np.asarray(value))
        except (TypeError, ValueError) as err:
            raise ValueError(f"`{name}` must be a positive number; got {value!r}.") from err
    value = float(value)
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"`{name}` must be a finite number > 0; got {value!r}.")
    return value


def check_design(Phi, t=None, *, binary=False, phi_name="Phi", t_name="t"):
    """Check a design matrix and optional targets; returns float64 NumPy arrays."""
    Phi = check_matrix(phi_name, Phi)
    if t is None:
        return Phi, None
    if binary:
        return Phi, check_binary(t_name, t, Phi.shape[0], rows_name=phi_name)
    return Phi, check_targets(t_name, t, Phi.shape[0], rows_name=phi_name)
