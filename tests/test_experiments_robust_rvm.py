"""The robust RVM experiment script (experiments/robust_rvm.py) runs end to end in quick mode."""
import math

import pytest
from scripts import run_script

pytest.importorskip("matplotlib")
pytest.importorskip("sklearn")

FIGURES = ["robust_rvm_weighted_loss", "robust_rvm_boundaries", "robust_rvm_sensitivity"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("robust_experiments")
    proc, record = run_script("experiments/robust_rvm.py", "--quick", "--out-dir", out,
                              record=out / "robust_rvm_experiments_quick.json")
    return out, record, proc.stdout


def test_record_has_every_table_with_finite_numbers(quick_run):
    _, record, stdout = quick_run
    assert record["partial"] is False
    plan = {"ripley": ["0.0", "0.05", "0.1"], "biopsy": ["0.0", "0.1"]}
    for name, percs in plan.items():
        assert sorted(record["results"][name]) == sorted(percs)
        for perc in percs:
            block = record["results"][name][perc]
            assert len(block["runs"]) == record["args"]["repeats"]
            for model in ("SVM", "RVM", "RRVM"):
                for key in ("ERR", "AUC", "RMSE", "nonzero"):
                    mean, _ = block["summary"][model][key]
                    assert math.isfinite(mean), (name, perc, model, key)
            for run in block["runs"]:
                # the RRVM's width is the one with the highest ELBO on the grid
                widths = run["RRVM"]["per_width"]
                assert run["RRVM"]["delta"] == max(widths, key=lambda w: w["elbo"])["delta"]
    for title in ("ripley, perc = 10%", "biopsy, perc = 0%", "Table 7"):
        assert title in stdout


def test_every_classifier_learns_something(quick_run):
    """Not a tuned figure: errors below chance and AUC above 0.5 on every split."""
    _, record, _ = quick_run
    for name, blocks in record["results"].items():
        for perc, block in blocks.items():
            for run in block["runs"]:
                for model in ("SVM", "RVM", "RRVM"):
                    assert run[model]["ERR"] < 50 and run[model]["AUC"] > 50, (name, perc, model, run[model])


def test_figures_written(quick_run):
    out, record, _ = quick_run
    assert sorted(record["figures"]) == sorted(f + "_quick.png" for f in FIGURES)
    for name in record["figures"]:
        with open(out / name, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    curves = record["sensitivity"]["mean_abs_change"]
    assert set(curves) == {"SVM", "RVM", "RRVM"}
    assert all(math.isfinite(v) for c in curves.values() for v in c)
