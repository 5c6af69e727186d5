"""The smoke subset (``pytest -m smoke``, with the README's first two examples in test_readme.py):
the installed package imports and switches float64 on, and one small fit of each model agrees
with an answer computed another way (NumPyro's Monte Carlo ELBO, the Gaussian evidence written
out with NumPy, the known labels) and comes back from ``save``/``ppl_sbl.load`` with identical
predictions. CI runs it on its own in an environment holding the newest JAX and NumPyro that
``pip install .`` accepts, so each check is small and touches what a new JAX or NumPyro could
change: jit and x64 numerics, NumPyro's tracing, the portable file."""
import math

import jax.numpy as jnp
import numpy as np
import pytest

import ppl_sbl
from ppl_sbl import basis, datasets
from ppl_sbl.models import gplvm, grid_rvm, robust_rvm, rvm, sequential_sbl, super_sparse

from problems import random_classification, random_regression

# in CI's second step (``pytest -m smoke``) and with ``pytest -m slow``; the default run checks the
# same fits more thoroughly in the models' own test files
pytestmark = [pytest.mark.smoke, pytest.mark.slow]

CAVI = dict(progress_bar=False, max_sweeps=1000)


def _round_trip(result, tmp_path):
    back = ppl_sbl.load(result.save(tmp_path / "fit"))
    assert type(back) is type(result)
    return back


def _same_predictions(result, back, *new):
    got, expected = back.predict(*new), result.predict(*new)
    for a, b in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)):
        np.testing.assert_array_equal(a, b)


def test_import_switches_float64_on():
    assert isinstance(ppl_sbl.__version__, str) and ppl_sbl.__version__
    assert jnp.zeros(1).dtype == jnp.float64
    assert callable(ppl_sbl.CAVI) and callable(ppl_sbl.load)


def test_rvm_regression_elbo_equals_monte_carlo_and_round_trips(tmp_path):
    # the README's first example (its compiled programs are shared with it through the run's cache)
    d = datasets.sinc()
    Phi = basis.rbf(d.X_train, delta=5.55, bias=True)
    res = ppl_sbl.CAVI(rvm.regression).run(Phi, d.t_train)
    check = ppl_sbl.check_guide(res)
    assert check.passed and check.bound == "none", check.message
    Phi_test = basis.rbf(d.X_test, d.X_train, delta=5.55, bias=True)
    mean, _ = res.predict(Phi_test)
    assert np.sqrt(np.mean((mean - d.t_test) ** 2)) < 0.1  # t_test: sin(x)/x without the U(-0.2, 0.2) noise
    _same_predictions(res, _round_trip(res, tmp_path), Phi_test[:20])


def test_rvm_classification_finds_the_boundary_and_round_trips(tmp_path):
    r = np.random.default_rng(0)
    X, X_new = r.normal(size=(40, 2)), r.normal(size=(200, 2))
    t = (X[:, 0] + 0.5 * X[:, 1] + 0.5 * r.normal(size=40) > 0).astype(float)  # noisy labels of a line
    res = ppl_sbl.CAVI(rvm.classification, **CAVI).run(basis.rbf(X, delta=0.5, bias=True), t)
    Phi_new = basis.rbf(X_new, X, delta=0.5, bias=True)
    assert np.mean((res.predict(Phi_new) > 0.5) == (X_new[:, 0] + 0.5 * X_new[:, 1] > 0)) >= 0.85
    assert np.all(np.diff(res.elbo_trace) >= -1e-9 * np.abs(res.elbo_trace[1:]))
    _same_predictions(res, _round_trip(res, tmp_path), Phi_new[:7])


def test_rvm_multiclass_separates_three_clusters_and_round_trips(tmp_path):
    r = np.random.default_rng(0)
    centres = 3.0 * np.array([[1.0, 0.0], [-0.5, 0.87], [-0.5, -0.87]])
    labels = np.repeat(np.arange(3), 10)
    Phi = np.column_stack([np.ones(30), centres[labels] + 0.5 * r.standard_normal((30, 2))])
    res = ppl_sbl.CAVI(rvm.multiclass, **CAVI).run(Phi, labels)
    probs = np.asarray(res.predict(Phi))
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-9)
    assert np.mean(probs.argmax(axis=1) == labels) >= 0.9  # clusters 3 apart, spread 0.5
    _same_predictions(res, _round_trip(res, tmp_path), Phi[:7])


