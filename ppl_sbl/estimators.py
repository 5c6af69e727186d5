"""scikit-learn-style estimators on the same engine: ``RVR`` and ``RVC``.

They build an RBF (or linear) design matrix from the inputs, fit ``ppl_sbl.models.rvm`` with
:class:`ppl_sbl.CAVI`, and keep the fitted :class:`ppl_sbl.CAVIResult` in ``result_``. They
follow scikit-learn's conventions (``get_params``/``set_params`` through the constructor
arguments, attributes ending in ``_`` after ``fit``) without requiring scikit-learn.
"""
from __future__ import annotations

import numpy as np

from . import basis as _basis
from .inference import CAVI
from .validation import check_matrix, check_targets

__all__ = ["RVR", "RVC"]


class _RVMBase:
    _param_names = ("kernel", "delta", "bias", "a0", "b0", "tol", "max_sweeps", "prune", "progress_bar")

    def get_params(self, deep=True):
        return {name: getattr(self, name) for name in self._param_names}

    def set_params(self, **params):
        for name, value in params.items():
            if name not in self._param_names:
                raise ValueError(f"invalid parameter {name!r} for {type(self).__name__}; valid: {self._param_names}.")
            setattr(self, name, value)
        return self

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def _design(self, X, fitting=False):
        X = np.asarray(X, dtype=np.float64)
        if X.ndim == 1:
            X = X[:, None]
        X = check_matrix("X", X)
        if fitting:
            self.X_fit_ = X
        elif X.shape[1] != self.X_fit_.shape[1]:
            raise ValueError(f"`X` has {X.shape[1]} features but the estimator was fitted with {self.X_fit_.shape[1]}.")
        if self.kernel == "rbf":
            return _basis.rbf(X, self.X_fit_, self.delta, bias=self.bias)
        if self.kernel == "linear":
            return _basis.linear(X, bias=self.bias)
        raise ValueError(f"`kernel` must be 'rbf' or 'linear'; got {self.kernel!r}.")

    def _check_fitted(self):
        if not hasattr(self, "result_"):
            raise ValueError(f"this {type(self).__name__} is not fitted yet; call fit(X, y) first.")

    def _cavi(self, model):
        return CAVI(model, tol=self.tol, max_sweeps=self.max_sweeps, prune=self.prune, progress_bar=self.progress_bar)

    @property
    def relevant_(self):
        """Mask over the basis functions (bias first when ``bias``) judged relevant."""
        self._check_fitted()
        return self.result_.relevant

    @property
    def relevance_vectors_(self):
        """Training inputs whose RBF is relevant (kernel='rbf')."""
        self._check_fitted()
        mask = self.result_.relevant[1:] if self.bias else self.result_.relevant
        return self.X_fit_[mask] if self.kernel == "rbf" else None


class RVR(_RVMBase):
    """Relevance vector regression (variational RVM, Bishop & Tipping 2000).

    Parameters
    ----------
    kernel : 'rbf' or 'linear'
    delta : RBF inverse squared width, exp(-delta ||x - x'||^2)
    bias : add a constant basis function
    a0, b0, e0, f0 : Gamma(shape, rate) hyperpriors of the precisions and of the noise precision
    tol, max_sweeps, prune, progress_bar : passed to :class:`ppl_sbl.CAVI`
    """

    _param_names = _RVMBase._param_names + ("e0", "f0")

    def __init__(self, kernel="rbf", delta=1.0, bias=True, a0=1e-6, b0=1e-6, e0=1e-6, f0=1e-6,
                 tol=1e-9, max_sweeps=20000, prune=True, progress_bar=None):
        self.kernel, self.delta, self.bias = kernel, delta, bias
        self.a0, self.b0, self.e0, self.f0 = a0, b0, e0, f0
        self.tol, self.max_sweeps, self.prune, self.progress_bar = tol, max_sweeps, prune, progress_bar

    def fit(self, X, y):
        from .models import rvm

        Phi = self._design(X, fitting=True)
        y = check_targets("y", y, Phi.shape[0], rows_name="X")
        self.result_ = self._cavi(rvm.regression).run(Phi, y, a0=self.a0, b0=self.b0, e0=self.e0, f0=self.f0)
        return self

    def predict(self, X, return_std=False):
        """Predictive mean; with ``return_std`` also the standard deviation of a new observation."""
        self._check_fitted()
        mean, var = self.result_.predict(self._design(X))
        mean = np.asarray(mean)
        return (mean, np.sqrt(np.asarray(var))) if return_std else mean

    def score(self, X, y):
        """Coefficient of determination R^2 (as scikit-learn's regressors)."""
        y = np.asarray(y, dtype=np.float64)
        resid = y - self.predict(X)
        return 1.0 - np.sum(resid**2) / np.sum((y - y.mean()) ** 2)


class RVC(_RVMBase):
    """Relevance vector classification with the Jaakkola-Jordan bound; any two class labels.

    ``classes_[1]`` is the positive class (t = 1 in the model).
    """

    def __init__(self, kernel="rbf", delta=1.0, bias=True, a0=1e-6, b0=1e-6,
                 tol=1e-9, max_sweeps=20000, prune=True, progress_bar=None):
        self.kernel, self.delta, self.bias = kernel, delta, bias
        self.a0, self.b0 = a0, b0
        self.tol, self.max_sweeps, self.prune, self.progress_bar = tol, max_sweeps, prune, progress_bar

    def fit(self, X, y):
        from .models import rvm

        Phi = self._design(X, fitting=True)
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != Phi.shape[0]:
            raise ValueError(f"`y` must be a vector of {Phi.shape[0]} labels (one per row of X); got shape {y.shape}.")
        classes = np.unique(y)
        if len(classes) != 2:
            raise ValueError(f"`y` must hold exactly two classes; found {len(classes)}: {classes[:5].tolist()}.")
        self.classes_ = classes
        t = (y == classes[1]).astype(np.float64)
        self.result_ = self._cavi(rvm.classification).run(Phi, t, a0=self.a0, b0=self.b0)
        return self

    def predict_proba(self, X):
        """Columns P(classes_[0]), P(classes_[1]) with q(w) integrated out by quadrature."""
        self._check_fitted()
        p1 = np.asarray(self.result_.predict(self._design(X)))
        return np.column_stack([1.0 - p1, p1])

    def predict(self, X):
        return self.classes_[(self.predict_proba(X)[:, 1] > 0.5).astype(int)]

    def score(self, X, y):
        """Mean accuracy."""
        return float(np.mean(self.predict(X) == np.asarray(y)))
