"""CAVI's default schedule, "auto": the fast variational schedule (``ppl_sbl.fast_ard``) where the
resolved guide has one and it takes the call, the sweep everywhere else. Each fit under the default
is checked against the same fit with its schedule named (and, for the fast schedule, against
``fast_ard.schedule`` called directly)."""
import jax.numpy as jnp
import numpy as np
import pytest

import ppl_sbl
from ppl_sbl import engine, fast_ard
from ppl_sbl.models import grid_rvm, robust_rvm, rvm

from problems import assert_same_tree, random_classification, random_regression, student_t_rvm


def _labels3(seed=0, N=36):
    """Three overlapping clusters in the plane, design [1, x1, x2, x1 x2, x1^2]; every class present."""
    r = np.random.default_rng(seed)
    t = np.concatenate([np.arange(3), r.integers(0, 3, N - 3)])
    angles = 2 * np.pi * np.arange(3) / 3
    X = 1.3 * np.column_stack([np.cos(angles), np.sin(angles)])[t] + r.standard_normal((N, 2))
    return np.column_stack([np.ones(N), X, X[:, 0] * X[:, 1], X[:, 0] ** 2]), t


def _robust_classification_problem():
    Phi, t = random_classification(1, N=40, M=6)
    t = t.copy()
    t[:2] = 1.0 - t[:2]
    return Phi, t


def _robust_regression_problem():
    Phi, t = random_regression(1, N=30, M=8, noise=0.1)
    t = t.copy()
    t[4] += 10.0
    return Phi, t


ARD_MODELS = {
    "rvm.regression": (rvm.regression, lambda: random_regression(0, N=30, M=8)),
    "rvm.classification": (rvm.classification, lambda: random_classification(0, N=40, M=6)),
    "rvm.multiclass": (rvm.multiclass, _labels3),
    "robust_rvm.classification": (robust_rvm.classification, _robust_classification_problem),
    "robust_rvm.regression": (robust_rvm.regression, _robust_regression_problem),
}




def _same_fit(a, b):
    """Two results of the same computation: identical traces, states, data and flags."""
    assert a.schedule == b.schedule
    np.testing.assert_array_equal(a.elbo_trace, b.elbo_trace)
    assert_same_tree(a.state, b.state)
    assert_same_tree(a.data, b.data)
    assert a.converged == b.converged and a.num_moves == b.num_moves
    assert a.prune_events == b.prune_events
    np.testing.assert_array_equal(a.relevant, b.relevant)


@pytest.mark.parametrize("name", list(ARD_MODELS))
def test_the_default_runs_the_fast_schedule_for_every_ard_model(name):
    model, problem = ARD_MODELS[name]
    Phi, t = problem()
    assert ppl_sbl.CAVI(model).schedule == "auto"
    default = ppl_sbl.CAVI(model, progress_bar=False).run(Phi, t)
    fast = ppl_sbl.CAVI(model, schedule="fast", progress_bar=False).run(Phi, t)
    assert default.schedule == "fast" and default.num_moves > 0
    _same_fit(default, fast)


