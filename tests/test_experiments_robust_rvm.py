"""The robust RVM experiment script (experiments/robust_rvm.py) runs end to end in quick mode."""
import math

import pytest
from scripts import run_script

pytest.importorskip("matplotlib")
pytest.importorskip("sklearn")

# the script end to end, in quick mode: outside the default run (`pytest -m slow`)
pytestmark = pytest.mark.slow

FIGURES = ["robust_rvm_weighted_loss", "robust_rvm_boundaries", "robust_rvm_sensitivity"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("robust_experiments")
    _, record = run_script("experiments/robust_rvm.py", "--quick", "--out-dir", out,
                           record=out / "robust_rvm_experiments_quick.json")
    return out, record


def test_record_has_every_table_with_finite_numbers(quick_run):
    _, record = quick_run
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
            for model in ("SVM", "RVM", "RRVM"):
                # the summary is the mean over the runs, each run's width one of the grid's
                errs = [run[model]["ERR"] for run in block["runs"]]
                assert block["summary"][model]["ERR"][0] == pytest.approx(sum(errs) / len(errs), rel=1e-12)
                assert all(run[model]["delta"] in record["args"]["deltas"] for run in block["runs"])
            for model in ("RVM", "RRVM"):
                assert block["summary"][model]["not_converged"] == sum(not run[model]["converged"]
                                                                       for run in block["runs"])
                assert all(run[model]["selection"] == ("elbo" if model == "RRVM" else record["args"]["rvm_selection"])
                           for run in block["runs"])
    # the paper's tables beside ours, for every data set and share of flipped labels
    assert set(record["paper"]) == set(plan) and all(sorted(record["paper"][n]) == sorted(plan[n]) for n in plan)


def test_every_classifier_learns_something(quick_run):
    """Not a tuned figure: errors below chance and AUC above 0.5 on every split."""
    _, record = quick_run
    for name, blocks in record["results"].items():
        for perc, block in blocks.items():
            for run in block["runs"]:
                for model in ("SVM", "RVM", "RRVM"):
                    assert run[model]["ERR"] < 50 and run[model]["AUC"] > 50, (name, perc, model, run[model])


def test_figures_written(quick_run):
    out, record = quick_run
    assert sorted(record["figures"]) == sorted(f + "_quick.png" for f in FIGURES)
    for name in record["figures"]:
        with open(out / name, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    curves = record["sensitivity"]["mean_abs_change"]
    assert set(curves) == {"SVM", "RVM", "RRVM"}
    assert all(math.isfinite(v) for c in curves.values() for v in c)
