"""``ppl_sbl.load`` on hostile, broken and foreign files: each raises ``ppl_sbl.LoadError`` naming
what is wrong, and nothing named by the file is imported or run (a marker file and recorded calls
to ``os.system`` and ``subprocess.Popen`` show it). A fit of the user's own model loads only with
``model=`` that model."""
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import ppl_sbl
from ppl_sbl import portable
from ppl_sbl.models import rvm, sequential_sbl, super_sparse

from problems import random_regression


# ----------------------------------------------------------------------------------------------
# a user's own model (module level, so that save records its name)
# ----------------------------------------------------------------------------------------------
def my_rvm(Phi, t=None):
    """RVM regression written by a user: no guide attached, so CAVI derives one."""
    N, M = Phi.shape
    alpha = numpyro.sample("alpha", dist.Gamma(1e-6, 1e-6).expand([M]).to_event(1))
    w = numpyro.sample("w", dist.Normal(0.0, jax.lax.rsqrt(alpha)).to_event(1))
    gamma = numpyro.sample("gamma", dist.Gamma(1e-6, 1e-6))
    with numpyro.plate("data", N):
        numpyro.sample("t", dist.Normal(Phi @ w, jax.lax.rsqrt(gamma)), obs=t)


def other_model(Phi, t=None):
    my_rvm(Phi, t)


def my_similarity(X, C):
    return jax.numpy.exp(-((X[:, None] - C[None]) ** 2).sum(-1))


# ----------------------------------------------------------------------------------------------
# writing files by hand
# ----------------------------------------------------------------------------------------------
def _header(root, **changes):
    header = {"format": "ppl-sbl", "version": 1, "ppl_sbl": "0.1", "root": root}
    header.update(changes)
    return header


def _write(path, header, arrays=None, text=None):
    """A result file with this header (a dict, or ``text`` as it is) and arrays."""
    text = json.dumps(header) if text is None else text
    np.savez(path, __header__=np.asarray(text), **(arrays or {}))
    return path


def _npy(header_text, data=b"", version=b"\x01\x00"):
    """The bytes of an .npy member with this header (a Python dict literal) and data."""
    head = header_text.encode("latin1")
    head += b" " * (63 - (10 + len(head)) % 64) + b"\n"
    return b"\x93NUMPY" + version + len(head).to_bytes(2, "little") + head + data


def _zip(path, members):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def _damaged(path, compressed):
    """A result file (one array) with a byte of the array's stored data flipped."""
    save = np.savez_compressed if compressed else np.savez
    save(path, __header__=np.asarray(json.dumps(_header({"array": "a0", "scalar": False}))), a0=np.arange(500.0))
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("a0.npy")
    raw = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)  # the member's local header, then data
    raw[start + info.compress_size // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    return path


def _header_npy(header):
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(json.dumps(header)))
    return buffer.getvalue()


def _cavi_root(model_ref, args, guide_choice="derived"):
    """A CAVIResult entry with every field, its model and arguments as given."""
    return {"object": "ppl_sbl.inference:CAVIResult", "fields": {
        "model": {"ref": model_ref}, "guide_spec": None, "args": {"tuple": args}, "kwargs": {"dict": []},
        "data": None, "state": None, "elbo_trace": {"array": "a0", "scalar": False}, "converged": True,
        "tol": 1e-9, "prune_events": {"list": []}, "seconds": 0.0, "relevance_ratio": 1.0, "schedule": "sweep",
        "relevant_mask": None, "num_moves": None, "guide_choice": guide_choice}}


@pytest.fixture(scope="module")
def state_file(tmp_path_factory):
    """A genuine result file (the sequential SBL's state on a small problem: no compiling)."""
    Phi, t = random_regression(0, N=20, M=6)
    path = tmp_path_factory.mktemp("state") / "state.npz"
    return Path(sequential_sbl.fit(Phi, t, noise_var=0.1).save(path))


def _rewrite(source, target, change):
    """``source``'s arrays and header, the header changed by ``change(header)``."""
    with np.load(source, allow_pickle=False) as archive:
        header = json.loads(str(archive["__header__"]))
        arrays = {k: archive[k] for k in archive.files if k != "__header__"}
    change(header)
    return _write(target, header, arrays)


