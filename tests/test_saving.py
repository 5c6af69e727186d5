"""Saving fitted results: every result type pickles, joblib-dumps and goes through the portable
``result.save(path)`` / ``ppl_sbl.load(path)`` format, and comes back with identical predictions,
ELBO trace and state; the portable file holds no pickle."""
import json
import pickle

import joblib
import numpy as np
import pytest

import ppl_sbl
from ppl_sbl import basis, datasets
from ppl_sbl.models import gplvm, grid_rvm, robust_rvm, rvm, sequential_sbl, super_sparse

from problems import assert_same_tree


def _sinc(n=40):
    d = datasets.sinc(n_train=n, n_test=15, seed=0)
    return (basis.rbf(d.X_train, delta=5.55, bias=True), d.t_train,
            basis.rbf(d.X_test, d.X_train, delta=5.55, bias=True))


def _labels(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    t = (X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.normal(size=n) > 0).astype(float)
    X_new = rng.normal(size=(10, 2))
    return basis.rbf(X, delta=0.5, bias=True), t, basis.rbf(X_new, X, delta=0.5, bias=True)


def _grid(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3, 2))
    t = X[:, 0, 1] - X[:, 2, 0] + 0.1 * rng.normal(size=n)
    return X, t, rng.normal(size=(7, 3, 2))


def _cavi_results():
    Phi, t, Phi_new = _sinc()
    C, labels, C_new = _labels()
    X, tg, X_new = _grid()
    cavi = dict(progress_bar=False, max_sweeps=300)
    return {
        "rvm.regression sweep": (ppl_sbl.CAVI(rvm.regression, schedule="sweep", **cavi).run(Phi, t), (Phi_new,)),
        "rvm.regression fast": (ppl_sbl.CAVI(rvm.regression, schedule="fast", **cavi).run(Phi, t), (Phi_new,)),
        "rvm.regression derived": (ppl_sbl.CAVI(rvm.regression, guide="derived", **cavi).run(Phi, t), (Phi_new,)),
        "rvm.classification fast": (ppl_sbl.CAVI(rvm.classification, schedule="fast", **cavi).run(C, labels),
                                    (C_new,)),
        "robust_rvm.classification": (ppl_sbl.CAVI(robust_rvm.classification, schedule="sweep", **cavi).run(C, labels),
                                      (C_new,)),
        "robust_rvm.regression fast": (ppl_sbl.CAVI(robust_rvm.regression, schedule="fast", **cavi).run(Phi, t),
                                       (Phi_new,)),
        "grid_rvm.regression s-grid": (ppl_sbl.CAVI(grid_rvm.regression, **cavi).run(X, tg, kind="s"), (X_new,)),
        "grid_rvm fit_grid": (ppl_sbl.fit_grid(grid_rvm.regression, [X], tg, names=["x"], max_sweeps=100)["x"],
                              (X_new,)),
    }


@pytest.fixture(scope="module")
def cavi_results():
    return _cavi_results()




def _round_trips(result, tmp_path):
    yield "pickle", pickle.loads(pickle.dumps(result))
    joblib.dump(result, tmp_path / "fit.joblib")
    yield "joblib", joblib.load(tmp_path / "fit.joblib")
    yield "save/load", ppl_sbl.load(result.save(tmp_path / "fit"))


CAVI_FITS = ["rvm.regression sweep", "rvm.regression fast", "rvm.regression derived", "rvm.classification fast",
             "robust_rvm.classification", "robust_rvm.regression fast", "grid_rvm.regression s-grid",
             "grid_rvm fit_grid"]


def test_every_cavi_fit_is_covered(cavi_results):
    assert sorted(cavi_results) == sorted(CAVI_FITS)


@pytest.mark.parametrize("name", CAVI_FITS)
def test_cavi_result_round_trips_to_identical_predictions(cavi_results, name, tmp_path):
    result, new = cavi_results[name]
    expected = result.predict(*new)
    for how, back in _round_trips(result, tmp_path):
        assert type(back) is ppl_sbl.CAVIResult, how
        assert back.model is result.model and back.schedule == result.schedule, how
        np.testing.assert_array_equal(back.elbo_trace, result.elbo_trace)
        assert_same_tree(back.state, result.state)
        assert_same_tree(back.data, result.data)
        got = back.predict(*new)
        for a, b in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(back.relevant, result.relevant)
        assert back.guide_spec.bound == result.guide_spec.bound
        # the reloaded result goes on working: its guide draws under the model's site names
        assert set(back.sample(0, num_samples=3)) == set(result.sample(0, num_samples=3)), how


