"""The likelihood factors of the compiled fast schedule (:mod:`ppl_sbl.fast_ard.compiled`), as the
host factors of :mod:`ppl_sbl.fast_ard.factors` compute them:

- ``"gaussian"``: RVM regression's q(gamma) (:class:`~ppl_sbl.fast_ard.GaussianNoise`);
- ``"jj"``: the Jaakkola-Jordan bound of RVM classification (:class:`~ppl_sbl.fast_ard.JaakkolaJordan`);
- ``"robust_jj"``: that bound with Gamma-distributed weights omega_n
  (:class:`~ppl_sbl.fast_ard.RobustJaakkolaJordan`);
- ``"robust_gaussian"``: q(gamma) and the weights of the robust RVM's regression
  (:class:`~ppl_sbl.fast_ard.RobustGaussianNoise`);

- :class:`Rows`: a derived guide's likelihood (:class:`ppl_sbl.derived.fast.RowFactor`), its
  (W, r), updates and terms from its row program;

the bounds' xi (and, once they update, the weights' rates) extrapolated over the passes
(:class:`ppl_sbl.fast_ard.passes.Extrapolation`). ``kind`` is a Python string or a :class:`Rows`:
each kind is its own program. The robust factors and a derived factor's per-observation Gamma
factors are held at their start until the schedule has converged once (``release``)."""
from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import digamma

from . import compiled_state as CS
from . import jax_algebra as J
from .passes import Extrapolation
from ..bounds import jj_lambda, jj_log_sigmoid_bound
from ..expfam import gamma_mean_log

_BLOCK = 8  # slots at a time where B = Phi^T diag(W) Phi_A is formed afresh
MAX_RATE, RATE_AGREEMENT, SHORTEN = Extrapolation.MAX_RATE, Extrapolation.RATE_AGREEMENT, Extrapolation.SHORTEN
BOUNDS = ("jj", "robust_jj")  # the kinds whose parameters are extrapolated
_TINY = float(np.finfo(float).tiny)


class Rows(NamedTuple):
    """The kind of a derived guide's factor (``RowFactor.compiled_form``): its row program
    ``program(data, m, e, g_mean, g_log, xi, g_shape, g_rate)`` (``derived.fast.row_programs``),
    whether its W is ``uniform``, its number of ``rows``, and its other Gamma factors, (start,
    stop, held at the start) of each in the stacked Gamma vector, in the order they update. The
    state's ``omega_shape``, ``omega_rate`` hold that vector's shapes and rates, ``omega_held``
    whether the held ones are still held, ``xi`` the Bernoulli terms' xi one after the other."""

    program: object
    uniform: bool
    rows: int
    others: tuple
    bernoulli: tuple = ()  # (name, shape) of each Bernoulli term, whose xi the state holds flattened, in order


def kind_of(factor):
    """The kind of a host factor, or None where the compiled schedule has none."""
    from .factors import GaussianNoise, JaakkolaJordan, RobustGaussianNoise, RobustJaakkolaJordan

    form = getattr(factor, "compiled_form", None)
    if form is not None:
        return form()
    return {GaussianNoise: "gaussian", JaakkolaJordan: "jj", RobustJaakkolaJordan: "robust_jj",
            RobustGaussianNoise: "robust_gaussian"}.get(type(factor))


def extrapolates(kind):
    """Whether the kind's parameters are extrapolated over the passes (the JJ bound's xi)."""
    return kind in BOUNDS or bool(getattr(kind, "bernoulli", ()))


def _holds(kind):
    """Whether the kind holds part of itself at its start until the first convergence."""
    return isinstance(kind, Rows) or kind.startswith("robust")


def extra(factor, kind):
    """:class:`ppl_sbl.fast_ard.compiled_state.Data`'s ``extra``: a derived factor's data, which
    its row program reads; () for the others."""
    return factor.data if isinstance(kind, Rows) else ()


