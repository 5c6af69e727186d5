"""The interface every fitted result offers: :class:`FitResult`.

Three kinds of fit produce results: closed-form CAVI (:class:`ppl_sbl.inference.CAVIResult`),
sequential type-II maximum likelihood (:class:`ppl_sbl.models.sequential_sbl.SBLState`) and the
Bayesian GPLVM's collapsed bound (:class:`ppl_sbl.models.gplvm.GPLVMResult`). The ArviZ layer
(:mod:`ppl_sbl.arviz`), :func:`ppl_sbl.compare` and :func:`ppl_sbl.check_guide` read a result
only through this protocol. :class:`ResultMethods` supplies the members that follow from the
others (observed data, pointwise log-likelihood, InferenceData, the guide check).
"""
from __future__ import annotations

import functools
from typing import Callable, Optional, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.primitives import Messenger

__all__ = ["FitResult", "ResultMethods", "inference_data", "ordered_parts"]


@runtime_checkable
class FitResult(Protocol):
    """A fitted model, as the export, comparison and checking layers read it.

    program, args, kwargs
        The NumPyro program and the arguments it was fitted to: ``program(*args, **kwargs)``.
    guide
        A NumPyro guide with the program's signature, built from the fitted state.
    observed
        {observed site name: value}: the data the fit conditioned on.
    sample(key, num_samples) -> {site: (num_samples, ...)}
        Draws from the fitted posterior under the program's site names.
    log_likelihood(draws) -> {observed site: (num_samples, N)}
        Pointwise log-likelihood of every draw.
    elbo, elbo_exact, bound, elbo_trace, converged, inference
        The objective the fit maximised, the exact ELBO where ``elbo`` uses a local bound (else
        None), the local bound's name (``"none"`` without one), the objective along the fit,
        whether the fit reached its stopping rule, and how it was fitted (text).
    relevant, effective_parameters
        The mask of the basis functions (or latent dimensions) the fit keeps, and the number of
        well-determined parameters (NaN where the fit has no such count).
    elbo_parts() -> {name: float}
        The objective as named terms that sum to ``elbo`` (to rounding), each the term's
        contribution in nats:

        ``log_lik``
            E_q[ln p(observed | latents)], the expected log-likelihood, computed exactly
            (by quadrature where it is not Gaussian).
        ``-kl_<site>``
            Minus the KL divergence of q(site) from its prior given the other factors,
            E_q[ln p(site | parents)] + H[q(site)]; for a hyperparameter with a Gamma(a0, b0)
            prior of constant parameters, from the prior's kernel: E_q[(a0 - 1) ln x - b0 x] + H[q(x)].
        ``log_norm_<site>``
            sum (a0 ln b0 - ln Gamma(a0)) over the elements of such a hyperparameter: the log
            normalising constant of its prior, the same for every data set and every q. With
            vague priors it is about -ln(1/a0) per element (-13.8 nats at a0 = 1e-6): the Occam
            factor that decides comparisons of models with different numbers of hyperparameters.
        ``local_bound``
            elbo - elbo_exact <= 0 where the objective uses a local bound (Jaakkola-Jordan,
            log-sum): the nats the bounds lose against the exact ELBO of q.

        Type-II maximum likelihood and collapsed bounds name their own terms (see each result).
    """

    program: Callable
    args: tuple
    kwargs: dict
    guide: Callable
    observed: dict
    elbo: float
    elbo_exact: Optional[float]
    bound: str
    elbo_trace: np.ndarray
    converged: bool
    inference: str
    relevant: Optional[np.ndarray]
    effective_parameters: float

    def sample(self, key, num_samples: int = 1000) -> dict: ...

    def log_likelihood(self, draws: dict) -> dict: ...

    def elbo_parts(self) -> dict: ...


