"""The fast schedule with several outputs (:func:`ppl_sbl.fast_ard.outputs.schedule_outputs`) as
one compiled XLA program, for the multinomial probit (:class:`ppl_sbl.fast_ard.MultinomialProbit`,
the multiclass RVM of Girolami & Rogers 2006, q(y) by the quadrature of :mod:`ppl_sbl.probit`):
the C outputs' states (:class:`ppl_sbl.fast_ard.compiled_state.State`) and active columns stacked
along a leading axis, each output's moves in turn (the single output's step,
:func:`ppl_sbl.fast_ard.compiled.move_step`, without the polish), then q(y)'s update with the
parameter expansion and, on a pass that added nothing, the Newton step on the outputs' means, kept
where it does not lower the ELBO; the same moves and updates as the host loop, so the fit is the
same to rounding. Given q(y), output c is a regression on the targets E[y_c] with unit noise
precision (W = 1, r = E[y_c]). Buffers grow and the trace is taken off on the host, as for one
output (:func:`ppl_sbl.fast_ard.compiled.run`)."""
from __future__ import annotations

import functools
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..probit import cone_moments
from . import compiled as CC
from . import compiled_factors as CF
from . import jax_algebra as J
from .compiled_state import (CONVERGED, GROW_ACTIVE, GROW_TRACE, MOVES, PASS_END, RUNNING, STOPPED, Buffers,
                             choose, coefficient_terms, gather, put, refresh)
from .outputs import NEWTON
from .passes import MOVES_PER_COEFFICIENT, UPDATE

__all__ = ["supports", "program", "run"]


def supports(factor):
    """Whether the compiled program fits this factor with several outputs."""
    from .factors import MultinomialProbit

    return type(factor) is MultinomialProbit


class Shared(NamedTuple):
    """What the outputs share: q(y) (its location ``loc`` (N, C), ln Z_n, E[y_n] (N, C) and
    E||y_n - loc_n||^2, zero on the padding's rows), the ELBO, its value at the pass's start, the
    moves and passes so far, the output whose turn it is (C: the pass's update), whether the pass
    added a coefficient, the fit's status, whether it has started, and the trace (the ELBO after
    every step, each step's event and output, -1 for the updates)."""

    loc: jax.Array
    log_z: jax.Array
    ey: jax.Array
    square: jax.Array
    value: jax.Array
    start: jax.Array
    moves: jax.Array
    passes: jax.Array
    turn: jax.Array
    added: jax.Array
    status: jax.Array
    started: jax.Array
    trace: jax.Array
    events: jax.Array
    outputs: jax.Array
    length: jax.Array


def _buffers(AT, C):
    """One output's active columns as the single output's :class:`Buffers` (no trace)."""
    return Buffers(AT=AT, C=C, trace=None, events=None, length=None)


def _q_y(loc, labels, real):
    """q(y) at the means ``loc`` (``MultinomialProbit.relocate``): (ln Z, E[y], E||y - loc||^2,
    Cov[y]), by the quadrature of :func:`ppl_sbl.probit.cone_moments`; zero on the padding."""
    out = cone_moments(loc, labels, square=True, covariance=True)
    return tuple(jnp.where(real.reshape(real.shape + (1,) * (v.ndim - 1)), v, 0.0) for v in out)


def _set_outputs(sts, AT, CB, data, ey):
    """Every output's factor set to the targets E[y_c] (``_Schedule.set_factor`` with W = 1): h, b,
    the frozen q(alpha) at their optimum (2), q(w) and the statistics afresh."""
    def one(st, at, c, target):
        h, b = data.col_sq, target @ data.design
        x_out, _ = J.frozen_optimum(h, data.a0, data.b0)
        st = st._replace(g=jnp.ones_like(st.g), h=h, b=b, x=jnp.where(st.active, st.x, x_out))
        return refresh(st, _buffers(at, c))

    return jax.vmap(one)(sts, AT, CB, ey.T)


def _moments(sts, AT, CB, data):
    """Each output's moments of phi_n^T w_c: means (C, N) and the sums of the variances (C,)."""
    return jax.vmap(lambda st, at, c: CF.moments(st, _buffers(at, c), data, "gaussian"))(sts, AT, CB)


