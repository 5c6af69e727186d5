"""Scale: every CAVI model on designs scaled by 1e-6 ... 1e6 and targets scaled likewise.

For each scale, two fits:

* with the default hyperpriors: the ELBO trace never falls by more than rounding, and a fit that
  says it ``converged`` is at a fixed point: one more sweep from its final state moves the state
  (:func:`ppl_sbl.engine.state_change`: prior and data precisions, relative) by a small
  fraction and the ELBO by at most about ``tol``. Gamma(1e-6, 1e-6) hyperpriors are not
  scale-free (b0 = 1e-6 caps E[alpha] near 5e5, which is not vague once Phi is scaled by 1e6),
  so the fits are compared with the unscaled one only where the hyperpriors stay vague: designs
  scaled down and targets scaled up;
* with the hyperpriors scaled along (the model of the unscaled problem, in other units): the
  same checks, and the fit is the unscaled fit in other units: the same predictions (means scaled
  by the target's scale, classification probabilities unchanged), the ELBO shifted by the
  Jacobian, -N ln r for targets scaled by r, and for scaled designs the same number of sweeps.

The fast schedule (``schedule="fast"``) of the RVM and the robust RVM, the derived guide of RVM
regression, and the issue's example (the README's sinc with its low-rank RBF design, which takes
the factored q(w) update) are checked the same way.
"""
import math

import jax
import numpy as np
import pytest

import ppl_sbl
from ppl_sbl import engine
from ppl_sbl.models import grid_rvm, robust_rvm, rvm

SCALES = (1e-6, 1e-3, 1.0, 1e3, 1e6)
TOL = 1e-9


def _regression(seed=0, N=30, M=8):
    r = np.random.default_rng(seed)
    Phi = np.column_stack([np.ones(N), r.standard_normal((N, M - 1))])
    w = np.zeros(M)
    w[:3] = [0.5, 2.0, -1.5]
    return Phi, Phi @ w + 0.3 * r.standard_normal(N), np.column_stack([np.ones(20), r.standard_normal((20, M - 1))])


def _classification(seed=1, N=40, M=6):
    Phi, t, new = _regression(seed, N, M)
    return Phi, (t + 0.5 * np.random.default_rng(seed + 10).standard_normal(N) > 0).astype(float), new


def _table(seed=2, N=40, shape=(3, 3), labels=False):
    r = np.random.default_rng(seed)
    X = r.standard_normal((N,) + shape)
    t = X[:, 0, 0] - X[:, 1, 2] + 0.2 * r.standard_normal(N)
    return X, ((t > 0).astype(float) if labels else t), r.standard_normal((20,) + shape)


def _scaled_hyper(name, s, r):
    """Hyperpriors of the same model in other units: w -> w r / s, so a precision of w scales by
    (s / r)^2 (each of the p-grid's two factors of a square table by s / r), gamma by 1 / r^2;
    a Gamma(a, b) prior of x scales to Gamma(a, b / c) for c x."""
    alpha = (s / r) ** 2
    if name.startswith("grid"):
        row = s / r if name.endswith("p") else alpha
        hyper = dict(b0=1e-6 / row, d0=1e-6 / row)
        return hyper | (dict(f0=1e-6 * r * r) if "reg" in name else {})
    if name.startswith("robust"):
        base = 1e-6 if "reg" in name else 1e-5
        return dict(b=base / alpha) | (dict(f0=1e-6 * r * r) if "reg" in name else {})
    return dict(b0=1e-6 / alpha) | (dict(f0=1e-6 * r * r) if "reg" in name else {})


# name: (model, problem, kwargs, fast schedule)
MODELS = {
    "rvm_reg": (rvm.regression, _regression, {}, True),
    "rvm_clf": (rvm.classification, _classification, {}, True),
    "robust_reg": (robust_rvm.regression, _regression, {}, True),
    "robust_clf": (robust_rvm.classification, _classification, {}, True),
    "grid_reg_p": (grid_rvm.regression, _table, {"kind": "p"}, False),
    "grid_reg_s": (grid_rvm.regression, _table, {"kind": "s"}, False),
    "grid_clf_p": (grid_rvm.classification, lambda: _table(labels=True), {"kind": "p"}, False),
    "grid_clf_s": (grid_rvm.classification, lambda: _table(labels=True), {"kind": "s"}, False),
}


def _scales(name, guide=None):
    """(design scale, target scale) pairs: each design scale, and each target scale for the
    models with a continuous target (the extremes only for the derived guide, whose sweeps take
    longer)."""
    pairs = [(s, 1.0) for s in SCALES]
    if "reg" in name:
        pairs += [(1.0, r) for r in SCALES if r != 1.0 and (guide is None or r in (SCALES[0], SCALES[-1]))]
    return pairs


