"""The super-sparse machine's NumPyro program, its beta-step (4) and its objective (2)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

from .similarity import similarity_matrix

__all__ = ["model", "beta_step", "beta_step_jit", "residual_weights", "beta_residual_jit", "omega", "objective"]


def model(X, y=None, *, prototypes, gamma=1.0, lam=1e-3, tau=1.0, sample_weight=None, similarity="rbf"):
    """The super-sparse machine as a probabilistic model, prototypes given::

        beta_j ~ N(0, 1 / (n lam tau)),   j = 1..m
        b ~ flat (ImproperUniform on the real line)
        y_i | beta, b ~ N(f(x_i), 1 / (tau v_i)),   f(x) = sum_j beta_j s(x, c_j) + b     (1)

    so that ``log p(beta, b | y) = -(n tau / 2) Omega(beta, b, C) + const`` with ``Omega`` the
    objective (2): the posterior of ``(beta, b)`` is Gaussian and its mean is the beta-step (4),
    whatever the noise precision ``tau``. The prototypes are parameters, not sampled.

    Parameters
    ----------
    X : (n, d) inputs.
    y : (n,) targets (None to sample them, e.g. under ``Predictive`` with ``b`` given).
    prototypes : (m, d) the virtual prototypes ``c_j``.
    gamma : the RBF's ``gamma`` (ignored for a callable similarity).
    lam : the ridge penalty ``lambda`` of (2).
    tau : the noise precision.
    sample_weight : (n,) the weights ``v_i > 0`` of (2); default 1.
    similarity : "rbf" or a callable ``s(X, C) -> (n, m)``.
    """
    X = jnp.asarray(X, dtype=jnp.float64)
    C = jnp.asarray(prototypes, dtype=jnp.float64)
    if X.ndim != 2:
        raise ValueError(f"`X` must be 2-dimensional (n, d); got shape {X.shape}.")
    if C.ndim != 2 or C.shape[1] != X.shape[1]:
        raise ValueError(
            f"`prototypes` must be (m, {X.shape[1]}), one row per prototype in the space of `X`; got shape {C.shape}."
        )
    n, m = X.shape[0], C.shape[0]
    v = jnp.ones(n) if sample_weight is None else jnp.asarray(sample_weight, dtype=jnp.float64)
    S = similarity_matrix(X, C, similarity, gamma)
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0 / jnp.sqrt(n * lam * tau)).expand([m]).to_event(1))
    b = numpyro.sample("b", dist.ImproperUniform(constraints.real, (), ()))
    f = S @ beta + b
    with numpyro.plate("data", n):
        numpyro.sample("y", dist.Normal(f, 1.0 / jnp.sqrt(tau * v)), obs=y)


def beta_step(S, y, v, lam):
    """The beta-step (4): the minimiser ``(beta, b)`` of (3) for a fixed similarity matrix.

    Solves the weighted ridge normal equations
    ``[[S^T V S + n lam I, S^T V 1], [1^T V S, 1^T V 1]] [beta; b] = [S^T V y; 1^T V y]``
    by eliminating ``b`` with the second row (``b = (1^T V y - 1^T V S beta) / 1^T V 1``): what is
    left is the m x m system ``(S_c^T V S_c + n lam I) beta = S_c^T V y_c`` in the columns and
    targets centred by their ``v``-weighted means, symmetric positive definite for ``lam > 0``,
    solved by Cholesky. The same solution as (4), better conditioned; differentiable (JAX).

    Parameters
    ----------
    S : (n, m) similarity matrix.
    y : (n,) targets.
    v : (n,) sample weights ``v_i > 0`` (None: all 1).
    lam : ridge penalty ``lambda > 0``.

    Returns
    -------
    beta : (m,)
    b : ()
    """
    S = jnp.asarray(S)
    y = jnp.asarray(y)
    n, m = S.shape
    v = jnp.ones(n, dtype=S.dtype) if v is None else jnp.asarray(v)
    w = v / jnp.sum(v)
    s_mean = w @ S
    y_mean = w @ y
    Sc = S - s_mean
    yc = y - y_mean
    A = (Sc * v[:, None]).T @ Sc + n * lam * jnp.eye(m, dtype=S.dtype)
    L = jnp.linalg.cholesky(A)
    beta = jax.scipy.linalg.cho_solve((L, True), Sc.T @ (v * yc))
    b = y_mean - s_mean @ beta
    return beta, b


beta_step_jit = jax.jit(beta_step)


def residual_weights(S, y, v, lam):
    """The beta-step (4) and the weighted residuals: ``beta``, ``b`` and ``v * (y - S beta - b)``."""
    beta, b = beta_step(S, y, v, lam)
    r = y - S @ beta - b
    return beta, b, v * r


beta_residual_jit = jax.jit(residual_weights)


def omega(S, y, v, lam, beta, b):
    """``Omega`` (3) for the similarity matrix ``S`` and the coefficients ``beta``, ``b``."""
    r = y - S @ beta - b
    return jnp.sum(v * r**2) / y.shape[0] + lam * beta @ beta


def objective(C, X, y, v=None, lam=1e-3, gamma=1.0, similarity="rbf"):
    """``Omega`` (2) at the beta-step solution (4) for the prototypes ``C``: the function of the
    prototypes that the c-step (5)-(6) descends. Differentiable in ``C`` (through the solve of
    (4)) for a JAX-traceable similarity.

    Parameters
    ----------
    C : (m, d) prototypes.
    X : (n, d) inputs.  y : (n,) targets.  v : (n,) sample weights (None: all 1).
    lam : ridge penalty.  gamma : RBF ``gamma``.  similarity : "rbf" or a callable.
    """
    y = jnp.asarray(y)
    v = jnp.ones(y.shape[0]) if v is None else jnp.asarray(v)
    S = similarity_matrix(X, C, similarity, gamma)
    beta, b = beta_step(S, y, v, lam)
    return omega(S, y, v, lam, beta, b)
