"""The sequential SBL speed benchmark (benchmarks/sequential_sbl.py) in quick mode: it runs, writes its
record, and the numbers it reports agree with what the record's own pieces imply."""
import math

import pytest

from scripts import run_script

pytest.importorskip("skimage")


def test_speed_bench_quick(tmp_path):
    out = tmp_path / "ss.json"
    _, record = run_script("benchmarks/sequential_sbl.py", "--quick", "--out", out, record=tmp_path / "ss_quick.json")
    rows = record["rows"]
    assert [r["size"] for r in rows] == [6, 10]
    for r in rows:
        assert r["add_sample"]["samples"] == 10 and r["add_sample"]["mean_seconds"] > 0
        assert math.isfinite(r["ard"]["L"]) and math.isfinite(r["update_noise"]["L"])
        assert r["fixed_noise"]["converged"] and r["update_noise"]["converged"]
        assert r["update_noise_every"]["converged"] and r["update_noise_every"]["noise_every"] == 10
        # the log marginal likelihoods are all evaluated by the same formula; ours maximise it
        assert r["update_noise"]["L"] >= r["ard"]["L"] - 1e-6
    assert set(record["goals"]) == {"fit_20x_faster_than_ard", "passes_ard_L_20x_sooner_than_ard_finishes",
                                    "L_at_least_ard", "add_sample_100x_faster_than_refit",
                                    "peak_below_one_nxn_at_largest"}
    # the summary restates the rows, and the goals the summary
    summary, goals = record["summary"], record["goals"]
    assert summary["ard_largest_size"] == 10
    largest = rows[-1]
    assert summary["ard_over_ours_every_move_at_largest_ard_size"] == (
        largest["ard"]["seconds"] / largest["update_noise"]["seconds"])
    assert summary["L_ours_every_move_minus_ard"] == largest["update_noise"]["L"] - largest["ard"]["L"]
    assert summary["add_sample_speedup_min"] == min(r["add_sample"]["refit_over_add_sample"] for r in rows)
    assert goals["fit_20x_faster_than_ard"] == (summary["ard_over_ours_every_move_at_largest_ard_size"] >= 20)
    assert goals["add_sample_100x_faster_than_refit"] == (summary["add_sample_speedup_min"] >= 100)
    assert goals["peak_below_one_nxn_at_largest"] == (
        summary["peak_bytes_at_largest"] < summary["dense_nxn_bytes_at_largest"])
