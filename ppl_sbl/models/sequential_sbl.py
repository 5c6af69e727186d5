"""Sequential sparse Bayesian learning (Faul & Pilikos; Tipping & Faul 2003).

The model, over the active set a of a dictionary D (N samples x M candidate functions)::

    c_m ~ N(0, 1/alpha_m)  for m in a,     y_n ~ N(d_n^T c, sigma^2),

with the precisions alpha (alpha_m = inf: function m is out of the program) and optionally the
noise variance sigma^2 set by type-II maximum likelihood: they maximise the log marginal likelihood

    L = log N(y | 0, C),  C = sigma^2 I + D_a A^-1 D_a^T                       (section 2)

The posterior q(c) = N(mu, Sigma), Sigma = (A + D_a^T D_a / sigma^2)^-1, mu = Sigma D_a^T y /
sigma^2, is exact given alpha, so the ELBO of :func:`model` and :func:`guide` equals L for every
draw (``result.check_guide()`` confirms it against NumPyro's ``Trace_ELBO``).

:func:`fit` is the fast marginal likelihood maximisation of Tipping & Faul (2003): in terms of
the sparsity and quality factors S_m = d_m^T C^-1 d_m and Q_m = d_m^T C^-1 y (and s_m = alpha_m
S_m / (alpha_m - S_m), q_m = alpha_m Q_m / (alpha_m - S_m) for active m; s = S, q = Q otherwise)
the best alpha_m given the rest is s_m^2 / (q_m^2 - s_m) where q_m^2 > s_m, and inf otherwise.
Each step makes the single move (add m, re-estimate alpha_m, or delete m) with the largest
exact gain in L (by default among the moves Tipping's SparseBayes counts as significant, and
until none is left; with ``tol``, among all of them until none gains more than tol |L|); Sigma, mu, S and Q follow by rank-one updates (T&F 2003, appendix), never by
refactorising C (a K x K refactorisation every few hundred moves and before stopping keeps them
exact on ill-conditioned dictionaries). :func:`add_sample` takes a new sample (section 3 and the appendix of Faul &
Pilikos), :func:`add_basis` new candidate functions, :func:`expected_delta_L` the expected change
of L at a point not yet sampled (section 4), the uncertainty map of the image experiment.

Notation: ``D`` the design matrix (or a :class:`ppl_sbl.basis.Dictionary` over P points of which
the samples are ``rows``), ``y`` the samples, ``noise_var`` = sigma^2, ``beta`` = 1 / sigma^2,
``active`` the indices of the functions in the model (in the order of ``mu`` and ``Sigma``).

Misprints in the paper (each formula here is checked against a direct computation in the tests):
in the appendix's updates of S and Q the factor inside the brackets is 1/sigma^2, not
1/sigma*^2; in section 4, sigma-bar is a variance that the formula uses as a standard deviation,
and log 1/sqrt(2 pi sigma*) means log 1/(sqrt(2 pi) sigma*).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Any, Optional

import numpy as np
import numpyro
import numpyro.distributions as dist
import scipy.linalg
import scipy.linalg.lapack
import scipy.sparse
import scipy.sparse.csgraph

from ppl_sbl import basis as _basis
from ppl_sbl.result import ResultMethods
from ppl_sbl.saving import Saveable
from ppl_sbl.validation import check_positive, warn_unconverged

LOG_2PI = math.log(2.0 * math.pi)
_REFRESH_BLOCK = 256  # columns of D^T D_a F^T formed at a time by an exact refresh

__all__ = [
    "model",
    "guide",
    "fit",
    "resume",
    "add_sample",
    "add_basis",
    "predict",
    "expected_delta_L",
    "neighbour_statistics",
    "augmented_variance",
    "log_marginal_likelihood",
    "SBLState",
]


# ----------------------------------------------------------------------------------------------
# The NumPyro program and its exact guide
# ----------------------------------------------------------------------------------------------
def model(D_active, y=None, *, alpha, noise_var):
    """y ~ N(D_a c, sigma^2 I), c_m ~ N(0, 1 / alpha_m) over the active functions only.

    ``D_active`` (N, K): the active columns of the design matrix; ``alpha`` (K,) their precisions
    and ``noise_var`` = sigma^2, both fixed (type-II maximum likelihood parameters, not sites).
    """
    D_active = np.asarray(D_active, dtype=np.float64)
    alpha = np.asarray(alpha, dtype=np.float64)
    c = numpyro.sample("c", dist.Normal(0.0, 1.0 / np.sqrt(alpha)).to_event(1))
    with numpyro.plate("data", D_active.shape[0]):
        numpyro.sample("y", dist.Normal(D_active @ c, math.sqrt(noise_var)), obs=y)


def guide(D_active, y=None, *, alpha, noise_var, mu, Sigma):
    """q(c) = N(mu, Sigma), the exact posterior given alpha and sigma^2."""
    numpyro.sample("c", dist.MultivariateNormal(np.asarray(mu), covariance_matrix=np.asarray(Sigma)))


# ----------------------------------------------------------------------------------------------
# State
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class SBLState(ResultMethods, Saveable):
    """The state of the sequential SBL: everything :func:`fit`, :func:`add_sample` and
    :func:`add_basis` need to go on, and the fitted model.

    Attributes
    ----------
    dictionary : ppl_sbl.basis.Dictionary
        The candidate functions at P points (for a plain design matrix, P = N and the points are
        the samples).
    rows : (N,) int
        The point of each sample (-1: a sample added by value, see ``extra_rows``).
    y : (N,)
    extra_rows : (E, M) array
        Dictionary rows of the samples added by value (``rows == -1``, in order).
    noise_var : float
    active : (K,) int
        The functions in the model, in the order of ``mu`` and ``Sigma``.
    alpha : (M,)
        Precisions; inf for the functions out of the model.
    mu, Sigma : (K,), (K, K)
        The posterior of the active coefficients.
    S, Q : (M,)
        Sparsity and quality factors d_m^T C^-1 d_m and d_m^T C^-1 y of every function.
    log_marginal_likelihood : float
        L for the current alpha and sigma^2 (exact: recomputed from the Gram matrix of the active
        functions at the end of a fit; after :func:`add_sample`, the old L plus delta_L).
    trace : list of float
        L after every move (the first entry: the model with no function).
    moves : list of (str, int)
        ("add" | "update" | "delete" | "noise", function index or -1; "sample", point or -1).
    trace_seconds : list of float
        Seconds since the start of the last :func:`fit`/:func:`resume` at each entry of the
        trace it added.
    refresh_drift : list of (int, float)
        At each exact refresh (see :func:`resume`): the move count and how far the L accumulated
        from the moves' gains had drifted from L recomputed from scratch (rounding of the rank-one
        updates; large only for ill-conditioned dictionaries).
    rollbacks : list of (int, float)
        Each time an exact refresh found L below the best exact L of the fit by more than the
        rounding of the two evaluations (moves chosen on drifted statistics): the move count and by
        how much; those moves were undone (see :func:`resume`).
    converged : bool
    stop_reason : str
        "practical" (the default rule: no significant move, see :func:`resume`), "tolerance" (with
        ``tol``: the largest gain is at most tol * max(1, |L|)), "rounding" (it is below the
        rounding level of the updated statistics, see :func:`resume`), "max_steps", or
        "ill-conditioned" (not converged: the exact statistics of some function are NaN, an
        active function nearly collinear with others on an ill-conditioned dictionary).
    """

    dictionary: Any
    rows: np.ndarray
    y: np.ndarray
    extra_rows: np.ndarray
    noise_var: float
    active: np.ndarray
    alpha: np.ndarray
    mu: np.ndarray
    # Sigma is held as a matrix and the rank-one corrections (coef, x) of the samples added since
    # (Sigma = _sigma + sum coef x x^T), formed on first use: add_sample then costs O(K) per
    # pending correction instead of a K x K copy
    _sigma: np.ndarray
    S: np.ndarray
    Q: np.ndarray
    log_marginal_likelihood: float
    trace: list
    moves: list
    converged: bool = False
    stop_reason: str = ""
    trace_seconds: list = dataclasses.field(default_factory=list)
    refresh_drift: list = dataclasses.field(default_factory=list)
    rollbacks: list = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    # cached statistics: D^T y and the sum of y^2
    Dty: Optional[np.ndarray] = None
    yty: float = 0.0
    _sigma_updates: tuple = ()

    _MAX_PENDING = 64  # corrections held before add_sample forms Sigma

    @property
    def Sigma(self):
        """(K, K): the posterior covariance of the active coefficients."""
        if self._sigma_updates:
            out = np.array(self._sigma)  # the earlier states share _sigma: never modify it
            self._sigma_into(out)
            self._sigma, self._sigma_updates = out, ()
        return self._sigma

    def _sigma_into(self, out):
        """Write Sigma into ``out`` (K, K), applying the pending corrections."""
        if out is not self._sigma:
            out[...] = self._sigma
        for coef, x in self._sigma_updates:
            _Work._rank_one(out, coef, x)

    def _sigma_matvec(self, v, nz=None):
        """Sigma v without forming Sigma (``nz``: the nonzeros of v, if few)."""
        if nz is None:
            out = self._sigma @ v
        else:
            out = self._sigma[:, nz] @ v[nz]
        for coef, x in self._sigma_updates:
            out = out + coef * x * float(x @ v)
        return out

    # the shared result interface (``compare``, ``check_guide``) ------------------------------
    @property
    def num_samples(self):
        return len(self.y)

    @property
    def elbo(self):
        """The ELBO of the exact guide: the log marginal likelihood."""
        return self.log_marginal_likelihood

    @property
    def elbo_exact(self):
        return None

    bound = "none"

    @property
    def relevant(self):
        return np.isfinite(self.alpha)

    @property
    def effective_parameters(self):
        """sum_k 1 - alpha_k Sigma_kk (well-determined parameters)."""
        return float(np.sum(1.0 - self.alpha[self.active] * np.diag(self.Sigma)))

    @property
    def elbo_trace(self):
        return np.asarray(self.trace)

    @property
    def program(self):
        return model

    @property
    def model(self):
        """The NumPyro program (:func:`model`); the same as ``program``."""
        return model

    converged = True  # a state is the exact fixed point of the moves made so far

    @property
    def guide(self):
        """:func:`guide` with this state's mu and Sigma."""
        return functools.partial(guide, mu=self.mu, Sigma=self.Sigma)

    @property
    def args(self):
        return (design_rows(self, np.arange(self.num_samples))[:, self.active], self.y)

    @property
    def kwargs(self):
        return {"alpha": self.alpha[self.active], "noise_var": self.noise_var}

    def check_guide(self, num_particles=100, seed=0, num_se=4.0, rtol=1e-8):
        """:func:`ppl_sbl.check_guide`: NumPyro's Monte Carlo ``Trace_ELBO`` of :func:`model` and
        :func:`guide` against L. Every draw gives L exactly (the guide is the exact posterior), so
        they must agree to ``rtol`` relative."""
        return super().check_guide(num_particles=num_particles, seed=seed, num_se=num_se, rtol=rtol)

    inference = "type-II maximum likelihood (fast marginal likelihood), exact Gaussian guide"

    def sample(self, key, num_samples):
        """Draws of the active coefficients from q(c) = N(mu, Sigma): {"c": (num_samples, K)}."""
        import jax

        draws = jax.random.multivariate_normal(key, self.mu, self.Sigma, shape=(int(num_samples),),
                                               method="eigh")
        return {"c": np.asarray(draws)}

    def predict(self, rows):
        """Predictive mean and variance at dictionary points or rows, eq. (1)."""
        return predict(self, rows)


