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

