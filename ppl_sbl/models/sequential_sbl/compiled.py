"""The fast marginal likelihood maximisation (:func:`.schedule.resume`) as one compiled XLA program.

The steps of :class:`.schedule.Schedule` (:mod:`.compiled_steps`) (the best move, the noise re-estimate, the joint Newton
step, the exact refreshes and the stopping rules) run in one ``lax.while_loop`` on buffers of a
fixed capacity: the active columns D_a (N, cap), B = D^T D_a (M, cap), Sigma (cap, cap), mu
(cap,), and S, Q (M,), with the slots past K (the active count) zero; the design is padded with
zero rows and columns to the sizes of :func:`ppl_sbl.fast_ard.compiled.bucket`, so that nearby
sizes share a program. Each step is the host schedule's, whose docstrings give the rules, so the
fit is the same to rounding. Sigma^-1 is factorised whole where the host factorises it by the
connected components of D_a^T D_a: the same factors, the blocks of a block-diagonal matrix.

Where an add finds the buffers full, the program returns to the host, which enlarges them and goes
on with the program for the larger shape (the capacities of
:func:`ppl_sbl.fast_ard.compiled.grow`); where the trace's buffer is nearly full, the host takes
its entries off and the same program goes on. Where the host schedule would go back to an earlier
state (an exact refresh finds L below the best exact L: moves chosen on drifted statistics, an
ill-conditioned dictionary) or meets statistics that are not numbers, the program stops and
:func:`run` returns None: the caller runs the host schedule from the start.

The program holds the design over the samples as a dense matrix: a dense dictionary's rows, or
those of any other dictionary (sparse, Kronecker, side by side) formed once, where the padded matrix
takes at most :data:`MAX_DENSE_BYTES` (:func:`supports`).
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from ppl_sbl import basis as _basis
from ppl_sbl.fast_ard.compiled import OPTIONS, bucket, grow, padded, power_of_two
from ppl_sbl.fast_ard.jax_algebra import one_blas_thread

from .compiled_steps import (BAIL, CONVERGED, COUNTS, GROW_ACTIVE, GROW_TRACE, KINDS, PRACTICAL, RUNNING, STOPPED, Data,
                             Fit, steps)
from .design import design_of, design_rows

__all__ = ["MAX_DENSE_BYTES", "dense_bytes", "supports", "program", "run"]

CAPACITY = 16  # the active block's first capacity (slots)

#: The largest design over the samples (bytes, float64, padded to the program's sizes) that the
#: compiled program forms densely from a dictionary that is not a dense matrix.
MAX_DENSE_BYTES = 2**28


def dense_bytes(state):
    """The bytes of the design over the state's samples, dense and padded to the program's sizes."""
    return 8 * bucket(len(state.y)) * bucket(state.dictionary.shape[1])


def supports(state):
    """Whether the compiled program fits this state: a dense dictionary, or dense dictionaries side by
    side (:func:`.add_basis` stacks the new functions beside the old), or any dictionary whose design
    over the samples takes at most :data:`MAX_DENSE_BYTES` as a dense matrix (:func:`dense_bytes`)."""
    return _dense(state.dictionary) or dense_bytes(state) <= MAX_DENSE_BYTES


def _dense(dictionary):
    return isinstance(dictionary, _basis.DenseDictionary) or (
        isinstance(dictionary, _basis.StackedDictionary) and all(_dense(part) for part in dictionary.parts))


def dense_design(state, design):
    """The design over the state's samples as a dense (N, M) array: a dense dictionary's rows, or
    those of any other dictionary formed (:func:`supports`)."""
    if design.dense is not None:
        return np.asarray(design.dense, dtype=np.float64)
    return design_rows(state, np.arange(len(state.y)))


def _unpack(packed, f):
    """:func:`.compiled_steps.pack`'s arrays (host NumPy) as a dict of the fields, ``f`` giving the sizes."""
    ints, floats = packed
    out = dict(zip(COUNTS, ints[:len(COUNTS)].tolist()))
    sizes_i = [("index", f.index.size), ("kinds", f.kinds.size), ("which", f.which.size), ("drift_at", f.drift_at.size)]
    sizes_f = [("noise", 1), ("L", 1), ("alpha", f.alpha.size), ("mu", f.mu.size), ("Sigma", f.Sigma.size),
               ("S", f.S.size), ("Q", f.Q.size), ("trace", f.trace.size), ("drift", f.drift.size)]
    for values, sizes, at in ((ints, sizes_i, len(COUNTS)), (floats, sizes_f, 0)):
        for name, size in sizes:
            out[name] = values[at:at + size]
            at += size
    out["Sigma"] = out["Sigma"].reshape(f.Sigma.shape)
    out["noise"], out["L"] = float(out["noise"][0]), float(out["L"][0])
    return out


