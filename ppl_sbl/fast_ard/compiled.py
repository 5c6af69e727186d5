"""The fast schedule (:func:`ppl_sbl.fast_ard.schedule`) as one compiled XLA program.

The moves, the re-estimates' polish, the likelihood factor's update between passes and the
stopping rule run in one ``lax.while_loop`` on buffers of a fixed capacity: the active columns
Phi_A^T (cap, N), B = Phi^T diag(W) Phi_A (M, cap) (through Phi^T Phi_A where W is uniform),
Sigma (cap, cap), mu (cap,) and the statistics S and Q (M,), with the slots past K (the active
count) zero; the design is padded with zero rows and columns to the sizes of :func:`bucket`, so
that nearby sizes share a program. It makes the same
moves as the host schedule (:class:`ppl_sbl.fast_ard.schedule._Schedule`, whose docstrings give
the rules), so the fit is the same to rounding.

Where an add finds the buffers full, the program returns to the host, which enlarges them and goes
on with the program for the larger shape (the capacities follow one sequence, :func:`grow`, so
that nearby problems share programs); where the ELBO trace's buffer is nearly full, the host takes
its entries off and the same program goes on. A fit that reports progress returns to the host every few
passes (:data:`REPORT_INTERVAL`), which reports and calls the program again: the program holds no
host callback, so JAX's persistent compilation cache keeps it.

The likelihood factors are those of the RVMs and robust RVMs, one output each
(:mod:`ppl_sbl.fast_ard.compiled_factors`); the multiclass RVM's outputs run in
:mod:`ppl_sbl.fast_ard.compiled_outputs`, each output's moves by :func:`move_step`. The state and
the operations every factor shares are in :mod:`ppl_sbl.fast_ard.compiled_state`, the moves in
:mod:`ppl_sbl.fast_ard.compiled_moves`. :func:`run_many` runs several fits of one shape in one
program."""
from __future__ import annotations

import concurrent.futures
import functools
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..engine import batched_map
from . import compiled_factors as CF
from . import compiled_moves as CM
from . import jax_algebra as J
from .compiled_state import (CONVERGED, GROW_ACTIVE, GROW_TRACE, MOVES, PASS_END, RUNNING, START, STOPPED, Buffers,
                             Data, State, choose, column, flush, record, slots, transposed)
from .passes import MOVES_PER_COEFFICIENT, REESTIMATE, UPDATE

__all__ = ["supports", "program", "run", "run_many", "bucket", "grow", "power_of_two", "padded"]



def supports(factor):
    """Whether the compiled program fits this likelihood factor."""
    return CF.kind_of(factor) is not None


LANES = "lanes"  # the axis name of the fits vmapped side by side (:func:`run_many`)


def _when(pred, fn, operand, lanes):
    """``fn(operand)`` where ``pred``, else ``operand``. With fits vmapped side by side (``lanes``)
    ``fn`` runs only where one of them needs it, and each takes its own result: a branch no fit
    takes costs nothing (a vmapped ``lax.cond`` would run both branches of every fit)."""
    if not lanes:
        return lax.cond(pred, fn, lambda o: o, operand)
    anyone = lax.pmax(pred.astype(jnp.int32), LANES) > 0
    return lax.cond(anyone, lambda o: choose(pred, fn(o), o), lambda o: o, operand)


def _switch(index, branches, operand, lanes):
    """``lax.switch(index, branches, operand)`` for branches that map the operand to its own
    type; with ``lanes`` (:func:`_when`) each branch runs only where a fit takes it."""
    if not lanes:
        return lax.switch(index, branches, operand)
    for b, fn in enumerate(branches):
        operand = _when(index == b, fn, operand, lanes)
    return operand



