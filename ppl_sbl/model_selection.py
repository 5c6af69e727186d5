"""Model selection by the evidence: :class:`ELBOSearch`, scikit-learn's ``GridSearchCV`` interface
with the ELBO (a lower bound on the log evidence ln p(y | settings)) in place of cross-validation.

Every setting is fitted once, to all the data, and the one with the highest ELBO is kept: the
evidence compares settings (RBF widths, hyperpriors, kernels) on the training data alone, as
Hwang & Jeong (2015, sections 3.3 and 4.1) pick the kernel width of the RVM and the robust RVM by
their lower bounds instead of cross-validating it. Needs the ``sklearn`` extra.
"""
from __future__ import annotations

import copy
import time

import numpy as np

try:
    from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone
    from sklearn.model_selection import ParameterGrid
    from sklearn.pipeline import Pipeline
    from sklearn.utils import get_tags
    from sklearn.utils.metaestimators import available_if
    from sklearn.utils.validation import check_is_fitted
except ImportError as err:  # pragma: no cover - exercised only without scikit-learn
    raise ImportError("ppl_sbl.model_selection needs scikit-learn: pip install 'ppl-sbl[sklearn]'.") from err

__all__ = ["ELBOSearch"]


def _delegates(name):
    """A method of :class:`ELBOSearch` exists where the (fitted) estimator has it."""
    def check(search):
        return hasattr(search.best_estimator_ if hasattr(search, "best_estimator_") else search.estimator, name)

    return check


class ELBOSearch(MetaEstimatorMixin, BaseEstimator):
    """The setting of ``param_grid`` whose fit to all the data has the highest ELBO.

    Parameters
    ----------
    estimator : an estimator with ``elbo_`` after ``fit`` (:class:`ppl_sbl.RVR`, :class:`ppl_sbl.RVC`,
        :class:`ppl_sbl.GPLVMClassifier`), or a ``Pipeline`` that ends with one. With several ELBOs
        (``RVC(multi_class="ovr")``: one binary model per class) their sum is compared: the log
        evidence of the independent models together.
    param_grid : a dict of parameter names to lists of values, or a list of such dicts
        (scikit-learn's ``ParameterGrid``), e.g. ``{"delta": np.geomspace(0.01, 10, 16)}``.

    The estimator's ``fit_candidates(X, y, candidates)`` fits the settings where it has one:
    :class:`ppl_sbl.RVR` and :class:`ppl_sbl.RVC` run the fast schedule of all the RBF widths of a
    grid over ``delta`` in one compiled program (:func:`ppl_sbl.fit_grid`); so do pipelines that
    end with one, where the grid sets only the last step's parameters (``{"rvc__delta": ...}``:
    the steps before it are fitted once). Other searches fit the settings one after the other.

    Attributes
    ----------
    best_estimator_ : the fitted estimator of the best setting (every fit uses all the data, so
        there is no refit); best_params_, best_index_ : its setting and index in ``candidates_``;
        best_score_ : its ELBO.
    candidates_ : a ``pandas.DataFrame``, one row per setting in the grid's order: its parameters
        (``param_<name>``), ``elbo``, ``rank`` (1 the best), ``converged`` and
        ``n_relevance_vectors`` (where the estimator has them).
    seconds_ : the time of all the fits; n_features_in_, feature_names_in_, classes_ : the best
        estimator's.

    ``predict``, ``predict_proba``, ``transform``, ``score`` and the others are the best estimator's.
    """

    def __init__(self, estimator, param_grid):
        self.estimator = estimator
        self.param_grid = param_grid

    def fit(self, X, y):
        """Fit every setting of the grid to (X, y) and keep the one with the highest ELBO."""
        import pandas as pd

        candidates = list(ParameterGrid(self.param_grid))
        if not candidates:
            raise ValueError("`param_grid` holds no setting; give a dict of parameter names to lists of values.")
        start = time.perf_counter()
        fitted = _fit_candidates(self.estimator, X, y, candidates)
        self.seconds_ = time.perf_counter() - start
        if not hasattr(_final(fitted[0]), "elbo_"):
            raise TypeError(f"ELBOSearch compares fits by their `elbo_`, which {type(self.estimator).__name__} does "
                            "not have after fit; use an estimator with an ELBO (RVR, RVC, GPLVMClassifier) or "
                            "sklearn.model_selection.GridSearchCV.")
        elbos = np.array([float(np.sum(_final(estimator).elbo_)) for estimator in fitted])
        if not np.any(np.isfinite(elbos)):
            raise FloatingPointError(f"no setting has a finite ELBO ({elbos.tolist()}); check the inputs' scale and "
                                     "the grid.")
        order = np.argsort(np.where(np.isfinite(elbos), -elbos, np.inf), kind="stable")
        rank = np.empty(len(elbos), dtype=int)
        rank[order] = np.arange(1, len(elbos) + 1)
        table = pd.DataFrame([{f"param_{name}": value for name, value in params.items()} for params in candidates])
        table["elbo"] = elbos
        table["rank"] = rank
        table["converged"] = [bool(np.all(_converged(_final(estimator)))) for estimator in fitted]
        if hasattr(_final(fitted[0]), "n_relevance_vectors_"):
            table["n_relevance_vectors"] = [_final(estimator).n_relevance_vectors_ for estimator in fitted]
        self.candidates_ = table
        self.best_index_ = int(order[0])
        self.best_params_ = candidates[self.best_index_]
        self.best_score_ = float(elbos[self.best_index_])
        self.best_estimator_ = fitted[self.best_index_]
        for name in ("n_features_in_", "feature_names_in_"):
            if hasattr(self.best_estimator_, name):
                setattr(self, name, getattr(self.best_estimator_, name))
        return self

    @property
    def classes_(self):
        check_is_fitted(self)
        return self.best_estimator_.classes_

    @available_if(_delegates("predict"))
    def predict(self, X):
        check_is_fitted(self)
        return self.best_estimator_.predict(X)

    @available_if(_delegates("predict_proba"))
    def predict_proba(self, X):
        check_is_fitted(self)
        return self.best_estimator_.predict_proba(X)

    @available_if(_delegates("transform"))
    def transform(self, X):
        check_is_fitted(self)
        return self.best_estimator_.transform(X)

    @available_if(_delegates("score"))
    def score(self, X, y):
        check_is_fitted(self)
        return self.best_estimator_.score(X, y)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        inner = get_tags(self.estimator)
        tags.estimator_type = inner.estimator_type
        tags.classifier_tags = copy.deepcopy(inner.classifier_tags)
        tags.regressor_tags = copy.deepcopy(inner.regressor_tags)
        tags.input_tags.pairwise = inner.input_tags.pairwise
        return tags


