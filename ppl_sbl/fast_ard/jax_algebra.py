"""One coefficient of the ARD family in JAX, for the compiled schedule
(:mod:`ppl_sbl.fast_ard.compiled`): eq. (1) and (2) of :mod:`ppl_sbl.fast_ard`, their maximisers
(the cubic (4) and the quadratic (5)) and the Gamma terms of the restricted-family ELBO, as
:mod:`ppl_sbl.fast_ard.algebra` computes them on the host, on arrays of fixed shape; and the dense
factorisations of the program's matrices, one fit's matrix per LAPACK call, run on one BLAS
thread (:func:`one_blas_thread`).

Proper hyperpriors only (a0, b0 > 0; the host's :mod:`ppl_sbl.fast_ard.algebra` also has Tipping &
Faul's limit a0 = b0 = 0). a0 and b0 are traced, so a new value of either does not compile a new
program."""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

from ..expfam import gamma_entropy, gamma_expected_log_density, gamma_mean, gamma_mean_log
from .algebra import cubic_newton_step

LOG_2PI = math.log(2.0 * math.pi)
_NEWTON_STEPS = 6
_WARM_STEPS = 12
_REAL = 1e-6  # |Im| / |root| below which a computed root of the cubic (4) counts as real
_CARDANO_ROWS = 16  # rows that go through Cardano's formula one at a time before all of them do


def prior_part(x, a0, b0):
    """a0 ln x - b0 x."""
    return a0 * jnp.log(x) - b0 * x


def f_in(x, s, q, a0, b0):
    """f_in(x) of eq. (1)."""
    return 0.5 * q * q / (x + s) - 0.5 * jnp.log1p(s / x) + prior_part(x, a0, b0)


def frozen_value(x, h, a0, b0):
    """f_out(x) of eq. (2)."""
    return -0.5 * jnp.log1p(h / x) + prior_part(x, a0, b0)


def excess(q, s):
    """d = q^2/s - 1 without forming q^2 - s."""
    root = jnp.sqrt(s)
    aq = jnp.abs(q)
    return (aq - root) * (aq + root) / s


def cubic(s, q, a0, b0):
    """(c3, c2, c1, c0) of the cubic (4) in u = x / s."""
    beta = b0 * s
    d = excess(q, s)
    return 2.0 * beta, 4.0 * beta - 2.0 * a0, 2.0 * beta + d - 4.0 * a0, jnp.full_like(s, -(2.0 * a0 + 1.0))


def _cubic_roots(c3, c2, c1, c0):
    """The real roots (n, 3) of c3 u^3 + c2 u^2 + c1 u + c0 (c3 != 0), NaN where fewer, in real
    arithmetic: on the depressed cubic t^3 + P t + Q, Cardano's formula where its discriminant
    D = Q^2/4 + P^3/27 is positive (one real root; the real part of the complex pair is kept too
    where its imaginary part is below ``_REAL`` of its size, a root that rounding has split),
    else the trigonometric form of the three real roots."""
    p2, p1, p0 = c2 / c3, c1 / c3, c0 / c3
    P = p1 - p2 * p2 / 3.0
    Q = (2.0 * p2 * p2 * p2 / 27.0 - p2 * p1 / 3.0) + p0
    D = Q * Q / 4.0 + P * P * P / 27.0
    shift = -p2 / 3.0
    one = D > 0
    # one real root: the cube root of the larger of -Q/2 +- sqrt(D) (no cancellation)
    inner = -Q / 2.0 - jnp.where(Q >= 0, 1.0, -1.0) * jnp.sqrt(jnp.where(one, D, 0.0))
    A = jnp.cbrt(inner)
    Bv = jnp.where(A != 0, -P / (3.0 * jnp.where(A != 0, A, 1.0)), 0.0)
    real_part = -(A + Bv) / 2.0
    imag_part = (A - Bv) * (math.sqrt(3.0) / 2.0)
    pair = jnp.abs(imag_part) <= _REAL * jnp.hypot(real_part, imag_part)
    # three real roots
    negP = jnp.where(one | (P >= 0), 1.0, -P)
    r = 2.0 * jnp.sqrt(negP / 3.0)
    cos_arg = jnp.clip((3.0 * Q / (2.0 * -negP)) * jnp.sqrt(3.0 / negP), -1.0, 1.0)
    phi = jnp.arccos(cos_arg)
    three = r[:, None] * jnp.cos(phi[:, None] / 3.0 - 2.0 * jnp.pi * jnp.arange(3) / 3.0)
    three = jnp.where((P >= 0)[:, None], 0.0, three)  # D <= 0 with P >= 0: P = Q = 0, a triple root at 0
    single = jnp.stack([A + Bv, jnp.where(pair, real_part, jnp.nan), jnp.full_like(A, jnp.nan)], axis=1)
    return jnp.where(one[:, None], single, three) + shift[:, None]