def _elbo(sts, AT, CB, sh, data):
    """``MultinomialProbit.elbo_terms`` plus every output's coefficient terms."""
    means, var_sums = _moments(sts, AT, CB, data)
    offset = sh.loc - means.T
    cross = jnp.sum(offset * (sh.ey - sh.loc))
    lik = jnp.sum(sh.log_z) - cross - 0.5 * jnp.sum(offset * offset) - 0.5 * jnp.sum(var_sums)
    return lik + jnp.sum(jax.vmap(lambda st: coefficient_terms(st, data))(sts))


def _record(sh, value, event):
    """The ELBO ``value`` after a step of kind ``event`` of no single output, into the trace."""
    return sh._replace(value=value, trace=put(sh.trace, sh.length, value), events=put(sh.events, sh.length, event),
                       outputs=put(sh.outputs, sh.length, -1), length=sh.length + 1)


def _newton_means(sts, AT, gradient, cov, scale):
    """``outputs.newton_locations`` on the stacked outputs, from dF/dm = ``gradient`` (N, C) and
    d2F/dm_n^2 = ``cov`` - I: the Newton step on the outputs' means (the slots past each output's
    K held at 0 by a unit diagonal). Returns the means m' (N, C) of its end."""
    C, cap, _ = AT.shape
    mu = scale * sts.mu
    x = jax.vmap(lambda st: gather(st.x, st, 1.0))(sts)
    grad = jnp.einsum("ckn,nc->ck", AT, gradient) - x * mu
    hess = jnp.einsum("ckn,ncd,dln->ckdl", AT, cov - jnp.eye(C), AT).reshape(C * cap, C * cap)
    L = J.cholesky(jnp.diag(x.ravel()) - hess)
    step = J.cho_solve(L, grad.ravel()).reshape(C, cap)
    return jnp.einsum("ckn,ck->nc", AT, mu + step)


def _turn(carry, data, per_pass):
    """Output ``turn``'s moves (``schedule_outputs``'s inner loop), from where it stopped if it
    stopped for its buffers."""
    sts, AT, CB, sh = carry
    c = sh.turn
    st = jax.tree.map(lambda a: a[c], sts)
    fresh = st.phase != MOVES
    st = st._replace(value=sh.value, moves=sh.moves, status=jnp.full_like(st.status, RUNNING),
                     first=jnp.where(fresh, sh.moves, st.first), held=st.held & ~fresh,
                     phase=jnp.full_like(st.phase, MOVES))
    K = st.K
    buf = Buffers(AT=AT[c], C=CB[c], trace=sh.trace, events=sh.events, length=sh.length)
    st, buf = lax.while_loop(lambda x: (x[0].status == RUNNING) & (x[0].phase == MOVES),
                             lambda x: CC.move_step(*x, data, per_pass, "gaussian", polish_step=False), (st, buf))
    entry = jnp.arange(sh.outputs.shape[0])
    outputs = jnp.where((entry >= sh.length) & (entry < buf.length), c, sh.outputs).astype(sh.outputs.dtype)
    sts = jax.tree.map(lambda all_, one: lax.dynamic_update_index_in_dim(all_, one, c, 0), sts, st)
    AT = lax.dynamic_update_index_in_dim(AT, buf.AT, c, 0)
    CB = lax.dynamic_update_index_in_dim(CB, buf.C, c, 0)
    done = st.status == RUNNING  # else it stopped for its buffers, and goes on after them
    return sts, AT, CB, sh._replace(value=st.value, moves=st.moves, turn=jnp.where(done, c + 1, c).astype(c.dtype),
                                    added=sh.added | (st.K > K), status=st.status.astype(sh.status.dtype),
                                    trace=buf.trace, events=buf.events, outputs=outputs, length=buf.length)


