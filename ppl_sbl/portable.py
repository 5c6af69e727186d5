"""The portable file of a fitted result: writing it (:func:`save`, :class:`Saveable`) and reading
its header and arrays within fixed limits (:func:`read`); :mod:`ppl_sbl.saving` rebuilds the
result from them (:func:`ppl_sbl.load`).

The file is one ``.npz`` archive (a zip of ``.npy`` members): every array of the result under its
own name (``a0``, ``a1``, ...), and a JSON header (``__header__``) that describes how they fit
together: NamedTuples, dataclasses and the other objects of the library by their class
(``module:qualname``) and fields (a dataclass by its fields: values cached on it are computed
again), functions (the model of a :class:`ppl_sbl.CAVIResult`) by their name, containers and
scalars as JSON.

:func:`read` trusts nothing in the file: the zip must hold ``__header__.npy`` and the arrays and
nothing else; each member's ``.npy`` header is read first (:mod:`numpy.lib.format`) and its dtype
(numbers, booleans or fixed-width strings; never Python objects), shape (non-negative integers,
at most :data:`MAX_NDIM` axes) and size (shape times item size equal to the member's size) are
checked before its data are read; the header is at most :data:`MAX_HEADER_CHARS` characters of
JSON nested at most :data:`MAX_DEPTH` deep with finite numbers; at most :data:`MAX_ARRAYS` arrays
of at most :data:`MAX_BYTES` bytes in all. Whatever is wrong with a file raises
:class:`LoadError`, naming the file and what is wrong with it. The limits are module constants:
raise them for a file you trust that exceeds them.
"""
from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import re
import struct
import sys
import zipfile
import zlib

import numpy as np

__all__ = ["save", "read", "Saveable", "LoadError", "FORMAT", "VERSION", "MAX_HEADER_CHARS", "MAX_DEPTH",
           "MAX_ARRAYS", "MAX_BYTES", "MAX_NDIM"]

FORMAT = "ppl-sbl"
VERSION = 1
HEADER = "__header__"

MAX_HEADER_CHARS = 1 << 24  # characters of the JSON header
MAX_DEPTH = 100  # nesting of the JSON header (a result's header nests about 15 deep)
MAX_ARRAYS = 100_000
MAX_BYTES = 1 << 33  # all arrays together, uncompressed (8 GiB)
MAX_NDIM = 32
_NPY_HEADER_BYTES = 10_000  # numpy's own limit for an .npy header (``max_header_size``)
_ARRAY_NAME = re.compile(r"a(0|[1-9][0-9]{0,8})\Z")
_DTYPE_KINDS = "biufcUS"  # bool, int, uint, float, complex, str, bytes


class LoadError(ValueError):
    """A file :func:`ppl_sbl.load` cannot read: not a ppl-sbl result file, damaged or truncated, over
    the reader's limits, naming a class or function that the library does not ship, or a result of
    the user's own model loaded without ``model=``. The message names the file and what is wrong."""


