"""The fast schedule for grouped precisions (:mod:`ppl_sbl.fast_ard.groups`): a group's collapsed
ELBO (G1), (G2) against the restricted-family ELBO evaluated afresh, its maximisers and the support
test against brute force, fits against the sweep, and the ELBO never falling."""
import numpy as np
import pytest
from scipy.optimize import minimize_scalar

import ppl_sbl
from ppl_sbl import fast_ard
from ppl_sbl.fast_ard import groups as G
from ppl_sbl.models import rvm

A0 = B0 = 1e-3


def _design(seed, N=40, M=12):
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(N, M)) * rng.uniform(0.3, 2.0, M)
    w = rng.normal(size=M) * (rng.random(M) < 0.4)
    t = Phi @ w + 0.3 * rng.normal(size=N)
    return Phi, t


def _work(seed, groups, exact=True):
    """A group schedule's state on a random regression problem with the noise held (the factor's
    W and r fixed), in the schedule's units (a0 = b0)."""
    Phi, t = _design(seed, M=len(groups))
    work = G._GroupSchedule(Phi, fast_ard.GaussianNoise(t, 1.0, 1.0), np.asarray(groups), A0, B0, exact)
    work.settle = 1e-6
    return work


def _elbo_at(work, g, x):
    """The restricted-family ELBO with x_g = x, q(w) at its optimum given every x (afresh)."""
    saved = work.x[g]
    work.x[g] = x
    work.refresh()
    value = work.elbo()
    work.x[g] = saved
    work.refresh()
    return value


GROUPS = [0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 4, 4]


def test_a_groups_collapsed_elbo_is_the_restricted_familys():
    """(G1) for an active group and (G2) for a frozen one change exactly as the ELBO does."""
    work = _work(0, GROUPS)
    for g, x in ((0, 0.5), (2, 2.0)):
        assert work.move(fast_ard.ADD, g, x)
    xs = np.array([0.05, 0.3, 1.0, 4.0, 30.0])
    for g in range(5):
        lam, q2, resolved = work.leave_group_out(np.array([g]))
        assert resolved[0]
        elbo = np.array([_elbo_at(work, g, x) for x in xs])
        if work.in_model[g]:
            collapsed = G.group_in_model_value(xs, np.repeat(lam, len(xs), 0), np.repeat(q2, len(xs), 0), A0, B0)
        else:
            h = np.repeat(work.h_groups[g][None], len(xs), 0)
            collapsed = G.group_frozen_value(xs, h, A0, B0)
        np.testing.assert_allclose(elbo - elbo[0], collapsed - collapsed[0], rtol=1e-8, atol=1e-9)


