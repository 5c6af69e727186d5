"""Closed forms of ppl_sbl.bounds and ppl_sbl.expfam against quadrature and scipy."""
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import expit, log_expit

import ppl_sbl  # noqa: F401  (float64)
from ppl_sbl import bounds, expfam


def _quad(f, m, s):
    lo, hi = m - 14 * s, m + 14 * s
    pts = [0.0] if lo < 0 < hi else None
    return integrate.quad(lambda x: f(x) * stats.norm.pdf(x, m, s), lo, hi, points=pts, limit=400,
                          epsabs=1e-13, epsrel=1e-12)[0]


@pytest.mark.parametrize("m,v", [(0.0, 1e-10), (0.3, 1e-4), (0.0, 1.0), (2.0, 4.0), (-5.0, 0.01),
                                 (0.1, 1e4), (30.0, 900.0), (-3.0, 1e6), (8.0, 0.5)])
def test_expected_log_sigmoid_and_sigmoid_match_quadrature(m, v):
    s = np.sqrt(v)
    got = float(bounds.expected_log_sigmoid(jnp.array([m]), jnp.array([v]))[0])
    assert got == pytest.approx(_quad(log_expit, m, s), abs=1e-9, rel=1e-9)
    got = float(bounds.expected_sigmoid(jnp.array([m]), jnp.array([v]))[0])
    assert got == pytest.approx(_quad(expit, m, s), abs=1e-9)


def test_jj_bound_is_a_lower_bound_tight_at_xi():
    x = np.linspace(-8, 8, 401)
    for xi in [0.0, 0.5, 2.0, 7.0]:
        b = np.asarray(bounds.jj_log_sigmoid_bound(jnp.asarray(x), jnp.asarray(x**2), xi))
        assert np.all(b <= log_expit(x) + 1e-12)
        if xi > 0:
            tight = np.asarray(bounds.jj_log_sigmoid_bound(jnp.array([xi, -xi]), jnp.array([xi**2] * 2), xi))
            np.testing.assert_allclose(tight, log_expit(np.array([xi, -xi])), atol=1e-12)
    # lambda(xi) is continuous at 0
    assert float(bounds.jj_lambda(1e-8)) == pytest.approx(float(bounds.jj_lambda(1e-3)), rel=1e-6)


@pytest.mark.parametrize("a,b", [(0.5, 2.0), (3.0, 0.1), (0.2, 0.05)])
def test_gamma_moments_and_entropy_match_scipy(a, b):
    d = stats.gamma(a, scale=1.0 / b)
    assert float(expfam.gamma_mean(a, b)) == pytest.approx(d.mean())
    assert float(expfam.gamma_entropy(a, b)) == pytest.approx(float(d.entropy()), rel=1e-10)
    # E[ln x] by quadrature in log-space
    e_log = integrate.quad(lambda u: u * d.pdf(np.exp(u)) * np.exp(u), -400, 20, limit=2000)[0]
    assert float(expfam.gamma_mean_log(a, b)) == pytest.approx(e_log, rel=1e-6, abs=1e-6)
    # E_q[ln Gamma(x | a0, b0)] against E_q of scipy's logpdf
    a0, b0 = 2.0, 0.7
    expect = integrate.quad(lambda u: stats.gamma(a0, scale=1 / b0).logpdf(np.exp(u)) * d.pdf(np.exp(u)) * np.exp(u),
                            -400, 20, limit=2000)[0]
    got = expfam.gamma_expected_log_density(a0, b0, expfam.gamma_mean(a, b), expfam.gamma_mean_log(a, b))
    assert float(got) == pytest.approx(expect, rel=1e-6)


def test_gaussian_entropy_matches_scipy():
    cov = np.array([[2.0, 0.3], [0.3, 0.5]])
    got = expfam.gaussian_entropy(np.linalg.slogdet(cov)[1], 2)
    assert float(got) == pytest.approx(stats.multivariate_normal(np.zeros(2), cov).entropy())
