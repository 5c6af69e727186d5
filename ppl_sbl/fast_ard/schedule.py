"""The fast variational schedule of the ARD family (:mod:`ppl_sbl.fast_ard`): the buffered
restricted-family state and its rank-one moves, the pass loop, and the guide-state conversions."""
from __future__ import annotations

import inspect
import math
from typing import NamedTuple

import numpy as np
import scipy.linalg

from . import compiled as compiled_schedule
from . import compiled_outputs
from .algebra import (check_hyperparameters, frozen_optimum, frozen_value, in_model_change, in_model_value,
                      inverse_and_mean, log_newton_step, scalar_optimum, w_alpha_terms, warm_optimum)
from .factors import Moments
from ..priors import is_vague
from .units import column_scale, original_units, standard_units
from .outputs import NEWTON, MultiFastFit, schedule_outputs
from .passes import (ADD, MOVES_PER_COEFFICIENT, REESTIMATE, UPDATE, Extrapolation,  # noqa: F401 (its interface)
                     run_passes)

__all__ = ["LOG_ALPHA_TOL", "MAX_ALIGNMENT", "MAX_SPREAD", "MOVES_PER_COEFFICIENT", "ADD", "REESTIMATE", "UPDATE",
           "NEWTON", "NotApplicable", "Moments", "FastFit", "MultiFastFit", "Plan", "Planned", "schedule",
           "schedule_many"]

# a frozen coefficient with s_k below this fraction of h_k is (numerically) in the span of the
# active columns: S_k = h_k - B_k^T Sigma B_k carries a rounding error of order 1e-16 h_k times the
# condition number of the active block, so its s_k would be noise
_COLLINEAR = 1e-10
LOG_ALPHA_TOL = 1e-3  # the smallest change of ln E[alpha_k] a re-estimate makes
MAX_ALIGNMENT = 1.0 - 1e-3  # the largest |cosine| of a coefficient added with an active one
# the largest spread kappa = sum_k (h_k + x_k) Sigma_kk (:meth:`_Schedule.spread`) a move may give
# the active block. S_m = h_m - B_m^T Sigma B_m and Q_m come from the Gram matrix: their rounding
# error is of order eps kappa h_m (eps the machine epsilon), and a coefficient that enters at
# spread kappa has s_k of order h_k / kappa, so the relative error of its s_k, and of its gain, grows
# like eps kappa^2; at this limit the gains stay exact to well below the floor tol |ELBO| of a move
# at the default tol = 1e-9
MAX_SPREAD = 1e5


class NotApplicable(ValueError):
    """The fast schedule does not fit the model with these arguments (e.g. a proper hyperprior
    under ``CAVI``'s default schedule, or a derived structure without an ARD vector). A guide's ``fast`` function
    raises it before any fitting work, so that ``CAVI(schedule="auto")`` can fall back to the
    plain sweep; under ``schedule="fast"`` it reaches the caller with its message."""


class FastFit(NamedTuple):
    """The result of :func:`schedule`.

    active (K,) the coefficients in the model, in the order of ``mu`` and ``Sigma``; mu (K,),
    Sigma (K, K) their q(w); x (M,) E[alpha_k] of every coefficient (q(alpha_k) = Gamma(a0 + 1/2,
    (a0 + 1/2) / x_k)); frozen_var (M,) the variances of the frozen coefficients (0 on
    ``active``); supported (K,) whether the data support each active coefficient (q_k^2 > s_k);
    elbo_trace the ELBO at the start, after every move (the previous value plus the move's exact
    gain) and after every update of the likelihood factor (evaluated afresh); trace_events
    (len(elbo_trace) - 1,) ADD, REESTIMATE or UPDATE; num_moves; num_passes; converged.
    """

    active: np.ndarray
    mu: np.ndarray
    Sigma: np.ndarray
    x: np.ndarray
    frozen_var: np.ndarray
    supported: np.ndarray
    elbo_trace: np.ndarray
    trace_events: np.ndarray
    num_moves: int
    num_passes: int
    converged: bool

    @property
    def elbo(self):
        return float(self.elbo_trace[-1])