def _nested(depth):
    return "[" * depth + "]" * depth


def _set_field(name, value):
    def change(header):
        header["root"]["fields"][name] = value
    return change


def _bytes(path, data):
    path.write_bytes(data)
    return path


def _with_member(path, name, data):
    with zipfile.ZipFile(path, "a") as z:
        z.writestr(name, data)
    return path


# name -> (build(tmp_path, state_file) -> path, what the message must say)
HOSTILE = {
    "os:system as the model, args touch MARKER": (
        lambda d, s: _write(d / "f.npz", _header(_cavi_root("os:system", [f"touch {d / 'MARKER'}"])),
                            {"a0": np.zeros(1)}),
        r"fit of the model 'os:system', which is not a model ppl-sbl ships.*model="),
    "os:system as a bare function": (
        lambda d, s: _write(d / "f.npz", _header({"ref": "os:system"})),
        r"names the function 'os:system', which is not one of the models ppl-sbl ships"),
    "builtins:eval": (
        lambda d, s: _write(d / "f.npz", _header({"tuple": [{"ref": "builtins:eval"}, "__import__('os')"]})),
        r"names the function 'builtins:eval'"),
    "subprocess:Popen as an object": (
        lambda d, s: _write(d / "f.npz", _header({"object": "subprocess:Popen",
                                                  "fields": {"args": {"list": ["touch", str(d / "MARKER")]}}})),
        r"names the class 'subprocess:Popen', which is not one that load rebuilds"),
    "importlib:import_module": (
        lambda d, s: _write(d / "f.npz", _header({"ref": "importlib:import_module"})),
        r"names the function 'importlib:import_module'"),
    "antigravity:webbrowser": (
        lambda d, s: _write(d / "f.npz", _header({"ref": "antigravity:webbrowser"})),
        r"names the function 'antigravity:webbrowser'"),
    "antigravity as a class": (
        lambda d, s: _write(d / "f.npz", _header({"namedtuple": "antigravity:webbrowser", "fields": {}})),
        r"names the class 'antigravity:webbrowser'"),
    "a private function of the library": (
        lambda d, s: _write(d / "f.npz", _header({"ref": "ppl_sbl.saving:_resolve"})),
        r"names the function 'ppl_sbl.saving:_resolve'"),
    "the command line's main": (
        lambda d, s: _write(d / "f.npz", _header({"ref": "ppl_sbl.cli:main"})),
        r"names the function 'ppl_sbl.cli:main'"),
    "a library function as a fit's model": (
        lambda d, s: _write(d / "f.npz", _header(_cavi_root("ppl_sbl.portable:save", ["x", str(d / "MARKER")])),
                            {"a0": np.zeros(1)}),
        r"fit of the model 'ppl_sbl.portable:save', which is not a model ppl-sbl ships"),
    "a library class that is no data (the CLI's parser)": (
        lambda d, s: _write(d / "f.npz", _header({"object": "ppl_sbl.cli:argparse.ArgumentParser", "fields": {}})),
        r"names the class 'ppl_sbl.cli:argparse.ArgumentParser'"),
    "a library model fed a shell command": (
        lambda d, s: _write(d / "f.npz", _header(_cavi_root("ppl_sbl.models.rvm:regression",
                                                            [f"touch {d / 'MARKER'}"])), {"a0": np.zeros(1)}),
        r"its ppl_sbl.inference:CAVIResult cannot be rebuilt from the file's fields"),
    "a dataclass written as a NamedTuple": (
        lambda d, s: _write(d / "f.npz", _header({"namedtuple": "ppl_sbl.inference:CAVIResult", "fields": {}})),
        r"written as 'namedtuple', which it is not"),
    "an unknown entry kind": (
        lambda d, s: _write(d / "f.npz", _header({"pickle": "gASVDQAAAAAAAACMAm9zlIwGc3lzdGVtlJOULg=="})),
        r"an entry with the fields \['pickle'\], which is no kind of entry save writes"),
    "a bare JSON list": (
        lambda d, s: _write(d / "f.npz", _header([1, 2])),
        r"a bare JSON list"),
    "truncated file": (
        lambda d, s: _bytes(d / "f.npz", s.read_bytes()[: len(s.read_bytes()) // 2]),
        r"not a ppl-sbl result file \(a truncated zip archive\)"),
    "a member cut short": (
        lambda d, s: _zip(d / "f.npz", {"__header__.npy": _header_npy(_header({"array": "a0", "scalar": False})),
                                        "a0.npy": _npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }",
                                                       b"\0" * 16)}),
        r"member a0.npy declares a float64 array of shape \(4,\) \(32 bytes\), but holds 16 bytes"),
    "empty file": (
        lambda d, s: _bytes(d / "f.npz", b""),
        r"not a ppl-sbl result file \(the file is empty\)"),
    "broken JSON": (
        lambda d, s: _write(d / "f.npz", None, text='{"format": "ppl-sbl", "version": 1, "root": {"list": [1, 2'),
        r"its header is not valid JSON"),
    "version 'two'": (
        lambda d, s: _write(d / "f.npz", _header(None, version="two")),
        r"its header's version is 'two', not a format version"),
    "a newer version": (
        lambda d, s: _write(d / "f.npz", _header(None, version=99)),
        r"format version 99 .* upgrade ppl-sbl"),
    "an extra field of the header": (
        lambda d, s: _write(d / "f.npz", dict(_header(None), code="os.system('x')")),
        r"its header has the fields \['code', 'format', 'ppl_sbl', 'root', 'version'\]"),
    "an extra field of a dataclass": (
        lambda d, s: _rewrite(s, d / "f.npz", _set_field("bogus", 1)),
        r"ppl_sbl.models.sequential_sbl:SBLState has the fields \['bogus'\], which it does not have"),
    "a missing field of a dataclass": (
        lambda d, s: _rewrite(s, d / "f.npz", lambda h: h["root"]["fields"].pop("mu")),
        r"SBLState lacks the fields \['mu'\]"),
    "an extra field of a NamedTuple": (
        lambda d, s: _write(d / "f.npz", _header({"namedtuple": "ppl_sbl.gaussian:ActiveGaussian", "fields": dict(
            {k: None for k in ppl_sbl.gaussian.ActiveGaussian._fields}, evil=1)})),
        r"ppl_sbl.gaussian:ActiveGaussian has the fields \['evil'\]"),
    "a dangling array name": (
        lambda d, s: _rewrite(s, d / "f.npz", _set_field("y", {"array": "a999", "scalar": False})),
        r"names the array 'a999', which the file does not hold"),
    "an array the header never names": (
        lambda d, s: _write(d / "f.npz", _header(None), {"a0": np.zeros(3)}),
        r"holds arrays the header never names: \['a0'\]"),
    "JSON nested 5000 deep": (
        lambda d, s: _write(d / "f.npz", None, text='{"format": "ppl-sbl", "version": 1, "ppl_sbl": "0", "root": '
                            + _nested(5000) + "}"),
        r"its header is nested 5001 deep, over the reader's limit of 100"),
    "containers nested 5000 deep": (
        lambda d, s: _write(d / "f.npz", None, text=json.dumps(_header(None)).replace(
            '"root": null', '"root": ' + '{"list": [' * 5000 + "]}" * 5000)),
        r"nested 10001 deep"),
    "a text file renamed .npz": (
        lambda d, s: _bytes(d / "f.npz", b"just some notes\n" * 10),
        r"not a ppl-sbl result file \(not a zip archive\)"),
    "a single .npy renamed .npz": (
        lambda d, s: np.save(d / "f.npy", np.ones(3)) or os.replace(d / "f.npy", d / "f.npz") or d / "f.npz",
        r"not a ppl-sbl result file \(a single .npy array\)"),
    "an object array": (
        lambda d, s: _write(d / "f.npz", _header({"array": "a0", "scalar": False}),
                            {"a0": np.array([print, "x"], dtype=object)}),
        r"member a0.npy holds arrays of dtype object; .*never Python objects"),
    "a structured dtype": (
        lambda d, s: _write(d / "f.npz", _header({"array": "a0", "scalar": False}),
                            {"a0": np.zeros(2, dtype=[("x", "f8"), ("y", "i4")])}),
        r"holds arrays of dtype"),
    "a shape far larger than the data": (
        lambda d, s: _zip(d / "f.npz", {"__header__.npy": _header_npy(_header({"array": "a0", "scalar": False})),
                                        "a0.npy": _npy("{'descr': '<f8', 'fortran_order': False, "
                                                       "'shape': (100000, 100000, 100000), }", b"\0" * 8)}),
        r"declares a float64 array of shape \(100000, 100000, 100000\) \(8000000000000000 bytes\), but holds 8"),
    "a negative shape": (
        lambda d, s: _zip(d / "f.npz", {"__header__.npy": _header_npy(_header({"array": "a0", "scalar": False})),
                                        "a0.npy": _npy("{'descr': '<f8', 'fortran_order': False, 'shape': (-1, 2), }",
                                                       b"\0" * 16)}),
        r"declares the shape \(-1, 2\); a shape is at most 32 non-negative integers"),
    "a non-integer shape": (
        lambda d, s: _zip(d / "f.npz", {"__header__.npy": _header_npy(_header({"array": "a0", "scalar": False})),
                                        "a0.npy": _npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2.5,), }",
                                                       b"\0" * 16)}),
        r"member a0.npy has an unreadable .npy header \(shape is not valid"),
    "a shape of booleans": (
        lambda d, s: _zip(d / "f.npz", {"__header__.npy": _header_npy(_header({"array": "a0", "scalar": False})),
                                        "a0.npy": _npy("{'descr': '<f8', 'fortran_order': False, 'shape': (True,), }",
                                                       b"\0" * 8)}),
        r"declares the shape \(True,\)"),
    "a sparse matrix of negative shape": (
        lambda d, s: _write(d / "f.npz", _header({"sparse": ["a0", "a1", "a2"], "shape": [-3, 2]}),
                            {"a0": np.ones(1), "a1": np.zeros(1, int), "a2": np.array([0, 1])}),
        r"the sparse matrix's shape \[-3, 2\] is not two non-negative integers"),
    "a sparse matrix with indices out of range": (
        lambda d, s: _write(d / "f.npz", _header({"sparse": ["a0", "a1", "a2"], "shape": [1, 2]}),
                            {"a0": np.ones(1), "a1": np.array([7]), "a2": np.array([0, 1])}),
        r"the sparse matrix is inconsistent"),
    "NaN in the header": (
        lambda d, s: _write(d / "f.npz", None, text='{"format": "ppl-sbl", "version": 1, "ppl_sbl": "0", '
                            '"root": {"tuple": [NaN]}}'),
        r"its header holds NaN where a number is expected"),
    "Infinity in the header": (
        lambda d, s: _rewrite(s, d / "f.npz", _set_field("noise_var", float("inf"))),
        r"its header holds Infinity where a number is expected"),
    "a float entry that is no float": (
        lambda d, s: _write(d / "f.npz", _header({"float": "__import__('os')"})),
        r"the float entry \"__import__\('os'\)\"; save writes 'nan', 'inf' or '-inf' there"),
    "a number of 10000 digits": (
        lambda d, s: _write(d / "f.npz", None, text='{"format": "ppl-sbl", "version": 1, "ppl_sbl": "0", "root": '
                            + "9" * 10000 + "}"),
        r"its header holds an unreadable number"),
    "a repeated key": (
        lambda d, s: _write(d / "f.npz", None, text='{"format": "ppl-sbl", "version": 1, "ppl_sbl": "0", '
                            '"root": null, "root": {"ref": "os:system"}}'),
        r"its header repeats a key"),
    "a scalar entry naming a vector": (
        lambda d, s: _write(d / "f.npz", _header({"array": "a0", "scalar": True}), {"a0": np.ones(3)}),
        r"a scalar entry names array 'a0' of shape \(3,\)"),
    "a header that is no string": (
        lambda d, s: _zip(d / "f.npz", {"__header__.npy": _npy("{'descr': '<f8', 'fortran_order': False, "
                                                               "'shape': (1,), }", b"\0" * 8)}),
        r"its header is a float64 array of shape \(1,\); it must be one string"),
    "a header of characters that are not Unicode": (
        lambda d, s: _zip(d / "f.npz", {"__header__.npy": _npy("{'descr': '<U1', 'fortran_order': False, "
                                                               "'shape': (), }", b"\xff\xff\xff\xff")}),
        r"member __header__.npy holds characters that are not Unicode"),
    "a member that is no .npy": (
        lambda d, s: _zip(d / "f.npz", {"__header__.npy": b"#!/bin/sh\ntouch MARKER\n"}),
        r"member __header__.npy is not an .npy array"),
    "a JAX entry naming strings": (
        lambda d, s: _write(d / "f.npz", _header({"array": "a0", "jax": True}), {"a0": np.array(["rm -rf"])}),
        r"a JAX array of dtype <U6; JAX arrays hold numbers and booleans"),
    "a flipped byte in a stored member": (
        lambda d, s: _damaged(d / "f.npz", compressed=False),
        r"the archive is damaged \(Bad CRC-32 for file 'a0.npy'\)"),
    "a flipped byte in a compressed member": (
        lambda d, s: _damaged(d / "f.npz", compressed=True),
        r"the archive is damaged"),
    "a plain npz (wrong format)": (
        lambda d, s: np.savez(d / "f.npz", x=np.ones(3)) or d / "f.npz",
        r"not a ppl-sbl result file \(no __header__ entry; it holds \['x.npy'\]\)"),
    "another format in the header": (
        lambda d, s: _write(d / "f.npz", _header(None, format="pickle")),
        r"not a ppl-sbl result file \(its header's format is 'pickle'\)"),
    "a zip holding other files": (
        lambda d, s: _with_member(_rewrite(s, d / "f.npz", lambda h: None), "evil.py", "import os; os.system('x')"),
        r"the archive holds members that a ppl-sbl result file does not: \['evil.py'\]"),
    "a member outside the archive's folder": (
        lambda d, s: _zip(d / "f.npz", {"__header__.npy": _header_npy(_header(None)), "../a0.npy": _npy(
            "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", b"\0" * 8)}),
        r"holds members that a ppl-sbl result file does not: \['../a0.npy'\]"),
}