# ----------------------------------------------------------------------------------------------
# Rows of the design matrix, products with it over the samples
# ----------------------------------------------------------------------------------------------
def _point_rows(state, rows):
    """Dense dictionary rows for ``rows``: int point indices or an (k, M) array of rows."""
    rows = np.asarray(rows)
    if rows.dtype.kind in "iu":
        return state.dictionary.rows(rows.reshape(-1))
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim == 1:
        rows = rows[None, :]
    if rows.shape[1] != state.dictionary.shape[1]:
        raise ValueError(f"`rows` must have one entry per dictionary function ({state.dictionary.shape[1]}); "
                         f"got rows of length {rows.shape[1]}.")
    return rows


def design_rows(state, samples):
    """Dense rows of the design matrix (samples x M) for the given sample indices."""
    samples = np.asarray(samples, dtype=np.int64)
    out = np.empty((len(samples), state.dictionary.shape[1]))
    pts = state.rows[samples]
    by_point = pts >= 0
    if by_point.any():
        out[by_point] = state.dictionary.rows(pts[by_point])
    if (~by_point).any():
        extra_index = np.cumsum(state.rows < 0) - 1
        out[~by_point] = state.extra_rows[extra_index[samples[~by_point]]]
    return out


class _Design:
    """The design matrix over the samples, D[n, m] = d_m(x_n), through the dictionary."""

    def __init__(self, dictionary, rows, extra_rows, prefer_sparse=False):
        self.dictionary = dictionary
        # products through ``sparse`` (built once, O(nonzeros)) for a run of many moves; a single
        # product (add_sample) goes through the dictionary
        self.prefer_sparse = prefer_sparse
        self.rows = np.asarray(rows, dtype=np.int64)
        self.by_point = self.rows >= 0
        self.point_rows = self.rows[self.by_point]
        self.extra = np.asarray(extra_rows, dtype=np.float64).reshape(-1, dictionary.shape[1])
        self.n = len(self.rows)
        # a point sampled twice adds twice (np.add.at); otherwise a plain scatter
        self.unique = len(np.unique(self.point_rows)) == len(self.point_rows)

    def _scatter(self, v):
        full = np.zeros((self.dictionary.shape[0],) + v.shape[1:])
        if self.unique:
            full[self.point_rows] = v[self.by_point]
        else:
            np.add.at(full, self.point_rows, v[self.by_point])
        return full

    @functools.cached_property
    def dense(self):
        """The design over the samples as a dense (N, M) array where the dictionary is a dense
        matrix (``D`` itself when the samples are its rows in order), else None."""
        if not isinstance(self.dictionary, _basis.DenseDictionary):
            return None
        D = self.dictionary.D
        if not len(self.extra) and self.n == D.shape[0] and np.array_equal(self.rows, np.arange(self.n)):
            return D
        out = np.empty((self.n, D.shape[1]))
        out[self.by_point] = D[self.point_rows]
        out[~self.by_point] = self.extra
        return out

    def matvec(self, x):
        """D x over the samples: x of shape (M,) or (M, k) gives (N,) or (N, k)."""
        x = np.asarray(x, dtype=np.float64)
        if self.prefer_sparse and self.dense is not None:
            return self.dense @ x
        if self.prefer_sparse and self.sparse is not None:  # over the samples only
            return self.sparse @ x
        out = np.empty((self.n,) + x.shape[1:])
        if self.by_point.any():
            op = self.dictionary.matvec if x.ndim == 1 else self.dictionary.matmat
            out[self.by_point] = op(x)[self.point_rows]
        if len(self.extra):
            out[~self.by_point] = self.extra @ x
        return out

    def rmatvec(self, v):
        """D^T v: v of shape (N,) or (N, k) gives (M,) or (M, k)."""
        v = np.asarray(v, dtype=np.float64)
        if self.prefer_sparse and self.dense is not None:
            return self.dense.T @ v
        if self.prefer_sparse and self.sparse is not None:
            return self.sparse_rows_t @ v
        op = self.dictionary.rmatvec if v.ndim == 1 else self.dictionary.rmatmat
        out = op(self._scatter(v))
        if len(self.extra):
            out = out + self.extra.T @ v[~self.by_point]
        return out

    matmat = matvec
    rmatmat = rmatvec

    def columns(self, idx):
        """The design matrix's columns ``idx`` over the samples, dense (N, len(idx))."""
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if self.prefer_sparse and self.dense is not None:
            return self.dense[:, idx]
        X = np.zeros((self.dictionary.shape[1], len(idx)))
        X[idx, np.arange(len(idx))] = 1.0
        return self.matvec(X)

    def active_matvec(self, active, z):
        """D_a z over the samples for coefficients z of the functions ``active``."""
        x = np.zeros(self.dictionary.shape[1])
        np.add.at(x, active, z)
        return self.matvec(x)

    @functools.cached_property
    def sparse(self):
        """The design over the samples as a ``scipy.sparse`` CSR matrix (N, M) where the dictionary
        is sparse, else None."""
        if not isinstance(self.dictionary, _basis.SparseDictionary):
            return None
        parts = [self.dictionary._rows[self.point_rows]]
        if len(self.extra):
            parts.append(scipy.sparse.csr_matrix(self.extra))
        stacked = scipy.sparse.vstack(parts, format="csr")
        order = np.empty(self.n, dtype=np.int64)  # the samples' rows within ``stacked``
        order[self.by_point] = np.arange(len(self.point_rows))
        order[~self.by_point] = len(self.point_rows) + np.arange(len(self.extra))
        return stacked[order]

    @functools.cached_property
    def sparse_rows_t(self):
        """``sparse`` transposed, in CSR form (M, N)."""
        return self.sparse.T.tocsr()

    @functools.cached_property
    def sparse_gram(self):
        """D^T D (M, M) in CSC form where the dictionary is sparse and it has at most 16 times the
        nonzeros of D (tile-local dictionaries), else None."""
        if self.sparse is None:
            return None
        if np.sum(np.diff(self.sparse.indptr).astype(np.float64) ** 2) > 16 * max(self.sparse.nnz, 1):
            return None
        return (self.sparse_rows_t @ self.sparse).tocsc()

    @functools.cached_property
    def sparse_columns(self):
        """``sparse`` in CSC form, for taking columns."""
        return None if self.sparse is None else self.sparse.tocsc()

    def sq_norms(self):
        """||d_m||^2 over the samples for every m (a point sampled twice counts twice)."""
        counts = np.bincount(self.point_rows, minlength=self.dictionary.shape[0]).astype(np.float64)
        out = self.dictionary.weighted_sq_norms(counts)
        if len(self.extra):
            out = out + np.sum(self.extra**2, axis=0)
        return out


def _design(state, prefer_sparse=False):
    return _Design(state.dictionary, state.rows, state.extra_rows, prefer_sparse)


