"""The ELBO's parts of the closed-form guides (``result.elbo_parts()``): they sum to the ELBO, and
each equals its own Monte Carlo estimate from NumPyro's traces of the model and the fitted guide
(:func:`ppl_sbl.diagnostics.monte_carlo_sites`), site by site."""
import numpy as np
import numpyro.distributions as dist
import pytest

from ppl_sbl import CAVI
from ppl_sbl.diagnostics import monte_carlo_sites
from ppl_sbl.models import grid_rvm, robust_rvm, rvm
from problems import random_classification, random_regression


def _table(seed, N=30, shape=(4, 3)):
    r = np.random.default_rng(seed)
    X = r.standard_normal((N,) + shape)
    t = X[:, 0, 0] - 0.8 * X[:, 1, 2] + 0.2 * r.standard_normal(N)
    return X, t


def _cases(seed):
    Phi, t = random_regression(seed)
    Phi_c, y = random_classification(seed)
    X, tt = _table(seed)
    return {
        "rvm regression": (rvm.regression, (Phi, t), {}),
        "rvm regression, shared precision": (rvm.regression, (Phi, t), {"groups": np.zeros(Phi.shape[1], int)}),
        "rvm classification": (rvm.classification, (Phi_c, y), {}),
        "robust regression": (robust_rvm.regression, (Phi, t), {}),
        "robust classification": (robust_rvm.classification, (Phi_c, y), {}),
        "p-grid regression": (grid_rvm.regression, (X, tt), {"kind": "p"}),
        "s-grid regression": (grid_rvm.regression, (X, tt), {"kind": "s"}),
        "s-grid classification": (grid_rvm.classification, (X, (tt > 0).astype(float)), {"kind": "s"}),
    }


CASES = list(_cases(0))


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("schedule", ["sweep", "auto"])
def test_parts_sum_to_the_elbo(name, schedule):
    for seed in (0,):
        model, args, kwargs = _cases(seed)[name]
        res = CAVI(model, schedule=schedule, tol=1e-7).run(*args, **kwargs)
        parts = res.elbo_parts()
        assert list(parts)[0] == "log_lik"
        np.testing.assert_allclose(sum(parts.values()), res.elbo, rtol=1e-10)
        if res.bound == "none":
            assert "local_bound" not in parts
        else:
            assert parts["local_bound"] <= 1e-9
            np.testing.assert_allclose(sum(v for k, v in parts.items() if k != "local_bound"), res.elbo_exact,
                                       rtol=1e-10)


def _log_norm(site_prior):
    """ln(b0^a0 / Gamma(a0)) summed, from NumPyro's Gamma density at x = 1: ln p(1) + b0."""
    a0, b0 = site_prior
    return float(np.sum(dist.Gamma(a0, b0).log_prob(1.0) + b0))


@pytest.mark.parametrize("name", CASES)
def test_each_part_equals_its_monte_carlo_estimate(name):
    model, args, kwargs = _cases(2)[name]
    if name.startswith("s-grid"):
        # the s-grid's q(alpha_i) has shape a0 + sum_j r_ij / 2, near a0 for a row the sum rule gives
        # to the columns: with a0 = 1e-6 its draws underflow to 0 and ln q is not finite
        kwargs = dict(kwargs, a0=0.5, c0=0.5)
    res = CAVI(model, schedule="sweep", tol=1e-7).run(*args, **kwargs)
    parts = res.elbo_parts()
    sites = monte_carlo_sites(res.program, res.guide, *res.args, num_particles=4000, seed=0, **res.kwargs)
    observed = set(res.observed)
    groups = {"log_lik": sorted(observed)}
    for site in sites:
        if site not in observed:
            groups[f"-kl_{site}"] = [site]
    for part, members in groups.items():
        values = sum(sites[m] for m in members)
        mean, se = values.mean(), values.std(ddof=1) / np.sqrt(len(values))
        analytic = parts[part] + parts.get(part.replace("-kl_", "log_norm_"), 0.0) if part != "log_lik" else \
            parts["log_lik"]
        assert abs(analytic - mean) <= 5 * se + 1e-8 * abs(mean), (name, part, analytic, mean, se)
    assert set(groups) == {k for k in parts if k.startswith("-kl_")} | {"log_lik"}


def test_log_normalisers_are_the_hyperpriors_constants():
    Phi, t = random_regression(3)
    res = CAVI(rvm.regression, schedule="sweep").run(Phi, t, a0=1e-6, b0=1e-6, e0=1e-6, f0=1e-6)
    parts = res.elbo_parts()
    M = Phi.shape[1]
    np.testing.assert_allclose(parts["log_norm_alpha"], _log_norm((np.full(M, 1e-6), 1e-6)), rtol=1e-12)
    np.testing.assert_allclose(parts["log_norm_gamma"], _log_norm((1e-6, 1e-6)), rtol=1e-12)
    shared = CAVI(rvm.regression).run(Phi, t, a0=1e-6, b0=1e-6, e0=1e-6, f0=1e-6, groups=np.zeros(M, int))
    # one precision instead of M: M - 1 fewer constants of about -ln(1/a0) = -13.8 nats each
    np.testing.assert_allclose(parts["log_norm_alpha"] - shared.elbo_parts()["log_norm_alpha"],
                               (M - 1) * _log_norm((1e-6, 1e-6)), rtol=1e-12)
