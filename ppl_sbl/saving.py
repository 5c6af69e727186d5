"""Saving fitted results in a portable file that needs no pickle: ``result.save(path)`` and
:func:`load`.

The file (:mod:`ppl_sbl.portable`) is one ``.npz`` archive: the result's arrays, and a JSON header
that describes how they fit together: the library's NamedTuples, dataclasses and other objects by
their class (``module:qualname``) and fields, functions (the model of a
:class:`ppl_sbl.CAVIResult`) by their name, containers and scalars as JSON.

:func:`load` imports, looks up and calls nothing that the file names. It reads the archive within
fixed limits (:func:`ppl_sbl.portable.read`: every array's dtype, shape and size checked before it
is read, never a pickle) and rebuilds the result from a fixed registry of what the library ships
(:func:`registry`, built from the library's own modules): its NamedTuples, dataclasses and basis
dictionaries are the only classes it rebuilds, its NumPyro models the only functions it returns.
A dataclass or NamedTuple is rebuilt from exactly its fields (a missing or an unknown field is
reported by name); the arguments, data and state of a result come back as arrays, numbers,
strings, containers and such objects only.

A :class:`ppl_sbl.CAVIResult` of one of the library's models loads as it is. A fit of your own
model loads only when you pass the model: ``ppl_sbl.load(path, model=my_model)``. The file
records the model's name (``module:qualname``), and ``load`` checks it against the function
given; a result whose guide is derived from the model (:mod:`ppl_sbl.derived`) then derives it
again by tracing that model on the saved arguments, as :class:`ppl_sbl.CAVI` did.

Whatever is wrong with a file (not a result file, damaged or truncated, over the reader's limits,
naming a class or function the library does not ship, a fit of your own model without ``model=``)
raises :class:`LoadError` (a ``ValueError``) naming the file and the problem.

Pickle (and ``joblib``) work as well, for every result and fitted estimator; this format is for
sharing a fit with other versions of the library and other people.
"""
from __future__ import annotations

import dataclasses
import functools
import types

import jax.numpy as jnp

from .portable import FORMAT, VERSION, LoadError, Saveable, read, save

__all__ = ["save", "load", "registry", "Saveable", "LoadError", "FORMAT", "VERSION"]


@functools.lru_cache(maxsize=None)
def registry():
    """What :func:`load` rebuilds: ``{"classes": {name: class}, "models": {name: function}}``, each
    under the ``module:qualname`` that :func:`save` records. The classes are the NamedTuples,
    dataclasses and :class:`ppl_sbl.basis.Dictionary` types defined in the library's modules that
    results hold (the engine, the guides, the derived guides, the fast schedule and every model);
    the models are the library's NumPyro models (those with a closed-form guide attached, and the
    programs of the sequential SBL, the super-sparse machine and the GPLVMs)."""
    from . import basis, derived, engine, fast_ard, gaussian, guide, inference, likelihoods, probit, sparse_gp
    from .models import ard, gplvm, grid_rvm, multiclass, robust_rvm, rvm, sequential_sbl, super_sparse

    classes, models, seen = {}, {}, set()

    def shipped(obj):
        return (getattr(obj, "__module__", "") or "").startswith("ppl_sbl.")

    def add(table, obj):
        name = f"{obj.__module__}:{obj.__qualname__}"
        if table.setdefault(name, obj) is not obj:
            raise RuntimeError(f"two objects of the library are named {name}.")

    def walk(module):
        if module.__name__ in seen:
            return
        seen.add(module.__name__)
        for obj in list(vars(module).values()):
            if isinstance(obj, types.ModuleType) and obj.__name__.startswith(module.__name__ + "."):
                walk(obj)  # the package's own submodules
            elif isinstance(obj, type) and shipped(obj):
                if (issubclass(obj, tuple) and hasattr(obj, "_fields")) or dataclasses.is_dataclass(obj) \
                        or issubclass(obj, basis.Dictionary):
                    add(classes, obj)
            elif isinstance(obj, types.FunctionType) and shipped(obj) and hasattr(obj, "closed_form_guide"):
                add(models, obj)

    for module in (basis, derived, engine, fast_ard, gaussian, guide, inference, likelihoods, probit, sparse_gp,
                   ard, gplvm, grid_rvm, multiclass, robust_rvm, rvm, sequential_sbl, super_sparse):
        walk(module)
    for program in (sequential_sbl.model, super_sparse.model, gplvm.supervised, gplvm.autoencoder,
                    gplvm.unsupervised):
        add(models, program)
    return {"classes": classes, "models": models, "model_fields": {inference.CAVIResult: "model"}}


