"""Closed-form coordinate-ascent variational inference (CAVI) for ppl-sbl models.

A model is a plain NumPyro program. Its closed-form guide is a :class:`ClosedFormGuide`, a
NamedTuple of pure functions over an explicit state (the optax ``GradientTransformation``
pattern), attached to the model with :func:`closed_form_guide` so that ``CAVI(model)`` finds
it::

    data  = guide.prepare(*args, **kwargs)   # validated arrays and hyperparameters, once
    state = guide.init(data)                 # the start, at the data's scale
    state = guide.update(state, data)        # one full sweep of the paper's updates
    value = guide.elbo(state, data)          # the analytic objective the sweeps maximise
    fn    = guide.guide(state)               # a NumPyro guide with the model's signature

``CAVI.run`` jit-compiles one sweep once, iterates to the fixed point (the relative change of
the ELBO below ``tol`` and that of the state below sqrt(``tol``), see :class:`CAVI`), prunes
basis functions whose precision has diverged (see :mod:`ppl_sbl.gaussian`), and returns a
:class:`CAVIResult`. :func:`fit` is the same loop as a pure ``lax.while_loop``
(no pruning) that can be jitted and vmapped, e.g. over a grid of kernel widths.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from . import gaussian as _gauss
from .result import ResultMethods
from .saving import Saveable
from .validation import warn_unconverged

__all__ = ["ClosedFormGuide", "closed_form_guide", "find_guide", "resolve_guide", "CAVI", "CAVIResult", "fit", "fit_grid"]


class ClosedFormGuide(NamedTuple):
    """The closed-form mean-field guide of a model, as pure functions.

    prepare(*args, **kwargs) -> data
        Validate the model's arguments and precompute constants (a NamedTuple of arrays).
    init(data) -> state
        The default starting point, at the data's scale (E[gamma] = 10 / var(t), E[alpha_k] the
        unit-information prior h_k / N, xi = 1; derived guides alike, :mod:`ppl_sbl.derived`),
        so that rescaling Phi or t rescales the whole sequence of sweeps.
    update(state, data) -> state
        One sweep of the closed-form updates, local-bound parameters included.
    elbo(state, data) -> scalar
        The analytic objective that the sweeps maximise (with the local bound where one is
        used), every constant kept.
    guide(state) -> callable
        A NumPyro guide with the model's signature, for ``Predictive`` and ``Trace_ELBO``.
    predict(state, data, *new_args) -> array or tuple
        Predictions for new inputs (see each model).
    check_new(data, *new_args) -> new_args or None
        Validation of ``predict``'s new arguments (shapes against the fit, NaN), which needs
        their values: where given, results run it first and then ``predict`` compiled, which
        must then be a pure JAX function of already checked arguments; without it ``predict``
        runs as it is, op by op, and checks its own arguments.
    relevance(state, data) -> (prior_precision, data_precision)
        Per-coefficient precisions (M,) used by the relevance rule and by pruning.
    elbo_exact(state, data) -> scalar or None
        The true ELBO of q where ``elbo`` uses a local bound (by quadrature).
    bound : str
        ``"none"`` or the name of the local bound used by ``elbo``.
    observed : str
        The name of the observed site.
    bound_gaps(state, data) -> {bound name: nats} or None
        How much each local bound loses against its exact expectation under q (each >= 0, and
        together ``elbo_exact - elbo``); without it a result reports ``elbo_exact - elbo``
        under the name of ``bound``.
    extras(state, data) -> {name: array} or None
        Model-specific summaries of the fitted state, readable as attributes of the result
        (e.g. the robust RVM's ``result.outlier_score``).
    fast(*args, tol, max_passes, progress, **kwargs) -> (data, state, fit) or None
        The fast schedule (``CAVI(model, schedule="fast")``, :mod:`ppl_sbl.fast_ard`): the data,
        the guide's state for the restricted family it ends in, and its
        :class:`ppl_sbl.fast_ard.FastFit` (ELBO trace, active set, which of it the data support).
    """

    prepare: Callable
    init: Callable
    update: Callable
    elbo: Callable
    guide: Callable
    predict: Callable
    relevance: Callable
    elbo_exact: Optional[Callable] = None
    bound: str = "none"
    observed: str = "t"
    bound_gaps: Optional[Callable] = None
    extras: Optional[Callable] = None
    check_new: Optional[Callable] = None
    fast: Optional[Callable] = None


def closed_form_guide(guide):
    """Decorator attaching a closed-form guide to a NumPyro model function.

    ``guide`` is a :class:`ClosedFormGuide`, or a function of the model's arguments that returns
    one (for a model whose guide depends on a static option, e.g. the product or the sum rule
    of the grid RVM).
    """

    def attach(model):
        model.closed_form_guide = guide
        return model

    return attach


def resolve_guide(spec, args, kwargs) -> ClosedFormGuide:
    """The ClosedFormGuide for these model arguments (``spec`` is a guide or a selector)."""
    if isinstance(spec, ClosedFormGuide):
        return spec
    chosen = spec(*args, **kwargs)
    if not isinstance(chosen, ClosedFormGuide):
        raise TypeError(f"the guide selector returned {type(chosen).__name__}, not a ClosedFormGuide.")
    return chosen


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
        from .derived import derived_guide

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


def _active_gaussians(state):
    """Names of the state fields that hold an ActiveGaussian (the prunable factors)."""
    return [k for k, v in state._asdict().items() if isinstance(v, _gauss.ActiveGaussian)]


def _prune_state(state, data, guide, threshold):
    fields = _active_gaussians(state)
    if not fields:
        return state
    prior_precision, data_precision = guide.relevance(state, data)
    updates = {f: _gauss.prune(getattr(state, f), prior_precision, data_precision, threshold) for f in fields}
    return state._replace(**updates)


def _num_active(state):
    fields = _active_gaussians(state)
    return max((_gauss.num_active(getattr(state, f)) for f in fields), default=0)


def _compact_state(state, size):
    fields = _active_gaussians(state)
    return state._replace(**{f: _gauss.compact(getattr(state, f), size) for f in fields})


def _strong(tree):
    """The same pytree with every array leaf strongly typed: a weakly typed start (Python scalars
    broadcast by ``init``) would give the first sweeps other abstract types than the later ones,
    and each would compile the sweep again."""
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=jnp.result_type(x)) if hasattr(x, "dtype") else x, tree)


_SWEEPS = {}
_PRUNE_EVERY = 5  # sweeps between pruning checks (each check synchronises with the host) ...
_PRUNE_EVERY_MAX = 80  # ... doubling up to this while checks find nothing to prune


def _compiled(name, guide, fn):
    """A jitted function of a guide, compiled once (per shape) and reused across runs."""
    key = (name, id(guide))
    if key not in _SWEEPS:
        _SWEEPS[key] = (guide, jax.jit(fn))  # the guide is kept alive so its id stays unique
    return _SWEEPS[key][1]


def _summary(guide, state, data):
    """What the stopping rule watches of a state (:func:`_state_change`): the prior precision P_k
    and the data precision h_k of every coefficient (``guide.relevance``), and the share of w_k's
    precision that the data give it, c_k / (P_k + c_k), with c_k the data precision given the
    other coefficients where the state holds an ActiveGaussian (h_k otherwise)."""
    prior, data_precision = guide.relevance(state, data)
    fields = _active_gaussians(state)
    given = data_precision
    if fields:
        given = _gauss.conditional_data_precision(getattr(state, fields[0]), prior, data_precision)
    share = given / jnp.maximum(prior + given, 1e-300)
    return prior, data_precision, share


def _state_change(old, new):
    """The relative change of the state between two :func:`_summary` values: the largest, over
    the coefficients, of |Delta P_k| / P_k weighted by the data's share of w_k's precision (a
    coefficient the data do not determine can drift slowly towards an infinite precision without
    changing the fit) and of |Delta h_k| / h_k (the likelihood's factors: E[gamma], xi, the
    robust weights). Scale-free: rescaling Phi or t leaves it unchanged."""

    def relative(a, b):
        return jnp.abs(a - b) / jnp.maximum(jnp.maximum(jnp.abs(a), jnp.abs(b)), 1e-300)

    (p0, h0, _), (p1, h1, share) = old, new
    return jnp.maximum(jnp.max(share * relative(p1, p0), initial=0.0), jnp.max(relative(h1, h0), initial=0.0))


def _state_tol(tol):
    """The stopping rule's bound on :func:`_state_change`: sqrt(tol). A coordinate update's ELBO
    gain is the KL divergence by which it moves its factor, about (Delta ln x)^2 / 4 nats for a
    Gamma factor of shape 1/2, so a relative change of sqrt(tol) corresponds to the ELBO tolerance."""
    return jnp.sqrt(tol)


def _compiled_sweep(guide):
    """One sweep of updates followed by the ELBO of the updated state."""

    def sweep(state, data):
        state = guide.update(state, data)
        return state, guide.elbo(state, data)

    return _compiled("sweep", guide, sweep)


def _compiled_watched_sweep(guide):
    """One sweep of updates followed by the ELBO of the updated state and the state's change
    (:func:`_state_change`)."""

    def sweep(state, data):
        before = _summary(guide, state, data)
        state = guide.update(state, data)
        return state, guide.elbo(state, data), _state_change(before, _summary(guide, state, data))

    return _compiled("watched sweep", guide, sweep)


_CHUNK = 256  # sweeps one compiled call may run before it hands the trace back


def _converged(value, old, change, tol):
    """The stopping rule (see :class:`CAVI`): the ELBO changed by at most ``tol`` relative over the
    last sweep and the state by at most sqrt(``tol``) (:func:`_state_change`)."""
    return (jnp.abs(value - old) <= tol * jnp.abs(value)) & (change <= _state_tol(tol))


def _compiled_chunk(guide):
    """Up to ``n`` sweeps in one compiled ``lax.while_loop``, each followed by the ELBO of the
    updated state and its change (:func:`_state_change`); it stops after the sweep at which
    :meth:`CAVI.run` has something to decide: the fit converged (:func:`_converged`) or the ELBO
    is not finite, or a pruning check is due (``check_prune``, relative change at most
    ``prune_after``, sweep index at least ``wait``). Returns the state, the ELBO and the state's
    change after each sweep run (``_CHUNK`` slots each, NaN past ``count``) and ``count``.
    ``first`` is the index of the first sweep, ``previous`` the ELBO before it."""

    def chunk(state, data, previous, first, n, wait, tol, prune_after, check_prune):
        values = jnp.full((_CHUNK,), jnp.nan, dtype=jnp.float64)
        changes = jnp.full((_CHUNK,), jnp.nan, dtype=jnp.float64)

        def cond(carry):
            _, _, count, _, _, stop, _ = carry
            return (count < n) & ~stop

        def body(carry):
            state, old, count, values, changes, _, before = carry
            # see _fit_loop: the barrier keeps XLA from hoisting each use of the data separately
            state, d = jax.lax.optimization_barrier((state, data))
            state = guide.update(state, d)
            value = guide.elbo(state, d)
            after = _summary(guide, state, d)
            moved = _state_change(before, after)
            i = first + count
            converged = (i > 0) & _converged(value, old, moved, tol)
            prune_due = check_prune & (i > 0) & (jnp.abs(value - old) <= prune_after * jnp.abs(value)) & (i >= wait)
            stop = converged | ~jnp.isfinite(value) | prune_due
            return state, value, count + 1, values.at[count].set(value), changes.at[count].set(moved), stop, after

        carry = (state, jnp.asarray(previous, jnp.float64), jnp.asarray(0), values, changes, jnp.asarray(False),
                 _summary(guide, state, data))
        state, _, count, values, changes, _, _ = jax.lax.while_loop(cond, body, carry)
        return state, values, changes, count

    return _compiled("chunk", guide, chunk)


def _compiled_prune(guide):
    return _compiled("prune", guide, lambda state, data, threshold: _prune_state(state, data, guide, threshold))


def _compiled_relevance(guide):
    """(prior precision P_k, the precision the data give each coefficient: given the others where
    the state holds an ActiveGaussian): one compiled function per guide (run op by op, its few
    dozen small JAX operations took seconds per model, most of it per-operation compilation)."""

    def relevance(state, data):
        prior, data_precision = guide.relevance(state, data)
        fields = _active_gaussians(state)
        if fields:
            data_precision = _gauss.conditional_data_precision(getattr(state, fields[0]), prior, data_precision)
        return prior, data_precision

    return _compiled("relevance", guide, relevance)


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
        precision), so the default is small: 1e-9 (with 1e-7 the RVM on 1000 sinc points stops
        0.2 nats short, with visibly different predictions). The state's part makes the rule
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
    schedule : {"sweep", "fast"}
        ``"sweep"``: every coefficient's factors updated at every sweep (with ``prune``, frozen
        once their precision diverges). ``"fast"``: the fast variational schedule of the ARD
        family (:mod:`ppl_sbl.fast_ard`; models whose guide has one): from the empty model, one
        coefficient at a time, adds of the coefficients the data support and re-estimates of
        their precisions to the closed-form fixed point, the likelihood's factors updated
        between passes; ``tol`` is then the relative change of the ELBO over a pass and
        ``max_sweeps`` limits the passes. ``prune=False`` always means the plain sweep over every
        coefficient.
    """

    model: Callable
    guide: Any = None
    tol: float = 1e-9
    max_sweeps: int = 20000
    prune: bool = True
    prune_threshold: float = 1e-3
    prune_after: float = 1e-4
    progress_bar: Optional[bool] = None
    schedule: str = "sweep"

    def __post_init__(self):
        self.closed_form = find_guide(self.model, self.guide)
        if not (self.tol > 0):
            raise ValueError(f"`tol` must be > 0; got {self.tol!r}.")
        if int(self.max_sweeps) < 1:
            raise ValueError(f"`max_sweeps` must be >= 1; got {self.max_sweeps!r}.")
        if not (self.prune_threshold > 0):
            raise ValueError(f"`prune_threshold` must be > 0; got {self.prune_threshold!r}.")
        if self.schedule not in ("sweep", "fast"):
            raise ValueError(f"`schedule` must be 'sweep' or 'fast'; got {self.schedule!r}.")

    def run(self, *args, init_state=None, **kwargs) -> "CAVIResult":
        """Fit the guide to ``model(*args, **kwargs)`` and return a :class:`CAVIResult`."""
        g = resolve_guide(self.closed_form, args, kwargs)
        if self.schedule == "fast" and self.prune:
            if init_state is not None:
                raise ValueError("`init_state` applies to schedule='sweep'; the fast schedule starts from the "
                                 "empty model.")
            return self._run_fast(g, args, kwargs)
        data = _strong(g.prepare(*args, **kwargs))
        state = _strong(g.init(data) if init_state is None else init_state)
        threshold = jnp.asarray(self.prune_threshold, dtype=jnp.float64)
        do_prune = bool(self.prune) and bool(_active_gaussians(state))

        sweep = _compiled_watched_sweep(g)
        chunk = _compiled_chunk(g)
        tol = jnp.asarray(self.tol, dtype=jnp.float64)
        prune_after = jnp.asarray(self.prune_after, dtype=jnp.float64)
        trace, prune_events = [], []
        converged = False
        start = time.perf_counter()
        bar, bar_clock = None, None
        previous = -math.inf
        pending = None  # the state before the last prune, until the sweep after it is accepted
        wait, backoff, gap = 0, 10, _PRUNE_EVERY
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
                n = min(_CHUNK, int(self.max_sweeps) - i)
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
            if i > 1 and abs(value - step_before) <= self.tol * abs(value) and moves[-1] <= math.sqrt(self.tol):
                converged = True
                break
            # prune only once the transient of the first sweeps is over; the pruned state is handed
            # to the next sweep, so the recorded ELBO always belongs to an updated state
            allow = i > 1 and abs(value - step_before) <= self.prune_after * abs(value)
            previous = value
            if do_prune and allow and i - 1 >= wait:
                before = _num_active(state)
                pruned = _compiled_prune(g)(state, data, threshold)
                active = _num_active(pruned)
                # the next check: soon after a prune, further and further apart while none is found
                gap = _PRUNE_EVERY if active < before else min(2 * gap, _PRUNE_EVERY_MAX)
                wait = max(wait, i - 1 + gap)
                if active < before:
                    prune_events.append((i, active))
                    pending = state
                    total = pruned._asdict()[_active_gaussians(pruned)[0]].index.shape[0]
                    size = _gauss.bucket_size(active, total)
                    state = _compact_state(pruned, size) if size < total else pruned
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

    def _run_fast(self, g, args, kwargs):
        if g.fast is None:
            name = getattr(self.model, "__name__", repr(self.model))
            raise ValueError(f"model {name} has no fast schedule; use schedule='sweep'.")
        start = time.perf_counter()
        bar = [None]

        def progress(passes, moves, value, active):
            bar[0] = self._progress(bar[0], start, passes, 1, value)

        data, state, fit = g.fast(*args, tol=self.tol, max_passes=int(self.max_sweeps), progress=progress, **kwargs)
        if bar[0] is not None:
            bar[0].close()
        if not fit.converged:
            warn_unconverged(f"the fast schedule on {getattr(self.model, '__name__', 'the model')}", self.max_sweeps)
        M = fit.x.shape[0]
        relevant = np.zeros(M, dtype=bool)
        relevant[fit.active[fit.supported]] = True
        return CAVIResult(model=self.model, guide_spec=g, args=args, kwargs=kwargs, data=data, state=state,
                          elbo_trace=np.asarray(fit.elbo_trace), converged=bool(fit.converged), tol=self.tol,
                          seconds=time.perf_counter() - start, schedule="fast", relevant_mask=relevant,
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


def _fit_loop(guide, data, tol, max_sweeps, init_state, record):
    state = _strong(guide.init(data) if init_state is None else init_state)
    dtype = jnp.float64
    trace = jnp.full((int(max_sweeps) if record else 0,), jnp.nan, dtype)

    def body(carry):
        state, old, _, i, trace, before, _ = carry
        # the barrier (tied to the loop-varying state) hides from XLA that the data are loop-
        # invariant: otherwise it hoists each use of them (e.g. the same column gather of the
        # design) out of the loop separately, and the body can no longer share their products
        # (measured: three N x M x M products per sweep instead of one, 15-25% slower than the
        # same sweep dispatched from Python)
        state, d = jax.lax.optimization_barrier((state, data))
        state = guide.update(state, d)
        new = guide.elbo(state, d)
        after = _summary(guide, state, d)
        if record:
            trace = trace.at[i].set(new)
        return state, new, old, i + 1, trace, after, _state_change(before, after)

    def cond(carry):
        _, new, old, i, _, _, moved = carry
        return (i < max_sweeps) & ((i < 2) | ~_converged(new, old, moved, tol))

    carry = (state, jnp.asarray(-jnp.inf, dtype), jnp.asarray(-jnp.inf, dtype), jnp.asarray(0), trace,
             _summary(guide, state, data), jnp.asarray(jnp.inf, dtype))
    state, new, old, sweeps, trace, _, moved = jax.lax.while_loop(cond, body, carry)
    return state, new, sweeps, (sweeps >= 2) & _converged(new, old, moved, tol), trace


def fit(guide: ClosedFormGuide, data, *, tol=1e-9, max_sweeps=20000, init_state=None):
    """CAVI as one pure function (``lax.while_loop``, no pruning): jit- and vmap-able.

    Returns ``(state, elbo, num_sweeps, converged)``, ``converged`` by the stopping rule of
    :class:`CAVI` (the ELBO's and the state's change over the last sweep). Use it to fit many
    problems of the same shape at once, e.g. ``jax.vmap(lambda d: fit(guide, d))(stacked_data)``,
    or use :func:`fit_grid`, which does that for a list of designs and returns results.
    """
    return _fit_loop(guide, data, tol, max_sweeps, init_state, record=False)[:4]


def _stack(datas):
    structures = {jax.tree.structure(d) for d in datas}
    shapes = {tuple(jnp.shape(x) for x in jax.tree.leaves(d)) for d in datas}
    if len(structures) > 1 or len(shapes) > 1:
        raise ValueError(
            "the designs give prepared data of different structures or shapes (e.g. different "
            "numbers of columns, or a low-rank factor of data-dependent rank), so they cannot be "
            "fitted in one vmapped call; fit them one by one with CAVI(...).run."
        )
    return jax.tree.map(lambda *xs: jnp.stack(xs), *datas)


_GRID_FITS = {}


def _batched_map(fn, stacked, n, batch_size):
    """``jax.lax.map(fn, stacked, batch_size=batch_size)`` written out with explicit shapes (the
    library version infers a -1 dimension, which fails for leaves with a zero-size axis)."""
    if batch_size >= n:
        return jax.vmap(fn)(stacked)
    if batch_size == 1:
        return jax.lax.map(fn, stacked)
    full = (n // batch_size) * batch_size
    head = jax.tree.map(lambda x: x[:full].reshape((n // batch_size, batch_size) + x.shape[1:]), stacked)
    out = jax.lax.map(jax.vmap(fn), head)
    out = jax.tree.map(lambda x: x.reshape((full,) + x.shape[2:]), out)
    if full < n:
        tail = jax.vmap(fn)(jax.tree.map(lambda x: x[full:], stacked))
        out = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), out, tail)
    return out


def fit_grid(model, designs, *args, names=None, tol=1e-9, max_sweeps=20000, batch_size=None, guide=None,
             **kwargs) -> dict:
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
    """
    designs = list(designs)
    if not designs:
        raise ValueError("`designs` is empty; pass a list of design matrices of one shape.")
    names = list(range(len(designs))) if names is None else list(names)
    if len(names) != len(designs):
        raise ValueError(f"`names` has {len(names)} entries for {len(designs)} designs.")
    spec = find_guide(model, guide)
    guides = {id(resolve_guide(spec, (x,) + args, kwargs)) for x in designs}
    g = resolve_guide(spec, (designs[0],) + args, kwargs)
    if len(guides) > 1:
        raise ValueError("the designs select different guides; fit them one by one.")
    datas = [_strong(g.prepare(x, *args, **kwargs)) for x in designs]
    stacked = _stack(datas)
    if batch_size is None:
        batch_size = 1 if jax.default_backend() == "cpu" else len(designs)
    batch_size = max(1, min(int(batch_size), len(designs)))
    key = (id(g), float(tol), int(max_sweeps), batch_size)
    if key not in _GRID_FITS:
        def one(d):
            return _fit_loop(g, d, tol, max_sweeps, None, record=True)

        _GRID_FITS[key] = (g, jax.jit(lambda stacked: _batched_map(one, stacked, len(designs), batch_size)))
    start = time.perf_counter()
    states, _, sweeps, converged, traces = jax.block_until_ready(_GRID_FITS[key][1](stacked))
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
    relevant_mask : the fast schedule's relevant set (None for sweeps: ``relevant`` applies its
        rule)
    prune_events : list of (sweep, number of active coefficients after pruning at that sweep),
        for the prunes that were kept

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
    tol: float = 1e-9
    prune_events: list = dataclasses.field(default_factory=list)
    seconds: float = float("nan")
    relevance_ratio: float = 1.0
    schedule: str = "sweep"
    relevant_mask: Optional[np.ndarray] = None
    num_moves: Optional[int] = None
    guide_choice: Any = None

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
        return float(_compiled("elbo_exact", self.guide_spec, self.guide_spec.elbo_exact)(self.state, self.data))

    @property
    def bound_gaps(self) -> dict:
        """{local bound: nats it loses against the exact ELBO of q}; empty with no local bound."""
        spec = self.guide_spec
        if spec.bound_gaps is not None:
            gaps = _compiled("bound_gaps", spec, spec.bound_gaps)(self.state, self.data)
            return {k: float(v) for k, v in gaps.items()}
        if spec.elbo_exact is None:
            return {}
        return {spec.bound: self.elbo_exact - self.elbo}

    @property
    def precision_ratio(self) -> np.ndarray:
        """P_k / h_k: prior precision of each coefficient over the precision the data give it."""
        prior, data = _compiled_relevance(self.guide_spec)(self.state, self.data)
        return np.asarray(prior) / np.maximum(np.asarray(data), 1e-300)

    @property
    def effective_parameters(self) -> float:
        """sum_k (1 - E[alpha_k] Var_q[w_k]): how many coefficients the data determine (MacKay's
        gamma). With many overlapping basis functions the data can determine a few directions
        without determining any single coefficient; this count sees those directions."""
        if not _active_gaussians(self.state):
            return float("nan")
        prior, cond = _compiled_relevance(self.guide_spec)(self.state, self.data)
        return float(np.sum(np.asarray(cond) / (np.asarray(prior) + np.asarray(cond))))

    @property
    def relevant(self) -> np.ndarray:
        """Mask of relevant basis functions.

        Rule (scale-free): coefficient k is relevant when its prior precision E[alpha_k] is
        smaller than the precision the data alone give it, h_k (E[gamma] ||phi_k||^2 for
        Gaussian noise, 2 sum_n lambda(xi_n) phi_nk^2 with the JJ bound), i.e. when the data say
        more about w_k than the prior does. Rescaling a column of Phi or the targets leaves the
        mask unchanged. Pruned coefficients are never relevant.

        The fast schedule's results: the coefficients in the model that the data support
        (q_k^2 > s_k, :mod:`ppl_sbl.fast_ard`).
        """
        if self.relevant_mask is not None:
            return np.asarray(self.relevant_mask)
        return self.precision_ratio < self.relevance_ratio

    @property
    def relevance_indices(self) -> np.ndarray:
        """The indices of the relevant basis functions (``relevant``), ascending."""
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
        """The NumPyro guide built from the fitted state."""
        return self.guide_spec.guide(self.state)

    def predict(self, *new_args):
        """Predictions for new inputs (regression: mean and variance; classification: P(t=1))."""
        spec = self.guide_spec
        if spec.check_new is None:
            out = spec.predict(self.state, self.data, *new_args)
        else:  # checked with their values, then one compiled function (per guide and shape)
            out = _compiled("predict", spec, spec.predict)(self.state, self.data, *spec.check_new(self.data, *new_args))
        return jax.tree.map(np.asarray, out)

    def sample(self, key, num_samples: int = 1000) -> dict:
        """Draws from q under the model's site names: {site: (num_samples, ...)}."""
        from numpyro.infer import Predictive

        if isinstance(key, int):
            key = jax.random.PRNGKey(key)
        pred = Predictive(self.guide, num_samples=int(num_samples))
        return {k: np.asarray(v) for k, v in pred(key, *self.args, **self.kwargs).items()}

    def __getattr__(self, name):
        # model-specific summaries (ClosedFormGuide.extras), e.g. result.outlier_score
        spec = self.__dict__.get("guide_spec")
        if spec is not None and spec.extras is not None and not name.startswith("_"):
            extras = spec.extras(self.state, self.data)
            if name in extras:
                return np.asarray(extras[name])
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self):
        n_rel = int(np.sum(self.relevant))
        extra = f", elbo_exact={self.elbo_exact:.4f}" if self.guide_spec.elbo_exact is not None else ""
        name = getattr(self.model, "__module__", "") + "." + getattr(self.model, "__name__", "model")
        return (
            f"CAVIResult({name}: elbo={self.elbo:.4f}{extra}, "
            + (f"moves={self.num_moves}, " if self.schedule == "fast" else f"sweeps={self.num_sweeps}, ")
            + f"converged={self.converged}, relevant={n_rel}/{self.precision_ratio.shape[0]}, bound={self.bound})"
        )