# ----------------------------------------------------------------------------------------------
# The gains of the three moves (Tipping & Faul 2003)
# ----------------------------------------------------------------------------------------------
def _small_factors(alpha, S, Q, sigma_diag=None, mu=None):
    """s_m, q_m: S and Q with function m's own contribution taken out (Tipping & Faul 2003).

    Out of the model s = S, q = Q. For an active function two forms are equal: s_m = alpha_m S_m /
    (alpha_m - S_m), q_m = alpha_m Q_m / (alpha_m - S_m), and, from the posterior of c_m given the
    others (precision alpha_m + s_m, mean q_m / (alpha_m + s_m); Sigma and mu as in section 2 of
    Faul & Pilikos, Sigma = (A + D^T D / sigma^2)^-1), s_m = 1 / Sigma_mm - alpha_m,
    q_m = mu_m / Sigma_mm (``sigma_diag`` and ``mu`` in the order of the active entries). The first
    subtracts alpha_m - S_m = alpha_m^2 / (alpha_m + s_m), which falls below the rounding of S_m
    where alpha_m << s_m (a function whose coefficient the data determine, alpha_m -> 0 on
    overlapping dictionaries: S_m computed by updates can then be zero or negative); the second
    subtracts alpha_m from alpha_m + s_m, accurate there. Given ``sigma_diag``, each active function
    takes the form without cancellation: the posterior one where alpha_m Sigma_mm = alpha_m /
    (alpha_m + s_m) < 1/2 (decided by alpha and Sigma, not by S, which may be rounding there).
    """
    finite = np.isfinite(alpha)
    a = np.where(finite, alpha, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        denom = np.where(finite, a - S, 1.0)
        s = np.where(finite, a * S / denom, S)
        q = np.where(finite, a * Q / denom, Q)
        if sigma_diag is not None:
            sd = np.where(finite, sigma_diag, 1.0)
            posterior = finite & (2.0 * a * sd < 1.0)
            s = np.where(posterior, 1.0 / sd - a, s)
            q = np.where(posterior, mu / sd, q)
    return s, q


def _gains(alpha, S, Q, active=None, sigma_diag=None, mu=None):
    """The exact change of L and the new alpha of the best move for every function.

    With l(alpha) = (ln alpha - ln(alpha + s) + q^2 / (alpha + s)) / 2, function m's part of L
    given the others (Tipping & Faul 2003, ref. [6] of Faul & Pilikos, whose section 2 summarises
    the three moves without numbering them), and s_m, q_m from ``_small_factors``
    (``sigma_diag``, ``mu``: the posterior's, in the order of ``active``):

    add (alpha_m = inf, q^2 > s):  dL = ((Q^2 - S) / S + ln(S / Q^2)) / 2
    re-estimate (finite -> a):     dL = l(a) - l(alpha_m), a = s^2 / (q^2 - s)
    delete (finite, q^2 <= s):     dL = -l(alpha_m)

    the last two written without the cancellation of ln(a / alpha_m) against ln((a + s) / (alpha_m
    + s)). ``active``: the indices of the finite alpha, if known (the add formulas are evaluated
    for every function and overwritten on these).
    """
    if active is None:
        active = np.flatnonzero(np.isfinite(alpha))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        Q2 = Q * Q
        theta = Q2 - S  # s = S, q = Q for the functions out of the model
        useful = theta > 0
        ratio = Q2 / S
        gain = np.where(useful, 0.5 * (ratio - 1.0 - np.log(ratio)), -np.inf)
        new = np.where(useful, S * S / np.where(useful, theta, 1.0), np.inf)
        if len(active):
            al = alpha[active]
            s, q = _small_factors(al, S[active], Q[active], sigma_diag, mu)
            th = q**2 - s
            keep = th > 0
            new_a = np.where(keep, s**2 / np.where(keep, th, 1.0), np.inf)
            step = new_a - al
            # l(a) - l(alpha) = (ln(1 + step / alpha) - ln(1 + step / (alpha + s)) - q^2 step / ((a + s)(alpha + s))) / 2
            update = 0.5 * (np.log1p(step / al) - np.log1p(step / (al + s)) - q**2 * step / ((new_a + s) * (al + s)))
            delete = 0.5 * (np.log1p(s / al) - q**2 / (al + s))  # -l(alpha)
            gain[active] = np.where(keep, update, delete)
            new[active] = new_a
    return gain, new


# ----------------------------------------------------------------------------------------------
# Rank-one moves on a mutable workspace
# ----------------------------------------------------------------------------------------------
class _Work:
    """Mutable buffers for a run of moves; ``state()`` hands out an immutable copy."""

    def __init__(self, st: SBLState, keep_gram=True):
        self.st = st
        self.design = _design(st, prefer_sparse=True)
        self.beta = 1.0 / st.noise_var
        self.active = list(int(m) for m in st.active)
        self.pos = {m: k for k, m in enumerate(self.active)}
        self.alpha = st.alpha.copy()
        K = len(self.active)
        cap = max(64, int(1.25 * K))
        # Sigma and mu live in buffers with spare capacity, updated in place (a K x K temporary
        # per move would dominate the cost once K is in the thousands)
        self._Sbuf = np.zeros((cap, cap))
        st._sigma_into(self._Sbuf[:K, :K])
        self._mbuf = np.zeros(cap)
        self._mbuf[:K] = st.mu
        self._abuf = np.zeros(cap, dtype=np.int64)  # the active functions as an array (``a``)
        self._abuf[:K] = self.active
        # B = D^T D_a (M, K) where the design is a dense matrix: the change of S and Q along a
        # coefficient direction z is then B z (O(M K)) rather than two products with the design
        # (O(N M)), and an exact refresh takes D^T D_a F^T from it
        self._Bbuf = self._Abuf = None
        if self.design.dense is not None:
            self._Bbuf = np.zeros((self.design.dense.shape[1], cap))
            self._Abuf = np.zeros((self.design.n, cap), order="F")  # D_a, contiguous columns
            self._fill_cross()
        # D_a^T D_a, for the noise re-estimate and the exact refreshes; without ``keep_gram`` (a fit
        # at fixed noise on a sparse dictionary, where the refreshes take it from D^T D) not held
        self._Gbuf = None
        if keep_gram or self.design.sparse_gram is None:
            self._Gbuf = np.zeros((cap, cap))
            self._fill_gram()
        self._label = self._components()
        self.S = st.S.copy()
        self.Q = st.Q.copy()
        self.L = st.log_marginal_likelihood
        self.trace = list(st.trace)
        self.moves = list(st.moves)
        self.trace_seconds = []
        self.drift = list(st.refresh_drift)
        self.rollbacks = list(st.rollbacks)
        self.noise_var = st.noise_var
        self.sq_norms = None

    def _fill_cross(self):
        """D_a and B = D^T D_a into their buffers (one product with the dense design)."""
        K = len(self.active)
        dense = self.design.dense
        self._Abuf[:, :K] = dense[:, self.a]
        self._Bbuf[:, :K] = dense.T @ self._Abuf[:, :K]

    def active_product(self, z):
        """D_a z over the samples, z of shape (K,) or (K, c)."""
        if self._Abuf is not None:
            return self._Abuf[:, :len(self.active)] @ z
        if z.ndim == 1:
            return self.design.active_matvec(self.a, z)
        X = np.zeros((self.st.dictionary.shape[1], z.shape[1]))
        X[self.a] = z  # the active functions are distinct
        return self.design.matmat(X)

    def _fill_gram(self):
        """D_a^T D_a into the Gram buffer, from B, or D^T D where it is held, else K products."""
        a, K = self.a, len(self.active)
        if self._Bbuf is not None:
            self._Gbuf[:K, :K] = self._Bbuf[a, :K]
        elif self.design.sparse_gram is not None:
            self._Gbuf[:K, :K] = self.design.sparse_gram[a][:, a].toarray()
        else:
            for k, m in enumerate(self.active):
                self._Gbuf[:K, k] = self.design.rmatvec(self._column(m))[a]

    def checkpoint(self):
        """What :meth:`restore` needs to go back to this point: the active set, alpha, sigma^2, L
        and the lengths of the records (O(M), no K x K copy)."""
        return dict(active=self.a.copy(), alpha=self.alpha.copy(), noise_var=self.noise_var, L=self.L,
                    lengths=(len(self.trace), len(self.moves), len(self.trace_seconds), len(self.drift)))

    def restore(self, point):
        """Back to a :meth:`checkpoint`: its active set, alpha and sigma^2, with Sigma, mu, S, Q and
        L recomputed exactly (:meth:`refresh`), the records cut back to its lengths."""
        active = point["active"]
        K = len(active)  # the buffers held K functions at the checkpoint and never shrink
        self.active = [int(m) for m in active]
        self.pos = {m: k for k, m in enumerate(self.active)}
        self._abuf[:K] = active
        self.alpha = point["alpha"].copy()
        self.noise_var, self.beta = point["noise_var"], 1.0 / point["noise_var"]
        if self._Bbuf is not None:
            self._fill_cross()
        if self._Gbuf is not None:
            self._fill_gram()
        n_trace, n_moves, n_seconds, n_drift = point["lengths"]
        del self.trace[n_trace:], self.moves[n_moves:], self.trace_seconds[n_seconds:]
        if self.max_alignment is not None:
            self.init_alignment(self.max_alignment)
        self.refresh()
        del self.drift[n_drift:]  # the restore's own refresh is no drift

    @property
    def Sigma(self):
        K = len(self.active)
        return self._Sbuf[:K, :K]

    @property
    def mu(self):
        return self._mbuf[:len(self.active)]

    @property
    def a(self):
        """The active functions, an int64 view (valid until the next move)."""
        return self._abuf[:len(self.active)]

    @property
    def _label(self):
        """The component label of each active function (see ``_blocks``)."""
        return self._labels

    @_label.setter
    def _label(self, value):
        self._labels = value
        self._blocks_cache = None  # every change of the labels assigns them anew

    @property
    def gram(self):
        """D_a^T D_a: a view of the buffer, or sparse (CSR) from D^T D where none is held."""
        K = len(self.active)
        if self._Gbuf is None:
            return self.design.sparse_gram[self.a][:, self.a].tocsr()
        return self._Gbuf[:K, :K]

    @staticmethod
    def _gram_blocks(G, idx):
        """The blocks G[idx_b, idx_b] (n, k, k) of the dense or sparse Gram matrix ``G``."""
        if isinstance(G, np.ndarray):
            return G[idx[:, :, None], idx[:, None, :]]
        shape = idx.shape + idx.shape[1:]
        r = np.broadcast_to(idx[:, :, None], shape).ravel()
        c = np.broadcast_to(idx[:, None, :], shape).ravel()
        return np.asarray(G[r, c]).reshape(shape)

    def _grow(self, K):
        cap = max(int(1.25 * self._Sbuf.shape[0]) + 64, K)  # modest spare room: Sigma is the largest array
        k = len(self.active)
        # one buffer at a time, so that the peak holds one old K x K buffer beside the new ones
        S = np.zeros((cap, cap))
        S[:k, :k] = self._Sbuf[:k, :k]
        self._Sbuf = S
        if self._Gbuf is not None:
            G = np.zeros((cap, cap))
            G[:k, :k] = self._Gbuf[:k, :k]
            self._Gbuf = G
        if self._Bbuf is not None:
            B = np.zeros((self._Bbuf.shape[0], cap))
            B[:, :k] = self._Bbuf[:, :k]
            self._Bbuf = B
            A = np.zeros((self._Abuf.shape[0], cap), order="F")
            A[:, :k] = self._Abuf[:, :k]
            self._Abuf = A
        m, a = np.zeros(cap), np.zeros(cap, dtype=np.int64)
        m[:k] = self._mbuf[:k]
        a[:k] = self._abuf[:k]
        self._mbuf, self._abuf = m, a

    @staticmethod
    def _rank_one(A, coef, x, chunk=256):
        """A += coef x x^T in place: on the nonzeros of x only where they are few (x lies in one
        or a few components, see ``_blocks``), otherwise a block of rows at a time."""
        nz = np.flatnonzero(x)
        if 2 * len(nz) < len(x):
            A[np.ix_(nz, nz)] += np.multiply.outer(coef * x[nz], x[nz])
            return
        for r in range(0, len(x), chunk):
            A[r:r + chunk] += np.multiply.outer(coef * x[r:r + chunk], x)

    def _column(self, m):
        return self.design.columns([m])[:, 0]

    align_tol = 0.0  # set by :func:`resume`; 0: no function is kept out

    def aligned(self):
        """The functions out of the model whose part outside the model's span is below
        ``align_tol``: S_m sigma^2 / ||d_m||^2 < align_tol (1 for a function orthogonal to the
        active ones, -> 0 as it approaches their span; the rank-one updates carry it to an absolute
        accuracy of a small multiple of eps ||d_m||^2 / sigma^2, less on ill-conditioned
        dictionaries)."""
        if self.sq_norms is None:
            self.sq_norms = self.design.sq_norms()
        out = ~np.isfinite(self.alpha)
        return out & (self.S < self.align_tol * self.beta * self.sq_norms)

    max_alignment = None  # set by :func:`resume`; None: no pairwise guard

    def _block_aligned(self, i, g):
        """Keep out of the model, while function i is in it, every function whose cosine with
        it (over the samples) exceeds ``max_alignment`` in absolute value (``g`` = D^T d_i)."""
        if self.sq_norms is None:
            self.sq_norms = self.design.sq_norms()
        with np.errstate(divide="ignore", invalid="ignore"):
            cosine = np.abs(g) / np.sqrt(self.sq_norms[i] * self.sq_norms)
        aligned = np.flatnonzero(cosine > self.max_alignment)
        aligned = aligned[aligned != i]
        self._blocked_by[int(i)] = aligned
        self._blocked[aligned] += 1

    def init_alignment(self, max_alignment):
        """The pairwise guard of Tipping's SparseBayes: no add of a function nearly collinear
        with an active one (|cosine| > ``max_alignment``); from the active functions held now."""
        self.max_alignment = float(max_alignment)
        self._blocked = np.zeros(self.st.dictionary.shape[1], dtype=np.int64)
        self._blocked_by = {}
        for k, m in enumerate(self.active):
            g = self._Bbuf[:, k] if self._Bbuf is not None else self.design.rmatvec(self._column(m))
            self._block_aligned(m, g)

    def gains(self):
        """``_gains`` of every function, the active ones' small factors from Sigma and mu; no add
        of an ``aligned`` function or one collinear with an active one (gain -inf)."""
        gain, new = _gains(self.alpha, self.S, self.Q, self.a, np.diag(self.Sigma), self.mu)
        if self.align_tol > 0:
            gain[self.aligned()] = -np.inf
        if self.max_alignment is not None:
            gain[(self._blocked > 0) & ~np.isfinite(self.alpha)] = -np.inf
        return gain, new

    def _u(self, z):
        """beta D^T D_a z (M,): the change of the statistics along the coefficient direction z."""
        if self._Bbuf is not None:
            return self.beta * (self._Bbuf[:, :len(self.active)] @ z)
        return self.beta * self.design.rmatvec(self.design.active_matvec(self.a, z))

    # the three moves (Tipping & Faul 2003, appendix; each checked against direct recomputation
    # in the tests) -----------------------------------------------------------------------------
    def add(self, i, alpha_i):
        """Sigma_ii = 1 / (alpha_i + S_i), mu_i = Sigma_ii Q_i; the old block gains Sigma_ii w w^T
        with w = beta Sigma D_a^T phi_i; S_m -= Sigma_ii e_m^2, Q_m -= mu_i e_m with
        e_m = beta phi_m^T phi_i - beta^2 phi_m^T D_a Sigma D_a^T phi_i."""
        phi = self._column(i)
        g = self.design.rmatvec(phi)  # D^T phi_i (M,), its active part D_a^T phi_i
        s_ii = 1.0 / (alpha_i + self.S[i])
        mu_i = s_ii * self.Q[i]
        K = len(self.active)
        if K + 1 > self._Sbuf.shape[0]:
            self._grow(K + 1)
        if K:
            a = self.a
            ga = g[a]
            nz = np.flatnonzero(ga)  # the active functions that share samples with phi_i: few
            Sg = self.Sigma[:, nz] @ ga[nz]
            w = self.beta * Sg  # beta Sigma D_a^T phi_i
            e = self.beta * g - self.beta * self._u(Sg)  # beta phi_m^T (I - beta D_a Sigma D_a^T) phi_i
            self._rank_one(self.Sigma, s_ii, w)
            self._Sbuf[:K, K] = -s_ii * w
            self._Sbuf[K, :K] = -s_ii * w
            self._mbuf[:K] -= mu_i * w
        else:
            e = self.beta * g
        self._Sbuf[K, K] = s_ii
        self._mbuf[K] = mu_i
        self.S -= s_ii * e**2
        self.Q -= mu_i * e
        self.active.append(int(i))
        self._abuf[K] = i
        self.pos[int(i)] = K
        self.alpha[i] = alpha_i
        a = self.a  # the new function is last
        if self._Gbuf is not None:
            self._Gbuf[K, :K + 1] = g[a]
            self._Gbuf[:K + 1, K] = g[a]
        if self._Bbuf is not None:
            self._Bbuf[:, K] = g
            self._Abuf[:, K] = phi
        if self.max_alignment is not None:
            self._block_aligned(i, g)
        # the new function joins (and merges) the components of the functions it shares samples with
        touched = np.unique(self._label[np.flatnonzero(g[a[:K]])])
        if len(touched) == 0:
            new, self._next_label = self._next_label, self._next_label + 1
        else:
            new = int(touched[0])
        if len(touched) > 1:
            self._label[np.isin(self._label, touched)] = new
        self._label = np.append(self._label, new)

    def update(self, j_fn, alpha_new):
        """Re-estimate: kappa = 1 / (Sigma_jj + 1 / (alpha_new - alpha_j)), Sigma -= kappa Sigma_j
        Sigma_j^T, mu -= kappa mu_j Sigma_j, S_m += kappa u_m^2, Q_m += kappa mu_j u_m with
        u_m = beta phi_m^T D_a Sigma_j."""
        j = self.pos[j_fn]
        col = self.Sigma[:, j].copy()
        kappa = 1.0 / (col[j] + 1.0 / (alpha_new - self.alpha[j_fn]))
        mu_j = self.mu[j]
        u = self._u(col)
        self._rank_one(self.Sigma, -kappa, col)
        self.mu[:] -= kappa * mu_j * col
        self.S += kappa * u**2
        self.Q += kappa * mu_j * u
        self.alpha[j_fn] = alpha_new

    def delete(self, j_fn):
        """The re-estimate with alpha_new = inf: kappa = 1 / Sigma_jj."""
        if self.max_alignment is not None:
            self._blocked[self._blocked_by.pop(int(j_fn))] -= 1
        j = self.pos[j_fn]
        col = self.Sigma[:, j].copy()
        s_jj = col[j]
        mu_j = self.mu[j]
        u = self._u(col)
        self._rank_one(self.Sigma, -1.0 / s_jj, col)
        self.mu[:] -= mu_j / s_jj * col
        self.S += u**2 / s_jj
        self.Q += mu_j / s_jj * u
        # the last active function takes the deleted one's place
        last = len(self.active) - 1
        if j != last:
            self._Sbuf[j, :last + 1] = self._Sbuf[last, :last + 1]
            self._Sbuf[:last + 1, j] = self._Sbuf[:last + 1, last]
            self._Sbuf[j, j] = self._Sbuf[last, last]
            self._mbuf[j] = self._mbuf[last]
            self.active[j] = self.active[last]
            self._abuf[j] = self._abuf[last]
            self.pos[self.active[j]] = j
            if self._Gbuf is not None:
                self._Gbuf[j, :last + 1] = self._Gbuf[last, :last + 1]
                self._Gbuf[:last + 1, j] = self._Gbuf[:last + 1, last]
                self._Gbuf[j, j] = self._Gbuf[last, last]
            if self._Bbuf is not None:
                self._Bbuf[:, j] = self._Bbuf[:, last]
                self._Abuf[:, j] = self._Abuf[:, last]
            self._label[j] = self._label[last]
        self._label = self._label[:last]
        self.active.pop()
        del self.pos[j_fn]
        self.alpha[j_fn] = np.inf

    # the noise variance ----------------------------------------------------------------------
    def _components(self):
        """A label per active function: the connected components of D_a^T D_a != 0 (O(K^2))."""
        K = len(self.active)
        self._next_label = K  # labels given to new components from here on
        r, c = self.gram.nonzero()  # dense or sparse; stored zeros do not count
        return scipy.sparse.csgraph.connected_components(
            scipy.sparse.coo_matrix((np.ones(len(r)), (r, c)), shape=(K, K)), directed=False)[1]

    def _blocks(self):
        """The active functions grouped by component, components of equal size stacked ((n_k, k)
        index arrays). Functions in different components share no sample, so Sigma^-1 = A + D_a^T
        D_a / sigma^2 is block-diagonal over them and a factorisation costs sum_c k_c^3 / 3 rather
        than K^3 / 3 (tile-local dictionaries such as the Haar bases split into blocks of at most 4
        or 16 functions; overlapping RBFs are one block). The labels follow the adds (a new
        function merges the components it touches); a delete leaves its component whole, which is
        still block-diagonal, until the next exact refresh recomputes them."""
        if self._blocks_cache is None:
            order = np.argsort(self._label, kind="stable")
            ordered = self._label[order]
            starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
            sizes = np.diff(np.append(starts, len(ordered)))
            self._blocks_cache = [order[starts[sizes == k][:, None] + np.arange(k)] for k in np.unique(sizes)]
        return self._blocks_cache

    def _likelihood_at(self, noise_var, blocks=None):
        """L at one noise variance with alpha fixed, and the block Cholesky factors it comes from
        (see ``_likelihoods``)."""
        L, factors = self._likelihoods([noise_var], blocks)
        return float(L[0]), factors[0]

    def _likelihoods(self, noise_vars, blocks=None, residuals=False):
        """L at each of the noise variances with alpha fixed, and for each the block Cholesky
        factors H = chol chol^T of Sigma^-1 = H = A + D_a^T D_a / sigma^2 it comes from:

            log|C| = N log sigma^2 - sum log alpha + log|H|,
            y^T C^-1 y = ||y - D_a mu||^2 / sigma^2 + mu^T A mu,  mu = H^-1 D_a^T y / sigma^2,

        the second form free of the cancellation in (y^T y - z^T H^-1 z / sigma^2) / sigma^2 that
        loses most digits when sigma^2 is small. All the values are factorised in one stacked call
        (the noise re-estimate tries several): small components padded to one size, larger ones
        by size, components of one function in closed form. ``residuals``: also return ||y - D_a mu||^2 at each value."""
        noise_vars = np.asarray(noise_vars, dtype=np.float64).reshape(-1)
        c = len(noise_vars)
        a = self.a
        N, beta = self.design.n, 1.0 / noise_vars
        if len(a) == 0:
            L = -0.5 * (N * LOG_2PI + N * np.log(noise_vars) + beta * self.st.yty)
            return (L, [None] * c, np.full(c, self.st.yty)) if residuals else (L, [None] * c)
        z = self.st.Dty[a]  # D_a^T y; mu = beta H^-1 z
        G = self.gram
        alpha = self.alpha[a]
        factors = [[] for _ in range(c)]
        logdet, mu = np.zeros(c), np.empty((c, len(a)))
        blocks = self._blocks() if blocks is None else blocks
        for idx in blocks:
            if idx.shape[1] == 1:
                i = idx[:, 0]
                h = beta[:, None] * self._gram_blocks(G, idx)[:, 0, 0][None] + alpha[i][None]  # (c, n_1)
                mu[:, i] = beta[:, None] * z[i][None] / h
                logdet += np.sum(np.log(h), axis=1)
                root = np.sqrt(h)
                for j in range(c):
                    factors[j].append((idx, root[j][:, None, None]))
        # components of 2 to 8 functions in one stack, each padded to the largest size with an
        # identity block (H = chol = 1, z = 0 there: no change to log|H| or mu); larger ones by size
        small = [idx for idx in blocks if 1 < idx.shape[1] <= 8]
        stacks = [idx for idx in blocks if idx.shape[1] > 8]
        if small:
            k = max(idx.shape[1] for idx in small)
            rows = np.cumsum([0] + [len(idx) for idx in small])
            Gb, al, zb = np.zeros((rows[-1], k, k)), np.ones((rows[-1], k)), np.zeros((rows[-1], k))
            for r, idx in zip(rows, small):
                n, kb = idx.shape
                Gb[r:r + n, :kb, :kb] = self._gram_blocks(G, idx)
                al[r:r + n, :kb] = alpha[idx]
                zb[r:r + n, :kb] = z[idx]
            stacks.append((small, rows, Gb, al, zb))
        for item in stacks:
            if isinstance(item, tuple):
                small, rows, Gb, al, zb = item
            else:
                Gb, al, zb = self._gram_blocks(G, item), alpha[item], z[item]  # (n_k, k, k) ...
            k = Gb.shape[1]
            H = beta[:, None, None, None] * Gb[None]  # (c, n_k, k, k)
            H[:, :, np.arange(k), np.arange(k)] += al[None]
            chol = np.linalg.cholesky(H)
            rhs = beta[:, None, None] * zb[None]  # (c, n_k, k)
            if k <= 32:  # small blocks: one stacked LU solve costs less than two stacked calls
                sol = np.linalg.solve(H, rhs[..., None])[..., 0]
            else:  # large blocks (overlapping functions): triangular solves with the factor
                sol = np.empty_like(rhs)
                for j in range(c):
                    for b in range(len(Gb)):
                        sol[j, b] = scipy.linalg.cho_solve((chol[j, b], True), rhs[j, b])
            logdet += 2.0 * np.sum(np.log(np.diagonal(chol, axis1=2, axis2=3)), axis=(1, 2))
            if isinstance(item, tuple):
                for r, idx in zip(rows, small):
                    n, kb = idx.shape
                    mu[:, idx] = sol[:, r:r + n, :kb]
                    for j in range(c):
                        factors[j].append((idx, chol[j, r:r + n, :kb, :kb]))
            else:
                mu[:, item] = sol
                for j in range(c):
                    factors[j].append((item, chol[j]))
        resid = self.st.y[:, None] - self.active_product(mu.T)  # (N, c)
        yCy = beta * np.einsum("nc,nc->c", resid, resid) + mu**2 @ alpha
        L = -0.5 * (N * LOG_2PI + N * np.log(noise_vars) - np.sum(np.log(alpha)) + logdet + yCy)
        if residuals:
            return L, factors, np.einsum("nc,nc->c", resid, resid)
        return L, factors

    @staticmethod
    def _posterior_from(factors):
        """Sigma = F^T F with F = chol^-1, block by block: (index, Sigma-block, F-block) triples."""
        out = []
        for idx, chol in factors or []:
            if idx.shape[1] == 1:  # components of one function: chol is sqrt(H)
                Fb = 1.0 / chol
                out.append((idx, Fb**2, Fb))
                continue
            if len(idx) == 1:
                Fb, _ = scipy.linalg.lapack.dtrtri(chol[0], lower=1)
                Sb, _ = scipy.linalg.lapack.dlauum(Fb, lower=1)  # F^T F in the lower triangle
                Sb = np.tril(Sb) + np.tril(Sb, -1).T
                Fb, Sb = Fb[None], Sb[None]
            else:
                Fb = np.tril(np.linalg.inv(chol))
                Sb = np.swapaxes(Fb, 1, 2) @ Fb
            out.append((idx, Sb, Fb))
        return out

    def _logdet_rounding(self, blocks):
        """First-order bound on the rounding of log|H| computed from H = A + D_a^T D_a / sigma^2 in
        float64: each entry of the second term is rounded by eps relative, which moves log|H| by
        at most eps / sigma^2 sum_ij |Sigma_ij| |D_a^T D_a|_ij (Sigma = H^-1, block-diagonal over
        ``blocks``). Large where sigma^2 is tiny and the Gram blocks are rank-deficient."""
        G, total = self.gram, 0.0
        for idx in blocks:
            total += float(np.sum(np.abs(self._gram_blocks(self.Sigma, idx)) * np.abs(self._gram_blocks(G, idx))))
        return np.finfo(np.float64).eps * self.beta * total

    def reestimate_noise(self, max_halvings=6, min_log_change=0.0):
        """sigma^2 = ||y - D_a mu||^2 / (N - K + sum_k alpha_k Sigma_kk) (Tipping & Faul 2003's
        re-estimate, the zero of dL/dsigma^2 given mu and Sigma), kept only where it does not lower
        L; otherwise the largest step towards it (halving) that does not.

        The residual comes from mu recomputed by the block factorisation at the old value (which
        also gives the reference L the candidates are compared with, by the same formula, so that
        rounding does not decide): where sigma^2 is tiny the residual is of the order of sigma^2,
        and the rank-one updated mu, accurate to a few digits of y, would make the proposal noise.
        The candidates are factorised in one stacked call. No candidate is tried where the
        first-order gain of the proposal is below the rounding of L's evaluation
        (``_logdet_rounding``), nor where the proposal from the rank-one updated mu changes
        ln sigma^2 by less than ``min_log_change``."""
        a = self.a
        N = self.design.n
        old = self.noise_var
        blocks = self._blocks()
        dof = N - len(a) + float(np.sum(self.alpha[a] * np.diag(self.Sigma))) if len(a) else N
        # the proposal from the rank-one updated mu is tried with the reference in one call; it is
        # kept where it agrees with the exact one to 1e-9 of the step (almost always: they part
        # only where sigma^2 is tiny)
        resid = self.st.y - self.active_product(self.mu) if len(a) else self.st.y
        guess = float(resid @ resid) / max(dof, 1e-12)
        if min_log_change > 0 and guess > 0 and abs(math.log(guess / old)) < min_log_change:
            return False
        first = [old, guess] if np.isfinite(guess) and guess > 0 else [old]
        L0, chol0, resid2 = self._likelihoods(first, blocks, residuals=True)
        ref = L0[0]
        proposal = float(resid2[0]) / max(dof, 1e-12)
        if not np.isfinite(proposal) or proposal <= 0:
            return False
        guessed = len(first) == 2 and abs(guess - proposal) <= 1e-9 * abs(proposal - old)
        if guessed:
            proposal = guess
        # dL/dsigma^2 = beta^2 dof (proposal - sigma^2) / 2: the proposal always points uphill; skip
        # it where even the first-order gain is at rounding level, or below what L evaluated at
        # neighbouring values can resolve (no comparison could then accept it but by rounding)
        gain = 0.5 * dof * ((proposal - old) / old) ** 2
        if gain <= 1e-13 * max(1.0, abs(self.L)) or gain <= self._logdet_rounding(blocks):
            return False
        values = old + 0.5 ** np.arange(max_halvings) * (proposal - old)
        if guessed and L0[1] >= ref:
            L, chol = L0[1:], chol0[1:]
        else:
            L, chol = self._likelihoods(values[1:] if guessed else values, blocks)
            if guessed:
                values = values[1:]
        for value, L_value, chol_value in zip(values, L, chol):
            if L_value >= ref:
                self._set_noise(float(value), self._posterior_from(chol_value), self.L + (L_value - ref))
                return True
        return False

    def _set_noise(self, noise_var, blocks, L, clear=False):
        """Full statistics at a new noise variance from the blocks of ``_posterior_from``: Sigma
        block by block (written over the old blocks: Sigma is zero outside the components, which
        only merge between exact refreshes; ``clear`` zeroes it first), mu = Sigma D_a^T y /
        sigma^2, and with R = D^T D_a F^T (M, K),

            S_m = beta ||d_m||^2 - beta^2 ||R_m||^2,   Q_m = beta d_m^T y - beta^2 R_m . (F D_a^T y),

        R formed with sparse products where the dictionary is sparse (O(nonzeros)), otherwise
        through the dictionary, ``_REFRESH_BLOCK`` columns at a time (2K products with it)."""
        self.noise_var = noise_var
        self.beta = 1.0 / noise_var
        self.L = L
        if self.sq_norms is None:
            self.sq_norms = self.design.sq_norms()
        a = self.a
        K = len(a)
        z = self.st.Dty[a]
        if clear:
            self.Sigma[:] = 0.0
        for idx, Sb, _ in blocks:
            self._Sbuf[idx[:, :, None], idx[:, None, :]] = Sb
            self._mbuf[idx] = self.beta * np.einsum("bij,bj->bi", Sb, z[idx])
        F_blocks = [(idx, Fb) for idx, _, Fb in blocks]
        self.S = self.beta * self.sq_norms
        self.Q = self.beta * self.st.Dty
        if K == 0:
            return
        if self._Bbuf is not None:  # R = B F^T
            Ft = np.zeros((K, K))
            for idx, Fb in F_blocks:
                Ft[idx[:, None, :], idx[:, :, None]] = Fb
            R = self._Bbuf[:, :K] @ Ft
            self.S -= self.beta**2 * np.einsum("mk,mk->m", R, R)
            self.Q -= self.beta**2 * (R @ (Ft.T @ z))
            return
        rows = np.concatenate([np.broadcast_to(idx[:, :, None], Fb.shape).ravel() for idx, Fb in F_blocks])
        cols = np.concatenate([np.broadcast_to(idx[:, None, :], Fb.shape).ravel() for idx, Fb in F_blocks])
        vals = np.concatenate([Fb.ravel() for _, Fb in F_blocks])
        Ft = scipy.sparse.csr_matrix((vals, (cols, rows)), shape=(K, K))  # F^T
        Fz = Ft.T @ z
        Ds = self.design.sparse
        if Ds is not None:
            # R = D^T D_a F^T, from the sparse Gram matrix D^T D where it is cheap to hold
            GG = self.design.sparse_gram
            R = (GG[:, a] @ Ft if GG is not None else Ds.T @ (self.design.sparse_columns[:, a] @ Ft)).tocsr()
            rows_of = np.repeat(np.arange(R.shape[0]), np.diff(R.indptr))
            self.S -= self.beta**2 * np.bincount(rows_of, weights=R.data**2, minlength=R.shape[0])
            self.Q -= self.beta**2 * (R @ Fz)
            return
        Ft = Ft.toarray()
        block = _REFRESH_BLOCK
        for c0 in range(0, K, block):  # column blocks of R: the peak stays O(M block)
            X = np.zeros((self.st.dictionary.shape[1], min(block, K - c0)))
            X[a] = Ft[:, c0:c0 + block]
            R = self.design.rmatmat(self.design.matmat(X))
            self.S -= self.beta**2 * np.einsum("mk,mk->m", R, R)
            self.Q -= self.beta**2 * R @ Fz[c0:c0 + block]

    def refresh(self):
        """Sigma, mu, S, Q and L recomputed from the Gram matrix of the active functions (a K x K
        Cholesky factorisation and 2K products with the dictionary): the rank-one updates lose
        accuracy over many moves when the dictionary is ill-conditioned (overlapping RBFs)."""
        self._label = self._components()
        L, chol = self._likelihood_at(self.noise_var)
        self.drift.append((len(self.moves), float(self.L - L)))
        self._set_noise(self.noise_var, self._posterior_from(chol), L, clear=True)

    def state(self, *, converged, seconds, exact=True, stop_reason=""):
        a = self.a.copy()
        st = dataclasses.replace(
            self.st, noise_var=float(self.noise_var), active=a, alpha=self.alpha.copy(), mu=self.mu.copy(),
            _sigma=self.Sigma.copy(), _sigma_updates=(), S=self.S.copy(), Q=self.Q.copy(),
            log_marginal_likelihood=float(self.L),
            trace=list(self.trace), moves=list(self.moves), converged=bool(converged), seconds=float(seconds),
            trace_seconds=list(self.trace_seconds), refresh_drift=list(self.drift), stop_reason=stop_reason,
            rollbacks=list(self.rollbacks))
        if exact:
            st.log_marginal_likelihood = self._likelihood_at(self.noise_var)[0]
        return st


# ----------------------------------------------------------------------------------------------
# Public functions
# ----------------------------------------------------------------------------------------------
def _check_samples(D, y, rows):
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(y)):
        raise ValueError("`y` contains NaN or infinite values (for an image: pass only the observed pixels, "
                         "with their indices as `rows`).")
    if rows is None:
        if D.shape[0] != len(y):
            raise ValueError(f"`D` has {D.shape[0]} rows but `y` has {len(y)} entries; pass one row per sample "
                             "(or a dictionary over all points and the sampled points as `rows`).")
        rows = np.arange(len(y))
    else:
        rows = np.asarray(rows)
        if rows.dtype.kind not in "iu" or rows.ndim != 1 or len(rows) != len(y):
            raise ValueError(f"`rows` must be {len(y)} integer point indices, one per entry of `y`.")
        if len(rows) and (rows.min() < 0 or rows.max() >= D.shape[0]):
            raise ValueError(f"`rows` must index the dictionary's {D.shape[0]} points.")
    return y, rows.astype(np.int64)