def test_grid_rvm_product_rule_finds_the_table_and_round_trips(tmp_path):
    r = np.random.default_rng(1)
    W = np.zeros((5, 3))
    W[:2, :2] = [[1.0, -1.0], [2.0, 0.5]]
    X, X_new = r.standard_normal((50, 5, 3)), r.standard_normal((20, 5, 3))
    t = np.einsum("nij,ij->n", X, W) + 0.2 * r.standard_normal(50)
    res = ppl_sbl.CAVI(grid_rvm.regression, **CAVI).run(X, t, kind="p")
    assert np.all(np.diff(res.elbo_trace) >= -1e-9 * np.abs(res.elbo_trace[1:]))
    mean, _ = res.predict(X_new)
    truth = np.einsum("nij,ij->n", X_new, W)
    assert np.sqrt(np.mean((mean - truth) ** 2)) < 0.2 * np.std(truth)
    _same_predictions(res, _round_trip(res, tmp_path), X_new[:7])


def test_robust_rvm_regression_down_weights_the_outliers_and_round_trips(tmp_path):
    Phi, t = random_regression(2)
    t = t.copy()
    t[:2] += 6.0  # two outliers
    res = ppl_sbl.CAVI(robust_rvm.regression, **CAVI).run(Phi, t)
    assert set(np.argsort(res.outlier_score)[:2]) == {0, 1}  # the shifted points have the lowest weights
    assert np.all(np.diff(res.elbo_trace) >= -1e-9 * np.abs(res.elbo_trace[1:]))
    _same_predictions(res, _round_trip(res, tmp_path), Phi[:7])


def test_robust_rvm_classification_elbo_never_decreases_and_round_trips(tmp_path):
    Phi, t = random_classification(3)
    res = ppl_sbl.CAVI(robust_rvm.classification, **CAVI).run(Phi, t)
    assert np.all(np.isfinite(res.elbo_trace)) and res.elbo < res.elbo_exact  # the JJ bound lies below
    assert np.all(np.diff(res.elbo_trace) >= -1e-9 * np.abs(res.elbo_trace[1:]))
    _same_predictions(res, _round_trip(res, tmp_path), Phi[:7])


def test_sequential_sbl_evidence_equals_direct_gaussian_and_round_trips(tmp_path):
    Phi, t = random_regression(4, N=30, M=10)
    state = sequential_sbl.fit(Phi, t, noise_var=0.1)
    a = np.isfinite(state.alpha)
    C = 0.1 * np.eye(len(t)) + (Phi[:, a] / state.alpha[a]) @ Phi[:, a].T
    direct = -0.5 * (len(t) * math.log(2 * math.pi) + np.linalg.slogdet(C)[1] + t @ np.linalg.solve(C, t))
    assert state.log_marginal_likelihood == pytest.approx(direct, rel=1e-9)
    back = _round_trip(state, tmp_path)
    assert back.log_marginal_likelihood == state.log_marginal_likelihood
    for x, y in zip(back.predict(range(5)), state.predict(range(5))):
        np.testing.assert_array_equal(x, y)


def test_super_sparse_separates_two_classes_and_round_trips(tmp_path):
    X = np.random.default_rng(0).normal(size=(30, 2))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    fit = super_sparse.fit(X, y, m=3, max_steps=10)
    assert np.mean(np.sign(fit.decision_function(X)) == y) >= 0.9
    back = _round_trip(fit, tmp_path)
    np.testing.assert_array_equal(back.decision_function(X), fit.decision_function(X))


@pytest.mark.filterwarnings("ignore::ppl_sbl.ConvergenceWarning")  # 30 steps: enough to label the data
def test_gplvm_labels_its_training_data_and_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    s = rng.uniform(-2, 2, size=24)
    Y = np.stack([np.sin(s), np.cos(s), s, s**2 / 2], 1) + 0.05 * rng.normal(size=(24, 4))
    Z = np.stack([np.where(s > 0, 1.0, -1.0), np.where(s > 0, -1.0, 1.0)], 1)
    res = gplvm.fit(Y, Z, latent_dim=2, num_inducing=5, max_steps=30, progress_bar=False)
    labels = res.predict(Y)
    assert np.isfinite(res.elbo) and np.mean(labels.argmax(1) == Z.argmax(1)) >= 0.9
    np.testing.assert_array_equal(_round_trip(res, tmp_path).predict(Y), labels)


def test_rvr_estimator_fits_sinc_and_pickles():
    pytest.importorskip("sklearn")
    import pickle

    d = datasets.sinc(n_train=50, n_test=30, seed=0)
    rvr = ppl_sbl.RVR().fit(d.X_train, d.t_train)
    mean, std = rvr.predict(d.X_test, return_std=True)
    # t_test: sin(x)/x without noise (the training targets carry U(-0.2, 0.2) noise)
    assert np.sqrt(np.mean((mean - d.t_test) ** 2)) < 0.1 and np.all(std > 0)
    assert 0 < len(rvr.relevance_) < len(d.t_train)
    back = pickle.loads(pickle.dumps(rvr))
    np.testing.assert_array_equal(back.predict(d.X_test), mean)