def cubic_candidates(c3, c2, c1, c0):
    """Positive real candidates (n, 6) for the roots of (4): the real roots of the cubic and of its
    reversal, each polished by safeguarded Newton steps; NaN where none."""
    n = c3.shape[0]
    real = _cubic_roots(jnp.concatenate([c3, c0]), jnp.concatenate([c2, c1]), jnp.concatenate([c1, c2]),
                        jnp.concatenate([c0, c3]))
    u = jnp.concatenate([real[:n], 1.0 / real[n:]], axis=1)
    u = jnp.where(jnp.isfinite(u) & (u > 0), u, jnp.nan)
    C = tuple(c[:, None] for c in (c3, c2, c1, c0))
    value = jnp.abs(((C[0] * u + C[1]) * u + C[2]) * u + C[3])
    for _ in range(_NEWTON_STEPS):
        trial, trial_value, accept = cubic_newton_step(u, value, *C, xp=jnp)
        u, value = jnp.where(accept, trial, u), jnp.where(accept, trial_value, value)
    return u


def _cardano_optimum(s, q, a0, b0):
    """The global maximiser of (1) over the candidates of :func:`cubic_candidates` (s > 0)."""
    c3, c2, c1, c0 = cubic(s, q, a0, b0)
    u = cubic_candidates(c3, c2, c1, c0)
    xs = s[:, None] * u
    f = f_in(xs, s[:, None], q[:, None], a0, b0)
    f = jnp.where(jnp.isfinite(f), f, -jnp.inf)
    best = jnp.argmax(f, axis=1)
    return jnp.take_along_axis(xs, best[:, None], 1)[:, 0], jnp.take_along_axis(f, best[:, None], 1)[:, 0]


def warm_optimum(s, q, a0, b0, start, rows, axis_name=None):
    """The global maximiser of (1) over x > 0 and f_in there, on the rows ``rows`` (a mask; the others
    give NaN; s > 0), from a guess ``start`` of each maximiser: ``_WARM_STEPS`` Newton steps on (4)
    from start / s where the cubic has one positive root (by Descartes' rule of signs unless
    c2 < 0 < c1, else by its discriminant, clearly negative); the other rows, and those the steps
    leave off the root, go through Cardano's formula (a few at a time, all at once where there are
    many). ``axis_name``: the name of a ``jax.vmap`` axis of fits side by side, which then take the
    fallback that the most demanding of them needs (its work is a no-op for the others), so that
    vmap keeps the branch instead of running every one for every fit."""
    s = jnp.where(rows, s, 1.0)
    q = jnp.where(rows, q, 0.0)
    c3, c2, c1, c0 = cubic(s, q, a0, b0)
    d3, d2 = 3.0 * c3, 2.0 * c2

    u = jnp.where(rows, start / s, 1.0)
    for _ in range(_WARM_STEPS):
        step = (((c3 * u + c2) * u + c1) * u + c0) / ((d3 * u + d2) * u + c1)
        u = u - step
    # at the root to working precision: the last step at rounding, or the residual at the rounding
    # error of the cubic's terms (steps that stall there, where the root is large)
    terms = jnp.abs(c3 * u * u * u) + jnp.abs(c2 * u * u) + jnp.abs(c1 * u) + jnp.abs(c0)
    residual = jnp.abs(((c3 * u + c2) * u + c1) * u + c0)
    settled = (jnp.abs(step) <= 1e-14 * u) | (residual <= 8.0 * jnp.finfo(jnp.float64).eps * terms)
    ok = settled & (u > 0) & jnp.isfinite(u)
    terms = (18.0 * c3 * c2 * c1 * c0, -4.0 * c2**3 * c0, c2 * c2 * c1 * c1, -4.0 * c3 * c1**3, -27.0 * c3 * c3 * c0 * c0)
    scale = jnp.max(jnp.abs(jnp.stack(terms)), axis=0)
    maybe = (c2 < 0) & (c1 > 0)
    ok = ok & ~(maybe & ~(sum(terms) < -1e-8 * scale))
    x = s * u
    value = f_in(x, s, q, a0, b0)
    rest = rows & ~ok
    count = jnp.sum(rest)

    def few(xv):
        x, value = xv
        (picked,) = jnp.nonzero(rest, size=_CARDANO_ROWS, fill_value=0)
        xr, vr = _cardano_optimum(s[picked], q[picked], a0, b0)
        valid = jnp.arange(_CARDANO_ROWS) < count
        target = jnp.where(valid, picked, s.shape[0])
        return x.at[target].set(xr, mode="drop"), value.at[target].set(vr, mode="drop")

    def every(xv):
        x, value = xv
        xr, vr = _cardano_optimum(s, q, a0, b0)
        return jnp.where(rest, xr, x), jnp.where(rest, vr, value)

    branch = jnp.where(count == 0, 0, jnp.where(count <= _CARDANO_ROWS, 1, 2))
    if axis_name is not None:
        branch = lax.pmax(branch, axis_name)
    x, value = lax.switch(branch, (lambda xv: xv, few, every), (x, value))
    return jnp.where(rows, x, jnp.nan), jnp.where(rows, value, jnp.nan)


