"""The GPLVM speed benches: quick modes run, each record agrees with itself, and the arithmetic floor
is checked against XLA's own flop count of the compiled data term."""
import math

import pytest

from scripts import run_script, script_module


@pytest.mark.slow  # the script end to end: outside the default run (`pytest -m slow`)
def test_gplvm_bench_quick(tmp_path):
    _, record = run_script("benchmarks/gplvm.py", "--quick", "--out", tmp_path / "g.json", record=tmp_path / "g_quick.json")
    assert record["partial"] is False and set(record["goals"]) == {
        "bound_and_grad_within_3x_q_cholesky_at_every_n", "exact_lambda_gradient_within_3x_q_cholesky_at_every_n"}
    rows = record["rows"]
    assert [r["n"] for r in rows] == [50, 100]
    for r in rows:
        assert r["bound_and_grad_seconds"] > 0 and r["jax_cholesky_seconds"] > 0
        assert r["ratio_to_jax_cholesky"] == r["bound_and_grad_seconds"] / r["jax_cholesky_seconds"]
        assert r["natural_ratio_to_jax_cholesky"] == r["natural_bound_and_grad_seconds"] / r["jax_cholesky_seconds"]
        assert r["natural_min_ratio_to_jax_cholesky"] == r["natural_min_seconds"] / r["jax_cholesky_min_seconds"]
        # the floor: the evaluation's LAPACK calls alone, plus its data term
        assert r["floor_ratio_to_jax_cholesky"] == (
            (r["lapack_floor_seconds"] + r["natural_data_term_seconds"]) / r["jax_cholesky_seconds"])
        assert r["floor_min_ratio_to_jax_cholesky"] == (
            (r["lapack_floor_min_seconds"] + r["natural_data_term_min_seconds"]) / r["jax_cholesky_min_seconds"])
        assert 0 < r["lapack_floor_min_seconds"] <= r["lapack_floor_seconds"]
        # the compiled route's floor (N <= 512, both quick sizes): its factorisations and inverses alone,
        # plus the data term
        assert r["compiled_floor_ratio_to_jax_cholesky"] == (
            (r["compiled_floor_seconds"] + r["natural_data_term_seconds"]) / r["jax_cholesky_seconds"])
        assert r["compiled_floor_min_ratio_to_jax_cholesky"] == (
            (r["compiled_floor_min_seconds"] + r["natural_data_term_min_seconds"]) / r["jax_cholesky_min_seconds"])
        assert 0 < r["compiled_floor_min_seconds"] <= r["compiled_floor_seconds"]
        # a minimum over the rounds is at most their median
        assert r["natural_min_seconds"] <= r["natural_bound_and_grad_seconds"]
        assert r["jax_cholesky_min_seconds"] <= r["jax_cholesky_seconds"]
        assert math.isfinite(r["bound"])
        # the natural evaluation's bound is the bound (5.20) at the same parameters, by another route
        assert r["natural_bound"] == pytest.approx(r["bound"], rel=1e-9)
        # the arithmetic floor, counted here from its definition (Q = 5, M = 10 in quick mode):
        # potrf and a triangular inverse per latent dimension, and three products of (N, 2Q + 1)
        # and (2Q + 1, M (M + 1) / 2) matrices for Psi2 and its gradient, over Q potrf
        N, Q, M = r["n"], 5, 10
        data_flops = 3 * 2 * N * (2 * Q + 1) * M * (M + 1) // 2
        assert r["arithmetic_floor_ratio"] == pytest.approx((2 * Q * N**3 / 3 + data_flops) / (Q * N**3 / 3), rel=1e-12)
        # XLA's own count of the compiled data term: at least the Psi2 products (at these small Q
        # and M, Psi1 and the M x M algebra are a larger share; see the test below for the record's)
        assert data_flops <= r["data_term_xla_flops"]
    fit = record["fits"][0]
    assert fit["n"] == 100 and 1 <= fit["steps"] <= 20 and math.isfinite(fit["bound"])
    assert 1 <= len(fit["kept_dims"]) <= 5
    # the first goal is judged on the evaluation the default (natural) fit makes, by the ratio of
    # the medians and by that of the minima; the exact (mubar, lambda) gradient's ratio has a goal
    # entry of its own
    assert record["goals"]["bound_and_grad_within_3x_q_cholesky_at_every_n"] == (
        max(max(r["natural_ratio_to_jax_cholesky"], r["natural_min_ratio_to_jax_cholesky"]) for r in rows) <= 3.0)
    assert record["goals"]["exact_lambda_gradient_within_3x_q_cholesky_at_every_n"] == (
        max(r["ratio_to_jax_cholesky"] for r in rows) <= 3.0)
    assert record["summary"]["floor_sizes_above_3x_jax_cholesky"] == [
        r["n"] for r in rows if max(r["floor_ratio_to_jax_cholesky"], r["floor_min_ratio_to_jax_cholesky"]) > 3.0]
    assert record["summary"]["arithmetic_floor_sizes_above_3"] == [
        r["n"] for r in rows if r["arithmetic_floor_ratio"] > 3.0]
    assert record["summary"]["compiled_floor_sizes_above_3x_jax_cholesky"] == [
        r["n"] for r in rows
        if max(r["compiled_floor_ratio_to_jax_cholesky"], r["compiled_floor_min_ratio_to_jax_cholesky"]) > 3.0]


