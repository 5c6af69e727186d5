"""The guide protocol: a model's closed-form mean-field guide as pure functions.

A model is a plain NumPyro program. Its closed-form guide is a :class:`ClosedFormGuide`, pure
functions over an explicit state (the optax ``GradientTransformation`` pattern), attached to the
model with :func:`closed_form_guide` so that ``CAVI(model)`` finds it::

    data  = guide.prepare(*args, **kwargs)   # validated arrays and hyperparameters, once
    state = guide.init(data)                 # the start, at the data's scale
    state = guide.update(state, data)        # one full sweep of the paper's updates
    value = guide.elbo(state, data)          # the analytic objective the sweeps maximise
    fn    = guide.guide(state)               # a NumPyro guide with the model's signature

The :class:`typing.Protocol` types below name each function's signature.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Protocol

import jax

__all__ = ["ClosedFormGuide", "closed_form_guide", "resolve_guide", "Prepare", "Init", "Update", "Elbo",
           "BuildGuide", "Predict", "CheckNew", "Relevance", "Summaries", "FastSchedule"]

Data = Any  # a NamedTuple of arrays: the prepared arguments
State = Any  # a NamedTuple of arrays: the variational parameters


class Prepare(Protocol):
    def __call__(self, *args, **kwargs) -> Data: ...


class Init(Protocol):
    def __call__(self, data: Data) -> State: ...


class Update(Protocol):
    def __call__(self, state: State, data: Data) -> State: ...


class Elbo(Protocol):
    def __call__(self, state: State, data: Data) -> jax.Array: ...


class BuildGuide(Protocol):
    def __call__(self, state: State) -> Callable: ...


class Predict(Protocol):
    def __call__(self, state: State, data: Data, *new_args) -> Any: ...


class CheckNew(Protocol):
    def __call__(self, data: Data, *new_args) -> tuple: ...


class Relevance(Protocol):
    def __call__(self, state: State, data: Data) -> tuple[jax.Array, jax.Array]: ...


class Summaries(Protocol):
    """``bound_gaps`` and ``extras``: named scalars or arrays of a fitted state."""

    def __call__(self, state: State, data: Data) -> dict: ...


class FastSchedule(Protocol):
    def __call__(self, *args, tol: float, max_passes: int, progress: Optional[Callable], **kwargs) -> tuple: ...


@dataclasses.dataclass(frozen=True, eq=False)
class ClosedFormGuide:
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
        Per-coefficient precisions (M,) used by pruning, the stopping rule and
        ``precision_ratio``; the prior precision also by the relevance rule (below).
    coefficients(state, data) -> (q, prior_precision, groups) or None
        The Gaussian factor whose coefficients the result's ``relevant`` judges
        (:mod:`ppl_sbl.relevance`): q an :class:`ppl_sbl.gaussian.ActiveGaussian` (or a tuple of
        them, one per output, e.g. the multiclass RVM's classes), the prior precisions E[P_k] of
        its coefficients ((M,), or (M, C) for C outputs), and groups, (M,) integer labels of the
        coefficients that share one prior precision (judged as a whole), or None (each its own).
        Without it: the state's first ActiveGaussian field, ``relevance``'s prior precision and
        ``data.groups`` where ``data`` has it (e.g. :class:`ppl_sbl.models.ard.RVMData`).
    elbo_exact(state, data) -> scalar or None
        The true ELBO of q where ``elbo`` uses a local bound (by quadrature).
    elbo_parts(state, data) -> {name: scalar} or None
        The ELBO of q as a sum of named terms, each an exact expectation (no local bound), in the
        naming of :meth:`ppl_sbl.result.FitResult.elbo_parts`: they sum to ``elbo_exact`` where
        ``elbo`` uses a local bound, else to ``elbo``. The result adds ``local_bound``.
    loo(state, data) -> (loo, lpd) or None
        For a Gaussian likelihood: the exact leave-one-out log predictive density of every point,
        ln p(t_n | t_-n), and the fitted one, ln p(t_n | t), each (N,), the hyperparameters held at
        their fitted values (:func:`ppl_sbl.likelihoods.gaussian_loo`); :func:`ppl_sbl.compare`
        uses it for ``by="loo"`` in place of PSIS.
    likelihood_normalised : bool
        False where the likelihood is not a normalised density of the data (the robust RVM's
        likelihood terms raised to weights): its ELBO is not a bound on the evidence.
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
    unit_offset(data) -> scalar or None
        The part of the ELBO that depends on the units of the targets, -N ln s for targets
        measured in units of s (Gaussian likelihoods: s = sqrt(f0 / e0), the scale at which the
        noise prior's mean is 1; :mod:`ppl_sbl.priors`). The stopping rules compare ELBO changes
        with |ELBO - unit_offset|, a unit-free size, so that rescaling the data does not change
        when a fit stops. None: 0 (labels, which have no units).
    fast(*args, tol, max_passes, progress, vague_only, **kwargs) -> (data, state, fit) or None
        The fast schedule (``CAVI(model, schedule="fast")``, and ``CAVI(model)``'s default
        ``schedule="auto"``, :mod:`ppl_sbl.fast_ard`): the data, the guide's state for the
        restricted family it ends in, and its :class:`ppl_sbl.fast_ard.FastFit` (ELBO trace,
        active set, which of it the data support). For arguments it does not take (e.g. the
        RVM's ``groups``; with ``vague_only``, which the default schedule passes, hyperpriors
        that are not vague) it raises :class:`ppl_sbl.fast_ard.NotApplicable` before any fitting
        work, and the default schedule runs the sweep instead.
    fast_plan(*args, tol, max_passes, progress, vague_only, **kwargs) -> ppl_sbl.fast_ard.Plan or None
        ``fast`` set up but not run (``fast`` is the plan, run): :func:`ppl_sbl.fit_grid` runs the
        plans of many fits in one compiled program (``schedule="fast"``).

    The guide owns the compiled forms of its functions (:meth:`compiled`): every run of the
    same guide on arguments of the same shapes reuses them.
    """

    prepare: Prepare
    init: Init
    update: Update
    elbo: Elbo
    guide: BuildGuide
    predict: Predict
    relevance: Relevance
    elbo_exact: Optional[Elbo] = None
    elbo_parts: Optional[Summaries] = None
    loo: Optional[Callable] = None
    likelihood_normalised: bool = True
    bound: str = "none"
    observed: str = "t"
    bound_gaps: Optional[Summaries] = None
    extras: Optional[Summaries] = None
    check_new: Optional[CheckNew] = None
    fast: Optional[FastSchedule] = None
    fast_plan: Optional[Callable] = None
    unit_offset: Optional[Callable] = None
    coefficients: Optional[Callable] = None

    def __post_init__(self):
        object.__setattr__(self, "_compiled", {})

    def compiled(self, name, fn: Callable, once: bool = False) -> Callable:
        """``jax.jit(fn)``, made once per ``name`` and kept by this guide (``fn`` must be a function
        of this guide alone, the same for every call with this name); ``fn`` itself where it is
        compiled already (a jit of it would compile its program a second time). ``once``: a
        program that runs once per call of a result's method (its ELBO, parts, predictions,
        draws), compiled with :data:`ONCE`."""
        if name not in self._compiled:
            if hasattr(fn, "lower"):
                self._compiled[name] = fn
            else:
                self._compiled[name] = jax.jit(fn, compiler_options=ONCE) if once else jax.jit(fn)
        return self._compiled[name]

    def replace(self, **changes) -> "ClosedFormGuide":
        """A copy with some functions or fields replaced (its own compiled functions)."""
        return dataclasses.replace(self, **changes)

    # pickling and :mod:`ppl_sbl.saving` store the fields, not the compiled functions
    def __getstate__(self):
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def __setstate__(self, fields):
        for f in dataclasses.fields(self):  # a field added since the guide was stored: its default
            if f.name not in fields and f.default is not dataclasses.MISSING:
                object.__setattr__(self, f.name, f.default)
        for name, value in fields.items():
            object.__setattr__(self, name, value)
        self.__post_init__()


ONCE = {"xla_backend_optimization_level": 0}
"""XLA options of the programs that run once per call (a result's ELBO and its parts, predictions,
draws, the analysis of a derived guide): LLVM without its optimisation passes compiles them in
about half the time; the arithmetic is the same (no fast-math either way), only the machine code is
slower, which programs made of a few large operations that run once do not notice."""


def built_guide(build, state, *args, **kwargs):
    """The NumPyro guide ``build(state)`` (a :class:`ClosedFormGuide`'s ``guide``) called on the
    program's arguments: ``functools.partial(built_guide, build, state)`` is the guide of a fit."""
    return build(state)(*args, **kwargs)


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
