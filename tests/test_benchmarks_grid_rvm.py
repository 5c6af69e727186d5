"""Smoke test of benchmarks/grid_rvm.py --quick: it runs and writes the expected JSON record.

No timing is asserted (the benchmark's numbers depend on the machine); only the structure of
the record and the plausibility of the fits.
"""
import math

import pytest
from scripts import run_script

MODELS = ("p", "s", "rvm")


@pytest.mark.slow  # the script end to end: outside the default run (`pytest -m slow`)
def test_grid_rvm_bench_quick(tmp_path):
    _, record = run_script("benchmarks/grid_rvm.py", "--quick", "--out", tmp_path / "x.json", record=tmp_path / "x.json")
    assert record["partial"] is False
    assert record["args"]["quick"] is True
    assert isinstance(record["goal_met"], bool)
    assert math.isfinite(record["worst_ratio"]) and record["worst_ratio"] > 0
    assert record["goal_met"] == (record["worst_ratio"] <= 1.2)
    assert record["worst_ratio"] == max(r["per_sweep"][m]["ratio_to_rvm"]["min"] for r in record["rows"] for m in ("p", "s"))
    assert record["worst_per_round_median_ratio"] == max(
        r["per_sweep"][m]["ratio_to_rvm"]["paired_median"] for r in record["rows"] for m in ("p", "s"))
    env = record["environment"]
    assert env["jax_backend"] and env["x64"] is True and "jax" in env["versions"]

    rows = record["rows"]
    assert [(r["task"], r["data"], r["k"]) for r in rows] == [("regression", "sinc", 1),
                                                             ("classification", "mixture", 1)]
    for r in rows:
        assert r["m"] == r["n"] * r["d"]
        assert r["d"] == (2 if r["task"] == "regression" else 3)
        ps = r["per_sweep"]
        for model in MODELS:
            x = ps[model]
            assert 0 < x["sweep"]["min"] <= x["sweep"]["median"] <= x["sweep"]["max"]
            assert x["sweep"]["rounds"] == x["rounds"] == 5 and "samples" not in x["sweep"]  # a summary only
            assert 1 <= x["reps_per_round"]["min"] <= x["reps_per_round"]["max"]
            assert x["sweep_cpu"]["min"] >= 0
            assert x["finite"]
            assert x["xla_cost"]["sweep"]["fusions"] > 0
        for model in ("p", "s"):
            assert ps[model]["ratio_to_rvm"]["min"] > 0 and ps[model]["cpu_ratio_to_rvm"]["min"] >= 0
            for stat in ("min", "median"):
                assert ps[model]["ratio_to_rvm"][stat] == ps[model]["sweep"][stat] / ps["rvm"]["sweep"][stat]
            assert ps[model]["ratio_to_rvm"]["paired_median"] > 0
            # the same linear algebra: XLA counts about the same flops for a grid sweep and an RVM sweep
            assert 0.5 < ps[model]["flops_ratio_to_rvm"] < 2.0
        # the three models use the same covariance form at the same size
        assert len({(ps[m]["factored_covariance"], ps[m]["woodbury_rank"]) for m in MODELS}) == 1

        # to convergence where M <= 60 only: the sinc (M = 60), not the mixture (M = 120)
        conv = r["convergence"]
        assert (conv is not None) == (r["m"] <= record["args"]["converge_max_m"]) == (r["task"] == "regression")
        if conv is None:
            continue
        for model in MODELS:
            c = conv[model]
            assert 1 <= c["num_sweeps"] <= 100
            assert c["seconds_incl_jit"] >= c["seconds_excl_jit"]
            assert c["compile_seconds"] >= 0
            assert math.isfinite(c["elbo"])
            assert 0 <= c["num_active_at_end"] <= r["m"] and c["num_prunes"] >= 0
            assert 0 <= c["relevant_dims"] <= r["d"]
        assert all(conv[m]["rmse"] < 0.3 for m in MODELS)  # the sinc has amplitude 1
