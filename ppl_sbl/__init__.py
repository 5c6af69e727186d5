"""ppl-sbl: sparse Bayesian learning as NumPyro programs with closed-form variational guides.

Models live in ``ppl_sbl.models`` (one module per paper); this package is the engine they share:
closed-form CAVI (:class:`CAVI`; for a model without a hand-written guide, updates derived from
the model's trace: :mod:`ppl_sbl.derived`), the guide check against NumPyro's Monte Carlo ELBO
(:func:`check_guide`), model comparison by ELBO (:func:`compare`), ArviZ export, scikit-learn
style estimators, bases and data sets. float64 is switched on at import.
"""
import jax as _jax

_jax.config.update("jax_enable_x64", True)

from . import basis, bounds, datasets, derived, engine, expfam, gaussian, likelihoods, linalg, probit, sparse_gp  # noqa: E402
from .arviz import ComparisonWarning, compare, plot_elbo_trace, plot_grid_relevance, plot_relevance, to_inference_data  # noqa: E402
from .derived import NotConjugateError, derived_guide  # noqa: E402
from .diagnostics import GuideCheck, check_guide  # noqa: E402
from .guide import ClosedFormGuide, closed_form_guide  # noqa: E402
from ._cache import compilation_cache, quick_compile_flags, short_locations  # noqa: E402
from .batch import fit_grid  # noqa: E402
from .inference import CAVI, CAVIResult, fit  # noqa: E402
from .result import FitResult  # noqa: E402
from .saving import LoadError, load  # noqa: E402
from .validation import ConvergenceWarning  # noqa: E402

__all__ = [
    "CAVI",
    "CAVIResult",
    "FitResult",
    "ClosedFormGuide",
    "closed_form_guide",
    "fit",
    "fit_grid",
    "compilation_cache",
    "quick_compile_flags",
    "short_locations",
    "load",
    "LoadError",
    "ConvergenceWarning",
    "derived_guide",
    "NotConjugateError",
    "check_guide",
    "GuideCheck",
    "compare",
    "ComparisonWarning",
    "to_inference_data",
    "plot_elbo_trace",
    "plot_relevance",
    "plot_grid_relevance",
    "RVR",
    "RVC",
    "GPLVMClassifier",
    "SuperSparseClassifier",
    "SuperSparseRegressor",
    "ELBOSearch",
    "basis",
    "bounds",
    "datasets",
    "derived",
    "engine",
    "expfam",
    "gaussian",
    "likelihoods",
    "linalg",
    "probit",
    "sparse_gp",
]
from .version import __version__  # noqa: E402,F401

_ESTIMATORS = ("RVR", "RVC", "GPLVMClassifier", "SuperSparseClassifier", "SuperSparseRegressor")


def __getattr__(name):
    # the scikit-learn estimators load on first use: the library itself imports without scikit-learn
    if name in _ESTIMATORS:
        from . import estimators

        return getattr(estimators, name)
    if name == "ELBOSearch":
        from .model_selection import ELBOSearch

        return ELBOSearch
    raise AttributeError(f"module 'ppl_sbl' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_ESTIMATORS) | {"ELBOSearch"})
