"""Sparse Gaussian-process regression with inducing inputs (Titsias 2009; Sauer's thesis, section
3.2.4) and the Psi statistics that carry it over to Gaussian-distributed inputs (Titsias &
Lawrence 2010; the thesis's eqs. 5.22-5.24), in JAX, float64.

Kernels (``kernel(name, params, X1, X2)``; ``params`` a dict of positive arrays):

* ``"rbf"``      sigma^2 exp(-alpha r^2 / 2), one inverse squared length-scale alpha (eq. 5.4, 3.14)
* ``"rbf_ard"``  sigma^2 exp(-sum_q alpha_q (x_q - x'_q)^2 / 2), one alpha_q per input dimension (5.7)
* ``"linear"``   sum_q sigma_q^2 x_q x'_q; a scalar ``variance`` is eq. (5.3)
* ``"matern32"`` sigma^2 (1 + sqrt(3) r / l) exp(-sqrt(3) r / l) (5.5, read with the distance
  r = ||x - x'|| where the text prints r^2, and with a variance sigma^2 as every kernel here)

Jitter is added in one place, :func:`add_jitter`, to every kernel matrix that is factorised.

The collapsed bound (3.26), written with the Psi statistics so that the same function serves
fixed inputs (psi0 = tr K_NN, Psi1 = K_NM, Psi2 = K_MN K_NM) and Gaussian ones (the GPLVM):

    F = sum_d log N(y_d | 0, Psi1 K_MM^-1 Psi1^T + I / beta) - beta D (psi0 - tr(K_MM^-1 Psi2)) / 2

for fixed inputs; for Gaussian inputs the first term becomes the expectation bound of Titsias &
Lawrence (2010) below, with D the number of output columns (the factor D on the psi0 and trace
terms is the one eq. 5.20 drops).
"""
from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

__all__ = [
    "KERNELS",
    "JITTER",
    "add_jitter",
    "kernel",
    "kernel_diag",
    "default_params",
    "psi_statistics",
    "fixed_input_statistics",
    "collapsed_bound",
    "bound_factors",
    "BoundFactors",
    "sqdist",
    "exact_log_marginal",
    "predict_f",
    "SparseGP",
    "fit",
    "maximize",
]

JITTER = 1e-6
LOG_2PI = math.log(2.0 * math.pi)


def add_jitter(K, jitter=JITTER):
    """K + jitter * mean(diag K) * I: the one place kernel matrices get jitter before a
    factorisation (relative to the kernel's scale, so it means the same for every kernel; a
    rank-deficient matrix, e.g. a linear kernel on fewer features than points, becomes positive
    definite)."""
    scale = jnp.mean(jnp.diagonal(K))
    return K + jitter * jnp.where(scale > 0, scale, 1.0) * jnp.eye(K.shape[0], dtype=K.dtype)


@jax.jit
def sqdist(X1, X2, weights=None):
    """sum_q w_q (x_q - x'_q)^2 for every pair of rows (clipped at 0 against rounding)."""
    if weights is not None:
        root = jnp.sqrt(weights)
        X1, X2 = X1 * root, X2 * root
    d = jnp.sum(X1**2, 1)[:, None] + jnp.sum(X2**2, 1)[None, :] - 2.0 * X1 @ X2.T
    return jnp.maximum(d, 0.0)


def _safe_sqrt(d):
    """sqrt with a zero gradient (not NaN) at d = 0."""
    positive = d > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, d, 1.0)), 0.0)


def _rbf(p, X1, X2):
    return p["variance"] * jnp.exp(-0.5 * p["alpha"] * sqdist(X1, X2))


def _rbf_ard(p, X1, X2):
    return p["variance"] * jnp.exp(-0.5 * sqdist(X1, X2, p["alpha"]))


def _linear(p, X1, X2):
    return (X1 * p["variance"]) @ X2.T


def _matern32(p, X1, X2):
    s = math.sqrt(3.0) * _safe_sqrt(sqdist(X1, X2)) / p["lengthscale"]
    return p["variance"] * (1.0 + s) * jnp.exp(-s)


def _stationary_diag(p, X):
    return jnp.full(X.shape[0], p["variance"], dtype=X.dtype)


def _linear_diag(p, X):
    return jnp.sum(X**2 * p["variance"], axis=1)


class Kernel(NamedTuple):
    matrix: Callable
    diag: Callable
    params: tuple  # the names of its parameters