def test_the_default_fit_is_the_schedule_called_directly():
    """An answer that does not go through CAVI: ``fast_ard.schedule`` on q(gamma) of the RVM with
    CAVI's tolerance and pass limit gives the same trace and relevant set, with the documented
    default rates (b0_k = a0 var(t) / mean phi_k^2, f0 = e0 var(t)) computed here and the targets
    left in their units (CAVI's fit divides them by std(t): the same arithmetic up to rounding)."""
    Phi, t = random_regression(0, N=30, M=8)
    res = ppl_sbl.CAVI(rvm.regression, progress_bar=False).run(Phi, t)
    b0 = 1e-6 * np.var(t) / np.mean(Phi**2, axis=0)
    fit = fast_ard.schedule(Phi, fast_ard.GaussianNoise(t, 1e-6, 1e-6 * np.var(t)), a0=1e-6, b0=b0, tol=engine.TOL,
                            max_passes=engine.MAX_SWEEPS)
    np.testing.assert_allclose(res.elbo_trace, fit.elbo_trace, rtol=1e-10)
    np.testing.assert_array_equal(res.relevance_indices, np.sort(fit.active[fit.supported]))
    assert res.num_moves == fit.num_moves and res.converged == fit.converged
    # explicit rates are used as given: the schedule on the absolute prior, bit for bit
    res = ppl_sbl.CAVI(rvm.regression, progress_bar=False).run(Phi, t, b0=1e-6, f0=1e-6)
    fit = fast_ard.schedule(Phi, fast_ard.GaussianNoise(t, 1e-6, 1e-6), a0=1e-6, b0=1e-6, tol=engine.TOL,
                            max_passes=engine.MAX_SWEEPS)
    np.testing.assert_array_equal(res.elbo_trace, fit.elbo_trace)
    assert res.num_moves == fit.num_moves




def test_models_without_a_fast_schedule_run_the_sweep():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3, 2))
    t = X[:, 0, 1] - X[:, 2, 0] + 0.1 * rng.normal(size=30)
    model, args, kwargs = grid_rvm.regression, (X, t), {"kind": "s"}
    common = dict(progress_bar=False, max_sweeps=200, tol=1e-8)
    cavi = ppl_sbl.CAVI(model, **common)
    default = cavi.run(*args, **kwargs)
    assert default.schedule == "sweep" and default.num_moves is None
    assert cavi.resolved_guide is not None and cavi.resolved_guide.fast is None  # the sweep's guide was selected
    _same_fit(default, ppl_sbl.CAVI(model, schedule="sweep", **common).run(*args, **kwargs))
    with pytest.raises(ValueError, match="no fast schedule"):
        ppl_sbl.CAVI(model, schedule="fast", **common).run(*args, **kwargs)


@pytest.mark.parametrize("case", ["derived model, proper prior", "rvm guide='derived'"])
def test_derived_guides_take_the_fast_schedule_where_the_prior_is_vague(case):
    """A derived guide with an ARD vector has the fast schedule (:mod:`ppl_sbl.derived.fast`):
    ``auto`` runs it under a vague prior, the sweep under a proper one (as for the shipped RVMs)."""
    if case == "rvm guide='derived'":
        model, options, vague = rvm.regression, {"guide": "derived"}, True
    else:
        model, options, vague = student_t_rvm, {}, False  # alpha ~ Gamma(1, 1e-2)
    args = random_regression(2, N=30, M=5)
    common = dict(progress_bar=False, max_sweeps=200, tol=1e-8, **options)
    default = ppl_sbl.CAVI(model, **common).run(*args)
    fast = ppl_sbl.CAVI(model, schedule="fast", **common).run(*args)
    assert fast.schedule == "fast" and fast.num_moves > 0
    if vague:
        assert default.schedule == "fast"
        _same_fit(default, fast)
    else:
        assert default.schedule == "sweep" and default.num_moves is None
        _same_fit(default, ppl_sbl.CAVI(model, schedule="sweep", **common).run(*args))


@pytest.mark.parametrize("name", ["rvm.regression", "rvm.classification"])
def test_groups_run_the_group_schedule_by_default(name):
    model, problem = ARD_MODELS[name]
    Phi, t = problem()
    groups = np.arange(Phi.shape[1]) // 2
    default = ppl_sbl.CAVI(model, progress_bar=False).run(Phi, t, groups=groups)
    assert default.schedule == "fast" and default.num_moves > 0
    fast = ppl_sbl.CAVI(model, schedule="fast", progress_bar=False).run(Phi, t, groups=groups)
    assert fast.elbo == default.elbo
    # q(alpha) has one factor per group, and the relevant coefficients fill whole groups
    assert np.asarray(default.state.alpha_rate).shape == (groups.max() + 1,)
    relevant = np.asarray(default.relevant)
    assert all(relevant[groups == g].all() or not relevant[groups == g].any() for g in np.unique(groups))
    sweep = ppl_sbl.CAVI(model, schedule="sweep", progress_bar=False).run(Phi, t, groups=groups)
    assert default.elbo <= sweep.elbo + 1e-8 * abs(sweep.elbo)
    # the shared precision of Bayesian ridge regression, as the ppl-sbl command fits it
    ridge = ppl_sbl.CAVI(model, progress_bar=False).run(Phi, t, groups=np.zeros(Phi.shape[1], int))
    assert ridge.schedule == "fast" and np.asarray(ridge.state.alpha_rate).shape == (1,)
    with pytest.raises(ValueError, match="`t` is required"):
        ppl_sbl.CAVI(model, progress_bar=False).run(Phi, None, groups=groups)


