"""The Jacobian of a function of one vector, computed in forward mode over the function's jaxpr with
tangents that keep their structure.

``jax.jacfwd(f)(x)`` pushes the n columns of the identity through every operation of ``f``: a
model's mean ``Phi @ w`` then costs the product ``Phi @ I``, O(N M^2), to return ``Phi``. Here each
intermediate's tangent is held in the cheapest of three forms:

* zero (``None``): the value does not depend on x;
* :class:`Picks`: element s of the tangent is ``sum_k coef[s, k] dx[idx[s, k]]``, a few input
  elements scaled, with ``idx`` a NumPy integer array known while tracing. Slices, reshapes,
  broadcasts, elementwise functions, sums and products with values free of x keep this form;
* dense: the Jacobian block itself, the value's shape followed by n.

A contraction (``dot_general``) of picked elements with a matrix free of x scatters that matrix's
columns into the dense block, O(N M); every other operation on a dense tangent, and any operation
without a rule here, is pushed through JAX's own JVP, batched over the n columns (what
``jax.jacfwd`` does for every operation). The result equals ``jax.jacfwd(f)(x)``.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jcore

__all__ = ["jacobian", "Picks", "matvec", "to_dense", "canonical"]

MAX_TERMS = 8  # more input elements per output element than this: the dense form


class Picks(NamedTuple):
    """A tangent of shape S: element s is ``sum_k coef[s, k] dx[idx[s, k]]``; ``idx`` (NumPy
    integers) and ``coef`` have shape S + (k,); ``coef`` None stands for ones."""

    idx: np.ndarray
    coef: jax.Array = None


def _coef(t):
    return jnp.ones(t.idx.shape) if t.coef is None else t.coef


def jacobian(fn, x, structured=False):
    """``(fn(x), J)`` with J the Jacobian of ``fn`` at the vector ``x``, a pytree of arrays of the
    outputs' shapes followed by ``x.size``: equal to ``(fn(x), jax.jacfwd(fn)(x))``. Works inside
    ``jax.jit``; ``fn`` must trace with an abstract ``x``. With ``structured``, a leaf whose every
    element is a combination of at most :data:`MAX_TERMS` elements of x is returned as
    :class:`Picks` (the indices as an array), the others dense."""
    x = jnp.asarray(x)
    n = x.shape[0]
    closed, shapes = jax.make_jaxpr(fn, return_shape=True)(x)
    start = Picks(np.arange(n)[:, None])
    values, tangents = _run(closed.jaxpr, closed.consts, [x], [start], n)
    tree = jax.tree.structure(shapes)
    leaves = []
    for v, t in zip(values, tangents):
        if structured and isinstance(t, Picks):
            leaves.append(Picks(jnp.asarray(np.broadcast_to(t.idx, jnp.shape(v) + t.idx.shape[-1:]), np.int32),
                                jnp.broadcast_to(_coef(t), jnp.shape(v) + t.idx.shape[-1:])))
        else:
            leaves.append(_dense(t, jnp.shape(v), n, v.dtype))
    return jax.tree.unflatten(tree, values), jax.tree.unflatten(tree, leaves)


def matvec(J, v):
    """J v for a Jacobian J (its outputs flattened) held dense or as :class:`Picks`."""
    if isinstance(J, Picks):
        return np.sum(np.asarray(J.coef) * np.asarray(v)[np.asarray(J.idx)], axis=-1).reshape(-1)
    J = np.asarray(J)
    return J.reshape(int(np.prod(J.shape[:-1], dtype=int)), J.shape[-1]) @ v


def to_dense(J, n):
    """A :class:`Picks` Jacobian with n columns as a dense NumPy array (a dense one as it is)."""
    if not isinstance(J, Picks):
        return np.asarray(J)
    idx, coef = np.asarray(J.idx), np.asarray(J.coef)
    out = np.zeros((idx[..., 0].size, n), coef.dtype)
    np.add.at(out, (np.repeat(np.arange(idx[..., 0].size), idx.shape[-1]), idx.reshape(-1)), coef.reshape(-1))
    return out.reshape(idx.shape[:-1] + (n,))


def canonical(J):
    """A :class:`Picks` Jacobian (flattened to rows) with each row's columns sorted and distinct
    (the coefficients of a repeated column summed, zero terms moved to the end with index -1)."""
    idx = np.asarray(J.idx).reshape(-1, np.shape(J.idx)[-1]).astype(np.int64)
    coef = np.asarray(J.coef).reshape(idx.shape)
    order = np.argsort(idx, axis=1, kind="stable")
    idx, coef = np.take_along_axis(idx, order, 1), np.take_along_axis(coef, order, 1)
    for j in range(idx.shape[1] - 1, 0, -1):  # fold a repeated column into its first occurrence
        same = idx[:, j] == idx[:, j - 1]
        coef[same, j - 1] += coef[same, j]
        coef[same, j] = 0.0
    zero = coef == 0.0
    idx = np.where(zero, -1, idx)
    order = np.argsort(zero, axis=1, kind="stable")
    return Picks(np.take_along_axis(idx, order, 1), np.take_along_axis(coef, order, 1))


# ----------------------------------------------------------------------------------------------
# The interpreter
# ----------------------------------------------------------------------------------------------
def _needed(jaxpr):
    """The equations an output depends on (the others are not evaluated)."""
    live = {v for v in jaxpr.outvars if isinstance(v, jcore.Var)}
    keep = []
    for eqn in reversed(jaxpr.eqns):
        if any(isinstance(v, jcore.Var) and not isinstance(v, jcore.DropVar) and v in live for v in eqn.outvars):
            keep.append(eqn)
            live.update(v for v in eqn.invars if isinstance(v, jcore.Var))
    return keep[::-1]


def _run(jaxpr, consts, args, arg_tangents, n):
    value, tangent = {}, {}

    def read(v):
        return v.val if isinstance(v, jcore.Literal) else value[v]

    def read_t(v):
        return None if isinstance(v, jcore.Literal) else tangent.get(v)

    for v, c in zip(jaxpr.constvars, consts):
        value[v] = c
    for v, a, t in zip(jaxpr.invars, args, arg_tangents):
        value[v], tangent[v] = a, t
    for eqn in _needed(jaxpr):
        ins, tins = [read(v) for v in eqn.invars], [read_t(v) for v in eqn.invars]
        if all(t is None for t in tins):
            folded = _fold(eqn, ins)
            outs = [folded] if folded is not None else _bind(eqn, ins)
            touts = [None] * len(eqn.outvars)
        else:
            outs, touts = _push(eqn, ins, tins, n)
        for v, o, t in zip(eqn.outvars, outs, touts):
            if not isinstance(v, jcore.DropVar):
                value[v], tangent[v] = o, t
    return [read(v) for v in jaxpr.outvars], [read_t(v) for v in jaxpr.outvars]


def _concrete(x):
    return isinstance(x, (np.ndarray, np.generic, int, bool))


_NUMPY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "neg": np.negative, "rem": np.fmod,
    "max": np.maximum, "min": np.minimum, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal, "and": np.logical_and, "or": np.logical_or,
    "not": np.logical_not,
}


def _fold(eqn, ins):
    """The integer or boolean result of an equation on values known while tracing (indices a model
    computes from NumPy constants), computed in NumPy; None where it is not one."""
    if eqn.primitive.multiple_results or not all(_concrete(x) for x in ins):
        return None
    aval = eqn.outvars[0].aval
    dtype = np.dtype(aval.dtype)
    if not (np.issubdtype(dtype, np.integer) or dtype == np.bool_):
        return None
    name, p = eqn.primitive.name, eqn.params
    xs = [np.asarray(x) for x in ins]
    if name in _NUMPY:
        out = _NUMPY[name](*xs)
    elif name == "select_n":
        out = np.choose(xs[0].astype(int), np.broadcast_arrays(*xs[1:]))
    elif name == "convert_element_type":
        out = xs[0]
    elif name == "broadcast_in_dim":
        out = _broadcast_idx(xs[0][..., None], p, xs[0].shape, tuple(p["shape"]))[..., 0]
    elif name in ("reshape", "squeeze"):
        out = xs[0].reshape(aval.shape)
    elif name == "iota":
        out = np.broadcast_to(np.arange(aval.shape[p["dimension"]]).reshape(
            [-1 if d == p["dimension"] else 1 for d in range(len(aval.shape))]), aval.shape)
    else:
        return None
    return np.asarray(out, dtype).reshape(aval.shape)


def _bind_params(eqn):
    """(sub-functions, parameters) to bind the equation's primitive with."""
    params = eqn.primitive.get_bind_params(eqn.params)
    return params if isinstance(params, tuple) else ((), params)