def _initial_state(D, y, rows, noise_var):
    design = _Design(D, rows, np.zeros((0, D.shape[1])))
    beta = 1.0 / noise_var
    Dty = design.rmatvec(y)
    norms = design.sq_norms()
    yty = float(y @ y)
    N = len(y)
    L = -0.5 * (N * LOG_2PI + N * math.log(noise_var) + beta * yty)
    M = D.shape[1]
    return SBLState(dictionary=D, rows=rows, y=y, extra_rows=np.zeros((0, M)), noise_var=float(noise_var),
                    active=np.zeros(0, np.int64), alpha=np.full(M, np.inf), mu=np.zeros(0), _sigma=np.zeros((0, 0)),
                    S=beta * norms, Q=beta * Dty, log_marginal_likelihood=L, trace=[L], moves=[], Dty=Dty, yty=yty)


def fit(D, y, *, noise_var, update_noise=False, noise_every=1, tol=None, max_steps=100000, rows=None,
        refresh_every=500, align_tol=0.0, max_alignment=None, progress_bar=None):
    """Fast marginal likelihood maximisation (Tipping & Faul 2003), a deterministic path.

    Parameters
    ----------
    D : (N, M) array, ``scipy.sparse`` matrix or :class:`ppl_sbl.basis.Dictionary`
        The design matrix; or a dictionary over P points of which ``rows`` were sampled.
    y : (N,)
    noise_var : float
        sigma^2 (the starting value with ``update_noise``).
    update_noise : bool
        Re-estimate sigma^2 after every move (Tipping & Faul's re-estimate), keeping the new value
        only where it does not lower L (otherwise the largest step towards it, by halving, that
        does not).
        This keeps D_a^T D_a (K x K) and costs a Cholesky factorisation (O(K^3)) per move, and
        2K products with the dictionary (O(M K^2) for a dense design matrix, whose D^T D_a the fit
        holds).
    noise_every : int
        With ``update_noise``, re-estimate sigma^2 only after every ``noise_every``-th move (and
        where no other move gains); 1 (default) is the rule above.
    tol : float or None
        ``None`` (default): the practical rule of Tipping's SparseBayes, see :func:`resume`.
        A number: the exact local optimum, stop when the largest gain of a move is at most
        ``tol * max(1, |L|)`` (checked with exact statistics, see ``refresh_every`` of
        :func:`resume`); ``1e-13`` reaches it to rounding.
    rows : (N,) int, optional
        The points of ``D`` at which y was sampled (default: row n of D for sample n).
    refresh_every, align_tol, max_alignment : see :func:`resume`.

    Returns
    -------
    SBLState
        The start is the model with no function; the first move adds the function with the
        largest (d_m^T y)^2 / ||d_m||^2 (the best single add). Then every step makes the add,
        re-estimate or delete with the largest exact gain in L.
    """
    D = _basis.as_dictionary(D)
    check_positive("noise_var", noise_var)
    y, rows = _check_samples(D, y, rows)
    state = _initial_state(D, y, rows, float(noise_var))
    return resume(state, update_noise=update_noise, noise_every=noise_every, tol=tol, max_steps=max_steps,
                  refresh_every=refresh_every, align_tol=align_tol, max_alignment=max_alignment,
                  progress_bar=progress_bar)


