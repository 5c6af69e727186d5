"""One relevance rule for every result (:mod:`ppl_sbl.relevance`): q_k^2 > s_k from the fit's
factors, against the leave-one-out statistics computed from the design, the fast schedule's own
supported set, and the same data fitted by both schedules."""
import dataclasses
import warnings

import numpy as np
import pytest

import ppl_sbl
from ppl_sbl import engine, expfam, fast_ard
from ppl_sbl import likelihoods as L
from ppl_sbl.models import rvm
from ppl_sbl.models.ard import prior_precision
from problems import random_regression

GROUPS = np.array([0, 0, 1, 1, 2, 2, 3, 3])


def _consistent(res):
    """The fit with q(w) recomputed from its own E[alpha] and E[gamma] (the sweep updates q(w)
    before them, so the stored q(w) is one update behind): the brute force below then describes
    the same q(w) to rounding."""
    state = res.state
    w = L.gaussian_update_w(state.w, prior_precision(state, res.data), state.gamma_shape, state.gamma_rate,
                            res.data.lik)
    return dataclasses.replace(res, state=state._replace(w=w))


def _brute_force(Phi, t, e_gamma, P, members):
    """Leave-group-out S, Q of the coefficients ``members`` from the design: C = E[gamma] Phi_o^T Phi_o
    + diag(P_o) over the others o, S = E[gamma] Phi_g^T Phi_g - B^T C^-1 B, Q = E[gamma] Phi_g^T t -
    B^T C^-1 E[gamma] Phi_o^T t with B = E[gamma] Phi_o^T Phi_g."""
    others = np.setdiff1d(np.arange(Phi.shape[1]), members)
    Po, Pg = Phi[:, others], Phi[:, members]
    C = e_gamma * Po.T @ Po + np.diag(P[others])
    B = e_gamma * Po.T @ Pg
    S = e_gamma * Pg.T @ Pg - B.T @ np.linalg.solve(C, B)
    Q = e_gamma * Pg.T @ t - B.T @ np.linalg.solve(C, e_gamma * Po.T @ t)
    return S, Q


def _fit(groups=None, **kw):
    Phi, t = random_regression(3, N=30, M=8)
    extra = {} if groups is None else {"groups": groups}
    res = ppl_sbl.CAVI(rvm.regression, schedule="sweep", prune=False, progress_bar=False, **kw).run(Phi, t, **extra)
    return Phi, t, _consistent(res)


def test_relevant_is_q_squared_above_s_from_the_design():
    Phi, t, res = _fit()
    e_gamma = float(expfam.gamma_mean(res.state.gamma_shape, res.state.gamma_rate))
    P = np.asarray(prior_precision(res.state, res.data))
    s, q = np.zeros(8), np.zeros(8)
    for k in range(8):
        S, Q = _brute_force(Phi, t, e_gamma, P, [k])
        s[k], q[k] = S[0, 0], Q[0]
    assert np.all(np.abs(q * q / s - 1.0) > 1e-6)  # no coefficient on the boundary
    np.testing.assert_array_equal(res.relevant, q * q > s)
    assert 0 < res.relevant.sum() < 8
    np.testing.assert_allclose(res.support_ratio, q * q / s, rtol=1e-8)
    # the threshold r: q^2 > r s
    r = float(np.sort(q * q / s)[-1]) * 0.5
    np.testing.assert_array_equal(dataclasses.replace(res, relevance_ratio=r).relevant, q * q > r * s)


def test_a_group_is_relevant_when_its_block_is_supported():
    Phi, t, res = _fit(GROUPS)
    e_gamma = float(expfam.gamma_mean(res.state.gamma_shape, res.state.gamma_rate))
    P = np.asarray(prior_precision(res.state, res.data))
    expected = np.zeros(8, dtype=bool)
    for g in range(4):
        members = np.flatnonzero(GROUPS == g)
        S, Q = _brute_force(Phi, t, e_gamma, P, members)
        lam, U = np.linalg.eigh(S)
        expected[members] = fast_ard.group_supported(lam, (U.T @ Q) ** 2)[0]
    np.testing.assert_array_equal(res.relevant, expected)
    assert 0 < expected.sum() < 8


def test_a_fast_group_fit_is_relevant_where_the_group_schedule_supports_it():
    """The group schedule called directly (explicit rates, used as given) against the result's
    rule computed from its state."""
    Phi, t = random_regression(1, N=40, M=9)
    groups = np.repeat(np.arange(3), 3)
    res = ppl_sbl.CAVI(rvm.regression, schedule="fast", progress_bar=False).run(Phi, t, groups=groups, b0=1e-6,
                                                                                 f0=1e-6)
    fit = fast_ard.group_schedule(Phi, fast_ard.GaussianNoise(t, 1e-6, 1e-6), groups, a0=1e-6, b0=np.full(9, 1e-6),
                                  tol=engine.TOL, max_passes=engine.MAX_SWEEPS)
    np.testing.assert_array_equal(res.relevance_indices, np.sort(fit.active[fit.supported]))
    assert res.relevant_mask is None


@pytest.mark.parametrize("model", [rvm.regression, rvm.classification])
def test_fast_and_sweep_fits_count_alike(model):
    """Three strong coefficients among twelve: both schedules find them, and few others: a column
    of noise alone has q^2 / s about chi^2_1 in distribution, above 1 about a third of the time, so
    at most four of the nine; the two sets differ by at most one borderline coefficient."""
    r = np.random.default_rng(7)
    N, M = 80, 12
    Phi = r.standard_normal((N, M))
    w = np.zeros(M)
    w[[2, 5, 9]] = [3.0, -2.5, 2.0]
    eta = Phi @ w
    t = eta + 0.3 * r.standard_normal(N) if model is rvm.regression else (eta + 0.3 * r.standard_normal(N) > 0) * 1.0
    found = {}
    for schedule in ("fast", "sweep"):
        res = ppl_sbl.CAVI(model, schedule=schedule, progress_bar=False).run(Phi, t)
        assert res.schedule == schedule
        found[schedule] = set(res.relevance_indices.tolist())
        assert {2, 5, 9} <= found[schedule] and len(found[schedule]) <= 7, found
    assert len(found["fast"] ^ found["sweep"]) <= 1, found


def test_a_derived_sweep_reads_its_dense_factor_as_the_shipped_guide_reads_its_own():
    """The derived guide's q(w) (a dense mean and covariance) gives the shipped guide's verdicts
    and q^2 / s on the same sweeps (the two guides' states agree sweep by sweep, test_derived)."""
    Phi, t = random_regression(3, N=30, M=8)
    run = dict(schedule="sweep", prune=False, progress_bar=False, max_sweeps=200, tol=1e-300)  # 200 sweeps each
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # not converged: the same number of sweeps is the point
        shipped = ppl_sbl.CAVI(rvm.regression, **run).run(Phi, t)
        derived = ppl_sbl.CAVI(rvm.regression, guide="derived", **run).run(Phi, t)
    assert shipped.num_sweeps == derived.num_sweeps == 200
    np.testing.assert_array_equal(derived.relevant, shipped.relevant)
    np.testing.assert_allclose(derived.support_ratio, shipped.support_ratio, rtol=1e-6)
    assert 0 < derived.relevant.sum() < 8