def _bind(eqn, ins):
    subfuns, params = _bind_params(eqn)
    out = eqn.primitive.bind(*subfuns, *ins, **params)
    return list(out) if eqn.primitive.multiple_results else [out]


def _push(eqn, ins, tins, n):
    name = eqn.primitive.name
    if name in ("jit", "pjit", "closed_call"):
        inner = eqn.params["jaxpr"] if name != "closed_call" else eqn.params["call_jaxpr"]
        return _run(inner.jaxpr, inner.consts, ins, tins, n)
    out = _bind(eqn, ins)
    if not any(jnp.issubdtype(jnp.result_type(o), jnp.inexact) for o in out):  # comparisons, indices
        return out, [None] * len(out)
    shape = jnp.shape(out[0])
    rule = _RULES.get(name)
    if rule is not None and not eqn.primitive.multiple_results:
        t = rule(eqn, ins, tins, out[0], shape, n)
        if t is not _NO_RULE:
            return out, [_cap(t, shape, n, out[0].dtype)]
    return out, _generic(eqn, ins, tins, n)


_NO_RULE = object()


def _generic(eqn, ins, tins, n):
    """JAX's JVP of the equation, batched over the n columns of the dense tangents."""
    subfuns, params = _bind_params(eqn)
    moving = [i for i, t in enumerate(tins) if t is not None]
    dense = [_dense(tins[i], jnp.shape(ins[i]), n, jnp.result_type(ins[i])) for i in moving]

    def column(*cols):
        tangents = [jnp.zeros_like(x) if jnp.issubdtype(jnp.result_type(x), jnp.inexact)
                    else np.zeros(jnp.shape(x), jax.dtypes.float0) for x in ins]
        for i, c in zip(moving, cols):
            tangents[i] = c
        _, t = jax.jvp(lambda *xs: eqn.primitive.bind(*subfuns, *xs, **params), tuple(ins), tuple(tangents))
        return t

    t = jax.vmap(column, in_axes=-1, out_axes=-1)(*dense)
    return list(t) if eqn.primitive.multiple_results else [t]