@pytest.mark.slow
def test_gplvm_spread_quick_summarises_its_runs(tmp_path):
    _, record = run_script("benchmarks/gplvm_spread.py", "--quick", "--out", tmp_path / "s.json",
                           record=tmp_path / "s_quick.json")
    assert record["runs"] == 2
    assert list(record["summary"]) == ["50"]  # the quick size
    for n, stats in record["summary"].items():
        assert set(stats) == {"medians", "minima", "floor minima", "compiled floor minima"}
        for s in stats.values():  # the compiled floor is measured at the quick size
            values = s["values"]
            assert len(values) == 2 and all(math.isfinite(v) and v > 0 for v in values)
            assert s["min"] == min(values) and s["max"] == max(values)
            assert s["median"] == sum(values) / 2  # two runs
            assert s["runs_above_goal"] == sum(v > 3.0 for v in values)


def test_arithmetic_floor_counts_the_bulk_of_the_data_term():
    """At the record's setting (digits, N = 100, Q = 20, M = 30) the Psi2 products that
    ``benchmarks/gplvm.py``'s arithmetic floor counts are at most, and most of, the flops XLA counts in
    the compiled data term (value and gradient): the floor is a lower bound, and not a loose one."""
    import argparse

    import numpy as np

    from ppl_sbl import sparse_gp as sg
    from ppl_sbl.models import gplvm

    bench = script_module("benchmarks.gplvm")
    args = argparse.Namespace(latent_dim=20, num_inducing=30, seed=0)
    free, fixed, Y, Z, _ = bench.problem(100, args)
    prob = gplvm.natural.NaturalProblem(free, fixed, Y, Z, prior_kernel="rbf", jitter=sg.JITTER)
    hyper = {k: v for k, v in free.items() if k not in ("mubar", "log_lam")}
    lam = np.asarray(gplvm.precisions(prob.K, free["log_lam"]))
    _, mu, var, _ = prob.moments(np.asarray(free["mubar"]), lam)
    counted = script_module("benchmarks.timing").xla_cost(prob.F_grad, mu, var, hyper, prob.fixed, prob.Z)["flops"]
    data = bench.arithmetic(100, 20, 30)["data_term_flops"]
    assert data == 3 * 2 * 100 * 41 * 465
    assert data <= counted <= 1.25 * data


def test_spread_summary_is_none_where_a_run_lacks_the_statistic():
    """The compiled floor is measured up to N = 512 only: at larger N a run records None, and the
    spread reports no summary rather than failing or counting it."""
    gplvm_spread = script_module("benchmarks.gplvm_spread")
    assert gplvm_spread.spread([2.0, None]) is None
    s = gplvm_spread.spread([2.0, 4.0, 3.5])
    assert (s["min"], s["median"], s["max"], s["runs_above_goal"]) == (2.0, 3.5, 4.0, 2)
    timing = script_module("benchmarks.timing")
    assert timing.fmt(None) == "-" and timing.fmt(float("nan")) == "-" and timing.fmt(2.345) == "2.35"


def test_gplvm_crossover_quick(tmp_path):
    """The routes' bench: both routes agree, each ratio is its recorded times' ratio, the faster
    route is the one with the smaller time, and the fit's route follows _DEVICE_FACTOR_MAX_N."""
    from ppl_sbl import linalg

    _, record = run_script("benchmarks/gplvm_crossover.py", "--quick", "--out", tmp_path / "c.json",
                           record=tmp_path / "c_quick.json")
    assert record["device_factor_max_n"] == linalg.DEVICE_FACTOR_MAX_N
    assert [r["n"] for r in record["rows"]] == [50, 100]
    for r in record["rows"]:
        assert r["routes_diag_inverse_max_relative_difference"] < 1e-10
        for route in ("device", "host"):
            assert r[f"{route}_over_jax_cholesky"] == r[f"{route}_seconds"] / r["jax_cholesky_seconds"]
            assert r[f"{route}_min_over_jax_cholesky"] == r[f"{route}_min_seconds"] / r["jax_cholesky_min_seconds"]
            assert 0 < r[f"{route}_min_seconds"] <= r[f"{route}_seconds"]
        assert r["faster_by_medians"] == ("device" if r["device_seconds"] < r["host_seconds"] else "host")
        assert r["faster_by_minima"] == ("device" if r["device_min_seconds"] < r["host_min_seconds"] else "host")
        assert r["fit_takes"] == ("device" if r["n"] <= linalg.DEVICE_FACTOR_MAX_N else "host")