class _Schedule:
    """Buffers of one fit: the active columns Phi_A (N, K), B = Phi^T diag(W) Phi_A (M, K) (and
    Phi^T Phi_A where W is uniform, so that a new E[gamma] rescales it), Sigma, mu, and the
    statistics S_m = h_m - B_m^T Sigma B_m, Q_m = b_m - B_m^T mu of every coefficient, with
    h = Phi^2^T W and b = Phi^T r (Tipping & Faul 2003's S and Q for the quadratic factor)."""

    def __init__(self, Phi, factor, a0, b0, exact=None):
        self.Phi, self.factor, self.a0, self.b0 = Phi, factor, a0, b0
        self.exact = not is_vague(a0) if exact is None else bool(exact)  # the entry rule (best_move)
        N, M = Phi.shape
        self.col_sq = np.einsum("nm,nm->m", Phi, Phi)
        self._sq = None
        self._target = None  # r / W where W is uniform, and Phi^T of it
        cap = 16
        self.A = np.zeros((N, cap), order="F")
        self.B = np.zeros((M, cap))
        self.C = np.zeros((M, cap)) if factor.uniform else None  # Phi^T Phi_A
        self.Sigma = np.zeros((cap, cap))
        self.mu = np.zeros(cap)
        self.index = np.zeros(cap, dtype=np.intp)
        self.K = 0
        self.x = np.ones(M)
        self.blocked = np.zeros(M, dtype=bool)  # nearly collinear with an active coefficient
        self.held = np.zeros(M, dtype=bool)  # a move refused in this pass (see add, reestimate)
        self.pending = ()  # re-estimates below best_move's floor, for polish
        self.settle = LOG_ALPHA_TOL  # the smallest move polish makes (see polish)
        self.set_factor()

    # buffers -------------------------------------------------------------------------------------
    @property
    def active(self):
        return self.index[:self.K]

    def squared(self):
        if self._sq is None:
            self._sq = self.Phi * self.Phi
        return self._sq

    def gram_active(self):
        """Phi_A^T Phi_A (K, K)."""
        K = self.K
        if self.C is not None:
            return self.C[self.active, :K]
        A = self.A[:, :K]
        return A.T @ A

    def frozen_var(self):
        v = 1.0 / (self.x + self.h)
        v[self.active] = 0.0
        return v

    def _grow(self):
        cap = 2 * self.A.shape[1]
        K = self.K

        def grown(old, shape, order="C"):
            new = np.zeros(shape, order=order)
            new[tuple(slice(0, n) for n in old.shape)] = old
            return new

        self.A = grown(self.A[:, :K], (self.A.shape[0], cap), "F")
        self.B = grown(self.B[:, :K], (self.B.shape[0], cap))
        if self.C is not None:
            self.C = grown(self.C[:, :K], (self.C.shape[0], cap))
        self.Sigma = grown(self.Sigma[:K, :K], (cap, cap))
        self.mu = grown(self.mu[:K], (cap,))
        self.index = grown(self.index[:K], (cap,)).astype(np.intp)

    # the likelihood factor -------------------------------------------------------------------------
    def set_factor(self):
        """(W, r) from the factor; h, b, B for them; the frozen q(alpha) at their optimum (2); then
        q(w) and the statistics exactly (:meth:`refresh`)."""
        W, r = self.factor.weights()
        K, a = self.K, self.active
        if self.factor.uniform:
            g = float(W[0])
            target = r / g
            if self._target is None or not np.array_equal(target, self._target[0]):
                self._target = (target, self.Phi.T @ target)
            self.h = g * self.col_sq
            self.b = g * self._target[1]
            self.B[:, :K] = g * self.C[:, :K]
        else:
            self.h = self.squared().T @ W
            self.b = self.Phi.T @ r
            self.B[:, :K] = self.Phi.T @ (W[:, None] * self.A[:, :K])
        self.W = W
        x_out, _ = frozen_optimum(self.h, self.a0, self.b0)
        frozen = np.ones(self.x.shape[0], dtype=bool)
        frozen[a] = False
        self.x[frozen] = x_out[frozen]
        self.refresh()

    def refresh(self):
        """q(w) = N(mu, Sigma) for the active set at the current E[alpha], and S, Q, exactly."""
        K, a = self.K, self.active
        Sigma, mu = inverse_and_mean(self.B[a, :K] + np.diag(self.x[a]), self.b[a])
        self.Sigma[:K, :K], self.mu[:K] = Sigma, mu
        B = self.B[:, :K]
        self.S = self.h - np.einsum("mk,mk->m", B @ Sigma, B)
        self.Q = self.b - B @ mu

    # moves ------------------------------------------------------------------------------------------
    def leave_one_out(self):
        """s_k and q_k of eq. (3) for every coefficient (M,): S and Q for the frozen ones; for the
        active ones q = mu_k / Sigma_kk and s = x S / (x - S) where x Sigma_kk > 1/2, else
        s = 1/Sigma_kk - x (each form where it has no cancellation)."""
        s, q = self.S.copy(), self.Q.copy()
        K, a = self.K, self.active
        if K:
            xa, diag, sa = self.x[a], np.diag(self.Sigma)[:K], self.S[a]
            with np.errstate(divide="ignore", invalid="ignore"):
                s[a] = np.where(xa * diag > 0.5, xa * sa / (xa - sa), 1.0 / diag - xa)
            q[a] = self.mu[:K] / diag
        return s, q

    def spread(self):
        """kappa = sum_k (h_k + x_k) Sigma_kk over the active block: the trace of the inverse of its
        precision Phi_A^T W Phi_A + diag(x_A) scaled to a unit diagonal, between 1/lambda_min and
        K/lambda_min of that scaled precision (1 for orthogonal columns)."""
        K, a = self.K, self.active
        return float((self.h[a] + self.x[a]) @ np.diag(self.Sigma)[:K])

    def best_move(self, floor):
        """(kind, coefficient, target E[alpha], gain) of the significant move with the largest gain,
        or None: an add of a frozen coefficient (eq. (1) at its maximiser against (2) at x_k, the
        maximiser of (2)): with ``exact`` any (the exact comparison), else only one the data
        support (q^2 > s) that is not nearly collinear with an active one (|cosine| >
        MAX_ALIGNMENT, Tipping's SparseBayes's alignment test); or a re-estimate of an active one
        to the maximiser of (1) that changes ln E[alpha_k] by at least LOG_ALPHA_TOL; either must
        gain more than ``floor`` nats (module docstring, "Sparsity").

        Moves the statistics cannot resolve are not candidates: a coefficient whose s_k is below
        ``_COLLINEAR`` h_k (its column is in the span of the active ones to working precision; s_k
        may be negative from rounding), one whose move this pass refused (``held``), and a move that
        would take the spread (:meth:`spread`) above ``MAX_SPREAD``, by the move's own term alone
        (an add raises kappa by (h_k + x) / (x + s_k) and more, a re-estimate down to x replaces
        its term by that and raises the others'). :meth:`add` and :meth:`reestimate` check the
        spread after the move exactly."""
        s, q = self.leave_one_out()
        M = s.shape[0]
        is_active = np.zeros(M, dtype=bool)
        is_active[self.active] = True
        with np.errstate(invalid="ignore"):
            resolved = (self.h > 0) & (s >= _COLLINEAR * self.h) & ~self.held
            entering = self.exact | (~self.blocked & (np.abs(q) > np.sqrt(np.maximum(s, 0.0))))  # the entry rule
            supported = (~is_active) & resolved & entering
        slots = np.flatnonzero(resolved[self.active])
        moving = self.active[slots]
        candidates = np.concatenate([moving, np.flatnonzero(supported)])
        self.pending = ()
        if len(candidates) == 0:
            return None
        sc = s[candidates]
        qc = q[candidates]
        xc = self.x[candidates]
        hc = self.h[candidates]
        K = len(moving)
        # Newton's guesses: the current E[alpha] in the model, Tipping & Faul's s^2 / (q^2 - s) to enter
        # (the frozen E[alpha_k] where q^2 <= s)
        guess = xc.copy()
        with np.errstate(divide="ignore", invalid="ignore"):
            excess = (qc[K:] - np.sqrt(sc[K:])) * (qc[K:] + np.sqrt(sc[K:]))
            guess[K:] = np.where(excess > 0, sc[K:] * sc[K:] / excess, xc[K:])
        x_in, value_in = warm_optimum(sc, qc, self.a0, self.b0, guess)
        gain = np.empty(len(candidates))
        with np.errstate(invalid="ignore", divide="ignore"):
            gain[:K] = in_model_change(xc[:K], x_in[:K], sc[:K], qc[:K], self.a0, self.b0)
            if self.b0 == 0:
                gain[:K] = np.where(np.isfinite(x_in[:K]), gain[:K], value_in[:K] - in_model_value(
                    xc[:K], sc[:K], qc[:K], self.a0, self.b0))
            small = np.abs(np.log(x_in[:K] / xc[:K])) < LOG_ALPHA_TOL
            # the spread after the move, from the move's own term (a lower bound where it raises it)
            spread = self.spread()
            own = (hc + x_in) / (x_in + sc)
            own[:K] -= (hc[:K] + xc[:K]) * np.diag(self.Sigma)[slots]
            wide = spread + own > max(MAX_SPREAD, spread)
            # the re-estimates polish may make: each moves E[alpha_k] by ``settle`` (relative,
            # weighted by the data's share of w_k's precision) and gains
            x_k, s_k = xc[:K], sc[:K]
            moved = s_k / (x_k + s_k) * np.abs(x_in[:K] - x_k) / np.maximum(x_in[:K], x_k)
            settling = (moved >= self.settle) & (gain[:K] > 0) & ~wide[:K]
        gain[:K][small] = -np.inf
        gain[K:] = value_in[K:] - frozen_value(xc[K:], hc[K:], self.a0, self.b0)
        gain[wide] = -np.inf
        j = int(np.argmax(gain))
        if not gain[j] > floor:
            self.pending = moving[settling]
            return None
        return (REESTIMATE if j < K else ADD), int(candidates[j]), float(x_in[j]), float(gain[j])

    def joint_value(self, x_active):
        """F(x_A) = 1/2 b_A^T P^-1 b_A - 1/2 ln|P| + sum_k [(a0 + 1/2) ln x_k - b0 x_k], P = B_AA +
        diag(x_A): the ELBO as a function of the active coefficients' E[alpha] with q(w) at its
        optimum for them, up to a constant (each coordinate of it is eq. (1) of its coefficient:
        the ELBO gain of any change of x_A is the change of F). Returns (F, Sigma, mu), or None
        where P is not positive definite to working precision."""
        K, a = self.K, self.active
        P = self.B[a, :K] + np.diag(x_active)
        d = 1.0 / np.sqrt(np.diag(P))
        try:
            chol = np.linalg.cholesky(P * d[:, None] * d[None, :])
        except np.linalg.LinAlgError:
            return None
        inv_chol = scipy.linalg.solve_triangular(chol, np.eye(K), lower=True, check_finite=False)
        Sigma = (inv_chol.T @ inv_chol) * d[:, None] * d[None, :]
        Sigma = 0.5 * (Sigma + Sigma.T)
        mu = Sigma @ self.b[a]
        log_det = 2.0 * float(np.sum(np.log(np.diag(chol)))) - 2.0 * float(np.sum(np.log(d)))
        prior = (self.a0 + 0.5) * np.log(x_active) - self.b0 * x_active
        return 0.5 * float(self.b[a] @ mu) - 0.5 * log_det + float(np.sum(prior)), Sigma, mu

    def joint_derivatives(self):
        """(g, H): the gradient and Hessian of F (:meth:`joint_value`) in x_A at the current state,
        g_k = (a0 + 1/2)/x_k - b0 - (mu_k^2 + Sigma_kk)/2 and H_jk = mu_j mu_k Sigma_jk +
        Sigma_jk^2 / 2 - delta_jk (a0 + 1/2)/x_k^2 (dSigma/dx_k = -Sigma e_k e_k^T Sigma, dmu/dx_k =
        -mu_k Sigma e_k)."""
        K, a = self.K, self.active
        x, Sigma, mu = self.x[a], self.Sigma[:K, :K], self.mu[:K]
        shape = self.a0 + 0.5
        g = shape / x - self.b0 - 0.5 * (mu * mu + np.diag(Sigma))
        H = np.outer(mu, mu) * Sigma + 0.5 * Sigma * Sigma - np.diag(shape / (x * x))
        return g, H

    def newton_polish(self):
        """One Newton step on F (:meth:`joint_value`) in ln x_A over the active coefficients whose
        s_k is resolved and that this pass has not held, the others held: with the gradient g and
        Hessian H of F in x (:meth:`joint_derivatives`), the step solves the Newton equations in
        ln x (damped until minus the Hessian is positive definite), halved until F rises; none
        where a step would take the spread (:meth:`spread`) above ``MAX_SPREAD`` (where that limit
        binds, the one-coefficient moves and their refusals decide). Made only where it
        moves some E[alpha_k] by at least ``settle`` (relative, weighted by the data's share s_k /
        (x_k + s_k), as :meth:`polish` weighs a re-estimate). It does the work of many cycles of
        one-coefficient re-estimates, which converge slowly where the active columns are
        correlated. Returns its ELBO gain, or None where no such step exists (the state is then
        as it was)."""
        K, a = self.K, self.active
        if K == 0:
            return None
        s, _ = self.leave_one_out()
        x = self.x[a].copy()
        free = (s[a] >= _COLLINEAR * self.h[a]) & ~self.held[a]
        if not np.any(free):
            return None
        start = self.joint_value(x)
        if start is None:
            return None
        g, H = self.joint_derivatives()
        step = log_newton_step(x, g, H, free)
        if step is None:
            return None
        weight = s[a][free] / (x[free] + s[a][free])
        t = 1.0
        for _ in range(30):
            trial = x.copy()
            with np.errstate(over="ignore"):
                trial[free] = x[free] * np.exp(t * step)
            if not np.all(np.isfinite(trial) & (trial > 0)):  # a step past the floating-point range: shorter
                t *= 0.5
                continue
            moved = weight * np.abs(trial[free] - x[free]) / np.maximum(trial[free], x[free])
            if not np.max(moved) >= self.settle:
                return None
            value = self.joint_value(trial)
            if value is not None:
                if float((self.h[a] + trial) @ np.diag(value[1])) > MAX_SPREAD:
                    return None  # the spread limit binds: the one-coefficient moves decide there
                if value[0] > start[0]:
                    self.x[a] = trial
                    self.refresh()
                    return value[0] - start[0]
            t *= 0.5
        return None

    def polish(self, budget=None):
        """Where :meth:`best_move` left re-estimates below its floor (the ones that gain anything and
        move E[alpha_k] by at least ``settle``, relative and weighted by the data's share s_k / (x_k
        + s_k) of w_k's precision, as the sweep's stopping rule weighs them,
        :func:`ppl_sbl.engine.state_change`; together they can be worth more than the floor): one
        joint Newton step on the active precisions (:meth:`newton_polish`) where it makes one;
        else one cycle over those re-estimates in the order the coefficients entered, each
        re-estimated to the maximiser of (1) given the others, as they stand then, where that
        still moves it so, gains, its s_k is resolved (at least ``_COLLINEAR`` h_k) and
        :meth:`reestimate` does not refuse it (it is then held for the pass); at most ``budget``
        moves. Returns the gains of the moves made, in order."""
        gains = []
        pending, self.pending = self.pending, ()
        if len(pending) and (budget is None or budget > 0):
            gain = self.newton_polish()
            if gain is not None:
                return [gain]
        for k in pending:
            if budget is not None and len(gains) >= budget:
                break
            k = int(k)
            j = int(np.flatnonzero(self.active == k)[0])
            x, diag = float(self.x[k]), float(self.Sigma[j, j])
            S_k = float(self.S[k])
            s = x * S_k / (x - S_k) if x * diag > 0.5 else 1.0 / diag - x
            if not s >= _COLLINEAR * float(self.h[k]):
                continue
            q = float(self.mu[j]) / diag
            x_new, _ = scalar_optimum(s, q, self.a0, self.b0)
            if not (math.isfinite(x_new) and s / (x + s) * abs(x_new - x) / max(x_new, x) >= self.settle):
                continue
            gain = float(in_model_change(x, x_new, s, q, self.a0, self.b0))
            if gain > 0:
                if self.reestimate(k, x_new, j):
                    gains.append(gain)
                else:
                    self.held[k] = True
        return gains

    def add(self, k, x_new):
        """Coefficient k joins the model with E[alpha_k] = x_new: with z = Sigma B_k, Sigma_kk' =
        1/(x_new + S_k), mu_k' = Sigma_kk' Q_k, e = Phi^T W phi_k - B z, the old block gains
        Sigma_kk' z z^T, mu loses mu_k' z, S_m -= Sigma_kk' e_m^2, Q_m -= mu_k' e_m
        (Tipping & Faul 2003, appendix). One product with the design, then O(M K).

        Returns False, changing nothing, where the move is refused: where 1/Sigma_kk' = x_new + S_k
        is not positive (the column is in the span of the active ones to working precision), or
        where the spread (:meth:`spread`) after it, sum_j (h_j + x_j) (Sigma_jj + Sigma_kk' z_j^2)
        + (h_k + x_new) Sigma_kk', exceeds both ``MAX_SPREAD`` and the spread before it."""
        K = self.K
        a = self.active
        z = self.Sigma[:K, :K] @ self.B[k, :K]
        sigma_kk = 1.0 / (x_new + self.S[k])
        if not (sigma_kk > 0 and math.isfinite(sigma_kk)):
            return False
        weight = self.h[a] + self.x[a]
        spread = float(weight @ np.diag(self.Sigma)[:K])
        after = spread + sigma_kk * float(weight @ (z * z)) + (self.h[k] + x_new) * sigma_kk
        if after > MAX_SPREAD and after > spread:
            return False
        if K == self.A.shape[1]:
            self._grow()
        phi = self.Phi[:, k]
        c = self.Phi.T @ phi
        column = float(self.W[0]) * c if self.C is not None else self.Phi.T @ (self.W * phi)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.blocked |= np.abs(c) > MAX_ALIGNMENT * np.sqrt(self.col_sq[k] * self.col_sq)
        mu_k = sigma_kk * self.Q[k]
        e = column - self.B[:, :K] @ z
        self.Sigma[:K, :K] += sigma_kk * np.outer(z, z)
        self.Sigma[:K, K] = self.Sigma[K, :K] = -sigma_kk * z
        self.Sigma[K, K] = sigma_kk
        self.mu[:K] -= mu_k * z
        self.mu[K] = mu_k
        self.S -= sigma_kk * e * e
        self.Q -= mu_k * e
        self.A[:, K] = phi
        self.B[:, K] = column
        if self.C is not None:
            self.C[:, K] = c
        self.index[K] = k
        self.K = K + 1
        self.x[k] = x_new
        return True

    def reestimate(self, k, x_new, j=None):
        """E[alpha_k] of active k to x_new: with Delta = x_new - x_k, kappa = Delta / (1 + Delta
        Sigma_jj): Sigma -= kappa Sigma_j Sigma_j^T, mu -= kappa mu_j Sigma_j, S_m += kappa e_m^2,
        Q_m += kappa mu_j e_m with e = B Sigma_j. O(M K).

        Returns False, changing nothing, where the move is refused: where Sigma_jj' = Sigma_jj /
        (1 + Delta Sigma_jj) is not positive (rounding has left Sigma_jj at or above 1/x_k: s_k is
        not resolved), or where the spread (:meth:`spread`) after it exceeds both ``MAX_SPREAD``
        and the spread before it."""
        K = self.K
        if j is None:
            j = int(np.flatnonzero(self.active == k)[0])
        delta = x_new - self.x[k]
        col = self.Sigma[:K, j].copy()
        denom = 1.0 + delta * col[j]
        if not (denom > 0 and col[j] > 0 and math.isfinite(x_new)):
            return False
        kappa = delta / denom
        a = self.active
        weight = self.h[a] + self.x[a]
        diag = np.diag(self.Sigma)[:K]
        spread = float(weight @ diag)
        after = spread - kappa * float(weight @ (col * col)) + delta * col[j] / denom
        if after > MAX_SPREAD and after > spread:
            return False
        mu_j = self.mu[j]
        e = self.B[:, :K] @ col
        self.Sigma[:K, :K] -= kappa * np.outer(col, col)
        self.mu[:K] -= kappa * mu_j * col
        self.S += kappa * e * e
        self.Q += kappa * mu_j * e
        self.x[k] = x_new
        return True

    # the ELBO ---------------------------------------------------------------------------------------
    def moments(self):
        return Moments(self)

    def elbo(self, moments=None):
        """The restricted-family ELBO: the likelihood factor's terms (from the moments of Phi w)
        plus E[ln p(w|alpha)] + E[ln p(alpha)] + H[q(w)] + H[q(alpha)]."""
        moments = self.moments() if moments is None else moments
        return self.factor.elbo_terms(moments) + self.prior_terms()

    def prior_terms(self):
        """E[ln p(w|alpha)] + E[ln p(alpha)] + H[q(w)] + H[q(alpha)] of this fit's coefficients."""
        K = self.K
        shape = np.full(self.x.shape[0], self.a0 + 0.5)
        return w_alpha_terms(self.active, self.mu[:K], self.Sigma[:K, :K], 1.0 / (self.x + self.h), shape,
                              shape / self.x, self.a0, self.b0)

    def supported(self):
        s, q = self.leave_one_out()
        a = self.active
        return np.abs(q[a]) > np.sqrt(np.maximum(s[a], 0.0))

    def result(self, trace, events, moves, passes, converged):
        K = self.K
        return FastFit(active=self.active.copy(), mu=self.mu[:K].copy(), Sigma=self.Sigma[:K, :K].copy(),
                       x=self.x.copy(), frozen_var=self.frozen_var(), supported=self.supported(),
                       elbo_trace=np.asarray(trace), trace_events=np.asarray(events, dtype=int),
                       num_moves=moves, num_passes=passes, converged=converged)


