"""The fast schedule as one compiled program (ppl_sbl.fast_ard.compiled) against the host loop
(ppl_sbl.fast_ard.schedule's _Schedule and run_passes): the same moves, the same fit to rounding,
on random problems (random data and hyperparameters; the shapes fixed, so that the problems share
their compiled programs)."""
import re

import numpy as np
import pytest

from ppl_sbl import fast_ard as F
from ppl_sbl.fast_ard import compiled
from ppl_sbl.fast_ard import jax_algebra as J
from ppl_sbl.fast_ard.units import standard_units

from problems import random_classification, random_regression

N, M = 48, 22  # 24 columns with a zero column and a duplicate


def _problem(seed):
    rng = np.random.default_rng(seed)
    Phi, t = random_regression(seed=seed, N=N, M=M, noise=float(rng.uniform(0.05, 0.5)))
    Phi = np.column_stack([Phi, np.zeros(N), Phi[:, 0]])
    return Phi, t, rng


def _fit(Phi, t, a0, b0, e0, use_compiled, **kw):
    s = float(np.std(t))
    noise = F.GaussianNoise(t / s, e0, e0)
    fit = F.schedule(Phi, noise, a0=a0, b0=b0, target_scale=s, compiled=use_compiled, **kw)
    return fit, noise


def _assert_same_fit(host, fast, host_noise, fast_noise):
    assert fast.num_moves == host.num_moves and fast.num_passes == host.num_passes
    assert fast.converged == host.converged
    np.testing.assert_array_equal(fast.active, host.active)  # the same coefficients, entered in the same order
    np.testing.assert_array_equal(fast.trace_events, host.trace_events)
    np.testing.assert_allclose(fast.elbo_trace, host.elbo_trace, rtol=1e-10)
    np.testing.assert_allclose(fast.mu, host.mu, rtol=1e-7, atol=1e-9 * np.max(np.abs(host.mu)))
    np.testing.assert_allclose(fast.Sigma, host.Sigma, rtol=1e-7, atol=1e-9 * np.max(np.abs(host.Sigma)))
    np.testing.assert_allclose(fast.x, host.x, rtol=1e-7)
    np.testing.assert_array_equal(fast.supported, host.supported)
    assert fast_noise.f == pytest.approx(host_noise.f, rel=1e-9)
    assert fast.elbo == pytest.approx(host.elbo, rel=1e-10)


@pytest.mark.parametrize("seed", range(4))
def test_compiled_schedule_makes_the_host_schedules_moves(seed):
    """Vague and proper hyperpriors (the two entry rules) with random rates, per coefficient or one."""
    Phi, t, rng = _problem(seed)
    if seed % 2:
        a0, b0, e0 = 10 ** rng.uniform(-0.5, 0.5), 10 ** rng.uniform(-1, 0), 10 ** rng.uniform(-1, 0.5)
    else:
        a0 = 1e-6 * 10 ** rng.uniform(-1, 1)
        b0 = a0 * 10 ** rng.uniform(-1, 1, Phi.shape[1]) * np.var(t) / np.mean(Phi**2 + 1e-3, axis=0)
        e0 = 1e-6
    host, host_noise = _fit(Phi, t, a0, b0, e0, False)
    fast, fast_noise = _fit(Phi, t, a0, b0, e0, True)
    assert host.converged and host.num_moves > 0
    _assert_same_fit(host, fast, host_noise, fast_noise)
    # the ELBO never decreases along the compiled fit's trace
    steps = np.diff(fast.elbo_trace)
    assert np.all(steps >= -1e-9 * np.abs(fast.elbo_trace[1:]))


def test_tipping_faul_limit_is_left_to_the_host_loop():
    Phi, t, _ = _problem(7)
    with pytest.raises(ValueError, match="compiled=False"):
        _fit(Phi, t, 0.0, 0.0, 1e-6, True)


