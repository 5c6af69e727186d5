"""The grid RVM experiment script (experiments/grid_rvm.py) runs end to end in quick mode."""
import math

import numpy as np
import pytest
from scripts import run_script

pytest.importorskip("matplotlib")
pytest.importorskip("sklearn")

# the script end to end, in quick mode: outside the default run (`pytest -m slow`)
pytestmark = pytest.mark.slow

FIGURES = ["grid_rvm_sinc_rmse", "grid_rvm_sinc_relevant", "grid_rvm_mixture_error", "grid_rvm_digits_error",
           "grid_rvm_digits_relevance"]
METRICS = {
    "sinc": ["rmse_test", "rmse_train", "relevant", "noise_weight_share", "seconds", "num_sweeps"],
    "mixture": ["error_test", "error_train", "relevant", "noise_weight_share", "seconds", "num_sweeps"],
    "digits": ["error_test", "error_train", "relevant", "seconds", "num_sweeps"],
}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("grid_experiments")
    _, record = run_script("experiments/grid_rvm.py", "--quick", "--out-dir", out,
                           record=out / "grid_rvm_experiments_quick.json")
    return out, record


def test_record_has_every_experiment_with_finite_numbers(quick_run):
    _, record = quick_run
    assert record["mode"] == "quick"
    for name, metrics in METRICS.items():
        cfg = record["config"][name]
        xs = cfg["noise_features"] if name != "digits" else cfg["sizes"]
        fits = record[name]["fits"]
        assert len(fits) == 3 * len(xs) * len(cfg["seeds"])
        summary = record[name]["summary"]
        assert {(e["model"]) for e in summary} == {"rvm", "p", "s"}
        assert len(summary) == 3 * len(xs)
        for entry in summary:
            assert entry["repetitions"] == len(cfg["seeds"])
            for m in metrics:
                assert math.isfinite(entry[m]), (name, entry)
        for fit in fits:
            assert fit["num_sweeps"] >= 1 and math.isfinite(fit["elbo"])
        # each summary entry is the mean of its fits
        for entry in summary:
            x_key = "n_train" if name == "digits" else "noise_features"
            mine = [f for f in fits if f["model"] == entry["model"] and f[x_key] == entry[x_key]]
            assert len(mine) == entry["repetitions"]
            assert entry["fits_at_cap"] == sum(not f["converged"] for f in mine)
            assert entry[metrics[0]] == pytest.approx(np.mean([f[metrics[0]] for f in mine]), rel=1e-12)
    maps = record["digits"]["relevance"]["precisions"]
    assert len(maps["rvm"]["alpha"]) == 64
    for kind in ("p", "s"):
        assert len(maps[kind]["alpha"]) == 8 and len(maps[kind]["beta"]) == 8
        assert np.all(np.isfinite(maps[kind]["alpha"])) and np.all(np.asarray(maps[kind]["beta"]) > 0)
    assert math.isfinite(record["seconds_total"])
    assert set(record["paper"]) == set(METRICS)  # the paper's claims, beside each table


def test_figures_written(quick_run):
    out, record = quick_run
    assert sorted(record["figures"]) == sorted(f + "_quick.png" for f in FIGURES)
    for name in record["figures"]:
        path = out / name
        assert path.stat().st_size > 1000
        with open(path, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_sanity_not_a_tuned_figure(quick_run):
    """Every model learns something: errors below chance, RMSE below the spread of the targets."""
    from ppl_sbl import datasets

    _, record = quick_run
    cfg = record["config"]["sinc"]
    target_sd = np.std(datasets.sinc(n_train=cfg["n_train"], n_test=cfg["n_test"], seed=0).t_test)
    for fit in record["sinc"]["fits"]:
        assert fit["rmse_test"] < target_sd, fit
    for name in ("mixture", "digits"):
        for fit in record[name]["fits"]:
            assert fit["error_test"] < 0.5, (name, fit)