def host_data(factor, kind, design, N):
    """The factor's arrays of :class:`ppl_sbl.fast_ard.compiled_state.Data` for the padded
    ``design`` in the kind's layout (:func:`ppl_sbl.fast_ard.compiled_state.transposed`) (host
    NumPy): (squares, t, omega, proj, e0, f0, c, d)."""
    if isinstance(kind, Rows):  # (W, r) from the row program
        return targetless(design, N, kind)
    size = design.shape[1] if CS.transposed(kind) else design.shape[0]
    omega = np.zeros(size)
    omega[:N] = 1.0
    t = np.zeros(size)
    t[:N] = np.asarray(factor.t, dtype=np.float64)
    e0, f0 = (float(factor.e0), float(factor.f0)) if kind in ("gaussian", "robust_gaussian") else (0.0, 0.0)
    c, d = (float(factor.c), float(factor.d)) if kind.startswith("robust") else (0.0, 0.0)
    if kind == "gaussian":
        return np.zeros((1, 1)), t, omega, t @ design, e0, f0, c, d
    # Phi^T r where r is fixed (the JJ bound's); the robust factors form it afresh at every update
    proj = design @ (omega * (t - 0.5)) if kind == "jj" else np.zeros(design.shape[0])
    return design * design, t, omega, proj, e0, f0, c, d


def targetless(design, N, kind):
    """:func:`host_data`'s arrays for a factor whose targets the program does not hold (a derived
    factor's r, the multiclass outputs' E[y_c], change with the other factors): no targets, no
    projection kept, the points' weights 1 and 0 on the padding."""
    size, columns = design.shape[::-1] if CS.transposed(kind) else design.shape
    omega = np.zeros(size)
    omega[:N] = 1.0
    squares = np.zeros((1, 1)) if CS.uniform(kind) else design * design
    return squares, np.zeros(size), omega, np.zeros(columns), 0.0, 0.0, 0.0, 0.0


def host_state(factor, kind, N, padded_N, M):
    """The factor's fields of the starting :class:`~ppl_sbl.fast_ard.compiled_state.State`: (e, f,
    xi, W, hist, hist_value, hist_n, hist_active, hist_held, omega_shape, omega_rate, held)."""
    def padded(v, fill):
        out = np.full(padded_N, fill, dtype=np.float64)
        out[:N] = v
        return out

    one = np.zeros(1)
    if isinstance(kind, Rows):
        W = one if kind.uniform else np.zeros(padded_N)
        xi = np.concatenate([np.ravel(factor.xi[name]) for name, _ in kind.bernoulli]) if kind.bernoulli else one
        size = xi.shape[0] + sum(stop - start for start, stop, _ in kind.others) if kind.bernoulli else 1
        return (1.0, 1.0, np.asarray(xi, np.float64), W, np.zeros((4, size)), np.zeros(4), np.int32(0),
                np.zeros(M if kind.bernoulli else 1, bool), False, np.asarray(factor.g_shape, np.float64),
                np.asarray(factor.g_rate, np.float64), bool(factor.held))
    e, f = (float(factor.e), float(factor.f)) if kind in ("gaussian", "robust_gaussian") else (0.0, 0.0)
    xi = padded(factor.xi, 0.0) if kind in BOUNDS else one
    W = np.zeros(padded_N) if kind != "gaussian" else one
    size = {"jj": padded_N, "robust_jj": 2 * padded_N}.get(kind, 1)
    hist = (np.zeros((4, size)), np.zeros(4), np.int32(0), np.zeros(M if kind in BOUNDS else 1, bool), False)
    if kind == "robust_jj":
        omega = (np.full(padded_N, float(factor.c)), padded(factor.omega_rate, float(factor.d)), bool(factor.held))
    elif kind == "robust_gaussian":
        omega = (padded(factor.omega_shape, float(factor.c)), padded(factor.omega_rate, float(factor.d)),
                 bool(factor.held))
    else:
        omega = (one, one, False)
    return (e, f, xi, W) + hist + omega


def write_back(factor, kind, st, N):
    """The fit's factor into the host factor."""
    if isinstance(kind, Rows):
        factor.set_factors(np.asarray(st.omega_shape), np.asarray(st.omega_rate), bool(st.omega_held),
                           {name: value for name, value in zip((n for n, _ in kind.bernoulli), _xi(st.xi, kind))})
        return
    if kind in ("gaussian", "robust_gaussian"):
        factor.e, factor.f = float(st.e), float(st.f)
    if kind in BOUNDS:
        factor.xi = np.asarray(st.xi[:N])
    if _holds(kind):
        factor.omega_rate = np.asarray(st.omega_rate[:N])
        factor.held = bool(st.omega_held)
        if kind == "robust_gaussian":
            factor.omega_shape = np.asarray(st.omega_shape[:N])


