"""Closed-form CAVI derived from the model's trace (``ppl_sbl.derived``): the derived updates and
ELBO against the hand-written guides after every sweep, an edited model against NumPyro's Monte
Carlo ELBO, and named errors outside the vocabulary."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import ppl_sbl
from ppl_sbl.derived import NotConjugateError, derived_guide
from ppl_sbl.inference import resolve_guide
from ppl_sbl.models import grid_rvm, robust_rvm, rvm

from problems import student_t_rvm


def _sweeps(model, args, kwargs, n, compare):
    """Run the hand-written and the derived guide from their initial states for n sweeps and call
    compare(hand_state, derived_state, hand_elbo, derived_elbo) after each."""
    h = resolve_guide(model.closed_form_guide, args, kwargs)
    g = derived_guide(model, *args, **kwargs)
    dh, dd = h.prepare(*args, **kwargs), g.prepare(*args, **kwargs)
    sh, sd = h.init(dh), g.init(dd)
    # both guides' update and ELBO compiled, kept by each guide for the later calls on these shapes
    h_update, h_elbo = h.compiled(("_sweeps", "update"), h.update), h.compiled(("_sweeps", "elbo"), h.elbo)
    update, elbo = g.compiled(("_sweeps", "update"), g.update), g.compiled(("_sweeps", "elbo"), g.elbo)
    for _ in range(n):
        sh, sd = h_update(sh, dh), update(sd, dd)
        compare(sh, sd, float(h_elbo(sh, dh)), float(elbo(sd, dd)))


def _close(a, b, rtol=1e-10):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=rtol * float(np.max(np.abs(b))))


@pytest.mark.parametrize("seed,groups", [(0, False), (1, False), (2, True)])
def test_rvm_regression_derived_equals_hand_written_after_every_sweep(seed, groups):
    rng = np.random.default_rng(seed)
    N, M = 50, 9
    Phi = rng.normal(size=(N, M))
    t = Phi[:, :3] @ rng.normal(size=3) + 0.3 * rng.normal(size=N)
    kwargs = {"groups": np.repeat(np.arange(3), 3)} if groups else {}

    def compare(sh, sd, eh, ed):
        assert ed == pytest.approx(eh, rel=1e-10)
        _close(sd.mean["w"], sh.w.mean)
        _close(sd.rate["alpha"], sh.alpha_rate)
        _close(sd.shape["alpha"], sh.alpha_shape)
        _close(sd.rate["gamma"][0], sh.gamma_rate)

    _sweeps(rvm.regression, (Phi, t), kwargs, 25, compare)


def test_p_grid_classification_and_three_axis_regression_derived_equal_hand_written():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(50, 3, 4))
    labels = (X[:, 0, 1] - X[:, 2, 3] + 0.3 * rng.normal(size=50) > 0).astype(float)

    def compare(sh, sd, eh, ed):
        assert ed == pytest.approx(eh, rel=1e-10)
        _close(sd.mean["w"], sh.w.mean)

    _sweeps(grid_rvm.classification, (X, labels), {}, 10, compare)
    X3 = rng.normal(size=(40, 2, 3, 2))
    t3 = X3[:, 0, 1, 0] + 0.2 * rng.normal(size=40)
    _sweeps(grid_rvm.regression, (X3, t3), {"axis_priors": [(1e-6, 1e-6)] * 3}, 10, compare)


@pytest.mark.parametrize("model", [grid_rvm.regression, grid_rvm.classification], ids=["regression", "classification"])
def test_s_grid_log_sum_bound_derived_equals_hand_written(model):
    """The stretch: a precision that is a sum of Gamma variables, through the log-sum bound."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 4, 3))
    t = X[:, 0, 0] - X[:, 1, 2] + 0.2 * rng.normal(size=40)
    target = t if model is grid_rvm.regression else (t > 0).astype(float)
    h = resolve_guide(model.closed_form_guide, (X, target), {"kind": "s"})
    g = derived_guide(model, X, target, kind="s")
    assert g.bound == h.bound
    dh, dd = h.prepare(X, target, kind="s"), g.prepare(X, target, kind="s")
    sh, sd = h.init(dh), g.init(dd)
    hu, he, hx = jax.jit(h.update), jax.jit(h.elbo), jax.jit(h.elbo_exact)
    gu, ge, gx = jax.jit(g.update), jax.jit(g.elbo), jax.jit(g.elbo_exact)
    for _ in range(10):
        sh, sd = hu(sh, dh), gu(sd, dd)
        assert float(ge(sd, dd)) == pytest.approx(float(he(sh, dh)), rel=1e-10)
        assert float(gx(sd, dd)) == pytest.approx(float(hx(sh, dh)), rel=1e-10)
        _close(sd.mean["w"], sh.w.mean)
    assert float(ge(sd, dd)) <= float(gx(sd, dd))
    # the ELBO's parts: exact expectations (no log-sum bound), summing to elbo_exact
    parts = g.elbo_parts(sd, dd)
    assert float(sum(parts.values())) == pytest.approx(float(gx(sd, dd)), rel=1e-10)