def load(path, model=None):
    """Read a result written by ``result.save(path)`` (:func:`save`).

    ``model``: the NumPyro model of a :class:`ppl_sbl.CAVIResult` fitted to a model of your own
    (not one of the library's): the file records the model's name, and a file whose model is not
    the library's loads only with it given, and only if the names agree. A result whose guide is
    derived from the model (:mod:`ppl_sbl.derived`) is rebuilt by tracing it on the saved
    arguments. The library's own models need no ``model=``. Any other function of your own that
    a result holds (a super-sparse machine's ``similarity``) is given the same way: the file's
    reference to it resolves to ``model`` when the names agree.

    Raises :class:`LoadError` for a file that is not a ppl-sbl result, is damaged, exceeds the
    reader's limits (:mod:`ppl_sbl.portable`), names a class or function the library does not ship
    (:func:`registry`), or holds a fit of a model other than ``model``. Nothing named by the file is
    imported, looked up or called.
    """
    if model is not None and not callable(model):
        raise TypeError(f"`model` must be the model function the result was fitted with; got {model!r}.")
    header, arrays = read(path)
    decoder = _Decoder(path, arrays, model)
    result = decoder(header["root"], "result")
    decoder.finish()
    return result


def _name(fn):
    return f"{getattr(fn, '__module__', None)}:{getattr(fn, '__qualname__', type(fn).__qualname__)}"


