"""The scikit-learn layer: every estimator passes scikit-learn's own estimator checks (the checks
that cannot apply are declared by the estimator, with the reason), works inside model selection,
pickles to identical predictions, and agrees with scikit-learn where both fit the same thing."""
import pickle

import joblib
import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.linear_model import ARDRegression
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.model_selection import GridSearchCV
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

import ppl_sbl
from ppl_sbl import datasets
from ppl_sbl.estimators import GPLVMClassifier, RVC, RVR, SuperSparseClassifier, SuperSparseRegressor

# tol=1e-4 for the RVMs (as max_steps for the others): the checks are of the scikit-learn API, and
# on some of their data sets the fast schedule takes thousands of passes to reach the default 1e-9
# (RVR on the regression checks' 200 x 10 set: 9112 passes)
ESTIMATORS = [
    RVR(tol=1e-4),
    RVR(kernel="precomputed", tol=1e-4),
    RVC(tol=1e-4),
    RVC(multi_class="ovr", tol=1e-4),
    GPLVMClassifier(latent_dim=2, num_inducing=5, max_steps=5),
    SuperSparseRegressor(max_steps=20),
    SuperSparseClassifier(max_steps=20),
]


def _expected_failures(estimator):
    declared = getattr(estimator, "_sklearn_expected_failed_checks", None)
    return declared() if declared is not None else {}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failures)
def test_scikit_learn_estimator_checks(estimator, check):
    check(estimator)


def test_declared_failures_carry_reasons():
    for estimator in ESTIMATORS:
        for check, reason in _expected_failures(estimator).items():
            assert check.startswith("check_") and len(reason) > 40, (type(estimator).__name__, check)


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def test_cross_validation_and_grid_search_on_iris(iris):
    X, y = iris
    # tol=1e-6: the one-against-rest fits take hundreds to thousands of passes to reach the default
    # 1e-9 and score the same on every fold at 1e-6; what is checked here is the estimator inside
    # scikit-learn's search (refit=False: the scores and the pick are what is checked, and a fit on
    # all the data is a plain fit)
    search = GridSearchCV(RVC(tol=1e-6), {"multi_class": ["multinomial", "ovr"]}, cv=3, refit=False).fit(X, y)
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    # every fold of each setting (the folds of cross_val_score(..., cv=3): stratified, unshuffled)
    folds = np.array([search.cv_results_[f"split{i}_test_score"] for i in range(3)])
    assert folds.shape == (3, 2) and np.all(folds > 0.8)
    assert search.best_score_ > 0.85
    assert set(search.best_params_) == {"multi_class"}


@pytest.mark.parametrize("multi_class", ["multinomial", "ovr"])
def test_multiclass_probabilities_sum_to_one_and_classes_keep_their_labels(iris, multi_class):
    X, y = iris
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    # tol=1e-6, as in the grid search above (the one-against-rest fits are slow to reach the default
    # 1e-9): what is checked here is the labels and the probabilities. Two of every three flowers
    # (100, as in each of the grid search's folds, whose compiled programs the fit shares) to fit,
    # the third to predict
    fit, held_out = np.arange(150) % 3 != 2, np.arange(150) % 3 == 2
    clf = RVC(multi_class=multi_class, tol=1e-6).fit(X[fit], names[fit])
    P = clf.predict_proba(X[held_out])
    assert P.shape == (50, 3)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(clf.classes_, ["setosa", "versicolor", "virginica"])
    np.testing.assert_array_equal(clf.predict(X[held_out]), clf.classes_[P.argmax(1)])
    assert clf.score(X[held_out], names[held_out]) > 0.85
    assert 0 < clf.n_relevance_vectors_ == len(clf.relevance_) <= 75