def test_buffers_grow_and_limits_stop_the_fit_where_the_host_loop_stops():
    """An active block that starts too small for the fit grows between calls of the program, and a
    trace buffer that fills is taken off to the host: the same fit; ``max_moves`` and
    ``max_passes`` stop it as they stop the host loop; progress is reported after every pass."""
    Phi, t, rng = _problem(13)
    a0, b0, e0 = 10 ** rng.uniform(-0.5, 0.5), 10 ** rng.uniform(-1, 0), 10 ** rng.uniform(-1, 0.5)
    host, host_noise = _fit(Phi, t, a0, b0, e0, False)
    assert len(host.active) > 16 and len(host.elbo_trace) > 128  # the block grows, the trace fills
    s = float(np.std(t))
    work, a0s, b0s, _, offset = standard_units(Phi, a0, b0, s)
    noise = F.GaussianNoise(t / s, e0, e0)
    reports = []
    fields = compiled.run(work, noise, a0s, b0s, 1e-9, 1000, None, lambda *r: reports.append(r), True, capacity=16,
                          trace_length=16, report_interval=0)  # one pass a call: a report after every pass
    fast = F.FastFit(**fields)
    _assert_same_fit(host, fast._replace(elbo_trace=fast.elbo_trace + offset), host_noise, noise)
    assert [r[0] for r in reports] == list(range(1, host.num_passes + 1))
    assert reports[-1][1] == host.num_moves and reports[-1][3] == len(host.active)
    updates = fast.elbo_trace[1:][np.asarray(fast.trace_events) == F.UPDATE]  # the ELBO after each pass's update
    np.testing.assert_allclose([r[2] for r in reports], updates, rtol=1e-12)
    # at the default interval the program runs several passes a call: fewer reports, the same fit
    fewer = []
    again = F.FastFit(**compiled.run(work, F.GaussianNoise(t / s, e0, e0), a0s, b0s, 1e-9, 1000, None,
                                     lambda *r: fewer.append(r), True, capacity=16, trace_length=16))
    np.testing.assert_array_equal(again.elbo_trace, fast.elbo_trace)
    assert fewer[-1] == reports[-1] and all(r in reports for r in fewer)
    for limits in (dict(max_moves=7), dict(max_passes=2)):
        a, _ = _fit(Phi, t, 1e-6, 1e-6, 1e-6, False, **limits)
        b, _ = _fit(Phi, t, 1e-6, 1e-6, 1e-6, True, **limits)
        assert not a.converged and not b.converged
        assert (a.num_moves, a.num_passes) == (b.num_moves, b.num_passes)
        np.testing.assert_allclose(b.elbo_trace, a.elbo_trace, rtol=1e-10)


def test_capacity_grows_by_halves_past_64():
    """The active block doubles up to 64 slots, then takes 2^k and 1.5 2^k in turn; a fit whose
    active set passes 64 goes on in 96 slots and makes the host loop's moves."""
    sizes = [16]
    while sizes[-1] < 1000:
        sizes.append(compiled.grow(sizes[-1]))
    assert sizes == [16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024]
    rng = np.random.default_rng(5)
    Phi = rng.normal(size=(90, 80))
    t = Phi[:, :6] @ rng.normal(size=6) + 0.3 * rng.normal(size=90)
    a0, b0, e0 = 1.0, 0.5, 1e-2  # a proper prior: every resolved column enters (exact entry rule)
    host, host_noise = _fit(Phi, t, a0, b0, e0, False)
    assert 64 < len(host.active) <= 96
    s = float(np.std(t))
    work, a0s, b0s, _, offset = standard_units(Phi, a0, b0, s)
    noise = F.GaussianNoise(t / s, e0, e0)
    fast = F.FastFit(**compiled.run(work, noise, a0s, b0s, 1e-9, 1000, None, None, True, capacity=64))
    _assert_same_fit(host, fast._replace(elbo_trace=fast.elbo_trace + offset), host_noise, noise)


