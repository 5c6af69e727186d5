"""Every tutorial runs end to end in quick mode and is a valid jupytext notebook."""
import runpy
from pathlib import Path

import pytest

TUTORIALS = sorted((Path(__file__).resolve().parent.parent / "tutorials").glob("*.py"))


def test_tutorials_exist():
    assert TUTORIALS, "no tutorials/*.py found"


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.name for p in TUTORIALS])
def test_tutorial_is_valid_jupytext(path):
    jupytext = pytest.importorskip("jupytext")
    nb = jupytext.read(path)
    kinds = [cell.cell_type for cell in nb.cells]
    assert len(kinds) >= 8, f"{path.name}: only {len(kinds)} cells"
    assert kinds.count("markdown") >= 4, f"{path.name}: only {kinds.count('markdown')} markdown cells"


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.name for p in TUTORIALS])
def test_tutorial_runs_in_quick_mode(path, tmp_path, monkeypatch):
    """The notebook's cells in order, as a script (``python <tutorial>``), in quick mode, from an
    empty folder, with figures drawn off screen."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setenv("PPL_SBL_QUICK", "1")
    monkeypatch.chdir(tmp_path)
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        plt.close("all")
