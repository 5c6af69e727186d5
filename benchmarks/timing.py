"""Helpers shared by the scripts in ``benchmarks/`` and ``experiments/`` (each puts the repository
root on ``sys.path`` and imports ``benchmarks.timing``)."""

from __future__ import annotations

import datetime
import os
import platform
import socket
import sys


def environment(*packages: str) -> dict:
    """Where and with what a benchmark ran: date, host, CPU count and load, JAX backend and
    devices, x64 and XLA flags, and the versions of ppl_sbl, JAX, NumPyro, NumPy and of any
    further ``packages`` (import names, e.g. ``"sklearn"``)."""
    import importlib

    import jax
    import numpy as np
    import numpyro

    import ppl_sbl

    versions = {
        "ppl_sbl": getattr(ppl_sbl, "__version__", "?"),
        "jax": jax.__version__,
        "jaxlib": getattr(importlib.import_module("jaxlib"), "__version__", "?"),
        "numpyro": numpyro.__version__,
        "numpy": np.__version__,
    }
    for name in packages:
        versions[name] = getattr(importlib.import_module(name), "__version__", "?")
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": sys.version.split()[0],
        "jax_backend": jax.default_backend(),
        "jax_devices": [str(d) for d in jax.devices()],
        "versions": versions,
        "x64": bool(jax.config.jax_enable_x64),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "blas_threads_env": {k: os.environ[k] for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
                             if k in os.environ},
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    }


def loglog_fit(xs, ys):
    """(slope, intercept) of log y against log x by least squares; None for fewer than two points."""
    import numpy as np

    if len(xs) < 2:
        return None
    slope, intercept = np.polyfit(np.log(xs), np.log(ys), 1)
    return float(slope), float(intercept)


def write_record(record: dict, out: str) -> None:
    """Write a benchmark's JSON ``record`` to ``out`` (its folder made if missing) and say so."""
    import json

    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as fh:
        json.dump(record, fh, indent=1, default=float)
    print(f"# wrote {out}", flush=True)
