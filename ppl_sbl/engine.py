"""The compiled core of closed-form CAVI: one sweep, the stopping rule, pruning, and the sweeps
to the fixed point as one pure loop (:func:`fit`).

Every function here is a pure function of a :class:`~ppl_sbl.guide.ClosedFormGuide` and its
state and data; the compiled forms are kept by the guide (``guide.compiled``).
:class:`ppl_sbl.CAVI` (``init``, ``step``, ``run``) and :func:`ppl_sbl.fit_grid` are built on them.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from . import gaussian
from .guide import ClosedFormGuide

__all__ = ["TOL", "MAX_SWEEPS", "sweep", "converged", "unit_offset", "fit", "strong", "stack", "num_active", "active_fields"]

TOL = 1e-9  # the stopping rule's relative tolerance (see :class:`ppl_sbl.CAVI`)
MAX_SWEEPS = 20000


def sweep(guide: ClosedFormGuide, state, data):
    """One sweep of the guide's updates and the ELBO of the updated state: ``(state, elbo)``."""
    state = guide.update(state, data)
    return state, guide.elbo(state, data)


def active_fields(state):
    """Names of the state fields that hold an ActiveGaussian (the prunable factors)."""
    return [k for k, v in state._asdict().items() if isinstance(v, gaussian.ActiveGaussian)]


def prune_state(state, data, guide, threshold):
    fields = active_fields(state)
    if not fields:
        return state
    prior_precision, data_precision = guide.relevance(state, data)
    updates = {f: gaussian.prune(getattr(state, f), prior_precision, data_precision, threshold) for f in fields}
    return state._replace(**updates)


def num_active(state):
    fields = active_fields(state)
    return max((gaussian.num_active(getattr(state, f)) for f in fields), default=0)


def active_mask(state):
    """(M,) mask of the coefficients the state's (first) ActiveGaussian keeps in its linear
    algebra (not pruned); None for a state with no prunable factor."""
    fields = active_fields(state)
    if not fields:
        return None
    q = getattr(state, fields[0])
    index, m = np.asarray(q.index), q.mean.shape[0]
    mask = np.zeros(m, dtype=bool)
    mask[index[index < m]] = True
    return mask


def compact_state(state, size):
    fields = active_fields(state)
    return state._replace(**{f: gaussian.compact(getattr(state, f), size) for f in fields})


def strong(tree):
    """The same pytree with every array leaf strongly typed: a weakly typed start (Python scalars
    broadcast by ``init``) would give the first sweeps other abstract types than the later ones,
    and each would compile the sweep again."""
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=jnp.result_type(x)) if hasattr(x, "dtype") else x, tree)


PRUNE_EVERY = 5  # sweeps between pruning checks (each check synchronises with the host) ...
PRUNE_EVERY_MAX = 80  # ... doubling up to this while checks find nothing to prune


def summary(guide, state, data):
    """What the stopping rule watches of a state (:func:`state_change`): the prior precision P_k
    and the data precision h_k of every coefficient (``guide.relevance``), and the share of w_k's
    precision that the data give it, c_k / (P_k + c_k), with c_k the data precision given the
    other coefficients where the state holds an ActiveGaussian (h_k otherwise)."""
    prior, data_precision = guide.relevance(state, data)
    fields = active_fields(state)
    given = data_precision
    if fields:
        given = gaussian.conditional_data_precision(getattr(state, fields[0]), prior, data_precision)
    share = given / jnp.maximum(prior + given, 1e-300)
    return prior, data_precision, share


def state_change(old, new):
    """The relative change of the state between two :func:`summary` values: the largest, over
    the coefficients, of |Delta P_k| / P_k weighted by the data's share of w_k's precision (a
    coefficient the data do not determine can drift slowly towards an infinite precision without
    changing the fit) and of |Delta h_k| / h_k (the likelihood's factors: E[gamma], xi, the
    robust weights). Scale-free: rescaling Phi or t leaves it unchanged."""

    def relative(a, b):
        return jnp.abs(a - b) / jnp.maximum(jnp.maximum(jnp.abs(a), jnp.abs(b)), 1e-300)

    (p0, h0, _), (p1, h1, share) = old, new
    return jnp.maximum(jnp.max(share * relative(p1, p0), initial=0.0), jnp.max(relative(h1, h0), initial=0.0))


def state_tol(tol):
    """The stopping rule's bound on :func:`state_change`: sqrt(tol). A coordinate update's ELBO
    gain is the KL divergence by which it moves its factor, about (Delta ln x)^2 / 4 nats for a
    Gamma factor of shape 1/2, so a relative change of sqrt(tol) corresponds to the ELBO tolerance."""
    return (np if _on_host(tol) else jnp).sqrt(tol)


