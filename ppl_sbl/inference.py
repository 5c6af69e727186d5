"""Closed-form coordinate-ascent variational inference (CAVI) for ppl-sbl models.

A model is a plain NumPyro program with a closed-form guide (:mod:`ppl_sbl.guide`) attached, or
one derived from its trace (:mod:`ppl_sbl.derived`). :class:`CAVI` runs it in layers, as
NumPyro's ``SVI``::

    cavi = CAVI(model)
    state, data = cavi.init(*args, **kwargs)   # the prepared data and the start
    state, elbo = cavi.step(state, data)       # one compiled sweep of the closed-form updates
    result = cavi.run(*args, **kwargs)         # to the fixed point: the fast schedule or the sweeps

``CAVI.run`` runs, by default (``schedule="auto"``), the fast variational schedule
(:mod:`ppl_sbl.fast_ard`) for the ARD models whose guide has one, where it applies, and the sweeps
otherwise; the sweeps iterate to the fixed point (the relative change of the ELBO below ``tol``
and that of the state below sqrt(``tol``), see :class:`CAVI`) and prune basis functions whose
precision has diverged (see :mod:`ppl_sbl.gaussian`). It returns a :class:`CAVIResult`. :func:`fit` is the
same loop as a pure ``lax.while_loop`` (no pruning) that can be jitted and vmapped;
:func:`ppl_sbl.batch.fit_grid` runs it over a list of designs, e.g. a grid of kernel widths.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import time
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from . import engine, fast_ard, gaussian, relevance
from .derived import derived_guide
from .engine import MAX_SWEEPS, TOL, fit
from .guide import ClosedFormGuide, built_guide, closed_form_guide, resolve_guide
from .result import ResultMethods, held, ordered_parts
from .portable import Saveable
from .validation import warn_unconverged

__all__ = ["ClosedFormGuide", "closed_form_guide", "find_guide", "resolve_guide", "CAVI", "CAVIResult", "fit",
           "TOL", "MAX_SWEEPS"]


def find_guide(model, guide=None):
    """The guide ``CAVI`` runs: ``guide`` itself if it is a ClosedFormGuide; the one attached to
    the model (``guide=None`` or ``"closed_form"``); or, with ``guide="derived"`` or for a model
    with no guide attached, the guide derived from the model's trace
    (:func:`ppl_sbl.derived.derived_guide`, a selector called with the model's arguments)."""
    if isinstance(guide, ClosedFormGuide):
        return guide
    if guide not in (None, "closed_form", "derived"):
        raise ValueError(f"`guide` must be None, 'closed_form', 'derived' or a ClosedFormGuide; got {guide!r}.")
    found = getattr(model, "closed_form_guide", None)
    if guide == "derived" or (found is None and guide is None):
        def select(*args, **kwargs):
            return derived_guide(model, *args, **kwargs)

        return select
    if found is None:
        name = getattr(model, "__name__", repr(model))
        raise ValueError(
            f"model {name} has no closed-form guide attached; decorate it with "
            "@ppl_sbl.closed_form_guide(guide), pass guide=ClosedFormGuide(...), or use guide='derived'."
        )
    return found


@dataclasses.dataclass
class CAVI:
    """Closed-form coordinate-ascent variational inference.

    Parameters
    ----------
    model : callable
        A NumPyro model with a closed-form guide attached (``model.closed_form_guide``).
    guide : ClosedFormGuide, optional
        Use this guide instead of the attached one.
    tol : float
        Stop at the fixed point: when a sweep changes the ELBO by at most ``tol`` relative,
        |L_t - L_{t-1}| <= tol |L_t|, *and* the state by at most sqrt(tol) relative: no
        coefficient's prior precision P_k = E[alpha_k] (weighted by the share of w_k's precision
        that comes from the data, so that a coefficient on its way out, drifting slowly towards an
        infinite precision without changing the fit, does not hold the fit up) and no data
        precision h_k (which carries E[gamma], the local-bound parameters xi, the robust weights)
        moved by more than that. ``converged`` says whether this happened within ``max_sweeps``.
        Vague Gamma hyperpriors put a large constant into the ELBO (about ln(1/a0) nats per
        precision), so the default is small: 1e-9. The state's part makes the rule
        independent of how slowly the sweeps happen to move: the ELBO can be flat to rounding
        while the state still moves (sqrt(tol) ~ 3e-5 per sweep corresponds to the ELBO
        tolerance, a coordinate update gaining the KL divergence by which it moves its factor).
        The sweeps start from the data's scale (each model's ``init``: E[gamma] from var(t),
        E[alpha_k] the unit-information prior), so that scaling Phi or t changes neither the
        sweeps nor the fit beyond the hyperpriors' influence. The state's part is unit-free; the
        ELBO's is relative to |L_t|, which scaling t by r shifts by -N ln r (the likelihood's
        units), so the sweep at which a fit stops can move a little with the target's units.
    max_sweeps : int
        Upper limit on the number of sweeps.
    prune : bool
        Take a coefficient out of the linear algebra once its precision E[alpha_k] has grown so
        large that freezing it (mean 0, independent of the rest) lowers the ELBO by less than
        ``prune_threshold`` nats, other factors held fixed (:func:`ppl_sbl.gaussian.freeze_cost`).
        Pruned coefficients keep all their ELBO terms, so ``elbo`` stays a lower bound. A prune
        is kept only if the sweep after it does not lower the ELBO (otherwise it is undone and
        tried again later), so the ELBO trace never decreases.
    prune_threshold : float
        The freeze cost, in nats per coefficient, below which a coefficient is pruned.
    prune_after : float
        Pruning starts once the relative ELBO change between sweeps is below this value, so
        that the large precisions of the first sweeps (before q(gamma) and q(alpha) settle) do
        not freeze coefficients that the fit needs later.
    progress_bar : bool or None
        Show a tqdm bar; ``None`` shows it only for fits that run longer than two seconds.
    schedule : {"auto", "sweep", "fast"}
        ``"sweep"``: every coefficient's factors updated at every sweep (with ``prune``, frozen
        once their precision diverges); its fixed point is the dense one, every coefficient in
        the model. ``"fast"``: the fast variational schedule of the ARD family
        (:mod:`ppl_sbl.fast_ard`; the models whose guide has one: ``rvm.regression``,
        ``rvm.classification``, ``rvm.multiclass``, ``robust_rvm.classification``,
        ``robust_rvm.regression``): from the empty model, one coefficient at a time, adds and
        re-estimates of their precisions to the closed-form fixed point, the likelihood's factors
        updated between passes. Under vague hyperpriors on the precisions (a0 <
        :data:`ppl_sbl.priors.VAGUE_SHAPE`, as the defaults are) a coefficient is added only where
        the data support it (q^2 > s): a sparse fit, a little below the dense fixed point (the
        frozen coefficients' small gains, :mod:`ppl_sbl.fast_ard`, "Sparsity"); under proper ones
        by the exact comparison of its ELBO in and out of the model, towards the dense fixed point
        (which a strongly collinear design can keep it from reaching). It stops after a pass
        that made no move and changed the ELBO by at most ``tol`` and the likelihood's factors by
        at most sqrt(``tol``) (relative), the sweep's rule (:func:`ppl_sbl.fast_ard.schedule`;
        ``rvm.multiclass``: after a pass that changed the ELBO by at most ``tol``), and
        ``max_sweeps`` limits the passes. It raises
        for a model without a fast schedule, with ``init_state``, and for arguments it does not
        take (:class:`ppl_sbl.fast_ard.NotApplicable`). With ``groups=`` of the RVM models (one
        precision shared by each group) it adds and re-estimates whole groups
        (:func:`ppl_sbl.fast_ard.group_schedule`).
        ``"auto"`` (default): the fast schedule where it applies, i.e. the resolved guide has one,
        ``prune`` is true, no ``init_state`` is given and the fast schedule takes the call's
        arguments with vague hyperpriors on the precisions (it raises
        :class:`~ppl_sbl.fast_ard.NotApplicable` before any fitting work otherwise, e.g. for
        a0 >= :data:`ppl_sbl.priors.VAGUE_SHAPE`, whose ELBO has its optimum with every
        coefficient in the model); the sweep everywhere else (grid RVMs, derived guides without
        an ARD or grouped precision, ``init_state=``, ``prune=False``, proper hyperpriors such as
        a0 = b0 = 1e-2). :meth:`CAVIResult.refine` continues a fast fit with the sweep to its
        fixed point. ``prune=False`` always means the plain
        sweep over every coefficient, whatever the schedule. ``result.schedule`` says which
        schedule ran. :meth:`init` and :meth:`step` are the sweep's, whatever the schedule.
    compiled : bool
        Run the fast schedule as one compiled XLA program (:mod:`ppl_sbl.fast_ard.compiled`):
        the same fit without a return to Python per move: the RVMs (multiclass too), robust RVMs and
        derived guides, one ARD precision per coefficient (``groups=`` raises a ValueError); it
        compiles once per shape, the sizes rounded up (:func:`ppl_sbl.fast_ard.compiled.bucket`).
    """

    model: Callable
    guide: Any = None
    tol: float = TOL
    max_sweeps: int = MAX_SWEEPS
    prune: bool = True
    prune_threshold: float = 1e-3
    prune_after: float = 1e-4
    progress_bar: Optional[bool] = None
    schedule: str = "auto"
    compiled: bool = False
    resolved_guide: Optional[ClosedFormGuide] = dataclasses.field(default=None, init=False, repr=False)

    def __post_init__(self):
        self.closed_form = find_guide(self.model, self.guide)
        if not (self.tol > 0):
            raise ValueError(f"`tol` must be > 0; got {self.tol!r}.")
        if int(self.max_sweeps) < 1:
            raise ValueError(f"`max_sweeps` must be >= 1; got {self.max_sweeps!r}.")
        if not (self.prune_threshold > 0):
            raise ValueError(f"`prune_threshold` must be > 0; got {self.prune_threshold!r}.")
        if self.schedule not in ("auto", "sweep", "fast"):
            raise ValueError(f"`schedule` must be 'auto', 'sweep' or 'fast'; got {self.schedule!r}.")

    def init(self, *args, init_state=None, **kwargs):
        """The prepared data of ``model(*args, **kwargs)`` and the state the sweeps start from:
        ``(state, data)``, every array strongly typed (so that every sweep has the same types).
        Selects the guide for these arguments, which :meth:`step` then runs."""
        return self._init(resolve_guide(self.closed_form, args, kwargs), args, kwargs, init_state)

    def _init(self, g, args, kwargs, init_state):
        self.resolved_guide = g
        data = engine.strong(g.prepare(*args, **kwargs))
        return engine.strong(engine.initial_state(g, data) if init_state is None else init_state), data

    def step(self, state, data):
        """One sweep of the closed-form updates and the ELBO after it: ``(state, elbo)``, compiled
        once per guide (:func:`ppl_sbl.engine.sweep`). No pruning: :meth:`run` adds it."""
        g = self.resolved_guide
        if g is None:
            raise RuntimeError("call `init(*args, **kwargs)` first: it selects the guide that `step` runs.")
        return engine.compiled_step(g)(state, data)

    def run(self, *args, init_state=None, **kwargs) -> "CAVIResult":
        """Fit the guide to ``model(*args, **kwargs)`` and return a :class:`CAVIResult` (the
        schedule that ran in its ``schedule``: see :class:`CAVI`'s ``schedule``)."""
        g = resolve_guide(self.closed_form, args, kwargs)
        if self.schedule == "fast" and self.prune:
            if init_state is not None:
                raise ValueError("`init_state` applies to schedule='sweep'; the fast schedule starts from the "
                                 "empty model.")
            return self._run_fast(g, args, kwargs)
        if self.schedule == "auto" and self.prune and init_state is None and g.fast is not None:
            try:
                return self._run_fast(g, args, kwargs, vague_only=True)
            except fast_ard.NotApplicable:
                pass  # arguments the fast schedule does not take (raised before any fitting work): the sweep
        state, data = self._init(g, args, kwargs, init_state)
        threshold = jnp.asarray(self.prune_threshold, dtype=jnp.float64)
        do_prune = bool(self.prune) and bool(engine.active_fields(state))

        chunk = engine.compiled_chunk(g)
        tol = jnp.asarray(self.tol, dtype=jnp.float64)
        prune_after = jnp.asarray(self.prune_after, dtype=jnp.float64)
        offset = float(engine.unit_offset(g, data))

        def sweep(state, data):  # one sweep (the chunk's program, run once): (state, ELBO, state change)
            state, chunk_values, chunk_moves, _ = chunk(state, data, -math.inf, 0, 1, 0, tol, prune_after, False)
            return state, chunk_values[0], chunk_moves[0]
        trace, prune_events = [], []
        converged = False
        start = time.perf_counter()
        bar, bar_clock = None, None
        previous = -math.inf
        pending = None  # the state before the last prune, until the sweep after it is accepted
        wait, backoff, gap = 0, 10, engine.PRUNE_EVERY
        i = 0  # sweeps made
        while i < int(self.max_sweeps):
            if pending is not None:
                # one sweep after a prune: keep the prune only if the ELBO did not fall, otherwise
                # undo it (freezing lost more than the next sweep gained) and wait longer before
                # trying again, so that the ELBO never decreases
                state, value, moved = sweep(state, data)
                value = float(value)
                if value < previous:
                    state, value, moved = sweep(pending, data)
                    value = float(value)
                    prune_events.pop()
                    wait, backoff = i + backoff, 2 * backoff
                pending = None
                values, moves = [value], [float(moved)]
            else:
                n = min(engine.CHUNK, int(self.max_sweeps) - i)
                state, chunk_values, chunk_moves, count = chunk(state, data, previous, i, n, wait, tol, prune_after,
                                                                do_prune)
                values = [float(v) for v in np.asarray(chunk_values)[:int(count)]]
                moves = [float(v) for v in np.asarray(chunk_moves)[:int(count)]]
            for value in values:
                trace.append(value)
                if not math.isfinite(value):
                    raise FloatingPointError(
                        f"the ELBO became {value} at sweep {len(trace)}; check the scale of the inputs "
                        "or the hyperparameters."
                    )
            i += len(values)
            updated = state
            value = values[-1]
            step_before = trace[-2] if len(trace) > 1 else -math.inf
            if i > 1 and bool(engine.converged(value, step_before, moves[-1], self.tol, offset)):
                converged = True
                break
            # prune only once the transient of the first sweeps is over; the pruned state is handed
            # to the next sweep, so the recorded ELBO always belongs to an updated state
            allow = i > 1 and abs(value - step_before) <= self.prune_after * abs(value - offset)
            previous = value
            if do_prune and allow and i - 1 >= wait:
                before = engine.num_active(state)
                pruned = engine.compiled_prune(g)(state, data, threshold)
                active = engine.num_active(pruned)
                # the next check: soon after a prune, further and further apart while none is found
                gap = engine.PRUNE_EVERY if active < before else min(2 * gap, engine.PRUNE_EVERY_MAX)
                wait = max(wait, i - 1 + gap)
                if active < before:
                    prune_events.append((i, active))
                    pending = state
                    total = pruned._asdict()[engine.active_fields(pruned)[0]].index.shape[0]
                    size = gaussian.bucket_size(active, total, minimum=engine.COMPACT_MIN)
                    state = engine.compact_state(pruned, size) if size < total else pruned
            if bar_clock is None:
                bar_clock = time.perf_counter()  # compilation does not count towards the delay
            bar = self._progress(bar, bar_clock, i, len(values), value)
        if bar is not None:
            bar.close()
        if not converged:
            warn_unconverged(f"CAVI on {getattr(self.model, '__name__', 'the model')}", self.max_sweeps)
        return CAVIResult(
            model=self.model,
            guide_spec=g,
            args=args,
            kwargs=kwargs,
            data=data,
            state=updated,
            elbo_trace=np.asarray(trace),
            converged=converged,
            tol=self.tol,
            prune_events=prune_events,
            seconds=time.perf_counter() - start,
            guide_choice=self.guide,
        )

    def _run_fast(self, g, args, kwargs, vague_only=False):
        if g.fast is None:
            name = getattr(self.model, "__name__", repr(self.model))
            raise ValueError(f"model {name} has no fast schedule; use schedule='sweep'.")
        start = time.perf_counter()
        bar, shown = [None], [0]

        def progress(passes, moves, value, active):  # after every pass, or every few (the compiled schedule)
            bar[0], shown[0] = self._progress(bar[0], start, passes, passes - shown[0], value), passes

        if self.compiled and "compiled" not in inspect.signature(g.fast).parameters:
            raise ValueError(f"`compiled=True`: model {getattr(self.model, '__name__', self.model)} has no compiled "
                             "fast schedule; use compiled=False.")
        extra = {"compiled": True} if self.compiled else {}
        data, state, fit = g.fast(*args, tol=self.tol, max_passes=int(self.max_sweeps),
                                  progress=None if self.progress_bar is False else progress,
                                  vague_only=vague_only, **extra, **kwargs)
        if bar[0] is not None:
            bar[0].close()
        if not fit.converged:
            warn_unconverged(f"the fast schedule on {getattr(self.model, '__name__', 'the model')}", self.max_sweeps)
        return CAVIResult(model=self.model, guide_spec=g, args=args, kwargs=kwargs, data=data, state=state,
                          elbo_trace=np.asarray(fit.elbo_trace), converged=bool(fit.converged), tol=self.tol,
                          seconds=time.perf_counter() - start, schedule="fast",
                          num_moves=int(fit.num_moves), guide_choice=self.guide)

    def _progress(self, bar, start, done, made, value):
        """Show ``done`` sweeps of ``max_sweeps`` (``made`` of them since the last call)."""
        show = self.progress_bar
        if show is False:
            return None
        if bar is None and (show or time.perf_counter() - start > 2.0):
            from tqdm.auto import tqdm

            # progress_bar=None: only on a terminal (tqdm's disable=None), after two seconds
            bar = tqdm(total=int(self.max_sweeps), initial=done - made, desc="CAVI", unit="sweep",
                       disable=None if show is None else False, mininterval=0.5)
        if bar is not None:
            bar.update(made)
            bar.set_postfix(elbo=f"{value:.4f}", refresh=False)
        return bar


@dataclasses.dataclass
class CAVIResult(ResultMethods, Saveable):
    """The fitted guide and everything needed to use it.

    Attributes
    ----------
    elbo : float
        The analytic objective at the last sweep (a lower bound on ln p(t)).
    elbo_trace : ndarray
        The objective after every sweep (the fast schedule: at the start, after every move and
        after every pass).
    converged, num_sweeps, state, seconds
    schedule : "sweep" or "fast"; num_moves : the fast schedule's moves (None for sweeps)
    relevance_ratio : the threshold r of the relevance rule, q_k^2 > r s_k (``relevant``; 1: the
        data support w_k)
    relevant_mask : unused (None; kept so that stored results load): ``relevant`` computes the
        relevant set from the state for every result
    prune_events : list of (sweep, number of active coefficients after pruning at that sweep),
        for the prunes that were kept
    refined_by : for a result of :meth:`refine`, how many nats the sweep raised the ELBO above
        the fit it continued (``elbo - elbo_trace[0]``); None otherwise

    Models may add summaries of the fitted state as further attributes (``ClosedFormGuide.extras``),
    e.g. ``result.outlier_score`` of the robust RVM.
    """

    model: Callable
    guide_spec: ClosedFormGuide
    args: tuple
    kwargs: dict
    data: Any
    state: Any
    elbo_trace: np.ndarray
    converged: bool
    tol: float = TOL
    prune_events: list = dataclasses.field(default_factory=list)
    seconds: float = float("nan")
    relevance_ratio: float = 1.0
    schedule: str = "sweep"
    relevant_mask: Optional[np.ndarray] = None
    num_moves: Optional[int] = None
    guide_choice: Any = None
    refined_by: Optional[float] = None

    guide_is_mean_field = True  # a closed-form guide is a product of independent factors

    # saving: the guide is stored as the choice that found it (``CAVI``'s ``guide``: the model's
    # attached guide, the derived one, or a ClosedFormGuide given by the caller) and found again
    # from the model and its arguments on loading, so that what is stored holds no closures
    def __getstate__(self):
        fields = dict(self.__dict__)
        if not isinstance(self.guide_choice, ClosedFormGuide):
            fields["guide_spec"] = None
        return fields

    def __setstate__(self, fields):
        self.__dict__.update(fields)
        if self.guide_spec is None:
            self.guide_spec = resolve_guide(find_guide(self.model, self.guide_choice), self.args, self.kwargs)

    @property
    def elbo(self) -> float:
        return float(self.elbo_trace[-1])

    @property
    def observed(self) -> dict:
        """{observed site: value}: the prepared targets where the guide's data hold them (``data.t``),
        else read from a trace of the program (:attr:`ppl_sbl.result.ResultMethods.observed`)."""
        t = getattr(self.data, "t", None)
        if t is None:
            return super().observed
        return {self.guide_spec.observed: np.asarray(t)}

    @property
    def num_sweeps(self) -> int:
        """Sweeps made (the fast schedule: entries of its trace, one per move and per pass)."""
        return int(len(self.elbo_trace))

    @property
    def bound(self) -> str:
        return self.guide_spec.bound

    @property
    def elbo_exact(self) -> Optional[float]:
        """The true ELBO of q (quadrature) where ``elbo`` uses a local bound; else ``None``."""
        if self.guide_spec.elbo_exact is None:
            return None
        return float(self.guide_spec.compiled("elbo_exact", self.guide_spec.elbo_exact, once=True)(self.state, self.data))

    def elbo_parts(self) -> dict:
        """The ELBO as named terms that sum to :attr:`elbo` (:meth:`ppl_sbl.result.FitResult.elbo_parts`):
        the guide's exact terms, plus ``local_bound`` = elbo - elbo_exact (<= 0) where the
        objective uses a local bound."""
        spec = self.guide_spec
        if spec.elbo_parts is None:
            raise NotImplementedError(f"the guide of {getattr(self.model, '__name__', 'this model')} does not "
                                      "split its ELBO into parts (ClosedFormGuide.elbo_parts).")
        terms = spec.compiled("elbo_parts", spec.elbo_parts, once=True)(self.state, self.data)
        parts = {k: float(v) for k, v in terms.items()}
        if spec.elbo_exact is not None:  # the exact terms sum to elbo_exact
            parts["local_bound"] = self.elbo - math.fsum(parts.values())
        return ordered_parts(parts)

    def loo_exact(self) -> Optional[np.ndarray]:
        """Exact leave-one-out log predictive densities ln p(t_n | t_-n), (N,), for the models with a
        closed form (``ClosedFormGuide.loo``: Gaussian likelihoods, the hyperparameters held at
        their fitted means); ``None`` for the others (use PSIS: :func:`ppl_sbl.comparison.loo`)."""
        spec = self.guide_spec
        if spec.loo is None:
            return None
        return np.asarray(spec.compiled("loo", spec.loo, once=True)(self.state, self.data)[0])

    def log_predictive_density(self) -> Optional[np.ndarray]:
        """ln p(t_n | t) of every training point under the fitted predictive, (N,), for the models
        with an exact leave-one-out form (its counterpart: their difference is p_loo); else ``None``."""
        spec = self.guide_spec
        if spec.loo is None:
            return None
        return np.asarray(spec.compiled("loo", spec.loo, once=True)(self.state, self.data)[1])

    @property
    def likelihood_normalised(self) -> bool:
        """Whether the model's likelihood is a normalised density of the data (not for the robust
        RVM's weighted likelihood), i.e. whether its ELBO bounds the evidence."""
        return bool(self.guide_spec.likelihood_normalised)

    @property
    def bound_gaps(self) -> dict:
        """{local bound: nats it loses against the exact ELBO of q}; empty with no local bound."""
        spec = self.guide_spec
        if spec.bound_gaps is not None:
            gaps = spec.compiled("bound_gaps", spec.bound_gaps, once=True)(self.state, self.data)
            return {k: float(v) for k, v in gaps.items()}
        if spec.elbo_exact is None:
            return {}
        return {spec.bound: self.elbo_exact - self.elbo}

    @property
    def precision_ratio(self) -> np.ndarray:
        """P_k / c_k: the prior precision E[alpha_k] of each coefficient over the precision the data
        give it (``relevance``; given the other coefficients, 1/Sigma_kk - P_k, where the state holds
        an ActiveGaussian). A summary of how far the prior dominates each posterior; the relevance
        rule is :attr:`relevant` (at a sweep's fixed point in the vague limit P_k / c_k < 1 means
        q_k^2 > 2 s_k, so it counts fewer than ``relevant``)."""
        prior, data = engine.compiled_relevance(self.guide_spec)(self.state, self.data)
        return np.asarray(prior) / np.maximum(np.asarray(data), 1e-300)

    @property
    def effective_parameters(self) -> float:
        """sum_k (1 - E[alpha_k] Var_q[w_k]): how many coefficients the data determine (MacKay's
        gamma). With many overlapping basis functions the data can determine a few directions
        without determining any single coefficient; this count sees those directions."""
        if not engine.active_fields(self.state):
            return float("nan")
        prior, cond = engine.compiled_relevance(self.guide_spec)(self.state, self.data)
        return float(np.sum(np.asarray(cond) / (np.asarray(prior) + np.asarray(cond))))

    def _support(self):
        """(relevant (M,), q_k^2 / s_k (M,)) by :func:`ppl_sbl.relevance.judge`, or None for a guide
        with no Gaussian factor to read (:func:`ppl_sbl.engine.coefficient_factors`)."""
        found = engine.compiled_support(self.guide_spec)(self.state, self.data)
        if found is None:
            return None
        mean, var, kept, prior, groups = found
        groups = None if groups is None else np.asarray(groups)
        covariance = None
        if groups is not None and np.max(np.unique(groups, return_counts=True)[1]) > 1:
            covariance = engine.compiled_covariances(self.guide_spec)(self.state, self.data)
        mask, ratio = relevance.judge(mean, var, kept, prior, groups, covariance, self.relevance_ratio)
        return mask.any(axis=0), ratio.max(axis=0)

    @property
    def support_ratio(self) -> np.ndarray:
        """q_k^2 / s_k of each coefficient (:mod:`ppl_sbl.relevance`; several outputs: the largest
        over them), 0 outside the active set and where s_k is not resolved
        (:data:`ppl_sbl.relevance.RESOLVED_SHARE`): above ``relevance_ratio`` the data support w_k on its
        own (coefficients that share one precision are judged as a group, :attr:`relevant`). For a
        guide with no Gaussian factor to read, ``1 / precision_ratio``."""
        found = self._support()
        return 1.0 / np.maximum(self.precision_ratio, 1e-300) if found is None else found[1]

    @property
    def relevant(self) -> np.ndarray:
        """Mask of relevant basis functions: those the data support (:mod:`ppl_sbl.relevance`).

        Coefficient k is relevant when, with its own precision's hyperprior in the vague limit,
        the ELBO with w_k in the model at its best precision exceeds the ELBO with it out:
        q_k^2 > r s_k, with s_k = 1/Sigma_kk - P_k and q_k = mu_k / Sigma_kk its leave-one-out
        precision and quality given the fit's other factors (P_k = E[alpha_k], q(w) = N(mu,
        Sigma)) and r = ``relevance_ratio`` (1: the rule itself), where the fit resolves s_k (the
        data's share 1 - P_k Sigma_kk above :data:`ppl_sbl.relevance.RESOLVED_SHARE`). Coefficients that share one
        precision (the RVMs' ``groups=``, e.g. ``np.zeros(M, int)``, Bayesian ridge; group ARD in
        derived models) are judged as a group, by the block form of the same comparison
        (:func:`ppl_sbl.fast_ard.group_supported`), and all of a supported group's coefficients
        it keeps are relevant. Pruned (frozen) coefficients have mean 0, so they are never
        relevant. The same rule for every result: the fast schedule's (where it is the schedule's
        own test, ``FastFit.supported``) and the sweep's, shipped and derived guides; the
        multiclass RVM: a basis function the data support in at least one class. Scale-free:
        rescaling a column of Phi or the targets leaves the mask unchanged.

        Guides without a Gaussian factor to read (no ``ClosedFormGuide.coefficients`` and no
        ActiveGaussian in the state: hand-written custom guides) fall back to the precision
        ratio: P_k / c_k < r (``precision_ratio``), per coefficient.
        """
        found = self._support()
        if found is not None:
            return found[0]
        return self.precision_ratio < self.relevance_ratio

    @property
    def num_active(self) -> int:
        """How many coefficients the fit keeps in its linear algebra (not pruned); 0 for a state
        with no prunable factor."""
        return int(engine.num_active(self.state))

    @property
    def relevance_indices(self) -> np.ndarray:
        """The indices of the relevant basis functions (``relevant``, judged per precision group), ascending."""
        return np.flatnonzero(self.relevant)

    @property
    def program(self) -> Callable:
        """The model (:class:`ppl_sbl.result.FitResult`'s name for it)."""
        return self.model

    @property
    def inference(self) -> str:
        return "closed-form CAVI" + (", fast schedule" if self.schedule == "fast" else "")

    @property
    def guide(self) -> Callable:
        """The NumPyro guide built from the fitted state: ``functools.partial(built_guide,
        guide_spec.guide, state)``, so the state's arrays can enter a compiled program as inputs
        (:func:`ppl_sbl.diagnostics.per_particle`)."""
        return functools.partial(built_guide, self.guide_spec.guide, self.state)

    def predict(self, *new_args):
        """Predictions for new inputs (regression: mean and variance; classification: P(t=1))."""
        spec = self.guide_spec
        if spec.check_new is None:
            out = spec.predict(self.state, self.data, *new_args)
        else:  # checked with their values, then one compiled function (per guide and shape)
            out = spec.compiled("predict", spec.predict, once=True)(self.state, self.data, *spec.check_new(self.data, *new_args))
        return jax.tree.map(np.asarray, out)

    def sample(self, key, num_samples: int = 1000, sites=None) -> dict:
        """Draws from q under the model's site names: {site: (num_samples, ...)}. ``sites``: draw
        only these (e.g. :meth:`likelihood_sites`, all that the pointwise log-likelihood reads;
        they must not be drawn given the others in the guide), else every site."""
        from numpyro.infer import Predictive

        if isinstance(key, int):
            key = jax.random.PRNGKey(key)
        n, g = int(num_samples), self.guide_spec
        keep = None if sites is None else tuple(sorted(sites))

        def only(guide):
            return guide if keep is None else held(guide, keep)

        values = engine.call_compiled(
            lambda name, fn: g.compiled(name, fn, once=True), ("sample", n, keep),
            lambda key, state, *a, **k: Predictive(only(g.guide(state)), num_samples=n)(key, *a, **k),
            (key, self.state), self.args, self.kwargs,
            fallback=lambda: Predictive(only(self.guide), num_samples=n)(key, *self.args, **self.kwargs))
        return {k: np.asarray(v) for k, v in values.items() if keep is None or k in keep}

    def monte_carlo_elbo(self, num_particles: int = 4000, seed: int = 0) -> np.ndarray:
        """Per-particle values of NumPyro's ``Trace_ELBO`` on the model and the guide built from
        the fitted state, as :func:`ppl_sbl.diagnostics.monte_carlo_elbo` computes them, in one
        program per shapes kept by the guide (the state and the arrays are its inputs)."""
        from numpyro.infer import Trace_ELBO

        model, build = self.model, self.guide_spec.guide

        def values(keys, state, *args, **kwargs):
            elbo, guide = Trace_ELBO(num_particles=1), build(state)
            return jax.vmap(lambda key: -elbo.loss(key, {}, model, guide, *args, **kwargs))(keys)

        keys = jax.random.split(jax.random.PRNGKey(seed), int(num_particles))
        generic = super().monte_carlo_elbo
        return np.asarray(engine.call_compiled(self.compiled, "monte carlo elbo", values, (keys, self.state),
                                               self.args, self.kwargs, fallback=lambda: generic(num_particles, seed)))

    def compiled(self, name, fn):
        """``jax.jit(fn)``, kept by the fit's guide (:meth:`ClosedFormGuide.compiled`) for every fit
        of the same model: the program and ``fn`` must be the same for every call with this name."""
        return self.guide_spec.compiled(("result", self.model, name), fn, once=True)

    def __getattr__(self, name):
        # model-specific summaries (ClosedFormGuide.extras), e.g. result.outlier_score
        spec = self.__dict__.get("guide_spec")
        if spec is not None and spec.extras is not None and not name.startswith("_"):
            extras = spec.extras(self.state, self.data)
            if name in extras:
                return np.asarray(extras[name])
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def refine(self, *, tol=None, max_sweeps=MAX_SWEEPS, progress_bar=False, verbose=False) -> "CAVIResult":
        """This fit continued with the sweep, without pruning, to the ELBO's own fixed point: a new
        result (``schedule == "sweep"``), for comparisons that need the exact optimum of the bound.

        The sweep starts from this fit's factors. For the models with a fast schedule (the ARD
        family, whose sweep updates q(w) first, from the other factors) every coefficient comes
        back into the model: q(w) becomes the full Gaussian at its optimum given this fit's
        q(alpha) (a frozen coefficient's q(alpha_k) is at the maximiser of (2) of
        :mod:`ppl_sbl.fast_ard`, its optimum in the restricted family), q(gamma), xi and the robust
        weights, and the sweeps go on from there, none pruned. Its fixed point is therefore the one
        of ``CAVI(model, schedule="sweep", prune=False)`` (``prune=True``, the sweep's default,
        freezes coefficients whose freeze cost is below ``prune_threshold`` nats and stops a little
        below it). For other guides the sweep continues from the fit's state as it is (coefficients
        the fit pruned stay frozen). A sweep fit is continued the same way (an unpruned, converged
        one stops after two sweeps, the fewest the stopping rule takes).

        Every step is a coordinate ascent step of the ELBO from this fit's state, so the bound never
        falls: ``elbo_trace`` starts at this fit's ELBO, then holds the ELBO after every sweep (so
        ``num_sweeps``, its length, is the sweeps made plus one), and ``refined_by`` is the rise,
        ``elbo - elbo_trace[0]`` (printed with ``verbose``).

        Parameters
        ----------
        tol : the sweep's stopping rule (:class:`CAVI`); default: this fit's ``tol``.
        max_sweeps : upper limit on the sweeps.
        progress_bar : as :class:`CAVI`'s.
        verbose : print one line: the ELBO before and after, the rise and the sweeps made.
        """
        cavi = CAVI(self.model, guide=self.guide_choice, tol=self.tol if tol is None else tol, max_sweeps=max_sweeps,
                    prune=False, progress_bar=progress_bar, schedule="sweep")
        start = time.perf_counter()
        state = self.state
        if self.guide_spec.fast is not None:
            template, _ = cavi.init(*self.args, **self.kwargs)  # every coefficient in the model

            def is_q(leaf):
                return isinstance(leaf, gaussian.ActiveGaussian)

            state = jax.tree.map(lambda mine, full: full if is_q(mine) else mine, state, template, is_leaf=is_q)
        result = cavi.run(*self.args, init_state=engine.strong(state), **self.kwargs)
        before = self.elbo
        rise = result.elbo - before
        if verbose:
            print(f"refine: ELBO {before:.6g} -> {result.elbo:.6g} (+{rise:.4g} nats) in {result.num_sweeps} "
                  f"sweeps{'' if result.converged else ', not converged'}")
        return dataclasses.replace(result, elbo_trace=np.concatenate([[before], result.elbo_trace]),
                                   seconds=time.perf_counter() - start, refined_by=float(rise))

    def __repr__(self):
        n_rel = int(np.sum(self.relevant))
        extra = f", elbo_exact={self.elbo_exact:.4f}" if self.guide_spec.elbo_exact is not None else ""
        name = getattr(self.model, "__module__", "") + "." + getattr(self.model, "__name__", "model")
        return (
            f"CAVIResult({name}: elbo={self.elbo:.4f}{extra}, "
            + (f"moves={self.num_moves}, " if self.schedule == "fast" else f"sweeps={self.num_sweeps}, ")
            + f"converged={self.converged}, relevant={n_rel}/{self.precision_ratio.shape[0]}, bound={self.bound})"
        )