def test_p_grid_regression_derived_equals_hand_written_after_every_sweep():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 4, 3))
    t = X[:, 0, 0] - X[:, 1, 2] + 0.2 * rng.normal(size=40)

    def compare(sh, sd, eh, ed):
        assert ed == pytest.approx(eh, rel=1e-10)
        _close(sd.mean["w"], sh.w.mean)
        _close(sd.rate["gamma"][0], sh.gamma_rate)

    _sweeps(grid_rvm.regression, (X, t), {}, 15, compare)


def _labels(seed, N=50, M=8):
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(N, M))
    t = (Phi[:, 0] - Phi[:, 1] + 0.5 * rng.normal(size=N) > 0).astype(float)
    t[:3] = 1.0 - t[:3]  # a few flipped labels for the robust model to down-weight
    return Phi, t


@pytest.mark.parametrize("model", [rvm.classification, robust_rvm.classification], ids=["rvm", "robust_rvm"])
def test_jaakkola_jordan_classification_derived_equals_hand_written(model):
    Phi, t = _labels(5)
    h = resolve_guide(model.closed_form_guide, (Phi, t), {})

    def compare(sh, sd, eh, ed):
        assert ed == pytest.approx(eh, rel=1e-10)
        _close(sd.mean["w"], sh.w.mean)
        _close(sd.xi["t"], sh.xi)
        _close(sd.rate["alpha"], sh.alpha_rate)
        if model is robust_rvm.classification:
            _close(sd.rate["omega"], sh.omega_rate)

    _sweeps(model, (Phi, t), {}, 12, compare)
    g = derived_guide(model, Phi, t)
    assert g.bound == h.bound == "jaakkola-jordan"


def test_robust_regression_derived_equals_hand_written():
    Phi, t = _outlier_problem(2)

    def compare(sh, sd, eh, ed):
        assert ed == pytest.approx(eh, rel=1e-10)
        _close(sd.mean["w"], sh.w.mean)
        _close(sd.rate["omega"], sh.omega_rate)
        _close(sd.rate["gamma"][0], sh.gamma_rate)

    _sweeps(robust_rvm.regression, (Phi, t), {}, 15, compare)


def test_derived_classification_bound_lies_below_monte_carlo():
    Phi, t = _labels(6, N=40, M=4)
    res = ppl_sbl.CAVI(robust_rvm.classification, guide="derived", tol=1e-10, max_sweeps=300).run(Phi, t, a0=1.0,
                                                                                                   b0=1.0)
    assert res.elbo <= res.elbo_exact
    check = ppl_sbl.check_guide(res, num_particles=4000)
    assert check.passed, check.message
    parts = res.elbo_parts()  # exact terms plus local_bound = elbo - elbo_exact: they sum to elbo
    assert parts["local_bound"] == pytest.approx(res.elbo - res.elbo_exact, rel=1e-12)
    assert math.fsum(parts.values()) == pytest.approx(res.elbo, rel=1e-10)


def _outlier_problem(seed=0, N=40, M=5):
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(N, M))
    t = Phi @ np.array([1.0, -1.0, 0.5, 0.0, 0.0]) + 0.2 * rng.normal(size=N)
    t[:3] += 6.0  # outliers
    return Phi, t


def test_edited_model_without_a_guide_gets_the_derived_one_and_the_elbo_never_decreases():
    Phi, t = _outlier_problem()
    res = ppl_sbl.CAVI(student_t_rvm, tol=1e-12, max_sweeps=300).run(Phi, t)
    trace = res.elbo_trace
    assert len(trace) > 5
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:]))
    # the outliers get the smallest expected precision scales
    lam = np.asarray(res.state.shape["lam"] / res.state.rate["lam"])
    assert set(np.argsort(lam)[:3]) == {0, 1, 2}