def test_an_add_gains_what_g1_and_g2_say():
    work = _work(1, GROUPS)
    assert work.move(fast_ard.ADD, 1, 1.0)
    for g in (0, 2, 4):
        before = work.elbo()
        lam, q2, _ = work.leave_group_out(np.array([g]))
        x_new = 0.7
        expected = (G.group_in_model_value(np.array([x_new]), lam, q2, A0, B0)
                    - G.group_frozen_value(work.x[[g]], work.h_groups[[g]], A0, B0))[0]
        assert work.move(fast_ard.ADD, g, x_new)
        assert work.elbo() - before == pytest.approx(expected, rel=1e-8, abs=1e-9)
        # the rank-d updates leave q(w) and the statistics as a fresh factorisation gives them
        Sigma, mu, S, Q = work.Sigma.copy(), work.mu.copy(), work.S.copy(), work.Qv.copy()
        work.refresh()
        np.testing.assert_allclose(Sigma, work.Sigma, rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(mu, work.mu, rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(S, work.S, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(Q, work.Qv, rtol=1e-8, atol=1e-10)


def _brute_max(f, lo=-25.0, hi=25.0):
    """The maximum of f(t) (vectorised in t) by a grid of 20001 points and Brent's method."""
    grid = np.linspace(lo, hi, 20001)
    values = f(grid)
    i = int(np.argmax(values))
    res = minimize_scalar(lambda t: -f(np.array([t]))[0], method="bounded", options={"xatol": 1e-12},
                          bounds=(grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]))
    return (res.x, -res.fun) if -res.fun > values[i] else (grid[i], values[i])


@pytest.mark.parametrize("seed", range(4))
def test_the_maximisers_and_the_support_test_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    d = 4
    lam = rng.uniform(0.0, 3.0, size=(6, d)) ** 3
    q2 = lam * rng.uniform(0.0, 3.0, size=(6, d)) ** 2
    lam[0, 2:] = q2[0, 2:] = 0.0  # padding
    q2[1] = 0.5 * lam[1]  # no direction supported
    x, value = G.group_in_model_optimum(lam, q2, A0, B0)
    supported = fast_ard.group_supported(lam, q2)
    h = lam + rng.uniform(0.0, 1.0, size=lam.shape)
    x_out, value_out = G.group_frozen_optimum(h, A0, B0)
    for g in range(lam.shape[0]):
        def f_in(t, a0=A0, b0=B0):
            rows = np.repeat(lam[[g]], len(t), 0), np.repeat(q2[[g]], len(t), 0)
            return G.group_in_model_value(np.exp(t), *rows, a0, b0)

        t_best, v_best = _brute_max(f_in)
        assert value[g] >= v_best - 1e-9 * max(1.0, abs(v_best))
        assert np.log(x[g]) == pytest.approx(t_best, abs=1e-4)
        _, v0 = _brute_max(lambda t: f_in(t, 0.0, 0.0), -40.0, 40.0)
        assert supported[g] == (v0 > 1e-12), (g, v0)
        t_out, v_out = _brute_max(lambda t: G.group_frozen_value(np.exp(t), np.repeat(h[[g]], len(t), 0), A0, B0))
        assert value_out[g] >= v_out - 1e-9 * max(1.0, abs(v_out))
        assert np.log(x_out[g]) == pytest.approx(t_out, abs=1e-4)
    assert not supported[1]


@pytest.mark.parametrize("seed", range(3))
def test_group_fits_never_fall_and_stop_at_the_maximiser_of_each_groups_elbo(seed):
    Phi, t = _design(20 + seed, N=50, M=15)
    groups = np.arange(15) // 3
    for noise, y in ((fast_ard.GaussianNoise(t, 1e-6, 1e-6), t),
                     (fast_ard.JaakkolaJordan((t > np.median(t)).astype(float)), None)):
        fit = fast_ard.group_schedule(Phi, noise, groups, a0=A0, b0=B0)
        assert fit.converged
        trace = np.asarray(fit.elbo_trace)
        assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:])), np.min(np.diff(trace))
        assert fit.group_active.any()
        assert np.array_equal(np.unique(groups[fit.active]), np.flatnonzero(fit.group_active))
    # at the end every active group's E[alpha] maximises the ELBO over its own value (the noise held)
    work = G._GroupSchedule(Phi, fast_ard.GaussianNoise(t, 1e-6, 1e-6), groups, A0, B0, False)
    work.settle = 1e-6
    for _ in range(200):
        move = work.best_move(1e-12)
        if move is None:
            break
        work.move(*move[:3])
    for g in np.flatnonzero(work.in_model):
        here = work.elbo()
        for factor in (0.9, 1.1, 0.5, 2.0):
            assert _elbo_at(work, g, work.x[g] * factor) <= here + 1e-9 * abs(here)