def schedule(Phi, factor, *, a0=1e-6, b0=1e-6, tol=1e-9, max_passes=1000, max_moves=None, progress=None,
             target_scale=1.0, entry=None, vague_only=False, compiled=False):
    """The fast variational schedule: from the empty model, the best significant move at a time
    (:meth:`_Schedule.best_move`: adds by the entry rule below, re-estimates to the maximiser of
    (1), each gaining more than ``tol |ELBO|``) and, where none is left, a joint Newton step on the
    active precisions or a cycle over the re-estimates it left for their small gains
    (:meth:`_Schedule.polish`), until neither
    makes a move or the pass has made ``MOVES_PER_COEFFICIENT`` M moves; then the likelihood
    factor's own updates given q(w) (``factor.update``), q(w) and the statistics recomputed for
    its new (W, r), the frozen q(alpha) put at their optima (2). A move the working precision
    cannot resolve is not made (:meth:`_Schedule.best_move`, :meth:`_Schedule.add`,
    :meth:`_Schedule.reestimate`: a column in the span of the active ones, a move that would
    leave the active block's spread above ``MAX_SPREAD``); a refused move holds its coefficient
    for the rest of the pass and does not count as a move.
    The fit stops after a pass that made no move, whose update changed the ELBO by at most ``tol``
    (relative) and the factor's (W, r) by at most sqrt(``tol``) (relative, pointwise: the sweep's
    rule on its state, :func:`ppl_sbl.engine.state_tol`), and after which no factor holds back a
    part of itself (``factor.release()``, the robust factors' q(omega)). Every move and every
    update is a coordinate ascent step of the restricted-family ELBO, so it never decreases.

    The entry rule (module docstring, "Sparsity"): with a vague prior (:func:`ppl_sbl.priors.is_vague`)
    a frozen coefficient enters only where the data support it (q_k^2 > s_k, the limit a0 = b0 -> 0
    of the exact comparison) and the alignment test allows it: a sparse fit; with a proper prior
    the exact comparison, max (1) - max (2), decides, as for any move: every coefficient whose
    column the statistics resolve enters, towards the ELBO's dense optimum. No coefficient leaves
    the model: freezing one always lowers the ELBO, and one the data stop supporting goes on at
    the maximiser of (1), a large E[alpha_k] of order sqrt(s_k / (2 b0)); ``FastFit.supported``
    tells them apart.

    Parameters
    ----------
    Phi : (N, M) float64 design matrix.
    factor : the likelihood's other factors, with ``uniform`` (W the same for every point: the
        projection Phi^T (r / W) is then cached while r / W stays the same), ``weights()`` ->
        (W, r), ``update(moments)`` (coordinate updates given :class:`Moments`) and
        ``elbo_terms(moments)`` (its part of the ELBO); optionally ``release()`` -> bool (True
        if it held part of itself fixed until now: the fit then goes on).
    a0, b0 : the Gamma prior of each alpha_k (both > 0, or both 0); ``b0`` a scalar or one rate
        per coefficient (M,) (:mod:`ppl_sbl.priors`). The fit runs in the units in which every
        prior has rate a0 (prior mean E[alpha_k] = 1): column k multiplied by g_k =
        sqrt(b0_k / a0), so that w_k = g_k w'_k; see :func:`standard_units`.
    target_scale : s, where the caller's factor holds the targets divided by s (and the noise
        prior's rate divided by s^2): the design is divided by s too, and the ELBO of the
        original targets is the fit's minus N ln s (the density of t = s t').
    tol : the stopping rule's tolerance (above); a move of :meth:`_Schedule.best_move` must gain
        more than ``tol |ELBO|`` nats. With several outputs the fit stops once a pass changes the
        ELBO by at most ``tol`` (relative).
    max_passes, max_moves : upper limits (default moves: none but ``max_passes``, each pass making
        at most ``MOVES_PER_COEFFICIENT`` M of them, per output with several); a fit stopped by
        either has ``converged`` False.
    progress : callable(passes, moves, elbo, active), called after every pass (with ``compiled``:
        between calls of the program, a few times a second, and at the end), or None.
    entry : None (the rule by the prior, above), ``"supported"`` (q^2 > s and the alignment test,
        whatever the prior) or ``"exact"`` (the exact comparison, whatever the prior).
    vague_only : raise :class:`NotApplicable` before any fitting where the prior is not vague
        (``CAVI``'s ``schedule="auto"`` passes True: it runs the sweep there).
    compiled : run the passes as one compiled XLA program (:mod:`ppl_sbl.fast_ard.compiled`): the
        same moves as the host loop, for one output (:class:`GaussianNoise`,
        :class:`JaakkolaJordan`, :class:`RobustJaakkolaJordan`, :class:`RobustGaussianNoise`) or the
        outputs of a :class:`MultinomialProbit` (:mod:`ppl_sbl.fast_ard.compiled_outputs`) with a
        proper hyperprior (a0, b0 > 0); the program compiles once per shape.

    Several outputs. A factor with ``num_outputs`` = C (see :func:`ppl_sbl.fast_ard.outputs.schedule_outputs`) has C
    coefficient vectors w_1, ..., w_C on the same design, each with its own ARD prior and active
    set; the fit is then a :class:`MultiFastFit`.

    Returns
    -------
    FastFit (MultiFastFit for a factor with several outputs).
    """
    outputs = getattr(factor, "num_outputs", None) is not None
    scaled = not compiled or outputs  # the single-output program scales the design into its padded copy
    Phi, a0, b0, gain, offset, exact = _checked(Phi, factor, a0, b0, tol, target_scale, entry, vague_only, compiled,
                                                scaled)
    if outputs:
        if compiled:
            out = compiled_outputs.run(Phi, factor, a0, b0, tol, max_passes, max_moves, progress, exact)
            fit = MultiFastFit(**dict(out, fits=tuple(FastFit(**f) for f in out["fits"])))
        else:
            fit = schedule_outputs(Phi, factor, a0, b0, tol, max_passes, max_moves, progress, exact, _Schedule)
        if gain is None and offset == 0.0:
            return fit
        return fit._replace(fits=tuple(original_units(f, gain, offset) for f in fit.fits),
                            elbo_trace=fit.elbo_trace + offset)
    if compiled:
        fit = FastFit(**compiled_schedule.run(Phi, factor, a0, b0, tol, max_passes, max_moves, progress, exact,
                                              scale=column_scale(gain, target_scale)))
    else:
        fit = _schedule(Phi, factor, a0, b0, tol, max_passes, max_moves, progress, exact)
    return fit if gain is None and offset == 0.0 else original_units(fit, gain, offset)


