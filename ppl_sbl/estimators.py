"""scikit-learn estimators on the library's models: :class:`RVR`, :class:`RVC`,
:class:`GPLVMClassifier`, :class:`SuperSparseRegressor` and :class:`SuperSparseClassifier`.

They are ``sklearn.base.BaseEstimator`` subclasses with the regressor or classifier mixin, so that
``clone``, ``cross_val_score``, ``GridSearchCV`` and pipelines work with them, and they pass
``sklearn.utils.estimator_checks``. They need the ``sklearn`` extra (``pip install
'ppl-sbl[sklearn]'``); the rest of the library imports without scikit-learn.

The relevance vector estimators build a design matrix from the inputs with ``kernel`` ("rbf",
"linear", "precomputed" or a callable, as scikit-learn's kernel machines take it) and fit
``ppl_sbl.models.rvm`` with :class:`ppl_sbl.CAVI`; the fitted :class:`ppl_sbl.CAVIResult` is
``result_`` (``results_``: one per class, one-vs-rest).
"""
from __future__ import annotations

import numbers
import warnings

import numpy as np

try:
    from sklearn.base import BaseEstimator, ClassifierMixin, ClassNamePrefixFeaturesOutMixin, RegressorMixin, TransformerMixin
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.metrics.pairwise import rbf_kernel
    from sklearn.utils.multiclass import check_classification_targets
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as err:  # pragma: no cover - exercised only without scikit-learn
    raise ImportError("ppl_sbl's estimators (RVR, RVC, GPLVMClassifier, SuperSparseRegressor, "
                      "SuperSparseClassifier) need scikit-learn: pip install 'ppl-sbl[sklearn]'. The models "
                      "themselves (ppl_sbl.models, ppl_sbl.CAVI) do not.") from err

from ._cache import compilation_cache
from .inference import CAVI
from .validation import ConvergenceWarning as _LibraryConvergenceWarning
from .validation import check_targets

__all__ = ["RVR", "RVC", "GPLVMClassifier", "SuperSparseClassifier", "SuperSparseRegressor"]

KERNELS = ("rbf", "linear", "precomputed")
MULTI_CLASS = ("multinomial", "ovr")


def _sample_weights(sample_weight, n):
    """``sample_weight`` as n finite non-negative floats (a number: the same weight for all)."""
    v = np.asarray(sample_weight)
    v = check_targets("sample_weight", np.full(n, v) if v.ndim == 0 else v, n, rows_name="X")
    if np.any(v < 0):
        raise ValueError("Negative values in data passed to `sample_weight`; weights must be >= 0.")
    return v


def _warn_unconverged(name, what, cap):
    warnings.warn(f"{name} stopped at {what}={cap} before converging; raise {what} (or tol) for the fitted "
                  "model to be the fixed point.", ConvergenceWarning, stacklevel=3)


