"""Checks of the arguments of the super-sparse fit: integers in a range, positive numbers, the
data, the number of prototypes, the sample weights and the initial prototypes."""
from __future__ import annotations

import math
import numbers

import numpy as np

from ppl_sbl.validation import check_matrix, check_targets

__all__ = ["check_int_in", "check_positive", "check_inputs"]


def check_int_in(name, value, low, high, fix):
    """``value`` as an int in ``[low, high]`` (an integral float is accepted); ``fix`` ends the error."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            value = int(value)
        else:
            raise ValueError(f"`{name}` must be an integer; got {value!r}.")
    value = int(value)
    if not low <= value <= high:
        raise ValueError(f"`{name}` must be between {low} and {high}; got {value}. {fix}")
    return value


def check_positive(name, value, *, allow_zero=False):
    """``value`` as a finite float ``> 0`` (``>= 0`` with ``allow_zero``)."""
    try:
        out = float(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"`{name}` must be a number; got {value!r}.") from err
    if not math.isfinite(out) or out < 0 or (out == 0 and not allow_zero):
        raise ValueError(f"`{name}` must be a finite number {'>= 0' if allow_zero else '> 0'}; got {value!r}.")
    return out


def _check_weights(sample_weight, n):
    if sample_weight is None:
        return np.ones(n)
    v = check_targets("sample_weight", sample_weight, n, rows_name="X")
    if np.any(v <= 0):
        raise ValueError(
            "`sample_weight` must be > 0 for every sample (the v_i of (2)); drop the samples you want "
            "to ignore instead of giving them weight 0."
        )
    return v


def check_inputs(X, y, m, sample_weight, init):
    """``X``, ``y``, ``m`` (from ``init`` when not given), the weights ``v`` (default 1) and ``init``, checked."""
    X = check_matrix("X", X)
    y = check_targets("y", y, X.shape[0], rows_name="X")
    n = X.shape[0]
    if init is not None:
        init = check_matrix("init", init)
        if init.shape[1] != X.shape[1]:
            raise ValueError(f"`init` must be (m, {X.shape[1]}) prototypes in the space of `X`; got {init.shape}.")
        if m is None:
            m = init.shape[0]
    if m is None:
        raise ValueError("`m` (the number of prototypes) is required.")
    m = check_int_in("m", m, 1, n, "Use at least one prototype and at most one per training sample.")
    if init is not None and init.shape[0] != m:
        raise ValueError(f"`init` has {init.shape[0]} rows but `m` is {m}; pass one initial prototype per row.")
    return X, y, m, _check_weights(sample_weight, n), init
