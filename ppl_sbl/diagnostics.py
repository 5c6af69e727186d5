"""``check_guide``: does the analytic ELBO of a fitted guide match NumPyro's own estimate?

NumPyro's ``Trace_ELBO`` draws from the guide built from the fitted state, replays the model,
and averages ln p(t, z) - ln q(z). With no local bound the analytic ELBO must equal that
average up to Monte Carlo error; with a local bound (Jaakkola-Jordan) the analytic objective is
a lower bound on it, and the quadrature ``elbo_exact`` must equal it. An edited model whose
guide no longer matches fails this check.
"""
from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import numpy as np
from numpyro.infer import Trace_ELBO

from . import engine

__all__ = ["GuideCheck", "check_guide", "monte_carlo_elbo", "monte_carlo_sites"]


class GuideCheck(NamedTuple):
    """Result of :func:`check_guide`.

    elbo: the analytic objective; elbo_exact: the quadrature ELBO (local bounds only);
    monte_carlo: NumPyro's Trace_ELBO estimate; standard_error: its standard error;
    bound: the local bound in use; passed: the verdict; message: what was compared.
    """

    elbo: float
    elbo_exact: Optional[float]
    monte_carlo: float
    standard_error: float
    num_particles: int
    bound: str
    passed: bool
    message: str

    def __repr__(self):
        return f"GuideCheck(passed={self.passed}: {self.message})"


def monte_carlo_elbo(model, guide, *args, num_particles=4000, seed=0, **kwargs):
    """Per-particle ``Trace_ELBO`` values (one particle each) of ``model``/``guide``: (num_particles,).

    Computed in one program (:func:`per_particle`) whose inputs are the keys, the array leaves of
    (args, kwargs) and, for a ``functools.partial`` guide, the array leaves of its bound arguments."""
    keys = jax.random.split(jax.random.PRNGKey(seed), int(num_particles))
    return np.asarray(per_particle(_elbo_particle, model, guide, args, kwargs, keys))


def monte_carlo_sites(model, guide, *args, num_particles=2000, seed=0, **kwargs):
    """Per-site, per-particle Monte Carlo terms of the ELBO: {site: (num_particles,)}.

    For a draw z ~ q (the guide's trace) replayed in the model: for an observed site its scaled
    ln p(x | z), for a latent site its scaled ln p(z_site | parents) - ln q(z_site). The sites'
    values sum to NumPyro's ``Trace_ELBO`` particle; their means estimate the ELBO's parts
    (:meth:`ppl_sbl.result.FitResult.elbo_parts`: ``log_lik`` the observed sites, ``-kl_<site>``
    plus ``log_norm_<site>`` a latent site). Computed as :func:`monte_carlo_elbo` is.
    """
    keys = jax.random.split(jax.random.PRNGKey(seed), int(num_particles))
    return {k: np.asarray(v) for k, v in per_particle(_site_terms, model, guide, args, kwargs, keys).items()}


def _elbo_particle(key, model, guide, args, kwargs):
    return -Trace_ELBO(num_particles=1).loss(key, {}, model, guide, *args, **kwargs)


def _site_terms(key, model, guide, args, kwargs):
    from numpyro import handlers

    k_guide, k_model = jax.random.split(key)
    guide_trace = handlers.trace(handlers.seed(guide, k_guide)).get_trace(*args, **kwargs)
    model_trace = handlers.trace(handlers.replay(handlers.seed(model, k_model), guide_trace)).get_trace(
        *args, **kwargs)
    terms = {}
    for name, site in model_trace.items():
        if site["type"] != "sample":
            continue
        value = _scaled_log_prob(site)
        if not site["is_observed"]:
            value = value - _scaled_log_prob(guide_trace[name])
        terms[name] = value
    return terms


def per_particle(one, model, guide, args, kwargs, keys):
    """``one(key, model, guide, args, kwargs)`` for every key (vmapped), in one compiled program.

    The program's inputs are ``keys``, the array leaves of (args, kwargs)
    (:func:`ppl_sbl.engine.array_inputs`) and, where ``guide`` is a ``functools.partial`` (or
    ``jax.tree_util.Partial``), the array leaves of the arguments it binds; the guide is rebuilt in
    the program as a ``functools.partial`` of the same function. The program is compiled for this
    call (a model may read numbers from outside its arguments that change between calls); where it
    does not trace with array inputs (a model or guide that needs concrete values) the vmapped
    ``one`` is compiled with everything as constants.
    """
    if isinstance(guide, functools.partial):
        func, bound = guide.func, (guide.args, dict(guide.keywords))
    else:
        func, bound = guide, None
    arrays, rebuild, _ = engine.array_inputs((args, bound), kwargs)

    def program(keys, arrays):
        (a, b), kw = rebuild(arrays)
        g = func if b is None else functools.partial(func, *b[0], **b[1])
        return jax.vmap(lambda key: one(key, model, g, a, kw))(keys)

    try:
        return jax.jit(program)(keys, arrays)
    except Exception:  # does not trace with array inputs: everything as constants
        return jax.jit(jax.vmap(lambda key: one(key, model, guide, args, kwargs)))(keys)


def _scaled_log_prob(site):
    log_prob = site["fn"].log_prob(site["value"])
    if site.get("scale") is not None:
        log_prob = site["scale"] * log_prob
    return log_prob.sum()


def check_guide(result, num_particles: int = 4000, seed: int = 0, num_se: float = 4.0, rtol: float = 1e-8):
    """Compare a fitted result's analytic ELBO with NumPyro's Monte Carlo ``Trace_ELBO``.

    Verdict: with no local bound, |elbo - MC| <= num_se * SE (+ rtol |elbo| for guides with no
    Monte Carlo spread); with a local bound, elbo <= MC + num_se * SE and
    |elbo_exact - MC| <= num_se * SE.
    """
    if hasattr(result, "monte_carlo_elbo"):  # the result's own (kept compiled where it can be)
        values = np.asarray(result.monte_carlo_elbo(num_particles=num_particles, seed=seed))
    else:
        values = monte_carlo_elbo(
            result.program, result.guide, *result.args, num_particles=num_particles, seed=seed, **result.kwargs
        )
    elbo = result.elbo
    bad = int(np.sum(~np.isfinite(values)))
    if bad:
        message = (
            f"{bad} of {len(values)} Monte Carlo particles are not finite: a draw of q has zero "
            "density under q or the model (a Gamma factor with a tiny shape, such as a prior shape of "
            "1e-6 left unchanged by the updates, draws exact zeros in float64); check the guide on "
            "the same problem with larger prior shapes."
        )
        return GuideCheck(elbo, result.elbo_exact, float("nan"), float("nan"), int(num_particles), result.bound,
                          False, message)
    mc = float(np.mean(values))
    se = float(np.std(values, ddof=1) / np.sqrt(len(values)))
    slack = num_se * se + rtol * max(1.0, abs(elbo))
    bound = result.bound
    exact = result.elbo_exact
    if bound == "none":
        passed = abs(elbo - mc) <= slack
        message = f"analytic {elbo:.4f} vs Monte Carlo {mc:.4f} +- {se:.4f} (z = {(elbo - mc) / max(se, 1e-300):.2f})"
    else:
        below = elbo <= mc + slack
        equal = exact is not None and abs(exact - mc) <= slack
        passed = below and equal
        message = (
            f"{bound} bound {elbo:.4f} <= Monte Carlo {mc:.4f} +- {se:.4f}: {below}; "
            f"quadrature ELBO {exact:.4f} equals it: {equal}"
        )
    return GuideCheck(elbo, exact, mc, se, int(num_particles), bound, bool(passed), message)