# ----------------------------------------------------------------------------------------------
# Forms
# ----------------------------------------------------------------------------------------------
def _dense(t, shape, n, dtype):
    if t is None:
        return jnp.zeros(tuple(shape) + (n,), dtype)
    if not isinstance(t, Picks):
        return t
    size = int(np.prod(shape, dtype=int))
    k = t.idx.shape[-1]
    rows = np.repeat(np.arange(size), k)
    out = jnp.zeros((size, n), dtype).at[rows, t.idx.reshape(-1)].add(jnp.reshape(_coef(t), -1).astype(dtype))
    return out.reshape(tuple(shape) + (n,))


def _cap(t, shape, n, dtype):
    if isinstance(t, Picks) and t.idx.shape[-1] > MAX_TERMS:
        return _dense(t, shape, n, dtype)
    return t


def _broadcast_picks(t, shape):
    """A Picks tangent of a rank-0 or same-shape operand, broadcast to ``shape``."""
    k = t.idx.shape[-1]
    if t.idx.shape[:-1] == tuple(shape):
        return t
    coef = None if t.coef is None else jnp.broadcast_to(t.coef, tuple(shape) + (k,))
    return Picks(np.broadcast_to(t.idx, tuple(shape) + (k,)), coef)


def _scale(t, factor, shape, n):
    """The tangent t (of an operand broadcastable to ``shape``) times ``factor``."""
    factor = jnp.broadcast_to(factor, shape)
    if isinstance(t, Picks):
        t = _broadcast_picks(t, shape)
        return Picks(t.idx, factor[..., None] * _coef(t))
    return jnp.broadcast_to(t, tuple(shape) + (n,)) * factor[..., None]