def _jj_B(buf, data, W, K):
    """C = B = Phi^T diag(W) Phi_A afresh, ``_BLOCK`` slots at a time up to K (the slots past it are
    zero), each block the transposed design (``data.design``, Phi^T) times its columns."""
    cap = buf.AT.shape[0]
    blocks = min(_BLOCK, cap)

    def body(i, C):
        start = jnp.minimum(i * blocks, cap - blocks)
        rows = lax.dynamic_slice_in_dim(buf.AT, start, blocks, 0)
        return lax.dynamic_update_slice_in_dim(C, data.design @ (rows * W[None, :]).T, start, 1)

    return lax.fori_loop(0, (K + blocks - 1) // blocks, body, jnp.zeros_like(buf.C))


def _xi(flat, kind):
    """The Bernoulli terms' xi, each in its term's shape, from the state's flattened ``xi``."""
    out, start = [], 0
    for _, shape in kind.bernoulli:
        size = int(np.prod(shape, dtype=int))
        out.append(flat[start:start + size].reshape(shape))
        start += size
    return out


def _rows(st, data, kind, m, e):
    """A derived factor's row program at the rows' moments m = E[eta], e = E[eta^2] (the
    factor's own rows) and the Gamma factors and xi of the state."""
    shape, rate = st.omega_shape, st.omega_rate
    xi = dict(zip((name for name, _ in kind.bernoulli), _xi(st.xi, kind)))
    return kind.program(data.extra, m, e, shape / rate, digamma(shape) - jnp.log(rate), xi, shape, rate)


def _padded(v, size):
    return jnp.pad(v, (0, size - v.shape[0]))


def _at_zero(st, data, kind):
    """A derived factor's (W, r, value) at m = e = 0 (``RowFactor._at_zero``), W and r padded."""
    zero = jnp.zeros(kind.rows)
    out = _rows(st, data, kind, zero, zero)
    size = data.omega.shape[0]
    return _padded(out["W"], size), _padded(out["r"], size), out["value"]


def _weights(st, data, kind):
    """(W, r) (N,) of the factor's current parameters (q(gamma): E[gamma] and Phi^T r's scale)."""
    if isinstance(kind, Rows):
        return _at_zero(st, data, kind)[:2]
    if kind == "gaussian":
        return st.e / st.f, None
    if kind == "robust_gaussian":
        W = (st.e / st.f) * data.omega * st.omega_shape / st.omega_rate
        return W, W * data.t
    weight = data.omega * (data.c / st.omega_rate if kind == "robust_jj" else 1.0)
    return 2.0 * weight * jj_lambda(st.xi), weight * (data.t - 0.5)


def set_factor(st, buf, data, kind):
    """(W, r) from the factor; h, b and B for them; the frozen q(alpha) at the optimum (2); q(w)
    and the statistics exactly (``_Schedule.set_factor``). Returns (state, buffers)."""
    W, r = _weights(st, data, kind)
    if isinstance(kind, Rows) and kind.uniform:  # ``_Schedule.set_factor``: b = g Phi^T (r / g)
        g = W[0]
        h, b = g * data.col_sq, g * CS.project(data, r / g, kind)
    elif kind == "gaussian":
        g = W
        h, b = g * data.col_sq, g * data.proj
    else:
        g = jnp.ones_like(st.g)
        h = data.squares @ W
        b = data.proj if kind == "jj" else data.design @ r
        buf = buf._replace(C=_jj_B(buf, data, W, st.K))
        st = st._replace(W=W)
    x_out, _ = J.frozen_optimum(h, data.a0, data.b0)
    st = st._replace(g=g, h=h, b=b, x=jnp.where(st.active, st.x, x_out))
    return CS.refresh(st, buf), buf


def moments(st, buf, data, kind):
    """The moments of phi_n^T w under the restricted q(w): (mean (N,), the sum of the variances)
    for q(gamma), (mean, the variances (N,)) for the others."""
    frozen_var = jnp.where(st.active, 0.0, 1.0 / (st.x + st.h))
    mean = st.mu @ buf.AT
    if CS.uniform(kind):
        valid = CS.slots(st)
        G = jnp.where(valid[:, None] & valid[None, :], buf.C[st.index], 0.0)
        return mean, jnp.sum(G * st.Sigma) + data.col_sq @ frozen_var
    return mean, jnp.sum((st.Sigma @ buf.AT) * buf.AT, axis=0) + frozen_var @ data.squares


def _bound(xi, mean, var, data):
    """E_q of the JJ bound (27) on ln p(t_n | w) at xi, for every point (``JaakkolaJordan.pointwise``)."""
    return jj_log_sigmoid_bound((2.0 * data.t - 1.0) * mean, mean * mean + var, xi)


def update(st, buf, data, kind):
    """The factor's own updates given q(w) (the host factors' ``update``): q(gamma) (grid RVM eq.
    (18)); xi_n^2 = E[(phi_n^T w)^2] (30); the weights' rates first where they update (Hwang &
    Jeong (14)-(15); the robust regression's q(omega) after q(gamma))."""
    mean, var = moments(st, buf, data, kind)
    if isinstance(kind, Rows):  # ``RowFactor.update``: each other Gamma factor in turn, from the row program
        m, e = _second_moments(mean, var, kind)
        shape, rate = st.omega_shape, st.omega_rate
        for start, stop, held in kind.others:
            out = _rows(st._replace(omega_shape=shape, omega_rate=rate), data, kind, m, e)
            keep = st.omega_held if held else jnp.asarray(False)
            shape = jnp.where(keep, shape, shape.at[start:stop].set(1.0 + out["d_log"][start:stop]))
            rate = jnp.where(keep, rate, rate.at[start:stop].set(-out["d_mean"][start:stop]))
        st = st._replace(omega_shape=shape, omega_rate=rate)
        if kind.bernoulli:  # xi_n^2 = E[v_n^2], grid RVM paper eq. (30)
            out = _rows(st, data, kind, m, e)["xi"]
            st = st._replace(xi=jnp.concatenate([jnp.ravel(out[name]) for name, _ in kind.bernoulli]))
        return st
    if kind == "gaussian":
        residual = data.t - mean
        return st._replace(e=data.e0 + 0.5 * data.n, f=data.f0 + 0.5 * (residual @ residual + var))
    if kind == "robust_gaussian":
        sq = (data.t - mean) ** 2 + var
        e = data.e0 + 0.5 * data.n
        f = data.f0 + 0.5 * jnp.sum(data.omega * st.omega_shape / st.omega_rate * sq)
        shape = jnp.where(st.omega_held, st.omega_shape, data.c + 0.5)
        rate = jnp.where(st.omega_held, st.omega_rate, data.d + 0.5 * (e / f) * sq)
        return st._replace(e=e, f=f, omega_shape=shape, omega_rate=rate)
    if kind == "robust_jj":
        st = st._replace(omega_rate=jnp.where(st.omega_held, st.omega_rate, data.d - _bound(st.xi, mean, var, data)))
    return st._replace(xi=jnp.sqrt(mean * mean + var))


def elbo(st, buf, data, kind):
    """The restricted-family ELBO: the factor's terms and the coefficients' (``_Schedule.elbo``):
    q(gamma)'s as the grid RVM's (10); the JJ bound's as its (28); the robust RVM's as Hwang &
    Jeong's (17) (classification) and the robust regression guide's ELBO."""
    mean, var = moments(st, buf, data, kind)
    real = data.omega > 0
    if isinstance(kind, Rows):  # ``RowFactor.elbo_terms``: the terms are linear in the rows' moments
        m, e = _second_moments(mean, var, kind)
        W, r, value = _at_zero(st, data, kind)
        return value + r[:kind.rows] @ m - 0.5 * (W[:kind.rows] @ e) + CS.coefficient_terms(st, data)
    if kind == "gaussian":
        residual = data.t - mean
        e, f = st.e, st.f
        lik = (0.5 * data.n * (gamma_mean_log(e, f) - J.LOG_2PI)
               - 0.5 * (e / f) * (residual @ residual + var) + J.gamma_prior_and_entropy(e, f, data.e0, data.f0))
    elif kind == "robust_gaussian":
        e, f = st.e, st.f
        e_omega = st.omega_shape / st.omega_rate
        e_log_omega = gamma_mean_log(st.omega_shape, st.omega_rate)
        e_log_gamma = gamma_mean_log(e, f)
        sq = (data.t - mean) ** 2 + var
        lik = (0.5 * jnp.sum(jnp.where(real, e_log_gamma + e_log_omega - J.LOG_2PI, 0.0))
               - 0.5 * (e / f) * jnp.sum(data.omega * e_omega * sq)
               + J.gamma_prior_and_entropy(e, f, data.e0, data.f0)
               + J.gamma_prior_and_entropy(st.omega_shape, st.omega_rate, data.c, data.d, real))
    else:
        weight = data.omega * (data.c / st.omega_rate if kind == "robust_jj" else 1.0)
        lik = jnp.sum(weight * _bound(st.xi, mean, var, data))
        if kind == "robust_jj":
            lik = lik + J.gamma_prior_and_entropy(jnp.full_like(st.omega_rate, data.c), st.omega_rate, data.c,
                                                  data.d, real)
    return lik + CS.coefficient_terms(st, data)


def _second_moments(mean, var, kind):
    """``RowFactor._second_moments``: the factor's rows' E[eta] and E[eta^2], each row's variance
    the mean variance where W is uniform."""
    m = mean[:kind.rows]
    return m, (var / kind.rows if kind.uniform else var[:kind.rows]) + m * m


def weights(st, data, kind):
    """The factor's (W, r) as one vector, for the stopping rule's change of them (q(gamma): the
    scale E[gamma] alone; the JJ bound: W, its r being fixed)."""
    W, r = _weights(st, data, kind)
    if kind == "gaussian":
        return W[None]
    return W if kind == "jj" else jnp.concatenate([W, r])


def weights_change(old, new):
    """``factors.weights_change``: the largest relative change of the weights."""
    scale = jnp.maximum(jnp.maximum(jnp.abs(old), jnp.abs(new)), 1e-300)
    return jnp.max(jnp.abs(old - new) / scale)


def release(st, kind):
    """``release``: (state with q(omega) free to update, whether it was held)."""
    if not _holds(kind):
        return st, jnp.asarray(False)
    return st._replace(omega_held=jnp.asarray(False)), st.omega_held


def parameters(st, kind):
    """The parameters the extrapolation moves: xi, and the weights' rates once they update (zero
    while held)."""
    if kind == "jj":
        return st.xi
    if isinstance(kind, Rows):  # ``RowFactor.parameters``: xi, then the rates of the other factors that update
        return jnp.concatenate([st.xi] + [jnp.where(held & st.omega_held, 0.0, st.omega_rate[start:stop])
                                          for start, stop, held in kind.others])
    return jnp.concatenate([st.xi, jnp.where(st.omega_held, 0.0, st.omega_rate)])


def set_parameters(st, value, kind):
    """``set_parameters``: xi >= 0, and the weights' rates > 0 where they update."""
    n = st.xi.shape[0]
    st = st._replace(xi=jnp.maximum(value[:n], 0.0))
    if isinstance(kind, Rows):
        rate, at = st.omega_rate, n
        for start, stop, held in kind.others:
            new = jnp.maximum(value[at:at + stop - start], _TINY)
            rate = rate.at[start:stop].set(jnp.where(held & st.omega_held, rate[start:stop], new))
            at += stop - start
        return st._replace(omega_rate=rate)
    if kind == "robust_jj":
        st = st._replace(omega_rate=jnp.where(st.omega_held, st.omega_rate, jnp.maximum(value[n:], _TINY)))
    return st


def plan(st, value, kind):
    """The bookkeeping of ``Extrapolation.__call__`` after a pass's update at ELBO ``value``: the
    parameters into the history of the last four passes (emptied where the active set, or whether
    the weights are held, changed); where the four step geometrically (steps aligned, the last two
    ratios agreeing, rate below ``MAX_RATE``), Aitken's step from the last point. Returns (state
    with the history, whether to try the step, the last point, its step d, the step's length
    rate / (1 - rate) in units of d); the caller tries the lengths down by ``SHORTEN`` while >= 1
    and keeps the first that raises the ELBO (then empties the history)."""
    current = parameters(st, kind)
    same = jnp.all(st.hist_active == st.active) & (st.hist_held == st.omega_held)
    n = jnp.where((st.hist_n > 0) & ~same, 0, st.hist_n)
    hist = jnp.concatenate([st.hist[1:], current[None]])
    hist_value = jnp.concatenate([st.hist_value[1:], value[None]])
    n = jnp.minimum(n + 1, 4)
    steps = hist[1:] - hist[:-1]
    norms = jnp.sqrt(jnp.sum(steps * steps, axis=1))
    aligned = jnp.all(jnp.sum(steps[1:] * steps[:-1], axis=1) > 0)
    rate0 = norms[1] / jnp.where(norms[0] > 0, norms[0], 1.0)
    rate = norms[2] / jnp.where(norms[1] > 0, norms[1], 1.0)
    ready = n == 4
    tail = (jnp.min(norms) > 0) & aligned & (rate < MAX_RATE) & (jnp.abs(rate - rate0) <= RATE_AGREEMENT * rate)
    n = jnp.where(ready, jnp.where(tail, 1, 3), n)
    st = st._replace(hist=hist, hist_value=hist_value, hist_n=n, hist_active=st.active, hist_held=st.omega_held)
    return st, ready & tail, hist[3], steps[2], rate / (1.0 - jnp.where(tail, rate, 0.0))
