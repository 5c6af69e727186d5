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

__all__ = ["RVR", "RVC", "GPLVMClassifier", "SuperSparseClassifier", "SuperSparseRegressor"]


class _RVMBase:
    _param_names = ("kernel", "delta", "bias", "a0", "b0", "tol", "max_sweeps", "prune", "progress_bar", "schedule")

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
        return CAVI(model, tol=self.tol, max_sweeps=self.max_sweeps, prune=self.prune, progress_bar=self.progress_bar,
                    schedule=self.schedule)

    @property
    def relevant_(self):
        """Mask over the basis functions (bias first when ``bias``) judged relevant."""
        self._check_fitted()
        return self.result_.relevant

    @property
    def relevance_(self):
        """Indices of the training points whose RBF is relevant (kernel='rbf'), ascending."""
        self._check_fitted()
        if self.kernel != "rbf":
            raise AttributeError("relevance_ applies to kernel='rbf' (one basis function per training point).")
        mask = self.result_.relevant[1:] if self.bias else self.result_.relevant
        return np.flatnonzero(mask)

    @property
    def relevance_vectors_(self):
        """The training inputs whose RBF is relevant (kernel='rbf'): ``X[relevance_]``."""
        self._check_fitted()
        return self.X_fit_[self.relevance_] if self.kernel == "rbf" else None


class RVR(_RVMBase):
    """Relevance vector regression (variational RVM, Bishop & Tipping 2000).

    Parameters
    ----------
    kernel : 'rbf' or 'linear'
    delta : RBF inverse squared width, exp(-delta ||x - x'||^2)
    bias : add a constant basis function
    a0, b0, e0, f0 : Gamma(shape, rate) hyperpriors of the precisions and of the noise precision
    tol, max_sweeps, prune, progress_bar, schedule : passed to :class:`ppl_sbl.CAVI` (``schedule``
        "fast", the default: the fast variational schedule of :mod:`ppl_sbl.fast_ard`; "sweep":
        the plain sweep)

    After ``fit``: ``result_`` (the :class:`ppl_sbl.CAVIResult`), ``relevant_`` (mask over the
    basis functions), ``relevance_`` (indices of the relevant training points) and
    ``relevance_vectors_`` (those points).
    """

    _param_names = _RVMBase._param_names + ("e0", "f0")

    def __init__(self, kernel="rbf", delta=1.0, bias=True, a0=1e-6, b0=1e-6, e0=1e-6, f0=1e-6,
                 tol=1e-9, max_sweeps=20000, prune=True, progress_bar=None, schedule="fast"):
        self.kernel, self.delta, self.bias = kernel, delta, bias
        self.a0, self.b0, self.e0, self.f0 = a0, b0, e0, f0
        self.tol, self.max_sweeps, self.prune, self.progress_bar = tol, max_sweeps, prune, progress_bar
        self.schedule = schedule

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

    ``classes_[1]`` is the positive class (t = 1 in the model). Parameters and fitted attributes
    as :class:`RVR` (no noise prior).
    """

    def __init__(self, kernel="rbf", delta=1.0, bias=True, a0=1e-6, b0=1e-6,
                 tol=1e-9, max_sweeps=20000, prune=True, progress_bar=None, schedule="fast"):
        self.kernel, self.delta, self.bias = kernel, delta, bias
        self.a0, self.b0 = a0, b0
        self.tol, self.max_sweeps, self.prune, self.progress_bar = tol, max_sweeps, prune, progress_bar
        self.schedule = schedule

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
    latent_dim, num_inducing, prior_kernel, snr, optimize_prior, max_steps, optimizer, seed :
        passed to :func:`ppl_sbl.models.gplvm.fit` (``prior_kernel``: "rbf", "linear", "matern32";
        ``optimizer``: None (natural-gradient sweeps with the prior fixed), "natural" or "lbfgs").
        The fit maximises the bound on the *training* labels; with the signal-to-noise ratio
        fixed high, the further it climbs, the fewer latent dimensions ARD keeps, and test
        accuracy can fall (``bench/gplvm_experiments.py``): ``max_steps`` and ``optimizer`` are
        worth a cross-validation (``GridSearchCV``).
    classifier : "posterior" (5.29: the class with the largest predictive mean, averaged over
        ``num_samples`` draws of q(x*)) or "knn" (``n_neighbors``-nearest neighbours on the latent
        means of the training points, with eq. 5.32 for new inputs).
    """

    _param_names = ("latent_dim", "num_inducing", "prior_kernel", "classifier", "n_neighbors", "num_samples", "snr",
                    "optimize_prior", "max_steps", "optimizer", "seed")

    def __init__(self, latent_dim=10, num_inducing=30, prior_kernel="rbf", classifier="posterior", n_neighbors=1,
                 num_samples=64, snr=100.0, optimize_prior=False, max_steps=2000, optimizer=None, seed=0):
        self.latent_dim, self.num_inducing, self.prior_kernel = latent_dim, num_inducing, prior_kernel
        self.classifier, self.n_neighbors, self.num_samples = classifier, n_neighbors, num_samples
        self.snr, self.optimize_prior, self.max_steps, self.seed = snr, optimize_prior, max_steps, seed
        self.optimizer = optimizer

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
                                 max_steps=self.max_steps, optimizer=self.optimizer, seed=self.seed)
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


