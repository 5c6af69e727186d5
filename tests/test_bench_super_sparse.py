"""The super-sparse speed benchmark (bench/super_sparse.py) runs in quick mode and its record is
complete and consistent (no timing is asserted)."""
import math

import pytest
from scripts import run_script

pytest.importorskip("sklearn")


def test_speed_bench_quick(tmp_path):
    proc, record = run_script("bench/super_sparse.py", "--quick", "--out", tmp_path / "r.json",
                              record=tmp_path / "r.json")
    args = record["args"]
    assert [row["n"] for row in record["sizes"]] == args["sizes"]
    for row in record["sizes"]:
        for key in record["methods"]:
            assert row[key]["seconds"] > 0 and math.isfinite(row[key]["seconds"])
            assert 0.5 < row[key]["test_auc"] <= 1.0
        for key in ("reduction", "labels"):
            assert row[key]["m"] == args["m"] and 1 <= row[key]["steps"] <= args["steps"]
        # the point of the method: far fewer similarity evaluations per test point
        assert args["m"] < row["svc"]["n_sv"]
    assert [r["n"] for r in record["ratios"]] == args["sizes"]
    assert "ratios:" in proc.stdout