def _final(estimator):
    """The estimator that holds the fit: the last step of a pipeline, else the estimator."""
    return _final(estimator.steps[-1][1]) if isinstance(estimator, Pipeline) else estimator


def _fit_candidates(estimator, X, y, candidates):
    """The estimator fitted with each setting: through its ``fit_candidates`` where it has one (a
    pipeline's last step, where the settings are all of that step: the steps before it fitted once
    and shared), else one after the other."""
    if isinstance(estimator, Pipeline) and len(estimator.steps) > 1:
        name, last = estimator.steps[-1]
        prefix = name + "__"
        if hasattr(last, "fit_candidates") and all(key.startswith(prefix) for c in candidates for key in c):
            head = Pipeline(clone(estimator).steps[:-1], memory=estimator.memory)
            Xt = head.fit_transform(X, y)
            finals = last.fit_candidates(Xt, y, [{key[len(prefix):]: value for key, value in c.items()}
                                                 for c in candidates])
            return [Pipeline(head.steps + [(name, final)], memory=estimator.memory, verbose=estimator.verbose)
                    for final in finals]
    if hasattr(estimator, "fit_candidates"):
        return estimator.fit_candidates(X, y, candidates)
    return [clone(estimator).set_params(**params).fit(X, y) for params in candidates]


def _converged(estimator):
    """Whether each of the estimator's fits converged (its results' ``converged``; True where it
    keeps none)."""
    results = getattr(estimator, "results_", None) or [getattr(estimator, "result_", None)]
    return [bool(getattr(r, "converged", True)) for r in results if r is not None] or [True]
