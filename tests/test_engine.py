"""The CAVI engine in layers: ``init``/``step`` are the sweeps ``run`` and ``fit`` make; each
guide keeps its own compiled functions."""
import copy
import dataclasses
import warnings

import numpy as np
import pytest

import ppl_sbl
from ppl_sbl import basis, datasets, engine
from ppl_sbl.models import rvm


@pytest.fixture(scope="module")
def problem():
    d = datasets.sinc(50, noise=0.1, seed=3)
    return basis.rbf(d.X_train, delta=1.0, bias=True), d.t_train


def test_init_and_step_make_the_sweeps_of_run(problem):
    Phi, t = problem
    cavi = ppl_sbl.CAVI(rvm.regression, prune=False, max_sweeps=12, progress_bar=False, schedule="sweep")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ppl_sbl.ConvergenceWarning)
        result = cavi.run(Phi, t)
    state, data = cavi.init(Phi, t)
    values = []
    for _ in range(12):
        state, value = cavi.step(state, data)
        values.append(float(value))
    np.testing.assert_allclose(values, result.elbo_trace, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(state.w.mean), np.asarray(result.state.w.mean), rtol=1e-10, atol=1e-12)
    assert np.all(np.diff(values) >= -1e-9 * np.abs(values[1:]))


def test_fit_reaches_the_fixed_point_that_run_reaches_without_pruning(problem):
    Phi, t = problem
    result = ppl_sbl.CAVI(rvm.regression, prune=False, progress_bar=False, schedule="sweep").run(Phi, t)
    cavi = ppl_sbl.CAVI(rvm.regression, schedule="sweep")
    _, data = cavi.init(Phi, t)
    state, elbo, sweeps, converged = engine.fit(rvm.REGRESSION_GUIDE, data)
    assert bool(converged) and result.converged
    assert int(sweeps) == result.num_sweeps
    assert float(elbo) == pytest.approx(result.elbo, rel=1e-12)


def test_step_needs_init_first():
    with pytest.raises(RuntimeError, match="init"):
        ppl_sbl.CAVI(rvm.regression).step(None, None)


def test_a_guide_keeps_its_compiled_functions(problem):
    g = rvm.REGRESSION_GUIDE
    assert engine.compiled_step(g) is engine.compiled_step(g)
    other = g.replace(bound="none")
    assert other.update is g.update and engine.compiled_step(other) is not engine.compiled_step(g)
    # what is stored of a guide (pickling, ppl_sbl.save) is its functions, not what it compiled
    assert set(g.__getstate__()) == {f.name for f in dataclasses.fields(g)}
    back = copy.copy(g)
    assert back.update is g.update and back.prepare is g.prepare
    Phi, t = problem
    cavi = ppl_sbl.CAVI(rvm.regression, schedule="sweep")
    state, data = cavi.init(Phi, t)
    np.testing.assert_allclose(float(engine.compiled_step(back)(state, data)[1]),
                               float(cavi.step(state, data)[1]), rtol=1e-13)


