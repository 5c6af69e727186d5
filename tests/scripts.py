"""Run a script of the repository (``benchmarks/`` or ``experiments/``) in a subprocess and read the
JSON record it writes, or import it as a module."""
import importlib
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_script(relative_path, *args, record, timeout=900):
    """Run ``python <relative_path> <args>`` from the repository root; return (completed
    process, the JSON record at the path ``record``). Fails the test with the script's output
    if it exits with an error."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, relative_path), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(record) as fh:
        return proc, json.load(fh)


def script_module(name):
    """The script named ``name`` (dotted: ``"benchmarks.rvm"``, ``"experiments.super_sparse"``)
    imported as a module; the repository root goes on ``sys.path``."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    return importlib.import_module(name)