def test_one_shared_precision_fits_the_sweeps_fixed_point():
    """With one group the restricted family is the whole model once the group is in: the fast
    fit of Bayesian ridge regression and classification is the sweep's."""
    Phi, t = _design(3, N=60, M=10)
    labels = (t > np.median(t)).astype(float)
    ridge = np.zeros(10, int)
    for model, y in ((rvm.regression, t), (rvm.classification, labels)):
        fast = ppl_sbl.CAVI(model, tol=1e-12, progress_bar=False).run(Phi, y, groups=ridge)
        sweep = ppl_sbl.CAVI(model, schedule="sweep", tol=1e-12, progress_bar=False).run(Phi, y, groups=ridge)
        assert fast.schedule == "fast" and fast.converged
        assert fast.elbo == pytest.approx(sweep.elbo, rel=1e-7)
        np.testing.assert_allclose(np.asarray(fast.predict(Phi[:5])[0] if model is rvm.regression
                                              else fast.predict(Phi[:5])),
                                   np.asarray(sweep.predict(Phi[:5])[0] if model is rvm.regression
                                              else sweep.predict(Phi[:5])), rtol=1e-4)  # both stop where a
        # pass moves the state by sqrt(tol) = 1e-6 (relative) on a linearly converging iteration


def test_group_ard_is_sparse_in_groups_and_near_the_sweep():
    rng = np.random.default_rng(7)
    N, M = 200, 24
    Phi = rng.normal(size=(N, M))
    groups = np.arange(M) // 4
    w = np.where(groups < 2, rng.normal(size=M), 0.0)
    t = Phi @ w + 0.2 * rng.normal(size=N)
    fast = ppl_sbl.CAVI(rvm.regression, progress_bar=False).run(Phi, t, groups=groups)
    sweep = ppl_sbl.CAVI(rvm.regression, schedule="sweep", progress_bar=False).run(Phi, t, groups=groups)
    assert fast.schedule == "fast"
    kept = np.unique(groups[np.asarray(fast.relevant)])
    # the signal groups, and by chance some noise groups (for an orthogonal design a noise group
    # of d columns is supported when chi^2_d / d > 1, as a noise coefficient of ARD when chi^2_1 > 1)
    assert {0, 1} <= set(kept.tolist()) and len(kept) < 6
    signal = np.abs(np.asarray(fast.state.w.mean))
    assert np.min(signal[groups < 2]) > 5 * np.max(signal[groups >= 2])
    # the frozen groups cost the fast fit a little of the dense fixed point's ELBO, never more
    assert sweep.elbo - 1.0 <= fast.elbo <= sweep.elbo + 1e-6 * abs(sweep.elbo)
    assert fast.refine().elbo >= fast.elbo


@pytest.mark.parametrize("seed", range(3))
def test_the_joint_newton_step_gains_what_the_fresh_elbo_says(seed):
    """The joint Newton step on the active groups' precisions: its gain is the change of the
    restricted-family ELBO evaluated afresh, and it raises it; F (joint_value) changes as the ELBO."""
    work = _work(10 + seed, GROUPS, exact=False)
    for g, x in ((0, 0.5), (2, 2.0), (4, 1.0)):
        assert work.move(fast_ard.ADD, g, x)
    work.settle = 1e-12
    before, f_before = work.elbo(), work.joint_value(work.x)
    gain = work.newton_polish()
    assert gain is not None and gain > 0
    after = work.elbo()
    assert after - before == pytest.approx(gain, rel=1e-8, abs=1e-10)
    assert work.joint_value(work.x) - f_before == pytest.approx(gain, rel=1e-8, abs=1e-10)
    # repeated steps reach the joint maximum of F over the active groups' x
    for _ in range(50):
        value = work.elbo()
        gain = work.newton_polish()
        if gain is None:
            break
        assert gain > 0 and work.elbo() - value == pytest.approx(gain, rel=1e-8, abs=1e-10)
    else:
        raise AssertionError("the Newton steps did not stop")
    # there no group's x raises the ELBO evaluated afresh (q(w) refactorised at each x)
    here = work.elbo()
    for g in np.flatnonzero(work.in_model):
        for factor in (0.99, 1.01):
            assert _elbo_at(work, g, work.x[g] * factor) <= here + 1e-10 * abs(here)
