"""The RVM speed bench against fastrvm: both quick modes run, each record agrees with itself, and the
column mapping from fastrvm's fits to our design is checked against fastrvm's own predictions.

No timing is asserted, only the record's arithmetic (ratios of the recorded times, extrapolations),
its fields, and predictions recomputed from the recorded coefficients.
"""
import math

import numpy as np
import pytest

from scripts import run_script, script_module

COMMON = {"status", "seconds", "min_seconds", "rounds", "first_call_seconds",
          "first_call_compile_seconds", "relevance_columns", "relevant", "relevance_vectors", "ratio_to_fastrvm",
          "min_ratio_to_fastrvm"}
REGRESSION_FIELDS = {
    "fastrvm": {"rmse", "coef", "coef_columns", "n_iter", "beta", "fit_status", "log_marginal_likelihood", "L_alpha",
                "L_noise_var"},
    "sequential_sbl": {"rmse", "coef", "coef_columns", "log_marginal_likelihood", "moves", "stop_reason"},
    "sequential_sbl_compiled": {"rmse", "coef", "coef_columns", "log_marginal_likelihood", "moves", "stop_reason",
                                "program_seconds", "host_seconds", "program_ratio_to_fastrvm", "program_us_per_move"},
    "sequential_sbl_to_fastrvm_L": {"rmse", "coef", "coef_columns", "log_marginal_likelihood", "moves",
                                    "stop_reason", "fastrvm_L", "max_steps", "reaches_fastrvm_L", "program_seconds",
                                    "host_seconds", "program_ratio_to_fastrvm"},
    "sequential_sbl_exact": {"rmse", "coef", "coef_columns", "log_marginal_likelihood", "moves", "stop_reason"},
    "sequential_sbl_exact_guarded": {"rmse", "coef", "coef_columns", "log_marginal_likelihood", "moves", "stop_reason"},
    "cavi_fast": {"rmse", "elbo", "num_sweeps"},
    "cavi": {"rmse", "elbo", "num_sweeps"},
    "ard": {"rmse", "n_iter"},
}
CLASSIFICATION_FIELDS = {
    "fastrvm": {"test_error", "coef", "coef_columns", "n_iter"},
    "cavi_fast": {"test_error", "elbo", "num_sweeps"},
    "cavi": {"test_error", "elbo", "num_sweeps"},
    "cavi_robust_fast": {"test_error", "elbo", "num_sweeps"},
    "cavi_robust": {"test_error", "elbo", "num_sweeps"},
}


def _check_peer(name, rec, ref, cap, fields, m, rounds):
    """The fields and the arithmetic of one peer's record at one size (``rounds``: the timed rounds)."""
    assert rec["status"] in ("measured", "capped", "skipped"), (name, rec.get("error"))
    if rec["status"] == "skipped":
        return
    missing = (COMMON | fields) - set(rec)
    assert not missing, (name, missing)
    # capped exactly when the warm call took longer than the cap; then that call is the one time
    assert (rec["status"] == "capped") == (rec["first_call_seconds"] > cap)
    # a measured peer: the median and the minimum of its rounds; a capped one: its one call
    assert rec["rounds"] == (1 if rec["status"] == "capped" else rounds)
    assert 0 <= rec["min_seconds"] <= rec["seconds"] and math.isfinite(rec["seconds"])
    assert "round_seconds" not in rec  # the record keeps the summary, not the rounds' samples
    assert rec["ratio_to_fastrvm"] == rec["seconds"] / ref["seconds"]
    assert rec["min_ratio_to_fastrvm"] == rec["min_seconds"] / ref["min_seconds"]
    cols = rec["relevance_columns"]
    assert cols == sorted(set(cols)) and all(0 <= c < m for c in cols)
    assert rec["relevant"] == len(cols) and rec["relevance_vectors"] == sum(c > 0 for c in cols)
    if "coef_columns" in rec:
        assert sorted(rec["coef_columns"]) == cols and len(rec["coef"]) == len(cols)
    if "rmse" in rec:
        assert math.isfinite(rec["rmse"]) and rec["rmse_ratio_to_fastrvm"] == rec["rmse"] / ref["rmse"]
    if "test_error" in rec:
        assert 0 <= rec["test_error"] < 50


