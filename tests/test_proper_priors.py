"""The ARD models under proper hyperpriors on their precisions (a0 >= ppl_sbl.priors.VAGUE_SHAPE)
and ``CAVIResult.refine()``.

The answer every check compares against is the sweep's own fixed point, ``CAVI(model,
schedule="sweep")`` (without pruning where the comparison is to ~1e-6): the ELBO's optimum with
every coefficient in the model, computed by a different algorithm (compiled sweeps of every
factor) from the one under test (the fast schedule's one-coefficient moves, or the sweep continued
from another fit's state)."""
import numpy as np
import pytest

import ppl_sbl
from ppl_sbl import fast_ard
from ppl_sbl.models import robust_rvm, rvm
from ppl_sbl.priors import VAGUE_SHAPE, is_vague

from problems import random_classification, random_regression

QUIET = dict(progress_bar=False)
PROPER = [1e-2, 1.0]  # a0 = b0, absolute rates (e0, f0 and the robust models' c0, d0 at their defaults)


def _problem(kind, seed):
    if kind == "regression":
        return random_regression(seed, N=40, M=12)
    return random_classification(seed, N=60, M=8)


MODELS = {"regression": rvm.regression, "classification": rvm.classification}


def test_vague_is_defined_by_the_shape_alone():
    assert VAGUE_SHAPE == 1e-3
    assert is_vague(0.0) and is_vague(1e-6) and is_vague(1e-5) and is_vague(np.float64(9.9e-4))
    assert not is_vague(VAGUE_SHAPE) and not is_vague(1e-2) and not is_vague(1.0)


@pytest.mark.parametrize("a0", PROPER)
@pytest.mark.parametrize("kind", ["regression", "classification"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_default_fit_is_within_half_a_percent_of_the_sweep_under_proper_priors(kind, seed, a0):
    """The default schedule runs the sweep under a proper prior (its ELBO then is the sweep's), and
    the fast schedule, where asked for, decides by the exact comparison and lands on the same
    optimum: both within 0.5% of the sweep's ELBO (the fast one on these small problems to 1e-6)."""
    model, (Phi, t) = MODELS[kind], _problem(kind, seed)
    hyper = dict(a0=a0, b0=a0)
    sweep = ppl_sbl.CAVI(model, schedule="sweep", **QUIET).run(Phi, t, **hyper)
    default = ppl_sbl.CAVI(model, **QUIET).run(Phi, t, **hyper)
    fast = ppl_sbl.CAVI(model, schedule="fast", **QUIET).run(Phi, t, **hyper)
    assert default.schedule == "sweep" and fast.schedule == "fast" and fast.converged
    for fit in (default, fast):
        assert abs(fit.elbo - sweep.elbo) <= 5e-3 * abs(sweep.elbo)
    assert fast.elbo == pytest.approx(sweep.elbo, rel=1e-6)
    # the exact comparison takes in the coefficients the data do not support too (the dense optimum)
    assert fast.num_active == Phi.shape[1] and fast.relevant.sum() < Phi.shape[1]


@pytest.mark.parametrize("name", ["robust_rvm.regression", "robust_rvm.classification"])
def test_the_robust_rvms_use_the_same_rule(name):
    """The robust RVMs run the same schedule: under a proper prior the default is the sweep and the
    fast schedule reaches the sweep's ELBO."""
    if name == "robust_rvm.regression":
        model, (Phi, t) = robust_rvm.regression, random_regression(1, N=30, M=8, noise=0.1)
    else:
        model, (Phi, t) = robust_rvm.classification, random_classification(1, N=40, M=6)
    hyper = dict(a0=1e-2, b0=1e-2)
    sweep = ppl_sbl.CAVI(model, schedule="sweep", **QUIET).run(Phi, t, **hyper)
    assert ppl_sbl.CAVI(model, **QUIET).run(Phi, t, **hyper).schedule == "sweep"
    fast = ppl_sbl.CAVI(model, schedule="fast", **QUIET).run(Phi, t, **hyper)
    assert fast.elbo == pytest.approx(sweep.elbo, rel=1e-6)
    # refine() from the fast state (its sweep updates q(w) first, then q(alpha), q(omega), ...)
    refined = fast.refine()
    _never_lowers(refined, fast)
    assert sweep.prune_events == [] and refined.elbo == pytest.approx(sweep.elbo, rel=1e-6)
    # the default shapes (1e-6; 1e-5 for the classifier) are vague: the default is the fast schedule
    assert ppl_sbl.CAVI(model, **QUIET).run(Phi, t).schedule == "fast"


def test_the_vague_default_keeps_the_sparse_rule():
    """At the default a0 = 1e-6 the default fit is the fast schedule with the rule of the limit
    a0 -> 0 (q^2 > s and the alignment test), bit for bit as ``fast_ard.schedule`` with
    ``entry="supported"`` runs it; the exact comparison would add more coefficients and end higher."""
    Phi, t = random_regression(3, N=40, M=12)
    default = ppl_sbl.CAVI(rvm.regression, **QUIET).run(Phi, t, b0=1e-6, f0=1e-6)
    assert default.schedule == "fast"
    tol, passes = default.tol, ppl_sbl.CAVI(rvm.regression).max_sweeps
    sparse = fast_ard.schedule(Phi, fast_ard.GaussianNoise(t, 1e-6, 1e-6), a0=1e-6, b0=1e-6, tol=tol,
                               max_passes=passes, entry="supported")
    np.testing.assert_array_equal(default.elbo_trace, sparse.elbo_trace)
    assert default.num_active == len(sparse.active) < Phi.shape[1]
    exact = fast_ard.schedule(Phi, fast_ard.GaussianNoise(t, 1e-6, 1e-6), a0=1e-6, b0=1e-6, tol=tol,
                              max_passes=passes, entry="exact")
    assert len(exact.active) > len(sparse.active) and exact.elbo > sparse.elbo
    # just below the threshold the prior is vague too; at it, not
    assert ppl_sbl.CAVI(rvm.regression, **QUIET).run(Phi, t, a0=1e-4).schedule == "fast"
    assert ppl_sbl.CAVI(rvm.regression, **QUIET).run(Phi, t, a0=VAGUE_SHAPE).schedule == "sweep"
    with pytest.raises(ValueError, match="`entry`"):
        fast_ard.schedule(Phi, fast_ard.GaussianNoise(t, 1e-6, 1e-6), entry="all")


def _never_lowers(refined, fit):
    trace = refined.elbo_trace
    assert trace[0] == fit.elbo
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:]))
    assert refined.refined_by == pytest.approx(refined.elbo - fit.elbo, abs=1e-12) and refined.refined_by >= 0