def test_portable_file_holds_no_pickle_and_names_its_classes(cavi_results, tmp_path):
    result, _ = cavi_results["rvm.regression fast"]
    path = result.save(tmp_path / "fit")
    with np.load(path, allow_pickle=False) as archive:  # raises if any entry needs pickle
        header = json.loads(str(archive["__header__"]))
        assert all(archive[k].dtype != object for k in archive.files)
    assert header["format"] == "ppl-sbl" and header["version"] == 1
    root = header["root"]
    assert root["object"] == "ppl_sbl.inference:CAVIResult"
    assert root["fields"]["model"] == {"ref": "ppl_sbl.models.rvm:regression"}
    assert root["fields"]["guide_spec"] is None  # found again from the model on loading


def test_load_rejects_other_files_and_newer_versions(tmp_path):
    np.savez(tmp_path / "plain.npz", x=np.ones(3))
    with pytest.raises(ValueError, match="not a ppl-sbl result file"):
        ppl_sbl.load(tmp_path / "plain.npz")
    header = {"format": "ppl-sbl", "version": 99, "ppl_sbl": "9.0", "root": None}
    np.savez(tmp_path / "future.npz", __header__=np.asarray(json.dumps(header)))
    with pytest.raises(ValueError, match="upgrade ppl-sbl"):
        ppl_sbl.load(tmp_path / "future.npz")


def test_save_names_what_it_cannot_write(tmp_path):
    sim = super_sparse.fit(np.random.default_rng(0).normal(size=(20, 2)), np.r_[np.ones(10), -np.ones(10)], m=2,
                           max_steps=3, similarity=lambda X, C: np.exp(-((X[:, None] - C[None]) ** 2).sum(-1)))
    with pytest.raises(TypeError, match="lambda"):
        sim.save(tmp_path / "sim")


def test_sequential_state_round_trips_and_goes_on_learning(tmp_path):
    Phi, t, _ = _sinc(60)
    state = sequential_sbl.fit(Phi[:50], t[:50], noise_var=0.01)
    for how, back in _round_trips(state, tmp_path):
        assert back.log_marginal_likelihood == state.log_marginal_likelihood, how
        np.testing.assert_array_equal(back.active, state.active)
        np.testing.assert_array_equal(back.mu, state.mu)
        # the reloaded state takes a new sample exactly as the original does
        a, gain_a = sequential_sbl.add_sample(state, Phi[50], t[50])
        b, gain_b = sequential_sbl.add_sample(back, Phi[50], t[50])
        assert gain_a == gain_b and a.log_marginal_likelihood == b.log_marginal_likelihood, how


def test_sequential_state_on_an_image_dictionary_round_trips(tmp_path):
    D = basis.haar_2d((8, 8))
    rng = np.random.default_rng(0)
    rows = rng.choice(64, size=30, replace=False)
    y = rng.normal(size=30)
    state = sequential_sbl.fit(D, y, noise_var=0.1, rows=rows, max_steps=50)
    back = ppl_sbl.load(state.save(tmp_path / "image"))
    assert type(back.dictionary) is type(state.dictionary)
    assert back.log_marginal_likelihood == state.log_marginal_likelihood
    np.testing.assert_array_equal(back.dictionary.matvec(np.ones(64)), state.dictionary.matvec(np.ones(64)))


def test_gplvm_and_super_sparse_results_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(30, 4))
    Z = np.where(Y[:, :1] > 0, 1.0, -1.0)
    res = gplvm.fit(Y, Z, latent_dim=2, num_inducing=5, max_steps=5, progress_bar=False)
    Y_new = rng.normal(size=(6, 4))
    for how, back in _round_trips(res, tmp_path):
        np.testing.assert_array_equal(back.predict(Y_new), res.predict(Y_new))
        np.testing.assert_array_equal(back.transform(Y_new), res.transform(Y_new))
        assert back.elbo == res.elbo, how
    X = rng.normal(size=(30, 2))
    fit = super_sparse.fit(X, np.sign(X[:, 0]) + (X[:, 0] == 0), m=3, max_steps=10)
    for how, back in _round_trips(fit, tmp_path):
        np.testing.assert_array_equal(back.decision_function(X), fit.decision_function(X))
        np.testing.assert_array_equal(back.objective_trace, fit.objective_trace)