def move_step(st, buf, data, per_pass, kind, lanes=False, polish_step=True):
    """One step of a pass (``run_passes``'s inner loop): the best move; where none is left, the
    polish (``_Schedule.polish``): the joint Newton step on the pending re-estimates where it makes
    one, else a cycle over them in slot order, one a step, each to the maximiser of (1) given the
    others as they stand then, where that still moves it by ``settle``, gains and is not refused
    (refused: held for the pass); the pass's end where the polish makes no move (or where none is
    left, with ``polish_step=False``: an output's turn of ``schedule_outputs``). Returns the state
    and buffers after it."""
    budget = jnp.minimum(data.max_moves - st.moves, per_pass - (st.moves - st.first))
    settle = jnp.sqrt(data.tol)
    floor = data.tol * jnp.maximum(1.0, jnp.abs(st.value))
    found, move, k, target, gain, settling, (xa, sa, qa, xa_in) = CM.best_move(st, data, floor, settle,
                                                                                LANES if lanes else None)
    cap = st.mu.shape[0]
    K = st.K
    room = buf.length + cap + 3 <= buf.trace.shape[0]
    # the cycle's next pending slot, and its re-estimate
    waiting = st.pending & (jnp.arange(cap) >= st.cycle_next)
    j = jnp.argmax(waiting)
    x_j, s_j, q_j, new_j = xa[j], sa[j], qa[j], xa_in[j]
    cycle_gain = J.in_model_change(x_j, new_j, s_j, q_j, data.a0, data.b0)
    cycle_ok = (jnp.isfinite(new_j) & (s_j / (x_j + s_j) * jnp.abs(new_j - x_j) / jnp.maximum(new_j, x_j) >= settle)
                & (cycle_gain > 0))
    cycling = st.cycling
    # 0 end, 1 polish, 2 re-estimate, 3 grow, 4 add, 5 trace full, 6 cycle: skip a slot, 7 cycle: done
    action = jnp.where(~room, 5, jnp.where(budget <= 0, 0, jnp.where(
        cycling, jnp.where(jnp.any(waiting), jnp.where(cycle_ok, 2, 6), 7),
        jnp.where(~found, 1 if polish_step else 0, jnp.where(move == REESTIMATE, 2, jnp.where(K >= cap, 3, 4))))))
    if lanes:  # a fit whose pass has ended waits for the others (vmap keeps its state): no branch for it
        action = jnp.where((st.status == RUNNING) & (st.phase == MOVES), action, 6)
    k = jnp.where(cycling, st.index[j], k)
    target = jnp.where(cycling, new_j, target)
    gain = jnp.where(cycling, cycle_gain, gain)
    none = jnp.zeros_like(st.S)

    def end(st):
        return st._replace(phase=PASS_END), none

    def polish(st):
        made, newton_gain, new = _when(jnp.any(settling), lambda o: CM.newton_polish(o[2], buf, data, settle),
                                       (jnp.asarray(False), jnp.asarray(0.0), st), lanes)
        recorded = record(new._replace(moves=new.moves + 1), new.value + newton_gain, REESTIMATE)
        cycle = st._replace(cycling=jnp.asarray(True), cycle_next=jnp.zeros_like(st.cycle_next),
                            cycle_made=jnp.zeros_like(st.cycle_made), pending=settling)
        return lax.cond(made, lambda _: recorded, lambda _: lax.cond(
            jnp.any(settling), lambda _: cycle, lambda _: st._replace(phase=PASS_END), None), None), none

    def made(ok, st):
        recorded = record(st._replace(moves=st.moves + 1, cycle_made=st.cycle_made + cycling), st.value + gain,
                          jnp.where(cycling, REESTIMATE, move))
        return choose(ok, recorded, st._replace(held=st.held.at[k].set(True)))

    def reestimate(st):
        slot = jnp.where(cycling, j, jnp.argmax((st.index == k) & slots(st)))
        ok, st = CM.reestimate(st, buf, k, target, slot)
        return made(ok, st), none

    def grow(st):
        return st._replace(status=GROW_ACTIVE), none

    def add(st):
        ok, st, c = CM.add(st, buf, data, k, target, kind)
        return made(ok, st), c

    def full(st):
        return st._replace(status=GROW_TRACE), none

    def skip(st):
        return st, none

    def done(st):
        return st._replace(cycling=jnp.asarray(False), phase=jnp.where(st.cycle_made > 0, MOVES, PASS_END)), none

    branches = tuple(lambda sc, fn=fn: fn(sc[0]) for fn in (end, polish if polish_step else end, reestimate, grow,
                                                            add, full, skip, done))
    st, c = _switch(action, branches, (st, none), lanes)
    st = st._replace(cycle_next=jnp.where(cycling & ((action == 2) | (action == 6)), j + 1, st.cycle_next)
                     .astype(st.cycle_next.dtype))
    written = st.K > K  # an add made: its column into slot K
    slot = jnp.minimum(K, cap - 1).astype(jnp.int32)
    phi = jnp.where(written, column(data, k, kind), buf.AT[slot])
    c = jnp.where(written, c, buf.C[:, slot])
    zero = jnp.zeros((), jnp.int32)
    buf = buf._replace(AT=lax.dynamic_update_slice(buf.AT, phi[None, :], (slot, zero)),
                       C=lax.dynamic_update_slice(buf.C, c[:, None], (zero, slot)))
    return flush(st, buf)