def _plus(a, b, shape, n, dtype):
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, Picks) and isinstance(b, Picks):
        a, b = _broadcast_picks(a, shape), _broadcast_picks(b, shape)
        if a.idx.shape == b.idx.shape and np.array_equal(a.idx, b.idx):
            return Picks(a.idx, _coef(a) + _coef(b))
        return Picks(np.concatenate([a.idx, b.idx], -1), jnp.concatenate([_coef(a), _coef(b)], -1))
    return _dense(a, shape, n, dtype) + _dense(b, shape, n, dtype)


# ----------------------------------------------------------------------------------------------
# Rules: each returns the output's tangent, or _NO_RULE for JAX's JVP
# ----------------------------------------------------------------------------------------------
def _structural(index_fn):
    """A rearrangement of one operand's elements (the other operands free of x): the Picks
    indices rearranged in NumPy, the coefficients and dense blocks by the same operation batched
    over the trailing axis."""

    def rule(eqn, ins, tins, out, shape, n):
        t = tins[0]
        if any(u is not None for u in tins[1:]):
            return _NO_RULE
        subfuns, params = _bind_params(eqn)
        along = jax.vmap(lambda a: eqn.primitive.bind(*subfuns, a, *ins[1:], **params), in_axes=-1, out_axes=-1)
        if isinstance(t, Picks):
            idx = index_fn(t.idx, eqn.params, jnp.shape(ins[0]), shape)
            if idx is None:
                return _NO_RULE
            return Picks(idx, None if t.coef is None else along(t.coef))
        return along(t)

    return rule


def _reshape_idx(idx, p, in_shape, shape):
    if p.get("dimensions") is not None:
        return None
    return idx.reshape(tuple(shape) + idx.shape[-1:])


def _broadcast_idx(idx, p, in_shape, shape):
    dims = tuple(p["broadcast_dimensions"])
    view = [1] * len(shape)
    for i, d in enumerate(dims):
        view[d] = idx.shape[i]
    k = idx.shape[-1]
    return np.broadcast_to(idx.reshape(tuple(view) + (k,)), tuple(shape) + (k,))


def _squeeze_idx(idx, p, in_shape, shape):
    return idx.reshape(tuple(shape) + idx.shape[-1:])


def _transpose_idx(idx, p, in_shape, shape):
    perm = tuple(p["permutation"])
    return np.transpose(idx, perm + (len(perm),))


def _slice_idx(idx, p, in_shape, shape):
    strides = p["strides"] or (1,) * len(in_shape)
    return idx[tuple(slice(a, b, s) for a, b, s in zip(p["start_indices"], p["limit_indices"], strides))]


def _rev_idx(idx, p, in_shape, shape):
    return np.flip(idx, tuple(p["dimensions"]))


def _same_idx(idx, p, in_shape, shape):
    return idx


def _convert(eqn, ins, tins, out, shape, n):
    if not (jnp.issubdtype(eqn.params["new_dtype"], jnp.floating) and jnp.issubdtype(jnp.result_type(ins[0]), jnp.floating)):
        return _NO_RULE
    t = tins[0]
    if isinstance(t, Picks):
        return Picks(t.idx, None if t.coef is None else t.coef.astype(out.dtype))
    return t.astype(out.dtype)


def _add(sign):
    def rule(eqn, ins, tins, out, shape, n):
        a, b = tins
        if b is not None and sign < 0:
            b = _scale(b, -1.0, shape, n)
        if a is not None and jnp.shape(ins[0]) != tuple(shape):
            a = _scale(a, 1.0, shape, n)
        if b is not None and jnp.shape(ins[1]) != tuple(shape):
            b = _scale(b, 1.0, shape, n)
        return _plus(a, b, shape, n, out.dtype)

    return rule


def _neg(eqn, ins, tins, out, shape, n):
    return _scale(tins[0], -1.0, shape, n)


def _mul(eqn, ins, tins, out, shape, n):
    (a, b), (ta, tb) = ins, tins
    left = _scale(ta, b, shape, n) if ta is not None else None
    right = _scale(tb, a, shape, n) if tb is not None else None
    return _plus(left, right, shape, n, out.dtype)


