"""ppl_sbl.compilation_cache: the command line switches JAX's persistent compilation cache on in a
folder under the user's cache directory, leaves a folder the user configured alone, and does
nothing with PPL_SBL_NO_COMPILATION_CACHE set. The command runs in this process up to a usage
error (no fit): JAX's settings are put back after each test."""
import os
import stat

import jax
import pytest
from scripts import run_cli

# a usage error that the command reports after it has started (argparse accepts the arguments)
BAD_ARGUMENTS = ("compare", "--dataset", "digits", "--basis", "rbf-table")


@pytest.fixture
def unconfigured_jax(monkeypatch, tmp_path):
    """JAX as a user's process starts: no cache folder, the shortest cached compile time at JAX's
    default (1 s); the user's cache directory is ``tmp_path``."""
    before = (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("PPL_SBL_NO_COMPILATION_CACHE", raising=False)
    jax.config.update("jax_compilation_cache_dir", None)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    try:
        yield tmp_path
    finally:
        jax.config.update("jax_compilation_cache_dir", before[0])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", before[1])


def test_cli_switches_the_cache_on_in_the_users_cache_folder(unconfigured_jax):
    run = run_cli(*BAD_ARGUMENTS)
    assert run.returncode == 2 and "--basis" in run.stderr
    folder = os.path.join(str(unconfigured_jax), "ppl_sbl", "jax")
    assert jax.config.jax_compilation_cache_dir == folder
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0  # every program is cached


def test_cli_leaves_the_cache_off_with_the_environment_variable(unconfigured_jax, monkeypatch):
    monkeypatch.setenv("PPL_SBL_NO_COMPILATION_CACHE", "1")
    assert run_cli(*BAD_ARGUMENTS).returncode == 2
    assert jax.config.jax_compilation_cache_dir is None
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 1.0
    assert not os.path.exists(os.path.join(str(unconfigured_jax), "ppl_sbl"))


def test_a_folder_the_user_configured_stays(unconfigured_jax):
    from ppl_sbl import compilation_cache

    mine = str(unconfigured_jax / "mine")
    jax.config.update("jax_compilation_cache_dir", mine)
    assert compilation_cache() == mine
    assert jax.config.jax_compilation_cache_dir == mine
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 1.0
    assert not os.path.exists(os.path.join(str(unconfigured_jax), "ppl_sbl"))


def test_quick_compile_flags_add_the_loop_emitters_and_keep_the_users_choice(monkeypatch):
    from ppl_sbl import _cache, quick_compile_flags

    # a jaxlib known to take the flag (the installed one, whatever its version)
    monkeypatch.setattr(_cache, "takes_quick_compile_flags", lambda: True)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert quick_compile_flags() == "--xla_cpu_use_fusion_emitters=false"
    assert quick_compile_flags() is None  # once is enough
    # the user's own flags stay, the option is added after them
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    assert quick_compile_flags() == "--xla_force_host_platform_device_count=2 --xla_cpu_use_fusion_emitters=false"
    # a user who names the option keeps it
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=true")
    assert quick_compile_flags() is None and os.environ["XLA_FLAGS"] == "--xla_cpu_use_fusion_emitters=true"
    # a jaxlib not known to take the flag: nothing (XLA would stop the process at an unknown flag)
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.setattr(_cache, "takes_quick_compile_flags", lambda: False)
    assert quick_compile_flags() is None and "XLA_FLAGS" not in os.environ


def test_unoptimized_and_serial_flags_are_added_for_any_jaxlib_and_keep_the_users_choice(monkeypatch):
    from ppl_sbl import _cache, quick_compile_flags

    serial = "--xla_cpu_parallel_codegen_split_count=1"
    monkeypatch.setattr(_cache, "takes_quick_compile_flags", lambda: True)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert quick_compile_flags(optimize=False) == ("--xla_cpu_use_fusion_emitters=false "
                                                  f"--xla_backend_optimization_level=0 {serial}")
    assert quick_compile_flags(optimize=False) is None
    # the emitters named by the user: the level and the serial code generation are added
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=true")
    assert quick_compile_flags(optimize=False) == ("--xla_cpu_use_fusion_emitters=true "
                                                  f"--xla_backend_optimization_level=0 {serial}")
    # a level and a split named by the user stay
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=3 --xla_cpu_parallel_codegen_split_count=8")
    assert quick_compile_flags(optimize=False) == ("--xla_backend_optimization_level=3 "
                                                  "--xla_cpu_parallel_codegen_split_count=8 "
                                                  "--xla_cpu_use_fusion_emitters=false")
    # a jaxlib without the emitters' flag still takes the level and the serial code generation
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.setattr(_cache, "takes_quick_compile_flags", lambda: False)
    assert quick_compile_flags(optimize=False) == f"--xla_backend_optimization_level=0 {serial}"
    # the command line's flags (optimize=True) have neither
    monkeypatch.delenv("XLA_FLAGS")
    assert quick_compile_flags() is None and "XLA_FLAGS" not in os.environ


@pytest.mark.parametrize("jaxlib, takes", [("0.10.2", True), ("0.11.0", True), ("0.11.1", False), ("0.12.1", False),
                                           ("0.9.2", False)])
def test_the_jaxlib_versions_that_take_the_flag(monkeypatch, jaxlib, takes):
    import importlib.metadata

    from ppl_sbl import _cache

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: jaxlib if name == "jaxlib" else real(name))
    assert _cache.takes_quick_compile_flags() is takes