def test_not_applicable_is_exported_and_only_it_falls_back():
    assert "NotApplicable" in fast_ard.__all__ and issubclass(fast_ard.NotApplicable, ValueError)
    Phi, t = random_regression(0, N=30, M=8)

    def refuses(*args, **kwargs):
        raise fast_ard.NotApplicable("not this call")

    def fails(*args, **kwargs):
        raise ValueError("a plain error of the fast path")

    sweep = ppl_sbl.CAVI(rvm.regression, schedule="sweep", progress_bar=False).run(Phi, t)
    refusing = rvm.REGRESSION_GUIDE.replace(fast=refuses)
    _same_fit(ppl_sbl.CAVI(rvm.regression, guide=refusing, progress_bar=False).run(Phi, t), sweep)
    with pytest.raises(fast_ard.NotApplicable, match="not this call"):
        ppl_sbl.CAVI(rvm.regression, guide=refusing, schedule="fast").run(Phi, t)
    with pytest.raises(ValueError, match="a plain error of the fast path"):
        ppl_sbl.CAVI(rvm.regression, guide=rvm.REGRESSION_GUIDE.replace(fast=fails)).run(Phi, t)


def test_init_state_and_prune_false_run_the_sweep():
    Phi, t = random_regression(0, N=30, M=8)
    start, _ = ppl_sbl.CAVI(rvm.regression, schedule="sweep").init(Phi, t)
    start = start._replace(gamma_rate=start.gamma_rate * jnp.asarray(3.0))  # not the default start
    default = ppl_sbl.CAVI(rvm.regression, progress_bar=False).run(Phi, t, init_state=start)
    assert default.schedule == "sweep"
    _same_fit(default, ppl_sbl.CAVI(rvm.regression, schedule="sweep", progress_bar=False).run(Phi, t,
                                                                                              init_state=start))
    with pytest.raises(ValueError, match="`init_state`"):
        ppl_sbl.CAVI(rvm.regression, schedule="fast").run(Phi, t, init_state=start)
    for schedule in ("auto", "fast"):
        unpruned = ppl_sbl.CAVI(rvm.regression, prune=False, schedule=schedule, progress_bar=False).run(Phi, t)
        assert unpruned.schedule == "sweep" and unpruned.prune_events == []
        _same_fit(unpruned, ppl_sbl.CAVI(rvm.regression, prune=False, schedule="sweep", progress_bar=False).run(Phi, t))


def test_init_and_step_are_the_sweeps_whatever_the_schedule():
    Phi, t = random_regression(0, N=30, M=8)
    values = {}
    for schedule in ("auto", "sweep"):
        cavi = ppl_sbl.CAVI(rvm.regression, schedule=schedule)
        state, data = cavi.init(Phi, t)
        values[schedule] = [float(cavi.step(state, data)[1])]
    assert values["auto"] == values["sweep"]


@pytest.mark.parametrize("bad", ["quick", "Fast", "", None])
def test_a_bad_schedule_is_named(bad):
    with pytest.raises(ValueError, match="`schedule` must be 'auto', 'sweep' or 'fast'"):
        ppl_sbl.CAVI(rvm.regression, schedule=bad)
