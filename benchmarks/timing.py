"""Timing and records shared by the scripts in ``benchmarks/`` and ``experiments/``.

Each script puts the repository root on ``sys.path`` and imports this module as
``benchmarks.timing``. It holds what the scripts measure with and how they report it:

* clocks: :class:`CompileClock` (JAX's compilation time, from ``jax.monitoring``) and
  :class:`Timer` (wall, process CPU and compilation time of a block);
* repeated calls: :func:`timed`, :func:`repeat_timed`, :func:`run_chained` (a jitted step applied
  to its own output), :func:`interleaved_rounds` (several functions called in turn, round after
  round, so that they share the state of the machine) and :func:`time_peers` (fits of several
  peers on one problem: a warm call each, then interleaved rounds); :class:`ProgramSplit` (a fit's
  time in a compiled program and on the host); :func:`summarise` reduces
  per-round samples to what a record keeps (median, minimum, maximum, number of rounds);
* extrapolation: :func:`loglog_fit`, :func:`loglog_slope` and :func:`loglog_predict`; XLA's static cost of a compiled
  function: :func:`xla_cost`;
* the record: :func:`environment` (the machine and the versions), :func:`write_record`, and for
  the printed tables :func:`fmt`, :func:`log` and :func:`save_figure`.

Records keep summaries, never the raw per-round samples.
"""
from __future__ import annotations

import collections
import datetime
import json
import math
import os
import platform
import socket
import sys
import time

# ----------------------------------------------------------------------------------------------
# The machine
# ----------------------------------------------------------------------------------------------
def set_blas_threads(threads: int) -> None:
    """Set ``OPENBLAS_NUM_THREADS`` (``threads`` > 0; 0 leaves it as it is). It must happen before
    NumPy loads OpenBLAS: a warning is printed where NumPy is already imported with another value."""
    if threads <= 0:
        return
    if "numpy" in sys.modules and os.environ.get("OPENBLAS_NUM_THREADS") != str(threads):
        log("# [warn] numpy already imported: the BLAS thread count is not changed")
    os.environ["OPENBLAS_NUM_THREADS"] = str(threads)


def set_cores(cores: int) -> None:
    """Run this process on its first ``cores`` CPUs (``cores`` > 0; 0 leaves the affinity as it is),
    before JAX starts: XLA's CPU runtime sizes its thread pool by the CPUs the process may use, and
    runs the independent operations of a program on that pool. A warning is printed where JAX is
    already imported, or the platform cannot set an affinity."""
    if cores <= 0:
        return
    if not hasattr(os, "sched_setaffinity"):
        log("# [warn] this platform sets no CPU affinity: --cores ignored")
        return
    if "jax" in sys.modules:
        log("# [warn] jax already imported: if it has started, its thread pool keeps the CPUs it started with")
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cores])


def environment(*packages: str) -> dict:
    """Where and with what a script ran: date, host, CPU count and load, JAX backend and devices,
    x64 and XLA flags, and the versions of ppl_sbl, JAX, NumPyro, NumPy and of any further
    ``packages`` (import names, e.g. ``"sklearn"``)."""
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
        "load_average": load_average(),
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


def load_average():
    """The 1, 5 and 15 minute load averages, or None where the system does not report them."""
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


# ----------------------------------------------------------------------------------------------
# Clocks
# ----------------------------------------------------------------------------------------------
class CompileClock:
    """Running totals of the compilation time JAX reports through ``jax.monitoring`` (tracing,
    lowering to MLIR, XLA compilation) and of the number of XLA compilations, from its creation
    on. :class:`Timer` reads the difference over a block, so timers may nest."""

    EVENTS = {
        "/jax/core/compile/jaxpr_trace_duration": "trace",
        "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
        "/jax/core/compile/backend_compile_duration": "xla",
    }

    def __init__(self):
        import jax.monitoring

        self.parts = {part: 0.0 for part in self.EVENTS.values()}
        self.count = 0
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event, duration, **kwargs):
        part = self.EVENTS.get(event)
        if part is not None:
            self.parts[part] += float(duration)
            self.count += part == "xla"

    @property
    def seconds(self) -> float:
        """All compilation seconds so far."""
        return sum(self.parts.values())


