"""The state of the compiled fast schedule (:mod:`ppl_sbl.fast_ard.compiled`): the fit's data, its
buffers of fixed capacity and the small state that the moves update, and the operations on them
that every likelihood factor shares (q(w) of the active block, the statistics S and Q, the
coefficients' part of the ELBO, the trace)."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ..expfam import gamma_mean_log, gaussian_entropy
from . import jax_algebra as J

COLLINEAR = 1e-10
LOG_ALPHA_TOL = 1e-3
MAX_ALIGNMENT = 1.0 - 1e-3
MAX_SPREAD = 1e5

RUNNING, CONVERGED, STOPPED, GROW_ACTIVE, GROW_TRACE = 0, 1, 2, 3, 4
MOVES, PASS_END, START = 0, 1, 2


class Data(NamedTuple):
    """The fit's arrays: the ``design``, Phi (N, M) as given for q(gamma) and transposed, Phi^T
    (M, N), where the factor's W varies by point (:func:`transposed`), its squares in the same
    layout where W varies (else (1, 1)), its column norms (M,), the
    targets t, the points' weights omega (1, and 0 for padding), Phi^T t (q(gamma)) or Phi^T r
    (the JJ bound's r = omega (t - 1/2)), and the scalars (traced: a new value does not compile a
    new program). The arrays are padded with zero rows and columns to the sizes of
    :func:`ppl_sbl.fast_ard.compiled.bucket`; ``n`` and ``m`` are the problem's own sizes,
    ``columns`` marks its columns."""

    design: jax.Array
    squares: jax.Array
    col_sq: jax.Array
    t: jax.Array
    omega: jax.Array
    proj: jax.Array
    a0: jax.Array
    b0: jax.Array
    e0: jax.Array
    f0: jax.Array
    c: jax.Array  # the robust factors' Gamma(c, d) prior on each omega_n
    d: jax.Array
    tol: jax.Array
    max_passes: jax.Array
    max_moves: jax.Array
    exact: jax.Array  # the entry rule: the exact comparison (True) or q^2 > s and the alignment test
    n: jax.Array
    m: jax.Array
    columns: jax.Array
    extra: object = ()  # a derived factor's data, which its row program reads


def uniform(kind):
    """Whether the factor's W is the same for every point whatever q is (q(gamma), a derived
    factor whose rows are alike): B = g Phi^T Phi_A, with Phi^T Phi_A kept."""
    return kind == "gaussian" or bool(getattr(kind, "uniform", False))


def transposed(kind):
    """Whether the program holds the design transposed, Phi^T (M, N): where the factor's W varies
    by point, B = Phi^T diag(W) Phi_A is formed afresh at every update, and XLA's CPU products run
    fastest contracting over the rows' contiguous entries. For q(gamma) the design stays as given
    (C = Phi^T Phi_A grows a column an add), which spares the host a transposed copy."""
    return not uniform(kind)


def column(data, k, kind):
    """phi_k (N,), the design's column k."""
    return data.design[k] if transposed(kind) else data.design[:, k]


def project(data, v, kind):
    """Phi^T v (M,) for v (N,)."""
    return data.design @ v if transposed(kind) else v @ data.design


class Buffers(NamedTuple):
    """The active columns Phi_A^T (cap, N) and C (M, cap), with B = Phi^T diag(W) Phi_A = g C: for
    q(gamma) C = Phi^T Phi_A and g = E[gamma], for the JJ bound C = B and g = 1. Written only at the
    top of the loop's body and at the end of a pass (in place), read everywhere else."""

    AT: jax.Array
    C: jax.Array
    trace: jax.Array  # the ELBO after every step, and each step's kind (ADD, REESTIMATE or UPDATE)
    events: jax.Array
    length: jax.Array


class State(NamedTuple):
    Sigma: jax.Array
    mu: jax.Array
    index: jax.Array
    K: jax.Array
    x: jax.Array
    S: jax.Array
    Q: jax.Array
    h: jax.Array
    b: jax.Array
    active: jax.Array
    blocked: jax.Array
    held: jax.Array
    pending: jax.Array
    e: jax.Array  # q(gamma) = Gamma(e, f)
    f: jax.Array
    g: jax.Array  # B = g C: E[gamma] of the factor's current (W, r), or 1 for the JJ bound
    xi: jax.Array  # the JJ bound: xi (N,), W (N,), the last four passes' xi and ELBO (their
    W: jax.Array   # extrapolation), how many of them count and the active set they ended with;
    hist: jax.Array  # (1,)-sized for q(gamma)
    hist_value: jax.Array
    hist_n: jax.Array
    hist_active: jax.Array
    hist_held: jax.Array
    omega_shape: jax.Array  # the robust factors' q(omega_n) = Gamma(shape_n, rate_n) (N,), and
    omega_rate: jax.Array   # whether it is held at its start (``release``)
    omega_held: jax.Array
    value: jax.Array
    start: jax.Array
    first: jax.Array
    moves: jax.Array
    passes: jax.Array
    phase: jax.Array
    status: jax.Array
    cycling: jax.Array  # a cycle over the pending re-estimates under way, its next slot, its moves
    cycle_next: jax.Array
    cycle_made: jax.Array
    recent: jax.Array  # the trace entries of the current step (cap + 1), and their number
    recent_events: jax.Array
    recent_n: jax.Array


