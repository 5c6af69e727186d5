"""Bad input, edge cases, and the public surface (compare, ArviZ, CLI, datasets, install)."""
import subprocess
import sys

import numpy as np
import pytest

import ppl_sbl
from ppl_sbl.models import rvm

from problems import random_classification, random_regression


def _fit(model, *args, **kw):
    return ppl_sbl.CAVI(model, progress_bar=False, max_sweeps=kw.pop("max_sweeps", 2000), schedule="sweep").run(*args,
                                                                                                              **kw)


# ---------------------------------------------------------------------------------------------
# Bad input: a ValueError naming the argument
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "model,args,kwargs,match",
    [
        (rvm.regression, (np.array([[1.0, np.nan], [0.0, 1.0]]), np.ones(2)), {}, "`Phi`.*NaN"),
        (rvm.regression, (np.eye(2), np.array([1.0, np.inf])), {}, "`t`.*NaN or infinite"),
        (rvm.regression, (np.eye(3), np.ones(2)), {}, "`t` has 2 entries but `Phi` has 3 rows"),
        (rvm.regression, (np.ones(3), np.ones(3)), {}, "`Phi` must be 2-dimensional"),
        (rvm.regression, (np.zeros((0, 2)), np.zeros(0)), {}, "`Phi` is empty"),
        (rvm.regression, (np.eye(2), None), {}, "`t` is required"),
        (rvm.regression, (np.eye(2), np.ones(2)), {"a0": 0.0}, "`a0` must be a finite number > 0"),
        (rvm.regression, (np.eye(2), np.ones(2)), {"f0": -1.0}, "`f0`"),
        (rvm.regression, (np.eye(2), np.ones(2)), {"b0": np.nan}, "`b0`"),
        (rvm.classification, (np.eye(3), np.array([0.0, 1.0, 2.0])), {}, "`t` must hold labels 0 or 1"),
        (rvm.classification, (np.eye(3), np.array([-1.0, 1.0, 1.0])), {}, "ppl_sbl.RVC"),
        (rvm.classification, (np.eye(3), np.ones(3)), {}, "`t` holds only label 1; a classifier needs samples of both"),
        (rvm.regression, (np.eye(3), np.ones(3)), {"groups": np.array([0, 2, 2])}, "`groups`"),
    ],
)
def test_bad_input_raises_a_value_error_naming_the_argument(model, args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        _fit(model, *args, **kwargs)


_TEXT = r"Convert it with np\.asarray\({}, dtype=float\) if its entries are numbers written as text"
_LABELS = r"Map the labels to numbers yourself.*or use ppl_sbl\.RVC, which takes any labels"


@pytest.mark.parametrize(
    "model,args,kwargs,match",
    [
        # strings, even ones that read as numbers, are refused with the dtype and the conversion
        (rvm.regression, (np.eye(2), np.array(["1", "0.5"])), {},
         r"`t` must be a numeric array; got dtype <U3 \(strings\)\. " + _TEXT.format("t")),
        (rvm.regression, (np.array([["1", "0"], ["0", "1"]]), np.ones(2)), {},
         r"`Phi` must be a numeric array; got dtype <U1 \(strings\)\. " + _TEXT.format("Phi")),
        (rvm.regression, (np.eye(2), np.array([1.0, "2"], dtype=object)), {},
         r"`t` must be a numeric array; got dtype object holding strings \(e\.g\. '2'\)"),
        (rvm.regression, (np.eye(2), np.array(["2020-01-01", "2020-01-02"], dtype="datetime64[D]")), {},
         r"`t` must be a numeric array; got dtype datetime64\[D\] \(dates and times\)\. Convert it to numbers"),
        (rvm.regression, (np.eye(2), np.array([1, 2], dtype="timedelta64[s]")), {},
         r"`t` must be a numeric array; got dtype timedelta64\[s\] \(time differences\)"),
        (rvm.regression, (np.eye(2) * (1 + 1j), np.ones(2)), {},
         r"`Phi` must be a numeric array; got dtype complex128 \(complex numbers\)\. Pass np\.real\(Phi\)"),
        (rvm.regression, (np.eye(2), np.array([{}, 1.0], dtype=object)), {},
         r"`t` must be a numeric array; got dtype object holding non-numeric entries \(e\.g\. \{\}\)"),
        (rvm.regression, ([[1.0, 2.0], [3.0]], np.ones(2)), {}, r"`Phi` must be a numeric array; got a list that NumPy"),
        # the models' labels are numbers: string labels name the dtype and point to RVC
        (rvm.classification, (np.eye(3), np.array(["1", "0", "1"])), {},
         r"`t` must be a numeric array; got dtype <U1 \(strings\)\. " + _LABELS),
        (rvm.classification, (np.eye(3), np.array(["1", "0", "1"], dtype=object)), {},
         r"`t` must be a numeric array; got dtype object holding strings \(e\.g\. '1'\)\. " + _LABELS),
        (rvm.multiclass, (np.eye(3), np.array(["0", "1", "2"])), {},
         r"`t` must be a numeric array; got dtype <U1 \(strings\)\. The model takes integer class labels.*"
         r"np\.unique\(labels, return_inverse=True\)\[1\], or use ppl_sbl\.RVC"),
        (rvm.multiclass, (np.eye(3), np.array(["0", "1", "2"], dtype=object)), {},
         r"`t` must be a numeric array; got dtype object holding strings.*ppl_sbl\.RVC"),
    ],
)
def test_non_numeric_input_names_the_dtype_and_the_fix(model, args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        _fit(model, *args, **kwargs)


def test_arrays_outside_the_rvms_name_the_dtype_too():
    from ppl_sbl import basis, sparse_gp
    from ppl_sbl.models import grid_rvm

    text = np.full((3, 2, 2), "1")
    with pytest.raises(ValueError, match=r"`X` must be a numeric array; got dtype <U1 \(strings\)"):
        _fit(grid_rvm.regression, text, np.ones(3))
    with pytest.raises(ValueError, match=r"`X` must be a numeric array; got dtype <U1 \(strings\)"):
        basis.rbf(text[:, :, 0])
    with pytest.raises(ValueError, match=r"`D` must be a numeric array; got dtype <U1 \(strings\)"):
        basis.DenseDictionary(text[:, :, 0])
    with pytest.raises(ValueError, match=r"`Y` must be a numeric array; got dtype <U1 \(strings\)"):
        sparse_gp.fit(np.ones((3, 1)), text[:, 0, 0])


def test_robust_classification_refuses_string_labels_and_booleans_are_labels():
    from ppl_sbl.models import robust_rvm
    from ppl_sbl.validation import check_binary

    with pytest.raises(ValueError, match=r"`t` must be a numeric array; got dtype <U1 \(strings\)\. " + _LABELS):
        _fit(robust_rvm.classification, np.eye(3), np.array(["1", "0", "1"]))
    # booleans are numbers: False, True are the labels 0, 1
    np.testing.assert_array_equal(check_binary("t", np.array([True, False, True]), 3), [1.0, 0.0, 1.0])


def test_estimator_bad_input():
    X = np.random.default_rng(0).standard_normal((10, 2))
    with pytest.raises(ValueError, match="holds only one class"):
        ppl_sbl.RVC().fit(X, np.zeros(10))
    with pytest.raises(ValueError, match="Unknown label type"):
        ppl_sbl.RVC().fit(X, X[:, 0])
    with pytest.raises(ValueError, match="Input y contains NaN"):
        ppl_sbl.RVC().fit(X, np.r_[np.zeros(5), np.ones(4), np.nan])
    with pytest.raises(ValueError, match="Reshape your data"):
        ppl_sbl.RVR().fit(X[:, 0], X[:, 1])
    with pytest.raises(ValueError, match="not fitted"):
        ppl_sbl.RVR().predict(X)
    with pytest.raises(ValueError, match="X has 3 features, but RVR is expecting 2"):
        ppl_sbl.RVR(progress_bar=False, max_sweeps=20).fit(X, X[:, 0]).predict(np.ones((2, 3)))
    with pytest.raises(ValueError, match="`delta`"):
        ppl_sbl.basis.rbf(X, delta=-1.0)
    with pytest.raises(ValueError, match=r"`sample_weight` must be a numeric array; got dtype <U1 \(strings\)"):
        ppl_sbl.SuperSparseRegressor().fit(X, X[:, 0], sample_weight=np.array(["1"] * 10))
    with pytest.raises(ValueError, match="`tol`"):
        ppl_sbl.CAVI(rvm.regression, tol=0.0)
    from ppl_sbl.models import gplvm

    with pytest.raises(ValueError, match="`Z` must be 2-dimensional.*one_of_k"):
        gplvm.fit(X, np.arange(10) % 2, latent_dim=2, num_inducing=3, max_steps=1)


@pytest.mark.parametrize("name", ["rvm.regression", "rvm.classification", "robust_rvm.regression",
                                  "robust_rvm.classification", "grid_rvm.regression", "grid_rvm.classification"])
def test_predict_checks_new_inputs_before_its_compiled_computation(name):
    """A result's ``predict`` checks the new inputs with their values (a ValueError naming the
    argument) and then runs the guide's predict compiled: the same numbers as the guide's own
    function run op by op on the checked inputs."""
    import jax

    from ppl_sbl.models import grid_rvm, robust_rvm

    module, kind = name.split(".")
    model = getattr({"rvm": rvm, "robust_rvm": robust_rvm, "grid_rvm": grid_rvm}[module], kind)
    rng = np.random.default_rng(2)
    shape = (30, 3, 4) if module == "grid_rvm" else (30, 5)
    X = rng.normal(size=shape)
    f = X.reshape(30, -1) @ rng.normal(size=int(np.prod(shape[1:])))
    t = (f > 0).astype(float) if kind == "classification" else f + 0.1 * rng.normal(size=30)
    res = _fit(model, X, t, max_sweeps=20)
    arg = "X_new" if module == "grid_rvm" else "Phi_new"
    wrong = rng.normal(size=(4, *[n + 1 for n in shape[1:]]))
    with pytest.raises(ValueError, match=f"`{arg}`"):
        res.predict(wrong)
    bad = X[:4].copy()
    bad[1].flat[0] = np.nan
    with pytest.raises(ValueError, match=f"`{arg}`.*NaN"):
        res.predict(bad)
    spec = res.guide_spec
    eager = spec.predict(res.state, res.data, *spec.check_new(res.data, X[:4]))
    compiled = res.predict(X[:4])
    assert len(jax.tree.leaves(compiled)) == (1 if kind == "classification" else 2)
    for a, b in zip(jax.tree.leaves(compiled), jax.tree.leaves(eager)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_model_without_guide_and_without_latent_sites_is_refused_with_a_hint():
    def my_model(Phi, t=None):
        pass

    with pytest.raises(ValueError, match="no latent Normal or Gamma sites.*closed_form_guide"):
        ppl_sbl.CAVI(my_model).run(np.ones((3, 2)), np.zeros(3))
    with pytest.raises(ValueError, match="'derived'"):
        ppl_sbl.CAVI(my_model, guide="other")


# ---------------------------------------------------------------------------------------------
# Edge cases: no NaN, no crash
# ---------------------------------------------------------------------------------------------
def _finite(res):
    assert np.isfinite(res.elbo)
    assert np.all(np.isfinite(res.elbo_trace))
    assert np.all(np.isfinite(np.asarray(res.state.w.mean)))


@pytest.mark.parametrize("model,problem", [(rvm.regression, random_regression), (rvm.classification, random_classification)])
def test_edge_cases_stay_finite(model, problem):
    Phi, t = problem(2)
    _finite(_fit(model, np.column_stack([Phi, Phi[:, :2]]), t))  # duplicate columns
    _finite(_fit(model, np.column_stack([Phi, np.full(len(t), 3.0)]), t))  # constant column
    if model is rvm.classification:  # one sample has one label: no classifier to fit
        with pytest.raises(ValueError, match="holds only label"):
            _fit(model, Phi[:1], t[:1])
        pair = [int(np.argmin(t)), int(np.argmax(t))]
        _finite(_fit(model, Phi[pair], t[pair]))  # N = 2, one of each label
    else:
        _finite(_fit(model, Phi[:1], t[:1]))  # N = 1
    wide = np.random.default_rng(0).standard_normal((len(t), 150))
    _finite(_fit(model, wide, t, max_sweeps=100))  # M >> N
    for scale in (1e-6, 1e6):
        _finite(_fit(model, Phi * scale, t))


def test_relevance_rule_is_scale_free():
    """Phi -> c Phi with b0 -> b0 / c^2 is the same model for w / c (alpha -> c^2 alpha): the relevant mask (a ratio of
    precisions) and the predictions must not change, unlike a threshold on E[alpha] itself."""
    Phi, t = random_regression(4, N=40, M=10)
    c = 1e3
    base = _fit(rvm.regression, Phi, t, b0=1e-4)
    scaled = _fit(rvm.regression, Phi * c, t, b0=1e-4 / c**2)
    assert 0 < base.relevant.sum() < 10
    # ARD: each coefficient judged alone, q_k^2 > s_k from q(w) itself (s_k = 1/Sigma_kk - E[alpha_k],
    # q_k = mu_k / Sigma_kk), pruned coefficients (mean 0) never
    from ppl_sbl import gaussian

    var = np.diag(np.asarray(gaussian.full_covariance(base.state.w)))
    s = 1.0 / var - np.asarray(base.state.alpha_shape / base.state.alpha_rate)
    q = np.asarray(base.state.w.mean) / var
    np.testing.assert_array_equal(base.relevant, q * q > s)
    np.testing.assert_array_equal(base.relevant, scaled.relevant)
    np.testing.assert_allclose(base.precision_ratio, scaled.precision_ratio, rtol=1e-5)
    np.testing.assert_allclose(base.support_ratio, scaled.support_ratio, rtol=1e-5)
    np.testing.assert_allclose(base.predict(Phi)[0], scaled.predict(Phi * c)[0], rtol=1e-6, atol=1e-8)


def test_relevance_is_judged_per_precision_group():
    """Four near-copies of the one informative input share a precision, three pure-noise inputs
    another, a constant column has its own. The data determine about one parameter through the
    copies, yet no single copy given the others (each ratio P_k / c_k > 1): the group is relevant and so are all four coefficients. The expected verdicts come from q(w)
    itself: group g is relevant when its leave-group-out S = inv(Sigma_gg) - E[alpha_g] I and
    Q = inv(Sigma_gg) mu_g, in the eigenbasis of S, pass ``fast_ard.group_supported``; a group of
    one when q_k^2 > s_k."""
    from ppl_sbl import fast_ard, gaussian

    r = np.random.default_rng(0)
    x = r.standard_normal(40)
    Phi = np.column_stack([x[:, None] + 0.01 * r.standard_normal((40, 4)), r.standard_normal((40, 3)), np.ones(40)])
    t = 2.0 * x + 0.3 * r.standard_normal(40)
    groups = np.array([0, 0, 0, 0, 1, 1, 1, 2])
    res = _fit(rvm.regression, Phi, t, groups=groups)
    e_alpha = np.asarray(res.state.alpha_shape / res.state.alpha_rate)
    cov, mean = np.asarray(gaussian.full_covariance(res.state.w)), np.asarray(res.state.w.mean)
    gamma = 1.0 - e_alpha[groups] * np.diag(cov)
    expected = np.zeros(8, dtype=bool)
    for g in range(3):
        k = np.flatnonzero(groups == g)
        precision = np.linalg.inv(cov[np.ix_(k, k)])
        lam, U = np.linalg.eigh(precision - e_alpha[g] * np.eye(len(k)))
        expected[k] = fast_ard.group_supported(lam, (U.T @ precision @ mean[k]) ** 2)[0]
    np.testing.assert_array_equal(res.relevant, expected)
    assert np.all(res.precision_ratio[:4] > 1)  # the per-coefficient ratio would keep none of the copies
    np.testing.assert_array_equal(res.relevant, [True] * 4 + [False] * 4)
    np.testing.assert_array_equal(res.relevance_indices, [0, 1, 2, 3])
    assert ppl_sbl.compare({"groups": res}).loc["groups", "n_relevant"] == 4
    assert res.effective_parameters == pytest.approx(gamma.sum(), rel=1e-6)


# ---------------------------------------------------------------------------------------------
# compare, ArviZ, sampling, prediction shapes
# ---------------------------------------------------------------------------------------------
def test_compare_table_ranks_by_elbo_with_its_parts_and_no_weights():
    Phi, t = random_regression(1, N=30, M=8)
    results = {"ard": _fit(rvm.regression, Phi, t), "ridge": _fit(rvm.regression, Phi, t, groups=np.zeros(8, int))}
    with pytest.warns(ppl_sbl.ComparisonWarning, match="vague hyperparameters"):
        table = ppl_sbl.compare(results)
    # the shared precision is judged as a whole: the data determine more than half a parameter
    # through it (n_effective), so every coefficient counts
    assert table.loc["ridge", "n_effective"] > 0.5 and table.loc["ridge", "n_relevant"] == 8
    assert table.loc["ard", "n_relevant"] == int(np.sum(results["ard"].relevant))
    assert list(table.columns[:3]) == ["rank", "elbo", "d_elbo"]
    assert "weight" not in table.columns  # weights come from LOO stacking only
    assert table["elbo"].is_monotonic_decreasing
    assert table["rank"].tolist() == [0, 1]
    assert table["d_elbo"].iloc[0] == 0.0
    parts = table[["log_lik", "-kl_latent", "-kl_hyper", "log_norm", "local_bound"]].sum(axis=1)
    np.testing.assert_allclose(parts, table["elbo"], rtol=1e-10)
    assert table.loc["ard", "n_vague"] == 8 + 1 and table.loc["ridge", "n_vague"] == 1 + 1


def test_inference_data_has_posterior_loglik_and_elbo_trace():
    import arviz as az

    Phi, t = random_classification(3)
    res = _fit(rvm.classification, Phi, t)
    idata = res.to_inference_data(num_samples=300)
    assert set(idata.posterior.data_vars) == {"alpha", "w"}
    assert idata.posterior["w"].shape == (1, 300, Phi.shape[1])
    assert idata.log_likelihood["t"].shape == (1, 300, len(t))
    np.testing.assert_allclose(idata.sample_stats["elbo_trace"].values.ravel(), res.elbo_trace)
    loo = az.loo(idata)
    assert np.isfinite(loo.elpd_loo)
    # the pointwise log-likelihood is the model's: check one entry by hand
    w = idata.posterior["w"].values[0, 0]
    logit = Phi[0] @ w
    expected = t[0] * logit - np.logaddexp(0.0, logit)
    assert idata.log_likelihood["t"].values[0, 0, 0] == pytest.approx(expected, rel=1e-8)


def test_samples_follow_q():
    Phi, t = random_regression(8, N=30, M=4)
    res = _fit(rvm.regression, Phi, t)
    draws = res.sample(0, 20000)
    mean = np.asarray(res.state.w.mean)
    se = np.sqrt(np.diag(np.asarray(ppl_sbl.gaussian.full_covariance(res.state.w))) / 20000)
    assert np.all(np.abs(draws["w"].mean(0) - mean) < 5 * se)
    assert draws["gamma"].mean() == pytest.approx(float(res.state.gamma_shape / res.state.gamma_rate), rel=0.03)


def test_regression_predictive_variance_matches_sampling():
    Phi, t = random_regression(9, N=30, M=4)
    res = _fit(rvm.regression, Phi, t)
    mean, var = res.predict(Phi[:3])
    cov = np.asarray(ppl_sbl.gaussian.full_covariance(res.state.w))
    direct = np.einsum("nk,kl,nl->n", Phi[:3], cov, Phi[:3]) + float(res.state.gamma_rate / res.state.gamma_shape)
    np.testing.assert_allclose(var, direct, rtol=1e-10)
    np.testing.assert_allclose(mean, Phi[:3] @ np.asarray(res.state.w.mean), rtol=1e-10)


def test_classification_predict_is_probability_per_row():
    Phi, t = random_classification(4)
    res = _fit(rvm.classification, Phi, t)
    p = np.asarray(res.predict(Phi))
    assert p.shape == (len(t),)
    assert np.all((p > 0) & (p < 1))
    # E_q[sigma(phi w)] by sampling q
    w = res.sample(1, 20000)["w"]
    mc = (1 / (1 + np.exp(-(w @ Phi.T)))).mean(0)
    np.testing.assert_allclose(p, mc, atol=0.01)


# ---------------------------------------------------------------------------------------------
# Datasets, the CLI and the installed layout
# ---------------------------------------------------------------------------------------------
def test_datasets_shapes_and_sources():
    d = ppl_sbl.datasets.sinc(noise_features=3)
    assert d.X_train.shape == (100, 4) and d.X_test.shape == (600, 4)
    assert np.all(np.abs(d.t_train - np.sinc(d.X_train[:, 0] * 0 + 0) * 0 - d.t_train) == 0)
    raw = ppl_sbl.datasets.sinc(normalize=False)
    assert np.all(np.abs(raw.t_train - np.sinc(raw.X_train[:, 0] / np.pi)) <= 0.2)
    r = ppl_sbl.datasets.ripley()
    assert r.X_train.shape == (250, 2) and r.X_test.shape == (1000, 2)
    assert r.t_train.sum() == 125 and r.t_test.sum() == 500


def test_cli_compare_prints_elbo_and_loo_tables(tmp_path):
    import json

    from scripts import run_cli

    # from a folder outside the source tree (the record lands there)
    out = run_cli("compare", "--dataset", "sinc", "--max-sweeps", "300", "--json", "record.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "by ELBO, with its parts" in out.stdout and "by leave-one-out predictive density" in out.stdout
    assert "chosen by each criterion" in out.stdout and "test RMSE" in out.stdout
    record = json.loads((tmp_path / "record.json").read_text())
    by_elbo, by_loo = record["by_elbo"], record["by_loo"]
    assert set(by_elbo) == set(by_loo) == {"rvm (ARD)", "ridge (shared precision)", "robust rvm"}
    for row in by_elbo.values():
        parts = row["log_lik"] + row["-kl_latent"] + row["-kl_hyper"] + row["log_norm"] + row["local_bound"]
        assert parts == pytest.approx(row["elbo"], rel=1e-10)
    # n_relevant is judged per precision: the ridge fit's one precision is supported, so all 101
    # basis functions (100 RBFs and the bias) count; ARD keeps a few
    assert by_elbo["ridge (shared precision)"]["n_relevant"] == 101
    assert 0 < by_elbo["rvm (ARD)"]["n_relevant"] < 101
    assert by_elbo["ridge (shared precision)"]["schedule"] == by_elbo["rvm (ARD)"]["schedule"] == "fast"
    assert by_elbo["rvm (ARD)"]["n_vague"] == 101 + 1 and by_elbo["ridge (shared precision)"]["n_vague"] == 1 + 1
    # Gaussian likelihoods: exact LOO; the robust RVM's per-point weights: PSIS
    assert by_loo["rvm (ARD)"]["loo"] == by_loo["ridge (shared precision)"]["loo"] == "exact"
    assert by_loo["robust rvm"]["loo"] == "psis"
    assert sum(row["weight"] for row in by_loo.values()) == pytest.approx(1.0)
    assert any("vague hyperparameters" in note for note in record["notes"]) and "warning:" in out.stdout
    assert set(record["width_chosen_by"]) == {"ELBO", "LOO", "held-out lpd"}
    # `python -m ppl_sbl.cli` in a process of its own, outside the source tree: the installed package
    helptext = subprocess.run([sys.executable, "-m", "ppl_sbl.cli", "compare", "--help"], capture_output=True,
                              text=True, cwd=tmp_path)
    assert helptext.returncode == 0 and "--dataset" in helptext.stdout and "--delta" in helptext.stdout
    bad = run_cli("compare", "--dataset", "sinc", "--delta", "-1", cwd=tmp_path)
    assert bad.returncode == 2 and "argument --delta: must be a finite number > 0; got -1" in bad.stderr
    assert "Gamma" not in bad.stderr


def test_models_are_importable_as_ppl_sbl_models():
    import importlib

    mod = importlib.import_module("ppl_sbl.models.rvm")
    assert mod.regression.closed_form_guide is mod.REGRESSION_GUIDE