def _check_trace(res, what):
    trace = res.elbo_trace
    assert np.all(np.isfinite(trace)), what
    steps = np.diff(trace)
    allowed = 1e-9 * np.abs(trace[1:]) + 1e-10
    assert np.all(steps >= -allowed), (what, steps.min(), int(np.argmin(steps)))


def _one_more_sweep(g):
    """(state change, ELBO before, ELBO after) of one more sweep of guide g from a state, in one
    program (kept by the guide for every later fit of the same shapes)."""

    def one_more_sweep(state, data):
        after = g.update(state, data)
        moved = engine.state_change(engine.summary(g, state, data), engine.summary(g, after, data))
        return moved, g.elbo(state, data), g.elbo(after, data)

    return one_more_sweep


def _check_fixed_point(res, what, state_bound, elbo_bound):
    """``converged`` means the fixed point: one more sweep from the final state moves the state by
    at most ``state_bound`` (relative) and the ELBO by at most ``elbo_bound`` |ELBO|."""
    if not res.converged:
        assert res.num_sweeps >= 20000 or res.schedule == "fast", what  # stopped only by max_sweeps
        return
    g = res.guide_spec
    moved, before, now = (float(x) for x in g.compiled(("test_scale", "one more sweep"), _one_more_sweep(g))(
        res.state, res.data))
    assert moved <= state_bound, (what, moved)
    assert abs(now - before) <= elbo_bound * abs(now) + 1e-10, (what, now - before)


def _predict(res, new):
    out = res.predict(new)
    return out if isinstance(out, tuple) else (out, None)


def _run_model(name, schedule, guide=None):
    model, problem, kwargs, _ = MODELS[name]
    X, t, new = problem()
    # the fast schedule stops at the sweep's fixed point to the sweep's own tolerance
    state_bound = 10 * math.sqrt(TOL)
    elbo_bound = 10 * TOL
    cavi = ppl_sbl.CAVI(model, tol=TOL, progress_bar=False, schedule=schedule, **({"guide": guide} if guide else {}))
    defaults, fits = {}, {}
    for s, r in _scales(name, guide):
        what = (name, schedule, guide, s, r)
        defaults[s, r] = cavi.run(X * s, t * r, **kwargs)
        _check_trace(defaults[s, r], what + ("default hyperpriors",))
        _check_fixed_point(defaults[s, r], what + ("default hyperpriors",), state_bound, elbo_bound)
        fits[s, r] = cavi.run(X * s, t * r, **kwargs, **_scaled_hyper(name, s, r))
        _check_trace(fits[s, r], what + ("scaled hyperpriors",))
        _check_fixed_point(fits[s, r], what + ("scaled hyperpriors",), state_bound, elbo_bound)
    # with the default hyperpriors, where they stay vague (designs scaled down, targets scaled up:
    # the coefficients grow, so b0 and f0 stay far below E[w^2] and the squared residuals), the fit
    # barely depends on the scale: the irrelevant coefficients' precisions, capped near
    # sqrt(h_k / 2 b0), differ, and nothing else (a start at the prior mean E[alpha] = 1 left the
    # sweeps on a plateau there and predicted nothing: errors of 0.5 to 4 on this scale)
    m0 = _predict(defaults[1.0, 1.0], new)[0]
    for (s, r), res in defaults.items():
        if s <= 1.0 and r >= 1.0:
            mean = _predict(res, new * s)[0] / r
            bound = 2e-2 * np.std(t) if "reg" in name else 1e-2
            assert np.max(np.abs(mean - m0)) <= bound, ((name, schedule, guide, s, r), np.max(np.abs(mean - m0)))
    # with the hyperpriors scaled along, every fit is the unscaled one in other units
    reference = fits[1.0, 1.0]
    assert reference.converged, name
    mean0, var0 = _predict(reference, new)
    for (s, r), res in fits.items():
        what = (name, schedule, guide, s, r)
        assert res.converged, what
        if schedule == "sweep" and r == 1.0:
            # the same sweeps (the ELBO, hence its relative tolerance, is the same; scaled targets
            # shift it by -N ln r, which moves the ELBO part of the stopping rule a little)
            assert abs(res.num_sweeps - reference.num_sweeps) <= 2, what
        mean, var = _predict(res, new * s)
        if var0 is not None:  # regression: means in the target's units, variances in their square
            np.testing.assert_allclose(mean / r, mean0, rtol=1e-4, atol=1e-4 * np.std(t), err_msg=str(what))
            np.testing.assert_allclose(var / r**2, var0, rtol=1e-3, err_msg=str(what))
        else:
            np.testing.assert_allclose(mean, mean0, atol=1e-4, err_msg=str(what))
        assert res.elbo == pytest.approx(reference.elbo - len(t) * np.log(r), rel=1e-7, abs=1e-6), what