def frozen_optimum(h, a0, b0):
    """The maximiser of (2) over x > 0 (the positive root of (5)), and f_out there."""
    p = b0 * h - a0
    disc = jnp.hypot(p, jnp.sqrt(2.0 * b0 * (2.0 * a0 + 1.0) * h))
    x = jnp.where(p > 0, (2.0 * a0 + 1.0) * h / jnp.where(p > 0, p + disc, 1.0), (disc - p) / (2.0 * b0))
    return x, frozen_value(x, h, a0, b0)


def in_model_change(x, x_new, s, q, a0, b0):
    """f_in(x_new) - f_in(x) without the cancellation of the two values."""
    step = x_new - x
    return (0.5 * (-q * q * step / ((x_new + s) * (x + s)) - jnp.log1p(step / (x + s)) + jnp.log1p(step / x))
            + a0 * jnp.log1p(step / x) - b0 * step)


def gamma_prior_and_entropy(shape, rate, a0, b0, mask=None):
    """sum of E_q[ln Gamma(x | a0, b0)] + H[Gamma(shape, rate)] (over ``mask``)."""
    terms = gamma_expected_log_density(a0, b0, gamma_mean(shape, rate), gamma_mean_log(shape, rate)) + gamma_entropy(
        shape, rate)
    return jnp.sum(terms if mask is None else jnp.where(mask, terms, 0.0))


@functools.lru_cache(maxsize=None)
def _blas_controller():
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def one_blas_thread(fn):
    """``fn`` with the process's BLAS libraries (OpenBLAS, whose LAPACK routines the compiled
    programs' factorisations call through SciPy) on one thread while it runs, the caller's setting
    back after it: XLA's thread pool already runs a program's operations on every core, and BLAS
    threads started beside it for the programs' small matrices wait for cores instead of computing."""
    @functools.wraps(fn)
    def limited(*args, **kwargs):
        with _blas_controller().limit(limits=1, user_api="blas"):
            return fn(*args, **kwargs)

    return limited


def _one_fit_a_call(fn):
    """``fn`` of one fit's matrices. Under ``jax.vmap`` (fits side by side) on a CPU, a loop over
    the fits, one matrix per LAPACK call: jaxlib's CPU LAPACK kernels split a batch of matrices
    over the thread pool that also runs the program's operations and block until the parts are
    done, so that two batched calls at once on a pool of two threads wait for each other for ever.
    On other backends, the batched call."""
    batched = jax.custom_batching.custom_vmap(fn)

    @batched.def_vmap
    def rule(axis_size, in_batched, *args):
        del axis_size
        if jax.default_backend() != "cpu":
            out = jax.vmap(fn, in_axes=[0 if b else None for b in in_batched])(*args)
        else:
            def one(mapped):
                it = iter(mapped)
                return fn(*[next(it) if b else a for a, b in zip(args, in_batched)])

            out = lax.map(one, [a for a, b in zip(args, in_batched) if b])
        return out, jax.tree.map(lambda _: True, out)

    return functools.wraps(fn)(batched)


@_one_fit_a_call
def cholesky(P):
    """The lower Cholesky factor of P (NaN where P is not positive definite)."""
    return jnp.linalg.cholesky(P)


@_one_fit_a_call
def eigvalsh(A):
    """The eigenvalues of the symmetric A, ascending."""
    return jnp.linalg.eigvalsh(A)


@_one_fit_a_call
def slogdet(A):
    """(sign, ln |det A|)."""
    return jnp.linalg.slogdet(A)


@_one_fit_a_call
def lower_solve(L, B):
    """L^-1 B for a lower triangular L."""
    return jax.scipy.linalg.solve_triangular(L, B, lower=True)


@_one_fit_a_call
def cho_solve(L, b):
    """P^-1 b from the lower Cholesky factor L of P."""
    return jax.scipy.linalg.cho_solve((L, True), b)


def scaled_cholesky(P):
    """(L, d): the Cholesky factor L of P scaled to a unit diagonal, d = 1/sqrt(diag P); L is NaN
    where P is not positive definite to working precision."""
    d = 1.0 / jnp.sqrt(jnp.diag(P))
    return cholesky(P * d[:, None] * d[None, :]), d


def inverse_from_cholesky(L, d):
    """P^-1 from :func:`scaled_cholesky`'s (L, d), symmetrised."""
    eye = jnp.eye(L.shape[0], dtype=L.dtype)
    inv_L = lower_solve(L, eye)
    inv = (inv_L.T @ inv_L) * d[:, None] * d[None, :]
    return 0.5 * (inv + inv.T)
