"""Small random problems shared by the tests."""
import numpy as np


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