@pytest.fixture
def calls(monkeypatch):
    """Every call of os.system and subprocess.Popen while the test runs (os.system still runs)."""
    made = []
    real_system = os.system

    def system(command):
        made.append(("os.system", command))
        return real_system(command)

    class Popen:
        def __init__(self, *args, **kwargs):
            made.append(("subprocess.Popen", args))
            raise RuntimeError("subprocess.Popen called while loading")

    monkeypatch.setattr(os, "system", system)
    monkeypatch.setattr(subprocess, "Popen", Popen)
    return made


@pytest.mark.parametrize("name", list(HOSTILE))
def test_every_hostile_or_broken_file_raises_load_error_and_runs_nothing(name, tmp_path, state_file, calls):
    build, message = HOSTILE[name]
    path = build(tmp_path, state_file)
    cli_loaded = "ppl_sbl.cli" in sys.modules
    with pytest.raises(ppl_sbl.LoadError, match=message) as caught:
        ppl_sbl.load(path)
    assert str(path) in str(caught.value)
    assert not (tmp_path / "MARKER").exists()
    assert calls == []
    assert "antigravity" not in sys.modules
    assert cli_loaded or "ppl_sbl.cli" not in sys.modules


def test_load_error_is_a_documented_value_error():
    assert issubclass(ppl_sbl.LoadError, ValueError) and "LoadError" in ppl_sbl.__all__
    assert ppl_sbl.saving.LoadError is ppl_sbl.LoadError