def _checked(Phi, factor, a0, b0, tol, target_scale, entry, vague_only, compiled, scaled=True):
    """:func:`schedule`'s checks and units: (Phi, a0, b0, gain, offset) of :func:`standard_units`
    (``scaled=False``: Phi not yet multiplied by :func:`column_scale`) and the entry rule
    (``exact``)."""
    Phi, a0, b0, gain, offset = standard_units(Phi, a0, b0, target_scale, scale_design=scaled)
    if not (tol > 0):
        raise ValueError(f"`tol` must be > 0; got {tol!r}.")
    if entry not in (None, "exact", "supported"):
        raise ValueError(f"`entry` must be None, 'exact' or 'supported'; got {entry!r}.")
    exact = not is_vague(a0) if entry is None else entry == "exact"
    if vague_only and not is_vague(a0):
        raise NotApplicable(f"the hyperprior shape a0={a0!r} is not vague (a0 >= ppl_sbl.priors.VAGUE_SHAPE): the "
                            "ELBO's optimum keeps every coefficient in the model, where the sweep goes directly.")
    if compiled and not (compiled_schedule.supports(factor) or compiled_outputs.supports(factor)):
        raise ValueError(f"`compiled=True`: the compiled schedule does not fit a {type(factor).__name__} factor.")
    return Phi, a0, b0, gain, offset, exact