def resume(state: SBLState, *, update_noise=False, noise_every=1, tol=None, max_steps=100000, refresh_every=500,
           align_tol=0.0, max_alignment=None, progress_bar=None):
    """Go on maximising L from ``state`` (after :func:`add_sample` or :func:`add_basis`).

    ``tol=None`` (default), the practical rule (Tipping's SparseBayes): a move is *significant*
    when it is an add or a delete that raises L (by more than ``1e-13 * max(1, |L|)``, the
    rounding of the updated statistics), or a re-estimate that raises L and changes ln alpha_m by
    at least ``LOG_ALPHA_TOL`` (1e-3); each step makes the significant move with the largest
    gain. Re-estimates below that change are never made (each would gain of the order of
    (Delta ln alpha)^2 nats). The fit stops ("practical") when no move is significant by exact
    statistics and, with ``update_noise``, the noise re-estimate changes ln sigma^2 by less than
    ``LOG_NOISE_TOL`` (1e-6). ``tol`` a number: the exact local optimum, every move considered,
    stop when the largest gain is at most ``tol * max(1, |L|)`` (the rules below).

    ``noise_every``: with ``update_noise``, re-estimate sigma^2 after every ``noise_every``-th
    move (1, the default, is after every move; each re-estimate costs O(K^3), so larger values
    trade the path for speed, as Tipping's SparseBayes does) and always once more where no move
    gains, continuing if that raises L by more than the tolerance.

    ``refresh_every``: recompute Sigma, mu, S, Q and L exactly from the K x K Gram matrix of the
    active functions after this many moves (at least K, so the O(K^3) refresh never dominates)
    and before declaring convergence; ``None``: never (pure rank-one updates).

    Ill-conditioned dictionaries (overlapping RBFs): the active functions' small factors come from
    Sigma and mu where S and Q cannot give them (see ``_small_factors``), and the rank-one updates
    drift (by hundreds of nats between refreshes on the image experiment's RBFs), so that moves can
    be chosen on wrong statistics. Where an exact refresh finds L below the highest L of the
    earlier refreshes by more than the rounding of the two evaluations (eps sum |H^-1| |H|, up
    to 1e-2 nats there), the fit goes back to the state of that refresh and makes as many moves
    again, each on statistics refreshed first (``state.rollbacks`` records it). So L, evaluated
    exactly, never falls.

    ``max_alignment``: no function is added whose |cosine| over the samples with an active
    function exceeds it (SparseBayes's alignment test). ``None`` (default): ``MAX_ALIGNMENT`` =
    1 - 1e-3 with the practical rule, no such guard with ``tol``. A nearly collinear pair of
    functions (RBFs centred a hair apart) can carry a coefficient pair of opposite signs, large
    and ill-determined, whose coordinate moves zig-zag for thousands of steps, each gaining
    little; the guard keeps such pairs out, as SparseBayes does. Pass it with ``tol`` for the
    exact local optimum among the functions the guard allows.

    ``align_tol``: a function out of the model is not added where S_m sigma^2 / ||d_m||^2 <
    align_tol, the share of its norm outside the span of the active functions (in C^-1's metric;
    Tipping's SparseBayes has a pairwise guard of this kind). 0 (default): no such guard. On
    overcomplete, overlapping dictionaries a small value (1e-4) keeps the fit away from nearly
    collinear sets of functions, at a lower L.

    Stopping: when the largest gain is at most ``tol * max(1, |L|)`` ("tolerance"), or when the
    gains are rounding ("rounding"): L recomputed from scratch at an exact refresh makes no
    progress when it lies less than ``tol * max(1, |L|)`` per move made since the previous refresh
    above the highest L of the earlier refreshes (where sigma^2 is tiny the evaluation from
    scratch carries rounding of its own, so that a comparison with the previous refresh alone
    passes on noise), although the moves claimed more. The fit stops after three such refreshes in
    a row where the claimed gains were tiny themselves (below ``max(1e3 tol, 1e-10) * max(1, |L|)``
    per move, the precision float64 and the rank-one updates leave), or after eight in a row
    whatever the claims (statistics that drift on an ill-conditioned dictionary faster than the
    refreshes correct them; where the refreshes do correct them, the exact L rises and the fit goes
    on). This happens where sigma^2 is tiny (the noise re-estimated towards 0 on a dictionary that
    can interpolate the data: L's terms grow as 1 / sigma^2) or the dictionary is ill-conditioned;
    there the tolerance alone would let the fit trade rounding errors for ever.
    """
    if int(noise_every) < 1:
        raise ValueError(f"`noise_every` must be >= 1; got {noise_every!r}.")
    practical = tol is None
    if practical:
        tol = 1e-13  # the floor of a gain that counts, and the rounding rules' scale
    elif not (float(tol) > 0):
        raise ValueError(f"`tol` must be None or > 0; got {tol!r}.")
    start = time.perf_counter()
    work = _Work(state, keep_gram=update_noise)
    work.align_tol = float(align_tol)
    if max_alignment is None and practical:
        max_alignment = MAX_ALIGNMENT
    if max_alignment is not None:
        if not 0.0 < float(max_alignment) <= 1.0:
            raise ValueError(f"`max_alignment` must be in (0, 1] or None; got {max_alignment!r}.")
        work.init_alignment(max_alignment)
    bar = _bar(progress_bar, max_steps)
    converged, stop_reason = False, "max_steps"

    # the precision float64 and the rank-one updates leave L, per move (see the stopping rule)
    rounding = max(1e3 * tol, 1e-10)
    failed_at = None  # L where the last re-estimate found no value that raises L

    def noise_move():
        # a re-estimate that found no better value is tried again once the moves since have raised
        # L by more than rounding: where sigma^2 is tiny, L evaluated at neighbouring values differs
        # by more than the gains the proposal promises, and each retry costs a factorisation
        nonlocal failed_at
        if failed_at is not None and work.L - failed_at <= rounding * max(1.0, abs(work.L)):
            return 0.0
        before = work.L
        if work.reestimate_noise(min_log_change=LOG_NOISE_TOL if practical else 0.0):
            failed_at = None
            work.trace.append(work.L)
            work.moves.append(("noise", -1))
            work.trace_seconds.append(time.perf_counter() - start)
            return work.L - before
        failed_at = work.L
        return 0.0

    # the first refresh comes early (16 moves) and the interval doubles while the updates do not drift, so
    # that an ill-conditioned dictionary is caught before hundreds of moves on drifted statistics
    last_refresh, interval, drifting = 0, min(16, refresh_every or 16), False
    # L at the last exact refresh, the highest; refresh intervals in a row without exact progress, and
    # those of them whose moves claimed only rounding
    exact_L, best_L, stalls, quiet = None, None, 0, 0

    def stuck():
        return quiet >= 3 or stalls >= 8

    def refresh(moves):
        # shorter intervals while the rank-one updates drift, longer (up to refresh_every) once not
        nonlocal interval, drifting, exact_L, best_L, stalls, quiet
        claimed = work.L  # accumulated from the moves' gains
        work.refresh()
        drifting = abs(work.drift[-1][1]) > 1e-9 * max(1.0, abs(work.L))
        interval = max(16, interval // 4) if drifting else min(int(refresh_every), 2 * interval)
        scale = moves * max(1.0, abs(work.L))
        stalled = exact_L is not None and moves > 0 and work.L - best_L < tol * scale
        stalls = stalls + 1 if stalled else 0
        quiet = quiet + 1 if stalled and claimed - exact_L < rounding * scale else 0
        exact_L = work.L
        best_L = work.L if best_L is None else max(best_L, work.L)

    if work.sq_norms is None:
        work.sq_norms = work.design.sq_norms()

    # rollback: the state at the exact refresh with the highest L, and the step before which every move
    # is made on exact statistics (a refresh before each) after the moves since it were undone
    checkpoint, exact_until = None, 0

    def after_refresh(step, moves):
        """Keep the state at a new best exact L; where the exact L fell below the best (moves chosen
        on drifted statistics, an ill-conditioned dictionary), go back to that state and make the
        next ``moves`` moves each on statistics refreshed first, which makes every gain exact.
        Returns whether it went back."""
        nonlocal checkpoint, exact_until, exact_L
        # a fall within the rounding of the two evaluations of L is no fall (where H is ill-conditioned,
        # eps sum |H^-1| |H| reaches 1e-2 nats: ``_logdet_rounding``)
        if checkpoint is not None and step >= exact_until and (
                work.L < checkpoint["L"] - 1e-9 * max(1.0, abs(checkpoint["L"]))
                - 2.0 * work._logdet_rounding(work._blocks())):
            fell = float(work.L - checkpoint["L"])
            work.restore(checkpoint)
            work.rollbacks.append((len(work.moves), fell))
            exact_L = work.L
            exact_until = step + max(int(moves), 1)
            return True
        if checkpoint is None or work.L >= checkpoint["L"]:
            checkpoint = work.checkpoint()
        return False

    def corrupted():
        # S_m = d_m^T C^-1 d_m lies in [0, ||d_m||^2 / sigma^2] (C >= sigma^2 I); outside it (or not
        # finite) the updated statistics have drifted beyond use
        cap = work.beta * work.sq_norms
        S = work.S
        return not (np.all(np.isfinite(S)) and np.all(np.isfinite(work.Q))
                    and np.all(S >= -max(work.align_tol, 1e-9) * cap) and np.all(S <= (1.0 + 1e-9) * cap))

    for step in range(int(max_steps)):
        if refresh_every is not None and step > last_refresh and (
                step - last_refresh >= (interval if drifting else max(interval, len(work.active)))
                or step < exact_until or corrupted()):
            refresh(step - last_refresh)
            rolled_back = after_refresh(step, step - last_refresh)
            last_refresh = step
            if not rolled_back and stuck():
                converged, stop_reason = True, "rounding"
                break
        gain, new = work.gains()
        if np.isnan(gain).any():
            # a function's statistics are at rounding level (an active function nearly collinear
            # with others, alpha -> 0): refresh them; if exact ones are too, the fit cannot go on
            if refresh_every is not None and step > last_refresh:
                refresh(step - last_refresh)
                after_refresh(step, step - last_refresh)
                last_refresh = step
                gain, new = work.gains()
            if np.isnan(gain).any():
                stop_reason = "ill-conditioned"
                break
        if practical:
            gain = _significant(gain, new, work.alpha, work.a)
        m = int(np.argmax(gain))
        best = float(gain[m])
        if not (best > tol * max(1.0, abs(work.L))):
            if update_noise:
                before = work.noise_var
                raised = noise_move()
                if (abs(math.log(work.noise_var / before)) >= LOG_NOISE_TOL if practical
                        else raised > tol * max(1.0, abs(work.L))):
                    continue
            if refresh_every is not None and step > last_refresh:
                # no move gains by the updated statistics: make sure by exact ones
                refresh(step - last_refresh)
                rolled_back = after_refresh(step, step - last_refresh)
                last_refresh = step
                if rolled_back:
                    continue
                gain, new = work.gains()
                if practical:
                    gain = _significant(gain, new, work.alpha, work.a)
                if np.max(gain) > tol * max(1.0, abs(work.L)) and not stuck():
                    continue
            converged = True
            stop_reason = "rounding" if stuck() else "practical" if practical else "tolerance"
            break
        if not np.isfinite(work.alpha[m]):
            work.add(m, new[m])
            kind = "add"
        elif np.isfinite(new[m]):
            work.update(m, new[m])
            kind = "update"
        else:
            work.delete(m)
            kind = "delete"
        work.L += best
        work.trace.append(work.L)
        work.moves.append((kind, m))
        work.trace_seconds.append(time.perf_counter() - start)
        if update_noise and (step + 1) % int(noise_every) == 0:
            noise_move()
        if bar is not None and step % 50 == 0:
            bar.update(50 if step else 0)
            bar.set_postfix(L=f"{work.L:.4f}", active=len(work.active))
    if bar is not None:
        bar.close()
    if not converged and stop_reason != "ill-conditioned":
        warn_unconverged("the sequential SBL", max_steps, "max_steps")
    return work.state(converged=converged, seconds=time.perf_counter() - start,
                      stop_reason=stop_reason if converged or stop_reason == "ill-conditioned" else "max_steps")


LOG_ALPHA_TOL = 1e-3  # the practical rule: smallest change of ln alpha_m a re-estimate makes
LOG_NOISE_TOL = 1e-6  # ... and of ln sigma^2 that keeps the fit going
MAX_ALIGNMENT = 1.0 - 1e-3  # ... and the largest |cosine| of a function added with an active one


def _significant(gain, new, alpha, active):
    """The gains with every re-estimate that changes ln alpha_m by less than ``LOG_ALPHA_TOL``
    set to -inf (the practical rule of :func:`resume`)."""
    if len(active):
        old, target = alpha[active], new[active]
        with np.errstate(divide="ignore", invalid="ignore"):
            small = np.isfinite(target) & (np.abs(np.log(target / old)) < LOG_ALPHA_TOL)
        gain = gain.copy()
        gain[active[small]] = -np.inf
    return gain


def _bar(progress_bar, total):
    if not progress_bar:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="sequential SBL", leave=False)


