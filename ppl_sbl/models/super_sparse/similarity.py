"""Similarities ``s(x, c)`` of the super-sparse machine (Biggio et al.): the RBF or any callable.

``"rbf"`` is ``s(x, c) = exp(-gamma ||x - c||^2)`` (scikit-learn's ``gamma``); a callable
``s(X, C) -> (n, m)`` that JAX can trace is differentiated exactly, any other one is a black box
evaluated with NumPy (:func:`similarity_numpy`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ppl_sbl import basis

__all__ = ["check_similarity", "similarity_matrix", "similarity_numpy", "is_traceable"]


class _Hashable:
    """A callable similarity that cannot be hashed (a static argument of jit must be), keyed by id."""

    def __init__(self, fun):
        self.fun = fun

    def __call__(self, X, C):
        return self.fun(X, C)

    def __hash__(self):
        return id(self.fun)

    def __eq__(self, other):
        return isinstance(other, _Hashable) and other.fun is self.fun


def check_similarity(similarity):
    """``similarity`` checked: "rbf", or a callable made hashable (a static argument of jit)."""
    if callable(similarity):
        try:
            hash(similarity)
        except TypeError:
            return _Hashable(similarity)
        return similarity
    if isinstance(similarity, str) and similarity == "rbf":
        return similarity
    raise ValueError(
        f"`similarity` must be 'rbf' or a callable s(X, C) -> (n, m) array; got {similarity!r}."
    )


def similarity_matrix(X, C, similarity="rbf", gamma=1.0):
    """The similarity matrix ``S_ij = s(x_i, c_j)`` of (3), shape (n, m).

    Parameters
    ----------
    X : (n, d) inputs.
    C : (m, d) prototypes.
    similarity : "rbf" (``exp(-gamma ||x - c||^2)``, scikit-learn's parametrisation) or a callable
        ``s(X, C) -> (n, m)``. A JAX-traceable callable is differentiated exactly; a callable
        that only accepts NumPy arrays (a black box) works outside of JAX transformations.
    gamma : the RBF's inverse squared width (ignored for a callable).

    Returns
    -------
    jax.Array (n, m)
    """
    similarity = check_similarity(similarity)
    if callable(similarity):
        return jnp.asarray(similarity(X, C))
    X, C = jnp.asarray(X), jnp.asarray(C)
    # explicit differences (not |x|^2 + |c|^2 - 2 x.c): exact at x = c, and so are its gradients
    sq = jnp.sum((X[:, None, :] - C[None, :, :]) ** 2, axis=-1)
    return jnp.exp(-gamma * sq)


def similarity_numpy(X, C, similarity, gamma):
    """S as a NumPy array, for black-box similarities (no JAX tracing)."""
    if callable(similarity):
        return np.asarray(similarity(np.asarray(X), np.asarray(C)), dtype=np.float64)
    return basis.rbf(np.asarray(X), np.asarray(C), gamma)


def is_traceable(similarity, X, C):
    """Whether ``similarity(X, C)`` can be traced by JAX (and so differentiated exactly).

    A callable that converts its inputs to NumPy arrays, calls ``float`` on them, or otherwise
    needs concrete values is a black box: the fit then uses the direction rule (7).
    """
    similarity = check_similarity(similarity)
    if not callable(similarity):
        return True
    X = jnp.asarray(X, dtype=jnp.float64)
    try:
        out = jax.eval_shape(lambda c: jnp.asarray(similarity(X, c)), jax.ShapeDtypeStruct(np.shape(C), jnp.float64))
    except Exception:  # noqa: BLE001  (any failure to trace makes it a black box)
        return False
    return tuple(out.shape) == (X.shape[0], np.shape(C)[0])
