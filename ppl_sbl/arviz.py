"""The ArviZ layer: InferenceData export, ELBO comparison tables and plots."""
from __future__ import annotations

import jax
import numpy as np
import pandas as pd

__all__ = ["to_inference_data", "compare", "plot_elbo_trace", "plot_relevance"]


def to_inference_data(result, num_samples: int = 1000, seed: int = 0):
    """ArviZ ``InferenceData`` of a fitted result.

    Groups: ``posterior`` (draws from q under the model's site names, one chain),
    ``log_likelihood`` (pointwise ln p(t_n | draw), so ``az.loo`` works), ``observed_data``,
    and ``sample_stats`` holding the ELBO trace (dimension ``sweep``) and the final ELBO in its
    attributes.
    """
    import arviz as az
    from numpyro.infer import log_likelihood

    key = jax.random.PRNGKey(seed)
    draws = result.sample(key, num_samples)
    observed = result.guide_spec.observed
    loglik = log_likelihood(result.model, draws, *result.args, **result.kwargs)
    data = result.data
    obs_value = np.asarray(getattr(data, observed))
    idata = az.from_dict(
        posterior={k: v[None] for k, v in draws.items() if k != observed},
        log_likelihood={k: np.asarray(v)[None] for k, v in loglik.items()},
        observed_data={observed: obs_value},
        sample_stats={"elbo_trace": np.asarray(result.elbo_trace)[None, None, :]},
        dims={"elbo_trace": ["sweep"]},
        attrs={"elbo": result.elbo, "bound": result.bound, "inference": "closed-form CAVI"},
    )
    return idata


def compare(results: dict, *, sort: bool = True) -> pd.DataFrame:
    """Rank fitted models by ELBO, in the style of ``az.compare``.

    Columns: rank, elbo, elbo_exact (NaN where the ELBO uses no local bound), d_elbo (difference
    to the best), weight (proportional to exp(elbo), i.e. the approximate posterior model
    probability under equal prior odds), n_relevant (the result's ``relevant`` mask), n_effective
    (the number of well-determined parameters, sum_k 1 - E[alpha_k] Var[w_k]), converged, bound.
    """
    if not results:
        raise ValueError("`results` is empty; pass a dict {name: fitted result}.")
    rows = {}
    for name, res in results.items():
        exact = getattr(res, "elbo_exact", None)
        relevant = getattr(res, "relevant", None)
        rows[name] = {
            "elbo": float(res.elbo),
            "elbo_exact": np.nan if exact is None else float(exact),
            "n_relevant": -1 if relevant is None else int(np.sum(relevant)),
            "n_effective": float(getattr(res, "effective_parameters", np.nan)),
            "converged": bool(getattr(res, "converged", True)),
            "bound": getattr(res, "bound", "none"),
        }
    table = pd.DataFrame.from_dict(rows, orient="index")
    best = table["elbo"].max()
    table["d_elbo"] = best - table["elbo"]
    w = np.exp(table["elbo"] - best)
    table["weight"] = w / w.sum()
    if sort:
        table = table.sort_values("elbo", ascending=False)
    table.insert(0, "rank", np.argsort(np.argsort(-table["elbo"].to_numpy())))
    return table[["rank", "elbo", "elbo_exact", "d_elbo", "weight", "n_relevant", "n_effective", "converged", "bound"]]


def plot_elbo_trace(result, ax=None, **kwargs):
    """The ELBO after every sweep (it must never decrease)."""
    import matplotlib.pyplot as plt

    ax = ax or plt.gca()
    trace = np.asarray(result.elbo_trace)
    ax.plot(np.arange(1, len(trace) + 1), trace, **kwargs)
    ax.set_xlabel("sweep")
    ax.set_ylabel("ELBO")
    ax.set_title("ELBO trace")
    return ax


def plot_relevance(result, ax=None, **kwargs):
    """Prior over data precision E[alpha_k] / h_k per basis function (log scale).

    Below 1 (dashed line) the data determine w_k more than the prior: the relevant ones.
    """
    import matplotlib.pyplot as plt

    ax = ax or plt.gca()
    ratio = np.asarray(result.precision_ratio)
    relevant = np.asarray(result.relevant)
    k = np.arange(len(ratio))
    ax.semilogy(k[~relevant], ratio[~relevant], "o", color="0.7", ms=3, label="irrelevant", **kwargs)
    ax.semilogy(k[relevant], ratio[relevant], "o", color="C3", ms=5, label="relevant", **kwargs)
    ax.axhline(result.relevance_ratio, ls="--", color="k", lw=1)
    ax.set_xlabel("basis function k")
    ax.set_ylabel("E[alpha_k] / h_k")
    ax.legend()
    return ax