class ResultMethods:
    """The members of :class:`FitResult` that follow from ``program``, ``args``, ``kwargs``,
    ``guide`` and ``sample``, and the conveniences built on them."""

    @property
    def observed(self) -> dict:
        """{observed site: value}, read from a trace of the program on the fitted arguments: in one
        program with its latent sites at zero (the observed values do not depend on them), or op by
        op with them drawn from the guide where the program does not trace with array inputs."""
        from numpyro import handlers

        from .engine import call_compiled

        program = self.program

        def at_zero(site):
            if site["type"] != "sample" or site["is_observed"]:
                return None
            return jnp.zeros(site["fn"].shape(site["kwargs"].get("sample_shape", ())))

        def observed_sites(substituted, *args, **kwargs):
            trace = handlers.trace(handlers.seed(substituted, rng_seed=0)).get_trace(*args, **kwargs)
            return {name: site["value"] for name, site in trace.items() if site["type"] == "sample" and site["is_observed"]}

        def read(*args, **kwargs):
            return observed_sites(handlers.substitute(program, substitute_fn=at_zero), *args, **kwargs)

        def drawn():
            draw = handlers.trace(handlers.seed(self.guide, rng_seed=0)).get_trace(*self.args, **self.kwargs)
            latent = {name: site["value"] for name, site in draw.items() if site["type"] == "sample"}
            return observed_sites(handlers.substitute(program, data=latent), *self.args, **self.kwargs)

        values = call_compiled(self.compiled, "observed", read, (), self.args, self.kwargs, fallback=drawn)
        return {name: np.asarray(value) for name, value in values.items()}

    def log_likelihood(self, draws: dict) -> dict:
        """{observed site: (num_samples, N)} ln p(observed_n | draw) for every draw (NumPyro's
        ``log_likelihood`` on the program). ``draws`` need hold only the sites the likelihood reads
        (:meth:`likelihood_sites`); the program's other latent sites are then held at a point of their
        support, which the observed sites' densities do not depend on."""
        from numpyro.infer import log_likelihood

        from .engine import call_compiled

        program, draws = self.program, {k: jnp.asarray(v) for k, v in draws.items()}
        program = _fill_missing_latents(self, program, draws)
        values = call_compiled(self.compiled, "log likelihood", functools.partial(log_likelihood, program), (draws,),
                               self.args, self.kwargs,
                               fallback=lambda: log_likelihood(program, draws, *self.args, **self.kwargs))
        return {k: np.asarray(v) for k, v in values.items()}

    guide_is_mean_field = False  # True where the guide draws every site independently of the others

    def likelihood_sites(self) -> Optional[set]:
        """The latent sites whose draws the pointwise log-likelihood needs: the program's sample
        sites that the observed sites' densities depend on (NumPyro's ``get_dependencies``, through
        deterministic computations), and the guide's sites those are drawn given. None where the
        dependencies cannot be traced."""
        return self._likelihood_sites

    @functools.cached_property
    def _likelihood_sites(self):
        from numpyro.infer.inspect import get_dependencies

        try:
            model = get_dependencies(_unscaled(self.program), self.args, self.kwargs)["prior_dependencies"]
            guide = {} if self.guide_is_mean_field else get_dependencies(
                _unscaled(self.guide), self.args, self.kwargs)["prior_dependencies"]
        except Exception:  # a program that does not trace with NumPyro's provenance tracking
            return None
        observed = set(self.observed)
        needed = set().union(*(model[name] for name in observed if name in model)) - observed
        while True:
            more = needed.union(*(guide[name] for name in needed if name in guide))
            if more == needed:
                return frozenset(needed)
            needed = more

    def monte_carlo_elbo(self, num_particles: int = 4000, seed: int = 0) -> np.ndarray:
        """Per-particle values of NumPyro's ``Trace_ELBO`` on the program and the fitted guide
        (:func:`ppl_sbl.diagnostics.monte_carlo_elbo`): (num_particles,)."""
        from .diagnostics import monte_carlo_elbo

        return monte_carlo_elbo(self.program, self.guide, *self.args, num_particles=num_particles, seed=seed,
                                **self.kwargs)

    def compiled(self, name, fn):
        """``jax.jit(fn)``, kept with the fit's guide where it has one (``fn`` the same for every
        call with this name); a program that runs once per call (:data:`ppl_sbl.guide.ONCE`)."""
        from .guide import ONCE

        return jax.jit(fn, compiler_options=ONCE)

    def to_inference_data(self, num_samples: int = 1000, seed: int = 0):
        """An ArviZ ``InferenceData``: posterior draws, pointwise log-likelihood (for ``az.loo``),
        observed data and the objective's trace (see :func:`inference_data`)."""
        return inference_data(self, num_samples=num_samples, seed=seed)

    def check_guide(self, num_particles: int = 4000, seed: int = 0, num_se: float = 4.0, rtol: float = 1e-8):
        """:func:`ppl_sbl.check_guide` on this result."""
        from .diagnostics import check_guide

        return check_guide(self, num_particles=num_particles, seed=seed, num_se=num_se, rtol=rtol)