def log_marginal_likelihood(state: SBLState, alpha=None, noise_var=None):
    """L = log N(y | 0, sigma^2 I + D_a A^-1 D_a^T) computed directly in O(N K^2 + K^3) (from
    the active columns, never an N x N matrix), for the state's or the given alpha, sigma^2:
    log|C| = N log sigma^2 - sum log alpha + log|H| and y^T C^-1 y = ||y - D_a mu||^2 / sigma^2
    + mu^T A mu with H = A + D_a^T D_a / sigma^2, mu = H^-1 D_a^T y / sigma^2."""
    alpha = state.alpha if alpha is None else np.asarray(alpha, dtype=np.float64)
    noise_var = state.noise_var if noise_var is None else float(noise_var)
    a = np.flatnonzero(np.isfinite(alpha))
    N = len(state.y)
    beta = 1.0 / noise_var
    if len(a) == 0:
        return float(-0.5 * (N * LOG_2PI + N * math.log(noise_var) + beta * state.y @ state.y))
    Da = design_rows(state, np.arange(N))[:, a]
    chol = scipy.linalg.cho_factor(np.diag(alpha[a]) + beta * Da.T @ Da, lower=True)
    mu = scipy.linalg.cho_solve(chol, beta * Da.T @ state.y)
    resid = state.y - Da @ mu
    # y^T C^-1 y = ||y - D_a mu||^2 / sigma^2 + mu^T A mu (no cancellation at small sigma^2)
    return float(-0.5 * (N * LOG_2PI + N * math.log(noise_var) - np.sum(np.log(alpha[a]))
                         + 2.0 * np.sum(np.log(np.diag(chol[0]))) + beta * resid @ resid + alpha[a] @ mu**2))


