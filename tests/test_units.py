"""The default fits do not depend on the data's units: rescaling the targets t -> r t and the
columns of the design phi_k -> c_k phi_k (scales 1e-8 to 1e8) gives the same relevant set, the same
predictions in the new units (relative 1e-6), the same work (moves or sweeps, within 2x) and an
ELBO that differs by exactly the constant -N ln r of the targets' density; hyperpriors given
explicitly are used as given (``ppl_sbl.priors``)."""
import warnings

import numpy as np
import numpyro
import pytest
from scipy.stats import gamma

import ppl_sbl
from ppl_sbl import basis, datasets
from ppl_sbl.models import robust_rvm, rvm

SCALES = [1e-8, 1e-4, 1.0, 1e4, 1e8]
CAVI = dict(progress_bar=False)


def _sinc():
    d = datasets.sinc(n_train=50, n_test=30, seed=3)
    return (basis.rbf(d.X_train, delta=5.55, bias=True), d.t_train,
            basis.rbf(d.X_test, d.X_train, delta=5.55, bias=True))


def _labels(classes=2):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(40, 2))
    score = X[:, 0] + 0.5 * X[:, 1] + 0.4 * rng.normal(size=40)
    t = (score > 0).astype(float) if classes == 2 else np.digitize(score, [-0.6, 0.6])
    return basis.rbf(X, delta=0.5, bias=True), t, basis.rbf(rng.normal(size=(15, 2)), X, delta=0.5, bias=True)


def _column_scales(M, seed=5):
    return 10.0 ** np.random.default_rng(seed).uniform(-8, 8, M)


def _fit(model, Phi, t, schedule="fast", **hyper):
    res = ppl_sbl.CAVI(model, schedule=schedule, **CAVI).run(Phi, t, **hyper)
    return res


def _mean(res, Phi_new):
    out = res.predict(Phi_new)
    return np.asarray(out[0] if isinstance(out, tuple) else out)


def _work(res):
    return res.num_moves if res.schedule == "fast" else res.num_sweeps


def _assert_same_fit(ref, ref_mean, res, mean, elbo_shift=0.0):
    assert res.converged
    np.testing.assert_array_equal(res.relevance_indices, ref.relevance_indices)
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-6, atol=1e-6 * np.max(np.abs(ref_mean)))
    assert _work(ref) / 2 <= _work(res) <= 2 * _work(ref)
    np.testing.assert_allclose(res.elbo, ref.elbo + elbo_shift, rtol=1e-8, atol=1e-6)


REGRESSIONS = {"rvm.regression": rvm.regression, "robust_rvm.regression": robust_rvm.regression}


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_regression_defaults_do_not_depend_on_the_units_of_t_or_phi(name):
    model = REGRESSIONS[name]
    Phi, t, Phi_new = _sinc()
    ref = _fit(model, Phi, t)
    ref_mean = _mean(ref, Phi_new)
    assert 0 < len(ref.relevance_indices) < Phi.shape[1] // 2
    N = len(t)
    for r in SCALES:
        res = _fit(model, Phi, r * t)
        _assert_same_fit(ref, ref_mean, res, _mean(res, Phi_new) / r, elbo_shift=-N * np.log(r))
        res = _fit(model, r * Phi, t)
        _assert_same_fit(ref, ref_mean, res, _mean(res, r * Phi_new))
    c = _column_scales(Phi.shape[1])
    res = _fit(model, Phi * c, t)
    _assert_same_fit(ref, ref_mean, res, _mean(res, Phi_new * c))


CLASSIFIERS = {"rvm.classification": (rvm.classification, 2), "robust_rvm.classification": (robust_rvm.classification, 2),
               "rvm.multiclass": (rvm.multiclass, 3)}


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_classifier_defaults_do_not_depend_on_the_scale_of_phi(name):
    model, classes = CLASSIFIERS[name]
    Phi, t, Phi_new = _labels(classes)
    ref = _fit(model, Phi, t)
    ref_mean = _mean(ref, Phi_new)
    res = _fit(model, 1e8 * Phi, t)
    _assert_same_fit(ref, ref_mean, res, _mean(res, 1e8 * Phi_new))
    c = _column_scales(Phi.shape[1])  # from 1e-8 to 1e8
    res = _fit(model, Phi * c, t)
    _assert_same_fit(ref, ref_mean, res, _mean(res, Phi_new * c))


def test_the_sweep_converges_to_the_same_fit_at_every_scale():
    Phi, t, Phi_new = _sinc()
    Phi, t, Phi_new = Phi[:30, :31], t[:30], Phi_new[:, :31]
    ref = _fit(rvm.regression, Phi, t, schedule="sweep")
    ref_mean = _mean(ref, Phi_new)
    for r in [1e-8, 1e8]:
        res = _fit(rvm.regression, Phi, r * t, schedule="sweep")
        _assert_same_fit(ref, ref_mean, res, _mean(res, Phi_new) / r, elbo_shift=-len(t) * np.log(r))
    c = _column_scales(Phi.shape[1])
    res = _fit(rvm.regression, Phi * c, t, schedule="sweep")
    _assert_same_fit(ref, ref_mean, res, _mean(res, Phi_new * c))


