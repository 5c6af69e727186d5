"""Every tutorial runs end to end in quick mode and is a valid jupytext notebook."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

TUTORIALS = sorted((Path(__file__).resolve().parent.parent / "tutorials").glob("*.py"))
TIMEOUT_S = 600  # generous: quick mode is meant to finish well under a minute


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
def test_tutorial_runs_in_quick_mode(path, tmp_path):
    pytest.importorskip("matplotlib")
    env = dict(os.environ, PPL_SBL_QUICK="1", MPLBACKEND="Agg")
    proc = subprocess.run(
        [sys.executable, str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, (
        f"{path.name} exited with {proc.returncode}\n--- stdout (tail) ---\n{proc.stdout[-2000:]}"
        f"\n--- stderr (tail) ---\n{proc.stderr[-4000:]}"
    )
