"""The likelihood factors of the compiled fast schedule (:mod:`ppl_sbl.fast_ard.compiled`), as the
host factors of :mod:`ppl_sbl.fast_ard.factors` compute them: ``"gaussian"``, RVM regression's
q(gamma) (:class:`~ppl_sbl.fast_ard.GaussianNoise`), and ``"jj"``, the Jaakkola-Jordan bound of
RVM classification (:class:`~ppl_sbl.fast_ard.JaakkolaJordan`) with the extrapolation of its xi
over the passes (:class:`ppl_sbl.fast_ard.passes.Extrapolation`). ``kind`` is a Python string:
each kind is its own program."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import compiled_state as CS
from . import jax_algebra as J
from ..bounds import jj_lambda

KINDS = ("gaussian", "jj")
_BLOCK = 8  # slots at a time where B = Phi^T diag(W) Phi_A is formed afresh
MAX_RATE, RATE_AGREEMENT, SHORTEN = 0.98, 0.05, 0.5  # ``Extrapolation``'s


def kind_of(factor):
    """The kind of a host factor, or None where the compiled schedule has none."""
    from .factors import GaussianNoise, JaakkolaJordan

    return {GaussianNoise: "gaussian", JaakkolaJordan: "jj"}.get(type(factor))


def host_data(factor, kind, padded, N):
    """The factor's arrays of :class:`ppl_sbl.fast_ard.compiled_state.Data` for the padded design
    (host NumPy): (Phi2, t, omega, proj, e0, f0)."""
    t = np.zeros(padded.shape[0])
    t[:N] = np.asarray(factor.t, dtype=np.float64)
    omega = np.zeros(padded.shape[0])
    omega[:N] = 1.0
    if kind == "gaussian":
        return np.zeros((1, 1)), t, omega, t @ padded, float(factor.e0), float(factor.f0)
    return padded * padded, t, omega, (omega * (t - 0.5)) @ padded, 0.0, 0.0


def host_state(factor, kind, N, padded_N, M):
    """The factor's fields of the starting :class:`~ppl_sbl.fast_ard.compiled_state.State`: (e, f,
    xi, W, hist, hist_value, hist_n, hist_active)."""
    if kind == "gaussian":
        one = np.zeros(1)
        return (float(factor.e), float(factor.f), one, one, np.zeros((4, 1)), np.zeros(4), np.int32(0),
                np.zeros(1, bool))
    xi = np.zeros(padded_N)
    xi[:N] = factor.xi
    return 0.0, 0.0, xi, np.zeros(padded_N), np.zeros((4, padded_N)), np.zeros(4), np.int32(0), np.zeros(M, bool)


def write_back(factor, kind, st, N):
    """The fit's factor into the host factor."""
    if kind == "gaussian":
        factor.e, factor.f = float(st.e), float(st.f)
    else:
        factor.xi = np.asarray(st.xi[:N])