KERNELS = {
    "rbf": Kernel(_rbf, _stationary_diag, ("variance", "alpha")),
    "rbf_ard": Kernel(_rbf_ard, _stationary_diag, ("variance", "alpha")),
    "linear": Kernel(_linear, _linear_diag, ("variance",)),
    "matern32": Kernel(_matern32, _stationary_diag, ("variance", "lengthscale")),
}


def _lookup(name):
    try:
        return KERNELS[name]
    except KeyError:
        raise ValueError(f"`kernel` must be one of {sorted(KERNELS)}; got {name!r}.") from None


@functools.partial(jax.jit, static_argnums=0)
def kernel(name, params, X1, X2=None):
    """The kernel matrix k(X1, X2) (X2 = X1 by default)."""
    return _lookup(name).matrix(params, X1, X1 if X2 is None else X2)


@functools.partial(jax.jit, static_argnums=0)
def kernel_diag(name, params, X):
    """diag k(X, X) without forming the matrix."""
    return _lookup(name).diag(params, X)


def _f64(x):
    """A float64 array (not weakly typed: the parameters then have the avals of those read back from
    their logarithms, and compiled functions of them are not compiled twice)."""
    return jnp.asarray(x, dtype=jnp.float64)


def default_params(name, X, *, variance=1.0, ard_dims=None):
    """Parameters set from the data's 'radius' (the thesis, section 5.5.3), so that the kernel
    matrix is neither diagonal nor constant: RBF alpha = 1 / median squared distance between
    rows, Matern length-scale = median distance, linear variance = 1 / mean squared norm (unit
    mean diagonal), RBF-ARD alpha_q = 1 / (2 var_q) per column (``ard_dims`` columns)."""
    X = np.asarray(X, dtype=np.float64)
    if name in ("rbf", "matern32"):
        n = min(len(X), 1000)
        d = np.asarray(sqdist(jnp.asarray(X[:n]), jnp.asarray(X[:n])))
        med = float(np.median(d[np.triu_indices(n, 1)])) if n > 1 else 1.0
        med = med if med > 0 else 1.0
        if name == "rbf":
            return {"variance": _f64(variance), "alpha": _f64(1.0 / med)}
        return {"variance": _f64(variance), "lengthscale": _f64(math.sqrt(med))}
    if name == "linear":
        return {"variance": _f64(variance / max(float(np.mean(np.sum(X**2, 1))), 1e-300))}
    if name == "rbf_ard":
        q = X.shape[1] if ard_dims is None else ard_dims
        var = np.var(X, axis=0)[:q] if len(X) > 1 else np.ones(q)
        return {"variance": _f64(variance), "alpha": _f64(1.0 / (2.0 * np.maximum(var, 1e-12)))}
    _lookup(name)


# ----------------------------------------------------------------------------------------------
# Psi statistics (eqs. 5.22-5.24): expectations of the kernel under q(x_n) = N(mu_n, diag(S_n))
# ----------------------------------------------------------------------------------------------
class PsiStats(NamedTuple):
    psi0: jax.Array  # sum_n <k(x_n, x_n)>                      (5.22)
    Psi1: jax.Array  # (N, M)  <k(x_n, z_m)>                      (5.23)
    Psi2: jax.Array  # (M, M)  sum_n <k(z_m, x_n) k(x_n, z_m')>   (5.24)