def test_rvm_bench_quick_regression(tmp_path):
    bench = script_module("benchmarks.rvm")
    _, record = run_script("benchmarks/rvm.py", "--quick", "--out", tmp_path / "r.json", record=tmp_path / "r.json")
    assert record["partial"] is False and record["kind"] == "regression" and record["args"]["quick"] is True
    assert record["environment"]["x64"] is True and "fastrvm" in record["environment"]["versions"]
    peers = record["peers"]
    assert peers[0] == "fastrvm" and set(REGRESSION_FIELDS) <= set(peers)
    rows = record["rows"]
    assert [r["n"] for r in rows] == [50, 80]
    cap = record["args"]["cap"]
    for r in rows:
        assert r["m"] == r["n"] + 1 and r["n_test"] == 600 and list(r["peers"]) == peers
        ref = r["peers"]["fastrvm"]
        assert ref["status"] == "measured" and ref["relevance_columns"][0] == 0  # its intercept is our column 0
        for name, rec in r["peers"].items():
            _check_peer(name, rec, ref, cap, REGRESSION_FIELDS.get(name, {"rmse"}), r["m"], r["rounds"])

        # predictions recomputed from the recorded columns and coefficients (our numbering)
        problem = bench.regression_problem(r["n"])
        for name in ("fastrvm", "sequential_sbl", "sequential_sbl_compiled", "sequential_sbl_exact",
                     "sequential_sbl_exact_guarded"):
            rec = r["peers"][name]
            pred = problem.Phi_test[:, rec["coef_columns"]] @ np.asarray(rec["coef"])
            assert rec["rmse"] == pytest.approx(float(np.sqrt(np.mean((pred - problem.t_test) ** 2))), rel=1e-12)
        # the compiled type-II fit is the loop's: the same moves, columns and L
        loop, compiled = r["peers"]["sequential_sbl"], r["peers"]["sequential_sbl_compiled"]
        assert (compiled["moves"], compiled["relevance_columns"]) == (loop["moves"], loop["relevance_columns"])
        assert compiled["log_marginal_likelihood"] == pytest.approx(loop["log_marginal_likelihood"], rel=1e-10)
        assert r["goals"]["fastest_type2_ratio"]["value"] == min(loop["ratio_to_fastrvm"], compiled["ratio_to_fastrvm"])

        # fastrvm's L on our objective: its columns at the recorded precisions and noise, recomputed from the dense
        # covariance C = sigma^2 I + Phi_a A^-1 Phi_a^T; a local maximum: no precision or the noise moved by 10% raises it
        alpha, noise = np.asarray(ref["L_alpha"]), ref["L_noise_var"]

        def dense_L(alpha, noise):
            kept = np.isfinite(alpha)
            A = problem.Phi[:, np.asarray(ref["coef_columns"])[kept]]
            C = noise * np.eye(r["n"]) + (A / alpha[kept]) @ A.T
            fit = problem.t @ np.linalg.solve(C, problem.t)
            return -0.5 * (r["n"] * np.log(2 * np.pi) + np.linalg.slogdet(C)[1] + fit)

        L = ref["log_marginal_likelihood"]
        assert len(alpha) == len(ref["coef_columns"]) and L == pytest.approx(dense_L(alpha, noise), rel=1e-9)
        for factor in (0.9, 1.1):
            assert dense_L(alpha, noise * factor) <= L + 1e-9
            for k in np.flatnonzero(np.isfinite(alpha)):
                assert dense_L(np.where(np.arange(len(alpha)) == k, alpha * factor, alpha), noise) <= L + 1e-9
        # our compiled type-II fit stopped at the fewest steps that reach fastrvm's L: one step fewer does not
        # (where our full fit stays below it, the peer is the full fit)
        to_L = r["peers"]["sequential_sbl_to_fastrvm_L"]
        assert to_L["fastrvm_L"] == ref["log_marginal_likelihood"]
        assert to_L["reaches_fastrvm_L"] == (compiled["log_marginal_likelihood"] >= to_L["fastrvm_L"])
        if to_L["reaches_fastrvm_L"]:
            assert to_L["log_marginal_likelihood"] >= to_L["fastrvm_L"] and to_L["stop_reason"] == "max_steps"
            fewer = bench.AtFastrvmL.fit_steps(problem, to_L["max_steps"] - 1)
            assert fewer.log_marginal_likelihood < to_L["fastrvm_L"]
        else:
            assert to_L["max_steps"] is None and to_L["moves"] == compiled["moves"]
        # the compiled peers' split: the program's time over fastrvm's, and per move
        for name in ("sequential_sbl_compiled", "sequential_sbl_to_fastrvm_L"):
            rec = r["peers"][name]
            assert 0 < rec["program_seconds"] and math.isfinite(rec["host_seconds"])
            assert rec["program_ratio_to_fastrvm"] == rec["program_seconds"] / ref["seconds"]
        assert compiled["program_us_per_move"] == 1e6 * compiled["program_seconds"] / compiled["moves"]

        # the overlap of the type-II fits with fastrvm's columns
        theirs = set(ref["relevance_columns"])
        for name in ("sequential_sbl", "sequential_sbl_exact", "sequential_sbl_exact_guarded"):
            o, ours = r["overlap_with_fastrvm"][name], set(r["peers"][name]["relevance_columns"])
            assert o["intersection"] == len(ours & theirs) and o["symmetric_difference"] == sorted(ours ^ theirs)
            assert o["only_ours"] == sorted(ours - theirs) and o["only_fastrvm"] == sorted(theirs - ours)
            assert len(o["only_ours_nearest_fastrvm_distance"]) == sum(c > 0 for c in o["only_ours"])
        for suffix in ("", "_guarded"):
            gap = r["peers"]["sequential_sbl"]["log_marginal_likelihood"] - r["peers"][
                "sequential_sbl_exact" + suffix]["log_marginal_likelihood"]
            assert r["L_default_minus_exact" + suffix] == gap
            assert r["L_default_within_goal" + suffix] == (gap >= -record["l_goal_nats"])
    for suffix in ("", "_guarded"):
        assert record["L_default_within_goal_at_every_size" + suffix] == all(
            r["L_default_within_goal" + suffix] for r in rows)

    # ARD and the CAVI sweep skipped above 50 in quick mode: their times at 80 extrapolated from N = 50
    # with slope 3 assumed
    for name in ("ard", "cavi"):
        first, skipped = rows[0]["peers"][name], rows[1]["peers"][name]
        assert first["status"] == "measured" and skipped["status"] == "skipped" and skipped["extrapolated"] is True
        assert skipped["slope_assumed"] is True and skipped["from_sizes"] == [50]
        assert skipped["seconds"] == pytest.approx(first["seconds"] * (80 / 50) ** 3, rel=1e-12)
        assert skipped["ratio_to_fastrvm"] == skipped["seconds"] / rows[1]["peers"]["fastrvm"]["seconds"]