def test_compiled_estimators_fit_what_the_host_schedule_fits(iris):
    """``compiled=True`` (the fast schedule as one compiled program, passed to CAVI by the RVMs'
    common fit): the host schedule's fits, the multinomial RVC on two thirds of iris and the RVR on
    the sinc."""
    X, y = iris
    fit = np.arange(150) % 3 != 2
    host, fast = (RVC(tol=1e-6, compiled=compiled).fit(X[fit], y[fit]) for compiled in (False, True))
    assert fast.elbo_ == pytest.approx(host.elbo_, rel=1e-10) and fast.n_iter_ == host.n_iter_
    np.testing.assert_array_equal(fast.relevance_, host.relevance_)
    np.testing.assert_allclose(fast.predict_proba(X[~fit]), host.predict_proba(X[~fit]), rtol=1e-7, atol=1e-10)
    assert RVR(compiled=True).get_params()["compiled"] is True
    d = datasets.sinc(n_train=50, seed=0)
    host, fast = (RVR(compiled=compiled).fit(d.X_train, d.t_train) for compiled in (False, True))
    assert fast.elbo_ == pytest.approx(host.elbo_, rel=1e-10)
    np.testing.assert_array_equal(fast.relevance_, host.relevance_)
    np.testing.assert_allclose(fast.predict(d.X_test), host.predict(d.X_test), rtol=1e-7, atol=1e-10)


def test_rvc_takes_string_labels_as_labels_where_the_models_refuse_them():
    """Labels that read as numbers are still labels (scikit-learn's convention): RVC on "0"/"1"
    maps them through ``classes_`` and fits what it fits on the integer codes 0/1, while the
    model itself refuses the strings."""
    from ppl_sbl.models import rvm

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    codes = (X[:, 0] + 0.5 * rng.normal(size=40) > 0).astype(int)
    text = np.array(["0", "1"])[codes]
    by_text, by_code = RVC(delta=0.5).fit(X, text), RVC(delta=0.5).fit(X, codes)
    np.testing.assert_array_equal(by_text.classes_, ["0", "1"])
    assert by_text.classes_.dtype.kind == "U"
    np.testing.assert_array_equal(by_text.predict_proba(X), by_code.predict_proba(X))
    np.testing.assert_array_equal(by_text.predict(X), by_text.classes_[by_code.predict(X)])
    with pytest.raises(ValueError, match=r"got dtype <U1 \(strings\).*ppl_sbl\.RVC"):
        ppl_sbl.CAVI(rvm.classification).run(by_text._design(X), text)


def _fitted():
    # 40 x 2, the shape of the other tests' inputs below, whose compiled programs the fits share
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = X[:, 0] - 0.5 * X[:, 1] ** 2 + 0.1 * rng.normal(size=40)
    labels = np.array(["a", "b", "c"])[(X[:, 0] > 0.3).astype(int) + (X[:, 1] > 0.5).astype(int)]
    binary = (X[:, 0] > 0).astype(int)
    return X, [
        RVR().fit(X, y),
        RVR(kernel="linear").fit(X, y),
        RVC().fit(X, binary),
        RVC().fit(X, labels),
        RVC(multi_class="ovr").fit(X, labels),
        GPLVMClassifier(latent_dim=2, num_inducing=5, max_steps=10).fit(X, labels),
        SuperSparseRegressor(max_steps=20).fit(X, y),
        SuperSparseClassifier(max_steps=20).fit(X, labels),
    ]