@functools.partial(jax.jit, static_argnums=0)
def psi_statistics(name, params, mu, S, Z):
    """psi0, Psi1, Psi2 of the ``"rbf_ard"`` or ``"linear"`` kernel in closed form, for inputs
    x_n ~ N(mu_n, diag(S_n)) (``mu``, ``S``: (N, Q) means and marginal variances) and inducing
    inputs ``Z`` (M, Q). Only the marginals of q(X) enter (each term involves one x_n)."""
    if name == "rbf_ard":
        var, a = params["variance"], params["alpha"]
        N, M = mu.shape[0], Z.shape[0]
        # Psi1_nm = s2 prod_q (a_q S_nq + 1)^-1/2 exp(-a_q (mu_nq - z_mq)^2 / (2 (a_q S_nq + 1)));
        # with c = a / (a S + 1) the exponent's sum over q expands into c.mu_n^2 - 2 (c mu_n).z_m
        # + c.z_m^2: products of (N, Q) and (Q, M) matrices, no (N, M, Q) array
        d1 = a * S + 1.0  # (N, Q)
        c = a / d1
        e1 = jnp.sum(c * mu**2, 1)[:, None] - 2.0 * (c * mu) @ Z.T + c @ (Z**2).T
        Psi1 = var * jnp.exp(-0.5 * (jnp.sum(jnp.log(d1), 1)[:, None] + e1))
        # Psi2_mm' = s2^2 sum_n prod_q (2 a_q S_nq + 1)^-1/2
        #            exp(-a_q (z_mq - z_m'q)^2 / 4 - a_q (mu_nq - zbar_q)^2 / (2 a_q S_nq + 1)),
        # zbar = (z_m + z_m') / 2, for the M (M + 1) / 2 pairs m <= m' only (Psi2 is symmetric);
        # with w = a / (2 a S + 1) the log of the n-th term is one product of an (N, 2Q + 1) and a
        # (2Q + 1, pairs) matrix: [w mu, w, -w.mu^2 + log-det] . [2 zbar, -zbar^2, 1]: O(N M^2 Q)
        # in one GEMM, then exp and a sum over n
        iu, ju = np.triu_indices(M)
        zbar = 0.5 * (Z[iu] + Z[ju])  # (P, Q)
        dz = jnp.sum(a * (Z[iu] - Z[ju]) ** 2, 1)  # (P,)
        d2 = 2.0 * a * S + 1.0
        w = a / d2
        head = jnp.concatenate([w * mu, w, (-0.5 * jnp.sum(jnp.log(d2), 1) - jnp.sum(w * mu**2, 1))[:, None]], 1)
        tail = jnp.concatenate([2.0 * zbar, -(zbar**2), jnp.ones_like(zbar[:, :1])], 1)
        pairs = var**2 * jnp.exp(-0.25 * dz) * jnp.sum(jnp.exp(head @ tail.T), 0)  # (P,)
        index = np.zeros((M, M), dtype=np.int64)
        index[iu, ju] = index[ju, iu] = np.arange(len(iu))
        return PsiStats(N * var, Psi1, pairs[index])
    if name == "linear":
        a = params["variance"] * jnp.ones(mu.shape[1], mu.dtype)
        psi0 = jnp.sum(a * (mu**2 + S))
        ZA = Z * a
        Psi1 = mu @ ZA.T
        second = mu.T @ mu + jnp.diag(jnp.sum(S, 0))  # sum_n <x_n x_n^T>
        return PsiStats(psi0, Psi1, ZA @ second @ ZA.T)
    raise ValueError(f"Psi statistics are available for 'rbf_ard' and 'linear'; got {name!r}.")


def fixed_input_statistics(name, params, X, Z):
    """The Psi statistics of inputs known exactly: psi0 = tr K_NN, Psi1 = K_NM, Psi2 = K_MN K_NM."""
    Knm = kernel(name, params, X, Z)
    return PsiStats(jnp.sum(kernel_diag(name, params, X)), Knm, Knm.T @ Knm)


# ----------------------------------------------------------------------------------------------
# The collapsed bound and predictions
# ----------------------------------------------------------------------------------------------
class BoundFactors(NamedTuple):
    """The factorisations :func:`collapsed_bound` and :func:`predict_f` share (see :func:`bound_factors`)."""

    Lm: jax.Array  # chol(K_MM + jitter)
    LB: jax.Array  # chol(I + beta Lm^-1 Psi2 Lm^-T)
    c: jax.Array  # LB^-1 Lm^-1 Psi1^T Y  (M, D)
    trace_A: jax.Array  # tr(K_MM^-1 Psi2)


def bound_factors(Kmm, stats, Y, beta, jitter):
    """With K_MM + jitter = Lm Lm^T and A = Lm^-1 Psi2 Lm^-T: Lm, LB with I + beta A = LB LB^T,
    c = LB^-1 Lm^-1 Psi1^T Y (M, D) and tr(A) = tr(K_MM^-1 Psi2), as a :class:`BoundFactors`."""
    Lm = jnp.linalg.cholesky(add_jitter(Kmm, jitter))
    half = jsl.solve_triangular(Lm, stats.Psi2, lower=True)
    A = jsl.solve_triangular(Lm, half.T, lower=True)  # Lm^-1 Psi2 Lm^-T (symmetric)
    A = 0.5 * (A + A.T)
    LB = jnp.linalg.cholesky(jnp.eye(A.shape[0], dtype=A.dtype) + beta * A)
    c = jsl.solve_triangular(LB, jsl.solve_triangular(Lm, stats.Psi1.T @ Y, lower=True), lower=True)
    return BoundFactors(Lm, LB, c, jnp.trace(A))


