"""Every Python block of README.md runs on its own, as printed: each in a fresh namespace (its own
imports and data), in the order of the README, and every fit in it converges (a ConvergenceWarning
fails it). The first two blocks (the ten lines and the schedules) belong to the smoke subset
(``pytest -m smoke``)."""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_blocks():
    with open(os.path.join(ROOT, "README.md")) as fh:
        return re.findall(r"```python\n(.*?)```", fh.read(), re.S)


BLOCKS = readme_blocks()


def test_readme_has_its_examples():
    assert len(BLOCKS) >= 6


SMOKE = 2  # the first blocks, which need nothing beyond the package's own dependencies


@pytest.mark.parametrize("index", [pytest.param(i, marks=pytest.mark.smoke) if i < SMOKE else i
                                   for i in range(len(BLOCKS))])
def test_readme_block_runs_on_its_own(index, monkeypatch):
    import warnings

    import matplotlib

    from ppl_sbl import ConvergenceWarning

    matplotlib.use("Agg")
    monkeypatch.chdir(ROOT)
    namespace = {"__name__": "__main__"}
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        exec(compile(BLOCKS[index], f"README.md block {index}", "exec"), namespace)
