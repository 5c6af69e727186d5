"""The joint Newton step of the sequential SBL's schedule (Workspace.joint_derivatives,
Workspace.joint_step, Schedule.joint_move): its gradient and Hessian against finite differences
of L computed directly with the N x N covariance, and whole fits with and without it."""
import collections
import math
import warnings

import numpy as np
import pytest

import ppl_sbl
from ppl_sbl.models import sequential_sbl as ss
from ppl_sbl.models.sequential_sbl import schedule, workspace
from ppl_sbl.validation import ConvergenceWarning

from problems import direct_L


def sinc_problem(N, seed):
    d = ppl_sbl.datasets.sinc(n_train=N, seed=seed)
    return np.asarray(ppl_sbl.basis.rbf(d.X_train, delta=5.55, bias=True)), d.t_train


@pytest.mark.parametrize("seed", range(3))
def test_joint_derivatives_are_those_of_L(seed):
    """g and H in (ln alpha_a, ln beta) at a state part way through a fit equal central differences
    of L evaluated directly (N x N) at perturbed precisions and noise."""
    D, y = sinc_problem(40, seed)
    with pytest.warns(ConvergenceWarning):  # stopped part way
        st = ss.fit(D, y, noise_var=float(np.var(y)), update_noise=True, max_steps=12 + 3 * seed)
    work = workspace.Workspace(st)
    a = work.a.copy()
    K = len(a)
    assert K >= 3
    g, H = work.joint_derivatives(noise=True)
    assert g.shape == (K + 1,) and H.shape == (K + 1, K + 1)

    def L_at(t):  # t = (ln alpha_a, ln beta) shifts
        alpha = st.alpha.copy()
        alpha[a] = alpha[a] * np.exp(t[:K])
        return direct_L(D, y, alpha, st.noise_var * math.exp(-t[K]))[0]

    eye = np.eye(K + 1)

    def gradient(h):
        return np.array([(L_at(h * e) - L_at(-h * e)) / (2 * h) for e in eye])

    def hessian(h):
        return np.array([[(L_at(h * (ei + ej)) - L_at(h * (ei - ej)) - L_at(h * (ej - ei)) + L_at(-h * (ei + ej)))
                          / (4 * h * h) for ej in eye] for ei in eye])

    # central differences extrapolated (Richardson: error O(h^4))
    num_g = (4 * gradient(5e-4) - gradient(1e-3)) / 3
    np.testing.assert_allclose(g, num_g, rtol=1e-6, atol=1e-7 * np.max(np.abs(num_g)))
    num_H = (4 * hessian(5e-3) - hessian(1e-2)) / 3
    np.testing.assert_allclose(H, num_H, rtol=1e-5, atol=1e-6 * np.max(np.abs(num_H)))
    g_fixed, H_fixed = work.joint_derivatives(noise=False)  # the noise held: the alpha block
    np.testing.assert_allclose(g_fixed, g[:K])
    np.testing.assert_allclose(H_fixed, H[:K, :K])


def test_joint_step_raises_L_or_leaves_the_state():
    """A step is kept only where the exact L rises by more than asked, and the state it leaves is
    the exact one at the new precisions and noise (Sigma, mu, L against direct computation)."""
    D, y = sinc_problem(60, 3)
    with pytest.warns(ConvergenceWarning):  # stopped part way
        st = ss.fit(D, y, noise_var=float(np.var(y)), update_noise=True, max_steps=20)
    work = workspace.Workspace(st)
    free = np.ones(len(work.a), dtype=bool)
    before = direct_L(D, y, work.alpha, work.noise_var)[0]
    assert work.joint_step(free, min_gain=1e6) is None  # no step gains that much: nothing changes
    assert direct_L(D, y, work.alpha, work.noise_var)[0] == before
    gain = work.joint_step(free, min_gain=0.0)
    assert gain is not None and gain > 0
    after = direct_L(D, y, work.alpha, work.noise_var)[0]
    assert after - before == pytest.approx(gain, rel=1e-8)
    a = work.a
    Sigma = np.linalg.inv(np.diag(work.alpha[a]) + D[:, a].T @ D[:, a] / work.noise_var)
    np.testing.assert_allclose(work.Sigma, Sigma, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(work.mu, Sigma @ D[:, a].T @ y / work.noise_var, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("data, N, seed", [("sinc", 100, 0), ("sinc", 100, 3), ("friedman", 100, 2),
                                           ("sinc", 300, 1)])
def test_joint_steps_take_fewer_moves_to_at_least_the_same_L(data, N, seed, monkeypatch):
    """The default fit (the practical rule, sigma^2 re-estimated) with the joint steps against the
    same fit made of single moves only: L at least as high (to 1e-9 relative), the same relevant
    set, fewer moves, L never falling along the way."""
    if data == "sinc":
        D, y = sinc_problem(N, seed)
    else:
        from sklearn.datasets import make_friedman1

        X, y = make_friedman1(N, noise=1.0, random_state=seed)
        D = np.asarray(ppl_sbl.basis.rbf(X, delta=1.0, bias=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # converged, no warning
        joint = ss.fit(D, y, noise_var=float(np.var(y)), update_noise=True)
        monkeypatch.setattr(schedule.Schedule, "joint_move", lambda self, step, gain, new, best: False)
        single = ss.fit(D, y, noise_var=float(np.var(y)), update_noise=True)
    kinds = collections.Counter(kind for kind, _ in joint.moves)
    assert kinds["joint"] > 0 and "joint" not in {kind for kind, _ in single.moves}
    assert joint.converged and single.converged
    assert joint.log_marginal_likelihood >= single.log_marginal_likelihood - 1e-9 * abs(single.log_marginal_likelihood)
    np.testing.assert_array_equal(np.sort(joint.active), np.sort(single.active))
    assert len(joint.moves) < len(single.moves)
    trace = np.asarray(joint.trace)
    assert np.all(np.diff(trace) >= -1e-9 * np.maximum(1.0, np.abs(trace[1:])))
    assert joint.log_marginal_likelihood == pytest.approx(ss.log_marginal_likelihood(joint), rel=1e-10, abs=1e-9)


def test_joint_steps_are_bounded_in_size_and_in_retries(monkeypatch):
    """No joint step above ``JOINT_MAX_ACTIVE`` active functions (its dense Hessian), and after one
    that gains too little, none for as many steps as there are active functions."""
    D, y = sinc_problem(100, 3)
    monkeypatch.setattr(schedule, "JOINT_MAX_ACTIVE", 3)
    capped = ss.fit(D, y, noise_var=float(np.var(y)), update_noise=True)
    assert len(capped.active) > 3 and "joint" not in {kind for kind, _ in capped.moves}
    monkeypatch.undo()
    tries = []

    def refused(self, free, min_gain, noise=True):
        tries.append(len(self.active))
        return None

    monkeypatch.setattr(workspace.Workspace, "joint_step", refused)
    single = ss.fit(D, y, noise_var=float(np.var(y)), update_noise=True)
    steps = sum(kind != "noise" for kind, _ in single.moves)
    assert 0 < len(tries) <= steps / min(tries) + 1  # at most one try per K moves
    assert "joint" not in {kind for kind, _ in single.moves}
