"""The ArviZ layer: InferenceData export, model comparison (:mod:`ppl_sbl.comparison`) and plots."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .comparison import ComparisonWarning, compare
from .result import FitResult, inference_data

__all__ = ["to_inference_data", "compare", "ComparisonWarning", "plot_elbo_trace", "plot_relevance"]


def to_inference_data(result: FitResult, num_samples: int = 1000, seed: int = 0):
    """ArviZ ``InferenceData`` of a fitted result (:func:`ppl_sbl.result.inference_data`).

    Groups: ``posterior`` (draws under the model's site names, one chain), ``log_likelihood``
    (pointwise ln p(t_n | draw), so ``az.loo`` works), ``observed_data``, and ``sample_stats``
    holding the ELBO trace (dimension ``sweep``) and the final ELBO in its attributes.
    """
    return inference_data(result, num_samples=num_samples, seed=seed)


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
    """How strongly the data support each basis function: q_k^2 / s_k (the result's
    ``support_ratio``, :mod:`ppl_sbl.relevance`), one point per coefficient, log scale.

    Above ``relevance_ratio`` (dashed line; 1 by default) the data support w_k: its ELBO in the
    model at its best precision exceeds its ELBO out of it. Points are coloured by the result's
    ``relevant``; coefficients that share one precision (``groups=``) are judged as a group as a
    whole, so relevant points of a supported group can lie below the line and irrelevant ones
    above it. Coefficients outside the model (q_k = 0: pruned or frozen) and those whose s_k the fit
    does not resolve (``support_ratio`` 0, :data:`ppl_sbl.relevance.RESOLVED_SHARE`) are drawn at
    the bottom of the axis, as triangles. For a grid model (one precision per index of each table axis) this
    draws :func:`plot_grid_relevance` instead (``ax`` is then a sequence of axes, one per panel).
    """
    import matplotlib.pyplot as plt

    if _is_grid(result):
        return plot_grid_relevance(result, axes=ax, **kwargs)

    ax = ax or plt.gca()
    ratio = np.asarray(result.support_ratio, dtype=np.float64)
    relevant = np.asarray(result.relevant)
    k = np.arange(len(ratio))
    shown = ratio > 0
    finite = ratio[shown & np.isfinite(ratio)]
    floor = 0.1 * min(float(np.min(finite)) if finite.size else 1.0, result.relevance_ratio)
    top = 10.0 * max(float(np.max(finite)) if finite.size else 1.0, result.relevance_ratio)
    ratio = np.clip(ratio, floor, top)
    for mask, style in ((~relevant & shown, dict(marker="o", color="0.7", ms=3, label="not relevant")),
                        (relevant, dict(marker="o", color="C3", ms=5, label="relevant")),
                        (~shown, dict(marker="v", color="0.7", ms=3, label="out of the model or s unresolved"))):
        if np.any(mask):
            ax.semilogy(k[mask], ratio[mask], ls="", **{**style, **kwargs})
    ax.axhline(result.relevance_ratio, ls="--", color="k", lw=1)
    ax.set_xlabel("basis function k")
    ax.set_ylabel("q_k^2 / s_k")
    ax.legend()
    return ax


def _is_grid(result):
    state = getattr(result, "state", None)
    return isinstance(getattr(state, "shapes", None), tuple) and hasattr(result.data, "table_shape")


def plot_grid_relevance(result, axes=None, *, axis_labels=None, image=True):
    """Relevance of each table axis of a grid model, as in the grid RVM paper's Fig. 1 (b, c).

    One bar chart per axis of the relevance 1 / E[precision] of every index (log scale; a
    longer bar is a more informative row, column, ...), and for two axes an image of the
    relevance of every cell, 1 / E[precision of w_ij] (alpha_i beta_j for the p-grid,
    alpha_i + beta_j for the s-grid; darker is more relevant).

    Returns the axes used (K bars, plus the image for K = 2).
    """
    import matplotlib.pyplot as plt

    if not _is_grid(result):
        raise ValueError("`result` is not a fitted grid model; use plot_relevance for flat models.")
    state, data = result.state, result.data
    shape = tuple(data.table_shape)
    K = len(shape)
    show_image = bool(image) and K == 2
    n_panels = K + int(show_image)
    if axes is None:
        _, axes = plt.subplots(1, n_panels, figsize=(4 * n_panels, 3.2))
    axes = np.atleast_1d(axes)
    if len(axes) < n_panels:
        raise ValueError(f"`axes` must hold {n_panels} axes (one per table axis{' and the image' if show_image else ''}).")
    names = axis_labels or (("row (alpha)", "column (beta)") if K == 2 else tuple(f"axis {k}" for k in range(K)))
    for k in range(K):
        relevance = np.asarray(state.rates[k]) / np.asarray(state.shapes[k])  # 1 / E[precision]
        axes[k].bar(np.arange(shape[k]), relevance, color="C0")
        axes[k].set_yscale("log")
        axes[k].set_xlabel(f"{names[k]} index")
        axes[k].set_ylabel("1 / E[precision]")
        axes[k].set_title(f"relevance per {names[k]}")
    if show_image:
        prior, _ = result.guide_spec.relevance(state, data)
        cells = -np.log10(np.asarray(prior).reshape(shape))
        im = axes[K].imshow(cells, cmap="Greys", aspect="auto")
        axes[K].set_xlabel(f"{names[1]} index")
        axes[K].set_ylabel(f"{names[0]} index")
        axes[K].set_title(f"log10 relevance of each cell ({data.kind}-grid)")
        plt.colorbar(im, ax=axes[K])
    return axes