def predict(state: SBLState, rows):
    """The predictive N(m*, sigma*^2) of eq. (1) at dictionary points (int indices) or rows
    ((k, M) array): m* = d_a^T mu, sigma*^2 = sigma^2 + d_a^T Sigma d_a. Returns (mean, var)."""
    R = _point_rows(state, rows)[:, state.active]
    mean = R @ state.mu
    var = state.noise_var + np.sum((R @ state.Sigma) * R, axis=1)
    return mean, var


def add_sample(state: SBLState, d_row, y_new):
    """A new sample (section 3 and the appendix): rank-one updates of Sigma, mu, S and Q with
    alpha and sigma^2 unchanged. Returns ``(state, delta_L)`` with delta_L = log N(y_new | m*,
    sigma*^2), the log predictive density of the new value (the exact change of L).

    ``d_row``: the new sample's dictionary row (length M), or the index of a dictionary point.
    Continue with :func:`resume` to re-optimise alpha.
    """
    y_new = float(y_new)
    if not math.isfinite(y_new):
        raise ValueError("`y_new` must be finite.")
    by_point = np.ndim(d_row) == 0 and np.asarray(d_row).dtype.kind in "iu"
    if by_point:
        p = int(d_row)
        if not 0 <= p < state.dictionary.shape[0]:
            raise ValueError(f"`d_row` = {p} is not a point of the dictionary (0 .. {state.dictionary.shape[0] - 1}).")
        row = state.dictionary.rows([p])[0]
    else:
        row = np.asarray(d_row, dtype=np.float64).reshape(-1)
        if row.shape[0] != state.dictionary.shape[1]:
            raise ValueError(f"`d_row` must have one entry per dictionary function ({state.dictionary.shape[1]}); "
                             f"got {row.shape[0]}.")
        if not np.all(np.isfinite(row)):
            raise ValueError("`d_row` contains NaN or infinite values.")
    a = state.active
    beta = 1.0 / state.noise_var
    da = row[a]
    nz = np.flatnonzero(da)
    Sd = state._sigma_matvec(da, nz if 2 * len(nz) < len(da) else None)
    m_star = float(da @ state.mu)
    var_star = state.noise_var + float(da @ Sd)
    delta_L = -0.5 * (LOG_2PI + math.log(var_star) + (y_new - m_star) ** 2 / var_star)
    # beta d_*^T Sigma D^T d_m for every m (over the old samples), then the bracket of the appendix
    design = _design(state)
    proj = beta * design.rmatvec(design.active_matvec(a, Sd)) if len(a) else np.zeros_like(state.S)
    err = proj - row
    S = state.S + err**2 / var_star
    Q = state.Q + err * (m_star - y_new) / var_star
    updates = state._sigma_updates + ((-1.0 / var_star, Sd),)  # Sigma -= Sd Sd^T / sigma*^2
    sigma = state._sigma
    if len(updates) > SBLState._MAX_PENDING:
        sigma = np.array(state._sigma)
        for coef, x in updates:
            _Work._rank_one(sigma, coef, x)
        updates = ()
    mu = state.mu - (m_star - y_new) / var_star * Sd
    new = dataclasses.replace(
        state,
        rows=np.append(state.rows, p if by_point else -1),
        y=np.append(state.y, y_new),
        extra_rows=state.extra_rows if by_point else np.vstack([state.extra_rows, row]),
        mu=mu, _sigma=sigma, _sigma_updates=updates, S=S, Q=Q,
        log_marginal_likelihood=state.log_marginal_likelihood + delta_L,
        trace=state.trace + [state.log_marginal_likelihood + delta_L],
        moves=state.moves + [("sample", p if by_point else -1)],
        converged=False,
        Dty=state.Dty + row * y_new,
        yty=state.yty + y_new**2,
    )
    return new, float(delta_L)


