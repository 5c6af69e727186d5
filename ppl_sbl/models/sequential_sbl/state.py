"""The state of the sequential SBL, :class:`SBLState`: the data, the fitted model and what the
moves and the online updates need to go on; and the predictive distribution at new points,
:func:`predict` (eq. (1) of Faul & Pilikos).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Optional

import numpy as np

from ppl_sbl.result import ResultMethods
from ppl_sbl.portable import Saveable

from .algebra import rank_one
from .design import design_rows, point_rows
from .program import LOG_2PI, guide, model

__all__ = ["SBLState", "predict"]


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
        ("add" | "update" | "delete" | "noise", function index or -1; "joint", -1: a Newton step on
        every active alpha and the noise at once; "sample", point or -1).
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
            self.sigma_into(out)
            self._sigma, self._sigma_updates = out, ()
        return self._sigma

    def sigma_into(self, out):
        """Write Sigma into ``out`` (K, K), applying the pending corrections."""
        if out is not self._sigma:
            out[...] = self._sigma
        for coef, x in self._sigma_updates:
            rank_one(out, coef, x)

    def sigma_matvec(self, v, nz=None):
        """Sigma v without forming Sigma (``nz``: the nonzeros of v, if few)."""
        if nz is None:
            out = self._sigma @ v
        else:
            out = self._sigma[:, nz] @ v[nz]
        for coef, x in self._sigma_updates:
            out = out + coef * x * float(x @ v)
        return out

    def replace(self, *, Sigma=None, sigma_correction=None, **changes):
        """A copy with the fields ``changes`` (as :func:`dataclasses.replace`) and Sigma given
        whole (``Sigma``, held as it is) or as this state's Sigma plus coef x x^T
        (``sigma_correction`` = (coef, x)), held pending until more than ``_MAX_PENDING`` are."""
        if Sigma is not None:
            changes.update(_sigma=Sigma, _sigma_updates=())
        elif sigma_correction is not None:
            updates = self._sigma_updates + (sigma_correction,)
            sigma = self._sigma
            if len(updates) > self._MAX_PENDING:
                sigma = np.array(self._sigma)
                for coef, x in updates:
                    rank_one(sigma, coef, x)
                updates = ()
            changes.update(_sigma=sigma, _sigma_updates=updates)
        return dataclasses.replace(self, **changes)

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

    def elbo_parts(self):
        """L as the two terms of the ELBO of the exact guide q(c) = N(mu, Sigma) (no hyperpriors:
        alpha and sigma^2 are point estimates, so there are no ``-kl_`` or ``log_norm_`` terms for
        them), each in nats, summing to :attr:`elbo` = L:

        ``log_lik``
            E_q[ln p(y | c)] = -N/2 ln(2 pi sigma^2) - (||y - D_a mu||^2 + tr(D_a^T D_a Sigma)) / (2 sigma^2).
        ``-kl_c``
            -KL(q(c) || p(c | alpha)) = (sum_k ln alpha_k + ln|Sigma| + K - sum_k alpha_k (mu_k^2 +
            Sigma_kk)) / 2, the Occam factor of the active coefficients.

        With q the exact posterior given alpha and sigma^2 the ELBO is L itself: L = E_q[ln p(y |
        c)] - KL(q(c) || p(c | alpha)) + KL(q(c) || p(c | y)), the last term 0. The site of the
        coefficients in :func:`model` is ``c``."""
        N = self.num_samples
        beta = 1.0 / self.noise_var
        const = -0.5 * N * (LOG_2PI + math.log(self.noise_var))
        if len(self.active) == 0:
            return {"log_lik": float(const - 0.5 * beta * self.y @ self.y), "-kl_c": 0.0}
        Da = design_rows(self, np.arange(N))[:, self.active]
        Sigma, mu, alpha = self.Sigma, self.mu, self.alpha[self.active]
        resid = self.y - Da @ mu
        spread = np.sum((Da @ Sigma) * Da)  # tr(D_a^T D_a Sigma)
        log_lik = const - 0.5 * beta * (resid @ resid + spread)
        _, logdet = np.linalg.slogdet(Sigma)
        kl = 0.5 * (np.sum(np.log(alpha)) + logdet + len(alpha) - alpha @ (mu**2 + np.diag(Sigma)))
        return {"log_lik": float(log_lik), "-kl_c": float(kl)}

    def loo_exact(self):
        """(N,) ln p(y_n | y_{-n}), the exact leave-one-out log predictive density of every sample
        with alpha and sigma^2 held at their fitted values (they were fitted to all N samples).

        Without sample n the posterior of c has precision Sigma^-1 - beta d_n d_n^T (beta =
        1/sigma^2, d_n the sample's active row) and mean Sigma_{-n} (Sigma^-1 mu - beta d_n y_n);
        by Sherman-Morrison, with s_n = d_n^T Sigma d_n, m_n = d_n^T mu and the leverage h_n =
        beta s_n (in [0, 1)), the predictive of eq. (1) at d_n becomes

            mean (m_n - h_n y_n) / (1 - h_n),   variance sigma^2 + s_n / (1 - h_n) = sigma^2 / (1 - h_n),

        so y_n - mean = (y_n - m_n) / (1 - h_n) and

            ln p(y_n | y_{-n}) = -(ln(2 pi sigma^2) - ln(1 - h_n) + (y_n - m_n)^2 / (sigma^2 (1 - h_n))) / 2.

        O(N K^2); no refit. Their sum is the exact LOO estimate elpd_loo (to compare with
        ``az.loo`` on :meth:`to_inference_data`)."""
        N = self.num_samples
        y = np.asarray(self.y, dtype=np.float64)
        if len(self.active) == 0:
            return -0.5 * (LOG_2PI + math.log(self.noise_var) + y**2 / self.noise_var)
        Da = design_rows(self, np.arange(N))[:, self.active]
        s = np.sum((Da @ self.Sigma) * Da, axis=1)
        m = Da @ self.mu
        keep = 1.0 - s / self.noise_var  # 1 - h_n
        return -0.5 * (LOG_2PI + math.log(self.noise_var) - np.log(keep) + (y - m) ** 2 / (self.noise_var * keep))

    def sample(self, key, num_samples):
        """Draws of the active coefficients from q(c) = N(mu, Sigma): {"c": (num_samples, K)}."""
        import jax

        draws = jax.random.multivariate_normal(key, self.mu, self.Sigma, shape=(int(num_samples),),
                                               method="eigh")
        return {"c": np.asarray(draws)}

    def predict(self, rows):
        """Predictive mean and variance at dictionary points or rows, eq. (1)."""
        return predict(self, rows)


# saved files and pickles name the class by ``module:qualname``; the package re-exports it, and files
# saved before the package was split into modules name it there
SBLState.__module__ = "ppl_sbl.models.sequential_sbl"


def predict(state: SBLState, rows):
    """The predictive N(m*, sigma*^2) of eq. (1) at dictionary points (int indices) or rows
    ((k, M) array): m* = d_a^T mu, sigma*^2 = sigma^2 + d_a^T Sigma d_a. Returns (mean, var)."""
    R = point_rows(state, rows)[:, state.active]
    mean = R @ state.mu
    var = state.noise_var + np.sum((R @ state.Sigma) * R, axis=1)
    return mean, var
