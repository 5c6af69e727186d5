"""scikit-learn-style estimators on the same engine: ``RVR``, ``RVC`` and ``GPLVMClassifier``.

They build an RBF (or linear) design matrix from the inputs, fit ``ppl_sbl.models.rvm`` with
:class:`ppl_sbl.CAVI`, and keep the fitted :class:`ppl_sbl.CAVIResult` in ``result_``. They
follow scikit-learn's conventions (``get_params``/``set_params`` through the constructor
arguments, attributes ending in ``_`` after ``fit``) without requiring scikit-learn.
"""
from __future__ import annotations

import numpy as np

from . import basis as _basis
from .inference import CAVI
from .datasets import one_of_k
from .validation import check_matrix, check_targets

__all__ = ["RVR", "RVC", "GPLVMClassifier"]


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


class GPLVMClassifier:
    """Classification with the supervised Bayesian GPLVM (Sauer's thesis, chapter 5): labels coded
    1-of-K in {-1, 1} as the outputs Z of :func:`ppl_sbl.models.gplvm.fit` (any labels).

    Parameters
    ----------
    latent_dim, num_inducing, prior_kernel, snr, optimize_prior, max_steps, seed :
        passed to :func:`ppl_sbl.models.gplvm.fit` (``prior_kernel``: "rbf", "linear", "matern32").
    classifier : "posterior" (5.29: the class with the largest predictive mean, averaged over
        ``num_samples`` draws of q(x*)) or "knn" (``n_neighbors``-nearest neighbours on the latent
        means of the training points, with eq. 5.32 for new inputs).
    """

    _param_names = ("latent_dim", "num_inducing", "prior_kernel", "classifier", "n_neighbors", "num_samples", "snr",
                    "optimize_prior", "max_steps", "seed")

    def __init__(self, latent_dim=10, num_inducing=30, prior_kernel="rbf", classifier="posterior", n_neighbors=1,
                 num_samples=64, snr=100.0, optimize_prior=False, max_steps=2000, seed=0):
        self.latent_dim, self.num_inducing, self.prior_kernel = latent_dim, num_inducing, prior_kernel
        self.classifier, self.n_neighbors, self.num_samples = classifier, n_neighbors, num_samples
        self.snr, self.optimize_prior, self.max_steps, self.seed = snr, optimize_prior, max_steps, seed

    get_params = _RVMBase.get_params
    set_params = _RVMBase.set_params
    __repr__ = _RVMBase.__repr__

    def fit(self, Y, labels):
        from .models import gplvm

        if self.classifier not in ("posterior", "knn"):
            raise ValueError(f"`classifier` must be 'posterior' or 'knn'; got {self.classifier!r}.")
        Y = check_matrix("Y", Y)
        labels = np.asarray(labels)
        if labels.ndim != 1 or len(labels) != len(Y):
            raise ValueError(f"`labels` must be a vector of {len(Y)} labels (one per row of Y); got shape {labels.shape}.")
        self.classes_, index = np.unique(labels, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(f"`labels` must hold at least two classes; found {self.classes_.tolist()}.")
        Z = one_of_k(index, np.arange(len(self.classes_)))
        self.result_ = gplvm.fit(Y, Z, model="supervised", latent_dim=self.latent_dim, num_inducing=self.num_inducing,
                                 prior_kernel=self.prior_kernel, snr=self.snr, optimize_prior=self.optimize_prior,
                                 max_steps=self.max_steps, seed=self.seed)
        if self.classifier == "knn":
            from sklearn.neighbors import KNeighborsClassifier

            self.knn_ = KNeighborsClassifier(n_neighbors=self.n_neighbors).fit(self.result_.latent_mean, index)
        return self

    def _check_fitted(self):
        if not hasattr(self, "result_"):
            raise ValueError("this GPLVMClassifier is not fitted yet; call fit(Y, labels) first.")

    def transform(self, Y):
        """Latent means of the inputs (eq. 5.32), (n, latent_dim)."""
        self._check_fitted()
        return self.result_.transform(Y)

    def predict_proba(self, Y):
        """"posterior": the share of the draws of q(x*) whose predictive mean is largest for each
        class; "knn": the share of the neighbours in each class. Columns follow ``classes_``."""
        self._check_fitted()
        if self.classifier == "knn":
            return self.knn_.predict_proba(self.transform(Y))
        _, draws = self.result_.predict(Y, num_samples=self.num_samples, seed=self.seed, return_draws=True)
        winners = draws.argmax(-1)  # (num_samples, n)
        return np.stack([np.mean(winners == k, 0) for k in range(len(self.classes_))], 1)

    def predict(self, Y):
        self._check_fitted()
        if self.classifier == "knn":
            return self.classes_[self.knn_.predict(self.transform(Y))]
        return self.classes_[self.result_.predict(Y, num_samples=self.num_samples, seed=self.seed).argmax(1)]

    def score(self, Y, labels):
        """Mean accuracy."""
        return float(np.mean(self.predict(Y) == np.asarray(labels)))