def _same(a, b):
    """Labels equal; numbers equal to the last bits: the RBF design's matrix product (BLAS) rounds
    by the memory alignment of the stored training inputs, which a reload may change."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f":
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
    else:
        np.testing.assert_array_equal(a, b)


def test_fitted_estimators_pickle_and_joblib_to_identical_predictions(tmp_path):
    X, fitted = _fitted()
    for i, est in enumerate(fitted):
        for back in (pickle.loads(pickle.dumps(est)),
                     joblib.load(joblib.dump(est, tmp_path / f"{i}.joblib")[0])):
            _same(back.predict(X), est.predict(X))
            if hasattr(est, "predict_proba"):
                _same(back.predict_proba(X), est.predict_proba(X))
            assert back.get_params() == est.get_params()
            if getattr(est, "relevance_", None) is not None:
                np.testing.assert_array_equal(back.relevance_, est.relevance_)


def test_rbf_width_scale_makes_the_fit_invariant_to_the_input_units():
    """delta="scale" is 1 / (n_features var(X)): multiplying X by 1e6 gives the same design, so
    the same fit; a fixed width of 1 interpolates the rescaled data instead."""
    d = datasets.sinc(n_train=40, n_test=50, seed=0)
    plain = RVR().fit(d.X_train, d.t_train)
    scaled = RVR().fit(d.X_train * 1e6, d.t_train)
    np.testing.assert_allclose(scaled.predict(d.X_test * 1e6), plain.predict(d.X_test), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(scaled.relevance_, plain.relevance_)
    assert plain.n_relevance_vectors_ <= 10 and plain.score(d.X_test, d.t_test) > 0.8
    fixed = RVR(delta=1.0).fit(d.X_train * 1e6, d.t_train)  # each RBF a spike at its own training point
    assert fixed.n_relevance_vectors_ > 3 * plain.n_relevance_vectors_
    assert fixed.score(d.X_test * 1e6, d.t_test) < 0.1


def test_kernels_precomputed_and_callable_give_the_rbf_fit():
    rng = np.random.default_rng(1)
    X, X_new = rng.normal(size=(40, 2)), rng.normal(size=(9, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=40)
    rbf = RVR(delta=0.5).fit(X, y)
    pre = RVR(kernel="precomputed").fit(rbf_kernel(X, gamma=0.5), y)
    fun = RVR(kernel=lambda A, B: rbf_kernel(A, B, gamma=0.5)).fit(X, y)
    want = rbf.predict(X_new)
    np.testing.assert_allclose(pre.predict(rbf_kernel(X_new, X, gamma=0.5)), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fun.predict(X_new), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(pre.relevance_, rbf.relevance_)
    assert pre.relevance_vectors_ is None and fun.relevance_vectors_.shape == (len(rbf.relevance_), 2)
    with pytest.raises(ValueError, match="square kernel matrix"):
        RVR(kernel="precomputed").fit(X, y)
    with pytest.raises(ValueError, match="`kernel` must be one of"):
        RVR(kernel="poly").fit(X, y)
    with pytest.raises(ValueError, match="`delta` must be 'scale', 'auto' or a positive number"):
        RVR(delta=-1.0).fit(X, y)


def test_linear_kernel_coefficients_against_scikit_learn_ard_regression():
    """The variational RVM on the features and scikit-learn's ARDRegression (type-II ML) find the
    same sparse weights on a linear problem with irrelevant features."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 6))
    w = np.array([1.5, 0.0, -2.0, 0.0, 0.0, 0.7])
    y = X @ w + 0.3 + 0.1 * rng.normal(size=200)
    ours = RVR(kernel="linear").fit(X, y)
    ard = ARDRegression().fit(X, y)
    np.testing.assert_allclose(ours.coef_, ard.coef_, atol=2e-2)
    assert abs(ours.intercept_ - ard.intercept_) < 2e-2
    assert ours.coef_.shape == (6,) and ours.n_relevance_vectors_ == 3
    assert ours.relevance_ is None
    # labels with noise on the scale of the signal: the classifier keeps the three relevant
    # features, with the signs of their weights
    labels = (y + rng.normal(size=200) > 0.3).astype(int)
    clf = RVC(kernel="linear").fit(X, labels)
    assert clf.coef_.shape == (1, 6) and clf.intercept_.shape == (1,)
    np.testing.assert_array_equal(np.sign(clf.coef_[0]), np.sign(w))


def test_unconverged_fits_warn():
    from sklearn.exceptions import ConvergenceWarning

    rng = np.random.default_rng(3)
    X = rng.normal(size=(30, 2))
    with pytest.warns(ConvergenceWarning, match="max_sweeps=1"):
        RVR(max_sweeps=1).fit(X, X[:, 0])


def test_estimators_are_reachable_from_the_package():
    assert ppl_sbl.RVR is RVR and ppl_sbl.RVC is RVC and ppl_sbl.GPLVMClassifier is GPLVMClassifier
    assert "RVR" in dir(ppl_sbl)