def _pass_end(carry, data, labels):
    """q(y)'s update after every output's turn (``schedule_outputs``): the parameter expansion
    (PX-VB, Qi & Jaakkola 2006; z in ``MultinomialProbit.expansion``), q(y) given q(w), every
    output's factor afresh, the ELBO; on a pass that added no coefficient the Newton step on the
    means, kept where the ELBO is not lower; the stopping rule. At the start
    of the fit, q(y) at the means 0 and the ELBO (the trace's first entry). One evaluation (q(y) at
    a location, the outputs' factors, the ELBO) a turn of one loop."""
    sts, AT, CB, sh = carry
    real = data.omega > 0
    C = AT.shape[0]
    starting = ~sh.started
    means, var_sums = _moments(sts, AT, CB, data)
    newton = ~starting & ~sh.added & jnp.any(sts.K > 0)
    # the expansion's z = c^2 (``MultinomialProbit.expansion``)
    offset = sh.loc - means.T
    S = (jnp.sum(sh.square) + 2.0 * jnp.sum(offset * (sh.ey - sh.loc)) + jnp.sum(offset * offset)
         + jnp.sum(var_sums))
    K = data.n * C - 2.0 * data.a0 * (data.m * C)
    A = jnp.sum(jnp.where(data.columns, sts.x, 0.0))
    z = jnp.where(starting, 1.0, (K + jnp.sqrt(K * K + 8.0 * S * data.b0 * A)) / (2.0 * S))
    base = sts._replace(x=sts.x / z)
    scale = jnp.sqrt(z)

    def body(loop):
        i, loc, sts, sh = loop
        log_z, ey, square, cov = _q_y(loc, labels, real)
        moved = sh._replace(loc=loc, log_z=log_z, ey=ey, square=square)
        stepped = _set_outputs(base, AT, CB, data, ey)
        value = _elbo(stepped, AT, CB, moved, data)
        first = i == 0
        event = jnp.where(first, jnp.where(starting, 0, UPDATE), NEWTON)
        sts, sh = choose(first | (value >= sh.value), (stepped, _record(moved, value, event)), (sts, sh))
        proposal = lax.cond(first & newton, lambda _: _newton_means(base, AT, ey - loc, cov, scale),
                            lambda _: loc, None)
        return i + 1, proposal, sts, sh

    loop = (jnp.zeros((), jnp.int32), jnp.where(starting, 0.0, scale * means.T), base, sh)
    _, _, sts, sh = lax.while_loop(lambda loop: (loop[0] == 0) | ((loop[0] == 1) & newton), body, loop)
    converged = ~starting & (jnp.abs(sh.value - sh.start) <= data.tol * jnp.abs(sh.value))
    status = jnp.where(converged, CONVERGED, jnp.where(~starting & (sh.passes >= data.max_passes), STOPPED, RUNNING))
    sts = sts._replace(phase=jnp.full_like(sts.phase, PASS_END))
    going = (status == RUNNING) & ~starting
    return sts, AT, CB, sh._replace(status=status.astype(sh.status.dtype), passes=sh.passes + going, start=sh.value,
                                    turn=jnp.zeros_like(sh.turn), added=jnp.zeros_like(sh.added),
                                    started=jnp.ones_like(sh.started))


@functools.partial(jax.jit, donate_argnums=(0, 1, 2, 3), compiler_options=CC.OPTIONS)
def program(sts, AT, CB, sh, data, labels, until):
    """The passes from where the fit stands until it stops, a buffer needs to grow, or pass
    ``until`` is about to start."""
    per_pass = MOVES_PER_COEFFICIENT * data.m
    C = AT.shape[0]
    waiting = (sh.status == GROW_ACTIVE) | (sh.status == GROW_TRACE)
    sh = sh._replace(status=jnp.where(waiting, RUNNING, sh.status).astype(sh.status.dtype))
    carry = (sts, AT, CB, sh)

    def body(carry):
        sh = carry[3]
        return lax.cond(sh.started & (sh.turn < C), lambda c: _turn(c, data, per_pass),
                        lambda c: _pass_end(c, data, labels), carry)

    return lax.while_loop(lambda c: (c[3].status == RUNNING) & (c[3].passes < until), body, carry)


