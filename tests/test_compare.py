"""``compare(by="elbo" | "loo")``: leave-one-out against ArviZ by hand and against brute-force
refits, the commensurability warnings, and how often each criterion ranks generated models as
their held-out log predictive density does."""
import contextlib
import warnings

import arviz as az
import numpy as np
import pytest

import ppl_sbl
from ppl_sbl import CAVI, basis
from ppl_sbl.comparison import loo
from ppl_sbl.models import robust_rvm, rvm
from problems import random_classification


def _sinc(seed, N=40, noise=0.1):
    r = np.random.default_rng(seed)
    x = np.sort(r.uniform(-5, 5, N))
    return x[:, None], np.sinc(x / np.pi) + noise * r.standard_normal(N)


@contextlib.contextmanager
def _no_comparison_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ppl_sbl.ComparisonWarning)
        yield


def test_psis_loo_is_az_loo_on_draws_from_q():
    Phi, t = random_classification(0, N=40)
    fits = {"ard": CAVI(rvm.classification).run(Phi, t),
            "one precision": CAVI(rvm.classification).run(Phi, t, groups=np.zeros(Phi.shape[1], int))}
    with pytest.warns(ppl_sbl.ComparisonWarning):  # schedules differ (fast, sweep): the ELBO warning only
        by_elbo = ppl_sbl.compare(fits)
    assert "weight" not in by_elbo
    table = ppl_sbl.compare(fits, by="loo", num_samples=400, seed=3)
    by_hand = {name: az.loo(res.to_inference_data(num_samples=400, seed=3), pointwise=True)
               for name, res in fits.items()}
    reference = az.compare(by_hand, ic="loo", method="stacking")
    for name in fits:
        assert table.loc[name, "elpd_loo"] == pytest.approx(by_hand[name]["elpd_loo"], rel=1e-12)
        assert table.loc[name, "se"] == pytest.approx(by_hand[name]["se"], rel=1e-12)
        assert table.loc[name, "weight"] == pytest.approx(reference.loc[name, "weight"], abs=1e-9)
        assert table.loc[name, "dse"] == pytest.approx(reference.loc[name, "dse"], abs=1e-12)
        assert table.loc[name, "pareto_k_max"] == pytest.approx(float(np.max(by_hand[name]["pareto_k"])))
        assert table.loc[name, "loo"] == "psis"
    assert table["weight"].sum() == pytest.approx(1.0)


def test_exact_loo_equals_brute_force_refits():
    """The closed form (Sherman-Morrison on q(w), hyperparameters held) against N refits of q(w) on
    N - 1 points with E[alpha], E[gamma] held: equal to 1e-6 nats per point (the fitted q(w) is the
    posterior given the E[alpha], E[gamma] of the sweep before the last, equal to the final ones
    to the fit's convergence). Against N full CAVI
    refits (every factor refitted without the point) it differs by what refitting the
    hyperparameters changes, stated below."""
    X, t = _sinc(0, N=30)
    Phi = np.asarray(basis.rbf(X, delta=1.0, bias=True))
    # converged tightly: q(w) is then the Gaussian posterior given the final E[alpha], E[gamma]
    res = CAVI(rvm.regression, schedule="sweep", prune=False, tol=1e-14, max_sweeps=20000).run(Phi, t, a0=1e-2, e0=1e-2)
    alpha = np.asarray(res.state.alpha_shape / res.state.alpha_rate)
    g = float(res.state.gamma_shape / res.state.gamma_rate)
    brute, refits = [], []
    for n in range(len(t)):
        keep = np.arange(len(t)) != n
        Sigma = np.linalg.inv(np.diag(alpha) + g * Phi[keep].T @ Phi[keep])
        mu = g * Sigma @ Phi[keep].T @ t[keep]
        var = 1 / g + Phi[n] @ Sigma @ Phi[n]
        brute.append(-0.5 * (np.log(2 * np.pi * var) + (t[n] - Phi[n] @ mu) ** 2 / var))
        refit = CAVI(rvm.regression, schedule="sweep", prune=False).run(Phi[keep], t[keep], a0=1e-2, e0=1e-2,
                                                                       b0=np.asarray(res.data.b0),
                                                                       f0=float(res.data.lik.f0))
        mean, v = refit.predict(Phi[n:n + 1])
        refits.append(-0.5 * (np.log(2 * np.pi * v[0]) + (t[n] - mean[0]) ** 2 / v[0]))
    exact = res.loo_exact()
    np.testing.assert_allclose(exact, brute, rtol=0, atol=1e-6)
    # refitting q(alpha) and q(gamma) without the point as well (the LOO of the whole fitting
    # procedure): holding them at the full-data fit is optimistic, here by 3.7 nats of 25.9, within
    # two standard errors of the ELPD
    table = ppl_sbl.compare({"rvm": res}, by="loo")
    assert np.sum(refits) < np.sum(exact) < np.sum(refits) + 2 * table.loc["rvm", "se"]
    assert table.loc["rvm", "loo"] == "exact"
    assert table.loc["rvm", "elpd_loo"] == pytest.approx(np.sum(exact), rel=1e-12)
    assert table.loc["rvm", "p_loo"] == pytest.approx(np.sum(res.log_predictive_density()) - np.sum(brute))
    # PSIS on draws from q estimates the same quantity (with q(gamma)'s spread instead of E[gamma])
    psis = loo(res, method="psis", num_samples=2000)
    assert abs(psis["elpd_loo"] - np.sum(brute)) < 2 * psis["se"] / np.sqrt(len(t))