def test_edited_model_elbo_equals_numpyro_monte_carlo():
    Phi, t = _outlier_problem(1)
    res = ppl_sbl.CAVI(student_t_rvm, tol=1e-10, max_sweeps=200).run(Phi, t)
    check = ppl_sbl.check_guide(res, num_particles=4000)
    assert check.passed, check.message
    # the ELBO's parts, one -kl_ per latent site and the Gamma priors' normalisers, sum to it
    parts = res.elbo_parts()
    assert list(parts) == ["log_lik", "-kl_w", "-kl_alpha", "log_norm_alpha", "-kl_gamma", "log_norm_gamma",
                           "-kl_lam", "log_norm_lam"]
    assert math.fsum(parts.values()) == pytest.approx(res.elbo, rel=1e-10)


def test_derived_result_exports_to_arviz_and_ranks_with_compare():
    Phi, t = _outlier_problem(3)
    res = ppl_sbl.CAVI(student_t_rvm, tol=1e-10, max_sweeps=200).run(Phi, t)
    idata = ppl_sbl.to_inference_data(res, num_samples=200)
    np.testing.assert_array_equal(idata.observed_data["t"].values, t)
    assert idata.posterior["w"].shape == (1, 200, Phi.shape[1])
    assert idata.log_likelihood["t"].shape == (1, 200, len(t))
    plain = ppl_sbl.CAVI(rvm.regression, guide="derived", tol=1e-10, max_sweeps=200).run(Phi, t, a0=1.0, b0=1e-2,
                                                                                         e0=2.0, f0=0.5)
    table = ppl_sbl.compare({"student-t": res, "gaussian": plain})
    assert table.index[0] == "student-t"  # the data have gross outliers


def test_cavi_with_guide_derived_matches_the_attached_guide():
    rng = np.random.default_rng(4)
    Phi = rng.normal(size=(40, 5))  # the shape of the fits in test_derived_predictions_equal_the_hand_written_ones
    t = Phi[:, 0] + 0.1 * rng.normal(size=40)
    hand = ppl_sbl.CAVI(rvm.regression, prune=False, max_sweeps=40, tol=1e-14, schedule="sweep").run(Phi, t)
    derived = ppl_sbl.CAVI(rvm.regression, guide="derived", max_sweeps=40, tol=1e-14, schedule="sweep").run(Phi, t)
    np.testing.assert_allclose(derived.elbo_trace, hand.elbo_trace, rtol=1e-10)


def group_ard_rvm(Phi, t=None, *, groups):
    """One precision per group of basis functions."""
    G = int(np.max(groups)) + 1
    alpha = numpyro.sample("alpha", dist.Gamma(2.0, 1.0).expand([G]).to_event(1))
    w = numpyro.sample("w", dist.Normal(0.0, jax.lax.rsqrt(alpha[groups])).to_event(1))
    gamma = numpyro.sample("gamma", dist.Gamma(2.0, 0.5))
    numpyro.sample("t", dist.Normal(Phi @ w, jax.lax.rsqrt(gamma)), obs=t)


def table_rvm(X, t=None):
    """A three-axis table of features: the weight of cell (i, j, k) has precision a_i b_j c_k."""
    N, I, J, K = X.shape
    a = numpyro.sample("a", dist.Gamma(2.0, 1.0).expand([I]).to_event(1))
    b = numpyro.sample("b", dist.Gamma(2.0, 1.0).expand([J]).to_event(1))
    c = numpyro.sample("c", dist.Gamma(2.0, 1.0).expand([K]).to_event(1))
    precision = (a[:, None, None] * b[None, :, None] * c[None, None, :]).reshape(-1)
    w = numpyro.sample("w", dist.Normal(0.0, jax.lax.rsqrt(precision)).to_event(1))
    gamma = numpyro.sample("gamma", dist.Gamma(2.0, 0.5))
    numpyro.sample("t", dist.Normal(X.reshape(N, -1) @ w, jax.lax.rsqrt(gamma)), obs=t)