# ----------------------------------------------------------------------------------------------
# writing
# ----------------------------------------------------------------------------------------------
def reference(obj):
    """``module:qualname`` of a module-level function or class, checked to resolve to ``obj``."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if module is None or "<locals>" in qualname or "<lambda>" in qualname:
        raise TypeError(f"{obj!r} is not importable by name (a lambda or a function defined inside another); "
                        "only module-level functions and classes can be saved.")
    name = f"{module}:{qualname}"
    # the live object's own module, already imported (nothing is imported here): it must be found there again
    found = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is not obj:
        raise TypeError(f"{obj!r} cannot be found again as {name}; only module-level functions and classes "
                        "can be saved.")
    return name


def _fields_to_save(x):
    state = x.__getstate__()
    if not isinstance(state, dict):
        return None
    if dataclasses.is_dataclass(x):  # its fields: values cached on it (functools.cached_property) are computed again
        names = {f.name for f in dataclasses.fields(x)}
        state = {k: v for k, v in state.items() if k in names}
    return state


class _Encoder:
    def __init__(self):
        self.arrays = {}

    def array(self, x):
        key = f"a{len(self.arrays)}"
        value = np.asarray(x)
        if value.dtype.kind not in _DTYPE_KINDS or value.dtype.fields is not None:
            raise TypeError(f"arrays of dtype {value.dtype} cannot be saved (numbers, booleans and strings can).")
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
            return {"namedtuple": reference(type(x)),
                    "fields": {k: self(v, f"{where}.{k}") for k, v in zip(x._fields, x)}}
        if isinstance(x, (tuple, list)):
            kind = "tuple" if isinstance(x, tuple) else "list"
            return {kind: [self(v, f"{where}[{i}]") for i, v in enumerate(x)]}
        if isinstance(x, dict):
            return {"dict": [[self(k, f"{where} key"), self(v, f"{where}[{k!r}]")] for k, v in x.items()]}
        if callable(x) and (isinstance(x, type) or hasattr(x, "__code__")):
            try:
                return {"ref": reference(x)}
            except TypeError as err:
                raise TypeError(f"cannot save {where}: {err}") from None
        module = type(x).__module__ or ""
        if module == "ppl_sbl" or module.startswith("ppl_sbl."):
            state = _fields_to_save(x)
            if state is None:
                raise TypeError(f"cannot save {where}: {type(x).__name__} has no field dictionary.")
            return {"object": reference(type(x)), "fields": {k: self(v, f"{where}.{k}") for k, v in state.items()}}
        raise TypeError(f"cannot save {where} of type {type(x).__module__}.{type(x).__qualname__}; save() writes "
                        "arrays, numbers, strings, containers and the library's own objects (pickle the result "
                        "instead).")


class Saveable:
    """``save(path)`` for the result classes."""

    def save(self, path):
        """Write this result to ``path`` (``.npz`` with a JSON header, no pickle; read it back with
        :func:`ppl_sbl.load`). Functions it holds (a model) are stored by their name; a result of
        your own model loads with ``ppl_sbl.load(path, model=your_model)``. Returns the path
        written."""
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
    np.savez(path, **{HEADER: np.asarray(json.dumps(header, allow_nan=False))}, **encoder.arrays)
    return path


# ----------------------------------------------------------------------------------------------
# reading
# ----------------------------------------------------------------------------------------------
def read(path):
    """The JSON header (a dict, its ``format`` and ``version`` checked) and ``{name: array}`` of the
    result file at ``path``, everything in it checked against the limits of this module before
    it is read. Raises :class:`LoadError` for anything wrong with the file (``FileNotFoundError``
    if there is none)."""
    path = os.fspath(path)
    with open(path, "rb") as handle:
        return _Reader(path, handle).read()


class _Reader:
    def __init__(self, path, handle):
        self.path, self.handle = path, handle

    def fail(self, what):
        return LoadError(f"cannot load {self.path}: {what}")

    def foreign(self, what):
        return LoadError(f"cannot load {self.path}: it is not a ppl-sbl result file ({what}).")

    def read(self):
        try:
            return self._read()
        except LoadError:
            raise
        except zipfile.BadZipFile as err:
            raise self.fail(f"the archive is damaged ({err}).") from None
        except (ValueError, EOFError, OSError, RuntimeError, NotImplementedError, struct.error, zlib.error,
                UnicodeError, OverflowError, zipfile.LargeZipFile) as err:
            raise self.fail(f"the archive is damaged or truncated ({type(err).__name__}: {err}).") from None

    def _read(self):
        size = os.fstat(self.handle.fileno()).st_size
        if size == 0:
            raise self.foreign("the file is empty")
        try:
            archive = zipfile.ZipFile(self.handle)
        except zipfile.BadZipFile:
            self.handle.seek(0)
            start = self.handle.read(6)
            what = ("a single .npy array" if start == b"\x93NUMPY" else
                    "a truncated zip archive" if start[:2] == b"PK" else "not a zip archive")
            raise self.foreign(what) from None
        with archive:
            members = self.members(archive)
            header = self.header(archive, members.pop(HEADER))
            layouts = {name: self.layout(archive, info) for name, info in members.items()}
            total = sum(nbytes for _, _, _, nbytes, _ in layouts.values())
            if total > MAX_BYTES:
                raise self.fail(f"its arrays hold {total} bytes, over the reader's limit of {MAX_BYTES} "
                                "(ppl_sbl.portable.MAX_BYTES).")
            arrays = {name: self.data(archive, members[name], *layout) for name, layout in layouts.items()}
        return header, arrays

    def members(self, archive):
        infos = archive.infolist()
        names = [info.filename for info in infos]
        if f"{HEADER}.npy" not in names:
            raise self.foreign(f"no {HEADER} entry; it holds {sorted(names)[:5]}")
        if len(set(names)) != len(names):
            raise self.fail("the archive names a member twice.")
        other = [n for n in names if n != f"{HEADER}.npy" and not (n.endswith(".npy") and _ARRAY_NAME.match(n[:-4]))]
        if other:
            raise self.fail(f"the archive holds members that a ppl-sbl result file does not: {sorted(other)[:10]} "
                            "(only __header__.npy and the arrays a0.npy, a1.npy, ...).")
        if len(infos) - 1 > MAX_ARRAYS:
            raise self.fail(f"it holds {len(infos) - 1} arrays, over the reader's limit of {MAX_ARRAYS} "
                            "(ppl_sbl.portable.MAX_ARRAYS).")
        for info in infos:
            if info.flag_bits & 0x1:
                raise self.fail(f"member {info.filename} is encrypted.")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise self.fail(f"member {info.filename} uses compression method {info.compress_type}; "
                                "save writes stored or deflated members.")
        return {info.filename[:-4]: info for info in infos}

    def layout(self, archive, info):
        """(dtype, shape, fortran_order, data bytes, header bytes) of a member, from its .npy header
        alone, checked against the member's size."""
        with archive.open(info) as stream:
            try:
                version = np.lib.format.read_magic(stream)
            except ValueError as err:
                raise self.fail(f"member {info.filename} is not an .npy array ({err}).") from None
            if version not in ((1, 0), (2, 0)):
                raise self.fail(f"member {info.filename} is an .npy file of version {version}, which save "
                                "does not write.")
            length_bytes = stream.read(2 if version == (1, 0) else 4)
            if len(length_bytes) != (2 if version == (1, 0) else 4):
                raise self.fail(f"member {info.filename} is truncated in its .npy header.")
            length = int.from_bytes(length_bytes, "little")
            if length > _NPY_HEADER_BYTES:
                raise self.fail(f"member {info.filename} has an .npy header of {length} bytes.")
            text = stream.read(length)
            if len(text) != length:
                raise self.fail(f"member {info.filename} is truncated in its .npy header.")
        raw = io.BytesIO(np.lib.format.MAGIC_PREFIX + bytes(version) + length_bytes + text)
        np.lib.format.read_magic(raw)
        try:
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(raw, max_header_size=_NPY_HEADER_BYTES)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(raw, max_header_size=_NPY_HEADER_BYTES)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as err:
            raise self.fail(f"member {info.filename} has an unreadable .npy header ({err}).") from None
        if dtype.hasobject or dtype.kind not in _DTYPE_KINDS or dtype.fields is not None or dtype.subdtype is not None \
                or dtype.itemsize == 0:
            raise self.fail(f"member {info.filename} holds arrays of dtype {dtype}; a result file holds numbers, "
                            "booleans and strings only (never Python objects).")
        if len(shape) > MAX_NDIM or not all(type(n) is int and n >= 0 for n in shape):
            raise self.fail(f"member {info.filename} declares the shape {shape!r}; a shape is at most {MAX_NDIM} "
                            "non-negative integers.")
        nbytes = math.prod(shape) * dtype.itemsize
        head = len(np.lib.format.MAGIC_PREFIX) + 2 + len(length_bytes) + length
        if head + nbytes != info.file_size:
            raise self.fail(f"member {info.filename} declares a {dtype} array of shape {shape} ({nbytes} bytes), "
                            f"but holds {info.file_size - head} bytes of data.")
        return dtype, shape, fortran, nbytes, head

    def data(self, archive, info, dtype, shape, fortran, nbytes, head):
        buffer = bytearray(nbytes)
        with archive.open(info) as stream:
            stream.read(head)
            view, done = memoryview(buffer), 0
            while done < nbytes:
                got = stream.readinto(view[done:])
                if not got:
                    raise self.fail(f"member {info.filename} is truncated.")
                done += got
            if stream.read(1):  # reading to the end checks the member's CRC
                raise self.fail(f"member {info.filename} holds more data than its shape.")
        if dtype.kind == "U" and nbytes and np.frombuffer(buffer, dtype=dtype.str[0] + "u4").max() > 0x10FFFF:
            raise self.fail(f"member {info.filename} holds characters that are not Unicode.")
        array = np.frombuffer(buffer, dtype=dtype)
        return array.reshape(shape, order="F" if fortran else "C")

    def header(self, archive, info):
        dtype, shape, fortran, nbytes, head = self.layout(archive, info)
        if dtype.kind != "U" or shape != () or nbytes > 4 * MAX_HEADER_CHARS:
            raise self.fail(f"its header is a {dtype} array of shape {shape}; it must be one string of at most "
                            f"{MAX_HEADER_CHARS} characters (ppl_sbl.portable.MAX_HEADER_CHARS).")
        text = str(self.data(archive, info, dtype, shape, fortran, nbytes, head)[()])
        depth = _depth(text)
        if depth > MAX_DEPTH:
            raise self.fail(f"its header is nested {depth} deep, over the reader's limit of {MAX_DEPTH} "
                            "(ppl_sbl.portable.MAX_DEPTH).")
        try:
            header = json.loads(text, parse_constant=self.constant, object_pairs_hook=self.unique)
        except json.JSONDecodeError as err:
            raise self.fail(f"its header is not valid JSON ({err}).") from None
        except ValueError as err:  # LoadError from the hooks, or a number of too many digits
            if isinstance(err, LoadError):
                raise
            raise self.fail(f"its header holds an unreadable number ({err}).") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            what = header.get("format") if isinstance(header, dict) else type(header).__name__
            raise self.foreign(f"its header's format is {what!r}")
        if set(header) != {"format", "version", "ppl_sbl", "root"}:
            raise self.fail(f"its header has the fields {sorted(header)}; a ppl-sbl header has format, version, "
                            "ppl_sbl and root.")
        version = header["version"]
        if not isinstance(header["ppl_sbl"], str):
            raise self.fail(f"its header's ppl_sbl version is {header['ppl_sbl']!r}, not a string.")
        if type(version) is not int or version < 1:
            raise self.fail(f"its header's version is {version!r}, not a format version (an integer >= 1).")
        if version > VERSION:
            raise self.fail(f"it was written in format version {version} by ppl-sbl {header['ppl_sbl']}; this "
                            f"version reads up to {VERSION}: upgrade ppl-sbl.")
        return header

    def constant(self, name):
        raise self.fail(f"its header holds {name} where a number is expected (save writes non-finite numbers as "
                        '{"float": "nan"}).')

    def unique(self, pairs):
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise self.fail(f"its header repeats a key in one object: {sorted(keys)}.")
        return dict(pairs)


def _depth(text):
    """How deep the JSON ``text`` nests (brackets outside strings), without parsing it."""
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text, flags=re.DOTALL)
    codes = np.frombuffer(bare.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    step = np.isin(codes, (ord("["), ord("{"))).astype(np.int64) - np.isin(codes, (ord("]"), ord("}")))
    return int(np.cumsum(step).max(initial=0))