def _on_host(*values):
    """Whether every value is a Python or NumPy number (evaluated with NumPy: the same float64
    arithmetic, without compiling a program per operation as JAX does outside a trace)."""
    return all(isinstance(v, (float, int, np.floating, np.integer)) for v in values)


def compiled_step(guide):
    """:func:`sweep` of this guide, compiled."""
    return guide.compiled("step", functools.partial(sweep, guide))


def initial_state(guide, data):
    """``guide.init(data)``, compiled once per guide and shapes; op by op where it does not trace
    (an ``init`` that reads values on the host)."""
    try:
        return guide.compiled("init", guide.init)(data)
    except Exception:  # does not trace: op by op
        return guide.init(data)


def array_inputs(args, kwargs, numbers=True):
    """(arrays, rebuild, static) of a call's arguments: the array leaves of (args, kwargs) and, with
    ``numbers``, its floating-point numbers (Python floats and NumPy floating scalars: a prior's
    b0, a likelihood's nu), a function that puts values of the same shapes back in their places,
    and a hashable key of everything else (the tree and its other leaves: strings, integers,
    booleans, and the numbers without ``numbers``). A program compiled with ``arrays`` as inputs
    serves every call with the same ``static`` and shapes: with ``numbers``, every value of a
    hyperparameter. A function that uses a number as a Python value (in an ``if``, as a size)
    does not trace with it as an input; such callers try again without ``numbers``."""
    leaves, tree = jax.tree.flatten((args, kwargs))
    is_array = tuple(isinstance(leaf, (np.ndarray, jax.Array)) or (numbers and isinstance(leaf, (float, np.floating)))
                     for leaf in leaves)
    arrays = [leaf for leaf, a in zip(leaves, is_array) if a]
    others = tuple(leaf for leaf, a in zip(leaves, is_array) if not a)

    def rebuild(values):
        values, rest = iter(values), iter(others)
        return jax.tree.unflatten(tree, [next(values) if a else next(rest) for a in is_array])

    static = (tree, is_array, others)
    try:
        hash(static)
    except TypeError:  # an unhashable leaf: no key, the caller compiles for this call only
        static = None
    return arrays, rebuild, static


def call_compiled(compiled, name, fn, inputs, args, kwargs, fallback):
    """``fn(*inputs, *args, **kwargs)`` in one program whose inputs are ``inputs`` and the array
    leaves and numbers of (args, kwargs) (:func:`array_inputs`): ``compiled((name, static),
    program)`` makes or finds it, so a caller that keeps programs by key
    (:meth:`ppl_sbl.ClosedFormGuide.compiled`) serves every call with the same static arguments
    and shapes with one program, whatever the values of the numbers. Where ``fn`` does not trace
    with the numbers as inputs, they are constants of the program (one per value); ``fallback()``
    (op by op) answers where the arguments have no static key or ``fn`` does not trace with array
    inputs (it needs concrete values)."""
    for numbers in (True, False):
        arrays, rebuild, static = array_inputs(args, kwargs, numbers)
        if static is None:
            break

        def program(inputs, arrays, rebuild=rebuild):
            args, kwargs = rebuild(arrays)
            return fn(*inputs, *args, **kwargs)

        try:
            return compiled((name, static), program)(inputs, arrays)
        except Exception:  # does not trace with these inputs: the numbers as constants, else op by op
            continue
    return fallback()


COMPACT_MIN = 32  # the fewest slots a pruned state is compacted into: below this the sweeps cost less
                 # than compiling them again for another size

CHUNK = 256  # sweeps one compiled call may run before it hands the trace back


def unit_offset(guide, data):
    """The guide's ``unit_offset(data)`` (the ELBO's part that depends on the targets' units), 0
    where it has none."""
    return 0.0 if guide.unit_offset is None else guide.unit_offset(data)


def converged(value, old, change, tol, offset=0.0):
    """The stopping rule (see :class:`ppl_sbl.CAVI`): the ELBO changed by at most ``tol`` relative over the
    last sweep (relative to |ELBO - offset|, ``offset`` = :func:`unit_offset`, a size that does
    not depend on the data's units) and the state by at most sqrt(``tol``) (:func:`state_change`)."""
    xp = np if _on_host(value, old, change, tol, offset) else jnp
    return (xp.abs(value - old) <= tol * xp.abs(value - offset)) & (change <= state_tol(tol))