@pytest.mark.slow  # the script end to end: outside the default run (`pytest -m slow`)
def test_rvm_bench_quick_classification(tmp_path):
    """On 100 of Ripley's points, with a cap low enough that the sweeps (their warm call includes
    compilation) are called once only: the cap's path."""
    bench = script_module("benchmarks.rvm")
    _, record = run_script("benchmarks/rvm.py", "--classification", "--quick", "--cap", "0.5", "--out", tmp_path / "c.json",
                           record=tmp_path / "c.json")
    assert record["partial"] is False and record["kind"] == "classification"
    peers = record["peers"]
    assert peers[0] == "fastrvm" and set(CLASSIFICATION_FIELDS) <= set(peers)
    (r,) = record["rows"]
    assert (r["data"], r["n"], r["m"], r["n_test"]) == ("ripley[100/250]", 100, 101, 1000)
    ref = r["peers"]["fastrvm"]
    for name, rec in r["peers"].items():
        _check_peer(name, rec, ref, 0.5, CLASSIFICATION_FIELDS.get(name, {"test_error"}), r["m"], r["rounds"])
    for name in ("cavi", "cavi_robust"):
        rec = r["peers"][name]
        if rec["status"] == "capped":
            assert rec["rounds"] == 1 and rec["seconds"] == max(
                rec["first_call_seconds"] - rec["first_call_compile_seconds"], 0.0)

    # the goals restate the recorded values against the thresholds
    g, peer = r["goals"], r["peers"]
    for fast, sweep in (("cavi_fast", "cavi"), ("cavi_robust_fast", "cavi_robust")):
        prefix = "" if fast == "cavi_fast" else "robust_"
        gap = g[prefix + "fast_error_minus_sweep_points"]
        assert gap["value"] == peer[fast]["test_error"] - peer[sweep]["test_error"]
        assert gap["met"] == (gap["value"] <= 0.5)
        assert g[prefix + "fast_seconds"] == {"value": peer[fast]["seconds"], "met": peer[fast]["seconds"] < 0.5}

    problem = bench.classification_problem("ripley", 100)
    assert problem.t.mean() == 0.5  # the evenly spaced subsample keeps both classes
    logits = problem.Phi_test[:, ref["coef_columns"]] @ np.asarray(ref["coef"])
    assert ref["test_error"] == pytest.approx(100 * np.mean((logits > 0) != (problem.t_test > 0.5)), rel=1e-12)