#: The compiled steps (:func:`run` calls it until the fit stops): one XLA program per shape.
program = jax.jit(steps, donate_argnums=(0,), compiler_options=OPTIONS)


# --------------------------------------------------------------------------------------------------
# the host side
def _data(state, D, sq_norms, *, tol, practical, update_noise, noise_every, max_steps, refresh_every,
          align_tol, max_alignment, rounding, log_alpha_tol, log_noise_tol, joint_max_active):
    N, M = D.shape
    Np, Mp = bucket(N), bucket(M)
    y = np.zeros(Np)
    y[:N] = state.y
    Dty = np.zeros(Mp)
    Dty[:M] = state.Dty
    sq = np.zeros(Mp)
    sq[:M] = sq_norms
    columns = np.zeros(Mp, dtype=bool)
    columns[:M] = True
    f64, i64 = np.float64, np.int64
    return Data(DT=padded(D.T, (Mp, Np)), y=y, Dty=Dty, sq=sq, n=f64(N), columns=columns, tol=f64(tol),
                rounding=f64(rounding), practical=np.bool_(practical), update_noise=np.bool_(update_noise),
                noise_every=i64(noise_every), max_steps=i64(max_steps), refresh_every=i64(refresh_every or 0),
                align_tol=f64(align_tol), max_alignment=f64(np.inf if max_alignment is None else max_alignment),
                log_noise_tol=f64(log_noise_tol), log_alpha_tol=f64(log_alpha_tol),
                joint_max_active=i64(joint_max_active)), (N, M)


def _start(state, data, D, cap, length, refresh_every, max_alignment):
    """The fit at ``state`` (host NumPy)."""
    Mp, Np = data.DT.shape
    K = len(state.active)
    active = np.asarray(state.active, dtype=np.int64)
    A = np.zeros((Np, cap))
    A[:D.shape[0], :K] = D[:, active]
    B = np.zeros((Mp, cap))
    B[:D.shape[1], :K] = D.T @ A[:D.shape[0], :K]
    Sigma = np.zeros((cap, cap))
    Sigma[:K, :K] = state.Sigma
    mu = np.zeros(cap)
    mu[:K] = state.mu
    index = np.zeros(cap, dtype=np.int32)
    index[:K] = active
    alpha = np.full(Mp, np.inf)
    alpha[:D.shape[1]] = state.alpha
    S, Q = np.zeros(Mp), np.zeros(Mp)
    S[:D.shape[1]], Q[:D.shape[1]] = state.S, state.Q
    blocked = np.zeros(Mp, dtype=np.int32)
    if max_alignment is not None:
        sq = data.sq
        for k, m in enumerate(active):
            with np.errstate(divide="ignore", invalid="ignore"):
                cosine = np.abs(B[:, k]) / np.sqrt(sq[m] * sq)
            hit = cosine > max_alignment
            hit[m] = False
            blocked += hit
    f64, i64, nan = np.float64, np.int64, np.float64(np.nan)
    return Fit(A=A, B=B, Sigma=Sigma, mu=mu, index=index, K=np.int32(K), alpha=alpha, S=S, Q=Q, blocked=blocked,
               noise=f64(state.noise_var), L=f64(state.log_marginal_likelihood), step=i64(0), until=i64(0),
               last_refresh=i64(0), interval=i64(min(16, refresh_every or 16)), drifting=np.bool_(False),
               exact_L=nan, best_L=nan, checkpoint_L=nan, stalls=i64(0), quiet=i64(0), failed_at=nan,
               joint_after=i64(0), made=i64(0), status=i64(RUNNING), reason=i64(PRACTICAL),
               trace=np.full(length, np.nan), kinds=np.zeros(length, np.int32), which=np.zeros(length, np.int32),
               length=np.int32(0), drift_at=np.zeros(64, np.int64), drift=np.zeros(64), drift_n=np.int32(0))


def trace_length(M):
    """The trace buffer's length (entries) for M functions; the host takes the entries off
    whenever it fills."""
    return power_of_two(4 * M + 256)


def _grown(f, cap):
    def pad(a, axes, size=cap):
        widths = [(0, 0)] * a.ndim
        for ax in axes:
            widths[ax] = (0, size - a.shape[ax])
        return jnp.pad(a, widths)

    return f._replace(A=pad(f.A, [1]), B=pad(f.B, [1]), Sigma=pad(f.Sigma, [0, 1]), mu=pad(f.mu, [0]),
                      index=pad(f.index, [0]))


