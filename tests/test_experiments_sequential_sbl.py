"""The sequential SBL image experiment (experiments/sequential_sbl.py) in quick mode: it runs, writes
its record, and the numbers it reports agree with what the record's own pieces imply."""
import math
import os

import pytest

from scripts import run_script

pytest.importorskip("skimage")


def test_image_experiment_quick(tmp_path):
    proc, record = run_script("experiments/sequential_sbl.py", "--quick", "--out-dir", tmp_path,
                              record=tmp_path / "sequential_sbl_experiments_quick.json")
    stages = record["stages"]
    assert set(stages) == {"A haar1", "B guided +5%", "B random +5%", "C haar2 on the rest", "D rbf"}
    for name, s in stages.items():
        assert math.isfinite(s["psnr"]) and -1 <= s["ssim"] <= 1, name
    # the two maps are scored on the same pixels; both AUCs are probabilities
    for name in ("A haar1", "D rbf"):
        assert 0 <= stages[name]["auc_edl"] <= 1 and 0 <= stages[name]["auc_variance"] <= 1
    # more data never lowers the quality of the observed part: both B runs saw 5% more pixels
    assert stages["B guided +5%"]["moves"] > stages["A haar1"]["moves"]
    assert 0 < stages["C haar2 on the rest"]["accepted_share"] < 1
    for fig in record["figures"]:
        assert os.path.getsize(tmp_path / fig) > 10_000
