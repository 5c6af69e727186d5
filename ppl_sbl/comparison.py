"""Comparing fitted models: by ELBO with its parts, or by leave-one-out predictive density.

``compare(fits, by="elbo")`` ranks by the evidence lower bound and shows what it is made of
(:meth:`ppl_sbl.result.FitResult.elbo_parts`): the expected log-likelihood, the KL terms of the
weights and of the hyperparameters, and the hyperpriors' log normalising constants. Those
constants depend on neither the data nor the fit: with vague Gamma(a0, b0) priors each precision
contributes about -ln(1/a0) nats (-13.8 at a0 = 1e-6), so between models with different numbers
of vague hyperparameters the ELBO difference can be decided by the count alone (Bartlett's, or
Lindley's, paradox: the evidence of a model with an improper-limit prior is defined only up to
such constants).

``compare(fits, by="loo")`` ranks by the expected log pointwise predictive density of leave-one-out
cross-validation (Vehtari, Gelman & Gabry 2017), which does not depend on those constants: PSIS-LOO
from ArviZ (``az.loo``) on the pointwise log-likelihood of draws from each fit's q, or, for the
Gaussian-likelihood models that have one (``result.loo_exact()``: RVM and grid RVM regression, the
sequential SBL), the exact closed form. The table is ArviZ's (``az.compare``): ``elpd_loo``, its
standard error ``se``, the standard error of each difference ``dse``, and the stacking weights
(``weight``, Yao et al. 2018), the only weights this library reports.

``compare`` warns with :class:`ComparisonWarning` when a comparison does not mean what it seems to
(fits of different data; for ELBOs, different schedules, unnormalised likelihoods, and numbers of
vague hyperparameters whose constants decide the ranking), and says what to compare instead.
"""
from __future__ import annotations

import inspect
import itertools
import warnings

import numpy as np
import pandas as pd

from .priors import VAGUE_SHAPE

__all__ = ["compare", "ComparisonWarning", "loo", "exact_loo_data", "vague_hyperparameters"]


class ComparisonWarning(UserWarning):
    """A comparison of fits that does not mean what its table suggests (see :func:`compare`)."""


def _parts_columns(parts: dict) -> dict:
    """The table's summary of a fit's ELBO parts: ``log_lik``, ``-kl_latent`` (the sites without a
    hyperprior constant: the weights, latent points), ``-kl_hyper`` (the hyperparameters' sites),
    ``log_norm`` (the hyperpriors' log normalising constants), ``local_bound``."""
    columns = {"log_lik": parts.get("log_lik", np.nan), "-kl_latent": 0.0, "-kl_hyper": 0.0, "log_norm": 0.0,
               "local_bound": parts.get("local_bound", 0.0)}
    for name, value in parts.items():
        if name.startswith("-kl_"):
            hyper = f"log_norm_{name[4:]}" in parts
            columns["-kl_hyper" if hyper else "-kl_latent"] += value
        elif name.startswith("log_norm_"):
            columns["log_norm"] += value
        elif name not in ("log_lik", "local_bound"):
            columns["log_lik"] += value  # a data term a collapsed bound names on its own
    return columns


def _schedule(result) -> str:
    return getattr(result, "schedule", None) or result.inference


