"""The expected log joint of a derived guide over its factors' mean parameters (the registry of
expected log densities: Normal, Bernoulli with the Jaakkola-Jordan bound or by quadrature, Gamma
priors, sums of Gammas with the log-sum bound), site by site."""
from __future__ import annotations

import jax.numpy as jnp

from .. import expfam
from ..bounds import expected_log_sigmoid, expected_log_sum_gamma, jj_log_sigmoid_bound, log_sum_bound
from .structure import apply_matrix, monosum


def linear_moments(t, means, second):
    """E[v] and E[v^2] of v = a + sum_f B_f z_f under the mean-field q (factors independent)."""
    mean = t.a + sum(apply_matrix(t.B[f], means[f]) for f in t.B)
    var = 0.0
    for f, b in t.B.items():
        if isinstance(second[f], tuple):  # (diag E[zz^T], ...): exact where b or the covariance is diagonal
            spread = second[f][0] - means[f] ** 2  # the diagonal of Cov[z_f]
            var = var + (b ** 2 * spread if b.ndim == 1 else (b ** 2) @ spread)
            continue
        cov = second[f] - jnp.outer(means[f], means[f])
        var = var + (b ** 2 * jnp.diag(cov) if b.ndim == 1 else jnp.sum((b @ cov) * b, 1))
    return mean, mean ** 2 + var


def expected_log_joint(data, means, second, g_mean, g_log, local, exact=None):
    """E_q[ln p] as a function of E[z], E[zz^T] of each Gaussian site, E[g], E[ln g] of all Gamma
    elements (stacked) and the local-bound parameters ``local = (xi, log_eta)``: with the
    Jaakkola-Jordan bound on Bernoulli terms and the log-sum bound on sums of precisions, or,
    with ``exact = (shapes, rates)`` of the stacked Gamma elements, their exact expectations by
    quadrature. The sum of :func:`expected_log_terms`."""
    total = 0.0
    for value in expected_log_terms(data, means, second, g_mean, g_log, local, exact).values():
        total = total + value
    return total


def expected_log_terms(data, means, second, g_mean, g_log, local, exact=None):
    """{site: E_q[s ln p(site | parents)]}, the expected log density of every site of the model
    (observed and latent), each multiplied by the expectation of its log-density scale s
    (``numpyro.handlers.scale``; 1 without one), with the bounds or the exact expectations as in
    :func:`expected_log_joint`. A Gamma site's term includes its prior's log normalising
    constant (:func:`prior_log_normalisers`)."""
    xi, log_eta = local
    log_g_mean = jnp.log(g_mean)
    out = {}
    for name, t in data.terms.items():
        e_tau = jnp.exp(t.c + monosum(t.A, log_g_mean))
        e_log_tau = t.c + monosum(t.A, g_log)
        e_scale = jnp.exp(t.cs + monosum(t.As, log_g_mean))
        if t.F or t.BTa:  # one precision and scale for every row, one Gaussian factor
            (f,) = t.BTa
            quad = second[f][1] if t.F else jnp.sum(t.G[f] * second[f])  # tr(G E[zz^T])
            er2 = t.aTa + 2.0 * t.BTa[f] @ means[f] + quad
            n = t.a.shape[0]
            out[name] = e_scale[0] * (0.5 * n * (e_log_tau[0] - expfam.LOG_2PI) - 0.5 * e_tau[0] * er2)
        elif t.G:  # one precision and scale for every row: sum_i E[r_i^2] through the Gram matrices
            mean = t.a + sum(apply_matrix(t.B[f], means[f]) for f in t.B)
            er2 = jnp.sum(mean ** 2) + sum(jnp.sum(t.G[f] * (second[f] - jnp.outer(means[f], means[f])))
                                           for f in t.G)
            n = t.a.shape[0]
            out[name] = e_scale[0] * (0.5 * n * (e_log_tau[0] - expfam.LOG_2PI) - 0.5 * e_tau[0] * er2)
        else:
            _, er2 = linear_moments(t, means, second)
            out[name] = jnp.sum(e_scale * expfam.normal_expected_log_density(er2, e_tau, e_log_tau))
    for name, t in data.jj.items():
        mean, ex2 = linear_moments(t, means, second)
        e_scale = jnp.exp(t.cs + monosum(t.As, log_g_mean))
        if exact is not None:
            pointwise = expected_log_sigmoid(t.s * mean, ex2 - mean ** 2)
        else:
            pointwise = jj_log_sigmoid_bound(t.s * mean, ex2, xi[name])
        out[name] = jnp.sum(e_scale * pointwise)
    for name, t in data.sums.items():
        _, er2 = linear_moments(t, means, second)
        e_tau = monosum(t.idx, g_mean)
        k = t.idx.shape[1]
        if exact is not None:
            e_log_tau = expected_log_sum_gamma([exact[0][t.idx[:, j]] for j in range(k)],
                                               [exact[1][t.idx[:, j]] for j in range(k)])
        else:
            e_log_tau = log_sum_bound([g_log[t.idx[:, j]] for j in range(k)],
                                      [log_eta[name][:, j] for j in range(k)])[0]
        e_scale = jnp.exp(t.cs + monosum(t.As, log_g_mean))
        out[name] = jnp.sum(e_scale * expfam.normal_expected_log_density(er2, e_tau, e_log_tau))
    for name, p in data.priors.items():
        e_scale = jnp.exp(p.cs + monosum(p.As, log_g_mean))
        out[name] = jnp.sum(e_scale * expfam.gamma_expected_log_density(p.shape, p.rate, g_mean[p.sel], g_log[p.sel]))
    return out


def prior_log_normalisers(data, g_mean):
    """{Gamma site: sum_i E[s_i] (a0_i ln b0_i - ln Gamma(a0_i))}: the log normalising constant of
    each Gamma site's prior (its shape a0 and rate b0 are constants), times the expected
    log-density scale s of each element (1 without ``numpyro.handlers.scale``)."""
    log_g_mean = jnp.log(g_mean)
    return {name: jnp.sum(jnp.exp(p.cs + monosum(p.As, log_g_mean)) * expfam.gamma_log_normaliser(p.shape, p.rate))
            for name, p in data.priors.items()}
