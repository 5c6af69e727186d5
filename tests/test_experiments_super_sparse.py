"""The super-sparse experiment script (experiments/super_sparse.py) runs end to end in quick
mode; its record is complete and consistent, and its helpers agree with brute force."""
import math

import numpy as np
import pytest

from scripts import run_script, script_module

pytest.importorskip("matplotlib")
pytest.importorskip("sklearn")

METHODS = ["super_sparse", "random", "k_medoids", "border"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("super_sparse_experiments")
    _, record = run_script("experiments/super_sparse.py", "--quick", "--out-dir", out,
                           record=out / "super_sparse_experiments_quick.json")
    return out, record


@pytest.mark.slow  # the script end to end, in quick mode: outside the default run (`pytest -m slow`)
def test_verification_record_is_complete_and_consistent(quick_run):
    out, record = quick_run
    args, ver = record["args"], record["verification"]
    assert [r["class"] for r in ver["per_class"]] == args["classes"]
    ms = sorted(args["prototypes"])
    for r in ver["per_class"]:
        assert 0 < r["svc"]["n_sv"] <= ver["n_train"]
        for key in METHODS:
            assert sorted(map(int, r[key])) == ms
            for m in ms:
                assert 0.0 <= r[key][str(m)]["auc"] <= 1.0 and 0.0 <= r[key][str(m)]["eer"] <= 1.0
        for m in ms:
            assert math.isfinite(r["super_sparse"][str(m)]["elbo"])
            assert 0 <= r["super_sparse"][str(m)]["relevant"] <= m
        assert r["m_by_elbo"] in ms
    # the summary is the mean of the per-class figures
    table = {(row["method"], row["m"]): row for row in ver["summary"]["table"]}
    assert table[("SVC", None)]["auc"] == pytest.approx(np.mean([r["svc"]["auc"] for r in ver["per_class"]]))
    for key in METHODS:
        for m in ms:
            assert table[(key, m)]["eer"] == pytest.approx(np.mean([r[key][str(m)]["eer"] for r in ver["per_class"]]))
    for name in record["figures"]:
        assert (out / name).stat().st_size > 10_000
    # the goal restates the table: the smallest m within 0.005 of the SVC's mean AUC, against SVs / 10
    summary = ver["summary"]
    within = [m for m in ms if table[("super_sparse", m)]["auc"] >= summary["svc_mean_auc"] - 0.005]
    assert summary["smallest_m_within_0.005_of_svc_mean_auc"] == (min(within) if within else None)
    assert summary["goal_met_on_means"] == (bool(within) and min(within) <= summary["svc_mean_sv"] / 10)


@pytest.mark.slow
def test_regression_record(quick_run):
    _, record = quick_run
    reg = record["regression"]
    grid = reg["prototypes"]
    assert len(reg["diabetes"]["folds"]) == record["args"]["folds"]
    for fold in reg["diabetes"]["folds"] + [reg["generated"]["fold"]]:
        assert fold["kernel_ridge"]["mae"] > 0 and fold["lasso"]["prototypes"] >= 0
        assert sorted(map(int, fold["super_sparse"])) == grid
        assert fold["m_by_elbo"] in grid and fold["m_by_rule8"] in grid
    gen = reg["generated"]["fold"]
    # the generator: the true function's test error is the noise's, sd * sqrt(2 / pi), up to sampling
    n_test = record["args"]["gen_test"]
    assert gen["truth_mae"] == pytest.approx(gen["noise_floor_mae"], abs=4 * 0.1 * 0.6 / math.sqrt(n_test))


def test_equal_error_rate_against_a_threshold_scan():
    equal_error_rate = script_module("experiments.super_sparse").equal_error_rate

    rng = np.random.default_rng(0)
    y = np.where(rng.random(4000) < 0.2, 1.0, -1.0)
    score = y * 0.8 + rng.standard_normal(4000)
    # brute force: the threshold where FAR and FRR are closest
    thresholds = np.sort(score)
    far = np.array([np.mean(score[y < 0] >= t) for t in thresholds])
    frr = np.array([np.mean(score[y > 0] < t) for t in thresholds])
    k = np.argmin(np.abs(far - frr))
    assert equal_error_rate(y, score) == pytest.approx(0.5 * (far[k] + frr[k]), abs=2e-3)
    assert equal_error_rate(y, np.where(y > 0, 1.0, 0.0)) == 0.0  # separable: no error


def test_k_medoids_are_set_medians():
    from sklearn.cluster import KMeans
    k_medoids = script_module("experiments.super_sparse").k_medoids

    rng = np.random.default_rng(1)
    X = rng.normal(size=(120, 3))
    rows = k_medoids(X, 4, seed=0)
    labels = KMeans(4, n_init=10, random_state=0).fit_predict(X)
    for r in rows:
        members = np.flatnonzero(labels == labels[r])
        cost = [np.sum(np.linalg.norm(X[members] - X[i], axis=1)) for i in members]
        assert r == members[int(np.argmin(cost))]
