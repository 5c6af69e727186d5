import os

# One OpenBLAS thread (LAPACK calls of jax on CPU, and NumPy): on a small shared machine its
# worker threads spin against XLA's and other processes' threads, which made a 161 x 161
# Cholesky take hundreds of milliseconds under load. Set before NumPy or JAX load OpenBLAS;
# inherited by the tutorial and benchmark subprocesses the tests start.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)


@pytest.fixture
def rng():
    return np.random.default_rng(0)



# The longest test files first (longest-processing-time-first): with ``--dist loadfile`` each
# file runs on one worker, and the scheduler hands files out in collection order
# (``--no-loadscope-reorder`` in pyproject.toml), so the tutorials (about six minutes in all, on
# one worker) start at once instead of last, and the short files fill the end on both workers.
# Ordered by their measured durations (``pytest --durations``) on the 2-core CI machine.
LONGEST_FIRST = ("test_tutorials.py", "test_gplvm.py", "test_grid_rvm.py", "test_super_sparse_experiments.py",
                 "test_grid_experiments.py", "test_robust_experiments.py", "test_bench_derived_cavi.py",
                 "test_gplvm_experiments.py", "test_bench_robust_rvm.py", "test_robust_rvm.py", "test_derived.py",
                 "test_bench_gplvm.py", "test_rvm.py", "test_bench_grid_rvm.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order