def _edited_problems():
    rng = np.random.default_rng(7)
    Phi = rng.normal(size=(30, 6))
    t = Phi @ np.array([1.5, -1.0, 0.0, 0.0, 0.5, 0.0]) + 0.4 * rng.normal(size=30)
    X = rng.normal(size=(30, 2, 2, 2))
    u = X.reshape(30, -1) @ np.array([1.0, -0.5, 0.0, 0.0, 0.8, 0.0, 0.0, 0.0]) + 0.4 * rng.normal(size=30)
    Phi_t, t_t = _outlier_problem(8)  # the shape of the other fits of student_t_rvm in this file
    return {"group_ard": (group_ard_rvm, (Phi, t), {"groups": np.array([0, 0, 1, 1, 2, 2])}),
            "student_t": (student_t_rvm, (Phi_t, t_t), {}),
            "table": (table_rvm, (X, u), {})}


@pytest.mark.parametrize("name", ["group_ard", "student_t", "table"])
def test_edited_models_elbo_monotone_exact_and_close_to_nuts(name):
    from numpyro.infer import MCMC, NUTS

    model, args, kwargs = _edited_problems()[name]
    res = ppl_sbl.CAVI(model, tol=1e-12, max_sweeps=2000).run(*args, **kwargs)
    trace = res.elbo_trace
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:]))
    check = ppl_sbl.check_guide(res, num_particles=4000)
    assert check.passed, check.message
    mcmc = MCMC(NUTS(model), num_warmup=250, num_samples=500, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), *args, **kwargs)
    w = np.asarray(mcmc.get_samples()["w"])
    # mean field gets the posterior means of the weights to well within their posterior spread (the
    # Monte Carlo error of NUTS's means, about 0.05 sd with 500 draws, is a tenth of the bound)
    z = np.abs(np.asarray(res.state.mean["w"]) - w.mean(0)) / w.std(0)
    assert np.max(z) < 0.5, z