class Timer:
    """Wall, process CPU (all threads) and compilation time of a ``with`` block.

    After the block: ``wall``, ``cpu``, ``compile`` (seconds of compilation reported by the
    :class:`CompileClock` ``clock`` during it; 0 without a clock), ``compile_parts`` (trace, lower,
    xla) and ``compilations``."""

    def __init__(self, clock: CompileClock | None = None):
        self.clock = clock

    def __enter__(self):
        self._parts = dict(self.clock.parts) if self.clock else {}
        self._count = self.clock.count if self.clock else 0
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self._wall
        self.cpu = time.process_time() - self._cpu
        self.compile_parts = {k: v - self._parts[k] for k, v in self.clock.parts.items()} if self.clock else {}
        self.compile = sum(self.compile_parts.values())
        self.compilations = self.clock.count - self._count if self.clock else 0
        return False

    def record(self) -> dict:
        """The block's times as a record entry (seconds with and without the compilation in it)."""
        return {"seconds_incl_jit": self.wall, "seconds_excl_jit": self.wall - self.compile,
                "compile_seconds": self.compile, "compilations": self.compilations, "cpu_seconds": self.cpu}


# ----------------------------------------------------------------------------------------------
# Repeated calls
# ----------------------------------------------------------------------------------------------
def timed(fn):
    """(``fn()``, its wall seconds)."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def repeat_timed(fn, repeats, *, warm=False, budget=None):
    """Wall seconds of up to ``repeats`` calls of ``fn`` and the last call's result:
    ``(seconds, result)``. ``warm``: one untimed call first; ``budget``: no further call once the
    timed calls have taken that many seconds together."""
    if warm:
        fn()
    seconds, out = [], None
    for _ in range(repeats):
        out, s = timed(fn)
        seconds.append(s)
        if budget is not None and sum(seconds) > budget:
            break
    return seconds, out


class ProgramSplit:
    """A fit whose calls record how long they took and how much of it was spent in one compiled
    program: ``module.<name>`` (a jitted function the module calls by that name, e.g.
    ``ppl_sbl.fast_ard.compiled.program``) is wrapped for the time of each call and its results
    waited for. The rest of the call is the host's: checking and preparing the arrays, the program's
    dispatch and the transfers, building the result.

    ``split(problem)`` calls ``fit(problem)``; ``calls`` holds (wall seconds, seconds in the program)
    of every call since :meth:`reset`; :meth:`summary` reduces the last ``n``.
    """

    def __init__(self, fit, module, name="program"):
        self.fit, self.module, self.name, self.calls = fit, module, name, []

    def reset(self):
        self.calls = []

    def __call__(self, problem):
        import jax

        program, spent = getattr(self.module, self.name), [0.0]

        def timed_program(*args, **kwargs):
            began = time.perf_counter()
            out = jax.block_until_ready(program(*args, **kwargs))
            spent[0] += time.perf_counter() - began
            return out

        setattr(self.module, self.name, timed_program)
        began = time.perf_counter()
        try:
            out = self.fit(problem)
        finally:
            setattr(self.module, self.name, program)
        self.calls.append((time.perf_counter() - began, spent[0]))
        return out

    def summary(self, n):
        """Medians over the last ``n`` calls: ``program_seconds`` (in the program) and ``host_seconds``
        (the rest of the call)."""
        import numpy as np

        calls = np.asarray(self.calls[-n:], dtype=float).reshape(-1, 2)
        return {"program_seconds": float(np.median(calls[:, 1])),
                "host_seconds": float(np.median(calls[:, 0] - calls[:, 1]))}


def run_chained(step, state, data, reps):
    """``reps`` steps ``state, value = step(state, data)``, each on the last one's state, waited
    for at the end (a jitted step is dispatched asynchronously): returns the last (state, value)."""
    import jax

    value = None
    for _ in range(reps):
        state, value = step(state, data)
    return jax.block_until_ready((state, value))


def interleaved_rounds(functions, rounds, *, warm=True, rotate=False, min_rounds=None, seconds=None,
                       units=None, after_round=None):
    """Time ``functions`` (name -> callable) in rounds, each round calling every function once in
    turn, so that all of them see the same state of a shared machine.

    Parameters
    ----------
    functions : dict
        name -> fn(), called without arguments (its value is not used).
    rounds : int
        Rounds at most.
    warm : bool
        Call every function once, untimed, first.
    rotate : bool
        Start round r at function r (mod the number of functions) instead of at the first.
    min_rounds, seconds : int, float, optional
        After ``min_rounds`` rounds, no new round starts once ``seconds`` have passed.
    units : callable, optional
        ``units()`` at the start of a round: how many units of work (e.g. chained steps) each call
        makes in that round; the round's times are per unit (default: one).
    after_round : callable, optional
        Called with the samples so far after every round (e.g. to resize the next round's work).

    Returns
    -------
    dict
        name -> {"wall": [...], "cpu": [...]}: seconds (per unit) of each round (CPU: process time,
        all threads).
    """
    if warm:
        for fn in functions.values():
            fn()
    names = list(functions)
    samples = {name: {"wall": [], "cpu": []} for name in names}
    start = time.perf_counter()
    r = 0
    while r < rounds and (min_rounds is None or seconds is None or r < min_rounds
                          or time.perf_counter() - start < seconds):
        order = names[r % len(names):] + names[: r % len(names)] if rotate else names
        r += 1
        n = 1 if units is None else units()
        for name in order:
            wall, cpu = time.perf_counter(), time.process_time()
            functions[name]()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            samples[name]["wall"].append(wall / n)
            samples[name]["cpu"].append(cpu / n)
        if after_round is not None:
            after_round(samples)
    return samples


def summarise(values) -> dict:
    """What a record keeps of a list of per-round seconds: median, minimum, maximum and count."""
    import numpy as np

    return {"median": float(np.median(values)), "min": float(np.min(values)), "max": float(np.max(values)),
            "rounds": len(values)}


Peer = collections.namedtuple("Peer", "fit describe")
Peer.__doc__ = """A peer of a comparison (:func:`time_peers`).

Attributes
----------
fit : callable
    ``fit(problem)`` -> a fitted result; the call that is timed.
describe : callable
    ``describe(result, problem)`` -> dict of the record's fields (predictions, counts, bounds), untimed.
"""


def time_peers(peers, problem, *, rounds, cap, skip, clock):
    """Time the fits of ``peers`` on ``problem`` in interleaved rounds and describe their last fits.

    Every peer first makes one warm call (its wall time, with the JAX compilation it included, is
    recorded apart); then ``rounds`` rounds of :func:`interleaved_rounds`.

    Parameters
    ----------
    peers : dict
        name -> :class:`Peer`; called in this order in every round.
    problem : object
        Passed to every ``fit`` and ``describe``.
    rounds : int
        Timed rounds after the warm call.
    cap : float
        A peer whose warm call takes longer (seconds) is not called again: its time is that call
        less the compilation it included.
    skip : set of str
        Peers not run.
    clock : CompileClock
        Counts JAX's compilation time.

    Returns
    -------
    dict
        name -> record: ``status`` ("measured", "capped", "skipped" or "failed": the warm call
        raised, ``error`` says what), ``seconds`` (median over the rounds), ``min_seconds``,
        ``rounds``, ``first_call_seconds``, ``first_call_compile_seconds`` and the fields of the
        peer's ``describe``.
    """
    out, last = {}, {}
    for name, peer in peers.items():  # the warm round
        if name in skip:
            out[name] = {"status": "skipped"}
            continue
        try:
            with Timer(clock) as first:
                last[name] = peer.fit(problem)
        except Exception as exc:  # one failing peer does not end a long run
            out[name] = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
            log(f"  [warn] {name} failed: {out[name]['error']}")
            continue
        out[name] = {"first_call_seconds": first.wall, "first_call_compile_seconds": first.compile}
        if first.wall > cap:
            seconds = max(first.wall - first.compile, 0.0)
            out[name].update(status="capped", seconds=seconds, min_seconds=seconds, rounds=1,
                             seconds_from=f"the warm call less its compilation (warm call > cap {cap:g} s)")
        else:
            out[name]["status"] = "measured"

    def call(name):
        def fn():
            last[name] = peers[name].fit(problem)
        return fn

    timed_peers = {name: call(name) for name, rec in out.items() if rec["status"] == "measured"}
    samples = interleaved_rounds(timed_peers, rounds, warm=False) if timed_peers else {}
    for name, s in samples.items():
        summary = summarise(s["wall"])
        out[name].update(seconds=summary["median"], min_seconds=summary["min"], rounds=summary["rounds"])
    for name, rec in out.items():
        if rec["status"] in ("measured", "capped"):
            rec.update(peers[name].describe(last[name], problem))
    return out


# ----------------------------------------------------------------------------------------------
# Extrapolation and static cost
# ----------------------------------------------------------------------------------------------
def loglog_fit(xs, ys):
    """(slope, intercept) of log y against log x by least squares over the points with x, y
    positive and finite; None for fewer than two such points at distinct x."""
    import numpy as np

    pts = [(x, y) for x, y in zip(xs, ys) if y is not None and x > 0 and y > 0 and math.isfinite(y)]
    if len({x for x, _ in pts}) < 2:
        return None
    slope, intercept = np.polyfit(np.log([p[0] for p in pts]), np.log([p[1] for p in pts]), 1)
    return float(slope), float(intercept)


def loglog_slope(xs, ys):
    """The slope of :func:`loglog_fit`, or None."""
    fit = loglog_fit(xs, ys)
    return None if fit is None else fit[0]


def loglog_predict(xs, ys, x, *, slope_if_single=None):
    """y at ``x`` by a log-log fit of ``ys`` against ``xs`` (:func:`loglog_fit`): ``(y, slope,
    assumed)``. From a single point, ``slope_if_single`` is assumed (``assumed`` True); None
    where neither is possible."""
    fit = loglog_fit(xs, ys)
    if fit is not None:
        slope, intercept = fit
        return math.exp(intercept + slope * math.log(x)), slope, False
    pts = [(a, b) for a, b in zip(xs, ys) if b is not None and a > 0 and b > 0 and math.isfinite(b)]
    if slope_if_single is None or not pts:
        return None
    (x0, y0) = pts[0]
    return y0 * (x / x0) ** slope_if_single, float(slope_if_single), True


def xla_cost(jitted, *args) -> dict:
    """XLA's static cost of the jitted function ``jitted`` compiled for ``args``: flops, bytes
    accessed, transcendentals, and the numbers of fusions (kernels) and instructions and the
    custom-call targets (LAPACK's Cholesky, triangular solves: their flops are not counted) in the
    optimised HLO. No other load on the machine changes it."""
    import re

    compiled = jitted.lower(*args).compile()
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    cost = cost or {}
    text = compiled.as_text() or ""
    return {
        "flops": float(cost.get("flops", float("nan"))),
        "bytes_accessed": float(cost.get("bytes accessed", float("nan"))),
        "transcendentals": float(cost.get("transcendentals", float("nan"))),
        "fusions": len(re.findall(r"\bfusion\(", text)),
        "custom_calls": sorted(re.findall(r'custom_call_target="([^"]+)"', text)),
        "instructions": len(re.findall(r"^\s*(?:ROOT )?%?[\w.-]+ = ", text, flags=re.M)),
    }


# ----------------------------------------------------------------------------------------------
# Records and tables
# ----------------------------------------------------------------------------------------------
def write_record(record: dict, out: str, *, announce: bool = True) -> str:
    """Write the JSON ``record`` to ``out`` (its folder made if missing); with ``announce`` say so.
    Scripts call it after every stage too (``announce=False``), so that a run cut short leaves
    what it measured. Returns ``out``."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as fh:
        json.dump(record, fh, indent=1, default=float)
    if announce:
        log(f"# wrote {out}")
    return out


def log(*parts) -> None:
    """Print and flush (the scripts' progress lines reach a ``tee`` at once)."""
    print(*parts, flush=True)


def fmt(x, spec=".2f", none="-") -> str:
    """``format(x, spec)``, or ``none`` for a missing or non-finite value."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return none
    return format(x, spec)


def save_figure(fig, path, dpi=110) -> str:
    """Lay out the matplotlib figure ``fig``, save it to ``path`` as a PNG and close it; returns
    the file's name."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return os.path.basename(path)