@pytest.mark.parametrize("name", list(MODELS))
def test_sweeps_at_every_scale(name):
    _run_model(name, "sweep")


@pytest.mark.parametrize("name", [n for n, (_, _, _, fast) in MODELS.items() if fast])
def test_fast_schedule_at_every_scale(name):
    _run_model(name, "fast")


def test_derived_guide_at_every_scale():
    _run_model("rvm_reg", "sweep", guide="derived")


def test_issue_example_low_rank_rbf_design():
    """The README's sinc fit with Phi scaled by 1e6 lowered the ELBO by 64 nats at sweep 3 (a start
    at E[alpha] = 1 against data precisions of 1e15, and then cancellation in the factored
    q(w)); scaled by 1e-6 it stopped after 2 sweeps, "converged" with nothing relevant and flat
    predictions. Now both traces rise, both fits are fixed points, and scaled down the fit is
    about the unscaled one (the default b0 caps the many irrelevant RBFs' precisions elsewhere,
    so one more or one less is relevant and the means differ by a few hundredths)."""
    d = ppl_sbl.datasets.sinc()
    Phi = ppl_sbl.basis.rbf(d.X_train, delta=5.55, bias=True)
    cavi = ppl_sbl.CAVI(rvm.regression, tol=TOL, progress_bar=False, schedule="sweep")
    fits = {s: cavi.run(Phi * s, d.t_train) for s in (1e-6, 1.0, 1e6)}
    for s, res in fits.items():
        assert res.data.lik.gram_factor is not None  # the factored (Woodbury) update
        _check_trace(res, ("sinc", s))
        assert res.converged, s
        _check_fixed_point(res, ("sinc", s), 10 * math.sqrt(TOL), 10 * TOL)
    m0, m = fits[1.0].predict(Phi)[0], fits[1e-6].predict(Phi * 1e-6)[0]
    assert np.max(np.abs(m - m0)) <= 0.1 * np.std(d.t_train)
    assert abs(int(fits[1e-6].relevant.sum()) - int(fits[1.0].relevant.sum())) <= 1


def test_mean_refinement_is_skipped_only_where_it_changes_nothing(monkeypatch):
    """The update refines q(w)'s mean through the design only where the data's precisions exceed
    the prior's by more than REFINE_ABOVE. On the README's sinc (spread about 1e4) the fit that
    skips it equals the fit with it forced on every sweep to 1e-9 in the mean and 1e-12 in the
    ELBO. Scaled by 1e6 with the absolute prior rates b0 = f0 = 1e-6 (spread about 1e11) it runs, and the fit equals the forced one to 1e-6;
    without it the ELBO falls by 1e-5 nats (8e-9 relative) at a sweep."""
    from ppl_sbl import gaussian

    d = ppl_sbl.datasets.sinc()
    Phi = np.asarray(ppl_sbl.basis.rbf(d.X_train, delta=5.55, bias=True))
    cavi = ppl_sbl.CAVI(rvm.regression, schedule="sweep", max_sweeps=300, tol=1e-300, progress_bar=False)
    fits = {}
    for name, above in (("default", gaussian.REFINE_ABOVE), ("always", 0.0), ("never", np.inf)):
        monkeypatch.setattr(gaussian, "REFINE_ABOVE", above)
        rvm.REGRESSION_GUIDE._compiled.clear()  # the guide keeps its compiled programs: trace afresh
        jax.clear_caches()
        # the absolute rates b0 = f0 = 1e-6: the default ones follow the design's scale, and the spread with them
        fits[name] = {s: cavi.run(Phi * s, d.t_train, b0=1e-6, f0=1e-6) for s in (1.0, 1e6)}
    mean = {name: {s: np.asarray(r.state.w.mean) for s, r in f.items()} for name, f in fits.items()}
    for s, rtol, elbo_rtol in ((1.0, 1e-9, 1e-12), (1e6, 1e-6, 1e-12)):
        scale = np.max(np.abs(mean["always"][s]))
        np.testing.assert_allclose(mean["default"][s], mean["always"][s], rtol=rtol, atol=rtol * scale)
        assert fits["default"][s].elbo == pytest.approx(fits["always"][s].elbo, rel=elbo_rtol)
        steps = np.diff(fits["default"][s].elbo_trace)
        assert steps.min() >= -1e-12 * abs(fits["default"][s].elbo)
    assert np.diff(fits["never"][1e6].elbo_trace).min() < -1e-9 * abs(fits["never"][1e6].elbo)  # more than tol