def vague_hyperparameters(result) -> int:
    """The number of hyperparameters of a fit with a vague prior: elements of latent Gamma sites of
    its program whose shape is below :data:`ppl_sbl.priors.VAGUE_SHAPE`. The program is traced
    once, in one compiled program that returns the Gamma sites' shapes."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro import handlers

    from .engine import call_compiled

    def at_one(site):  # any value: only the sites' prior parameters are read
        if site["type"] != "sample" or site["is_observed"]:
            return None
        return jnp.ones(site["fn"].shape(site["kwargs"].get("sample_shape", ())))

    def gamma_shapes(*args, **kwargs):
        program = handlers.substitute(result.program, substitute_fn=at_one)
        with numpyro.validation_enabled(False):  # only the sites' parameters are read
            trace = handlers.trace(handlers.seed(program, rng_seed=0)).get_trace(*args, **kwargs)
        shapes = {}
        for name, site in trace.items():
            if site["type"] != "sample" or site["is_observed"]:
                continue
            fn = site["fn"]
            while hasattr(fn, "base_dist"):
                fn = fn.base_dist
            if isinstance(fn, dist.Gamma):
                shapes[name] = jnp.broadcast_to(jnp.asarray(fn.concentration), jnp.shape(site["value"]))
        return shapes

    def eager():
        return gamma_shapes(*result.args, **result.kwargs)

    compiled = getattr(result, "compiled", None)
    shapes = eager() if compiled is None else call_compiled(compiled, "gamma shapes", gamma_shapes, (), result.args,
                                                             result.kwargs, fallback=eager)
    return int(sum(np.sum(np.asarray(shape) < VAGUE_SHAPE) for shape in shapes.values()))


def loo(result, *, num_samples: int = 1000, seed: int = 0, method: str = "auto"):
    """Leave-one-out ELPD of a fit as ArviZ's ``ELPDData`` (pointwise, ``loo_i``).

    method : ``"auto"`` (the exact closed form where the fit has one, ``result.loo_exact()``, else
    PSIS), ``"exact"`` or ``"psis"`` (``az.loo`` on ``num_samples`` draws from q; ``pareto_k``
    says where importance sampling is unreliable, k > 0.7).
    """
    import arviz as az

    if method not in ("auto", "exact", "psis"):
        raise ValueError(f"`method` must be 'auto', 'exact' or 'psis'; got {method!r}.")
    exact = getattr(result, "loo_exact", None)
    pointwise = exact() if (exact is not None and method != "psis") else None
    if pointwise is not None:
        return exact_loo_data(pointwise, _lppd(result))
    if method == "exact":
        raise ValueError(f"{type(result).__name__} of this model has no exact leave-one-out form; use "
                         "method='psis' (or 'auto').")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Estimated shape parameter of Pareto", category=UserWarning)
        return az.loo(_likelihood_draws(result, num_samples, seed), pointwise=True)


def _likelihood_draws(result, num_samples, seed):
    """InferenceData with the pointwise log-likelihood of draws from q: of only the sites the
    likelihood reads where the result can say which (``likelihood_sites``)."""
    from .result import inference_data

    sites = result.likelihood_sites() if hasattr(result, "likelihood_sites") else None
    if sites is None or "sites" not in inspect.signature(result.sample).parameters:
        return result.to_inference_data(num_samples=num_samples, seed=seed)
    return inference_data(result, num_samples=num_samples, seed=seed, sites=sites)


def _lppd(result):
    """sum_n ln p(t_n | t) at the fit, for p_loo = lppd - elpd_loo (NaN where the fit does not say)."""
    full = getattr(result, "log_predictive_density", None)
    return float(np.sum(full())) if full is not None else float("nan")


def exact_loo_data(loo_i, lppd=float("nan")):
    """ArviZ ``ELPDData`` for exact pointwise leave-one-out log predictive densities ``loo_i`` (N,):
    elpd_loo = sum_n loo_i, se = sqrt(N var(loo_i)) (as ``az.loo`` computes it), p_loo = lppd -
    elpd_loo, no Pareto k (NaN: nothing was importance-sampled)."""
    import xarray as xr
    from arviz.stats.stats_utils import ELPDData

    loo_i = np.asarray(loo_i, dtype=float)
    n = loo_i.shape[0]
    elpd = float(np.sum(loo_i))
    se = float(np.sqrt(n * np.var(loo_i)))
    index = ["elpd_loo", "se", "p_loo", "n_samples", "n_data_points", "warning", "loo_i", "pareto_k", "scale",
             "good_k"]
    values = [elpd, se, lppd - elpd, 0, n, False, xr.DataArray(loo_i, dims=["obs"]),
              xr.DataArray(np.full(n, np.nan), dims=["obs"]), "log", 0.7]
    return ELPDData(data=values, index=index)


def compare(results: dict, *, by: str = "elbo", sort: bool = True, num_samples: int = 1000, seed: int = 0,
            loo_method: str = "auto") -> pd.DataFrame:
    """Rank fitted models, in the table format of ``az.compare``.

    by="elbo"
        Columns: rank, elbo, d_elbo (to the best), the ELBO's parts summed by kind (``log_lik``,
        ``-kl_latent`` for the weights or latent points, ``-kl_hyper`` for the hyperparameters,
        ``log_norm`` for the hyperpriors' log normalising constants, ``local_bound``; they sum to
        elbo, see :meth:`ppl_sbl.result.FitResult.elbo_parts`; elbo - local_bound is the exact
        ELBO of q where the objective uses a local bound), n_vague (hyperparameters with vague
        priors, :func:`vague_hyperparameters`), n_relevant (basis functions in the fit's ``relevant`` mask, -1 where it has none),
        n_effective (sum_k 1 - E[alpha_k] Var[w_k]), schedule, converged, bound. No weights: the
        ELBO is a bound, and exp(elbo) normalised over models is a model probability only under
        equal priors, proper hyperpriors and tight bounds.
    by="loo"
        ``az.compare`` of each fit's leave-one-out ELPD (:func:`loo`): rank, elpd_loo, p_loo,
        elpd_diff, weight (stacking), se, dse, warning, scale, plus loo ("exact" or "psis"),
        pareto_k_max, elbo and n_relevant.

    Warns with :class:`ComparisonWarning` when the fits were fitted to different observed data
    (either ``by``), and, for ``by="elbo"``, when they were made by different schedules (the fast
    schedule's ELBO belongs to a restricted family: ``result.refine()``), when a likelihood is not
    normalised (the robust RVM's weighted likelihood) beside normalised ones, or when two fits differ in their number of
    vague hyperparameters and their ELBO difference is within the difference of their hyperpriors'
    constants.
    """
    if not results:
        raise ValueError("`results` is empty; pass a dict {name: fitted result}.")
    if by not in ("elbo", "loo"):
        raise ValueError(f"`by` must be 'elbo' or 'loo'; got {by!r}.")
    results = dict(results)
    summaries = {name: _summary(res) for name, res in results.items()} if by == "elbo" else None
    if by == "loo":
        sizes = {name: sum(int(np.size(v)) for v in res.observed.values()) for name, res in results.items()}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"compare(by='loo') needs fits of the same observations; the numbers of observed values "
                             f"differ: {sizes}. Fit every model to the same data.")
    _warn_if_incommensurable(results, by, summaries)
    if by == "loo":
        return _compare_loo(results, num_samples, seed, loo_method)
    for name, res in results.items():
        relevant = res.relevant
        summaries[name].update({
            "n_relevant": -1 if relevant is None else int(np.sum(relevant)),
            "n_effective": float(res.effective_parameters),
            "schedule": _schedule(res),
            "converged": bool(res.converged),
            "bound": res.bound,
        })
    table = pd.DataFrame.from_dict(summaries, orient="index")
    table.insert(1, "d_elbo", table["elbo"].max() - table["elbo"])
    if sort:
        table = table.sort_values("elbo", ascending=False)
    table.insert(0, "rank", np.argsort(np.argsort(-table["elbo"].to_numpy())))
    return table


def _summary(result) -> dict:
    """elbo, its parts summed by kind (:func:`_parts_columns`) and n_vague of one fit."""
    return {"elbo": float(result.elbo), **_parts_columns(result.elbo_parts()),
            "n_vague": vague_hyperparameters(result)}


def _compare_loo(results, num_samples, seed, method):
    import arviz as az

    elpd = {name: loo(res, num_samples=num_samples, seed=seed, method=method) for name, res in results.items()}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The scale is now log by default", category=UserWarning)
        warnings.filterwarnings("ignore", message="The inplace keyword")
        table = az.compare(elpd, ic="loo", method="stacking")
    table["loo"] = ["exact" if np.all(np.isnan(np.asarray(elpd[n]["pareto_k"]))) else "psis" for n in table.index]
    table["pareto_k_max"] = [float(np.nanmax(np.asarray(elpd[n]["pareto_k"])))
                             if table.loc[n, "loo"] == "psis" else np.nan for n in table.index]
    table["elbo"] = [float(results[n].elbo) for n in table.index]
    table["n_relevant"] = [-1 if results[n].relevant is None else int(np.sum(results[n].relevant))
                           for n in table.index]
    return table


def _observed(result):
    return {k: np.asarray(v) for k, v in result.observed.items()}


def _same_data(a, b):
    """The same observed values (site names may differ: ``t`` of the RVMs, ``y`` of the sequential SBL)."""
    if len(a) != len(b):
        return False
    pairs = zip(a.values(), b.values()) if len(a) == 1 else ((a.get(k), b.get(k)) for k in a)
    return all(x is not None and y is not None and x.shape == y.shape and np.array_equal(x, y) for x, y in pairs)


def _warn_if_incommensurable(results, by, summaries=None):
    """Warn (:class:`ComparisonWarning`) about what makes the fits incommensurable; ``summaries``
    ({name: :func:`_summary`}) for ``by="elbo"``."""
    names = list(results)
    notes = []
    observed = {n: _observed(results[n]) for n in names}
    groups = []
    for n in names:
        for g in groups:
            if _same_data(observed[g[0]], observed[n]):
                g.append(n)
                break
        else:
            groups.append([n])
    if len(groups) > 1:
        listed = "; ".join(", ".join(map(str, g)) for g in groups)
        notes.append(f"the fits were fitted to different observed data ({listed}"
                     + "): neither their ELBOs nor their ELPDs are comparable; fit every model to the same data.")
    if by == "elbo":
        schedules = {n: _schedule(results[n]) for n in names}
        if len(set(schedules.values())) > 1:
            notes.append("the fits were made by different schedules (" + ", ".join(f"{n}: {s}" for n, s in
                                                                                   schedules.items())
                         + "); a fast-schedule ELBO belongs to a restricted family (frozen coefficients) and lies "
                         "below the sweep's fixed point: call result.refine() on the fast fits, or compare by='loo'.")
        unnormalised = [n for n in names if not getattr(results[n], "likelihood_normalised", True)]
        if unnormalised and len(unnormalised) < len(names):
            notes.append(f"{', '.join(map(str, unnormalised))}: a likelihood that is not normalised over the data (the "
                         "robust RVM's weighted likelihood), so their ELBOs bound a different quantity from the "
                         "others' evidence: compare them by='loo' or by held-out error, and among themselves by ELBO.")
        vague = {n: summaries[n]["n_vague"] for n in names}
        pairs = []
        for a, b in itertools.combinations(names, 2):
            if vague[a] == vague[b]:
                continue
            gap = abs(results[a].elbo - results[b].elbo)
            constants = abs(summaries[a]["log_norm"] - summaries[b]["log_norm"])
            if gap <= constants:
                pairs.append(f"{a} ({vague[a]} vague) vs {b} ({vague[b]} vague): ELBO difference {gap:.1f} nats, "
                             f"hyperprior constants differ by {constants:.1f}")
        if pairs:
            notes.append("fits with different numbers of vague hyperparameters, whose ELBO difference is within the "
                         "difference of their hyperpriors' log normalising constants (" + "; ".join(pairs)
                         + "): the ranking is decided by those constants, not by the data; compare by='loo', or "
                         "give the hyperparameters proper priors (larger a0).")
    for note in notes:
        warnings.warn(f"compare: {note}", ComparisonWarning, stacklevel=3)