def collapsed_bound(Y, stats: PsiStats, Kmm, beta, jitter=JITTER):
    """The collapsed lower bound on log p(Y) with q(U) at its optimum (Titsias 2009; Titsias &
    Lawrence 2010), for Y (N, D):

        F = -N D / 2 log 2 pi + N D / 2 log beta - D / 2 log|I + beta K_MM^-1 Psi2|
            - beta / 2 ||Y||^2 + beta^2 / 2 tr(Y^T Psi1 (beta Psi2 + K_MM)^-1 Psi1^T Y)
            - beta D / 2 (psi0 - tr(K_MM^-1 Psi2))

    (eq. 3.26 for fixed inputs; the data term of eq. 5.20 with the factor D on the psi0 and
    trace terms). log|beta Psi2 + K_MM| - log|K_MM| is computed as log|I + beta A|, A = Lm^-1
    Psi2 Lm^-T."""
    N, D = Y.shape
    f = bound_factors(Kmm, stats, Y, beta, jitter)
    return (-0.5 * N * D * LOG_2PI + 0.5 * N * D * jnp.log(beta) - D * jnp.sum(jnp.log(jnp.diagonal(f.LB)))
            - 0.5 * beta * jnp.sum(Y**2) + 0.5 * beta**2 * jnp.sum(f.c**2)
            - 0.5 * beta * D * (stats.psi0 - f.trace_A))


def exact_log_marginal(name, params, X, Y, beta):
    """sum_d log N(y_d | 0, K_NN + I / beta), the exact GP (eq. 3.20), for tests and small N."""
    N, D = Y.shape
    L = jnp.linalg.cholesky(kernel(name, params, X) + jnp.eye(N, dtype=Y.dtype) / beta)
    a = jsl.solve_triangular(L, Y, lower=True)
    return -0.5 * N * D * LOG_2PI - D * jnp.sum(jnp.log(jnp.diagonal(L))) - 0.5 * jnp.sum(a**2)


@functools.partial(jax.jit, static_argnums=(0, 7))
def predict_f(name, params, Z, stats: PsiStats, Y, beta, Xnew, jitter=JITTER):
    """The predictive mean (n*, D) and variance (n*,) of the latent function at ``Xnew`` under
    q(U) at its optimum (eqs. 3.28-3.29): mean = beta K_*M (K_MM + beta Psi2)^-1 Psi1^T Y, var =
    k_** - K_*M K_MM^-1 K_M* + K_*M (K_MM + beta Psi2)^-1 K_M* (add 1 / beta for the outputs)."""
    f = bound_factors(kernel(name, params, Z), stats, Y, beta, jitter)
    Kms = kernel(name, params, Z, Xnew)
    v = jsl.solve_triangular(f.Lm, Kms, lower=True)
    w = jsl.solve_triangular(f.LB, v, lower=True)
    mean = beta * w.T @ f.c
    var = kernel_diag(name, params, Xnew) - jnp.sum(v**2, 0) + jnp.sum(w**2, 0)
    return mean, var


