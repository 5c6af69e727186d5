"""Smoke test of benchmarks/robust_rvm.py --quick: it runs and writes the expected JSON record.

No timing is asserted (the benchmark's numbers depend on the machine); only the structure of
the record, the plausibility of the fits, and that the vmapped grid and the loop of the jitted
``fit`` (the same algorithm) agree width by width.
"""
import math

import pytest
from scripts import run_script


def _seconds(x):
    return isinstance(x, float) and math.isfinite(x) and x >= 0


@pytest.mark.slow  # the script end to end: outside the default run (`pytest -m slow`)
def test_robust_rvm_bench_quick(tmp_path):
    out = tmp_path / "x.json"
    _, record = run_script("benchmarks/robust_rvm.py", "--quick", "--out", out, record=out)
    assert record["partial"] is False
    args = record["args"]
    assert args["quick"] is True
    assert isinstance(record["goal_met"], bool)
    assert math.isfinite(record["worst_ratio"]) and record["worst_ratio"] > 0
    assert record["goal_met"] == all(r["goal_met"] for r in record["rows"])
    assert record["worst_ratio"] == max(max(r["ratios"]["vmapped_over_loop_pruned"], r["ratios"]["vmapped_over_loop_fit"])
                                        for r in record["rows"])
    env = record["environment"]
    assert env["jax_backend"] and env["x64"] is True and "sklearn" in env["versions"]

    rows = record["rows"]
    assert [(r["data"], r["n_train"]) for r in rows] == [(name, n) for name in ("ripley", "biopsy")
                                                         for n in args["sizes"]]
    for r in rows:
        assert r["m"] == r["n_train"] + 1
        assert r["inputs"] == (2 if r["data"] == "ripley" else 9)
        deltas = r["deltas"]
        assert len(deltas) == args["widths"] and deltas == sorted(deltas)

        # (a) the vmapped grid: first call (with jit) and second call
        a = r["vmapped"]
        assert _seconds(a["first_call"]["seconds_incl_jit"]) and _seconds(a["second_call"]["seconds"])
        assert a["first_call"]["seconds_incl_jit"] >= a["first_call"]["seconds_excl_jit"]
        assert a["repeat_identical"] is True
        assert 0 < a["lane_utilisation"] <= 1
        # (a2) every width vmapped side by side, at the sizes up to --all-lanes-max-n (quick: the smaller)
        a2 = r["all_lanes"]
        assert (a2 is not None) == (r["n_train"] <= args["all_lanes_max_n"])
        if a2 is not None:
            assert a2["resolved_batch_size"] == args["widths"] and a2["repeat_identical"] is True
            assert math.isfinite(r["ratios"]["all_lanes_over_default"]) and r["ratios"]["all_lanes_over_default"] > 0
        # (b), (c) the loops
        for arm in ("loop_pruned", "loop_fit"):
            loop = r[arm]["loop"]
            assert _seconds(loop["seconds_incl_jit"]) and loop["seconds_incl_jit"] >= loop["seconds_excl_jit"]

        pw = r["per_width"]
        assert [w["delta"] for w in pw] == deltas
        for w in pw:
            v, f, p = w["vmapped"], w["loop_fit"], w["loop_pruned"]
            assert 1 <= v["num_sweeps"] <= args["max_sweeps"]
            assert v["converged"] or v["num_sweeps"] == args["max_sweeps"]
            # the vmapped and the looped jitted fit are the same algorithm
            assert v["num_sweeps"] == f["num_sweeps"] and v["converged"] == f["converged"]
            assert math.isclose(v["elbo"], f["elbo"], rel_tol=1e-8), (w["delta"], v["elbo"], f["elbo"])
            # the pruned default fit is a different trajectory, but not a worse bound by much
            assert math.isfinite(p["elbo"]) and 1 <= p["num_sweeps"] <= args["max_sweeps"]
            assert 0 <= p["num_active_at_end"] <= r["m"]
            assert 0 <= v["test_error"] <= 1 and 0 <= p["test_error"] <= 1
        agreement = r["agreement"]
        assert agreement["sweeps_equal"] is True and agreement["max_relative_elbo_difference"] <= 1e-8

        rr = r["rrvm"]
        best = max(range(len(pw)), key=lambda i: pw[i]["vmapped"]["elbo"])
        assert rr["chosen_index"] == best and rr["chosen_delta"] == deltas[best]
        assert rr["test_error"] < 0.5
        assert _seconds(rr["training"]["seconds_incl_jit"])

        dv = r["rvm"]
        assert dv["fits"] == args["widths"] * args["folds"]
        assert len(dv["cv_error"]) == args["widths"] and dv["cv_sweeps"] >= dv["fits"]
        assert dv["chosen_delta"] == deltas[dv["chosen_index"]]
        assert dv["cv_error"][dv["chosen_index"]] == min(dv["cv_error"])
        assert _seconds(dv["selection"]["seconds_incl_jit"]) and _seconds(dv["training"]["seconds_incl_jit"])
        assert dv["test_error"] < 0.5

        e = r["svc"]
        assert e["fits"] == len(args["svc_C"]) * args["widths"] * args["folds"]
        assert e["chosen_delta"] in deltas and e["chosen_C"] in args["svc_C"]
        assert len(e["cv_error_at_chosen_C"]) == args["widths"]
        assert e["cv_error_at_chosen_C"][e["chosen_index"]] == min(e["cv_error_at_chosen_C"])
        assert _seconds(e["selection_seconds"]) and _seconds(e["training_seconds"])
        assert e["test_error"] < 0.5

        x = r["ratios"]
        for key in ("vmapped_over_loop_pruned", "vmapped_over_loop_fit", "rrvm_selection_over_rvm_cv",
                    "rrvm_selection_over_svc_cv"):
            assert math.isfinite(x[key]) and x[key] > 0
        assert isinstance(r["goal_met"], bool)

    # every arm's time extrapolated to the full training size from the two sizes run
    full = record["full_size"]
    assert {name: f["n_full"] for name, f in full.items()} == {"ripley": 750, "biopsy": 410}
    for f in full.values():
        assert "probe" not in f  # no full-size probe in a smoke run
        for arm in ("vmapped", "loop_pruned", "loop_fit", "rvm_cv", "svc_cv"):
            est = f["estimates"][arm]
            if est is None:  # a time excl. jit can come out <= 0 on a tiny problem: no log-log fit
                assert arm in ("loop_pruned", "loop_fit", "rvm_cv")
                continue
            assert est["extrapolated"] is True and est["from_sizes"] == args["sizes"]
            assert math.isfinite(est["seconds"]) and est["seconds"] > 0
