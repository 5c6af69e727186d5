"""ELBOSearch: the setting with the highest ELBO, each fit the estimator's own fit of that setting;
the RVMs' grids over the RBF width in one compiled program (fit_grid) equal to the fits one by one."""
import numpy as np
import pytest

pytest.importorskip("sklearn")
from sklearn.base import clone, is_classifier, is_regressor  # noqa: E402
from sklearn.datasets import load_iris, make_blobs, make_moons  # noqa: E402
from sklearn.model_selection import cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

import ppl_sbl  # noqa: E402
from ppl_sbl import batch  # noqa: E402
from ppl_sbl.estimators import RVC, RVR, SuperSparseRegressor  # noqa: E402
from ppl_sbl.model_selection import ELBOSearch  # noqa: E402

DELTAS = (0.05, 0.5, 5.0)


@pytest.fixture
def grid_calls(monkeypatch):
    """The calls of ppl_sbl.fit_grid made during a test (their models)."""
    calls = []
    original = batch.fit_grid

    def spy(model, designs, *args, **kwargs):
        calls.append((model.__name__, len(designs), kwargs.get("schedule")))
        return original(model, designs, *args, **kwargs)

    monkeypatch.setattr(batch, "fit_grid", spy)
    return calls


def _regression(N=40, seed=0):
    r = np.random.default_rng(seed)
    X = r.uniform(-8, 8, (N, 1))
    return X, np.sinc(X[:, 0] / np.pi) + 0.1 * r.standard_normal(N)


def _iris(step=4):
    X, y = load_iris(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    return X[::step], y[::step]


def _check_against_one_by_one(search, estimator, X, y, rtol):
    """Every candidate's ELBO is that of the estimator's own fit of its setting; the best is the
    largest; the search predicts as the best setting's own fit."""
    singles = [clone(estimator).set_params(**params).fit(X, y) for params in search.candidates_.filter(like="param_")
               .rename(columns=lambda c: c[len("param_"):]).to_dict("records")]
    final = (lambda e: e.steps[-1][1]) if hasattr(estimator, "steps") else (lambda e: e)  # the step with the fit
    elbos = np.array([np.sum(final(s).elbo_) for s in singles])
    np.testing.assert_allclose(search.candidates_["elbo"], elbos, rtol=rtol)
    assert search.best_index_ == int(np.argmax(elbos))
    assert search.best_score_ == pytest.approx(elbos.max(), rel=rtol)
    assert list(search.candidates_["rank"]) == list(np.argsort(np.argsort(-elbos)) + 1)
    best = singles[search.best_index_]
    np.testing.assert_array_equal(final(search.best_estimator_).relevance_, final(best).relevance_)
    if is_classifier(estimator):
        np.testing.assert_allclose(search.predict_proba(X), best.predict_proba(X), atol=1e-6)
        np.testing.assert_array_equal(search.classes_, best.classes_)
    else:
        np.testing.assert_allclose(search.predict(X), best.predict(X), atol=1e-6 * np.std(y))
    return singles


@pytest.mark.parametrize("case", ["rvr", "rvc", "rvc_ovr"])
def test_width_grid_runs_in_one_program_and_equals_the_fits_one_by_one(case, grid_calls):
    if case == "rvr":
        estimator, (X, y) = RVR(), _regression()
    elif case == "rvc":
        estimator, (X, y) = RVC(), make_moons(40, noise=0.3, random_state=0)
    else:  # three classes, one model per class against the rest
        estimator, (X, y) = RVC(multi_class="ovr"), make_blobs(40, centers=3, cluster_std=2.0, random_state=0)
    search = ELBOSearch(estimator, {"delta": list(DELTAS)}).fit(X, y)
    # one fit_grid call per model of the estimator (one per class against the rest), all widths at once
    models = 3 if case == "rvc_ovr" else 1
    assert grid_calls == [("regression" if case == "rvr" else "classification", len(DELTAS), "fast")] * models
    # the compiled fast schedule against the host's, each to its tolerance (tol = 1e-9)
    _check_against_one_by_one(search, estimator, X, y, rtol=1e-7)
    assert list(search.candidates_["param_delta"]) == list(DELTAS)
    assert search.candidates_["converged"].all()
    assert search.n_features_in_ == X.shape[1]


def test_a_pipeline_fits_its_steps_before_the_model_once(grid_calls):
    X, y = make_moons(40, noise=0.3, random_state=0)
    X = X * [1.0, 100.0]
    pipeline = make_pipeline(StandardScaler(), RVC())
    search = ELBOSearch(pipeline, {"rvc__delta": list(DELTAS)}).fit(X, y)
    assert grid_calls == [("classification", len(DELTAS), "fast")]
    _check_against_one_by_one(search, pipeline, X, y, rtol=1e-7)
    assert list(search.candidates_["param_rvc__delta"]) == list(DELTAS)
    np.testing.assert_allclose(search.best_estimator_[0].mean_, X.mean(0))


def test_other_grids_fit_one_by_one(grid_calls):
    """A grid over another parameter (the hyperprior's shape) is fitted setting by setting, by the
    estimator's own fit: the same numbers exactly."""
    X, y = _regression(30, seed=1)
    search = ELBOSearch(RVR(delta=0.5), {"a0": [1e-6, 1e-2]}).fit(X, y)
    assert grid_calls == []
    _check_against_one_by_one(search, RVR(delta=0.5), X, y, rtol=1e-12)


def test_the_multinomial_rvc_fits_one_by_one(grid_calls):
    import pandas as pd

    X, y = _iris(step=5)
    X = pd.DataFrame(X, columns=["sepal length", "sepal width", "petal length", "petal width"])
    search = ELBOSearch(RVC(), {"delta": [0.1, 1.0]}).fit(X, y)
    assert grid_calls == []  # the multinomial RVM has no compiled fast schedule
    _check_against_one_by_one(search, RVC(), X, y, rtol=1e-12)
    assert list(search.feature_names_in_) == list(X.columns)


def test_it_is_a_scikit_learn_meta_estimator():
    X, y = make_moons(60, noise=0.3, random_state=1)
    search = ELBOSearch(RVC(delta=1.0), {"a0": [1e-6, 1e-3]})
    assert is_classifier(search) and not is_classifier(ELBOSearch(RVR(), {"delta": [1.0]}))
    assert is_regressor(ELBOSearch(RVR(), {"delta": [1.0]}))
    assert clone(search).get_params()["param_grid"] == {"a0": [1e-6, 1e-3]}
    scores = cross_val_score(search, X, y, cv=3)
    assert scores.shape == (3,) and np.all(scores > 0.6)
    assert ppl_sbl.ELBOSearch is ELBOSearch


def test_bad_searches_raise_named_errors():
    X, y = _regression(30)
    with pytest.raises(TypeError, match="elbo_"):
        ELBOSearch(SuperSparseRegressor(max_steps=5), {"m": [2]}).fit(X, y)
    with pytest.raises(ValueError, match="param_grid"):
        ELBOSearch(RVR(), []).fit(X, y)
    with pytest.raises(ValueError, match="delta"):
        ELBOSearch(RVR(), {"delta": [-1.0, 1.0]}).fit(X, y)