# ----------------------------------------------------------------------------------------------
# Optimisation: L-BFGS on unconstrained parameters (scipy's, with a jitted JAX value and gradient)
# ----------------------------------------------------------------------------------------------
def maximize(objective, params, *, args=(), max_steps=1000, tol=1e-9, callback=None, progress_bar=False):
    """Maximise ``objective(params, *args)`` (a JAX function of a pytree of float64 arrays; the
    data in ``args`` are passed to the compiled function, not baked into it) by L-BFGS
    (``scipy.optimize.minimize``) with the gradient from ``jax.value_and_grad``, compiled once.
    ``progress_bar``: a tqdm bar over the iterations showing the objective.
    Returns (params, value, info) with info = dict(steps, converged, message, trace)."""
    import scipy.optimize
    from jax.flatten_util import ravel_pytree

    flat, unravel = ravel_pytree(params)
    value_and_grad = jax.jit(jax.value_and_grad(lambda v, *a: -objective(unravel(v), *a)))
    trace = []

    last = {}

    def fun(v):
        val, grad = value_and_grad(jnp.asarray(v), *args)
        val, grad = float(val), np.asarray(grad, dtype=np.float64)
        last["x"], last["value"] = np.array(v, copy=True), val
        if not np.isfinite(val) or not np.all(np.isfinite(grad)):
            return np.inf, np.zeros_like(grad)  # the line search backs off
        return val, grad

    bar = None
    if progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=int(max_steps), desc="L-BFGS")

    def record(v):
        if callback is not None:
            trace.append(callback(unravel(v)))
        elif "x" in last and np.array_equal(v, last["x"]):  # the accepted point is the last one evaluated
            trace.append(-last["value"])
        else:
            trace.append(-float(value_and_grad(jnp.asarray(v), *args)[0]))
        if bar is not None:
            bar.update(1)
            bar.set_postfix(bound=f"{trace[-1]:.4f}")

    res = scipy.optimize.minimize(fun, np.asarray(flat, dtype=np.float64), jac=True, method="L-BFGS-B",
                                  callback=record, options={"maxiter": int(max_steps), "ftol": tol, "gtol": 1e-8,
                                                            "maxcor": 20})
    if bar is not None:
        bar.close()
    return unravel(jnp.asarray(res.x)), -float(res.fun), {"steps": int(res.nit), "converged": bool(res.success),
                                                           "message": str(res.message), "trace": trace}


# ----------------------------------------------------------------------------------------------
# Sparse GP regression
# ----------------------------------------------------------------------------------------------
def _positive(tree):
    return jax.tree_util.tree_map(jnp.exp, tree)


def _log(tree):
    return jax.tree_util.tree_map(lambda v: jnp.log(jnp.asarray(v, dtype=jnp.float64)), tree)


class SparseGP(NamedTuple):
    """A fitted sparse GP regression: ``predict(Xnew)`` returns the outputs' mean and variance."""
    kernel: str
    params: dict
    Z: jax.Array
    noise_var: float
    X: jax.Array
    Y: jax.Array
    elbo: float
    info: dict
    jitter: float

    def predict(self, Xnew, *, include_noise=True):
        Xnew = jnp.asarray(Xnew, dtype=jnp.float64)
        stats = fixed_input_statistics(self.kernel, self.params, self.X, self.Z)
        mean, var = predict_f(self.kernel, self.params, self.Z, stats, self.Y, 1.0 / self.noise_var, Xnew,
                              self.jitter)
        return np.asarray(mean), np.asarray(var + (self.noise_var if include_noise else 0.0))


def fit(X, Y, *, kernel="rbf_ard", num_inducing=20, Z=None, noise_var=None, optimize_inducing=True,
        max_steps=1000, seed=0, jitter=JITTER):
    """Sparse GP regression by maximising the collapsed bound (3.26) over the kernel's parameters,
    the noise variance and (``optimize_inducing``) the inducing inputs, from ``num_inducing``
    rows of X chosen at random (or ``Z``)."""
    from .validation import check_matrix, check_numeric

    X = check_matrix("X", X)
    Y = check_numeric("Y", Y)
    Y = check_matrix("Y", Y[:, None] if Y.ndim == 1 else Y)
    if len(Y) != len(X):
        raise ValueError(f"`Y` has {len(Y)} rows but `X` has {len(X)}; pass one output row per input row.")
    if Z is None:
        idx = np.random.default_rng(seed).choice(len(X), min(int(num_inducing), len(X)), replace=False)
        Z = X[idx]
    Z = check_matrix("Z", Z)
    params0 = default_params(kernel, X)
    noise0 = float(np.var(Y)) * 0.1 if noise_var is None else float(noise_var)
    free = {"kernel": _log(params0), "noise": _log(noise0)}
    if optimize_inducing:
        free["Z"] = jnp.asarray(Z)
    Xj, Yj, Zj = jnp.asarray(X), jnp.asarray(Y), jnp.asarray(Z)

    def bound(p, X, Y, Z0):
        kp = _positive(p["kernel"])
        Zc = p.get("Z", Z0)
        stats = fixed_input_statistics(kernel, kp, X, Zc)
        return collapsed_bound(Y, stats, _lookup(kernel).matrix(kp, Zc, Zc), jnp.exp(-p["noise"]), jitter)

    p, value, info = maximize(bound, free, args=(Xj, Yj, Zj), max_steps=max_steps)
    return SparseGP(kernel, _positive(p["kernel"]), p.get("Z", Zj), float(jnp.exp(p["noise"])), Xj, Yj, value,
                    info, jitter)
