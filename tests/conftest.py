import os

# One OpenBLAS thread (LAPACK calls of jax on CPU, and NumPy): on a small shared machine its
# worker threads spin against XLA's and other processes' threads. Set before NumPy or JAX load
# OpenBLAS; inherited by the tutorial and script subprocesses the tests start.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# JAX's MLIR locations with the one frame of user code per operation, not its whole traceback
# (ppl_sbl.short_locations, which the command line calls): the workers and every subprocess lower
# and compile each program faster; set before JAX is imported, which reads it once
os.environ.setdefault("JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS", "0")

# JAX's persistent compilation cache for the whole run (ppl_sbl.compilation_cache: a folder under
# the user's cache directory, or JAX_COMPILATION_CACHE_DIR where set; off with
# PPL_SBL_NO_COMPILATION_CACHE=1), shared by both workers and, through the environment, by every
# subprocess a test starts: most of the suite's CPU time is XLA compiling, and tests compile the
# same computations again (same shapes, fresh closures, other processes), which the in-memory cache
# of one process cannot reuse. Every compilation is cached (as by the library's default; the
# environment says so to the subprocesses too). For the time of a clean checkout, point XDG_CACHE_HOME (or JAX_COMPILATION_CACHE_DIR)
# at an empty folder.
_CACHE_ON = os.environ.get("PPL_SBL_NO_COMPILATION_CACHE", "") in ("", "0")
if _CACHE_ON:
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

# XLA's options that compile ppl-sbl's programs faster (most of the suite's time is compiling, and
# its problems are small), for the workers and, through the environment, every subprocess: the loop
# emitters on CPU, LLVM unoptimised and each program's machine code written on the compiling thread
# (the same arithmetic: test_compilation_cache.py compiles one fit both ways); set before JAX
# starts its backend (importing ppl_sbl runs no computation)
from ppl_sbl import quick_compile_flags  # noqa: E402

quick_compile_flags(optimize=False)

import jax  # noqa: E402
from jax import monitoring  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)

if _CACHE_ON:
    from ppl_sbl import compilation_cache

    _folder = compilation_cache()
    if _folder:
        os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", _folder)  # the subprocesses


@pytest.fixture
def rng():
    return np.random.default_rng(0)



# The longest test files first (longest-processing-time-first): with ``--dist loadfile`` each
# file runs on one worker, and the scheduler hands files out in collection order
# (``--no-loadscope-reorder`` in pyproject.toml), so the longest files (each on one worker) start
# at once instead of last, and the short files fill the end on both workers. Ordered by their
# durations in the default run (``pytest --junitxml``, summed per file); files under ten seconds
# keep their order.
LONGEST_FIRST = ("test_tutorials.py", "test_estimators.py", "test_gplvm.py", "test_derived.py",
                 "test_multiclass.py", "test_robust_rvm.py", "test_scale.py", "test_fast_ard.py",
                 "test_compiled_schedule.py", "test_grid_rvm.py", "test_derived_fast.py", "test_readme.py",
                 "test_super_sparse.py", "test_rvm.py", "test_inputs_and_api.py", "test_cavi_parts.py",
                 "test_compare.py", "test_model_selection.py", "test_saving.py", "test_layout.py", "test_engine.py",
                 "test_collinear.py", "test_proper_priors.py", "test_jacobian.py", "test_schedule_default.py",
                 "test_result.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


_MAX_MAPPINGS = 55000  # about 85% of the usual vm.max_map_count (65530)
_NEAR = 40000  # above it the mappings are counted every _CHECK_EVERY_NEAR compilations
_CHECK_EVERY = 500  # compilations between two counts of the mappings below _NEAR
_CHECK_EVERY_NEAR = 100  # and above it (one interval of 500 added up to 10,000 in the default run)
_compilations = [0]  # since the last count
_near = [False]  # the last count was above _NEAR


def _count_compilation(event, duration, **kwargs):
    if event == "/jax/core/compile/backend_compile_duration":
        _compilations[0] += 1


monitoring.register_event_duration_secs_listener(_count_compilation)


@pytest.fixture(autouse=True)
def _free_compiled_programs():
    """Free the compiled programs after a test if the process holds many memory mappings: every
    compiled CPU program maps its code into the process, and a worker that runs many tests would
    otherwise reach the kernel's limit (vm.max_map_count), where the compiler aborts. Below the
    mark the programs stay, for the next tests that compile the same ones (freeing them takes
    seconds, the more the more programs there are; a default run stays below the mark). The
    mappings are counted (reading /proc/self/maps takes milliseconds) once the worker has compiled
    ``_CHECK_EVERY`` programs since the last count, ``_CHECK_EVERY_NEAR`` above ``_NEAR``."""
    yield
    if _compilations[0] < (_CHECK_EVERY_NEAR if _near[0] else _CHECK_EVERY):
        return
    _compilations[0] = 0
    try:
        with open("/proc/self/maps", "rb") as fh:
            mappings = fh.read().count(b"\n")
    except OSError:  # not Linux: free them at every count
        mappings = _MAX_MAPPINGS
    _near[0] = mappings >= _NEAR
    if mappings >= _MAX_MAPPINGS:
        import gc

        jax.clear_caches()
        gc.collect()
