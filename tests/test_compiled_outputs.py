"""The fast schedule with several outputs as one compiled program (ppl_sbl.fast_ard.compiled_outputs)
against the host loop (ppl_sbl.fast_ard.outputs.schedule_outputs): the multinomial probit's
outputs make the same moves, q(y) the same updates, expansions and Newton steps, the fit is the
same to rounding, on random problems of one shape (one compiled program)."""
import numpy as np
import pytest

from ppl_sbl import fast_ard as F
from ppl_sbl.fast_ard import compiled_outputs

N, M, C = 40, 22, 3


def _problem(seed):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=2.0, size=(C, 2))
    t = rng.integers(0, C, N)
    X = centres[t] + rng.normal(size=(N, 2))
    Z = X[rng.choice(N, M - 1, replace=False)]
    width = rng.uniform(1.0, 3.0)
    Phi = np.exp(-np.sum((X[:, None, :] - Z[None, :, :]) ** 2, axis=-1) / width**2)
    return np.column_stack([np.ones(N), Phi]), t, rng


def _fit(Phi, t, a0, b0, use_compiled, **kw):
    factor = F.MultinomialProbit(t, C)
    return F.schedule(Phi, factor, a0=a0, b0=b0, compiled=use_compiled, **kw), factor


def _assert_same_fit(host, fast, host_factor, fast_factor):
    assert fast.num_moves == host.num_moves and fast.num_passes == host.num_passes
    assert fast.converged == host.converged
    np.testing.assert_array_equal(fast.trace_events, host.trace_events)
    np.testing.assert_array_equal(fast.trace_outputs, host.trace_outputs)
    np.testing.assert_allclose(fast.elbo_trace, host.elbo_trace, rtol=1e-10)
    for h, f in zip(host.fits, fast.fits):
        np.testing.assert_array_equal(f.active, h.active)  # the same coefficients, entered in the same order
        assert f.num_moves == h.num_moves
        np.testing.assert_allclose(f.mu, h.mu, rtol=1e-7, atol=1e-9 * np.max(np.abs(h.mu), initial=1.0))
        np.testing.assert_allclose(f.Sigma, h.Sigma, rtol=1e-7, atol=1e-9 * np.max(np.abs(h.Sigma), initial=1.0))
        np.testing.assert_allclose(f.x, h.x, rtol=1e-7)
        np.testing.assert_array_equal(f.supported, h.supported)
    np.testing.assert_allclose(fast_factor.loc, host_factor.loc, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(fast_factor.mean, host_factor.mean, rtol=1e-7, atol=1e-9)


def test_compiled_outputs_need_a_proper_hyperprior_and_a_multinomial_probit():
    Phi, t, _ = _problem(0)
    with pytest.raises(ValueError, match="proper Gamma prior"):
        F.schedule(Phi, F.MultinomialProbit(t, C), a0=0.0, b0=0.0, compiled=True)
    with pytest.raises(ValueError, match="no form"):
        compiled_outputs.run(Phi, F.GaussianNoise(t.astype(float), 1e-6, 1e-6), 1.0, 1.0, 1e-9, 10, None, None, True)


@pytest.mark.parametrize("seed", range(3))
def test_compiled_outputs_make_the_host_schedules_moves(seed):
    """Vague and proper hyperpriors (the two entry rules), random rates and kernel widths; the
    expansion on every pass and the Newton step on the passes that add nothing."""
    Phi, t, rng = _problem(seed)
    a0 = 1e-6 if seed % 2 == 0 else 10 ** rng.uniform(-0.5, 0.5)
    b0 = a0 * 10 ** rng.uniform(-1, 1)
    host, host_factor = _fit(Phi, t, a0, b0, False)
    fast, fast_factor = _fit(Phi, t, a0, b0, True)
    assert host.converged and host.num_moves > 0
    assert F.outputs.NEWTON in host.trace_events  # the Newton step was taken
    _assert_same_fit(host, fast, host_factor, fast_factor)
    assert np.all(np.diff(fast.elbo_trace) >= -1e-9 * np.abs(fast.elbo_trace[1:]))  # the ELBO never decreases


def test_compiled_outputs_grow_their_buffers_and_report_progress_between_passes():
    """A proper hyperprior (every resolved coefficient enters), a first capacity of 16 slots (the
    buffers grow in the middle of an output's turn), a trace buffer that fills (taken off) and a
    report after every pass (the program goes on where it stopped): the same fit as the host
    loop's, and the host loop's reports."""
    Phi, t, _ = _problem(1)
    host_reports, fast_reports = [], []
    host, host_factor = _fit(Phi, t, 1.0, 1.0, False, progress=lambda *a: host_reports.append(a))
    factor = F.MultinomialProbit(t, C)
    out = compiled_outputs.run(Phi, factor, 1.0, 1.0, 1e-9, 1000, None, lambda *a: fast_reports.append(a), True,
                               capacity=16, trace_length=64, report_interval=0.0)
    fast = F.MultiFastFit(**dict(out, fits=tuple(F.FastFit(**f) for f in out["fits"])))
    assert max(len(f.active) for f in fast.fits) > 16 and len(fast.elbo_trace) > 128
    _assert_same_fit(host, fast, host_factor, factor)
    assert [r[:2] + r[3:] for r in fast_reports] == [r[:2] + r[3:] for r in host_reports]
    np.testing.assert_allclose([r[2] for r in fast_reports], [r[2] for r in host_reports], rtol=1e-10)


def test_cavi_fits_the_multiclass_rvm_with_the_compiled_schedule():
    """``CAVI(rvm.multiclass, compiled=True)``: the same fit as the host schedule's (ELBO, q(W),
    predictive probabilities), in the model's own units."""
    import ppl_sbl
    from ppl_sbl.models import rvm

    Phi, t, _ = _problem(2)
    host = ppl_sbl.CAVI(rvm.multiclass, progress_bar=False).run(Phi, t)
    fast = ppl_sbl.CAVI(rvm.multiclass, compiled=True, progress_bar=False).run(Phi, t)
    assert fast.converged and fast.num_moves == host.num_moves
    np.testing.assert_allclose(fast.elbo_trace, host.elbo_trace, rtol=1e-10)
    np.testing.assert_allclose(fast.predict(Phi[:7]), host.predict(Phi[:7]), rtol=1e-7, atol=1e-10)