def test_the_reader_limits_hold(tmp_path, monkeypatch):
    arrays = {f"a{i}": np.zeros(4) for i in range(5)}
    path = _write(tmp_path / "f.npz", _header({"list": [{"array": k, "scalar": False} for k in arrays]}), arrays)
    assert len(ppl_sbl.load(path)) == 5
    monkeypatch.setattr(portable, "MAX_ARRAYS", 4)
    with pytest.raises(ppl_sbl.LoadError, match="it holds 5 arrays, over the reader's limit of 4"):
        ppl_sbl.load(path)
    monkeypatch.setattr(portable, "MAX_ARRAYS", 5)
    monkeypatch.setattr(portable, "MAX_BYTES", 5 * 32 - 1)
    with pytest.raises(ppl_sbl.LoadError, match="its arrays hold 160 bytes, over the reader's limit of 159"):
        ppl_sbl.load(path)
    monkeypatch.setattr(portable, "MAX_HEADER_CHARS", 20)
    with pytest.raises(ppl_sbl.LoadError, match="it must be one string of at most 20 characters"):
        ppl_sbl.load(path)


def test_a_deflated_and_a_fortran_ordered_array_load(tmp_path):
    x = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    path = tmp_path / "f.npz"
    np.savez_compressed(path, __header__=np.asarray(json.dumps(_header({"array": "a0", "scalar": False}))), a0=x)
    back = ppl_sbl.load(path)
    np.testing.assert_array_equal(back, x)
    back[0, 0] = -1.0  # a writable array of its own