def ordered_parts(parts: dict) -> dict:
    """ELBO parts in reading order: ``log_lik``, ``local_bound``, then per site its ``-kl_`` term
    followed by its ``log_norm_`` term (the sites without one first, each group in the order of
    ``parts``), then the rest."""
    sites = []
    for name in parts:
        for prefix in ("-kl_", "log_norm_"):
            if name.startswith(prefix) and name[len(prefix):] not in sites:
                sites.append(name[len(prefix):])
    sites.sort(key=lambda s: f"log_norm_{s}" in parts)  # the sites without a hyperprior constant first
    order = ["log_lik", "local_bound"] + [f"{p}{s}" for s in sites for p in ("-kl_", "log_norm_")]
    ranked = [k for k in order if k in parts] + [k for k in parts if k not in order]
    return {k: parts[k] for k in ranked}


class _unscaled(Messenger):
    """The program without its log-density scales (``handlers.scale``): the pointwise
    log-likelihood is the observed sites' unscaled density, and NumPyro's abstract trace for
    ``get_dependencies`` cannot hold a scale that is itself a traced value."""

    def process_message(self, msg):
        msg["scale"] = None
        msg.pop("plate_to_scale", None)


def _fill_missing_latents(result, program, draws):
    """``program`` with the latent sites absent from ``draws`` held at a point of their support
    (``constraint.feasible_like``) where the likelihood does not read them (a ValueError names one
    it reads; where the dependencies cannot be traced NumPyro draws them from the prior)."""
    from numpyro import handlers

    needed = result.likelihood_sites()
    if needed is None:
        return program
    missing = sorted(needed - set(draws))
    if missing:
        raise ValueError(f"`draws` lack the sites {missing}, on which the observed sites' densities depend; draw "
                         "them (result.sample(key, n, sites=result.likelihood_sites())) or pass every latent site.")

    def placeholder(site):
        if site["type"] != "sample" or site["is_observed"] or site["name"] in draws:
            return None
        return point_in_support(site)

    return handlers.substitute(program, substitute_fn=placeholder)


class held(Messenger):
    """The sample sites outside ``keep`` drawn from a point mass at a point of their support
    (:func:`point_in_support`) instead of their distribution: the random keys are used as before,
    so the sites in ``keep`` get the draws they get without it."""

    def __init__(self, fn=None, keep=()):
        self.keep = frozenset(keep)
        super().__init__(fn)

    def process_message(self, msg):
        if msg["type"] == "sample" and not msg["is_observed"] and msg["name"] not in self.keep:
            msg["fn"] = dist.Delta(point_in_support(msg), event_dim=msg["fn"].event_dim)


def point_in_support(site):
    """A value of a sample site's shape in its distribution's support (``feasible_like``)."""
    shape = site["fn"].shape(site["kwargs"].get("sample_shape", ()))
    return site["fn"].support.feasible_like(jnp.zeros(shape))


def inference_data(result: FitResult, num_samples: int = 1000, seed: int = 0, sites=None):
    """ArviZ ``InferenceData`` of a fitted result.

    Groups: ``posterior`` (draws under the program's site names, one chain), ``log_likelihood``
    (pointwise ln p(t_n | draw), so ``az.loo`` works), ``observed_data``, and ``sample_stats``
    holding the objective's trace (dimension ``sweep``); the final ELBO, the bound and how the fit
    was made are in its attributes. ``sites``: draw only these latent sites (``result.sample``'s
    ``sites``; e.g. ``result.likelihood_sites()``, all that ``az.loo`` needs), else every site.
    """
    import arviz as az

    key = jax.random.PRNGKey(seed)
    draws = result.sample(key, num_samples) if sites is None else result.sample(key, num_samples, sites=sites)
    observed = result.observed
    return az.from_dict(
        posterior={k: np.asarray(v)[None] for k, v in draws.items() if k not in observed},
        log_likelihood={k: np.asarray(v)[None] for k, v in result.log_likelihood(draws).items()},
        observed_data=observed,
        sample_stats={"elbo_trace": np.asarray(result.elbo_trace)[None, None, :]},
        dims={"elbo_trace": ["sweep"]},
        attrs={"elbo": float(result.elbo), "bound": result.bound, "inference": result.inference},
    )