def test_fastrvm_columns_reproduce_fastrvm_predictions():
    """fastrvm fitted on the inputs with its own RBF kernel (gamma = our delta) predicts through its
    own ``predict``; the bench's mapping of that fit onto our design (bias column first) gives the
    same predictions, and the bench's precomputed-kernel fit selects the same columns."""
    import fastrvm

    from ppl_sbl import basis, datasets

    bench = script_module("benchmarks.rvm")

    d = datasets.sinc(n_train=40, n_test=50, seed=3)
    own = fastrvm.RVR(kernel="rbf", gamma=bench.DELTA, fit_intercept=True).fit(d.X_train, d.t_train)
    cols, coef = bench.fastrvm_columns(own)
    Phi_test = basis.rbf(d.X_test, d.X_train, delta=bench.DELTA, bias=True)
    assert cols[0] == 0 and len(cols) == len(own.relevance_) + 1
    assert np.max(np.abs(Phi_test[:, cols] @ coef - own.predict(d.X_test))) < 1e-10

    prob = bench.make_problem("sinc", d.X_train, d.t_train, d.X_test, d.t_test, bench.DELTA)
    pre = fastrvm.RVR(kernel="precomputed", fit_intercept=True).fit(prob.K, prob.t)
    pre_cols, pre_coef = bench.fastrvm_columns(pre)
    assert np.array_equal(pre_cols, cols)
    assert np.max(np.abs(prob.Phi_test[:, pre_cols] @ pre_coef - own.predict(d.X_test))) < 1e-8

    # classification: the logits (decision_function) of a binary RVC
    problem = bench.classification_problem("ripley", 60)
    own = fastrvm.RVC(kernel="rbf", gamma=bench.CLASSIFICATION_DELTA, fit_intercept=True).fit(problem.X, problem.t)
    cols, coef = bench.fastrvm_columns(own)
    assert np.max(np.abs(problem.Phi_test[:, cols] @ coef - own.decision_function(problem.X_test))) < 1e-10
    pre = fastrvm.RVC(kernel="precomputed", fit_intercept=True).fit(problem.K, problem.t)
    assert np.array_equal(bench.fastrvm_columns(pre)[0], cols)