def compiled_chunk(guide):
    """Up to ``n`` sweeps in one compiled ``lax.while_loop``, each followed by the ELBO of the
    updated state and its change (:func:`state_change`); it stops after the sweep at which
    :meth:`ppl_sbl.CAVI.run` has something to decide: the fit converged (:func:`converged`) or the ELBO
    is not finite, or a pruning check is due (``check_prune``, relative change at most
    ``prune_after``, sweep index at least ``wait``). Returns the state, the ELBO and the state's
    change after each sweep run (``CHUNK`` slots each, NaN past ``count``) and ``count``.
    ``first`` is the index of the first sweep, ``previous`` the ELBO before it."""

    def chunk(state, data, previous, first, n, wait, tol, prune_after, check_prune):
        values = jnp.full((CHUNK,), jnp.nan, dtype=jnp.float64)
        changes = jnp.full((CHUNK,), jnp.nan, dtype=jnp.float64)

        def cond(carry):
            _, _, count, _, _, stop, _ = carry
            return (count < n) & ~stop

        def body(carry):
            state, old, count, values, changes, _, before = carry
            # see fit_loop: the barrier keeps XLA from hoisting each use of the data separately
            state, d = jax.lax.optimization_barrier((state, data))
            state, value = sweep(guide, state, d)
            after = summary(guide, state, d)
            moved = state_change(before, after)
            i = first + count
            done = (i > 0) & converged(value, old, moved, tol, offset)
            prune_due = (check_prune & (i > 0) & (jnp.abs(value - old) <= prune_after * jnp.abs(value - offset))
                         & (i >= wait))
            stop = done | ~jnp.isfinite(value) | prune_due
            return state, value, count + 1, values.at[count].set(value), changes.at[count].set(moved), stop, after

        offset = unit_offset(guide, data)
        carry = (state, jnp.asarray(previous, jnp.float64), jnp.asarray(0), values, changes, jnp.asarray(False),
                 summary(guide, state, data))
        state, _, count, values, changes, _, _ = jax.lax.while_loop(cond, body, carry)
        return state, values, changes, count

    return guide.compiled("chunk", chunk)


def compiled_prune(guide):
    return guide.compiled("prune", lambda state, data, threshold: prune_state(state, data, guide, threshold))


def compiled_relevance(guide):
    """(prior precision P_k, the precision the data give each coefficient: given the others where
    the state holds an ActiveGaussian), compiled once per guide."""

    def relevance(state, data):
        prior, data_precision = guide.relevance(state, data)
        fields = active_fields(state)
        if fields:
            data_precision = gaussian.conditional_data_precision(getattr(state, fields[0]), prior, data_precision)
        return prior, data_precision

    return guide.compiled("relevance", relevance, once=True)


def coefficient_factors(guide, state, data):
    """The Gaussian factor(s) whose coefficients the relevance rule judges
    (:mod:`ppl_sbl.relevance`), as ``(factors, prior, groups)``: a tuple of ActiveGaussians (one per
    output), the prior precisions (M, C) of their coefficients, and (M,) labels of the
    coefficients that share one precision or None. From ``guide.coefficients`` where the guide has
    it, else the state's first ActiveGaussian with ``guide.relevance``'s prior precision and
    ``data.groups``; None for a state with neither."""
    if guide.coefficients is not None:
        q, prior, groups = guide.coefficients(state, data)
    else:
        fields = active_fields(state)
        if not fields:
            return None
        q, prior, groups = getattr(state, fields[0]), guide.relevance(state, data)[0], getattr(data, "groups", None)
    factors = (q,) if isinstance(q, gaussian.ActiveGaussian) else tuple(q)
    prior = jnp.asarray(prior)
    return factors, (prior[:, None] if prior.ndim == 1 else prior), groups


def _variances(q):
    """(diag of q's full covariance (M,), the active mask (M,))."""
    m = q.mean.shape[0]
    valid = q.index < m
    target = jnp.where(valid, q.index, m)
    var = jnp.zeros(m, q.mean.dtype).at[target].set(gaussian.covariance_diagonal(q), mode="drop")
    kept = jnp.zeros(m, bool).at[target].set(True, mode="drop")
    return var + q.frozen_var, kept


def compiled_support(guide):
    """What the relevance rule reads of a state, compiled once per guide: (mean, variance, kept,
    prior) each (C, M), and the groups (M,) or None; None where the guide holds no Gaussian factor
    (:func:`coefficient_factors`)."""

    def support(state, data):
        found = coefficient_factors(guide, state, data)
        if found is None:
            return None
        factors, prior, groups = found
        var, kept = zip(*(_variances(q) for q in factors))
        return jnp.stack([q.mean for q in factors]), jnp.stack(var), jnp.stack(kept), prior.T, groups

    return guide.compiled("support", support, once=True)