def add_basis(state: SBLState, new_columns):
    """New candidate functions join the dictionary (out of the model, alpha = inf): their S and
    Q are computed at the current alpha and sigma^2, so :func:`resume` can add them.

    ``new_columns``: a :class:`ppl_sbl.basis.Dictionary` or array over the same P points as the
    state's dictionary, (P, k).
    """
    new = _basis.as_dictionary(new_columns)
    if new.shape[0] != state.dictionary.shape[0]:
        raise ValueError(f"`new_columns` must be evaluated at the dictionary's {state.dictionary.shape[0]} points; "
                         f"got {new.shape[0]}.")
    if (state.rows < 0).any():
        raise ValueError("the state has samples added by value (add_sample with a row), whose values of the new "
                         "functions are unknown; add those samples by point index instead.")
    k = new.shape[1]
    sub = _Design(new, state.rows, np.zeros((0, k)))
    beta = 1.0 / state.noise_var
    Dty_new = sub.rmatvec(state.y)
    norms = sub.sq_norms()
    S_new, Q_new = beta * norms, beta * Dty_new
    a = state.active
    if len(a):
        # S_m = beta ||phi_m||^2 - beta^2 phi_m^T D_a Sigma D_a^T phi_m; same for Q with y
        old = _design(state)
        cross = sub.rmatvec(old.columns(a))  # D_new^T D_a, (k, K)
        CS = cross @ state.Sigma
        S_new = S_new - beta**2 * np.sum(CS * cross, axis=1)
        Q_new = Q_new - beta**2 * CS @ state.Dty[a]
    dictionary = _basis.StackedDictionary([state.dictionary, new])
    return dataclasses.replace(
        state, dictionary=dictionary,
        extra_rows=np.zeros((0, dictionary.shape[1])),
        alpha=np.append(state.alpha, np.full(k, np.inf)), S=np.append(state.S, S_new), Q=np.append(state.Q, Q_new),
        Dty=np.append(state.Dty, Dty_new), converged=False)


def expected_delta_L(state: SBLState, rows, neighbour_means, neighbour_vars):
    """E[delta L] at points not sampled yet (section 4): with y* ~ N(m_bar, v_bar) estimated from
    the neighbours (v_bar a variance) and the predictive N(m*, sigma*^2),

        E[delta L] = -log(sqrt(2 pi) sigma*) - (v_bar + (m_bar - m*)^2) / (2 sigma*^2).
    """
    m_star, var_star = predict(state, rows)
    m_bar = np.asarray(neighbour_means, dtype=np.float64)
    v_bar = np.asarray(neighbour_vars, dtype=np.float64)
    if np.any(v_bar < 0):
        raise ValueError("`neighbour_vars` are variances and must be >= 0.")
    return -0.5 * (LOG_2PI + np.log(var_star)) - (v_bar + (m_bar - m_star) ** 2) / (2.0 * var_star)


def neighbour_statistics(query, samples, values, k=8):
    """Mean and variance of the values of the ``k`` nearest samples of every query point
    (``k=None``: all samples), the set S of section 4. ``query`` (n, d), ``samples`` (N, d)."""
    query = np.asarray(query, dtype=np.float64).reshape(len(query), -1)
    samples = np.asarray(samples, dtype=np.float64).reshape(len(samples), -1)
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if k is None or k >= len(values):
        return np.full(len(query), values.mean()), np.full(len(query), values.var())
    from scipy.spatial import cKDTree

    _, idx = cKDTree(samples).query(query, k=int(k))
    idx = idx.reshape(len(query), -1)
    return values[idx].mean(axis=1), values[idx].var(axis=1)


def augmented_variance(state: SBLState, rows, new_functions, alpha_new):
    """The predictive variance after a function centred at each query point joins the model
    with precision ``alpha_new`` (Rasmussen & Quinonero-Candela 2005, the paper's Fig. 5e):
    sigma*^2 + e^2 / (alpha_new + S_new), e = phi_new(x*) - beta d_a^T Sigma D_a^T phi_new.

    ``new_functions(p)`` returns the new function's values at all P points for query point p.
    """
    if (state.rows < 0).any():
        raise ValueError("the state has samples added by value (add_sample with a row), where the new functions' "
                         "values are unknown; add those samples by point index instead.")
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    _, var = predict(state, rows)
    design = _design(state)
    beta = 1.0 / state.noise_var
    a = state.active
    R = state.dictionary.rows(rows)[:, a]
    out = np.empty(len(rows))
    Da = design.columns(a)
    for k, p in enumerate(rows):
        f = np.asarray(new_functions(p), dtype=np.float64)
        phi = f[design.rows]
        proj = Da.T @ phi
        S_new = beta * phi @ phi - beta**2 * proj @ state.Sigma @ proj
        e = f[p] - beta * R[k] @ state.Sigma @ proj
        out[k] = var[k] + e**2 / (alpha_new + S_new)
    return out