# ----------------------------------------------------------------------------------------------
# a fit of the user's own model
# ----------------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::ppl_sbl.ConvergenceWarning")
def test_a_fit_of_a_users_model_loads_only_with_that_model(tmp_path, calls):
    Phi, t = random_regression(0, N=25, M=6)
    result = ppl_sbl.CAVI(my_rvm, progress_bar=False, max_sweeps=50).run(Phi, t)
    Phi_new = random_regression(1, N=5, M=6)[0]
    path = result.save(tmp_path / "mine")
    name = f"{my_rvm.__module__}:my_rvm"

    with pytest.raises(ppl_sbl.LoadError, match=f"fit of the model '{name}'.*pass it: ppl_sbl.load"):
        ppl_sbl.load(path)
    with pytest.raises(ppl_sbl.LoadError, match=f"the file was saved from model '{name}', but `model=` is "
                                                f"'{my_rvm.__module__}:other_model'"):
        ppl_sbl.load(path, model=other_model)
    with pytest.raises(ppl_sbl.LoadError, match="`model=` is 'ppl_sbl.models.rvm:regression'"):
        ppl_sbl.load(path, model=rvm.regression)
    with pytest.raises(TypeError, match="`model` must be the model function"):
        ppl_sbl.load(path, model="my_rvm")

    back = ppl_sbl.load(path, model=my_rvm)
    assert back.model is my_rvm
    np.testing.assert_array_equal(back.elbo_trace, result.elbo_trace)
    for a, b in zip(back.predict(Phi_new), result.predict(Phi_new)):
        np.testing.assert_array_equal(a, b)
    assert back.guide_spec.observed == result.guide_spec.observed and back.guide_choice == result.guide_choice
    assert calls == []