def _jj_B(buf, data, W, K):
    """C = B = Phi^T diag(W) Phi_A afresh, ``_BLOCK`` slots at a time up to K (the slots past it are
    zero)."""
    cap = buf.AT.shape[0]
    blocks = min(_BLOCK, cap)

    def body(i, C):
        start = jnp.minimum(i * blocks, cap - blocks)
        rows = lax.dynamic_slice_in_dim(buf.AT, start, blocks, 0)
        return lax.dynamic_update_slice_in_dim(C, ((rows * W[None, :]) @ data.Phi).T, start, 1)

    return lax.fori_loop(0, (K + blocks - 1) // blocks, body, jnp.zeros_like(buf.C))


def set_factor(st, buf, data, kind):
    """(W, r) from the factor; h, b and B for them; the frozen q(alpha) at the optimum (2); q(w)
    and the statistics exactly (``_Schedule.set_factor``). Returns (state, buffers)."""
    if kind == "gaussian":
        g = st.e / st.f
        h, b = g * data.col_sq, g * data.proj
    else:
        g = jnp.ones_like(st.g)
        W = 2.0 * data.omega * jj_lambda(st.xi)
        h, b = W @ data.Phi2, data.proj
        buf = buf._replace(C=_jj_B(buf, data, W, st.K))
        st = st._replace(W=W)
    x_out, _ = J.frozen_optimum(h, data.a0, data.b0, False)
    st = st._replace(g=g, h=h, b=b, x=jnp.where(st.active, st.x, x_out))
    return CS.refresh(st, buf), buf


def _moments(st, buf, data, kind):
    """The moments of phi_n^T w under the restricted q(w): (mean (N,), the sum of the variances)
    for q(gamma), (mean, the variances (N,)) for the JJ bound."""
    frozen_var = jnp.where(st.active, 0.0, 1.0 / (st.x + st.h))
    mean = st.mu @ buf.AT
    if kind == "gaussian":
        valid = CS.slots(st)
        G = jnp.where(valid[:, None] & valid[None, :], buf.C[st.index], 0.0)
        return mean, jnp.sum(G * st.Sigma) + data.col_sq @ frozen_var
    return mean, jnp.sum((st.Sigma @ buf.AT) * buf.AT, axis=0) + data.Phi2 @ frozen_var


def update(st, buf, data, kind):
    """The factor's own updates given q(w): q(gamma)'s (e, f) (grid RVM eq. (18)), or xi_n^2 =
    E[(phi_n^T w)^2] (30)."""
    mean, var = _moments(st, buf, data, kind)
    if kind == "gaussian":
        residual = data.t - mean
        return st._replace(e=data.e0 + 0.5 * data.n, f=data.f0 + 0.5 * (residual @ residual + var))
    return st._replace(xi=jnp.sqrt(mean * mean + var))


def elbo(st, buf, data, kind):
    """The restricted-family ELBO: the factor's terms and the coefficients' (``_Schedule.elbo``)."""
    mean, var = _moments(st, buf, data, kind)
    if kind == "gaussian":
        residual = data.t - mean
        e, f = st.e, st.f
        lik = (0.5 * data.n * (jax.scipy.special.digamma(e) - jnp.log(f) - J.LOG_2PI)
               - 0.5 * (e / f) * (residual @ residual + var) + J.gamma_prior_and_entropy(e, f, data.e0, data.f0, False))
    else:
        xi = st.xi
        pointwise = (jax.nn.log_sigmoid(xi) + 0.5 * ((2.0 * data.t - 1.0) * mean - xi)
                     - jj_lambda(xi) * (mean * mean + var - xi * xi))
        lik = jnp.sum(data.omega * pointwise)
    return lik + CS.coefficient_terms(st, data)


def weights(st, kind):
    """What of (W, r) changes between updates: E[gamma], or W (the JJ bound's r is fixed)."""
    return st.g[None] if kind == "gaussian" else st.W


def weights_change(old, new):
    """``factors.weights_change``: the largest relative change of the weights."""
    scale = jnp.maximum(jnp.maximum(jnp.abs(old), jnp.abs(new)), 1e-300)
    return jnp.max(jnp.abs(old - new) / scale)


def extrapolate(st, buf, data, value, kind):
    """``Extrapolation.__call__`` after a pass's update at ELBO ``value``: where the last four passes'
    xi ended with the same active set and step geometrically, Aitken's step on xi, shortened until
    the ELBO rises, else xi as it was. Returns (state, buffers, gain)."""
    if kind == "gaussian":
        return st, buf, jnp.zeros_like(value)
    same = jnp.all(st.hist_active == st.active)
    n = jnp.where((st.hist_n > 0) & ~same, 0, st.hist_n)
    hist = jnp.concatenate([st.hist[1:], st.xi[None]])
    hist_value = jnp.concatenate([st.hist_value[1:], value[None]])
    n = jnp.minimum(n + 1, 4)
    steps = hist[1:] - hist[:-1]
    norms = jnp.sqrt(jnp.sum(steps * steps, axis=1))
    aligned = jnp.all(jnp.sum(steps[1:] * steps[:-1], axis=1) > 0)
    rate0 = norms[1] / jnp.where(norms[0] > 0, norms[0], 1.0)
    rate = norms[2] / jnp.where(norms[1] > 0, norms[1], 1.0)
    ready = n == 4
    geometric = (jnp.min(norms) > 0) & aligned
    tail = geometric & (rate < MAX_RATE) & (jnp.abs(rate - rate0) <= RATE_AGREEMENT * rate)
    n = jnp.where(ready, jnp.where(tail, 1, 3), n)
    st = st._replace(hist=hist, hist_value=hist_value, hist_active=st.active)
    new, d = hist[3], steps[2]
    length = rate / (1.0 - jnp.where(tail, rate, 0.0))

    def cond(carry):
        length, found, _, _ = carry
        return (length >= 1.0) & ~found

    def body(carry):
        length, _, trial, trial_buf = carry
        trial, trial_buf = set_factor(trial._replace(xi=jnp.maximum(new + d * length, 0.0)), trial_buf, data, kind)
        gain = elbo(trial, trial_buf, data, kind) - value
        return jnp.where(gain > 0, length, length * SHORTEN), gain > 0, trial, trial_buf

    go = ready & tail
    length, found, trial, trial_buf = lax.while_loop(
        cond, body, (jnp.where(go, length, 0.0), jnp.asarray(False), st, buf))

    def kept(_):
        return trial._replace(hist_n=jnp.zeros_like(n)), trial_buf, elbo(trial, trial_buf, data, kind) - value

    def restored(_):  # xi as it was: the state before the trials, q(w) the same
        back, back_buf = set_factor(st._replace(xi=new), buf, data, kind)
        return back._replace(hist_n=n), back_buf, jnp.zeros_like(value)

    def untouched(_):
        return st._replace(hist_n=n), buf, jnp.zeros_like(value)

    branch = jnp.where(go, jnp.where(found, 0, 1), 2)
    return lax.switch(branch, (kept, restored, untouched), None)