def test_cli_starts_xla_with_the_loop_emitters(unconfigured_jax, monkeypatch):
    from ppl_sbl import _cache

    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert run_cli(*BAD_ARGUMENTS).returncode == 2
    if _cache.takes_quick_compile_flags():
        assert os.environ["XLA_FLAGS"] == "--xla_cpu_use_fusion_emitters=false"
    else:
        assert "XLA_FLAGS" not in os.environ


def _fit_problems(classification):
    """(guide, arguments) of whole CAVI fits: an RVM regression on sinc (40 points) and, with
    ``classification``, an RVM classification on every fourth Ripley training point (the JJ
    bound's alternation)."""
    from ppl_sbl import basis, datasets
    from ppl_sbl.models import rvm

    d = datasets.sinc(n_train=40)
    problems = [(rvm.REGRESSION_GUIDE, (basis.rbf(d.X_train, delta=5.55, bias=True), d.t_train))]
    if classification:
        r = datasets.ripley()
        problems.append((rvm.CLASSIFICATION_GUIDE, (basis.rbf(r.X_train[::4], delta=0.5, bias=True), r.t_train[::4])))
    return problems


@pytest.mark.parametrize("ours, default, emitters, classification", [
    # the tests' level (LLVM unoptimised) against XLA's default level 3, the command line's
    ({"xla_backend_optimization_level": 0}, {"xla_backend_optimization_level": 3}, False, True),
    # the loop emitters (the tests' and the command line's) against XLA's default fusion emitters
    ({"xla_cpu_use_fusion_emitters": False}, {"xla_cpu_use_fusion_emitters": True}, True, False),
    # the tests' machine code in one module against XLA's default split for parallel code generation
    ({"xla_cpu_parallel_codegen_split_count": 1}, {}, False, True),
], ids=["level", "emitters", "serial"])
def test_the_flags_compile_the_same_fit(ours, default, emitters, classification):
    """A whole CAVI fit (ppl_sbl.engine.fit, one program) compiled with the tests' option and with
    XLA's default gives the same number of sweeps, ELBO and posterior to rounding: the options
    change how XLA writes the machine code, not the arithmetic."""
    import numpy as np

    from ppl_sbl import _cache, engine

    if emitters and not _cache.takes_quick_compile_flags():
        pytest.skip("this jaxlib has no choice of emitters")
    for g, args in _fit_problems(classification):
        data = engine.strong(g.prepare(*args))

        def fit(data, g=g):
            state, elbo, sweeps, _ = engine.fit(g, data, max_sweeps=300)
            return elbo, sweeps, state.w.mean

        a = jax.jit(fit, compiler_options=ours)(data)
        b = jax.jit(fit, compiler_options=default)(data)
        assert int(a[1]) == int(b[1]) > 5
        np.testing.assert_allclose(a[0], b[0], rtol=1e-12)
        np.testing.assert_allclose(a[2], b[2], rtol=1e-9, atol=1e-12)


@pytest.fixture
def full_locations(monkeypatch):
    """JAX as a user's process starts: whole tracebacks in the programs' locations, the
    environment variable unset; the tests' setting is put back afterwards."""
    before = jax.config.jax_include_full_tracebacks_in_locations
    monkeypatch.delenv("JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS", raising=False)
    jax.config.update("jax_include_full_tracebacks_in_locations", True)
    try:
        yield
    finally:
        jax.config.update("jax_include_full_tracebacks_in_locations", before)


def test_cli_gives_each_operation_one_source_frame(unconfigured_jax, full_locations):
    assert run_cli(*BAD_ARGUMENTS).returncode == 2
    assert jax.config.jax_include_full_tracebacks_in_locations is False


def test_short_locations_keep_the_users_choice(full_locations, monkeypatch):
    from ppl_sbl import short_locations

    monkeypatch.setenv("JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS", "1")
    assert short_locations() is False
    assert jax.config.jax_include_full_tracebacks_in_locations is True
    monkeypatch.delenv("JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS")
    assert short_locations() is True
    assert jax.config.jax_include_full_tracebacks_in_locations is False


def test_short_locations_lower_the_same_program(full_locations):
    """A whole CAVI fit lowered with whole tracebacks and with one frame per operation: the same
    program once the locations are left out, and shorter locations with the option."""
    from ppl_sbl import engine, short_locations

    g, args = _fit_problems(False)[0]
    data = engine.strong(g.prepare(*args))

    def program():  # a new function for each lowering: JAX keeps lowerings by function
        def fit(data):
            state, elbo, sweeps, _ = engine.fit(g, data, max_sweeps=300)
            return elbo, sweeps, state.w.mean
        return jax.jit(fit)

    full = program().lower(data)
    short_locations()
    short = program().lower(data)
    assert short.as_text(debug_info=False) == full.as_text(debug_info=False)
    assert len(short.as_text(debug_info=True)) < len(full.as_text(debug_info=True))
