"""Many fits in one compiled call: :func:`fit_grid`, the sweeps of one model on a list of designs
(e.g. a grid of kernel widths), vmapped."""
from __future__ import annotations

import os
import time

import jax
import numpy as np

from . import engine, fast_ard
from .engine import MAX_SWEEPS, TOL
from .guide import resolve_guide
from .inference import CAVIResult, find_guide
from .validation import warn_unconverged

__all__ = ["fit_grid"]


def fit_grid(model, designs, *args, names=None, tol=TOL, max_sweeps=MAX_SWEEPS, batch_size=None, guide=None,
             schedule="sweep", threads=None, **kwargs) -> dict:
    """Fit ``model(design, *args, **kwargs)`` for every design in ``designs`` in one jitted,
    vmapped call (:func:`fit` under ``jax.vmap``/``jax.lax.map``: no pruning; every fit keeps its
    own ELBO trace and stopping sweep) and return ``{name: CAVIResult}``, ready for
    :func:`ppl_sbl.compare`.

    Typical use: the same model on a grid of kernel widths (one design matrix per width, all of
    the same shape), picked by ELBO without cross-validation. ``names`` (the keys of the result,
    e.g. the widths themselves) default to ``0, 1, ...``.

    ``batch_size``: how many fits run side by side (``jax.lax.map`` with ``batch_size``: the
    fits are vmapped in batches of this size, the batches run one after the other, all inside
    one compiled call). ``None`` (default): all of them on an accelerator (GPU, TPU), where the
    lanes run in parallel, and 1 on a CPU, where a vmapped sweep runs its lanes one after the
    other anyway, every lane would wait for the slowest to converge, and XLA's CPU code for
    batched triangular solves is slower than its LAPACK calls for single matrices.

    ``schedule``: ``"sweep"`` (default; the sweeps of :class:`ppl_sbl.CAVI` with
    ``schedule="sweep", prune=False``) or ``"fast"``: the fast schedule of every fit
    (``CAVI(model, schedule="fast", compiled=True)``, the same fit one by one) in one compiled
    program (:func:`ppl_sbl.fast_ard.schedule_many`), for the models whose guide sets it up
    (``fast_plan``: the RVMs and robust RVMs, and the derived guides of the models you write, one
    precision per coefficient); ``max_sweeps`` is
    then its ``max_passes``. ``batch_size`` as above (``None``: 1 on a CPU, where every fit keeps
    its own branches). ``threads`` (fast schedule, ``batch_size`` 1): the fits split into that
    many groups, each group's program called from its own thread, so that they run on separate
    cores (default: the number of CPUs on a CPU, 1 on an accelerator).
    """
    designs = list(designs)
    if not designs:
        raise ValueError("`designs` is empty; pass a list of design matrices of one shape.")
    names = list(range(len(designs))) if names is None else list(names)
    if len(names) != len(designs):
        raise ValueError(f"`names` has {len(names)} entries for {len(designs)} designs.")
    spec = find_guide(model, guide)
    g = resolve_guide(spec, (designs[0],) + args, kwargs)
    if any(resolve_guide(spec, (x,) + args, kwargs) is not g for x in designs[1:]):
        raise ValueError("the designs select different guides; fit them one by one.")
    if schedule not in ("sweep", "fast"):
        raise ValueError(f"`schedule` must be 'sweep' or 'fast'; got {schedule!r}.")
    if batch_size is None:
        batch_size = 1 if jax.default_backend() == "cpu" else len(designs)
    batch_size = max(1, min(int(batch_size), len(designs)))
    if schedule == "fast":
        if threads is None:
            threads = (os.cpu_count() or 1) if jax.default_backend() == "cpu" else 1
        return _fast_grid(model, g, designs, args, kwargs, names, tol, max_sweeps, batch_size, int(threads), guide)
    datas = [engine.strong(g.prepare(x, *args, **kwargs)) for x in designs]
    stacked = engine.stack(datas)

    def one(d):
        return engine.fit_loop(g, d, tol, max_sweeps, None, record=True)

    grid = g.compiled(("fit_grid", float(tol), int(max_sweeps), len(designs), batch_size),
                      lambda stacked: engine.batched_map(one, stacked, len(designs), batch_size))
    start = time.perf_counter()
    states, _, sweeps, converged, traces = jax.block_until_ready(grid(stacked))
    seconds = time.perf_counter() - start
    sweeps, converged, traces = np.asarray(sweeps), np.asarray(converged), np.asarray(traces)
    if not converged.all():
        stopped = [name for name, done in zip(names, converged) if not done]
        warn_unconverged(f"fit_grid for {stopped}", max_sweeps)
    results = {}
    for i, (name, x) in enumerate(zip(names, designs)):
        results[name] = CAVIResult(
            model=model,
            guide_spec=g,
            args=(x,) + args,
            kwargs=kwargs,
            data=datas[i],
            state=jax.tree.map(lambda leaf: leaf[i], states),
            elbo_trace=traces[i, : int(sweeps[i])],
            converged=bool(converged[i]),
            tol=tol,
            seconds=seconds,
            guide_choice=guide,
        )
    return results


def _fast_grid(model, g, designs, args, kwargs, names, tol, max_passes, batch_size, threads, guide):
    """:func:`fit_grid` with ``schedule="fast"``."""
    if g.fast_plan is None:
        raise ValueError(f"model {getattr(model, '__name__', model)} has no fast schedule that runs many fits at "
                         "once; use schedule='sweep'.")
    start = time.perf_counter()
    plans = [g.fast_plan(x, *args, tol=tol, max_passes=int(max_passes), progress=None, **kwargs) for x in designs]
    fits = fast_ard.schedule_many(plans, batch_size, threads)
    outs = [plan.finish(fit) for plan, fit in zip(plans, fits)]
    seconds = time.perf_counter() - start
    stopped = [name for name, fit in zip(names, fits) if not fit.converged]
    if stopped:
        warn_unconverged(f"fit_grid for {stopped}", max_passes)
    return {name: CAVIResult(model=model, guide_spec=g, args=(x,) + args, kwargs=kwargs, data=data, state=state,
                             elbo_trace=np.asarray(fit.elbo_trace), converged=bool(fit.converged), tol=tol,
                             seconds=seconds, schedule="fast", num_moves=int(fit.num_moves), guide_choice=guide)
            for name, x, (data, state, fit) in zip(names, designs, outs)}