@pytest.mark.parametrize("lowest", [0.3, -1e-3, -0.05])
def test_newton_step_is_undamped_where_it_can_be_and_damped_past_the_lowest_eigenvalue(lowest):
    """The joint Newton step in ln x (host ``algebra.log_newton_step``, compiled
    ``compiled_moves._log_newton_step``): minus the Hessian in ln x, where positive definite, is
    solved as it is; otherwise damped by the first c of base 2^k (base 1e-12 of its largest
    diagonal entry) that makes it so. Both against that rule applied directly (eigenvalues and a
    dense solve), on a free subset of the slots."""
    import jax.numpy as jnp

    from ppl_sbl.fast_ard import compiled_moves
    from ppl_sbl.fast_ard.algebra import log_newton_step

    rng = np.random.default_rng(11)
    K, cap = 6, 8
    x = 10 ** rng.uniform(-1, 1, K)
    g = rng.normal(size=K)
    free = np.array([True, True, False, True, True, True])
    # H chosen so that minus the ln-x Hessian on the free slots, -(x H x + diag(x g)), has the
    # eigenvalues lowest, 0.5, 1, 2, 3
    Q, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    neg = Q @ np.diag([lowest, 0.5, 1.0, 2.0, 3.0]) @ Q.T
    neg_full = np.eye(K)
    neg_full[np.ix_(free, free)] = neg
    H = -(neg_full + np.diag(x * g)) / np.outer(x, x)
    if lowest > 0:
        damping = 0.0
    else:
        base = 1e-12 * np.max(np.abs(np.diag(neg)))
        damping = next(base * 2.0**k for k in range(39) if base * 2.0**k + lowest > 0)
    expected = np.linalg.solve(neg + damping * np.eye(len(neg)), (x * g)[free])
    host = log_newton_step(x, g, H, free)
    np.testing.assert_allclose(host, expected, rtol=1e-9)
    pad = cap - K
    step, ok = compiled_moves._log_newton_step(jnp.asarray(np.append(x, np.ones(pad))),
                                               jnp.asarray(np.append(g, np.zeros(pad))),
                                               jnp.asarray(np.pad(H, (0, pad))),
                                               jnp.asarray(np.append(free, [False] * pad)))
    assert bool(ok)
    np.testing.assert_allclose(np.asarray(step)[:K][free], expected, rtol=1e-9)
    np.testing.assert_array_equal(np.asarray(step)[:K][~free], 0.0)


