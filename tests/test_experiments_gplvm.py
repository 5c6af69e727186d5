"""The GPLVM experiment script (experiments/gplvm.py) runs end to end in quick mode; its
record is structurally complete and internally consistent (no tuned figures asserted)."""
import math

import numpy as np
import pytest
from scripts import run_script

pytest.importorskip("matplotlib")
pytest.importorskip("sklearn")

# the script end to end, in quick mode: outside the default run (`pytest -m slow`)
pytestmark = pytest.mark.slow

FIGURES = ["gplvm_latent", "gplvm_ard"]
FITS = ["sup_lin", "sup_rbf", "sup_m32", "autoenc", "unsup"]
COLUMNS = ["sup_lin_1nn", "sup_rbf_1nn", "sup_m32_1nn", "sup_lin_post", "sup_rbf_post", "sup_m32_post",
           "autoenc_1nn", "unsup_1nn", "pca_lda_1nn", "rf", "svm_linear"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gplvm_experiments")
    _, record = run_script("experiments/gplvm.py", "--quick", "--out-dir", out,
                           record=out / "gplvm_experiments_quick.json")
    return out, record


def test_record_is_complete(quick_run):
    _, record = quick_run
    assert record["partial"] is False and record["mode"] == "quick"
    args = record["args"]
    assert len(record["folds"]) == args["folds"]
    assert record["data"]["n_points"] == args["n_points"]
    assert sorted(record["table"]) == sorted(COLUMNS)
    assert sorted(record["fit_summary"]) == sorted(FITS)
    assert "Cohn-Kanade" in record["note"]  # the thesis's data are not these
    # the folds partition the subset: every point tested exactly once
    assert sum(f["test_size"] for f in record["folds"]) == args["n_points"]
    for fold in record["folds"]:
        assert fold["train_size"] + fold["test_size"] == args["n_points"]
        assert sorted(fold["fits"]) == sorted(FITS)
        assert "predictions" not in fold  # the record keeps the tables, not every prediction
    for row in record["table"].values():
        assert row["tested"] == args["n_points"]


def test_accuracies_in_range_and_overall_is_the_count_weighted_class_mean(quick_run):
    _, record = quick_run
    counts = record["data"]["class_counts"]
    total = sum(counts.values())
    assert total == record["data"]["n_points"]
    for col, row in record["table"].items():
        assert sorted(row["per_class"]) == sorted(counts)
        for acc in list(row["per_class"].values()) + [row["overall"]] + row["per_fold"]:
            assert 0.0 <= acc <= 100.0, (col, acc)
        weighted = sum(row["per_class"][c] * n for c, n in counts.items()) / total
        assert row["overall"] == pytest.approx(weighted, rel=1e-12, abs=1e-9), col
        # and both agree with the counts of correct predictions
        assert row["overall"] == pytest.approx(100.0 * row["correct"] / row["tested"], rel=1e-12), col
        assert row["correct"] == sum(row["per_class_correct"].values())
        for c, n in counts.items():
            assert row["per_class"][c] == pytest.approx(100.0 * row["per_class_correct"][c] / n, rel=1e-12)
        # the pooled accuracy is the fold accuracies weighted by the fold sizes
        sizes = [f["test_size"] for f in record["folds"]]
        assert row["overall"] == pytest.approx(np.dot(row["per_fold"], sizes) / sum(sizes), rel=1e-12)


def test_fits_record_ard_and_optimiser_facts(quick_run):
    _, record = quick_run
    Q, max_steps = record["args"]["latent_dim"], record["args"]["max_steps"]
    for key in FITS:
        summary = record["fit_summary"][key]
        kept = summary["kept_dims"]
        assert 1 <= kept["min"] <= kept["mean"] <= kept["max"] <= Q
        for fold in record["folds"]:
            fit = fold["fits"][key]
            assert 1 <= fit["kept_dims"] == len(fit["relevant_dims"]) <= Q
            assert len(set(fit["relevant_dims"])) == fit["kept_dims"]
            assert all(0 <= q < Q for q in fit["relevant_dims"])
            rel = np.asarray(fit["relevance"])
            assert len(rel) == Q and np.all(np.isfinite(rel)) and np.all(rel >= 0)
            # relevant_dims: relevance >= 1e-3 of the largest, by decreasing relevance
            assert sorted(fit["relevant_dims"]) == np.flatnonzero(rel >= 1e-3 * rel.max()).tolist()
            assert np.all(np.diff(rel[fit["relevant_dims"]]) <= 0)
            assert math.isfinite(fit["elbo"]) and fit["seconds"] > 0 and fit["noise_var"] > 0
            assert 1 <= fit["steps"] <= max_steps
            assert isinstance(fit["converged"], bool)
        assert summary["steps"] == [f["fits"][key]["steps"] for f in record["folds"]]
        assert summary["kept_dims"]["per_fold"] == [f["fits"][key]["kept_dims"] for f in record["folds"]]
    # the posterior rule (5.29) exists only for the supervised fits
    for fold in record["folds"]:
        for key in FITS:
            has_post = fold["fits"][key]["posterior_seconds"] is not None
            assert has_post == key.startswith("sup_")


def test_figures_written(quick_run):
    out, record = quick_run
    assert sorted(record["figures"]) == sorted(f + "_quick.png" for f in FIGURES)
    for name in record["figures"]:
        path = out / name
        assert path.stat().st_size > 10_000
        with open(path, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