class _Decoder:
    """Rebuilds the header's entries; every ``__setstate__`` of a rebuilt object runs at the end
    (:meth:`finish`), after the whole file has been checked, innermost objects first."""

    def __init__(self, path, arrays, model):
        self.path, self.arrays, self.model = path, arrays, model
        self.shipped = registry()
        self.used = set()
        self.pending = []  # (where, class name, object, fields): the __setstate__ calls
        self.kinds = {
            frozenset({"float"}): self.non_finite,
            frozenset({"array", "jax"}): self.array_entry,
            frozenset({"array", "scalar"}): self.array_entry,
            frozenset({"sparse", "shape"}): self.sparse,
            frozenset({"tuple"}): self.sequence,
            frozenset({"list"}): self.sequence,
            frozenset({"dict"}): self.mapping,
            frozenset({"ref"}): self.function,
            frozenset({"namedtuple", "fields"}): self.namedtuple,
            frozenset({"object", "fields"}): self.instance,
        }

    def fail(self, where, what):
        return LoadError(f"cannot load {self.path}: {where}: {what}")

    def __call__(self, x, where):
        if x is None or isinstance(x, (bool, str, int, float)):
            return x
        if not isinstance(x, dict):
            raise self.fail(where, "a bare JSON list; save writes containers as {\"list\": [...]}, "
                                   "{\"tuple\": [...]} or {\"dict\": [[key, value], ...]}.")
        decode = self.kinds.get(frozenset(x))
        if decode is None:
            raise self.fail(where, f"an entry with the fields {sorted(x)}, which is no kind of entry save writes "
                                   "(array, sparse, float, tuple, list, dict, ref, namedtuple, object).")
        return decode(x, where)

    def finish(self):
        unused = sorted(set(self.arrays) - self.used)
        if unused:
            raise LoadError(f"cannot load {self.path}: it holds arrays the header never names: {unused[:10]}.")
        for where, name, obj, fields in self.pending:
            try:
                obj.__setstate__(fields)
            except LoadError:
                raise
            except Exception as err:
                raise self.fail(where, f"its {name} cannot be rebuilt from the file's fields "
                                       f"({type(err).__name__}: {err}).") from None

    # plain entries ----------------------------------------------------------------------------
    def non_finite(self, x, where):
        if x["float"] not in ("nan", "inf", "-inf"):
            raise self.fail(where, f"the float entry {x['float']!r}; save writes 'nan', 'inf' or '-inf' there.")
        return float(x["float"])

    def array(self, name, where):
        if not isinstance(name, str):
            raise self.fail(where, f"the array name {name!r} is not a string.")
        if name not in self.arrays:
            raise self.fail(where, f"names the array {name!r}, which the file does not hold.")
        self.used.add(name)
        return self.arrays[name]

    def array_entry(self, x, where):
        value = self.array(x["array"], where)
        if "jax" in x:
            if x["jax"] is not True:
                raise self.fail(where, f"'jax' is {x['jax']!r}; save writes true there.")
            if value.dtype.kind not in "biufc":
                raise self.fail(where, f"a JAX array of dtype {value.dtype}; JAX arrays hold numbers and booleans.")
            return jnp.asarray(value)
        if not isinstance(x["scalar"], bool):
            raise self.fail(where, f"'scalar' is {x['scalar']!r}, not true or false.")
        if x["scalar"]:
            if value.shape != ():
                raise self.fail(where, f"a scalar entry names array {x['array']!r} of shape {value.shape}.")
            return value[()]
        return value

    def sparse(self, x, where):
        import scipy.sparse

        parts, shape = x["sparse"], x["shape"]
        if not (isinstance(parts, list) and len(parts) == 3):
            raise self.fail(where, "a sparse entry names three arrays (data, indices, indptr).")
        if not (isinstance(shape, list) and len(shape) == 2 and all(type(n) is int and n >= 0 for n in shape)):
            raise self.fail(where, f"the sparse matrix's shape {shape!r} is not two non-negative integers.")
        data, indices, indptr = (self.array(k, f"{where}.sparse[{i}]") for i, k in enumerate(parts))
        if indices.dtype.kind not in "iu" or indptr.dtype.kind not in "iu" or data.dtype.kind not in "biufc":
            raise self.fail(where, f"a sparse matrix of data {data.dtype}, indices {indices.dtype} and indptr "
                                   f"{indptr.dtype}; they must be numbers and integers.")
        try:
            matrix = scipy.sparse.csr_matrix((data, indices, indptr), shape=tuple(shape))
            matrix.check_format(full_check=True)
        except (ValueError, TypeError, IndexError, OverflowError) as err:
            raise self.fail(where, f"the sparse matrix is inconsistent ({err}).") from None
        return matrix

    def sequence(self, x, where):
        kind = "tuple" if "tuple" in x else "list"
        items = x[kind]
        if not isinstance(items, list):
            raise self.fail(where, f"a {kind} entry holds {type(items).__name__}, not a JSON list.")
        values = [self(v, f"{where}[{i}]") for i, v in enumerate(items)]
        return tuple(values) if kind == "tuple" else values

    def mapping(self, x, where):
        items = x["dict"]
        if not (isinstance(items, list) and all(isinstance(p, list) and len(p) == 2 for p in items)):
            raise self.fail(where, "a dict entry must be a list of [key, value] pairs.")
        out = {}
        for i, (k, v) in enumerate(items):
            key = self(k, f"{where} key {i}")
            try:
                hash(key)
            except TypeError:
                raise self.fail(where, f"key {i} is a {type(key).__name__}, which cannot be a dict key.") from None
            out[key] = self(v, f"{where}[{key!r}]")
        return out

    # names ------------------------------------------------------------------------------------
    def function(self, x, where):
        name = x["ref"]
        if not isinstance(name, str):
            raise self.fail(where, f"the function name {name!r} is not a string.")
        if self.model is not None and name == _name(self.model):
            return self.model
        if name in self.shipped["models"]:
            return self.shipped["models"][name]
        raise self.fail(where, f"names the function {name!r}, which is not one of the models ppl-sbl ships; load "
                               "never imports, looks up or calls a name read from a file (a result holding a "
                               "function of your own loads with ppl_sbl.load(path, model=that_function)).")

    def model_field(self, x, where):
        """The model of a CAVIResult: one the library ships, or ``model=`` with the recorded name."""
        if not (isinstance(x, dict) and set(x) == {"ref"} and isinstance(x["ref"], str)):
            raise self.fail(where, "the model of a fit must be recorded as {\"ref\": \"module:qualname\"}.")
        name = x["ref"]
        if self.model is not None:
            given = _name(self.model)
            if given != name:
                raise self.fail(where, f"the file was saved from model {name!r}, but `model=` is {given!r}.")
            return self.model
        if name in self.shipped["models"]:
            return self.shipped["models"][name]
        raise self.fail(where, f"the file holds a fit of the model {name!r}, which is not a model ppl-sbl ships. If "
                               "it is your own model, pass it: ppl_sbl.load(path, model=<that model function>); "
                               "load never imports or calls a name read from a file.")

    def cls(self, x, kind, where):
        name = x[kind]
        if not isinstance(name, str):
            raise self.fail(where, f"the class name {name!r} is not a string.")
        cls = self.shipped["classes"].get(name)
        if cls is None:
            raise self.fail(where, f"names the class {name!r}, which is not one that load rebuilds (the library's "
                                   "results, states, NamedTuples, dataclasses and dictionaries); load never "
                                   "imports, looks up or calls a name read from a file.")
        if (kind == "namedtuple") != (issubclass(cls, tuple) and hasattr(cls, "_fields")):
            raise self.fail(where, f"{name} is written as {kind!r}, which it is not.")
        if not isinstance(x["fields"], dict):
            raise self.fail(where, f"the fields of {name} are not a JSON object.")
        return name, cls

    def check_fields(self, name, fields, expected, optional, where, ignored=()):
        missing = sorted(set(expected) - set(fields) - set(optional))
        extra = sorted(set(fields) - set(expected) - set(ignored))
        if missing:
            raise self.fail(where, f"{name} lacks the fields {missing} (written by another version of ppl-sbl?).")
        if extra:
            raise self.fail(where, f"{name} has the fields {extra}, which it does not have in this version of "
                                   "ppl-sbl.")

    def namedtuple(self, x, where):
        name, cls = self.cls(x, "namedtuple", where)
        self.check_fields(name, x["fields"], cls._fields, cls._field_defaults, where)
        fields = {k: self(v, f"{where}.{k}") for k, v in x["fields"].items()}
        return cls(**fields)

    def instance(self, x, where):
        name, cls = self.cls(x, "object", where)
        raw = dict(x["fields"])
        special = self.shipped["model_fields"].get(cls)
        fields = {}
        if special is not None and special in raw:
            fields[special] = self.model_field(raw.pop(special), f"{where}.{special}")
        if dataclasses.is_dataclass(cls):
            declared = dataclasses.fields(cls)
            optional = {f.name: f for f in declared
                        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}
            cached = [k for c in cls.__mro__ for k, v in vars(c).items() if isinstance(v, functools.cached_property)]
            self.check_fields(name, x["fields"], [f.name for f in declared], optional, where, ignored=cached)
            raw = {k: v for k, v in raw.items() if k not in cached}  # cached values (older files): computed again
            for k, f in optional.items():
                if k not in raw and k not in fields:
                    fields[k] = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        else:
            odd = sorted(k for k in raw if k.startswith("__") or not k.isidentifier())
            if odd:
                raise self.fail(where, f"{name} has the fields {odd}, which no object of the library has.")
        fields.update({k: self(v, f"{where}.{k}") for k, v in raw.items()})
        obj = cls.__new__(cls)
        if hasattr(cls, "__setstate__"):
            self.pending.append((where, name, obj, fields))
        else:
            obj.__dict__.update(fields)
        return obj