def test_array_inputs_rebuild_the_call_and_key_it_by_everything_but_the_arrays_and_numbers():
    a, b = np.arange(6.0).reshape(2, 3), np.ones(4)
    call = ((a, 2.5), {"t": b, "kind": "s", "none": None, "n": 3, "flag": True, "rate": np.float64(0.25)})
    arrays, rebuild, static = engine.array_inputs(*call)
    # the arrays and the floating-point numbers are inputs; strings, integers, booleans and None are not
    assert len(arrays) == 4 and arrays[0] is a and arrays[1] == 2.5 and arrays[2] == 0.25 and arrays[3] is b
    args, kwargs = rebuild([a + 1, 7.5, 0.5, b * 3])
    np.testing.assert_array_equal(args[0], a + 1)
    assert args[1] == 7.5 and kwargs["rate"] == 0.5 and kwargs["kind"] == "s" and kwargs["none"] is None
    assert kwargs["n"] == 3 and kwargs["flag"] is True
    np.testing.assert_array_equal(kwargs["t"], b * 3)
    # the key: the same for other values of the arrays and numbers, another for any other argument
    assert engine.array_inputs((a * 7, 9.0), {**call[1], "rate": np.float64(3.0)})[2] == static
    assert engine.array_inputs((a, 2.5), {**call[1], "kind": "p"})[2] != static
    assert engine.array_inputs((a, 2.5), {**call[1], "n": 4})[2] != static
    assert engine.array_inputs((a, 2.5), {**call[1], "flag": False})[2] != static
    # without ``numbers`` the numbers are part of the key, as constants of the program
    arrays, rebuild, static = engine.array_inputs(*call, numbers=False)
    assert len(arrays) == 2 and arrays[0] is a and arrays[1] is b
    assert rebuild([a, b])[0][1] == 2.5
    assert engine.array_inputs((a * 7, 2.5), call[1], numbers=False)[2] == static
    assert engine.array_inputs((a, 3.5), call[1], numbers=False)[2] != static
    assert engine.array_inputs(([1, 2],), {"opt": {"x": [3]}})[2] is not None  # lists flatten to leaves
    assert engine.array_inputs((a,), {"opt": {1, 2}})[2] is None  # an unhashable leaf: no key


def test_compiled_draws_and_log_likelihood_equal_numpyro_run_op_by_op(problem):
    import jax
    from numpyro.infer import Predictive, log_likelihood

    Phi, t = problem
    res = ppl_sbl.CAVI(rvm.regression, progress_bar=False, schedule="sweep").run(Phi, t)
    key = jax.random.PRNGKey(3)
    draws = res.sample(key, 50)
    again = res.sample(key, 50)  # the kept program
    expected = Predictive(res.guide, num_samples=50)(key, Phi, t)
    for name, value in expected.items():
        np.testing.assert_allclose(draws[name], value, rtol=1e-9, atol=1e-12)
        np.testing.assert_array_equal(again[name], draws[name])
    pointwise = res.log_likelihood(draws)
    for name, value in log_likelihood(rvm.regression, draws, Phi, t).items():
        np.testing.assert_allclose(pointwise[name], value, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ["rvm", "robust_rvm"])
def test_observed_read_in_one_program_equals_a_trace_with_draws_from_the_guide(problem, name):
    from numpyro import handlers

    from ppl_sbl.models import robust_rvm

    model = {"rvm": rvm.regression, "robust_rvm": robust_rvm.regression}[name]
    Phi, t = problem
    res = ppl_sbl.CAVI(model, progress_bar=False, schedule="sweep").run(Phi, t)
    draw = handlers.trace(handlers.seed(res.guide, rng_seed=1)).get_trace(Phi, t)
    latent = {k: site["value"] for k, site in draw.items() if site["type"] == "sample"}
    trace = handlers.trace(handlers.substitute(handlers.seed(model, rng_seed=1), data=latent)).get_trace(Phi, t)
    expected = {k: site["value"] for k, site in trace.items() if site["type"] == "sample" and site["is_observed"]}
    observed = res.observed
    assert list(observed) == list(expected) == ["t"]
    np.testing.assert_array_equal(observed["t"], np.asarray(expected["t"]))
    np.testing.assert_array_equal(observed["t"], t)


def test_kept_monte_carlo_elbo_equals_numpyro_trace_elbo_on_the_built_guide(problem):
    from ppl_sbl.diagnostics import monte_carlo_elbo

    Phi, t = problem
    res = ppl_sbl.CAVI(rvm.regression, progress_bar=False, schedule="sweep").run(Phi, t)
    kept = res.monte_carlo_elbo(num_particles=300, seed=4)
    generic = monte_carlo_elbo(rvm.regression, res.guide, Phi, t, num_particles=300, seed=4)
    np.testing.assert_allclose(kept, generic, rtol=1e-10)
    assert res.check_guide(num_particles=300, seed=4).monte_carlo == float(np.mean(kept))