class Plan(NamedTuple):
    """A fast fit set up but not run: :func:`schedule`'s ``Phi``, ``factor`` and keywords
    (``options``), and ``finish(fit)``, which turns the fit into what the guide's ``fast`` returns
    (:class:`ppl_sbl.guide.ClosedFormGuide`). ``run`` is :func:`schedule` itself or another
    schedule with its signature (e.g. :func:`ppl_sbl.fast_ard.group_schedule` with the groups
    bound)."""

    Phi: np.ndarray
    factor: object
    options: dict
    finish: object
    run: object = None

    def __call__(self):
        """The fit: ``finish(run(Phi, factor, **options))``."""
        return self.finish((self.run or schedule)(self.Phi, self.factor, **self.options))


class Planned:
    """The guide's ``fast`` function of a function that returns a :class:`Plan`: the plan, run
    (with the plan function's signature; pickled by its reference)."""

    def __init__(self, plan):
        self.plan = plan

    @property
    def __signature__(self):
        return inspect.signature(self.plan)

    def __call__(self, *args, **kwargs):
        return self.plan(*args, **kwargs)()


def schedule_many(plans, batch_size=1, threads=1):
    """The fits of several :class:`Plan` in one compiled program
    (:func:`ppl_sbl.fast_ard.compiled.run_many`, with its ``batch_size`` and ``threads``): every
    plan of :func:`schedule` (whatever its ``compiled``), one output, designs of one shape and
    factors of one kind. Returns their :class:`FastFit`, each the same as
    ``schedule(plan.Phi, plan.factor, **plan.options, compiled=True)``."""
    lanes, units = [], []
    for plan in plans:
        if plan.run not in (None, schedule):
            raise ValueError("fits run together take one precision per coefficient (no `groups`); fit grouped "
                             "precisions one by one, or with schedule='sweep'.")
        if getattr(plan.factor, "num_outputs", None) is not None:
            raise ValueError("fits run together take one output each; fit several outputs one by one.")
        o = inspect.signature(schedule).bind(plan.Phi, plan.factor, **plan.options)
        o.apply_defaults()
        o = o.arguments
        Phi, a0, b0, gain, offset, exact = _checked(plan.Phi, plan.factor, o["a0"], o["b0"], o["tol"],
                                                    o["target_scale"], o["entry"], o["vague_only"], True)
        lanes.append((Phi, plan.factor, a0, b0, o["tol"], o["max_passes"], o["max_moves"], exact))
        units.append((gain, offset))
    fits = compiled_schedule.run_many(lanes, batch_size, threads=threads)
    return [original_units(FastFit(**fit), gain, offset) if gain is not None or offset != 0.0 else FastFit(**fit)
            for fit, (gain, offset) in zip(fits, units)]


def _schedule(Phi, factor, a0, b0, tol, max_passes, max_moves, progress, exact):
    """:func:`schedule` with one output, in the units of :func:`standard_units`."""
    work = _Schedule(Phi, factor, a0, b0, exact)
    return run_passes(work, factor, tol, max_passes, max_moves, progress, MOVES_PER_COEFFICIENT * Phi.shape[1])