# ----------------------------------------------------------------------------------------------
# Super-sparse machines (Biggio et al.): ``ppl_sbl.models.super_sparse`` as scikit-learn estimators
# ----------------------------------------------------------------------------------------------
try:  # get_params/set_params/clone/GridSearchCV/score from scikit-learn (the ``sklearn`` extra)
    from sklearn.base import BaseEstimator as _SkBaseEstimator
    from sklearn.base import ClassifierMixin as _SkClassifierMixin
    from sklearn.base import RegressorMixin as _SkRegressorMixin
except ImportError:  # pragma: no cover - exercised only without scikit-learn
    class _SkBaseEstimator:
        def __new__(cls, *args, **kwargs):
            raise ImportError(f"{cls.__name__} is a scikit-learn estimator and needs scikit-learn: "
                              "pip install 'ppl-sbl[sklearn]' (or use ppl_sbl.models.super_sparse.fit directly).")

    class _SkClassifierMixin:
        pass

    class _SkRegressorMixin:
        pass


class _SuperSparseBase(_SkBaseEstimator):
    """Shared pieces of :class:`SuperSparseRegressor` and :class:`SuperSparseClassifier`."""

    def __init__(self, m=4, similarity="rbf", gamma=1.0, lam=1e-3, max_steps=200, tol=1e-7, repulsion=1.0, seed=0,
                 step_size=None, gradient="auto"):
        self.m = m
        self.similarity = similarity
        self.gamma = gamma
        self.lam = lam
        self.max_steps = max_steps
        self.tol = tol
        self.repulsion = repulsion
        self.seed = seed
        self.step_size = step_size
        self.gradient = gradient

    def _fit_one(self, X, t, sample_weight):
        from .models import super_sparse

        return super_sparse.fit(X, t, m=self.m, similarity=self.similarity, gamma=self.gamma, lam=self.lam,
                                sample_weight=sample_weight, max_steps=self.max_steps, tol=self.tol,
                                step_size=self.step_size, repulsion=self.repulsion, seed=self.seed,
                                gradient=self.gradient)

    def _check_X(self, X, fitting=False):
        X = check_matrix("X", X)
        if fitting:
            self.n_features_in_ = X.shape[1]
        else:
            if not hasattr(self, "results_"):
                raise ValueError(f"this {type(self).__name__} is not fitted yet; call fit(X, y) first.")
            if X.shape[1] != self.n_features_in_:
                raise ValueError(
                    f"`X` has {X.shape[1]} features but the estimator was fitted with {self.n_features_in_}."
                )
        return X

    @property
    def prototypes_(self):
        """The virtual prototypes, (m, d); one-vs-all: all classes' stacked, (K m, d)."""
        return np.concatenate([r.prototypes for r in self.results_], axis=0)

    @property
    def similarity_evaluations_per_point_(self):
        """Similarity evaluations per prediction: m (K m one-vs-all for K > 2 classes)."""
        return int(sum(r.m for r in self.results_))