def _div(eqn, ins, tins, out, shape, n):
    (a, b), (ta, tb) = ins, tins
    left = _scale(ta, 1.0 / b, shape, n) if ta is not None else None
    right = _scale(tb, -out / b, shape, n) if tb is not None else None
    return _plus(left, right, shape, n, out.dtype)


def _elementwise(eqn, ins, tins, out, shape, n):
    """A unary elementwise function: the tangent times its derivative."""
    subfuns, params = _bind_params(eqn)
    x = ins[0]
    _, d = jax.jvp(lambda v: eqn.primitive.bind(*subfuns, v, **params), (x,), (jnp.ones_like(x),))
    return _scale(tins[0], d, shape, n)


def _reduce_sum(eqn, ins, tins, out, shape, n):
    t = tins[0]
    axes = tuple(eqn.params["axes"])
    if not isinstance(t, Picks):
        return jnp.sum(t, axis=axes)
    keep = [d for d in range(t.idx.ndim - 1) if d not in axes]
    order = keep + list(axes) + [t.idx.ndim - 1]
    k = int(np.prod([t.idx.shape[d] for d in axes], dtype=int)) * t.idx.shape[-1]
    if k > MAX_TERMS:
        return _NO_RULE
    return Picks(np.transpose(t.idx, order).reshape(tuple(shape) + (k,)),
                 None if t.coef is None else jnp.transpose(t.coef, order).reshape(tuple(shape) + (k,)))


def _dot_general(eqn, ins, tins, out, shape, n):
    """A contraction with one operand free of x. Picks on the other operand whose every dimension
    is contracted: the free operand's columns scattered into the dense block."""
    (lhs, rhs), (tl, tr) = ins, tins
    if tl is not None and tr is not None:
        return _NO_RULE
    (c_l, c_r), (b_l, b_r) = eqn.params["dimension_numbers"]
    if tl is not None:
        t, free_op, c_t, c_f, b_t = tl, rhs, tuple(c_l), tuple(c_r), b_l
    else:
        t, free_op, c_t, c_f, b_t = tr, lhs, tuple(c_r), tuple(c_l), b_r
    if not isinstance(t, Picks) or len(b_t) or len(c_t) != t.idx.ndim - 1:
        return _NO_RULE
    # the free operand as (its free elements, the contracted elements in the tangent's order)
    free_dims = [d for d in range(jnp.ndim(free_op)) if d not in c_f]
    order = tuple(np.argsort(c_t))  # the tangent's dimensions are contracted in the order c_t
    contracted = [c_f[i] for i in order]
    F = int(np.prod([jnp.shape(free_op)[d] for d in free_dims], dtype=int))
    K = int(np.prod(t.idx.shape[:-1], dtype=int))
    k = t.idx.shape[-1]
    P = jnp.transpose(free_op, free_dims + contracted).reshape(F, K)
    if t.coef is None and k == 1:
        values = P
    else:
        values = (P[:, :, None] * jnp.reshape(_coef(t), (1, K, k))).reshape(F, K * k)
    values = values.astype(out.dtype)
    cols = t.idx.reshape(-1)
    if k == 1 and np.array_equal(cols, np.arange(cols[0], cols[0] + K)):  # consecutive elements of x
        block = jnp.pad(values, ((0, 0), (int(cols[0]), n - int(cols[0]) - K))) if K < n else values
    else:
        block = jnp.zeros((F, n), out.dtype).at[:, cols].add(values)
    return block.reshape(tuple(shape) + (n,))


def _as_picks(t, shape, dtype):
    """A zero or Picks tangent as Picks (a zero: one term with coefficient 0)."""
    if t is None:
        return Picks(np.zeros(tuple(shape) + (1,), int), jnp.zeros(tuple(shape) + (1,), dtype))
    return _broadcast_picks(t, shape)


def _pad_terms(t, k):
    extra = k - t.idx.shape[-1]
    if not extra:
        return t
    pad = [(0, 0)] * (t.idx.ndim - 1) + [(0, extra)]
    return Picks(np.pad(t.idx, pad), jnp.pad(_coef(t), pad))


