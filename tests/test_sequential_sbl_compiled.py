"""The sequential SBL's compiled program (``fit(..., compiled=True)``) against the host schedule
(the same steps: moves, L, active set, statistics) and against direct N x N computations.

The problems share one padded shape (56 x 40, from 50 x 35 up to 56 x 40), so that the tests
compile few programs."""
import numpy as np
import pytest

from ppl_sbl import basis
from ppl_sbl.models import sequential_sbl as ss
from ppl_sbl.models.sequential_sbl import compiled as C
from ppl_sbl.models.sequential_sbl import compiled_steps as P
from ppl_sbl.validation import ConvergenceWarning

from test_sequential_sbl import check_against_direct, problem


RULES = dict(log_alpha_tol=ss.LOG_ALPHA_TOL, log_noise_tol=ss.LOG_NOISE_TOL,
             joint_max_active=ss.schedule.JOINT_MAX_ACTIVE)


def assert_same_fit(host, comp):
    """The same steps and the same end, to rounding."""
    assert comp.moves == host.moves
    np.testing.assert_array_equal(comp.active, host.active)
    assert comp.log_marginal_likelihood == pytest.approx(host.log_marginal_likelihood, rel=1e-10, abs=1e-10)
    np.testing.assert_allclose(comp.trace, host.trace, rtol=1e-10, atol=1e-10)
    assert comp.noise_var == pytest.approx(host.noise_var, rel=1e-10)
    a = host.active
    np.testing.assert_allclose(comp.alpha[a], host.alpha[a], rtol=1e-8)
    np.testing.assert_allclose(comp.mu, host.mu, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(comp.Sigma, host.Sigma, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(comp.S, host.S, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(comp.Q, host.Q, rtol=1e-8, atol=1e-10)
    assert [m for m, _ in comp.refresh_drift] == [m for m, _ in host.refresh_drift]
    assert (comp.converged, comp.stop_reason) == (host.converged, host.stop_reason)
    assert len(comp.trace_seconds) == len(host.trace_seconds)  # one for each entry of this run


def rbf_problem(seed, N=50, M=35, width=0.6):
    """A one-dimensional RBF design (overlapping, not collinear) with a sinc target."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(-5, 5, N))
    centres = np.linspace(-5, 5, M)
    D = np.exp(-0.5 * ((x[:, None] - centres[None, :]) / width) ** 2)
    return D, np.sinc(x / np.pi) + 0.1 * rng.normal(size=N)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("update_noise, noise_every, tol", [(True, 1, None), (False, 1, None), (True, 7, None),
                                                             (True, 1, 1e-13)])
def test_compiled_fit_equals_host_fit_and_direct(seed, update_noise, noise_every, tol):
    D, y, _ = problem(seed)
    kw = dict(noise_var=0.5 if update_noise else 0.1, update_noise=update_noise, noise_every=noise_every, tol=tol)
    comp = ss.fit(D, y, compiled=True, **kw)
    assert_same_fit(ss.fit(D, y, **kw), comp)
    check_against_direct(comp, D, y, update_noise)


@pytest.mark.parametrize("seed", range(3))
def test_compiled_rbf_fit_with_joint_steps_equals_host(seed):
    """Overlapping functions: the path takes joint Newton steps on every alpha and the noise."""
    D, y = rbf_problem(seed)
    host = ss.fit(D, y, noise_var=float(np.var(y)), update_noise=True)
    assert any(kind == "joint" for kind, _ in host.moves)
    assert_same_fit(host, ss.fit(D, y, noise_var=float(np.var(y)), update_noise=True, compiled=True))


def test_compiled_fit_grows_its_buffers_and_takes_off_its_trace(monkeypatch):
    """More active functions than the first capacity (16 slots), and more trace entries than the
    trace's buffer holds (16 here): the host enlarges the buffers and takes the entries off."""
    rng = np.random.default_rng(5)
    D = rng.normal(size=(50, 35))
    y = D @ rng.normal(size=35) + 0.05 * rng.normal(size=50)
    monkeypatch.setattr(C, "trace_length", lambda M: 16)
    grown = []
    real = C._grown
    monkeypatch.setattr(C, "_grown", lambda f, cap: grown.append(cap) or real(f, cap))
    host = ss.fit(D, y, noise_var=1.0, update_noise=True)
    comp = ss.fit(D, y, noise_var=1.0, update_noise=True, compiled=True)
    assert C.CAPACITY == 16 and len(host.active) > 32 and grown == [32, 64]
    assert len(host.trace) > 16
    assert_same_fit(host, comp)


def test_compiled_resume_after_new_samples_equals_host():
    """From a fitted state with new samples (by value and by point): the start's active set,
    Sigma and statistics go into the program's buffers."""
    D, y, rng = problem(3, N=50)
    st = ss.fit(D[:40], y[:40], noise_var=0.3, update_noise=True)
    for n in range(40, 46):
        st, _ = ss.add_sample(st, D[n], y[n])
    kw = dict(update_noise=True)
    host, comp = ss.resume(st, **kw), ss.resume(st, compiled=True, **kw)
    assert len(host.moves) > len(st.moves)
    assert_same_fit(host, comp)
    assert comp.moves[:len(st.moves)] == st.moves


def test_compiled_resume_after_new_functions_equals_host():
    """After ``add_basis`` (the dictionary is then the old and the new dense dictionaries side by
    side): the program takes the stacked design's rows."""
    D, y, rng = problem(4, N=50, M=30)
    st = ss.add_basis(ss.fit(D, y, noise_var=0.3), rng.normal(size=(50, 5)))
    host, comp = ss.resume(st, update_noise=True), ss.resume(st, update_noise=True, compiled=True)
    assert len(host.moves) > len(st.moves) and host.S.shape == (35,)
    assert_same_fit(host, comp)


def test_compiled_max_steps_and_progress_bar():
    D, y, _ = problem(1)
    with pytest.warns(ConvergenceWarning):
        host = ss.fit(D, y, noise_var=0.5, update_noise=True, max_steps=9)
    with pytest.warns(ConvergenceWarning):
        comp = ss.fit(D, y, noise_var=0.5, update_noise=True, max_steps=9, compiled=True)
    assert host.stop_reason == "max_steps" and not host.converged
    assert_same_fit(host, comp)
    # a progress bar: the program returns to the host every 50 steps; the same fit
    D, y = rbf_problem(0)
    host = ss.fit(D, y, noise_var=float(np.var(y)), update_noise=True)
    assert len(host.moves) > 50
    assert_same_fit(host, ss.fit(D, y, noise_var=float(np.var(y)), update_noise=True, compiled=True,
                                 progress_bar=True))


def test_compiled_fit_hands_over_to_the_host_where_statistics_fail(monkeypatch):
    """Where the program meets a NaN gain (the host schedule refreshes, and stops "ill-conditioned"
    where exact statistics are NaN too) or would go back to an earlier state, it stops and the host
    schedule fits from the start: the result is the host's."""
    D, y, _ = problem(2)
    real_gains, handed = P._gains, []

    def nan_from_step_5(f, data):
        gain, new, nan = real_gains(f, data)
        return gain, new, nan | (f.step >= 5)

    monkeypatch.setattr(P, "_gains", nan_from_step_5)
    # a new function (JAX keeps the trace of a function it has traced): traced with the patch
    monkeypatch.setattr(C, "program", C.jax.jit(lambda f, data: P.steps(f, data)))
    real_run = C.run
    monkeypatch.setattr(C, "run", lambda *a, **k: handed.append(real_run(*a, **k)) or handed[-1])
    comp = ss.fit(D, y, noise_var=0.5, update_noise=True, compiled=True)
    assert handed == [None]
    assert_same_fit(ss.fit(D, y, noise_var=0.5, update_noise=True), comp)


def test_compiled_refresh_that_finds_L_fallen_hands_over():
    """An exact refresh that finds L below the best earlier one by more than rounding sets the
    status that hands the fit to the host (which goes back to that state, ``rollbacks``)."""
    D, y, _ = problem(0)
    st = ss.fit(D, y, noise_var=0.5, update_noise=True)
    design = ss.design.design_of(st, prefer_sparse=True)
    data, _ = C._data(st, design.dense, design.sq_norms(), tol=1e-13, practical=True, update_noise=True, noise_every=1,
                      max_steps=100, refresh_every=500, align_tol=0.0, max_alignment=None, rounding=1e-10, **RULES)
    f = C._start(st, data, design.dense, 32, 64, 500, None)
    f, data = C.jax.device_put((f._replace(step=np.int64(20), last_refresh=np.int64(3)), data))
    L = st.log_marginal_likelihood
    kept = P._refresh_at(f._replace(checkpoint_L=np.float64(L - 1e-3)), data)
    assert int(kept.status) == P.RUNNING and float(kept.checkpoint_L) == pytest.approx(L, rel=1e-12)
    assert float(kept.L) == pytest.approx(L, rel=1e-12) and int(kept.last_refresh) == 20
    fell = P._refresh_at(f._replace(checkpoint_L=np.float64(L + 1e-3)), data)
    assert int(fell.status) == P.BAIL


@pytest.mark.parametrize("dictionary", ["haar", "kronecker"])
def test_compiled_fit_on_a_sparse_or_kronecker_dictionary_is_the_host_fit(dictionary, monkeypatch):
    """A sparse dictionary (2-D Haar) and a Kronecker one (Gaussian RBFs on the pixel grid) on a 6 x 6
    image, 50 samples at 36 pixels (some sampled twice): the program forms the design over the
    samples densely and makes the host schedule's steps, which run on the dictionary's own products.
    Above the size limit for forming it, a named error."""
    D = basis.haar_2d((6, 6)) if dictionary == "haar" else basis.gaussian_rbf_2d((6, 6), 0.8)
    rng = np.random.default_rng(1)
    rows = rng.integers(0, 36, size=50)
    i, j = np.divmod(np.arange(36), 6)
    y = (np.sin(i / 2.0) + np.cos(j / 3.0))[rows] + 0.1 * rng.normal(size=50)
    kw = dict(rows=rows, noise_var=0.5, update_noise=True)
    real_run, handed = C.run, []
    monkeypatch.setattr(C, "run", lambda *a, **k: handed.append(real_run(*a, **k)) or handed[-1])
    comp = ss.fit(D, y, compiled=True, **kw)
    assert len(handed) == 1 and handed[0] is not None  # the program's fit, not handed back to the host
    assert_same_fit(ss.fit(D, y, **kw), comp)
    check_against_direct(comp, D.to_dense()[rows], y, True)
    monkeypatch.setattr(C, "MAX_DENSE_BYTES", C.dense_bytes(comp) - 1)
    with pytest.raises(ValueError, match="compiled=True.*MAX_DENSE_BYTES"):
        ss.fit(D, y, compiled=True, **kw)


def test_compiled_fit_on_an_ill_conditioned_dictionary_ends_at_an_exact_optimum(monkeypatch):
    """Overlapping Gaussian RBFs (sd 4 pixels on the camera image at 20 x 20, 45% observed, as a
    dense matrix): the rank-one updates drift, so the compiled and host paths part at rounding
    (each a valid path: both end at a local optimum). The compiled fit ends without handing over,
    at L equal to a direct evaluation, with L at the exact refreshes never falling, and no move
    that gains by exact statistics."""
    skimage = pytest.importorskip("skimage")
    import skimage.transform

    from ppl_sbl.models.sequential_sbl.gains import move_gains
    from test_sequential_sbl import least_squares_statistics

    size = 20
    img = skimage.transform.resize(skimage.data.camera() / 255.0, (size, size), anti_aliasing=True).ravel()
    obs = np.sort(np.random.default_rng(0).choice(size * size, int(round(0.45 * size * size)), replace=False))
    D = basis.gaussian_rbf_2d((size, size), 4.0).to_dense()
    real_run, handed = C.run, []
    monkeypatch.setattr(C, "run", lambda *a, **k: handed.append(real_run(*a, **k)) or handed[-1])
    st = ss.fit(D, img[obs], rows=obs, noise_var=1e-3, tol=1e-13, compiled=True)
    assert handed[0] is not None and st.converged and st.stop_reason in ("tolerance", "rounding")
    dense, a = D[obs], st.active
    L, S, Q, sigma_diag, mu, H = least_squares_statistics(dense, img[obs], st.alpha, 1e-3, a)
    rounding = np.finfo(float).eps * np.sum(np.abs(np.linalg.inv(H)) * np.abs(H))
    assert np.linalg.cond(H) > 1e8 and rounding < 1e-6 * abs(L)
    assert abs(st.log_marginal_likelihood - L) <= rounding
    exact = np.array([st.trace[moves] - drift for moves, drift in st.refresh_drift])
    assert len(exact) > 5 and np.all(np.diff(exact) >= -2 * rounding)
    assert np.max(np.abs([d for _, d in st.refresh_drift])) > 1e-6  # the updates drift here
    gain, _ = move_gains(st.alpha, S, Q, a, sigma_diag, mu)
    assert np.max(gain) <= 1e-6 * abs(L)


def test_compiled_gains_of_a_function_the_data_determine():
    """The program's gains (``compiled_steps._gains``) where an active function has alpha_m -> 0 and its small
    factors must come from Sigma_mm and mu_m (S_m alone has lost every digit): every move's gain
    against two direct evaluations of L (K x K)."""
    from ppl_sbl.models.sequential_sbl.schedule import _initial_state
    from test_sequential_sbl import determined_function_problem, kk_L

    D, y, act, alpha, noise_var, Sigma, mu, S, Q = determined_function_problem()
    N, M = D.shape
    st = _initial_state(basis.as_dictionary(D), y, np.arange(N), noise_var).replace(
        active=act, alpha=alpha, mu=mu, Sigma=Sigma, S=S, Q=Q)
    design = ss.design.design_of(st, prefer_sparse=True)
    data, _ = C._data(st, design.dense, design.sq_norms(), tol=1e-13, practical=False, update_noise=False, noise_every=1,
                      max_steps=1, refresh_every=500, align_tol=0.0, max_alignment=None, rounding=1e-10, **RULES)
    f = C._start(st, data, D, 8, 64, 500, None)
    gain, new, nan = C.jax.jit(P._gains)(f, data)
    gain, new = np.asarray(gain)[:M], np.asarray(new)[:M]
    assert not bool(nan)
    L0 = kk_L(D, y, alpha, noise_var)
    for m in act:
        changed = alpha.copy()
        changed[m] = new[m]
        assert gain[m] == pytest.approx(kk_L(D, y, changed, noise_var) - L0, rel=1e-9)
    for m in np.flatnonzero(np.isfinite(new) & ~np.isfinite(alpha)):  # the adds that gain
        changed = alpha.copy()
        changed[m] = new[m]
        assert gain[m] == pytest.approx(kk_L(D, y, changed, noise_var) - L0, rel=1e-8)