def choose(pred, a, b):
    """``a`` where ``pred``, else ``b``, field by field (fields the two share stay as they are)."""
    return jax.tree.map(lambda x, y: jnp.where(pred, x, y), a, b)


def slots(st):
    """Which slots hold an active coefficient (cap,)."""
    return jnp.arange(st.mu.shape[0]) < st.K


def slot_index(st):
    """The coefficient of each slot, M (out of range: dropped by scatters) past K."""
    return jnp.where(slots(st), st.index, st.x.shape[0])


def gather(v, st, fill=0.0):
    """v (M,) at the active coefficients, by slot; ``fill`` past K."""
    return jnp.where(slots(st), v[st.index], fill)


def block(st, buf):
    """B_AA (cap, cap), zero outside the active block."""
    valid = slots(st)
    return jnp.where(valid[:, None] & valid[None, :], st.g * buf.C[st.index], 0.0)


def padded(P, valid):
    """P on the active block, the identity outside it."""
    return jnp.where(valid[:, None] & valid[None, :], P, jnp.diag(jnp.where(valid, 0.0, 1.0)))


def refresh(st, buf):
    """q(w) for the active set at the current E[alpha], and S, Q, exactly."""
    valid = slots(st)
    P = padded(block(st, buf) + jnp.diag(gather(st.x, st)), valid)
    L, d = J.scaled_cholesky(P)
    inv = J.inverse_from_cholesky(L, d)
    return statistics(st, buf, jnp.where(valid[:, None] & valid[None, :], inv, 0.0))


def statistics(st, buf, Sigma):
    """The state with q(w)'s covariance ``Sigma`` (zero outside the active block), its mean and S, Q."""
    mu = Sigma @ gather(st.b, st)
    B = st.g * buf.C
    return st._replace(Sigma=Sigma, mu=mu, S=st.h - jnp.sum((B @ Sigma) * B, axis=1), Q=st.b - B @ mu)


def leave_one_out(st):
    """s_k and q_k of eq. (3) for every coefficient (host: ``_Schedule.leave_one_out``)."""
    valid = slots(st)
    idx = slot_index(st)
    xa, diag, sa = gather(st.x, st, 1.0), jnp.diag(st.Sigma), gather(st.S, st)
    safe = jnp.where(valid, diag, 1.0)
    sa_loo = jnp.where(xa * diag > 0.5, xa * sa / (xa - sa), 1.0 / safe - xa)
    s = st.S.at[idx].set(sa_loo, mode="drop")
    q = st.Q.at[idx].set(st.mu / safe, mode="drop")
    return s, q


def active_spread(st):
    """kappa = sum_k (h_k + x_k) Sigma_kk over the active block (``_Schedule.spread``)."""
    return jnp.sum(gather(st.h + st.x, st) * jnp.diag(st.Sigma))


def coefficient_terms(st, data):
    """E[ln p(w|alpha)] + E[ln p(alpha)] + H[q(w)] + H[q(alpha)] of the problem's coefficients (host:
    ``_Schedule.prior_terms``)."""
    valid = slots(st)
    idx = slot_index(st)
    frozen_var = 1.0 / (st.x + st.h)
    second = frozen_var.at[idx].set(st.mu * st.mu + jnp.diag(st.Sigma), mode="drop")
    shape = data.a0 + 0.5
    rate = shape / st.x
    e_log_alpha = gamma_mean_log(shape, rate)
    log_p_w = jnp.sum(jnp.where(data.columns, 0.5 * (e_log_alpha - J.LOG_2PI - st.x * second), 0.0))
    _, log_det = J.slogdet(padded(st.Sigma, valid))
    frozen = jnp.sum(jnp.where(st.active | ~data.columns, 0.0, jnp.log(frozen_var)))
    entropy_w = gaussian_entropy(log_det + frozen, data.m)  # q(w): the active block and the frozen ones
    alpha = J.gamma_prior_and_entropy(jnp.full(st.x.shape, shape), rate, data.a0, data.b0, data.columns)
    return log_p_w + alpha + entropy_w


def record(st, value, event):
    """The ELBO ``value`` after a step of kind ``event``, into the step's trace entries."""
    return st._replace(value=value, recent=st.recent.at[st.recent_n].set(value),
                       recent_events=st.recent_events.at[st.recent_n].set(event), recent_n=st.recent_n + 1)


def put(v, i, value):
    """v with v[i] = value (one element)."""
    return lax.dynamic_update_slice(v, jnp.asarray(value, v.dtype)[None], (i,))


def flush(st, buf):
    """The current step's trace entries into the trace (in place)."""
    return st._replace(recent_n=jnp.zeros_like(st.recent_n)), buf._replace(
        trace=lax.dynamic_update_slice(buf.trace, st.recent, (buf.length,)),
        events=lax.dynamic_update_slice(buf.events, st.recent_events, (buf.length,)),
        length=buf.length + st.recent_n)