def _select_n(eqn, ins, tins, out, shape, n):
    """``select_n(which, *cases)`` with ``which`` free of x: each case's terms, zeroed where
    another case is selected."""
    which, cases = ins[0], tins[1:]
    if tins[0] is not None:
        return _NO_RULE
    if any(t is not None and not isinstance(t, Picks) for t in cases):
        full = tuple(shape) + (n,)
        dense = [jnp.broadcast_to(_dense(t, jnp.shape(x), n, out.dtype), full) for x, t in zip(ins[1:], cases)]
        w = which if jnp.ndim(which) == 0 else jnp.expand_dims(which, -1)
        return jax.lax.select_n(jnp.broadcast_to(w, full), *dense)
    parts = []
    for i, t in enumerate(cases):
        if t is None:
            continue
        t = _broadcast_picks(t, shape)
        parts.append(Picks(t.idx, jnp.where((which == i)[..., None], _coef(t), 0.0)))
    return Picks(np.concatenate([p.idx for p in parts], -1), jnp.concatenate([_coef(p) for p in parts], -1))


def _concatenate(eqn, ins, tins, out, shape, n):
    axis = eqn.params["dimension"]
    if any(t is not None and not isinstance(t, Picks) for t in tins):
        return jnp.concatenate([_dense(t, jnp.shape(x), n, out.dtype) for x, t in zip(ins, tins)], axis)
    parts = [_as_picks(t, jnp.shape(x), out.dtype) for x, t in zip(ins, tins)]
    k = max(p.idx.shape[-1] for p in parts)
    parts = [_pad_terms(p, k) for p in parts]
    return Picks(np.concatenate([p.idx for p in parts], axis), jnp.concatenate([_coef(p) for p in parts], axis))


def _gather(eqn, ins, tins, out, shape, n):
    """``x[indices]`` of a vector with indices known while tracing."""
    operand, indices = ins
    t = tins[0]
    p = eqn.params
    dn = p["dimension_numbers"]
    simple = (jnp.ndim(operand) == 1 and _concrete(indices) and np.shape(indices)[-1:] == (1,)
              and tuple(dn.offset_dims) == () and tuple(dn.collapsed_slice_dims) == (0,)
              and tuple(dn.start_index_map) == (0,) and tuple(p["slice_sizes"]) == (1,)
              and not tuple(getattr(dn, "operand_batching_dims", ())))
    if tins[1] is not None or not isinstance(t, Picks) or not simple:
        return _NO_RULE
    i = np.asarray(indices)[..., 0]
    inside = (i >= 0) & (i < jnp.shape(operand)[0])
    i = np.clip(i, 0, jnp.shape(operand)[0] - 1)
    coef = None if t.coef is None else t.coef[i]
    if not inside.all() and "CLIP" not in str(p["mode"]).upper():  # out of bounds: 0 unless the mode clips
        coef = jnp.where(inside[..., None], _coef(t)[i], 0.0)
    return Picks(t.idx[i], coef)


_RULES = {
    "reshape": _structural(_reshape_idx),
    "broadcast_in_dim": _structural(_broadcast_idx),
    "squeeze": _structural(_squeeze_idx),
    "transpose": _structural(_transpose_idx),
    "slice": _structural(_slice_idx),
    "rev": _structural(_rev_idx),
    "copy": _structural(_same_idx),
    "copy_p": _structural(_same_idx),
    "convert_element_type": _convert,
    "add": _add(1),
    "add_any": _add(1),
    "sub": _add(-1),
    "neg": _neg,
    "mul": _mul,
    "div": _div,
    "reduce_sum": _reduce_sum,
    "dot_general": _dot_general,
    "select_n": _select_n,
    "gather": _gather,
    "concatenate": _concatenate,
    **{name: _elementwise for name in ("exp", "exp2", "log", "log1p", "expm1", "sqrt", "rsqrt", "cbrt", "tanh",
                                       "logistic", "square", "integer_pow", "sin", "cos", "tan", "abs", "erf",
                                       "erfc", "erf_inv", "lgamma", "digamma", "atan", "asinh", "sinh", "cosh")},
}
