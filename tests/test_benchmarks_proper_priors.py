"""Smoke test of benchmarks/proper_priors.py --quick: it runs and writes the expected JSON record.

No timing is asserted; the record's arithmetic is checked, its replica of the fast schedule against
``CAVI(schedule="fast")``, and the facts it exists to show: at the proper priors the default fit is
within the goal of the sweep, and the refined fit is at least the default and reaches the sweep."""
import math

import pytest
from scripts import run_script


@pytest.mark.slow  # the script end to end: outside the default run (`pytest -m slow`)
def test_proper_priors_bench_quick(tmp_path):
    out = tmp_path / "r.json"
    _, record = run_script("benchmarks/proper_priors.py", "--quick", "--out", out, record=out)
    args, rows = record["args"], record["rows"]
    assert args["quick"] is True and args["models"] == ["rvm.regression", "rvm.classification"]
    assert [(r["model"], r["prior"]) for r in rows] == [(m, p) for m in args["models"] for p in ("default", 0.01, 1.0)]
    for r in rows:
        a = r["arms"]
        assert set(a) == {"sweep", "fast", "default", "before", "refined"}
        sweep = a["sweep"]["elbo"]
        for arm in a.values():
            assert math.isfinite(arm["elbo"]) and arm["first_seconds"] >= 0 and arm["best_seconds"] >= 0
            assert arm["gap"] == pytest.approx((sweep - arm["elbo"]) / abs(sweep), rel=1e-12, abs=1e-15)
        assert r["replica_relative_difference"] <= 1e-9
        assert a["default"]["schedule"] == ("fast" if r["vague"] else "sweep")
        assert a["refined"]["elbo"] >= a["default"]["elbo"] - 1e-9 * abs(a["default"]["elbo"])
        assert a["refined"]["refined_by"] == pytest.approx(a["refined"]["elbo"] - a["default"]["elbo"], abs=1e-9)
        if not r["vague"]:
            assert r["goal_met"] == (a["default"]["gap"] <= record["goal"]) and r["goal_met"]
            assert a["fast"]["gap"] <= record["goal"]
    proper = [r for r in rows if not r["vague"]]
    assert record["goal_met"] is True
    assert record["worst_proper_gap"] == max(r["arms"]["default"]["gap"] for r in proper)
