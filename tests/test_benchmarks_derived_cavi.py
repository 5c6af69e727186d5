"""The derived-CAVI speed benchmark (benchmarks/derived_cavi.py) runs in quick mode; the two guides it
times agree (no timing is asserted)."""
import pytest
from scripts import run_script


@pytest.mark.slow  # the script end to end: outside the default run (`pytest -m slow`)
def test_derived_cavi_bench_quick(tmp_path):
    proc, record = run_script("benchmarks/derived_cavi.py", "--quick", "--out", tmp_path / "r.json",
                              record=tmp_path / "r.json")
    rows = record["rows"]
    assert {(r["model"], r["N"]) for r in rows} == {(m, n) for m in ("rvm_regression", "rvm_classification",
                                                                      "p_grid_regression")
                                                    for n in record["args"]["sizes"]}
    assert {r["M"] for r in rows} == {64}  # quick: N = 63, where the RVM's M = N + 1 is the p-grid's
    for r in rows:
        assert r["hand_seconds"] > 0 and r["derived_seconds"] > 0
        assert r["elbo_relative_difference"] < 1e-10  # the same sweeps were timed
