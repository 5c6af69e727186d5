"""Small random problems, a model without a guide, and comparisons shared by the tests."""
import math

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist


def random_regression(seed, N=25, M=8, noise=0.3, scale=1.0):
    r = np.random.default_rng(seed)
    Phi = r.standard_normal((N, M)) * scale
    w = np.zeros(M)
    w[: max(1, M // 3)] = r.standard_normal(max(1, M // 3)) * 2.0
    t = Phi @ w + noise * r.standard_normal(N)
    return Phi, t


def random_classification(seed, N=40, M=6):
    r = np.random.default_rng(seed)
    Phi = np.column_stack([np.ones(N), r.standard_normal((N, M - 1))])
    w = np.zeros(M)
    w[:3] = [0.3, 2.0, -1.5]
    p = 1.0 / (1.0 + np.exp(-Phi @ w))
    t = (r.uniform(size=N) < p).astype(float)
    return Phi, t


def student_t_rvm(Phi, t=None, *, nu=4.0):
    """The RVM with Student-t noise, a Gamma(nu/2, nu/2) scale on each point's precision: no guide
    attached, so CAVI derives one from the trace."""
    N, M = Phi.shape
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 1e-2).expand([M]).to_event(1))
    w = numpyro.sample("w", dist.Normal(0.0, jax.lax.rsqrt(alpha)).to_event(1))
    gamma = numpyro.sample("gamma", dist.Gamma(2.0, 0.5))
    with numpyro.plate("data", N):
        lam = numpyro.sample("lam", dist.Gamma(nu / 2, nu / 2))
        numpyro.sample("t", dist.Normal(Phi @ w, jax.lax.rsqrt(gamma * lam)), obs=t)


def assert_same_tree(a, b):
    """Two pytrees with the same structure and bit-identical leaves."""
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    assert tree_a == tree_b
    for x, y in zip(leaves_a, leaves_b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def default_rates(Phi, t=None, a0=1e-6, e0=1e-6):
    """The documented default rates of ``ppl_sbl.priors``, written out with NumPy: b0_k = a0 v /
    mean_n phi_nk^2 and f0 = e0 v, v = var(t) (1 without targets), for a0 = e0 = 1e-6 unless given. Returns {"b0": (M,), "f0": ()}
    (the latter for regression only)."""
    v = 1.0 if t is None else float(np.var(t))
    m = np.mean(np.asarray(Phi) ** 2, axis=0)
    rates = {"b0": a0 * v / np.where(m > 0, m, 1.0)}  # a column of zeros: m = 1
    if t is not None:
        rates["f0"] = e0 * v
    return rates


def direct_L(D, y, alpha, noise_var):
    """The type-II log marginal likelihood log N(y | 0, sigma^2 I + D_a A^-1 D_a^T) with the N x N
    matrix (Faul & Pilikos, section 2), and that matrix C."""
    a = np.isfinite(alpha)
    C = noise_var * np.eye(len(y)) + (D[:, a] / alpha[a]) @ D[:, a].T
    _, logdet = np.linalg.slogdet(C)
    return -0.5 * (len(y) * math.log(2 * math.pi) + logdet + y @ np.linalg.solve(C, y)), C
