"""JAX's persistent compilation cache for ppl-sbl: compiled XLA programs written to a folder and
read back by later processes, so a second run of the same fit (same model, shapes and options)
skips XLA's compiler, which takes most of a small fit's time on CPU."""
from __future__ import annotations

import os

#: Set to anything but ``""`` or ``"0"`` to keep :func:`compilation_cache` from switching the cache on.
DISABLE_VARIABLE = "PPL_SBL_NO_COMPILATION_CACHE"

#: Programs that took at least this long (seconds) to compile are cached: all of them. JAX's own
#: default (one second) leaves out nearly every program of ppl-sbl, each of which compiles in a
#: fraction of a second, and a job runs dozens of them; reading one back is a small part of that.
MIN_COMPILE_TIME_SECS = 0.0

_JAX_DEFAULT_MIN_COMPILE_TIME_SECS = 1.0


def cache_folder():
    """The folder :func:`compilation_cache` points JAX at: ``$XDG_CACHE_HOME/ppl_sbl/jax``, or
    ``~/.cache/ppl_sbl/jax`` where ``XDG_CACHE_HOME`` is unset or empty."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ppl_sbl", "jax")


def compilation_cache():
    """Switches on JAX's persistent compilation cache in :func:`cache_folder` and returns the
    folder JAX caches in (``None`` where the cache stays off).

    Leaves JAX's configuration as it is, and returns its folder, where the user has configured a
    cache folder already (``jax.config.update("jax_compilation_cache_dir", ...)`` or the
    ``JAX_COMPILATION_CACHE_DIR`` environment variable); does nothing, and returns ``None``, when
    the environment variable ``PPL_SBL_NO_COMPILATION_CACHE`` is set (to anything but ``""`` or
    ``"0"``), when JAX's cache is switched off (``jax_enable_compilation_cache``), or when the
    folder cannot be made. Otherwise it makes the folder (readable by the user alone: JAX runs what
    it finds there), sets ``jax_compilation_cache_dir`` to it, and lowers the shortest compile time
    that is cached to :data:`MIN_COMPILE_TIME_SECS` where it is at JAX's default. The command line
    ``ppl-sbl`` calls it at start and the scikit-learn estimators at ``fit``; call it at the start
    of a script to cache the programs of :func:`ppl_sbl.fit` and the models too.
    """
    import jax

    if os.environ.get(DISABLE_VARIABLE, "") not in ("", "0"):
        return None
    if not jax.config.jax_enable_compilation_cache:
        return None
    if jax.config.jax_compilation_cache_dir:
        return jax.config.jax_compilation_cache_dir
    folder = cache_folder()
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError:
        return None
    jax.config.update("jax_compilation_cache_dir", folder)
    if jax.config.jax_persistent_cache_min_compile_time_secs == _JAX_DEFAULT_MIN_COMPILE_TIME_SECS:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_SECS)
    return folder


#: XLA's flags that the command line and the test suite start JAX with: on CPU, XLA's loop emitters
#: instead of its fusion emitters, which compile ppl-sbl's programs (a few hundred small fusions
#: each, many run in a ``lax.while_loop``) faster and run them a little slower (``benchmarks/compile_time.py``);
#: other backends ignore it.
XLA_CPU_FLAGS = ("--xla_cpu_use_fusion_emitters=false",)

#: The jaxlib versions (from, below) that take :data:`XLA_CPU_FLAGS` (0.10.2 and 0.11.0; from 0.11.1
#: on XLA no longer knows the flag): XLA stops the process at a flag it does not know, so
#: :func:`quick_compile_flags` adds nothing for any other version.
_FLAGS_KNOWN = ((0, 10, 2), (0, 11, 1))


def takes_quick_compile_flags():
    """Whether the installed jaxlib is a version known to take :data:`XLA_CPU_FLAGS`."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        jaxlib = tuple(int(p) for p in version("jaxlib").split(".")[:3])
    except (PackageNotFoundError, ValueError):
        return False
    return _FLAGS_KNOWN[0] <= jaxlib < _FLAGS_KNOWN[1]


#: The flag :func:`quick_compile_flags` adds with ``optimize=False``: LLVM does not optimise the
#: machine code XLA writes (any jaxlib takes it, on every backend): XLA compiles each program
#: faster and the program runs slower; the same arithmetic (``tests/test_compilation_cache.py``).
UNOPTIMIZED_FLAG = "--xla_backend_optimization_level=0"

#: The other flag :func:`quick_compile_flags` adds with ``optimize=False``: XLA writes each
#: program's machine code as one LLVM module on the compiling thread instead of splitting it into
#: modules that its threads compile in parallel (any jaxlib from 0.10.2 takes it, on every
#: backend): where every core already runs a compiling process (a test suite on one worker per
#: core), the split and its threads only add work. The same arithmetic
#: (``tests/test_compilation_cache.py``).
SERIAL_CODEGEN_FLAG = "--xla_cpu_parallel_codegen_split_count=1"


def quick_compile_flags(optimize=True):
    """Adds :data:`XLA_CPU_FLAGS` to the ``XLA_FLAGS`` environment variable (which XLA reads when
    JAX starts its first computation, and which processes started from this one inherit) and
    returns the variable's new value. Call it at the start of a script, before its first JAX
    computation: a process that has run one keeps the flags it started with.

    ``optimize=False`` also adds :data:`UNOPTIMIZED_FLAG` and :data:`SERIAL_CODEGEN_FLAG`, for runs
    of many small problems each compiled once in several processes (a test suite on its workers),
    where compiling is most of the time; the test suite starts with them, the command line does
    not.

    A flag the variable names already is not added (the user's choice stays:
    ``XLA_FLAGS=--xla_cpu_use_fusion_emitters=true`` keeps XLA's default emitters), nor are
    :data:`XLA_CPU_FLAGS` where jaxlib is not a version known to take them
    (:func:`takes_quick_compile_flags`). Returns ``None``, and changes nothing, where no flag is
    added. The command line and the test suite call it at start."""
    def option(flag):  # "--name=value" -> "name"
        return flag.split("=")[0].lstrip("-")

    flags = [*(XLA_CPU_FLAGS if takes_quick_compile_flags() else ()),
             *(() if optimize else (UNOPTIMIZED_FLAG, SERIAL_CODEGEN_FLAG))]
    current = os.environ.get("XLA_FLAGS", "")
    named = {option(f) for f in current.split()}
    added = [flag for flag in flags if option(flag) not in named]
    if not added:
        return None
    os.environ["XLA_FLAGS"] = " ".join([current, *added]).strip()
    return os.environ["XLA_FLAGS"]


#: The environment variable of JAX's option ``jax_include_full_tracebacks_in_locations``; where it is
#: set, :func:`short_locations` leaves the option as the user chose it.
LOCATIONS_VARIABLE = "JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS"


def short_locations():
    """Sets JAX's ``jax_include_full_tracebacks_in_locations`` to False: every operation of a
    program JAX lowers to MLIR then carries the one frame of user code that made it, as its
    location, instead of the whole Python traceback (up to ``jax_traceback_in_locations_limit``
    frames), which JAX converts and XLA carries through compilation for each operation. Programs
    lower and compile faster and compute the same; XLA's messages and dumps name one source line
    per operation. The command line calls it at start; the test suite sets the environment
    variable.

    Leaves the option as it is, and returns False, where the environment variable
    :data:`LOCATIONS_VARIABLE` is set (JAX has read the user's choice); returns True otherwise."""
    import jax

    if os.environ.get(LOCATIONS_VARIABLE) is not None:
        return False
    jax.config.update("jax_include_full_tracebacks_in_locations", False)
    return True
