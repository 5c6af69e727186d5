"""The first-call benchmark (benchmarks/first_call.py) in quick mode: fresh processes with an empty
persistent cache, then with the cache they filled. The processes after the first compile nothing
(every program, the compiled schedule's included, is read back from the cache), every process fits
the same, and the record's verdicts are its own times'."""
import pytest

from scripts import run_script


@pytest.mark.slow  # six processes end to end: outside the default run (`pytest -m slow`)
def test_first_call_bench_quick(tmp_path):
    out = tmp_path / "fc.json"
    run, record = run_script("benchmarks/first_call.py", "--quick", "--out", out, record=out)
    assert [(r["problem"], r["schedule"]) for r in record["rows"]] == [("sinc100", "fast"), ("sinc100", "compiled")]
    for row in record["rows"]:
        assert row["same_fit"] is True
        assert row["cold"]["first"]["compilations"] > 0 and row["cold"]["first"]["read_from_cache"] == 0
        for run_name in ("cached", "cached_again"):
            first = row[run_name]["first"]
            assert first["compilations"] == 0 and first["read_from_cache"] > 0
            verdict = record["first_call_under_1s"][f"sinc100/{row['schedule']}/{run_name}"]
            assert verdict == (first["seconds"] < 1.0)
        assert row["cold"]["warm"]["compilations"] == 0  # the second call in a process compiles nothing
    assert "sinc100" in run.stdout