class SuperSparseRegressor(_SkRegressorMixin, _SuperSparseBase):
    """Super-sparse regression (Biggio et al.): ``f(x) = sum_j beta_j s(x, c_j) + b`` with ``m``
    learned virtual prototypes (:func:`ppl_sbl.models.super_sparse.fit`).

    Parameters
    ----------
    m : number of virtual prototypes (similarity evaluations per prediction).
    similarity : "rbf" (``exp(-gamma ||x - c||^2)``) or a callable ``s(X, C) -> (n, m)``.
    gamma : the RBF's ``gamma``.  lam : the ridge penalty ``lambda`` of (2).
    max_steps, tol, repulsion, seed, step_size, gradient : passed to the fit.

    Attributes
    ----------
    result_ : the fitted :class:`ppl_sbl.models.super_sparse.SuperSparseResult`.
    """

    def fit(self, X, y, sample_weight=None):
        X = self._check_X(X, fitting=True)
        y = check_targets("y", y, X.shape[0], rows_name="X")
        self.result_ = self._fit_one(X, y, sample_weight)
        self.results_ = [self.result_]
        return self

    def decision_function(self, X):
        """``f(x)`` at the rows of X."""
        X = self._check_X(X)
        return self.result_.decision_function(X)

    def predict(self, X):
        """``f(x)`` at the rows of X."""
        return self.decision_function(X)


class SuperSparseClassifier(_SkClassifierMixin, _SuperSparseBase):
    """Super-sparse classification (Biggio et al.): the squared loss (2) fitted to labels coded
    -1/+1 (``classes_[1]`` is +1), with ``m`` learned virtual prototypes; one-vs-all (m prototypes
    per class) for more than two classes. Any labels.

    Parameters
    ----------
    m : number of virtual prototypes (per class for more than two classes).
    similarity : "rbf" (``exp(-gamma ||x - c||^2)``) or a callable ``s(X, C) -> (n, m)``.
    gamma : the RBF's ``gamma``.  lam : the ridge penalty ``lambda`` of (2).
    max_steps, tol, repulsion, seed, step_size, gradient : passed to the fit.

    Attributes
    ----------
    classes_ : the labels, sorted.
    results_ : the fitted :class:`ppl_sbl.models.super_sparse.SuperSparseResult` (one, or one per
        class one-vs-all); ``result_`` the single one for two classes.
    """

    def fit(self, X, y, sample_weight=None):
        X = self._check_X(X, fitting=True)
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise ValueError(
                f"`y` must be a vector of {X.shape[0]} labels (one per row of `X`); got shape {y.shape}."
            )
        if y.dtype.kind in "fc" and not np.all(np.isfinite(y)):
            raise ValueError("`y` contains NaN or infinite labels; remove those samples before fitting.")
        classes = np.unique(y)
        if len(classes) < 2:
            raise ValueError(
                f"`y` must hold at least two classes; found only {classes.tolist()}. A classifier needs samples of "
                "each class."
            )
        self.classes_ = classes
        positives = [classes[1]] if len(classes) == 2 else list(classes)
        self.results_ = [self._fit_one(X, np.where(y == c, 1.0, -1.0), sample_weight) for c in positives]
        if len(classes) == 2:
            self.result_ = self.results_[0]
        elif hasattr(self, "result_"):
            del self.result_
        return self

    def decision_function(self, X):
        """f(x) for ``classes_[1]`` (n,) with two classes; one column per class (n, K) otherwise."""
        X = self._check_X(X)
        f = np.column_stack([r.decision_function(X) for r in self.results_])
        return f[:, 0] if len(self.classes_) == 2 else f

    def predict(self, X):
        f = self.decision_function(X)
        if len(self.classes_) == 2:
            return self.classes_[(f > 0).astype(int)]
        return self.classes_[np.argmax(f, axis=1)]