def test_derived_predictions_equal_the_hand_written_ones():
    rng = np.random.default_rng(9)
    Phi, Phi_new = rng.normal(size=(40, 5)), rng.normal(size=(7, 5))
    t = Phi @ np.array([1.0, 0.0, -1.0, 0.5, 0.0]) + 0.2 * rng.normal(size=40)
    labels = (t > 0).astype(float)
    for model, target in ((rvm.regression, t), (rvm.classification, labels)):
        hand = ppl_sbl.CAVI(model, prune=False, tol=1e-14, max_sweeps=30, schedule="sweep").run(Phi, target)
        derived = ppl_sbl.CAVI(model, guide="derived", tol=1e-14, max_sweeps=30, schedule="sweep").run(Phi, target)
        for a, b in zip(jax.tree.leaves(derived.predict(Phi_new)), jax.tree.leaves(hand.predict(Phi_new))):
            np.testing.assert_allclose(a, b, rtol=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_derived_elbo_never_decreases_on_random_problems(seed):
    rng = np.random.default_rng(100 + seed)
    N, M = 40, 6  # one shape: each model's sweep compiles once for all seeds
    Phi = rng.normal(size=(N, M)) * rng.uniform(0.2, 3.0, M)
    t = Phi @ (rng.normal(size=M) * (rng.random(M) < 0.5)) + rng.uniform(0.05, 1.0) * rng.standard_t(3, N)
    for model, target, kw in ((rvm.regression, t, {}), (student_t_rvm, t, {}),
                              (robust_rvm.classification, (t > np.median(t)).astype(float), {}),
                              (grid_rvm.regression, t, {"kind": "s"})):
        args = (Phi.reshape(N, 2, M // 2),) if kw else (Phi,)
        res = ppl_sbl.CAVI(model, guide="derived", tol=1e-300, max_sweeps=80).run(*args, target, **kw)
        trace = res.elbo_trace
        assert np.all(np.diff(trace) >= -1e-10 * np.abs(trace[1:])), (model.__name__, np.min(np.diff(trace)))


def laplace_prior(Phi, t=None):
    w = numpyro.sample("w", dist.Laplace(0.0, 1.0).expand([Phi.shape[1]]).to_event(1))
    numpyro.sample("t", dist.Normal(Phi @ w, 1.0), obs=t)


def nonlinear_mean(Phi, t=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([Phi.shape[1]]).to_event(1))
    numpyro.sample("t", dist.Normal(jnp.tanh(Phi @ w), 1.0), obs=t)


def gaussian_in_precision(Phi, t=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([Phi.shape[1]]).to_event(1))
    s = numpyro.sample("s", dist.Normal(0.0, 1.0))
    numpyro.sample("t", dist.Normal(Phi @ w, jnp.exp(s)), obs=t)


def squared_precision(Phi, t=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([Phi.shape[1]]).to_event(1))
    g = numpyro.sample("g", dist.Gamma(1.0, 1.0))
    numpyro.sample("t", dist.Normal(Phi @ w, 1.0 / g), obs=t)


@pytest.mark.parametrize("model,site,what", [
    (laplace_prior, "w", "Laplace"),
    (nonlinear_mean, "t", "not affine"),
    (gaussian_in_precision, "t", "depends on a Gaussian"),
    (squared_precision, "t", "power other than 1"),
])
def test_models_outside_the_vocabulary_raise_a_named_error(model, site, what):
    Phi = np.random.default_rng(0).normal(size=(10, 3))
    t = np.zeros(10)
    with pytest.raises(NotConjugateError, match=f"site '{site}'.*{what}.*SVI"):
        ppl_sbl.CAVI(model).run(Phi, t)


def student_t_rvm_in_numpy(Phi, t=None, *, nu=4.0):
    """``student_t_rvm`` with its design turned into a NumPy array: it cannot trace under jax.jit."""
    student_t_rvm(np.asarray(Phi, dtype=np.float64), t, nu=nu)


def test_a_model_that_needs_concrete_values_is_analysed_op_by_op_to_the_same_fit():
    Phi, t = _outlier_problem(seed=3)
    with pytest.raises(jax.errors.TracerArrayConversionError):
        jax.jit(lambda P: student_t_rvm_in_numpy(P, t))(Phi)
    compiled = ppl_sbl.CAVI(student_t_rvm, guide="derived", tol=1e-300, max_sweeps=30).run(Phi, t)
    eager = ppl_sbl.CAVI(student_t_rvm_in_numpy, guide="derived", tol=1e-300, max_sweeps=30).run(Phi, t)
    np.testing.assert_allclose(eager.elbo_trace, compiled.elbo_trace, rtol=1e-10)
    for a, b in zip(eager.predict(Phi[:7]), compiled.predict(Phi[:7])):
        np.testing.assert_allclose(a, b, rtol=1e-10)


_POINT_SHAPE = {"value": 1.5}  # a prior parameter a model below reads from outside its arguments


def _student_t_reading(shape):
    """ARD regression with Student-t noise whose per-point precisions have the prior
    Gamma(shape(), shape()): ``shape`` is called when the model runs."""
    def model(Phi, t=None):
        N, M = Phi.shape
        alpha = numpyro.sample("alpha", dist.Gamma(1e-6, 1e-6).expand([M]).to_event(1))
        w = numpyro.sample("w", dist.Normal(0.0, jax.lax.rsqrt(alpha)).to_event(1))
        gamma = numpyro.sample("gamma", dist.Gamma(1e-6, 1e-6))
        with numpyro.plate("data", N):
            lam = numpyro.sample("lam", dist.Gamma(shape(), shape()))
            numpyro.sample("t", dist.Normal(Phi @ w, jax.lax.rsqrt(gamma * lam)), obs=t)
    return model


def test_a_changed_global_prior_parameter_is_seen_by_the_next_fit():
    """The derived guide and its compiled programs are kept per model, but a number the model reads
    from a global is part of the model: after it changes, a fit (and its predictions) equals the fit
    of a model written with the new number, not the kept one's."""
    rng = np.random.default_rng(3)
    Phi = rng.normal(size=(40, 6))
    t = Phi[:, 0] + 0.3 * rng.standard_t(3, size=40)
    reading = _student_t_reading(lambda: _POINT_SHAPE["value"])
    try:
        for shape in (1.5, 4.0, 1.5):
            _POINT_SHAPE["value"] = shape
            kept = ppl_sbl.CAVI(reading, progress_bar=False).run(Phi, t)
            fresh = ppl_sbl.CAVI(_student_t_reading(lambda: shape), progress_bar=False).run(Phi, t)
            assert kept.elbo == pytest.approx(fresh.elbo, rel=1e-12, abs=1e-12)
            np.testing.assert_allclose(np.asarray(kept.predict(Phi[:5])[1]), np.asarray(fresh.predict(Phi[:5])[1]),
                                       rtol=1e-10)
        assert abs(ppl_sbl.CAVI(_student_t_reading(lambda: 4.0), progress_bar=False).run(Phi, t).elbo - kept.elbo) > 1e-3
    finally:
        _POINT_SHAPE["value"] = 1.5