def _quiet(fit, *args, **kwargs):
    """``fit(*args, **kwargs)`` with the library's own convergence warning held back (the
    estimator reports an unconverged fit as scikit-learn's ConvergenceWarning)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", _LibraryConvergenceWarning)
        return fit(*args, **kwargs)


def _rbf_width(value, X, name):
    """The inverse squared width of exp(-value ||x - x'||^2): "scale" 1 / (n_features var(X))
    (scikit-learn's SVC rule), "auto" 1 / n_features, or the positive number given."""
    if isinstance(value, str):
        if value == "scale":
            var = float(X.var())
            return 1.0 / (X.shape[1] * var) if var > 0 else 1.0
        if value == "auto":
            return 1.0 / X.shape[1]
    elif isinstance(value, numbers.Real) and not isinstance(value, bool) and value > 0:
        return float(value)
    raise ValueError(f"`{name}` must be 'scale', 'auto' or a positive number; got {value!r}.")


def _classifier_data(estimator, X, y):
    """Validated inputs and class indices for a classifier's fit; sets ``classes_``."""
    X, y = validate_data(estimator, X, y, dtype=np.float64, ensure_min_samples=2)
    check_classification_targets(y)
    estimator.classes_, index = np.unique(y, return_inverse=True)
    if len(estimator.classes_) < 2:
        raise ValueError(f"`y` holds only one class ({estimator.classes_[0]!r}); a classifier needs samples of at "
                         "least two classes.")
    return X, index


# ----------------------------------------------------------------------------------------------
# Relevance vector machines
# ----------------------------------------------------------------------------------------------
class _RVMBase(BaseEstimator):
    """The kernel, the fit's settings and the relevance vectors shared by :class:`RVR` and :class:`RVC`."""

    def _check_params(self):
        if not (callable(self.kernel) or self.kernel in KERNELS):
            raise ValueError(f"`kernel` must be one of {KERNELS} or a callable k(X, Y) -> (n_X, n_Y); "
                             f"got {self.kernel!r}.")
        if self.schedule not in ("fast", "sweep"):
            raise ValueError(f"`schedule` must be 'fast' or 'sweep'; got {self.schedule!r}.")


    @property
    def _per_point(self):
        """Whether the design has one basis function per training point (every kernel but linear)."""
        return self.kernel != "linear"

    def _design(self, X):
        """The design matrix at inputs X (validated): the kernel against the training inputs (or
        the features themselves, 'linear'), with a constant column first when ``bias``."""
        if self.kernel == "rbf":
            Phi = rbf_kernel(X, self.X_fit_, gamma=self.delta_)
        elif self.kernel == "linear":
            Phi = X
        elif self.kernel == "precomputed":
            Phi = X
        else:
            Phi = np.asarray(self.kernel(X, self.X_fit_), dtype=np.float64)
            if Phi.shape != (X.shape[0], self.X_fit_.shape[0]):
                raise ValueError(f"the kernel callable must return an array of shape (n_X, n_Y) = "
                                 f"{(X.shape[0], self.X_fit_.shape[0])}; got {Phi.shape}.")
            if not np.all(np.isfinite(Phi)):
                raise ValueError("the kernel callable returned NaN or infinite values.")
        if self.bias:
            Phi = np.column_stack([np.ones(X.shape[0]), Phi])
        return Phi

    def _fit_design(self, X):
        self._check_params()
        if self.kernel == "precomputed" and X.shape[0] != X.shape[1]:
            raise ValueError(f"with kernel='precomputed', `X` must be the square kernel matrix of the training "
                             f"points (n_samples, n_samples); got shape {X.shape}.")
        self.X_fit_ = X if self.kernel in ("rbf",) or callable(self.kernel) else None
        self.delta_ = _rbf_width(self.delta, X, "delta") if self.kernel == "rbf" else None
        return self._design(X)

    def fit(self, X, y):
        """Fit the model (one per class against the rest with ``multi_class="ovr"``) to (X, y)."""
        compilation_cache()  # JAX's persistent compilation cache, unless the user configured or disabled it
        X, problems = self._problems(X, y)
        Phi = self._fit_design(X)
        self._adopt([self._run(model, Phi, t, **priors) for model, t, priors in problems], X.shape[0])
        return self

    def fit_candidates(self, X, y, candidates):
        """Fitted copies of this estimator, one for each dict of parameters in ``candidates``: each
        ``clone(self).set_params(**params).fit(X, y)``. Where the copies differ only in the RBF
        width ``delta`` and fit with the fast schedule (kernel "rbf", ``schedule="fast"``,
        ``prune``, b0 positive or None; RVR, and RVC with two classes or ``multi_class="ovr"``),
        each model's fits for all the widths run in one compiled program
        (:func:`ppl_sbl.fit_grid` with ``schedule="fast"``: the same fit as one by one, to rounding;
        no progress bar); otherwise one after the other. :class:`ppl_sbl.model_selection.ELBOSearch`
        calls it."""
        from sklearn.base import clone

        from .batch import fit_grid
        from .models import rvm

        candidates = [dict(params) for params in candidates]
        fitted = [clone(self).set_params(**params) for params in candidates]
        if not fitted or not self._one_program(candidates):
            return [estimator.fit(X, y) for estimator in fitted]
        compilation_cache()
        inputs = [estimator._problems(X, y) for estimator in fitted]  # each validates and sets its input attributes
        valid, problems = inputs[0]
        if any(model not in (rvm.regression, rvm.classification) for model, _, _ in problems):
            return [estimator.fit(X, y) for estimator in fitted]  # the multinomial RVM: no fast_plan
        designs = [estimator._fit_design(valid) for estimator in fitted]
        first = fitted[0]
        grids = [_quiet(fit_grid, model, designs, t, schedule="fast", tol=first.tol, max_sweeps=first.max_sweeps,
                        **priors) for model, t, priors in problems]
        for i, estimator in enumerate(fitted):
            estimator._adopt([grid[i] for grid in grids], valid.shape[0])
        return fitted

    def _one_program(self, candidates):
        """Whether the settings ``candidates`` set at most ``delta`` of this estimator, whose RBF
        designs fit with the fast schedule (:meth:`fit_candidates`)."""
        return (all(set(params) <= {"delta"} for params in candidates) and self.kernel == "rbf"
                and self.schedule == "fast" and bool(self.prune)
                and (self.b0 is None or (isinstance(self.b0, numbers.Real) and self.b0 > 0)))

    def _run(self, model, *args, **kwargs):
        cavi = CAVI(model, tol=self.tol, max_sweeps=self.max_sweeps, prune=self.prune, progress_bar=self.progress_bar,
                    schedule=self.schedule, compiled=self.compiled)
        return _quiet(cavi.run, *args, **kwargs)

    def _finish(self, results, n_train):
        """Fitted attributes from the results (one, or one per class): the relevance vectors (the
        union over the results), ``coef_``/``intercept_`` for the linear kernel, ``elbo_``,
        ``n_iter_``; a ConvergenceWarning for a fit stopped by the cap."""
        for r in results:
            if not r.converged:
                _warn_unconverged(type(self).__name__, "max_sweeps", self.max_sweeps)
        start = 1 if self.bias else 0
        self.relevant_ = np.any([np.asarray(r.relevant) for r in results], axis=0)
        masks = np.array([np.asarray(r.relevant)[start:] for r in results])
        if self._per_point:
            self.relevance_ = np.flatnonzero(masks.any(axis=0))
            self.relevance_vectors_ = self.X_fit_[self.relevance_] if self.X_fit_ is not None else None
        else:
            self.relevance_ = self.relevance_vectors_ = None
        self.n_relevance_vectors_ = int(masks.any(axis=0).sum())

    @staticmethod
    def _weights(result):
        """The posterior mean weights of a result, one row per class's weight vector (C, M)."""
        w = result.state.w  # one ActiveGaussian, or a tuple of them (the multinomial model's columns)
        return np.asarray(w.mean)[None] if hasattr(w, "_fields") else np.array([np.asarray(q.mean) for q in w])

    def _set_linear(self, results, single):
        if self.kernel != "linear":
            return
        W = np.concatenate([self._weights(r) for r in results])
        start = 1 if self.bias else 0
        self.coef_ = W[0, start:] if single else W[:, start:]
        intercept = W[:, 0] if self.bias else np.zeros(W.shape[0])
        self.intercept_ = float(intercept[0]) if single else intercept


class RVR(RegressorMixin, _RVMBase):
    """Relevance vector regression: the variational RVM (Bishop & Tipping 2000; ``rvm.regression``).

    Parameters
    ----------
    kernel : "rbf" (exp(-delta ||x - x'||^2), one basis function per training point), "linear"
        (the features), "precomputed" (``X`` is the kernel matrix: at fit (n, n), at predict
        (n_new, n_train)) or a callable ``k(X, X_train) -> (n, n_train)``.
    delta : the RBF's inverse squared width: "scale" (default, 1 / (n_features X.var()), the rule
        of scikit-learn's SVC), "auto" (1 / n_features) or a positive number.
    bias : add a constant basis function (first).
    a0, b0, e0, f0 : Gamma(shape, rate) hyperpriors of the weight precisions and the noise precision;
        the rates ``None`` (default) are set on the data's scale (b0_k = a0 var(y) / mean of the
        squares of basis function k, f0 = e0 var(y): :mod:`ppl_sbl.priors`), so that the fit does
        not depend on the units of ``y`` or ``X``.
    tol, max_sweeps, prune, progress_bar, schedule, compiled : :class:`ppl_sbl.CAVI`'s (``schedule``
        "fast", the default: the fast variational schedule of :mod:`ppl_sbl.fast_ard`; "sweep": every
        coefficient at every sweep; ``compiled=True``: the fast schedule as one compiled program, the
        same fit, which pays where many fits of one shape follow each other).

    Attributes
    ----------
    result_ : the fitted :class:`ppl_sbl.CAVIResult`.
    relevant_ : mask over the basis functions (the bias first when ``bias``) judged relevant.
    relevance_ : indices of the training points whose basis function is relevant (every kernel
        but "linear"); relevance_vectors_ : those training inputs (rbf and callable kernels);
        n_relevance_vectors_ : their number (for "linear": relevant features).
    coef_, intercept_ : the posterior mean weights (kernel "linear").
    elbo_ : the fit's ELBO; n_iter_ : its sweeps (entries of its ELBO trace).
    delta_ : the RBF width used; n_features_in_, feature_names_in_ : as scikit-learn's.
    """

    def __init__(self, kernel="rbf", delta="scale", bias=True, a0=1e-6, b0=None, e0=1e-6, f0=None, tol=1e-9,
                 max_sweeps=20000, prune=True, progress_bar=None, schedule="fast", compiled=False):
        self.kernel = kernel
        self.delta = delta
        self.bias = bias
        self.a0 = a0
        self.b0 = b0
        self.e0 = e0
        self.f0 = f0
        self.tol = tol
        self.max_sweeps = max_sweeps
        self.prune = prune
        self.progress_bar = progress_bar
        self.schedule = schedule
        self.compiled = compiled

    def _problems(self, X, y):
        from .models import rvm

        X, y = validate_data(self, X, y, y_numeric=True, dtype=np.float64, ensure_min_samples=2)
        return X, [(rvm.regression, y.astype(np.float64), dict(a0=self.a0, b0=self.b0, e0=self.e0, f0=self.f0))]

    def _adopt(self, results, n_train):
        self.result_ = results[0]
        self._finish(results, n_train)
        self._set_linear(results, single=True)
        self.elbo_ = self.result_.elbo
        self.n_iter_ = self.result_.num_sweeps

    def predict(self, X, return_std=False):
        """The predictive mean; with ``return_std`` also the standard deviation of a new observation."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        mean, var = self.result_.predict(self._design(X))
        mean = np.asarray(mean)
        return (mean, np.sqrt(np.asarray(var))) if return_std else mean

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = self.kernel == "precomputed"
        return tags


class RVC(ClassifierMixin, _RVMBase):
    """Relevance vector classification, any labels.

    Labels follow scikit-learn's convention (as ``LogisticRegression``): any values ``np.unique``
    can sort (numbers, strings, booleans) become ``classes_ = np.unique(y)``; the models are
    fitted to their indices in ``classes_`` (0/1, or 0, ..., C-1), and ``predict`` returns labels
    from ``classes_``. String labels are labels, never numbers: ["1", "0"] are the classes "0"
    and "1". (The NumPyro models themselves, ``rvm.classification`` and ``rvm.multiclass``, take
    numeric labels only and refuse strings.)

    Two classes: the variational RVM with the Jaakkola-Jordan bound (``rvm.classification``),
    ``classes_[1]`` the positive class. Three or more: ``multi_class="multinomial"`` (default)
    the multinomial probit RVM (``rvm.multiclass``, Girolami & Rogers 2006), one ARD weight
    vector per class in one model; ``"ovr"`` one binary RVM per class against the rest, their
    probabilities normalised to sum to one.

    Parameters
    ----------
    kernel, delta, bias, a0, b0, tol, max_sweeps, prune, progress_bar, schedule, compiled : as :class:`RVR`.
    multi_class : "multinomial" or "ovr" (three or more classes).

    Attributes
    ----------
    classes_ : the labels, sorted.
    result_ : the fitted :class:`ppl_sbl.CAVIResult` (two classes, or the multinomial model);
        results_ : the list of results (one per class with "ovr").
    relevance_, relevance_vectors_, n_relevance_vectors_ : as :class:`RVR` (the union over the
        classes' models).
    coef_, intercept_ : kernel "linear": (1, n_features) and (1,) for two classes, else one row per class.
    elbo_, n_iter_ : the fit's ELBO and sweeps (arrays, one per class, with "ovr").
    """

    def __init__(self, kernel="rbf", delta="scale", bias=True, a0=1e-6, b0=None, tol=1e-9, max_sweeps=20000,
                 prune=True, progress_bar=None, schedule="fast", multi_class="multinomial", compiled=False):
        self.kernel = kernel
        self.delta = delta
        self.bias = bias
        self.a0 = a0
        self.b0 = b0
        self.tol = tol
        self.max_sweeps = max_sweeps
        self.prune = prune
        self.progress_bar = progress_bar
        self.schedule = schedule
        self.compiled = compiled
        self.multi_class = multi_class

    def _problems(self, X, y):
        from .models import rvm

        if self.multi_class not in MULTI_CLASS:
            raise ValueError(f"`multi_class` must be one of {MULTI_CLASS}; got {self.multi_class!r}.")
        X, index = _classifier_data(self, X, y)
        priors = dict(a0=self.a0, b0=self.b0)
        C = len(self.classes_)
        if C == 2:
            return X, [(rvm.classification, index.astype(np.float64), priors)]
        if self.multi_class == "multinomial":
            return X, [(rvm.multiclass, index, priors)]
        return X, [(rvm.classification, (index == c).astype(np.float64), priors) for c in range(C)]

    def _adopt(self, results, n_train):
        self.results_ = results
        single = len(results) == 1
        self.result_ = results[0] if single else None
        self._finish(results, n_train)
        if self.kernel == "linear":
            self._set_linear(results, single=False)
        elbos = np.array([r.elbo for r in results])
        sweeps = np.array([r.num_sweeps for r in results])
        self.elbo_ = float(elbos[0]) if single else elbos
        self.n_iter_ = int(sweeps[0]) if single else sweeps

    def predict_proba(self, X):
        """Class probabilities, columns in the order of ``classes_``, with q(w) integrated out."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        Phi = self._design(X)
        if len(self.classes_) == 2:
            p1 = np.asarray(self.result_.predict(Phi))
            return np.column_stack([1.0 - p1, p1])
        if len(self.results_) == 1:
            return np.asarray(self.result_.predict(Phi))
        P = np.column_stack([np.asarray(r.predict(Phi)) for r in self.results_])
        return P / np.maximum(P.sum(axis=1, keepdims=True), 1e-300)

    def predict(self, X):
        """The most probable class."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = self.kernel == "precomputed"
        return tags


# ----------------------------------------------------------------------------------------------
# The supervised Bayesian GPLVM
# ----------------------------------------------------------------------------------------------
class GPLVMClassifier(ClassifierMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Classification with the supervised Bayesian GPLVM (Sauer's thesis, chapter 5): labels coded
    1-of-K in {-1, 1} as the outputs Z of :func:`ppl_sbl.models.gplvm.fit` (any labels).

    Parameters
    ----------
    latent_dim, num_inducing, prior_kernel, snr, optimize_prior, max_steps, optimizer, seed :
        passed to :func:`ppl_sbl.models.gplvm.fit` (``prior_kernel``: "rbf", "linear", "matern32";
        ``optimizer``: None (natural-gradient sweeps with the prior fixed), "natural" or "lbfgs").
        ``latent_dim`` and ``num_inducing`` are capped at the data's features and samples.
        The fit maximises the bound on the *training* labels; with the signal-to-noise ratio
        fixed high, the further it climbs, the fewer latent dimensions ARD keeps, and test
        accuracy can fall: ``max_steps`` and ``optimizer`` are worth a cross-validation
        (``GridSearchCV``).
    classifier : "posterior" (5.29: the class with the largest predictive mean, averaged over
        ``num_samples`` draws of q(x*)) or "knn" (``n_neighbors``-nearest neighbours on the latent
        means of the training points, with eq. 5.32 for new inputs).

    Attributes
    ----------
    classes_ : the labels, sorted; result_ : the :class:`ppl_sbl.models.gplvm.GPLVMResult`;
    n_iter_ : its steps; elbo_ : its bound.
    """

    def __init__(self, latent_dim=10, num_inducing=30, prior_kernel="rbf", classifier="posterior", n_neighbors=1,
                 num_samples=64, snr=100.0, optimize_prior=False, max_steps=300, optimizer=None, seed=0):
        self.latent_dim = latent_dim
        self.num_inducing = num_inducing
        self.prior_kernel = prior_kernel
        self.classifier = classifier
        self.n_neighbors = n_neighbors
        self.num_samples = num_samples
        self.snr = snr
        self.optimize_prior = optimize_prior
        self.max_steps = max_steps
        self.optimizer = optimizer
        self.seed = seed

    def fit(self, X, y):
        compilation_cache()  # JAX's persistent compilation cache, unless the user configured or disabled it
        from .datasets import one_of_k
        from .models import gplvm

        if self.classifier not in ("posterior", "knn"):
            raise ValueError(f"`classifier` must be 'posterior' or 'knn'; got {self.classifier!r}.")
        X, index = _classifier_data(self, X, y)
        Z = one_of_k(index, np.arange(len(self.classes_)))
        self.result_ = _quiet(gplvm.fit, X, Z, model="supervised", latent_dim=min(int(self.latent_dim), X.shape[1]),
                                 num_inducing=min(int(self.num_inducing), X.shape[0]), prior_kernel=self.prior_kernel,
                                 snr=self.snr, optimize_prior=self.optimize_prior, max_steps=self.max_steps,
                                 optimizer=self.optimizer, seed=self.seed)
        if not self.result_.converged:
            _warn_unconverged("GPLVMClassifier", "max_steps", self.max_steps)
        self.elbo_ = float(self.result_.elbo)
        self.n_iter_ = int(len(self.result_.elbo_trace))
        self._n_features_out = int(np.asarray(self.result_.latent_mean).shape[1])
        if self.classifier == "knn":
            from sklearn.neighbors import KNeighborsClassifier

            self.knn_ = KNeighborsClassifier(n_neighbors=min(self.n_neighbors, X.shape[0])).fit(
                self.result_.latent_mean, index)
        return self

    def _inputs(self, X):
        check_is_fitted(self)
        return validate_data(self, X, reset=False, dtype=np.float64)

    def transform(self, X):
        """Latent means of the inputs (eq. 5.32), (n, latent_dim)."""
        return np.asarray(self.result_.transform(self._inputs(X)))

    def predict_proba(self, X):
        """"posterior": the share of the draws of q(x*) whose predictive mean is largest for each
        class; "knn": the share of the neighbours in each class. Columns follow ``classes_``."""
        X = self._inputs(X)
        if self.classifier == "knn":
            return self.knn_.predict_proba(np.asarray(self.result_.transform(X)))
        _, draws = self.result_.predict(X, num_samples=self.num_samples, seed=self.seed, return_draws=True)
        winners = np.asarray(draws).argmax(-1)  # (num_samples, n)
        return np.stack([np.mean(winners == k, 0) for k in range(len(self.classes_))], 1)

    def predict(self, X):
        """The class of the largest predictive mean ("posterior") or the neighbours' vote ("knn")."""
        X = self._inputs(X)
        if self.classifier == "knn":
            return self.classes_[self.knn_.predict(np.asarray(self.result_.transform(X)))]
        return self.classes_[np.asarray(self.result_.predict(X, num_samples=self.num_samples, seed=self.seed)).argmax(1)]


# ----------------------------------------------------------------------------------------------
# Super-sparse machines (Biggio et al.)
# ----------------------------------------------------------------------------------------------
class _SuperSparseBase(BaseEstimator):
    """Shared pieces of :class:`SuperSparseRegressor` and :class:`SuperSparseClassifier`."""

    def __init__(self, m=4, similarity="rbf", gamma="scale", lam=1e-3, max_steps=200, tol=1e-7, repulsion=1.0, seed=0,
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

        self.gamma_ = _rbf_width(self.gamma, X, "gamma") if self.similarity == "rbf" else None
        result = super_sparse.fit(X, t, m=self.m, similarity=self.similarity, gamma=self.gamma_,
                                  lam=self.lam, sample_weight=sample_weight, max_steps=self.max_steps, tol=self.tol,
                                  step_size=self.step_size, repulsion=self.repulsion, seed=self.seed,
                                  gradient=self.gradient)
        if result.stop_reason == "max_steps":
            _warn_unconverged(type(self).__name__, "max_steps", self.max_steps)
        return result

    def _inputs(self, X):
        check_is_fitted(self)
        return validate_data(self, X, reset=False, dtype=np.float64)

    @staticmethod
    def _weighted(X, y, sample_weight):
        """The samples of positive weight and their weights (a weight of 0 takes a sample out of (2))."""
        if sample_weight is None:
            return X, y, None
        v = _sample_weights(sample_weight, X.shape[0])
        if not np.any(v > 0):
            raise ValueError("`sample_weight` is zero for every sample; give some samples a positive weight.")
        keep = v > 0
        return X[keep], y[keep], v[keep]

    def _sklearn_expected_failed_checks(self):
        """The scikit-learn estimator checks that do not apply, with the reason."""
        return {"check_sample_weight_equivalence_on_dense_data":
                "the initial prototypes are m training samples drawn at random, and repeating samples changes the "
                "draw, so integer weights and repeated samples start the non-convex objective (2) at different "
                "prototypes and reach different local minima"}

    @property
    def prototypes_(self):
        """The virtual prototypes, (m, d); one-vs-all: all classes' stacked, (K m, d)."""
        check_is_fitted(self)
        return np.concatenate([r.prototypes for r in self.results_], axis=0)

    @property
    def similarity_evaluations_per_point_(self):
        """Similarity evaluations per prediction: m (K m one-vs-all for K > 2 classes)."""
        check_is_fitted(self)
        return int(sum(r.m for r in self.results_))


class SuperSparseRegressor(RegressorMixin, _SuperSparseBase):
    """Super-sparse regression (Biggio et al.): ``f(x) = sum_j beta_j s(x, c_j) + b`` with ``m``
    learned virtual prototypes (:func:`ppl_sbl.models.super_sparse.fit`).

    Parameters
    ----------
    m : number of virtual prototypes (similarity evaluations per prediction).
    similarity : "rbf" (``exp(-gamma ||x - c||^2)``) or a callable ``s(X, C) -> (n, m)``.
    gamma : the RBF's ``gamma``: "scale" (default, 1 / (n_features X.var())), "auto" (1 /
        n_features) or a positive number.  lam : the ridge penalty ``lambda`` of (2).
    max_steps, tol, repulsion, seed, step_size, gradient : passed to the fit.

    Attributes
    ----------
    result_ : the fitted :class:`ppl_sbl.models.super_sparse.SuperSparseResult`.
    """

    def fit(self, X, y, sample_weight=None):
        compilation_cache()  # JAX's persistent compilation cache, unless the user configured or disabled it
        X, y = validate_data(self, X, y, y_numeric=True, dtype=np.float64, ensure_min_samples=2)
        X, y, sample_weight = self._weighted(X, y.astype(np.float64), sample_weight)
        self.result_ = self._fit_one(X, y, sample_weight)
        self.results_ = [self.result_]
        return self

    def predict(self, X):
        """``f(x)`` at the rows of X."""
        X = self._inputs(X)
        return np.asarray(self.result_.decision_function(X))


class SuperSparseClassifier(ClassifierMixin, _SuperSparseBase):
    """Super-sparse classification (Biggio et al.): the squared loss (2) fitted to labels coded
    -1/+1 (``classes_[1]`` is +1), with ``m`` learned virtual prototypes; one-vs-all (m prototypes
    per class) for more than two classes. Any labels.

    Parameters
    ----------
    m : number of virtual prototypes (per class for more than two classes).
    similarity : "rbf" (``exp(-gamma ||x - c||^2)``) or a callable ``s(X, C) -> (n, m)``.
    gamma : the RBF's ``gamma``: "scale" (default, 1 / (n_features X.var())), "auto" (1 /
        n_features) or a positive number.  lam : the ridge penalty ``lambda`` of (2).
    max_steps, tol, repulsion, seed, step_size, gradient : passed to the fit.

    Attributes
    ----------
    classes_ : the labels, sorted.
    results_ : the fitted :class:`ppl_sbl.models.super_sparse.SuperSparseResult` (one, or one per
        class one-vs-all); ``result_`` the single one for two classes (None otherwise).
    """

    def fit(self, X, y, sample_weight=None):
        compilation_cache()  # JAX's persistent compilation cache, unless the user configured or disabled it
        X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_samples=2)
        check_classification_targets(y)
        X, y, sample_weight = self._weighted(X, y, sample_weight)
        classes = np.unique(y)
        if len(classes) < 2:
            raise ValueError(f"`y` holds only one class ({classes[0]!r}); a classifier needs samples of at least "
                             "two classes.")
        self.classes_ = classes
        positives = [classes[1]] if len(classes) == 2 else list(classes)
        self.results_ = [self._fit_one(X, np.where(y == c, 1.0, -1.0), sample_weight) for c in positives]
        self.result_ = self.results_[0] if len(classes) == 2 else None
        return self

    def decision_function(self, X):
        """f(x) for ``classes_[1]`` (n,) with two classes; one column per class (n, K) otherwise."""
        X = self._inputs(X)
        f = np.column_stack([np.asarray(r.decision_function(X)) for r in self.results_])
        return f[:, 0] if len(self.classes_) == 2 else f

    def predict(self, X):
        """The class of the largest decision value."""
        f = self.decision_function(X)
        if len(self.classes_) == 2:
            return self.classes_[(f > 0).astype(int)]
        return self.classes_[np.argmax(f, axis=1)]
