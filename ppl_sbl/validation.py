"""Input checks shared by models, guides, estimators and the CLI.

Every check raises ``ValueError`` naming the argument and saying how to fix it. Arrays must hold
numbers (booleans count as 0 and 1): strings are refused, also ones that read as numbers such as
"1", and so are dates, complex numbers and other objects, with the dtype found in the message.
The models' labels are numbers (0/1, or 0, ..., C-1); the scikit-learn estimators
(:mod:`ppl_sbl.estimators`) take any labels, as scikit-learn does.
"""
from __future__ import annotations

import numbers

import numpy as np

__all__ = ["check_numeric", "check_matrix", "check_targets", "check_binary", "check_positive", "check_design", "ConvergenceWarning",
           "warn_unconverged"]


class ConvergenceWarning(UserWarning):
    """A fit stopped by its iteration cap before its convergence test held."""


def warn_unconverged(what, cap, name="max_sweeps", stacklevel=3):
    """Warn that ``what`` stopped at its cap ``name`` = ``cap`` before converging."""
    import warnings

    warnings.warn(f"{what} stopped at {name}={cap} before converging; the result is not the fixed point: raise "
                  f"{name} (or loosen tol) to go on.", ConvergenceWarning, stacklevel=stacklevel)


def _example(arr, test):
    """The first entry of ``arr`` for which ``test`` holds, as text for a message."""
    for x in arr.ravel():
        if test(x):
            return repr(x)
    return ""


def _not_a_number(x):
    try:
        float(x)
    except (TypeError, ValueError):
        return True
    return False


def _as_float_array(name, value, *, text_fix=None):
    """``value`` as a float64 array. Numbers and booleans are accepted; strings (even ones that
    read as numbers, such as "1"), dates, time differences, complex numbers, structured records
    and objects that are not numbers raise a ValueError naming the dtype found and the fix
    (``text_fix``: the fix for strings, where the caller has a better one than converting them)."""
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError) as err:  # e.g. ragged nested lists
        raise ValueError(f"`{name}` must be a numeric array; got a {type(value).__name__} that NumPy cannot make "
                         f"into one array ({err}). Pass a rectangular array of numbers.") from err
    kind, dtype = raw.dtype.kind, raw.dtype
    strings_fix = text_fix or (f"Convert it with np.asarray({name}, dtype=float) if its entries are numbers "
                               "written as text.")
    problem = fix = None
    if kind in "US":
        problem, fix = f"dtype {dtype} (strings)", strings_fix
    elif kind == "O" and any(isinstance(x, (str, bytes)) for x in raw.ravel()):
        example = _example(raw, lambda x: isinstance(x, (str, bytes)))
        problem, fix = f"dtype object holding strings (e.g. {example})", strings_fix
    elif kind in "Mm":
        what = "dates and times" if kind == "M" else "time differences"
        problem = f"dtype {dtype} ({what})"
        fix = (f"Convert it to numbers first, e.g. ({name} - {name}.min()) / np.timedelta64(1, 'D') for days."
               if kind == "M" else f"Convert it to numbers first, e.g. {name} / np.timedelta64(1, 's') for seconds.")
    elif kind == "c":
        problem = f"dtype {dtype} (complex numbers)"
        fix = (f"Pass np.real({name}) if the imaginary parts are zero, or the real and imaginary parts as separate "
               "real numbers.")
    elif kind == "V":
        problem, fix = f"dtype {dtype} (structured records)", "Pass the numeric fields as one plain array."
    if problem is not None:
        raise ValueError(f"`{name}` must be a numeric array; got {problem}. {fix}")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:  # an object array holding something other than numbers
        raise ValueError(f"`{name}` must be a numeric array; got dtype {dtype} holding non-numeric entries "
                         f"(e.g. {_example(raw, _not_a_number)}). Convert its entries to numbers.") from err
    return arr


def check_numeric(name, value):
    """``value`` as a float64 array of any shape: numbers or booleans, else a ValueError naming the
    dtype found and the fix (see :func:`check_matrix`). Finiteness is not checked."""
    return _as_float_array(name, value)


def _check_finite(name, arr):
    if not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.sum(np.isfinite(arr)))
        raise ValueError(
            f"`{name}` contains {bad} NaN or infinite value(s); remove or impute them before fitting."
        )


def check_matrix(name, value, *, ndim=2, min_rows=1):
    """A finite float64 array with ``ndim`` dimensions and at least ``min_rows`` rows (numbers or
    booleans: strings, dates, complex numbers and other objects are refused, naming the dtype)."""
    arr = _as_float_array(name, value)
    if arr.ndim != ndim:
        hint = " (reshape a single feature with X.reshape(-1, 1))" if ndim == 2 and arr.ndim == 1 else ""
        raise ValueError(f"`{name}` must be {ndim}-dimensional; got shape {arr.shape}{hint}.")
    if arr.shape[0] < min_rows or arr.size == 0:
        raise ValueError(f"`{name}` is empty (shape {arr.shape}); pass at least {min_rows} row(s) and one column.")
    _check_finite(name, arr)
    return arr


def check_targets(name, value, num_rows, *, rows_name="Phi", text_fix=None):
    """A finite 1-d float64 vector with ``num_rows`` entries (numbers or booleans: strings are
    refused, ``text_fix`` the fix the error suggests for them)."""
    arr = _as_float_array(name, value, text_fix=text_fix)
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


LABELS_FIX = ("Map the labels to numbers yourself, e.g. t = (labels == positive_label).astype(float), or use "
              "ppl_sbl.RVC, which takes any labels (strings included) and keeps them in `classes_`.")


def check_binary(name, value, num_rows, *, rows_name="Phi"):
    """Labels coded 0/1 (NumPyro's Bernoulli convention): numbers (or booleans) 0 and 1 only.
    Strings are refused, also ones that read as numbers such as "0" and "1": the models take
    numeric labels, and :class:`ppl_sbl.RVC` any labels (scikit-learn's convention)."""
    arr = check_targets(name, value, num_rows, rows_name=rows_name, text_fix=LABELS_FIX)
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
