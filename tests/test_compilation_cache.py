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
    assert jax.config.jax_persistent_cache_min_compile_time_secs < 1.0


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