def test_warnings_fire_for_incommensurable_fits_only():
    X, t = _sinc(1)
    Phi = np.asarray(basis.rbf(X, delta=1.0, bias=True))
    narrow = np.asarray(basis.rbf(X, delta=4.0, bias=True))
    sweep = CAVI(rvm.regression, schedule="sweep").run(Phi, t)
    fast = CAVI(rvm.regression, schedule="fast").run(Phi, t)
    with _no_comparison_warning():  # same model, data and schedule, two kernel widths
        ppl_sbl.compare({"delta 1": sweep, "delta 4": CAVI(rvm.regression, schedule="sweep").run(narrow, t)})
        ppl_sbl.compare({"fast": fast, "sweep": sweep}, by="loo")  # LOO does not depend on the schedule
    with pytest.warns(ppl_sbl.ComparisonWarning, match="different schedules"):
        ppl_sbl.compare({"fast": fast, "sweep": sweep})
    with pytest.warns(ppl_sbl.ComparisonWarning, match="different observed data"):
        ppl_sbl.compare({"t": sweep, "2 t": CAVI(rvm.regression, schedule="sweep").run(Phi, 2 * t)}, by="loo")
    Phi_c, y = random_classification(1, N=40)
    plain = CAVI(rvm.classification).run(Phi_c, y)
    robust = CAVI(robust_rvm.classification).run(Phi_c, y)
    assert plain.schedule == robust.schedule == "fast"
    with pytest.warns(ppl_sbl.ComparisonWarning, match="not normalised"):
        ppl_sbl.compare({"rvm": plain, "robust": robust})
    with _no_comparison_warning():
        ppl_sbl.compare({"rvm": plain, "robust": robust}, by="loo", num_samples=200)


def _held_out_lpd(res, Phi, t):
    mean, var = (np.asarray(v) for v in res.predict(Phi))
    return float(np.mean(-0.5 * (np.log(2 * np.pi * var) + (t - mean) ** 2 / var)))


