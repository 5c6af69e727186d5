"""The fit_grid benchmark (benchmarks/fit_grid.py) in quick mode: it runs, writes its record, every
grid's fits are the fits one by one, and the ratios it reports are its own times'."""
import pytest

from scripts import run_script


@pytest.mark.slow  # the script end to end (about 40 s on 2 cores): outside the default run (`pytest -m slow`)
def test_fit_grid_bench_quick(tmp_path):
    out = tmp_path / "fg.json"
    run, record = run_script("benchmarks/fit_grid.py", "--quick", "--out", out, record=out)
    (label, problem), = record["problems"].items()
    assert label == "sinc100" and len(problem["widths"]) == 4
    peers = problem["peers"]
    assert set(peers) == {"one_fit", "one_by_one", "grid_sequential", "grid_threads", "grid_vmapped",
                          "estimator_fit", "estimator_loop", "elbo_search"}
    for name in ("grid_sequential", "grid_threads", "grid_vmapped"):
        assert peers[name]["same_fits_as_one_by_one"] is True
        assert peers[name]["ratio_to_one_fit"] == peers[name]["seconds"] / peers["one_fit"]["seconds"]
        assert len(peers[name]["elbo"]) == 4
    assert peers["elbo_search"]["same_fits_as_one_by_one"] is True and len(peers["elbo_search"]["elbo"]) == 4
    assert peers["elbo_search"]["ratio_to_one_fit"] == (peers["elbo_search"]["seconds"]
                                                        / peers["estimator_fit"]["seconds"])
    assert "grid_sequential" in run.stdout