def _evaluations(st, buf, data, kind, starting):
    """The factor set afresh at its updated parameters and the ELBO there (recorded), then the
    extrapolation's trials (:func:`ppl_sbl.fast_ard.compiled_factors.plan`; none at the start of a
    fit), each the factor set afresh and the ELBO: one loop, one evaluation a turn. Returns (state,
    buffers, ELBO)."""
    def cond(carry):
        return (carry[0] == 0) | carry[2]

    def body(carry):
        i, length, searching, cur, cur_buf, value, new, d = carry
        first = i == 0
        trial = choose(first, cur, CF.set_parameters(cur, new + d * length, kind))
        trial, trial_buf = CF.set_factor(trial, cur_buf, data, kind)
        trial_value = CF.elbo(trial, trial_buf, data, kind)
        # after the first evaluation: its record and the extrapolation's plan
        base = record(trial, trial_value, jnp.where(starting, 0, UPDATE))
        planned, go, new0, d0, length0 = CF.plan(base, trial_value, kind)
        base = choose(starting, base, planned)
        # after a trial: kept where it raises the ELBO, else the next length
        kept = ~first & (trial_value > value)
        won = record(trial._replace(hist_n=jnp.zeros_like(trial.hist_n)), trial_value, UPDATE)
        shorter = length * CF.SHORTEN
        return (i + 1,
                jnp.where(first, length0, jnp.where(kept, length, shorter)),
                jnp.where(first, go & ~starting & (length0 >= 1.0), ~kept & (shorter >= 1.0)),
                choose(first, base, choose(kept, won, cur)),
                choose(first | kept, trial_buf, cur_buf),
                jnp.where(first | kept, trial_value, value),
                jnp.where(first, new0, new), jnp.where(first, d0, d))

    P = CF.parameters(st, kind).shape[0]
    start = (jnp.asarray(0), jnp.asarray(0.0), jnp.asarray(True), st, buf, jnp.asarray(0.0), jnp.zeros(P),
             jnp.zeros(P))
    _, _, _, st, buf, value, _, _ = lax.while_loop(cond, body, start)
    return st, buf, value


def _pass_end(st, buf, data, kind):
    """The factor's update given q(w), the factor set afresh, the ELBO, the extrapolation of the
    factor (``Extrapolation``), the stopping rule (``run_passes``). At the start of a fit (phase
    ``START``), the factor as it is set into the empty model, and its ELBO. Returns (state,
    buffers)."""
    starting = st.phase == START
    before = CF.weights(st, data, kind)
    updated = CF.update(st, buf, data, kind)
    st = st._replace(**{name: jnp.where(starting, getattr(st, name), getattr(updated, name))
                        for name in ("e", "f", "xi", "omega_shape", "omega_rate")})
    if CF.extrapolates(kind):
        st, buf, value = _evaluations(st, buf, data, kind, starting)
    else:
        st, buf = CF.set_factor(st, buf, data, kind)
        value = CF.elbo(st, buf, data, kind)
        st = record(st, value, jnp.where(starting, 0, UPDATE))
    change = CF.weights_change(before, CF.weights(st, data, kind))
    converged = ~starting & (st.moves < data.max_moves) & (st.moves == st.first) & (
        jnp.abs(value - st.start) <= data.tol * jnp.abs(value)) & (change <= jnp.sqrt(data.tol))
    released, was_held = CF.release(st, kind)
    st = st._replace(omega_held=jnp.where(converged & was_held, released.omega_held, st.omega_held))
    converged = converged & ~was_held
    stopped = ~starting & ((st.moves >= data.max_moves) | (st.passes >= data.max_passes))
    status = jnp.where(~starting & (st.moves >= data.max_moves), STOPPED, jnp.where(converged, CONVERGED, jnp.where(
        stopped, STOPPED, RUNNING)))
    going = (status == RUNNING) & ~starting
    return st._replace(status=status, passes=st.passes + going, start=value, first=st.moves, phase=MOVES,
                       cycling=jnp.asarray(False),
                       held=jnp.where(going, jnp.zeros_like(st.held), st.held)), buf


