"""The compile-time benchmark (benchmarks/compile_time.py) in quick mode: it runs, writes its record,
the three options' programs make the same fit, and the ratios it reports are its own times'."""
import pytest

from scripts import run_script


@pytest.mark.slow  # the script end to end: outside the default run (`pytest -m slow`)
def test_compile_time_bench_quick(tmp_path):
    out = tmp_path / "ct.json"
    run, record = run_script("benchmarks/compile_time.py", "--quick", "--out", out, record=out)
    if "unavailable" in record:
        pytest.skip("this jaxlib has no choice of emitters")
    (label, row), = record["programs"].items()
    assert label == "rvm_regression_sinc40" and row["n"] == 40 and row["same_fit"] is True
    assert row["compile_ratio_loop_to_fusion"] == (row["loop"]["compile_seconds"]["median"]
                                                   / row["fusion"]["compile_seconds"]["median"])
    assert row["run_ratio_loop_unoptimized_to_fusion"] == (row["loop_unoptimized"]["run_seconds"]["median"]
                                                           / row["fusion"]["run_seconds"]["median"])
    assert row["sweeps"]["loop"] == row["sweeps"]["fusion"] == row["sweeps"]["loop_unoptimized"] > 5
    assert "rvm_regression_sinc40" in run.stdout