@pytest.mark.parametrize("seed", range(3))
def test_compiled_classification_makes_the_host_schedules_moves(seed):
    """The Jaakkola-Jordan bound's factor, its xi extrapolated over the passes (the trace's UPDATE
    steps that follow an UPDATE), vague and proper hyperpriors."""
    rng = np.random.default_rng(100 + seed)
    Phi, t = random_classification(seed=seed, N=N, M=M)
    Phi = np.column_stack([Phi, np.zeros(N), Phi[:, 1]])
    a0 = 1e-6 if seed != 1 else 10 ** rng.uniform(-0.5, 0.5)
    b0 = a0 * 10 ** rng.uniform(-1, 1, Phi.shape[1])
    fits = []
    for use_compiled in (False, True):
        bound = F.JaakkolaJordan(t)
        fits.append((F.schedule(Phi, bound, a0=a0, b0=b0, compiled=use_compiled), bound))
    (host, host_bound), (fast, fast_bound) = fits
    events = host.trace_events
    assert host.converged and host.num_moves > 0
    assert np.any((events[1:] == F.UPDATE) & (events[:-1] == F.UPDATE))  # xi extrapolated at least once
    assert fast.num_moves == host.num_moves and fast.num_passes == host.num_passes
    np.testing.assert_array_equal(fast.active, host.active)
    np.testing.assert_array_equal(fast.trace_events, events)
    np.testing.assert_allclose(fast.elbo_trace, host.elbo_trace, rtol=1e-9)
    np.testing.assert_allclose(fast_bound.xi, host_bound.xi, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(fast.mu, host.mu, rtol=1e-6, atol=1e-9 * np.max(np.abs(host.mu)))
    assert fast.elbo == pytest.approx(host.elbo, rel=1e-10)
    assert np.all(np.diff(fast.elbo_trace) >= -1e-9 * np.abs(fast.elbo_trace[1:]))


@pytest.mark.parametrize("kind", ["classification", "regression"])
def test_compiled_robust_factors_make_the_host_schedules_moves(kind):
    """The robust RVM's factors: q(omega) held until the first convergence (``release``), then
    updated with the rest; for classification the bound's xi and the weights' rates extrapolated."""
    rng = np.random.default_rng(7)
    if kind == "classification":
        Phi, t = random_classification(seed=3, N=N, M=M)
        t[:4] = 1.0 - t[:4]  # flipped labels: outliers

        def factor():
            return F.RobustJaakkolaJordan(t, 2.0, 2.0)
        scale = 1.0
    else:
        Phi, t = random_regression(seed=3, N=N, M=M, noise=0.1)
        t[:3] += 5.0  # gross outliers
        scale = float(np.std(t))

        def factor():
            return F.RobustGaussianNoise(t / scale, 2.0, 2.0, 1e-6, 1e-6)
    Phi = np.column_stack([Phi, np.zeros(N), Phi[:, 1]])
    b0 = 1e-6 * 10 ** rng.uniform(-1, 1, Phi.shape[1])
    fits = []
    for use_compiled in (False, True):
        f = factor()
        fits.append((F.schedule(Phi, f, a0=1e-6, b0=b0, target_scale=scale, compiled=use_compiled), f))
    (host, host_f), (fast, fast_f) = fits
    events = host.trace_events
    assert host.converged and not host_f.held and not fast_f.held
    assert fast.num_moves == host.num_moves and fast.num_passes == host.num_passes
    np.testing.assert_array_equal(fast.active, host.active)
    np.testing.assert_array_equal(fast.trace_events, events)
    np.testing.assert_allclose(fast.elbo_trace, host.elbo_trace, rtol=1e-9)
    np.testing.assert_allclose(fast_f.omega_rate, host_f.omega_rate, rtol=1e-6)
    assert fast.elbo == pytest.approx(host.elbo, rel=1e-10)
    assert np.all(np.diff(fast.elbo_trace) >= -1e-9 * np.abs(fast.elbo_trace[1:]))


def test_compiled_true_for_a_factor_without_a_compiled_form_is_a_named_error():
    class OwnNoise(F.GaussianNoise):  # a factor of the caller's: the program has no form for it
        pass

    class OwnProbit(F.MultinomialProbit):
        pass

    Phi, t, _ = _problem(0)
    with pytest.raises(ValueError, match="compiled"):
        F.schedule(Phi, OwnNoise(t, 1e-6, 1e-6), compiled=True)
    with pytest.raises(ValueError, match="compiled"):
        F.schedule(Phi, OwnProbit(np.digitize(t, np.quantile(t, [1 / 3, 2 / 3])), 3), compiled=True)


def test_cavi_compiled_is_the_host_fast_fit_and_names_what_it_does_not_fit():
    import ppl_sbl
    from ppl_sbl.models import rvm

    Phi, t, _ = _problem(21)
    host = ppl_sbl.CAVI(rvm.regression, schedule="fast", progress_bar=False).run(Phi, t)
    fast = ppl_sbl.CAVI(rvm.regression, schedule="fast", compiled=True, progress_bar=False).run(Phi, t)
    assert fast.schedule == "fast" and fast.converged and fast.num_moves == host.num_moves
    assert fast.elbo == pytest.approx(host.elbo, rel=1e-10)
    # the model's own ELBO (the guide's JAX transcription of the paper's) at the compiled fit's state
    assert fast.elbo == pytest.approx(float(fast.guide_spec.elbo(fast.state, fast.data)), rel=1e-9)
    np.testing.assert_allclose(fast.elbo_trace, host.elbo_trace, rtol=1e-10)
    np.testing.assert_array_equal(fast.relevance_indices, host.relevance_indices)
    np.testing.assert_allclose(fast.predict(Phi[:5]), host.predict(Phi[:5]), rtol=1e-8, atol=1e-10)
    labels = (t > np.median(t)).astype(float)
    host = ppl_sbl.CAVI(rvm.classification, schedule="fast", progress_bar=False).run(Phi, labels)
    fast = ppl_sbl.CAVI(rvm.classification, schedule="fast", compiled=True, progress_bar=False).run(Phi, labels)
    assert fast.elbo == pytest.approx(host.elbo, rel=1e-10) and fast.num_moves == host.num_moves
    assert fast.elbo == pytest.approx(float(fast.guide_spec.elbo(fast.state, fast.data)), rel=1e-9)
    np.testing.assert_allclose(fast.predict(Phi[:5]), host.predict(Phi[:5]), rtol=1e-7, atol=1e-10)
    with pytest.raises(ValueError, match="compiled=False"):
        ppl_sbl.CAVI(rvm.regression, schedule="fast", compiled=True, progress_bar=False).run(
            Phi, t, groups=np.arange(Phi.shape[1]) // 2)


@pytest.mark.parametrize("a0,b0", [(1e-6, 1e-6), (2.0, 0.5), (0.3, 5.0)])
def test_jax_optimum_is_the_host_optimum_over_many_orders_of_magnitude(a0, b0):
    """The compiled schedule's maximiser of (1) (warm Newton steps, Cardano's formula in real
    arithmetic where they do not settle) against the host's (Cardano's formula in complex
    arithmetic for every row), from good and from far-off guesses, q^2 / s near 1 included."""
    import jax.numpy as jnp

    from ppl_sbl.fast_ard.algebra import optimum_unchecked

    rng = np.random.default_rng(11)
    n = 64
    s = 10 ** rng.uniform(-6, 6, n)
    ratio = np.concatenate([1.0 + 10 ** rng.uniform(-6, -1, n // 2), 10 ** rng.uniform(-2, 2, n - n // 2)])
    q = np.sqrt(ratio * s) * rng.choice([-1.0, 1.0], n)
    x, value = optimum_unchecked(s, q, a0, b0)
    for start in (x * 10 ** rng.uniform(-0.1, 0.1, n), x * 10 ** rng.uniform(-4, 4, n)):
        rows = np.arange(n) != 5  # a row left out gives NaN
        got, got_value = (np.asarray(v) for v in J.warm_optimum(
            jnp.asarray(s), jnp.asarray(q), a0, b0, jnp.asarray(start), jnp.asarray(rows)))
        assert np.isnan(got[5]) and np.isnan(got_value[5])
        np.testing.assert_allclose(got[rows], x[rows], rtol=1e-9)
        np.testing.assert_allclose(got_value[rows], value[rows], rtol=1e-9, atol=1e-12)


def _lapack_calls(text):
    """{(LAPACK kernel, its number of batch dimensions)} of a lowered program's text."""
    return set(re.findall(r'custom_call @(lapack_\w+)\([^\n]*?num_batch_dims = "(\d+)"', text))


def test_vmapped_factorisations_take_one_fit_a_call_on_a_cpu(monkeypatch):
    """The compiled program's factorisations under ``jax.vmap`` equal NumPy's, matrix by matrix; on
    a CPU each LAPACK call factors one fit's matrix (jaxlib's batched CPU kernels wait for their parts
    on the pool that runs the program: two at once on two cores never return), elsewhere the call
    keeps the batch."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(3)
    A = rng.normal(size=(4, 5, 5))
    P = A @ A.transpose(0, 2, 1) + 5.0 * np.eye(5)
    b = rng.normal(size=5)
    L = np.linalg.cholesky(P)
    want = (L, np.linalg.eigvalsh(P), np.linalg.slogdet(P)[1], np.linalg.solve(P, b), np.linalg.inv(L))

    def batch_dims(backend):
        monkeypatch.setattr(jax, "default_backend", lambda: backend)
        fn = jax.jit(jax.vmap(lambda P: (J.cholesky(P), J.eigvalsh(P), J.slogdet(P)[1],
                                         J.cho_solve(J.cholesky(P), jnp.asarray(b)),
                                         J.lower_solve(J.cholesky(P), jnp.eye(5)))))
        for got, ref in zip(fn(P), want):
            np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
        return _lapack_calls(fn.lower(P).as_text())

    names = {"lapack_dpotrf_ffi", "lapack_dsyevd_ffi", "lapack_dgetrf_ffi", "lapack_dtrsm_ffi"}
    assert batch_dims("cpu") == {(name, "0") for name in names}
    assert batch_dims("gpu") == {(name, "1") for name in names}


def test_vmapped_optima_share_the_fallback_and_equal_each_alone():
    """Fits vmapped side by side (``axis_name``) take the fallback the most demanding one needs: one
    whose guesses are the optima (no fallback), one with two far-off guesses (Cardano's formula on a
    few rows) and one with every guess far off (on all rows); each gets the optimum it gets alone,
    and that is the host's (Cardano's formula in complex arithmetic for every row)."""
    import jax
    import jax.numpy as jnp

    from ppl_sbl.fast_ard.algebra import optimum_unchecked

    rng = np.random.default_rng(5)
    n, a0, b0 = 48, 1e-6, 1e-6
    s = 10 ** rng.uniform(-3, 3, (3, n))
    q = np.sqrt(10 ** rng.uniform(-1, 2, (3, n)) * s) * rng.choice([-1.0, 1.0], (3, n))
    rows = np.ones((3, n), dtype=bool)
    rows[:, 7] = False  # a row left out gives NaN
    exact = np.stack([optimum_unchecked(s[i], q[i], a0, b0) for i in range(3)], axis=1)  # (x, value) by fit
    start = exact[0].copy()
    start[1, :2] *= 1e8
    start[2] *= 1e8
    alone = [J.warm_optimum(jnp.asarray(s[i]), jnp.asarray(q[i]), a0, b0, jnp.asarray(start[i]),
                            jnp.asarray(rows[i])) for i in range(3)]
    together = jax.vmap(lambda *a: J.warm_optimum(a[0], a[1], a0, b0, a[2], a[3], axis_name="fits"),
                        axis_name="fits")(jnp.asarray(s), jnp.asarray(q), jnp.asarray(start), jnp.asarray(rows))
    for i in range(3):
        for got, want, host in zip(together, alone[i], exact):
            np.testing.assert_allclose(np.asarray(got[i]), np.asarray(want), rtol=1e-12)
            assert np.isnan(np.asarray(got[i])[7])
            np.testing.assert_allclose(np.asarray(got[i])[rows[i]], host[i][rows[i]], rtol=1e-9, atol=1e-12)


def test_many_fits_in_one_program_are_the_fits_one_by_one():
    """``run_many``: three random problems of one shape with their own hyperpriors, one after the
    other in one program, in two groups on two threads (the second group filled up with a copy),
    their buffers grown together and their traces taken off together: every fit is the host
    loop's fit of its problem (the vmapped batches: the next test)."""
    lanes, hosts = [], []
    for seed in (21, 22, 23):
        Phi, t, rng = _problem(seed)
        a0, b0, e0 = 10 ** rng.uniform(-0.5, 0.5), 10 ** rng.uniform(-1, 0), 10 ** rng.uniform(-1, 0.5)
        host, host_noise = _fit(Phi, t, a0, b0, e0, False)
        s = float(np.std(t))
        work, a0s, b0s, _, offset = standard_units(Phi, a0, b0, s)
        noise = F.GaussianNoise(t / s, e0, e0)
        lanes.append((work, noise, a0s, b0s, 1e-9, 1000, None, True))
        hosts.append((host, host_noise, offset))
    assert max(len(h.active) for h, _, _ in hosts) > 16  # the buffers grow
    fits = compiled.run_many(lanes, 1, capacity=16, trace_length=64, threads=2)
    for fields, lane, (host, host_noise, offset) in zip(fits, lanes, hosts):
        fit = F.FastFit(**fields)
        _assert_same_fit(host, fit._replace(elbo_trace=fit.elbo_trace + offset), host_noise, lane[1])
    with pytest.raises(ValueError, match="one shape"):
        compiled.run_many([lanes[0], (lanes[1][0][:, :-1],) + lanes[1][1:]])


def test_fit_grid_fast_fits_are_the_fast_fits_one_by_one(monkeypatch):
    """``fit_grid(schedule="fast")`` on a grid of kernel widths, vmapped: every fit is the fast
    schedule's fit of its design one by one (``CAVI(schedule="fast")``, whose moves the compiled
    program makes), with the same trace, active set and predictions; the grid compares by ELBO.
    The vmapped program factors one fit's matrix per LAPACK call: jaxlib's CPU kernels split a
    batched call over the thread pool that runs the program and wait for the parts, and two such
    calls at once on two cores never return."""
    import ppl_sbl
    from ppl_sbl.models import rvm

    d = ppl_sbl.datasets.ripley()
    rows = np.r_[0:20, 125:145]  # 20 points of each class
    X, t = d.X_train[rows], d.t_train[rows]
    widths = [0.5, 2.0, 8.0]
    designs = [ppl_sbl.basis.rbf(X, delta=w, bias=True) for w in widths]
    program, calls = compiled._programs, []
    monkeypatch.setattr(compiled, "_programs", lambda *a, **k: calls.append((a, k)) or program(*a, **k))
    grid = ppl_sbl.fit_grid(rvm.classification, designs, t, names=widths, schedule="fast", batch_size=3)
    lapack = _lapack_calls(program.lower(*calls[0][0], **calls[0][1]).as_text())
    assert {name for name, _ in lapack} >= {"lapack_dpotrf_ffi", "lapack_dsyevd_ffi", "lapack_dtrsm_ffi"}
    assert {batch for _, batch in lapack} == {"0"}
    assert list(grid) == widths
    for w, Phi in zip(widths, designs):
        one = ppl_sbl.CAVI(rvm.classification, schedule="fast", progress_bar=False).run(Phi, t)
        g = grid[w]
        assert g.schedule == "fast" and g.converged and g.num_moves == one.num_moves
        np.testing.assert_allclose(g.elbo_trace, one.elbo_trace, rtol=1e-10)
        np.testing.assert_array_equal(g.relevance_indices, one.relevance_indices)
        np.testing.assert_allclose(g.predict(Phi[:5]), one.predict(Phi[:5]), rtol=1e-9)
    assert ppl_sbl.compare(grid).index[0] == max(grid, key=lambda k: grid[k].elbo)
    with pytest.raises(ValueError, match="schedule"):
        ppl_sbl.fit_grid(rvm.classification, designs, t, schedule="fastest")
    with pytest.raises(ValueError, match="no `groups`"):
        ppl_sbl.fit_grid(rvm.classification, designs, t, schedule="fast", groups=np.arange(designs[0].shape[1]) // 2)
    with pytest.raises(ValueError, match="schedule='sweep'"):
        ppl_sbl.fit_grid(rvm.multiclass, designs, np.arange(len(t)) % 3, schedule="fast")


def test_a_compiled_fit_with_a_progress_bar_reports_its_passes_and_its_program_is_cached(capsys, caplog):
    """The progress bar is fed between calls of the program, which holds no host callback (JAX
    writes no program with one to its persistent compilation cache, and a fit in a new process
    would compile it again): the bar ends at the host loop's count of passes, and JAX caches the
    program of a fit that reports progress."""
    import logging

    import ppl_sbl
    from ppl_sbl.models import rvm

    Phi, t, _ = _problem(22)
    ends = []
    for use_compiled in (False, True):  # the host loop reports after every pass
        res = ppl_sbl.CAVI(rvm.regression, schedule="fast", compiled=use_compiled, progress_bar=True,
                           max_sweeps=500).run(Phi, t)
        ends.append((res.num_moves, re.findall(r"(\d+)/500", capsys.readouterr().err)[-1]))
    assert ends[0] == ends[1] and int(ends[0][1]) > 1
    s = float(np.std(t))
    work, a0, b0, _, _ = standard_units(Phi, 1e-6, 1e-6, s)
    with caplog.at_level(logging.DEBUG, logger="jax._src.compiler"):  # a trace buffer of its own: a new program
        compiled.run(work, F.GaussianNoise(t / s, 1e-6, 1e-6), a0, b0, 1e-9, 1000, None, lambda *r: None, True,
                     trace_length=4096)
    said = [r.getMessage() for r in caplog.records if "jit__passes" in r.getMessage()]
    if not said:
        pytest.skip("JAX's persistent compilation cache is off in this run")
    assert not any("callback" in m for m in said), said


def test_the_compiled_fit_runs_on_one_blas_thread_and_gives_the_callers_setting_back(monkeypatch):
    """The program's LAPACK calls (SciPy's OpenBLAS) run on one thread beside XLA's pool, whatever
    the caller set; the caller's setting holds again after the fit."""
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads():
        return {info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"}

    program, seen = compiled.program, []

    def spy(*args, **kwargs):
        seen.append(blas_threads())
        return program(*args, **kwargs)

    monkeypatch.setattr(compiled, "program", spy)
    Phi, t, _ = _problem(0)
    with threadpool_limits(limits=2, user_api="blas"):
        fit, _ = _fit(Phi, t, 1e-6, 1e-6, 1e-6, True)
        after = blas_threads()
    assert fit.converged and seen and all(threads == {1} for threads in seen)
    assert after == {2}


@pytest.mark.parametrize("scale", [None, "row", "column", "scalar"])
@pytest.mark.parametrize("layout", ["C", "F", "transposed", "strided"])
def test_padded_copies_any_layout_into_the_corner(layout, scale):
    """The padded copy of a design (blocks of columns for a layout that is not C-contiguous), its
    columns or rows scaled on the way where asked, is the matrix (times the scale, the same
    products) in the top-left corner of zeros, whatever its layout and however its columns fall on
    the blocks."""
    rng = np.random.default_rng(0)
    base = rng.normal(size=(2 * compiled.COPY_BLOCK + 37, 300))
    A = {"C": base, "F": np.asfortranarray(base), "transposed": base.T, "strided": base[::2, ::3]}[layout]
    factor = {None: None, "row": rng.uniform(0.5, 2.0, (1, A.shape[1])),
              "column": rng.uniform(0.5, 2.0, (A.shape[0], 1)), "scalar": 0.3}[scale]
    shape = (A.shape[0] + 5, A.shape[1] + 11)
    out = compiled.padded(A, shape, factor)
    expected = np.zeros(shape)
    expected[:A.shape[0], :A.shape[1]] = A if factor is None else A * factor
    assert out.flags.c_contiguous and out.shape == shape and out.ctypes.data % compiled.ALIGN == 0
    np.testing.assert_array_equal(out, expected)