def _passes(st, buf, data, until, kind, lanes=False):
    """The passes from ``st`` until the fit stops, a buffer needs to grow, or pass ``until`` is
    about to start (the fit then returns ``RUNNING``, for the host to report progress and go on);
    a fit stopped for its buffers goes on, one that has stopped for good stays as it is.
    ``lanes``: vmapped with other fits (axis :data:`LANES`; :func:`_when`)."""
    per_pass = MOVES_PER_COEFFICIENT * data.m

    def moves(carry):
        def cond(carry):
            st, _ = carry
            return (st.status == RUNNING) & (st.phase == MOVES)

        return lax.while_loop(cond, lambda c: move_step(*c, data, per_pass, kind, lanes), carry)

    def passes(carry):
        st, buf = moves(carry)
        st, buf = _when(st.status == RUNNING, lambda c: _pass_end(*c, data, kind), (st, buf), lanes)
        return flush(st, buf)

    waiting = (st.status == GROW_ACTIVE) | (st.status == GROW_TRACE)
    st = st._replace(status=jnp.where(waiting, RUNNING, st.status))
    st, buf = lax.while_loop(lambda c: (c[0].status == RUNNING) & (c[0].passes < until), passes, (st, buf))
    # the types the program takes (no weak types), so that a call that goes on compiles nothing
    return st._replace(phase=st.phase.astype(jnp.int64), status=st.status.astype(jnp.int64)), buf


#: XLA's options for the schedule's programs: copy insertion with region analysis, which leaves out
#: copies of the state's fields that a move's branch passes on unchanged (the eight-way switch of
#: :func:`move_step` carries the whole state). The same arithmetic, fewer operations per move.
OPTIONS = {"xla_cpu_copy_insertion_use_region_analysis": True}

#: The compiled passes of one fit (:func:`run` calls it until the fit stops): one XLA program per
#: kind and shape.
program = functools.partial(jax.jit, static_argnames=("kind",), donate_argnums=(0, 1),
                            compiler_options=OPTIONS)(_passes)

#: The host reports a compiled fit's progress about this often (seconds): the program runs as many
#: passes as it ran in this time before and returns; the host calls it again after the report.
REPORT_INTERVAL = 0.25


@functools.partial(jax.jit, static_argnames=("kind", "batch_size"), donate_argnums=(0, 1), compiler_options=OPTIONS)
def _programs(st, buf, data, kind, batch_size):
    """:func:`_passes` of several fits stacked along a leading axis: vmapped in batches of
    ``batch_size`` (:func:`ppl_sbl.engine.batched_map`)."""
    n = st.K.shape[0]
    never = jnp.iinfo(jnp.int64).max
    return batched_map(lambda lane: _passes(*lane, never, kind), (st, buf, data), n, batch_size,
                       batched=jax.vmap(lambda lane: _passes(*lane, never, kind, True), axis_name=LANES))


def padded_sizes(data):
    """(N, M) of the padded problem (whatever the design's layout, :func:`transposed`)."""
    return data.t.shape[0], data.col_sq.shape[0]


def empty_state(data, factor_fields, cap, length):
    """The empty model (host NumPy), to be started by the program (phase ``START``)."""
    N, M = padded_sizes(data)
    zeros, i32, i64 = np.zeros, np.int32, np.int64
    (e, f, xi, W, hist, hist_value, hist_n, hist_active, hist_held, omega_shape, omega_rate,
     held) = factor_fields
    buf = Buffers(AT=zeros((cap, N)), C=zeros((M, cap)), trace=np.full(length, np.nan), events=zeros(length, i32),
                  length=i32(0))
    st = State(Sigma=zeros((cap, cap)), mu=zeros(cap), index=zeros(cap, i32), K=i32(0), x=np.ones(M), S=zeros(M),
               Q=zeros(M), h=zeros(M), b=zeros(M), active=zeros(M, bool), blocked=zeros(M, bool),
               held=zeros(M, bool), pending=zeros(cap, bool), e=np.float64(e), f=np.float64(f), g=np.float64(1.0),
               xi=xi, W=W, hist=hist, hist_value=hist_value, hist_n=hist_n, hist_active=hist_active,
               hist_held=np.bool_(hist_held), omega_shape=omega_shape, omega_rate=omega_rate, omega_held=np.bool_(held),
               value=np.float64(0.0), start=np.float64(0.0), first=i64(0), moves=i64(0), passes=i64(1),
               phase=i64(START), status=i64(RUNNING), recent=zeros(cap + 1), recent_events=zeros(cap + 1, i32),
               recent_n=i32(0), cycling=np.bool_(False), cycle_next=i32(0), cycle_made=i32(0))
    return st, buf