def test_rvr_does_not_depend_on_the_units_of_y_or_x():
    d = datasets.sinc(n_train=50, n_test=30, seed=3)
    ref = ppl_sbl.RVR().fit(d.X_train, d.t_train)
    ref_mean = ref.predict(d.X_test)
    for r in [1e-8, 1e8]:
        est = ppl_sbl.RVR().fit(d.X_train, r * d.t_train)
        np.testing.assert_array_equal(est.relevance_, ref.relevance_)
        np.testing.assert_allclose(est.predict(d.X_test) / r, ref_mean, rtol=1e-6, atol=1e-6 * np.abs(ref_mean).max())
        est = ppl_sbl.RVR().fit(r * d.X_train, d.t_train)  # delta="scale" follows the inputs' units
        np.testing.assert_array_equal(est.relevance_, ref.relevance_)
        np.testing.assert_allclose(est.predict(r * d.X_test), ref_mean, rtol=1e-6, atol=1e-6 * np.abs(ref_mean).max())


def test_default_rates_are_the_documented_ones_and_explicit_ones_are_kept():
    Phi, t, _ = _sinc()
    data = rvm.regression.closed_form_guide.prepare(Phi, t)
    np.testing.assert_allclose(data.b0, 1e-6 * np.var(t) / np.mean(Phi**2, axis=0), rtol=1e-12)
    np.testing.assert_allclose(data.lik.f0, 1e-6 * np.var(t), rtol=1e-12)
    groups = np.arange(Phi.shape[1]) % 3
    data = rvm.regression.closed_form_guide.prepare(Phi, t, groups=groups)
    m = np.mean(Phi**2, axis=0)
    np.testing.assert_allclose(data.b0, [1e-6 * np.var(t) / m[groups == g].mean() for g in range(3)], rtol=1e-12)
    data = rvm.regression.closed_form_guide.prepare(Phi, t, a0=2.0, b0=3.0, e0=4.0, f0=5.0)
    assert (float(data.a0), float(data.b0), float(data.lik.e0), float(data.lik.f0)) == (2.0, 3.0, 4.0, 5.0)
    # the NumPyro program states the same priors: its Gamma sites carry the rates the guide uses
    values = {"alpha": np.ones(Phi.shape[1]), "w": np.zeros(Phi.shape[1]), "gamma": 1.0}

    def trace(**hyper):
        program = numpyro.handlers.substitute(numpyro.handlers.seed(rvm.regression, 0), data=values)
        return numpyro.handlers.trace(program).get_trace(Phi, t, **hyper)

    tr = trace()
    x = np.linspace(0.5, 2.0, Phi.shape[1])
    np.testing.assert_allclose(tr["alpha"]["fn"].log_prob(x), np.sum(gamma.logpdf(x, 1e-6, scale=m / (1e-6 * np.var(t)))),
                               rtol=1e-12)
    np.testing.assert_allclose(tr["gamma"]["fn"].log_prob(2.0), gamma.logpdf(2.0, 1e-6, scale=1 / (1e-6 * np.var(t))),
                               rtol=1e-12)
    tr = trace(b0=3.0, f0=5.0)
    np.testing.assert_allclose(tr["alpha"]["fn"].log_prob(x), np.sum(gamma.logpdf(x, 1e-6, scale=1 / 3.0)), rtol=1e-12)
    np.testing.assert_allclose(tr["gamma"]["fn"].log_prob(2.0), gamma.logpdf(2.0, 1e-6, scale=1 / 5.0), rtol=1e-12)


def test_explicit_absolute_priors_still_depend_on_the_units():
    """What the defaults fix: with the absolute rate b0 = f0 = 1e-6 targets in small units look like
    noise (nothing relevant), as the user who asks for that prior gets."""
    Phi, t, _ = _sinc()
    small = _fit(rvm.regression, Phi, 1e-8 * t, b0=1e-6, f0=1e-6)
    assert len(small.relevance_indices) < len(_fit(rvm.regression, Phi, 1e-8 * t).relevance_indices)


def test_robust_rvm_old_hyperparameter_names_warn_and_mean_the_new_ones():
    Phi, t, _ = _labels()
    new = _fit(robust_rvm.classification, Phi, t, a0=1e-3, b0=1e-3, c0=1.5, d0=1.5)
    with pytest.warns(FutureWarning, match="`a=` is deprecated; use `a0=`"):
        old = _fit(robust_rvm.classification, Phi, t, a=1e-3, b=1e-3, c=1.5, d=1.5)
    np.testing.assert_array_equal(old.elbo_trace, new.elbo_trace)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _fit(robust_rvm.regression, *_sinc()[:2], c0=2.0, d0=2.0)


@pytest.mark.parametrize("kind", ["p", "s"])
def test_grid_rvm_defaults_do_not_depend_on_the_units_of_t_or_x(kind):
    from ppl_sbl.models import grid_rvm

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4, 3))
    t = X[:, 0, 1] - X[:, 2, 0] + 0.1 * rng.normal(size=40)
    X_new = rng.normal(size=(10, 4, 3))
    ref = _fit(grid_rvm.regression, X, t, schedule="sweep", kind=kind)
    ref_mean = _mean(ref, X_new)
    for r in [1e-8, 1e8]:
        res = _fit(grid_rvm.regression, X, r * t, schedule="sweep", kind=kind)
        _assert_same_fit(ref, ref_mean, res, _mean(res, X_new) / r, elbo_shift=-len(t) * np.log(r))
        res = _fit(grid_rvm.regression, r * X, t, schedule="sweep", kind=kind)
        _assert_same_fit(ref, ref_mean, res, _mean(res, r * X_new))
