"""Local variational bounds and the one-dimensional Gaussian expectations that check them.

* Jaakkola-Jordan bound on the logistic log-likelihood (Jaakkola & Jordan 2000; grid RVM
  paper eq. (27)):

      ln sigma(x) >= ln sigma(xi) + (x - xi)/2 - lambda(xi) (x^2 - xi^2),
      lambda(xi) = tanh(xi / 2) / (4 xi).

  For a label t in {0, 1} the log-likelihood of a logit x is ln sigma(s x) with s = 2t - 1;
  since (s x)^2 = x^2 the bound is quadratic in x with linear coefficient (t - 1/2).

* ``expected_log_sigmoid(m, v)`` and ``expected_sigmoid(m, v)``: E[ln sigma(x)] and E[sigma(x)]
  for x ~ N(m, v), by splitting off the part with a closed form (min(x, 0), the step function)
  and integrating the smooth, exponentially decaying remainder with Gauss-Legendre on each side
  of the kink. These give the exact ELBO (``elbo_exact``) of a guide fitted with the JJ bound.

* Log-sum bound (grid RVM paper eq. (31)): ln(x + y) is concave in (x, y) but
  ln(e^u + e^v) is convex in (u, v) = (ln x, ln y), so its tangent plane at (ln eta, ln zeta)
  lies below it:

      ln(x + y) >= ln(eta + zeta) + [eta (ln x - ln eta) + zeta (ln y - ln zeta)] / (eta + zeta),

  for K terms likewise with weights eta_k / sum eta. The bound is linear in ln x_k, so its
  expectation needs only E[ln x_k], and it is maximised by eta_k = exp(E[ln x_k]) (eq. (35)),
  where it equals logsumexp_k E[ln x_k].

* ``expected_log_sum_gamma(shapes, rates)``: the exact E[ln(x_1 + ... + x_K)] for independent
  x_k ~ Gamma(a_k, b_k), from Frullani's integral
  ln y = int_0^inf (e^-s - e^-sy) / s ds and the Laplace transform E[e^-s x_k] =
  (1 + s / b_k)^-a_k, a one-dimensional integral done by Gauss-Legendre in ln s. It measures how
  loose the log-sum bound is.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtr

__all__ = [
    "jj_lambda",
    "jj_log_sigmoid_bound",
    "expected_log_sigmoid",
    "expected_sigmoid",
    "log_sum_bound",
    "expected_log_sum_gamma",
]

_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(64)
_TAIL = 40.0  # exp(-40) ~ 4e-18: the decaying remainders vanish beyond |x| = 40
_WIDTH = 12.0  # standard deviations of the Gaussian kept on each side


@jax.jit
def jj_lambda(xi):
    """lambda(xi) = tanh(xi/2) / (4 xi), continuous at xi = 0 where it equals 1/8."""
    xi = jnp.abs(xi)
    small = xi < 1e-6
    safe = jnp.where(small, 1.0, xi)
    return jnp.where(small, 0.125 - xi**2 / 96.0, jnp.tanh(safe / 2.0) / (4.0 * safe))


def jj_log_sigmoid_bound(signed_mean, second_moment, xi):
    """E_q of the JJ lower bound on ln sigma(s x) (grid RVM eq. (27)).

    ``signed_mean`` is E[s x], ``second_moment`` is E[x^2]; returns, elementwise,
    ln sigma(xi) + (E[s x] - xi)/2 - lambda(xi) (E[x^2] - xi^2).
    """
    log_sig_xi = -jnp.logaddexp(0.0, -xi)
    return log_sig_xi + 0.5 * (signed_mean - xi) - jj_lambda(xi) * (second_moment - xi**2)


def _half_line_integral(fn, mean, std):
    """int_0^inf fn(y) N(y | mean, std^2) dy for fn decaying like exp(-y).

    The integrand is analytic on (0, inf); Gauss-Legendre on the window where both the Gaussian
    (mean +- 12 std) and fn (y < 40) are non-negligible.
    """
    lo = jnp.clip(mean - _WIDTH * std, 0.0, _TAIL)
    hi = jnp.clip(mean + _WIDTH * std, 0.0, _TAIL)
    half = 0.5 * (hi - lo)
    y = lo[..., None] + half[..., None] * (jnp.asarray(_GL_NODES) + 1.0)
    z = (y - mean[..., None]) / std[..., None]
    density = jnp.exp(-0.5 * z**2) / (jnp.sqrt(2.0 * jnp.pi) * std[..., None])
    return half * jnp.sum(jnp.asarray(_GL_WEIGHTS) * fn(y) * density, axis=-1)


def _split_moments(m, v):
    m = jnp.asarray(m, dtype=jnp.result_type(float))
    std = jnp.sqrt(jnp.maximum(jnp.asarray(v, dtype=m.dtype), 1e-300))
    return m, std


def expected_log_sigmoid(m, v):
    """E[ln sigma(x)] for x ~ N(m, v), accurate to ~1e-12 for any m, v >= 0.

    ln sigma(x) = min(x, 0) - ln(1 + exp(-|x|)); E[min(x, 0)] = m - m Phi(m/s) - s phi(m/s) in
    closed form, and the remainder is integrated numerically on each side of x = 0.
    """
    m, std = _split_moments(m, v)
    r = m / std
    e_min = m - m * ndtr(r) - std * jnp.exp(-0.5 * r**2) / jnp.sqrt(2.0 * jnp.pi)
    soft = lambda y: jnp.log1p(jnp.exp(-y))
    remainder = _half_line_integral(soft, m, std) + _half_line_integral(soft, -m, std)
    return e_min - remainder


def expected_sigmoid(m, v):
    """E[sigma(x)] for x ~ N(m, v): P(x > 0) plus the odd, decaying remainder.

    sigma(x) = 1{x > 0} - sign(x) sigma(-|x|).
    """
    m, std = _split_moments(m, v)
    tail = lambda y: 1.0 / (1.0 + jnp.exp(y))  # sigma(-y)
    remainder = -_half_line_integral(tail, m, std) + _half_line_integral(tail, -m, std)
    return ndtr(m / std) + remainder


def log_sum_bound(mean_logs, log_etas):
    """E_q of the log-sum lower bound (31) on ln(sum_k x_k), elementwise.

    ``mean_logs`` and ``log_etas`` are sequences (one entry per term k) of broadcastable arrays
    E[ln x_k] and ln eta_k. Returns ln S + sum_k r_k (E[ln x_k] - ln eta_k) with S = sum_k eta_k,
    r_k = eta_k / S, and the responsibilities r_k (which enter the updates (33)-(34)).
    """
    log_etas = jnp.broadcast_arrays(*log_etas)
    log_s = jnp.logaddexp.reduce(jnp.stack(log_etas), axis=0) if len(log_etas) > 1 else log_etas[0]
    r = [jnp.exp(le - log_s) for le in log_etas]
    value = log_s
    for rk, ml, le in zip(r, mean_logs, log_etas):
        value = value + rk * (ml - le)
    return value, r


# Gauss-Legendre panels in u = ln s for Frullani's integral (after scaling the sum to mean 1).
# Below u = -30 the integrand is O(s^2) ~ e^-60; above u = 90 it is O(s^-1/2) ~ e^-45 (every
# cell of a sum-rule grid has sum_k a_k >= 1/2).
_FRULLANI_PANELS = (-30.0, -10.0, -4.0, -1.5, 0.0, 1.5, 4.0, 10.0, 30.0, 90.0)
_FRULLANI_NODES = 48


def _frullani_rule():
    x, w = np.polynomial.legendre.leggauss(_FRULLANI_NODES)
    nodes, weights = [], []
    for lo, hi in zip(_FRULLANI_PANELS[:-1], _FRULLANI_PANELS[1:]):
        nodes.append(lo + 0.5 * (hi - lo) * (x + 1.0))
        weights.append(0.5 * (hi - lo) * w)
    return np.concatenate(nodes), np.concatenate(weights)


_FRULLANI_U, _FRULLANI_W = _frullani_rule()


def expected_log_sum_gamma(shapes, rates):
    """E[ln(sum_k x_k)] for independent x_k ~ Gamma(shape_k, rate_k) (shape/rate), elementwise.

    With m = sum_k a_k / b_k and y = sum_k x_k / m,
    E[ln sum x] = ln m + int_0^inf (e^-s - prod_k (1 + s / (m b_k))^-a_k) / s ds,
    integrated in u = ln s. Accurate to ~1e-12 when sum_k a_k >= 1/2 (checked against the
    closed form psi(sum a) - ln b for equal rates and against Monte Carlo in the tests).
    """
    shapes = jnp.broadcast_arrays(*[jnp.asarray(a, dtype=jnp.result_type(float)) for a in shapes])
    rates = jnp.broadcast_arrays(*[jnp.asarray(b, dtype=jnp.result_type(float)) for b in rates])
    shapes = jnp.broadcast_arrays(*shapes, *rates)[: len(shapes)]
    rates = jnp.broadcast_arrays(*rates, *shapes)[: len(rates)]
    mean = sum(a / b for a, b in zip(shapes, rates))
    s = jnp.exp(jnp.asarray(_FRULLANI_U))
    log_laplace = sum(-a[..., None] * jnp.log1p(s / (mean * b)[..., None]) for a, b in zip(shapes, rates))
    integrand = jnp.exp(-s) - jnp.exp(log_laplace)  # ds / s = du
    return jnp.log(mean) + jnp.sum(jnp.asarray(_FRULLANI_W) * integrand, axis=-1)