def compiled_covariances(guide):
    """The full covariance (C, M, M) of the factors of :func:`coefficient_factors`, compiled once per
    guide (for groups of coefficients that share one precision)."""

    def covariances(state, data):
        factors = coefficient_factors(guide, state, data)[0]
        return jnp.stack([gaussian.full_covariance(q) for q in factors])

    return guide.compiled("covariances", covariances, once=True)


def fit_loop(guide, data, tol, max_sweeps, init_state, record):
    """Sweeps to the stopping rule in one ``lax.while_loop``: (state, ELBO, sweeps, converged,
    the ELBO after every sweep if ``record``)."""
    state = strong(guide.init(data) if init_state is None else init_state)
    dtype = jnp.float64
    trace = jnp.full((int(max_sweeps) if record else 0,), jnp.nan, dtype)

    def body(carry):
        state, old, _, i, trace, before, _ = carry
        # the barrier (tied to the loop-varying state) hides from XLA that the data are loop-
        # invariant: otherwise it hoists each use of them (e.g. the same column gather of the
        # design) out of the loop separately, and the body can no longer share their products
        state, d = jax.lax.optimization_barrier((state, data))
        state, new = sweep(guide, state, d)
        after = summary(guide, state, d)
        if record:
            trace = trace.at[i].set(new)
        return state, new, old, i + 1, trace, after, state_change(before, after)

    offset = unit_offset(guide, data)

    def cond(carry):
        _, new, old, i, _, _, moved = carry
        return (i < max_sweeps) & ((i < 2) | ~converged(new, old, moved, tol, offset))

    carry = (state, jnp.asarray(-jnp.inf, dtype), jnp.asarray(-jnp.inf, dtype), jnp.asarray(0), trace,
             summary(guide, state, data), jnp.asarray(jnp.inf, dtype))
    state, new, old, sweeps, trace, _, moved = jax.lax.while_loop(cond, body, carry)
    return state, new, sweeps, (sweeps >= 2) & converged(new, old, moved, tol, offset), trace


def fit(guide: ClosedFormGuide, data, *, tol=TOL, max_sweeps=MAX_SWEEPS, init_state=None):
    """CAVI as one pure function (``lax.while_loop``, no pruning): jit- and vmap-able.

    Returns ``(state, elbo, num_sweeps, converged)``, ``converged`` by the stopping rule of
    :class:`ppl_sbl.CAVI` (the ELBO's and the state's change over the last sweep). Use it to fit many
    problems of the same shape at once, e.g. ``jax.vmap(lambda d: fit(guide, d))(stacked_data)``,
    or use :func:`fit_grid`, which does that for a list of designs and returns results.
    """
    return fit_loop(guide, data, tol, max_sweeps, init_state, record=False)[:4]


def stack(datas):
    structures = {jax.tree.structure(d) for d in datas}
    shapes = {tuple(jnp.shape(x) for x in jax.tree.leaves(d)) for d in datas}
    if len(structures) > 1 or len(shapes) > 1:
        raise ValueError(
            "the designs give prepared data of different structures or shapes (e.g. different "
            "numbers of columns, or a low-rank factor of data-dependent rank), so they cannot be "
            "fitted in one vmapped call; fit them one by one with CAVI(...).run."
        )
    return jax.tree.map(lambda *xs: jnp.stack(xs), *datas)


def batched_map(fn, stacked, n, batch_size, batched=None):
    """``jax.lax.map(fn, stacked, batch_size=batch_size)`` written out with explicit shapes (the
    library version infers a -1 dimension, which fails for leaves with a zero-size axis).
    ``batched``: the function of a batch (default ``jax.vmap(fn)``)."""
    batched = jax.vmap(fn) if batched is None else batched
    if batch_size >= n:
        return batched(stacked)
    if batch_size == 1:
        return jax.lax.map(fn, stacked)
    full = (n // batch_size) * batch_size
    head = jax.tree.map(lambda x: x[:full].reshape((n // batch_size, batch_size) + x.shape[1:]), stacked)
    out = jax.lax.map(batched, head)
    out = jax.tree.map(lambda x: x.reshape((full,) + x.shape[2:]), out)
    if full < n:
        tail = batched(jax.tree.map(lambda x: x[full:], stacked))
        out = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), out, tail)
    return out