@pytest.mark.parametrize("kind", ["regression", "classification"])
@pytest.mark.parametrize("seed,hyper", [(4, {}), (5, {}), (6, dict(a0=1e-2, b0=1e-2))])
def test_refine_never_lowers_the_elbo_and_reaches_the_sweeps_fixed_point(kind, seed, hyper):
    model, (Phi, t) = MODELS[kind], _problem(kind, seed)
    fast = ppl_sbl.CAVI(model, schedule="fast", **QUIET).run(Phi, t, **hyper)
    refined = fast.refine()
    assert refined.schedule == "sweep" and refined.converged and refined.prune_events == []
    _never_lowers(refined, fast)
    dense = ppl_sbl.CAVI(model, schedule="sweep", prune=False, **QUIET).run(Phi, t, **hyper)
    assert refined.elbo == pytest.approx(dense.elbo, rel=1e-6)
    assert refined.num_active == Phi.shape[1]
    # a sweep fit (pruned or not) is continued the same way, to the same point
    again = dense.refine()
    _never_lowers(again, dense)
    assert again.elbo == pytest.approx(dense.elbo, rel=1e-6)


def test_refine_says_how_far_the_bound_rose_and_works_on_a_loaded_result(tmp_path, capsys):
    Phi, t = random_regression(7, N=40, M=12)
    fast = ppl_sbl.CAVI(rvm.regression, **QUIET).run(Phi, t)
    assert fast.schedule == "fast" and fast.refined_by is None
    refined = fast.refine(verbose=True)
    line = capsys.readouterr().out
    assert line.startswith("refine: ELBO") and f"+{refined.refined_by:.4g} nats" in line
    assert refined.refined_by > 0  # the frozen coefficients' gains (vague prior)
    loaded = ppl_sbl.load(fast.save(tmp_path / "fast"))
    again = loaded.refine()
    assert again.elbo_trace[0] == fast.elbo
    assert again.elbo == pytest.approx(refined.elbo, rel=1e-9)
    # the refined result itself saves and loads, refined_by included
    back = ppl_sbl.load(refined.save(tmp_path / "refined"))
    assert back.refined_by == refined.refined_by and back.schedule == "sweep"


def test_refine_on_the_multiclass_rvm():
    """The multinomial probit RVM's sweep (q(W), q(alpha), the parameter expansion, q(y)) from the
    fast fit's q(alpha) and q(y): monotone, to the unpruned sweep's fixed point."""
    r = np.random.default_rng(0)
    N = 36
    t = np.concatenate([np.arange(3), r.integers(0, 3, N - 3)])
    angles = 2 * np.pi * np.arange(3) / 3
    X = 1.3 * np.column_stack([np.cos(angles), np.sin(angles)])[t] + r.standard_normal((N, 2))
    Phi = np.column_stack([np.ones(N), X, X[:, 0] * X[:, 1], X[:, 0] ** 2])
    fast = ppl_sbl.CAVI(rvm.multiclass, **QUIET).run(Phi, t)
    assert fast.schedule == "fast"
    refined = fast.refine()
    _never_lowers(refined, fast)
    dense = ppl_sbl.CAVI(rvm.multiclass, schedule="sweep", prune=False, **QUIET).run(Phi, t)
    assert refined.elbo == pytest.approx(dense.elbo, rel=1e-6)
