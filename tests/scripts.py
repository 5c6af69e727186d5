"""Run a script of the repository (``benchmarks/`` or ``experiments/``) and read the JSON record it
writes, or import it as a module; run the command line ``ppl-sbl``."""
import contextlib
import importlib
import io
import json
import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def _captured(cwd):
    """Runs a block from the folder ``cwd`` with its printed output captured: yields (stdout,
    stderr) buffers."""
    import matplotlib.pyplot as plt

    out, err, before = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield out, err
    finally:
        os.chdir(before)
        plt.close("all")


def run_cli(*argv, cwd=ROOT):
    """What ``ppl-sbl <argv>`` does, in this process: the run's ``stdout``, ``stderr`` and
    ``returncode`` (argparse's exit code for a usage error)."""
    from ppl_sbl import cli

    with _captured(cwd) as (out, err):
        try:
            code = cli.main([str(arg) for arg in argv])
        except SystemExit as exit:
            code = exit.code
    return types.SimpleNamespace(stdout=out.getvalue(), stderr=err.getvalue(), returncode=code or 0)


def run_script(relative_path, *args, record):
    """What ``python <relative_path> <args>`` run from the repository root does, in this process:
    the script's ``main(args)`` with its printed output captured. Returns (the run: ``stdout``,
    ``stderr``, ``returncode``; the JSON record at the path ``record``). Fails the test with the
    script's output if it returns a non-zero code."""
    module = script_module(os.path.splitext(relative_path)[0].replace("/", "."))
    with _captured(ROOT) as (out, err):
        code = module.main([str(arg) for arg in args])
    # ``main`` returns its exit status (``sys.exit(main())``), or something else the script ignores
    run = types.SimpleNamespace(stdout=out.getvalue(), stderr=err.getvalue(),
                                returncode=code if isinstance(code, int) else 0)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    with open(record) as fh:
        return run, json.load(fh)


def script_module(name):
    """The script named ``name`` (dotted: ``"benchmarks.rvm"``, ``"experiments.super_sparse"``)
    imported as a module; the repository root goes on ``sys.path``."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    return importlib.import_module(name)