@J.one_blas_thread
def run(Phi, factor, a0, b0, tol, max_passes, max_moves, progress, exact, capacity=None, trace_length=None,
        report_interval=CC.REPORT_INTERVAL):
    """``schedule_outputs`` for a :class:`ppl_sbl.fast_ard.MultinomialProbit` factor as one compiled
    program, in the units of :func:`ppl_sbl.fast_ard.standard_units`, with the arguments of
    :func:`ppl_sbl.fast_ard.compiled.run` (the trace's buffer 4 M C + 256 entries by default). Leaves
    the factor at the fit's q(y). Returns the fields of a :class:`ppl_sbl.fast_ard.MultiFastFit` (a
    dict), ``fits`` those of each output's :class:`ppl_sbl.fast_ard.FastFit`."""
    if not supports(factor):
        raise ValueError(f"the compiled schedule with several outputs has no form for a {type(factor).__name__} "
                         "factor.")
    C = int(factor.num_outputs)
    data, (N, M) = CC.fit_data(Phi, "gaussian", a0, b0, tol, max_passes, max_moves, exact,
                                 lambda design, N: CF.targetless(design, N, "gaussian"))
    Np = data.design.shape[0]
    labels = np.zeros(Np, dtype=np.int32)
    labels[:N] = factor.t
    cap, length = CC.lengths(M, capacity, 4 * M * C + 256 if trace_length is None else trace_length)
    one = np.ones(1)
    fields = (1.0, 1.0, one, one, np.zeros((4, 1)), np.zeros(4), np.int32(0), np.zeros(1, bool), False, one, one,
              False)  # q(gamma) at E[gamma] = 1 and no other factor: W = 1
    st, buf = CC.empty_state(data, fields, cap, length)
    sts = jax.tree.map(lambda a: np.stack([a] * C), st)
    AT, CB = np.stack([buf.AT] * C), np.stack([buf.C] * C)
    sh = Shared(loc=np.zeros((Np, C)), log_z=np.zeros(Np), ey=np.zeros((Np, C)), square=np.zeros(Np),
                value=np.float64(0.0), start=np.float64(0.0), moves=np.int64(0), passes=np.int64(1),
                turn=np.int32(0), added=np.bool_(False), status=np.int64(RUNNING), started=np.bool_(False),
                trace=buf.trace, events=buf.events, outputs=np.zeros(length, np.int32), length=np.int32(0))
    taken = []  # the trace's entries taken off when it filled: (values, events, outputs)

    def take_off(sh, size):
        n = int(sh.length)
        taken.append((np.asarray(sh.trace[:n]), np.asarray(sh.events[:n]), np.asarray(sh.outputs[:n])))
        return sh._replace(trace=np.full(size, np.nan), events=np.zeros(size, np.int32),
                           outputs=np.zeros(size, np.int32), length=np.int32(0))

    never = np.iinfo(np.int64).max
    chunk, began = 1, time.perf_counter()
    until = np.int64(never if progress is None else 1 + chunk)
    while True:
        sts, AT, CB, sh = program(sts, AT, CB, sh, data, labels, until)
        status = int(sh.status)
        if status == GROW_ACTIVE:
            cap = min(CC.grow(cap), CC.power_of_two(M))
            sts, buf = CC.grown(sts, Buffers(AT=AT, C=CB, trace=None, events=None, length=None), cap)
            AT, CB = buf.AT, buf.C
            if sh.trace.shape[0] < 4 * (cap + 1):
                sh = take_off(sh, CC.power_of_two(4 * (cap + 1)))
        elif status == GROW_TRACE:
            sh = take_off(sh, sh.trace.shape[0])
        elif status == RUNNING:
            progress(int(sh.passes) - 1, int(sh.moves), float(sh.start), int(np.sum(sts.K)))
            took, began = time.perf_counter() - began, time.perf_counter()
            chunk = int(min(2 * chunk, max(1, chunk * report_interval / max(took, 1e-9))))
            until = np.int64(int(sh.passes) + chunk)
        else:
            break
    sts, sh = CC.host_arrays((sts, sh))
    take_off(sh, 1)
    values, events, outputs = (np.concatenate(parts) for parts in zip(*taken))
    events, outputs = events[1:].astype(int), outputs[1:].astype(int)
    factor.restore((np.array(sh.loc[:N]), np.array(sh.log_z[:N]), np.array(sh.ey[:N]), np.array(sh.square[:N]),
                    None))
    passes, converged = int(sh.passes), int(sh.status) == CONVERGED
    fits = tuple(dict(CC.coefficient_fields(jax.tree.map(lambda a: a[c], sts), M), elbo_trace=values,
                      trace_events=events, num_moves=int(np.sum(outputs == c)), num_passes=passes,
                      converged=converged) for c in range(C))
    if progress is not None:
        progress(passes, int(sh.moves), float(sh.start), int(np.sum(sts.K)))
    return dict(fits=fits, elbo_trace=values, trace_events=events, trace_outputs=outputs, num_moves=int(sh.moves),
                num_passes=passes, converged=converged)
