"""JAX's persistent compilation cache for ppl-sbl: compiled XLA programs written to a folder and
read back by later processes, so a second run of the same fit (same model, shapes and options)
skips XLA's compiler, which takes most of a small fit's time on CPU."""
from __future__ import annotations

import functools
import os

#: Set to anything but ``""`` or ``"0"`` to keep :func:`compilation_cache` from switching the cache on.
DISABLE_VARIABLE = "PPL_SBL_NO_COMPILATION_CACHE"

#: Programs that took at least this long (seconds) to compile are cached; JAX's own default (one
#: second) leaves out most of ppl-sbl's programs, each of which compiles in a fraction of a second.
MIN_COMPILE_TIME_SECS = 0.1

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


#: XLA's options for ppl-sbl's programs: its loop emitters on CPU instead of its fusion emitters,
#: which compile ppl-sbl's programs (a few hundred small fusions each, many run in a
#: ``lax.while_loop``) in about two thirds of the time and run them as fast; other backends ignore
#: the option. :func:`jit` compiles every program of the library with them, and
#: :func:`quick_compile_flags` puts them in ``XLA_FLAGS`` for the rest of a process.
XLA_CPU_OPTIONS = {"xla_cpu_use_fusion_emitters": False}

#: The jaxlib versions (from, below) known to take :data:`XLA_CPU_OPTIONS`: XLA refuses an option
#: it does not know (and stops the process at such a flag), so none is used with another version.
_OPTIONS_KNOWN = ((0, 10, 2), (0, 13))


def _named_by_user():
    """Whether the ``XLA_FLAGS`` environment variable names one of :data:`XLA_CPU_OPTIONS` (the
    user's choice stays)."""
    current = os.environ.get("XLA_FLAGS", "")
    return any(name in current for name in XLA_CPU_OPTIONS)


@functools.lru_cache(maxsize=None)
def _known_to_jaxlib():
    from importlib.metadata import PackageNotFoundError, version

    try:
        jaxlib = tuple(int(p) for p in version("jaxlib").split(".")[:3])
    except (PackageNotFoundError, ValueError):
        return False
    return _OPTIONS_KNOWN[0] <= jaxlib < _OPTIONS_KNOWN[1]


def program_options(once=False):
    """The XLA options :func:`jit` compiles with: :data:`XLA_CPU_OPTIONS` (none where ``XLA_FLAGS``
    names them or jaxlib is not a version known to take them), and with ``once`` (a program that
    runs once per call: a result's ELBO and its parts, predictions, draws, the analysis of a
    derived guide) LLVM without its optimisation passes, which compiles in about half the time:
    the arithmetic is the same (no fast-math either way), only the machine code is slower, which
    programs made of a few large operations that run once do not notice."""
    options = dict(XLA_CPU_OPTIONS) if _known_to_jaxlib() and not _named_by_user() else {}
    if once:
        options["xla_backend_optimization_level"] = 0
    return options


def jit(fn=None, /, *, once=False, **kwargs):
    """``jax.jit(fn, **kwargs)`` compiled with :func:`program_options` (``once``); a decorator with
    ``fn`` left out (``@jit``, ``@functools.partial(jit, static_argnums=0)``)."""
    import jax

    if fn is None:
        return lambda f: jit(f, once=once, **kwargs)
    return jax.jit(fn, compiler_options=program_options(once) or None, **kwargs)


def quick_compile_flags():
    """Adds :data:`XLA_CPU_OPTIONS` to the ``XLA_FLAGS`` environment variable (which XLA reads when
    JAX starts its first computation, and which processes started from this one inherit), so that
    every program of the process compiles with them, and returns the variable's new value; returns
    ``None`` and changes nothing where the variable names one of them already (the user's choice
    stays: ``XLA_FLAGS=--xla_cpu_use_fusion_emitters=true`` keeps XLA's default) or where jaxlib is
    not a version known to take them. A process that has run a JAX computation already keeps the
    flags it started with. The command line and the test suite call it at start."""
    if _named_by_user() or not _known_to_jaxlib():
        return None
    flags = [f"--{name}={str(value).lower()}" for name, value in XLA_CPU_OPTIONS.items()]
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *flags]).strip()
    return os.environ["XLA_FLAGS"]
