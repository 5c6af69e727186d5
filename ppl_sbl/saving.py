"""Saving fitted results in a portable file that needs no pickle: ``result.save(path)`` and
:func:`load`.

The file is one ``.npz`` archive: every array of the result under its own name, and a JSON header
(``__header__``) that describes how they fit together: NamedTuples, dataclasses and the other
objects of the library by their class (``module:qualname``) and fields, functions (the model of a
:class:`ppl_sbl.CAVIResult`) by their importable name, containers and scalars as JSON. Loading
reads the arrays with ``allow_pickle=False`` and rebuilds the objects from the header: it imports
the modules the classes and functions live in, as ``pickle`` would, and runs no other code from
the file. A class whose fields have changed between versions is reported by name.

Pickle (and ``joblib``) work as well, for every result and fitted estimator; this format is for
sharing a fit with other versions of the library and other people.
"""
from __future__ import annotations

import dataclasses
import importlib
import io
import json
import math
import os

import numpy as np

__all__ = ["save", "load", "Saveable", "FORMAT", "VERSION"]

FORMAT = "ppl-sbl"
VERSION = 1
_HEADER = "__header__"


def _reference(obj):
    """``module:qualname`` of a module-level function or class, checked to resolve to ``obj``."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if module is None or "<locals>" in qualname or "<lambda>" in qualname:
        raise TypeError(f"{obj!r} is not importable by name (a lambda or a function defined inside another); "
                        "only module-level functions and classes can be saved.")
    name = f"{module}:{qualname}"
    try:
        found = _resolve(name)
    except (ImportError, AttributeError):
        found = None
    if found is not obj:
        raise TypeError(f"{obj!r} cannot be found again as {name}; only module-level functions and classes "
                        "can be saved.")
    return name


def _resolve(name):
    module, _, qualname = name.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


class _Encoder:
    def __init__(self):
        self.arrays = {}

    def array(self, x):
        key = f"a{len(self.arrays)}"
        value = np.asarray(x)
        if value.dtype == object:
            raise TypeError("arrays of Python objects cannot be saved.")
        self.arrays[key] = value
        return key

    def __call__(self, x, where):
        import jax
        import scipy.sparse

        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, int):
            return x
        if isinstance(x, float):
            return x if math.isfinite(x) else {"float": repr(x)}
        if isinstance(x, jax.Array):
            return {"array": self.array(x), "jax": True}
        if isinstance(x, (np.ndarray, np.generic)):
            return {"array": self.array(x), "scalar": isinstance(x, np.generic)}
        if scipy.sparse.issparse(x):
            csr = scipy.sparse.csr_matrix(x)
            return {"sparse": [self.array(csr.data), self.array(csr.indices), self.array(csr.indptr)],
                    "shape": list(csr.shape)}
        if isinstance(x, tuple) and hasattr(x, "_fields"):
            return {"namedtuple": _reference(type(x)),
                    "fields": {k: self(v, f"{where}.{k}") for k, v in zip(x._fields, x)}}
        if isinstance(x, (tuple, list)):
            kind = "tuple" if isinstance(x, tuple) else "list"
            return {kind: [self(v, f"{where}[{i}]") for i, v in enumerate(x)]}
        if isinstance(x, dict):
            return {"dict": [[self(k, f"{where} key"), self(v, f"{where}[{k!r}]")] for k, v in x.items()]}
        if callable(x) and (isinstance(x, type) or hasattr(x, "__code__")):
            try:
                return {"ref": _reference(x)}
            except TypeError as err:
                raise TypeError(f"cannot save {where}: {err}") from None
        module = type(x).__module__ or ""
        if module == "ppl_sbl" or module.startswith("ppl_sbl."):
            state = x.__getstate__()
            if not isinstance(state, dict):
                raise TypeError(f"cannot save {where}: {type(x).__name__} has no field dictionary.")
            return {"object": _reference(type(x)), "fields": {k: self(v, f"{where}.{k}") for k, v in state.items()}}
        raise TypeError(f"cannot save {where} of type {type(x).__module__}.{type(x).__qualname__}; save() writes "
                        "arrays, numbers, strings, containers and the library's own objects (pickle the result "
                        "instead).")


class _Decoder:
    def __init__(self, arrays):
        self.arrays = arrays

    def __call__(self, x):
        import jax.numpy as jnp
        import scipy.sparse

        if x is None or isinstance(x, (bool, str, int, float)):
            return x
        if "float" in x:
            return float(x["float"])
        if "array" in x:
            value = self.arrays[x["array"]]
            if x.get("jax"):
                return jnp.asarray(value)
            return value[()] if x.get("scalar") else value
        if "sparse" in x:
            data, indices, indptr = (self.arrays[k] for k in x["sparse"])
            return scipy.sparse.csr_matrix((data, indices, indptr), shape=tuple(x["shape"]))
        if "tuple" in x:
            return tuple(self(v) for v in x["tuple"])
        if "list" in x:
            return [self(v) for v in x["list"]]
        if "dict" in x:
            return {_hashable(self(k)): self(v) for k, v in x["dict"]}
        if "ref" in x:
            return _resolve(x["ref"])
        if "namedtuple" in x:
            cls = _resolve(x["namedtuple"])
            fields = {k: self(v) for k, v in x["fields"].items()}
            _check_fields(cls, x["namedtuple"], set(cls._fields), fields)
            return cls(**fields)
        if "object" in x:
            cls = _resolve(x["object"])
            fields = {k: self(v) for k, v in x["fields"].items()}
            if dataclasses.is_dataclass(cls):
                _check_fields(cls, x["object"], {f.name for f in dataclasses.fields(cls)}, fields, subset=True)
            obj = cls.__new__(cls)
            if hasattr(obj, "__setstate__"):
                obj.__setstate__(fields)
            else:
                obj.__dict__.update(fields)
            return obj
        raise ValueError(f"unrecognised entry in the file's header: {sorted(x)}.")


def _hashable(key):
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key


def _check_fields(cls, name, expected, fields, subset=False):
    missing = expected - set(fields)
    if missing and not subset:
        raise ValueError(f"the file was written by another version of {name}: fields {sorted(missing)} are missing "
                         f"(it has {sorted(fields)}).")
    if subset:
        missing = {k for k in missing if _required(cls, k)}
        if missing:
            raise ValueError(f"the file was written by another version of {name}: fields {sorted(missing)} are "
                             "missing.")


def _required(cls, name):
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    return False


class Saveable:
    """``save(path)`` for the result classes."""

    def save(self, path):
        """Write this result to ``path`` (``.npz`` with a JSON header, no pickle; read it back with
        :func:`ppl_sbl.load`). Functions it holds (a model) are stored by their importable name.
        Returns the path written."""
        return save(self, path)


def save(obj, path):
    """Write ``obj`` (a fitted result: :class:`ppl_sbl.CAVIResult`, the sequential SBL state, a
    GPLVM or super-sparse result) to ``path`` in the portable format of this module. A name
    without an ending gets ``.npz``, as :func:`numpy.savez` does. Returns the path written."""
    from .version import __version__

    encoder = _Encoder()
    root = encoder(obj, "result")
    header = {"format": FORMAT, "version": VERSION, "ppl_sbl": __version__, "root": root}
    path = os.fspath(path)
    if not path.endswith(".npz"):
        path += ".npz"
    np.savez(path, **{_HEADER: np.asarray(json.dumps(header))}, **encoder.arrays)
    return path


def load(path):
    """Read a result written by ``result.save(path)`` (:func:`save`)."""
    path = os.fspath(path)
    with open(path, "rb") as handle:
        raw = handle.read()
    with np.load(io.BytesIO(raw), allow_pickle=False) as archive:
        if _HEADER not in archive.files:
            raise ValueError(f"{path} is not a ppl-sbl result file (no {_HEADER} entry).")
        header = json.loads(str(archive[_HEADER]))
        arrays = {k: archive[k] for k in archive.files if k != _HEADER}
    if header.get("format") != FORMAT:
        raise ValueError(f"{path} is not a ppl-sbl result file (format {header.get('format')!r}).")
    if int(header.get("version", 0)) > VERSION:
        raise ValueError(f"{path} was written in format version {header['version']} by ppl-sbl "
                         f"{header.get('ppl_sbl')}; this version reads up to {VERSION}: upgrade ppl-sbl.")
    return _Decoder(arrays)(header["root"])