def grown(st, buf, cap):
    """The state in buffers of capacity ``cap`` (slots); stacked fits alike (the slot axes are the
    trailing ones)."""
    def pad(a, axes, size=cap):
        widths = [(0, 0)] * a.ndim
        for ax in axes:
            widths[ax] = (0, size - a.shape[ax])
        return jnp.pad(a, widths)

    buf = buf._replace(AT=pad(buf.AT, [-2]), C=pad(buf.C, [-1]))
    st = st._replace(recent=pad(st.recent, [-1], cap + 1), recent_events=pad(st.recent_events, [-1], cap + 1),
                     Sigma=pad(st.Sigma, [-2, -1]), mu=pad(st.mu, [-1]), index=pad(st.index, [-1]),
                     pending=pad(st.pending, [-1]))
    return st, buf


def bucket(n):
    """The size a dimension of n is padded to: the smallest of 8, and 2^k, 1.25 2^k, 1.5 2^k, 1.75
    2^k (k >= 3) that is at least n, so that problems of nearby sizes share one compiled program
    and the padding adds at most a quarter."""
    if n <= 8:
        return 8
    p = 1 << ((n - 1).bit_length() - 1)
    return next(size for size in (p + p // 4, p + p // 2, p + 3 * p // 4, 2 * p) if size >= n)


def grow(cap):
    """The capacity after ``cap`` (:data:`CAPACITY`): doubled up to 64, then 2^k and 1.5 2^k in
    turn (64, 96, 128, 192, 256, ...), so that a large active block is padded by at most a half."""
    if cap < 64:
        return 2 * cap
    return cap * 3 // 2 if cap == power_of_two(cap) else power_of_two(cap)


def power_of_two(n):
    """The smallest power of two that is at least n (1 for n <= 1)."""
    return 1 << max(0, int(math.ceil(math.log2(max(n, 1)))))


#: Columns a block of :func:`padded`'s copy of a matrix that is not C-contiguous.
COPY_BLOCK = 256

#: Bytes :func:`padded` aligns its array's start to: JAX on a CPU then runs a program on the array's
#: own memory instead of copying it in (a NumPy array from the allocator starts at 16 bytes).
ALIGN = 64


def _aligned_zeros(shape):
    """A C-contiguous float64 zero array of ``shape`` whose data start at a multiple of :data:`ALIGN` bytes."""
    size = math.prod(shape)
    raw = np.zeros(size + ALIGN // 8)
    start = (-raw.ctypes.data % ALIGN) // 8
    return raw[start:start + size].reshape(shape)


def padded(A, shape, scale=None):
    """``A`` (2-D, any memory layout), times ``scale`` where given (broadcast against ``A``: a row
    (1, cols), a column (rows, 1) or a scalar), in the top-left corner of a C-contiguous zero array of
    ``shape``, aligned to :data:`ALIGN` bytes (a compiled program then reads it where it is). A
    matrix that is not C-contiguous (a transposed view) is copied in blocks of :data:`COPY_BLOCK`
    columns, each read from contiguous rows of the array it views: a strided copy of the whole
    matrix at once reads across the cache for every element."""
    out = _aligned_zeros(shape)
    rows, cols = A.shape
    scale = None if scale is None else np.asarray(scale, dtype=np.float64)
    step = max(cols, 1) if A.flags.c_contiguous else COPY_BLOCK
    for j in range(0, cols, step):
        block, target = A[:, j:j + step], out[:rows, j:min(j + step, cols)]
        if scale is None:
            target[...] = block
        else:
            np.multiply(block, scale[:, j:j + step] if scale.ndim == 2 and scale.shape[1] > 1 else scale,
                        out=target)
    return out


def _lane(Phi, factor, a0, b0, tol, max_passes, max_moves, exact, scale=None):
    """One fit's kind, :class:`Data` (host NumPy) and sizes (N, M)."""
    kind = CF.kind_of(factor)
    if kind is None:
        raise ValueError(f"the compiled schedule has no form for a {type(factor).__name__} factor.")
    data, sizes = fit_data(Phi, kind, a0, b0, tol, max_passes, max_moves, exact,
                           lambda design, N: CF.host_data(factor, kind, design, N), CF.extra(factor, kind), scale)
    return kind, data, sizes


def fit_data(Phi, kind, a0, b0, tol, max_passes, max_moves, exact, factor_arrays, extra=(), scale=None):
    """One fit's :class:`Data` (host NumPy) and sizes (N, M): the design (its columns times ``scale``,
    (M,) or a scalar, where given) in the kind's layout (:func:`transposed`), padded to the sizes of
    :func:`bucket`; the factor's arrays ``factor_arrays(design, N)`` -> (squares, t, omega, proj, e0,
    f0, c, d); ``extra`` as :class:`Data`'s."""
    Phi = np.asarray(Phi, dtype=np.float64)
    N, M = Phi.shape
    if not b0 > 0:
        raise ValueError("The compiled schedule needs a proper Gamma prior on the precisions (a0, b0 > 0); "
                         "fit Tipping & Faul's limit a0 = b0 = 0 with `compiled=False`.")
    big = np.iinfo(np.int64).max // 4
    design = Phi.T if transposed(kind) else Phi  # the layout of Data.design
    shape = (bucket(M), bucket(N)) if transposed(kind) else (bucket(N), bucket(M))
    if scale is not None:
        scale = np.asarray(scale, dtype=np.float64)
        scale = scale[:, None] if transposed(kind) and scale.ndim else scale  # the columns of Phi
    if scale is not None or design.shape != shape or not design.flags.c_contiguous:
        design = padded(design, shape, scale)
    columns = np.zeros(bucket(M), dtype=bool)
    columns[:M] = True
    squares, t, omega, proj, e0, f0, c, d = factor_arrays(design, N)

    def scalar(v, dtype=np.float64):
        return np.asarray(v, dtype=dtype)

    col_sq = np.einsum("mn,mn->m" if transposed(kind) else "nm,nm->m", design, design)
    data = Data(design=design, squares=squares, col_sq=col_sq, t=t, omega=omega, proj=proj,
                a0=scalar(a0), b0=scalar(b0), e0=scalar(e0), f0=scalar(f0), c=scalar(c), d=scalar(d), tol=scalar(tol),
                max_passes=scalar(max_passes, np.int64), max_moves=scalar(big if max_moves is None else max_moves,
                                                                       np.int64),
                exact=scalar(exact, bool), n=scalar(N), m=scalar(M, np.int64), columns=columns, extra=extra)
    return data, (N, M)


#: The active block's first capacity (slots). The moves' and the passes' work grows with the
#: capacity, not with the active count K (O(M cap) a move; O(M cap^2) q(w) afresh; O(cap^3) the joint
#: Newton step), and each growth (:func:`grow`) is one more program: a fit whose K passes it goes on
#: in larger buffers.
CAPACITY = 32


def lengths(M, capacity, trace_length):
    """The active block's first capacity (default :data:`CAPACITY`) and the trace buffer's length."""
    cap = min(power_of_two(M), power_of_two(CAPACITY if capacity is None else capacity))
    length = power_of_two(max(4 * M + 256 if trace_length is None else trace_length, 4 * (cap + 1)))
    return cap, length


def _result(out, values, events, factor, kind, N, M):
    """The fields of a :class:`ppl_sbl.fast_ard.FastFit` from the program's final state ``out``
    (host NumPy) and the trace's entries; the fit's factor written into the host ``factor``."""
    values, events = np.concatenate(values), np.concatenate(events)
    CF.write_back(factor, kind, out, N)
    return dict(coefficient_fields(out, M), elbo_trace=values, trace_events=events[1:].astype(int),
                num_moves=int(out.moves), num_passes=int(out.passes), converged=int(out.status) == CONVERGED)


def coefficient_fields(out, M):
    """The coefficients' fields of a :class:`ppl_sbl.fast_ard.FastFit` (active, mu, Sigma, x,
    frozen_var, supported) from one fit's final state ``out`` (host NumPy)."""
    K = int(out.K)
    active = np.asarray(out.index[:K], dtype=np.intp)
    x, h = np.asarray(out.x[:M]), np.asarray(out.h[:M])
    frozen_var = 1.0 / (x + h)
    frozen_var[active] = 0.0
    mu, Sigma = np.asarray(out.mu[:K]), np.asarray(out.Sigma[:K, :K])
    # the active coefficients' leave-one-out s_k and q_k (``_leave_one_out``)
    xa, diag, S = x[active], np.diag(Sigma), np.asarray(out.S)[active]
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(xa * diag > 0.5, xa * S / (xa - S), 1.0 / diag - xa)
    q = mu / diag
    return dict(active=active, mu=mu, Sigma=Sigma, x=x, frozen_var=frozen_var,
                supported=np.abs(q) > np.sqrt(np.maximum(s, 0.0)))


def host_arrays(tree):
    """The arrays of ``tree`` as host NumPy arrays (read-only views of the CPU's buffers: no copy
    where the program ran on the CPU)."""
    return jax.tree.map(np.asarray, tree)


@J.one_blas_thread
def run(Phi, factor, a0, b0, tol, max_passes, max_moves, progress, exact, capacity=None, trace_length=None,
        report_interval=REPORT_INTERVAL, scale=None):
    """The compiled fast schedule of one output, in the units of
    :func:`ppl_sbl.fast_ard.standard_units`: the arguments and result of
    ``ppl_sbl.fast_ard.schedule._schedule``, the result as the fields of a
    :class:`ppl_sbl.fast_ard.FastFit` (a dict). Sets the host factor to the fit's (q(gamma)'s (e, f),
    the JJ bound's xi, the weights' q(omega)). ``capacity``: the active block's first capacity (a
    power of two, default :data:`CAPACITY`; it grows as the fit needs (:func:`grow`), a new
    program); ``trace_length``: the ELBO trace's buffer (default 4 M + 256 rounded up to a power
    of two), taken off to the host whenever it fills. ``progress(passes, moves, elbo, active)``,
    where not None, is called at the end of the fit and between calls of the program every
    ``report_interval`` seconds or so (each call runs as many passes as fit in that time; 0: one
    pass a call, a report after every pass). ``scale``: the columns of ``Phi`` multiplied by it ((M,)
    or a scalar; :func:`ppl_sbl.fast_ard.units.column_scale`) on their way into the program's padded
    copy, where the caller has not done so."""
    kind, data, (N, M) = _lane(Phi, factor, a0, b0, tol, max_passes, max_moves, exact, scale)
    cap, length = lengths(M, capacity, trace_length)
    st, buf = empty_state(data, CF.host_state(factor, kind, N, *padded_sizes(data)), cap, length)
    values, events = [], []  # the trace's entries taken off the buffer when it filled

    def take_off(buf, length):
        n = int(buf.length)
        values.append(np.asarray(buf.trace[:n]))
        events.append(np.asarray(buf.events[:n]))
        if length == buf.trace.shape[0]:
            return buf._replace(length=np.int32(0))
        return buf._replace(trace=np.full(length, np.nan), events=np.zeros(length, np.int32), length=np.int32(0))

    never = np.iinfo(np.int64).max
    chunk, began = 1, time.perf_counter()  # passes a call, when the call began
    until = np.int64(never if progress is None else 1 + chunk)  # passes count from 1
    while True:
        st, buf = program(st, buf, data, until, kind)
        status = int(st.status)
        if status == GROW_ACTIVE:
            cap = min(grow(cap), power_of_two(M))
            st, buf = grown(st, buf, cap)
            if buf.trace.shape[0] < 4 * (cap + 1):  # room for a step's entries
                buf = take_off(buf, power_of_two(4 * (cap + 1)))
        elif status == GROW_TRACE:
            buf = take_off(buf, buf.trace.shape[0])
        elif status == RUNNING:  # paused for a report: the passes before pass `until` are done
            progress(int(st.passes) - 1, int(st.moves), float(st.start), int(st.K))
            took, began = time.perf_counter() - began, time.perf_counter()
            chunk = int(min(2 * chunk, max(1, chunk * report_interval / max(took, 1e-9))))
            until = np.int64(int(st.passes) + chunk)
        else:
            break
    out, buf = host_arrays((st, buf))
    take_off(buf, buf.trace.shape[0])
    if progress is not None:
        progress(int(out.passes), int(out.moves), float(out.start), int(out.K))
    return _result(out, values, events, factor, kind, N, M)


@J.one_blas_thread
def run_many(lanes, batch_size=1, capacity=None, trace_length=None, threads=1):
    """Several fits of :func:`run` in one compiled program: ``lanes`` a list of its arguments
    ``(Phi, factor, a0, b0, tol, max_passes, max_moves, exact)``, every design of one shape and
    every factor of one kind; the fits run side by side in batches of ``batch_size`` (vmapped;
    1: one after the other, each with its own branches), their buffers grown together.
    ``threads`` (with ``batch_size`` 1; vmapped batches reduce over their fits, which two
    programs running at once must not): the fits dealt out into that many groups of one size
    (filled up with copies of a group's first fit, whose results are dropped), each group's
    program called from its own thread, so that the groups run on separate CPU cores. Returns
    :func:`run`'s dicts, in order, each fit the same as :func:`run`'s."""
    prepared = [_lane(*lane) for lane in lanes]
    kinds = {kind for kind, _, _ in prepared}
    sizes = {size for _, _, size in prepared}
    if len(kinds) != 1 or len(sizes) != 1:
        raise ValueError("the fits of one compiled call need designs of one shape and factors of one kind; "
                         f"got shapes {sorted(sizes)} and kinds {sorted(kinds)}.")
    (kind,), ((N, M),) = kinds, sizes
    n = len(lanes)
    cap, length = lengths(M, capacity, trace_length)
    starts = [empty_state(data, CF.host_state(lane[1], kind, N, *padded_sizes(data)), cap, length) + (data,)
              for (_, data, _), lane in zip(prepared, lanes)]
    groups = max(1, min(int(threads), n)) if int(batch_size) <= 1 else 1
    size = -(-n // groups)
    members = [list(range(g, n, groups)) for g in range(groups)]  # dealt out: neighbours (similar fits) apart
    members = [m + [m[0]] * (size - len(m)) for m in members]
    batch_size = max(1, min(int(batch_size), size))

    def run_group(indices):
        stacked = jax.device_put(jax.tree.map(lambda *leaves: np.stack(leaves), *(starts[i] for i in indices)))
        return _run_group(*stacked, kind, M, cap, batch_size)

    if len(members) == 1:
        done = [run_group(members[0])]
    else:
        with concurrent.futures.ThreadPoolExecutor(len(members)) as pool:
            done = list(pool.map(run_group, members))
    results = {}
    for indices, (out, values, events) in zip(members, done):
        for j, i in enumerate(indices):
            if i not in results:
                results[i] = _result(jax.tree.map(lambda a: a[j], out), values[j], events[j], lanes[i][1], kind, N, M)
    return [results[i] for i in range(n)]


def _run_group(st, buf, data, kind, M, cap, batch_size):
    """:func:`run_many`'s loop for one group of stacked fits: the program, the buffers grown and
    the traces taken off until every fit has stopped. Returns (final state, host NumPy; every
    fit's trace entries; its events)."""
    n = st.K.shape[0]
    values, events = [[] for _ in range(n)], [[] for _ in range(n)]

    def take_off(buf, length):
        host = host_arrays(buf)
        for i in range(n):
            values[i].append(np.asarray(host.trace[i, :host.length[i]]))
            events[i].append(np.asarray(host.events[i, :host.length[i]]))
        return buf._replace(trace=np.full((n, length), np.nan), events=np.zeros((n, length), np.int32),
                            length=np.zeros(n, np.int32))

    while True:
        st, buf = _programs(st, buf, data, kind, batch_size)
        status = np.asarray(st.status)
        if np.any(status == GROW_ACTIVE):
            cap = min(grow(cap), power_of_two(M))
            st, buf = grown(st, buf, cap)
            buf = take_off(buf, max(buf.trace.shape[1], power_of_two(4 * (cap + 1))))
        elif np.any(status == GROW_TRACE):
            buf = take_off(buf, buf.trace.shape[1])
        else:
            break
    out, buf = host_arrays((st, buf))
    take_off(buf, 1)
    return out, values, events