def test_loo_ranks_generated_models_as_held_out_data_do(record_property):
    """Generated problems with a known truth: y = sum_j w_j k(x, c_j) + noise on 50 points, 1000
    held-out points. "sparse": three nonzero weights, ARD against one shared precision; "dense":
    every weight from N(0, 1), the same pair; "width": ARD at the true kernel width against ARD at
    0.15 of it. For each pair, the sign of the difference in elpd_loo / N (exact LOO), in ELBO and
    in held-out mean log predictive density.

    Measured (seeds 0-3): LOO agrees with the held-out ranking on every sparse and width problem; on
    the dense ones it favours ARD where held-out data favour the shared precision by 0.002 to 0.05
    nats per point in three of four seeds: LOO with the fit's hyperparameters held is optimistic by
    about what tuning one precision per weight on all the data gains (see
    test_exact_loo_equals_brute_force_refits). Agreement: LOO 9 of 12, ELBO 8 of 12: the ELBO ranks
    ARD below the shared precision on every sparse and dense problem (its hyperpriors' constants,
    ``log_norm``), so it agrees with held-out data on the dense problems and the widths only."""
    agree = {"loo": [], "elbo": []}
    for seed in range(4):
        r = np.random.default_rng(seed)
        N, delta = 50, 1.0
        x, x_test = r.uniform(-5, 5, N), r.uniform(-5, 5, 1000)
        centres = np.linspace(-5, 5, N)[:, None]
        for kind in ("sparse", "dense", "width"):
            if kind == "sparse":
                w = np.zeros(N)
                w[r.choice(N, 3, replace=False)] = r.normal(0, 2, 3)
            else:
                w = r.normal(0, 1, N)
            t = np.asarray(basis.rbf(x[:, None], centres, delta=delta)) @ w + 0.1 * r.standard_normal(N)
            t_test = np.asarray(basis.rbf(x_test[:, None], centres, delta=delta)) @ w + 0.1 * r.standard_normal(1000)
            if kind == "width":
                candidates = {"right": (delta, None), "wrong": (0.15 * delta, None)}
            else:
                candidates = {"ard": (delta, None), "shared": (delta, np.zeros(N + 1, int))}
            scores = {}
            for name, (d, groups) in candidates.items():
                Phi = np.asarray(basis.rbf(x[:, None], delta=d, bias=True))
                res = CAVI(rvm.regression).run(Phi, t, groups=groups)
                held_out = _held_out_lpd(res, np.asarray(basis.rbf(x_test[:, None], x[:, None], delta=d, bias=True)),
                                         t_test)
                scores[name] = (res.elbo, float(np.mean(res.loo_exact())), held_out)
            first, second = scores.values()
            truth = np.sign(first[2] - second[2])
            agree["elbo"].append((kind, np.sign(first[0] - second[0]) == truth))
            agree["loo"].append((kind, np.sign(first[1] - second[1]) == truth))
    rates = {k: float(np.mean([ok for _, ok in v])) for k, v in agree.items()}
    record_property("agreement_with_held_out", rates)
    print(f"agreement with the held-out ranking over {len(agree['loo'])} generated problems: LOO {rates['loo']:.2f}, "
          f"ELBO {rates['elbo']:.2f}")
    assert all(ok for kind, ok in agree["loo"] if kind != "dense")
    assert rates["loo"] > rates["elbo"]


def test_likelihood_sites_and_the_draws_psis_needs():
    """PSIS draws only the sites the observed sites' densities read; with the same key they are the
    draws of the full guide, so the pointwise log-likelihood is the same to rounding."""
    Phi, t = random_classification(1, N=30)
    x, y = _sinc(2, N=30)
    Phi_r = np.asarray(basis.rbf(x, delta=1.0, bias=True))
    cases = [(CAVI(rvm.classification).run(Phi, t), {"w"}),
             (CAVI(robust_rvm.classification).run(Phi, t), {"w"}),  # omega scales the density: not read by it
             (CAVI(rvm.regression).run(Phi_r, y), {"w", "gamma"}),
             (CAVI(robust_rvm.regression).run(Phi_r, y), {"w", "gamma", "omega"})]
    for res, expected in cases:
        assert res.likelihood_sites() == expected
        full = res.to_inference_data(num_samples=200, seed=5)
        part = ppl_sbl.result.inference_data(res, num_samples=200, seed=5, sites=res.likelihood_sites())
        assert set(part.posterior.data_vars) == expected
        # the same draws through two programs: equal to rounding (absolute, where a density crosses zero)
        np.testing.assert_allclose(part.log_likelihood["t"].values, full.log_likelihood["t"].values, rtol=1e-12,
                                   atol=1e-13)
    res = cases[0][0]
    draws = res.sample(0, 10, sites={"alpha"})
    with pytest.raises(ValueError, match="'w'"):
        res.log_likelihood(draws)
