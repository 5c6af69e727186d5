"""The derived-guide benchmark (benchmarks/derived_cavi.py) runs in quick mode: its record has every
peer and comparison, its ratios and goals are the arithmetic of the recorded fits, and each shipped
model's derived fit ends at the shipped fit's ELBO (no timing is asserted)."""
import math

import pytest
from scripts import run_script, script_module

FIT_FIELDS = {"status", "seconds", "min_seconds", "rounds", "first_call_seconds", "first_call_compile_seconds",
              "schedule", "converged", "elbo", "num_sweeps", "num_moves", "relevant", "relevance_columns",
              "relevant_groups"}


@pytest.mark.slow  # the script end to end (about 40 s on 2 cores): outside the default run (`pytest -m slow`)
def test_derived_cavi_bench_quick(tmp_path):
    bench = script_module("benchmarks.derived_cavi")
    _, record = run_script("benchmarks/derived_cavi.py", "--quick", "--out", tmp_path / "r.json",
                           record=tmp_path / "r.json")
    assert record["partial"] is False and record["args"]["quick"] is True
    assert record["environment"]["x64"] is True
    assert record["first_peer"] == "rvm_regression" and "JAX's start" in record["timing"]
    (row,) = record["rows"]
    assert row["n"] == record["args"]["sizes"][0] == 60 and row["m"] == 61 and row["m_table"] == 60
    expected = {name for s in bench.SHIPPED for name in (s, s + "_derived")} | set(bench.EDITED) | {
        "robust_regression_table"}
    assert set(row["peers"]) == expected
    for name, rec in row["peers"].items():
        assert rec["status"] in ("measured", "capped"), (name, rec.get("error"))
        assert not FIT_FIELDS - set(rec), (name, FIT_FIELDS - set(rec))
        assert rec["relevant"] == len(rec["relevance_columns"]) >= 1
        assert rec["relevant_groups"] == len({c // bench.GROUP_SIZE for c in rec["relevance_columns"]})
        assert ("rmse" in rec) != ("test_error" in rec)
        assert math.isfinite(rec.get("rmse", rec.get("test_error")))

    comps = record["comparisons"]
    assert [(c["kind"], c["model"]) for c in comps] == (
        [("derived", s) for s in bench.SHIPPED] + [("edited", e) for e in bench.EDITED])
    for c in comps:
        fit, against = row["peers"][c["peer"]], row["peers"][c["against"]]
        assert c["ratio"] == fit["seconds"] / against["seconds"]
        assert c["goals"]["time"]["value"] == c["ratio"]
        if c["kind"] == "derived":
            # the derived guide of a shipped model runs the same fast schedule to the same ELBO
            assert c["schedule"] == c["schedule_against"] == "fast"
            assert abs(fit["elbo"] - against["elbo"]) <= 1e-8 * abs(against["elbo"])
            assert c["elbo_relative_difference"] == abs(fit["elbo"] - against["elbo"]) / abs(against["elbo"])
            assert c["goals"]["elbo"]["met"] is True
            assert c["relevant"] == c["relevant_against"]
            assert c["goals"]["time"]["met"] == (c["ratio"] <= bench.DERIVED_TIME_GOAL)
        else:
            assert c["applies"] is False  # the edited models' goals apply at N = 1000 and 2000 only
            key = "relevant_groups" if c["model"] == "group_ard" else "relevant"
            assert (c["count"], c["count_against"]) == (fit[key], against[key])
            assert c["goals"]["relevant"]["met"] == (c["count"] <= 2 * c["count_against"] + 2)
            assert c["quality_value"] == fit[c["quality"]] and c["quality_against"] == against[c["quality"]]
    failed = record["goals_failed"]
    assert record["goals_applied"] == 2 * len(bench.SHIPPED)  # at N = 60 only the derived goals apply
    assert all(f.endswith(" time") for f in failed)  # the ELBOs agree (checked above); only time can fail
    assert "goals" in record["table"] and "rvm_regression" in record["table"]