@pytest.mark.filterwarnings("ignore::ppl_sbl.ConvergenceWarning")
def test_a_library_fit_refuses_another_model(tmp_path):
    Phi, t = random_regression(0, N=20, M=5)
    result = ppl_sbl.CAVI(rvm.regression, progress_bar=False, max_sweeps=50).run(Phi, t)
    path = result.save(tmp_path / "lib")
    with pytest.raises(ppl_sbl.LoadError, match="saved from model 'ppl_sbl.models.rvm:regression', but `model=` is"):
        ppl_sbl.load(path, model=my_rvm)
    assert ppl_sbl.load(path, model=rvm.regression).model is rvm.regression


def test_a_result_holding_a_users_similarity_loads_with_it(tmp_path):
    X = np.random.default_rng(0).normal(size=(20, 2))
    fit = super_sparse.fit(X, np.r_[np.ones(10), -np.ones(10)], m=2, max_steps=3, similarity=my_similarity)
    path = fit.save(tmp_path / "sim")
    with pytest.raises(ppl_sbl.LoadError, match=f"result.similarity: names the function '{my_similarity.__module__}"
                                                ":my_similarity', which is not one of the models ppl-sbl ships"):
        ppl_sbl.load(path)
    back = ppl_sbl.load(path, model=my_similarity)
    assert back.similarity is my_similarity
    np.testing.assert_array_equal(back.decision_function(X), fit.decision_function(X))