@one_blas_thread
def run(state, *, update_noise, noise_every, tol, practical, max_steps, refresh_every, align_tol, max_alignment,
        rounding, log_alpha_tol, log_noise_tol, joint_max_active, bar=None, start=None):
    """:class:`.schedule.Schedule`'s run from ``state`` (:func:`supports`) in the compiled program, with
    the schedule's settings and rules (``rounding``, ``log_alpha_tol``, ``log_noise_tol``,
    ``joint_max_active``: its ``rounding``, ``LOG_ALPHA_TOL``, ``LOG_NOISE_TOL``,
    ``JOINT_MAX_ACTIVE``).
    Returns None where the host schedule goes back to an earlier state or meets statistics that are
    not numbers (run it instead), else (the fields of :meth:`.Workspace.state`'s SBLState,
    converged, stop_reason).
    """
    start = time.perf_counter() if start is None else start
    design = design_of(state, prefer_sparse=True)
    D = dense_design(state, design)
    sq_norms = design.sq_norms()
    data, (N, M) = _data(state, D, sq_norms, tol=tol, practical=practical, update_noise=update_noise,
                         noise_every=noise_every, max_steps=max_steps, refresh_every=refresh_every,
                         align_tol=align_tol, max_alignment=max_alignment, rounding=rounding,
                         log_alpha_tol=log_alpha_tol, log_noise_tol=log_noise_tol, joint_max_active=joint_max_active)
    Mp = data.DT.shape[0]
    K0 = len(state.active)
    cap = min(power_of_two(max(CAPACITY, K0 + 1)), power_of_two(Mp))
    length = trace_length(M)
    f = _start(state, data, D, cap, length, refresh_every, max_alignment)
    trace, kinds, which, drifts, seconds = [], [], [], [], []

    def take_off(f, out):
        n, r = out["length"], out["drift_n"]
        trace.append(out["trace"][:n])
        kinds.append(out["kinds"][:n])
        which.append(out["which"][:n])
        drifts.extend(zip(out["drift_at"][:r].tolist(), out["drift"][:r].tolist()))
        seconds.extend([time.perf_counter() - start] * n)
        return f._replace(length=np.int32(0), drift_n=np.int32(0))

    chunk = int(max_steps) if bar is None else 50
    f = f._replace(until=np.int64(min(chunk, int(max_steps))))
    while True:
        f, packed = program(f, data)
        out = _unpack(jax.device_get(packed), f)
        status = out["status"]
        if status == GROW_ACTIVE:
            cap = min(grow(cap), power_of_two(Mp))
            f = _grown(f, cap)
        elif status == GROW_TRACE:
            f = take_off(f, out)
        elif status == RUNNING and out["step"] >= int(max_steps):
            status = STOPPED
            break
        elif status == RUNNING:  # paused for the progress bar
            if bar is not None:
                bar.update(out["step"] - bar.n)
                bar.set_postfix(L=f"{out['L']:.4f}", active=out["K"])
            f = f._replace(until=np.int64(min(out["step"] + chunk, int(max_steps))))
        else:
            break
    if status == BAIL:
        return None
    take_off(f, out)
    K = out["K"]
    active = out["index"][:K].copy()
    names = [KINDS[k] for k in np.concatenate(kinds).tolist()]
    moves = [(name, int(m)) for name, m in zip(names, np.concatenate(which).tolist())]
    base = len(state.moves)
    fields = dict(noise_var=out["noise"], active=active, alpha=out["alpha"][:M].copy(), mu=out["mu"][:K].copy(),
                  Sigma=out["Sigma"][:K, :K].copy(), S=out["S"][:M].copy(), Q=out["Q"][:M].copy(),
                  trace=list(state.trace) + np.concatenate(trace).tolist(), moves=list(state.moves) + moves,
                  trace_seconds=seconds, refresh_drift=list(state.refresh_drift) + [(base + a, d) for a, d in drifts],
                  rollbacks=list(state.rollbacks))
    converged = status == CONVERGED
    reason = ("practical", "tolerance", "rounding")[out["reason"]] if converged else "max_steps"
    if bar is not None:
        bar.update(out["step"] - bar.n)
    fields["log_marginal_likelihood"] = exact_L(state, D, fields)
    return fields, converged, reason


def exact_L(state, D, fields):
    """L recomputed from scratch at the fit's alpha and sigma^2 (``Workspace.state``'s) with one
    factorisation of the active block (the host's block by block factorisation of a block-diagonal
    matrix gives the same factors)."""
    from . import algebra

    a = fields["active"]
    Da = D[:, a]
    G = Da.T @ Da
    blocks = [np.arange(len(a))[None, :]] if len(a) else []
    L, _ = algebra.likelihoods([fields["noise_var"]], blocks, G, fields["alpha"][a], state.Dty[a], state.y,
                               state.yty, lambda X: Da @ X)
    return float(L[0])
