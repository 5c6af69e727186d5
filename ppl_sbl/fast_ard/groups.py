"""The fast variational schedule for grouped precisions (group ARD): one Gamma precision shared by
each group of coefficients, whole groups added and re-estimated by their exact ELBO gain.

Model. Groups g = 1..G partition the coefficients; alpha_g ~ Gamma(a0, b0), w_k | alpha ~
N(0, 1 / alpha_g) for k in g (d_g coefficients), and a likelihood that, with its other factors
held, is quadratic in w, as in :mod:`ppl_sbl.fast_ard` (W and r). Restricted family: the active
groups' coefficients have a joint q(w_A) = N(mu, Sigma); a frozen group's coefficients are
independent, q(w_k) = N(0, v_k); q(alpha_g) = Gamma(a0 + d_g / 2, (a0 + d_g / 2) / x_g) with
x_g = E[alpha_g] (its optimal shape whatever q(w)).

Collapsed ELBO of one group. With the other groups' factors held and q(w) re-optimised, the ELBO
as a function of group g's x is a constant plus

    in the model:  F_in(x)  = 1/2 Q^T (S + x I)^-1 Q - 1/2 ln det(I + S / x) + a0 ln x - b0 x
                            = sum_j [ 1/2 q_j^2 / (x + l_j) - 1/2 ln(1 + l_j / x) ] + a0 ln x - b0 x   (G1)
    frozen:        F_out(x) = -1/2 sum_{k in g} ln(1 + h_k / x) + a0 ln x - b0 x                     (G2)

with S (d_g x d_g) and Q the group's leave-group-out precision and quality (the block form of
Tipping & Faul's s and q, eq. (3) of :mod:`ppl_sbl.fast_ard`: S = H_gg - B_g^T C^-1 B_g over the
active set without g), l_j and q_j = u_j^T Q the eigenvalues and projections on the eigenvectors
u_j of S, and h_k the data precision of w_k alone (frozen: v_k = 1 / (x + h_k) is optimal). (G1)
is the Schur complement of the active precision's block g: ln det C = ln det C_{-g} + ln det(S +
x I), b^T C^-1 b = b_{-g}^T C_{-g}^-1 b_{-g} + Q^T (S + x I)^-1 Q, and the group's d_g / 2 E[ln
alpha_g] of the prior, a0 ln x - b0 x of the hyperprior and the entropy of q(alpha_g). For one
coefficient (d_g = 1) (G1) and (G2) are (1) and (2) of :mod:`ppl_sbl.fast_ard`.

Maximisers. F_in is a sum of unimodal terms in x plus a0 ln x - b0 x, not unimodal itself: every
term rises below its own maximiser l_j^2 / (q_j^2 - l_j) (for q_j^2 > l_j; it rises everywhere
otherwise) and a0 ln x - b0 x below a0 / b0, so F_in rises below the least of these; F_in' <=
sum_j l_j / (2 x^2) + a0 / x - b0 < 0 beyond the positive root of b0 x^2 - a0 x - sum_j l_j / 2.
:func:`group_in_model_optimum` searches that bracket on a grid in ln x and polishes the best point
by Newton's method on the scalar equation F_in'(x) = 0 (kept inside the grid's neighbours, a step
taken only where it raises F_in). F_out' = 0 is sum_k h_k / (2 x (x + h_k)) + a0 / x - b0 = 0, whose
left side times x decreases in x: one root, by bisection in ln x (:func:`group_frozen_optimum`).

Entry. As in :mod:`ppl_sbl.fast_ard` ("Sparsity"), F_in >= F_out for every x, so under a proper
prior every group gains by entering; under a vague prior (:func:`ppl_sbl.priors.is_vague`) a frozen
group enters only where the data support it, in the limit a0 = b0 -> 0 of the exact comparison:
sup_x F_in^0(x) > 0 = sup_x F_out^0(x), with F^0 the functions at a0 = b0 = 0
(:func:`group_supported`; for one coefficient q^2 > s). A group's directions that its statistics
do not resolve (eigenvalues of S below ``COLLINEAR`` of its data precision: its columns lie in the
span of the active ones, or of each other, to working precision) are dropped from (G1): they carry
neither precision nor quality.

Moves (:func:`group_schedule`): add a frozen group at the global maximiser of (G1), or
re-estimate an active one to the maximiser Newton's method reaches from its current x; the gain is
the exact change of the restricted-family ELBO, F_in(x') - F_out(x_g) or F_in(x') - F_in(x_g).
A move updates q(w) and every group's S and Q by the block form of Tipping & Faul's (2003,
appendix) rank-one updates (rank d_g); a pass starts from a fresh Cholesky factorisation. A
third move re-estimates all active groups at once: one damped Newton step on the ELBO as a
function of their x (:meth:`_GroupSchedule.newton_trial`), where correlated groups make the
one-group re-estimates converge slowly; it is made where it gains more than the best one-group
re-estimate (and, below the floor, before them), and refactorises q(w) afresh.
Passes and the stopping rule are :func:`ppl_sbl.fast_ard.schedule`'s: the best move above
tol |ELBO| at a time, then the re-estimates below that floor that still move ln E[alpha_g] by
sqrt(tol) (weighted by the data's share of the group's precision), then the likelihood factor's
update given q(w), the frozen groups' x at the maximiser of (G2). No group leaves the model
(freezing lowers the ELBO); ``supported`` tells the groups the data support from the rest.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import scipy.linalg

from ..priors import is_vague
from .algebra import log_newton_step, w_alpha_terms
from .group_algebra import (COLLINEAR, frozen_values, in_model_maximiser, in_model_values, group_frozen_optimum,
                            group_frozen_value, group_in_model_optimum, group_in_model_value, group_supported)
from .schedule import ADD, LOG_ALPHA_TOL, MOVES_PER_COEFFICIENT, REESTIMATE, NotApplicable, run_passes
from .units import original_units, standard_units

__all__ = ["GroupFastFit", "group_in_model_value", "group_frozen_value", "group_in_model_optimum",
           "group_frozen_optimum", "group_supported", "group_schedule"]

JOINT = -1  # the "group" of a move that is the joint Newton step over the active groups


class GroupFastFit(NamedTuple):
    """The result of :func:`group_schedule`: the fields of :class:`ppl_sbl.fast_ard.FastFit`
    (``active`` the coefficients of the active groups in the order of ``mu`` and ``Sigma``, ``x``
    (M,) E[alpha] of each coefficient's group, ``frozen_var``, ``supported`` (K,) whether the data
    support each active coefficient's group, the trace, moves, passes, converged) and ``groups``
    (M,) each coefficient's group (0..G-1), ``group_active`` and ``group_supported`` (G,) masks."""

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
    groups: np.ndarray
    group_active: np.ndarray
    group_supported: np.ndarray

    @property
    def elbo(self):
        return float(self.elbo_trace[-1])


# the schedule ------------------------------------------------------------------------------------------
class _Moments:
    """The moments of phi_n^T w under a group schedule's q(w) (``mean``, ``var`` (N,), ``var_sum``),
    as :class:`ppl_sbl.fast_ard.Moments` gives them to the likelihood factor (``var`` formed on
    first use where a uniform W gives ``var_sum`` from the kept projections)."""

    def __init__(self, work):
        self._work, self._var = work, None
        self._A = work.Phi[:, work.active]
        self.mean = self._A @ work.mu
        if work.uniform:
            self.var_sum = float(np.sum(work.C[work.active] * work.Sigma) + work.col_sq @ work.frozen_var())
        else:
            self.var_sum = float(np.sum(self.var))

    @property
    def var(self):
        if self._var is None:
            work, A = self._work, self._A
            self._var = np.einsum("nk,nk->n", A @ work.Sigma, A) + work.squared() @ work.frozen_var()
        return self._var


class _GroupSchedule:
    """One fit's state: the groups' padded member table (G, d) (padding points at a zero column M),
    E[alpha_g], the active groups in order of entry, q(w) of their coefficients, and every group's
    statistics: H_gg = Phi_g^T W Phi_g, S_g = H_gg - B_g^T Sigma B_g and Q_g = b_g - B_g^T mu with
    B = Phi^T W Phi_A, b = Phi^T r (for an active group these include its own coefficients)."""

    def __init__(self, Phi, factor, groups, a0, b0, exact):
        self.Phi, self.factor, self.a0, self.b0, self.exact = Phi, factor, a0, b0, exact
        N, M = Phi.shape
        self.groups = groups
        G = int(groups.max()) + 1
        self.sizes = np.bincount(groups, minlength=G)
        order = np.argsort(groups, kind="stable")
        starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])
        d = int(self.sizes.max())
        slot = np.arange(M) - starts[groups[order]]
        self.members = np.full((G, d), M, dtype=np.intp)
        self.members[groups[order], slot] = order
        self.valid = self.members < M
        self.x = np.ones(G)
        self.in_model = np.zeros(G, dtype=bool)
        self.order = []  # active groups in order of entry
        self.active = np.zeros(0, dtype=np.intp)
        self.held = np.zeros(G, dtype=bool)
        self._sq = None
        # with a W the same for every row (factor.uniform) the design's projections are kept and
        # scaled: the groups' blocks Phi_g^T Phi_g, the columns' squared norms, Phi^T Phi_A
        self.uniform = bool(getattr(factor, "uniform", False))
        if self.uniform:
            self.P = self._group_blocks(np.ones(N))
            self.col_sq = np.einsum("nm,nm->m", Phi, Phi)
            self.C = np.zeros((M, 0))
            self._target = None
        self.set_factor()

    def squared(self):
        if self._sq is None:
            self._sq = self.Phi * self.Phi
        return self._sq

    def coefficient_x(self):
        return self.x[self.groups]

    def frozen_var(self):
        v = 1.0 / (self.coefficient_x() + self.h)
        v[self.active] = 0.0
        return v

    def _group_blocks(self, W):
        """Phi_g^T diag(W) Phi_g of every group (G, d, d), zero on the padding."""
        padded = np.concatenate([self.Phi, np.zeros((self.Phi.shape[0], 1))], axis=1)
        cols = padded[:, self.members].transpose(1, 0, 2)  # (G, N, d)
        return (cols * W[None, :, None]).transpose(0, 2, 1) @ cols

    def set_factor(self):
        """(W, r) from the factor; h, b, B, the groups' H blocks; the frozen groups' x at the
        maximiser of (G2); q(w) and the statistics (:meth:`refresh`)."""
        W, r = self.factor.weights()
        W = np.broadcast_to(np.asarray(W, dtype=np.float64), (self.Phi.shape[0],))
        self.W = W
        if self.uniform:
            g = float(W[0])
            target = np.asarray(r, dtype=np.float64) / g
            if self._target is None or not np.array_equal(target, self._target[0]):
                self._target = (target, self.Phi.T @ target)
            self.h, self.b, self.H, self.B = g * self.col_sq, g * self._target[1], g * self.P, g * self.C
        else:
            WPhi = self.Phi * W[:, None]
            self.h = np.einsum("nm,nm->m", WPhi, self.Phi)
            self.b = self.Phi.T @ r
            self.H = self._group_blocks(W)
            self.B = WPhi.T @ self.Phi[:, self.active] if len(self.active) else np.zeros((self.Phi.shape[1], 0))
        self.h_groups = np.where(self.valid, np.append(self.h, 0.0)[self.members], 0.0)
        frozen = ~self.in_model
        if np.any(frozen):
            self.x[frozen] = group_frozen_optimum(self.h_groups[frozen], self.a0, self.b0)[0]
        self.refresh()

    def _columns(self, cols):
        """Phi^T W Phi[:, cols] (M, len(cols)); with a uniform W, Phi^T Phi[:, cols] is kept."""
        if self.uniform:
            c = self.Phi.T @ self.Phi[:, cols]
            self.C = np.concatenate([self.C, c], axis=1)
            return float(self.W[0]) * c
        return self.Phi.T @ (self.W[:, None] * self.Phi[:, cols])

    def refresh(self):
        """q(w) of the active coefficients at the current x, and every group's S and Q, exactly."""
        K = len(self.active)
        if K:
            precision = self.B[self.active] + np.diag(self.coefficient_x()[self.active])
            d = 1.0 / np.sqrt(np.diag(precision))
            chol = scipy.linalg.cho_factor(precision * d[:, None] * d[None, :], lower=True)
            Sigma = scipy.linalg.cho_solve(chol, np.eye(K)) * d[:, None] * d[None, :]
            self.Sigma = 0.5 * (Sigma + Sigma.T)
            self.mu = self.Sigma @ self.b[self.active]
            self.log_det = -2.0 * float(np.sum(np.log(np.diag(chol[0])))) + 2.0 * float(np.sum(np.log(d)))
            self.S = self.H - self._blocks(self.B @ self.Sigma, self.B)
            self.Qv = self.b - self.B @ self.mu
        else:
            self.Sigma, self.mu, self.log_det = np.zeros((0, 0)), np.zeros(0), 0.0
            self.S = self.H.copy()
            self.Qv = self.b.copy()
        self._locate()
        self._all = None

    def _locate(self):
        self.position = np.full(self.Phi.shape[1] + 1, -1, dtype=np.intp)
        self.position[self.active] = np.arange(len(self.active))

    def _blocks(self, left, right, middle=None):
        """Each group's block (G, d, d) of left middle right^T for (M, k) ``left`` and ``right``."""
        pad = np.zeros((1, left.shape[1]))
        L = np.concatenate([left, pad], axis=0)[self.members]
        R = np.concatenate([right, pad], axis=0)[self.members]
        if middle is not None:
            L = L @ middle
        return L @ R.transpose(0, 2, 1)

    @property
    def Q(self):
        return np.append(self.Qv, 0.0)[self.members]

    def leave_group_out(self, index):
        """(lam, q2, resolved) of the groups ``index``: (n, d) the eigenvalues of each group's
        leave-group-out precision and the squared projections of its quality on their eigenvectors,
        unresolved directions zeroed, and (n,) whether any direction is resolved. A frozen group's
        S and Q are its own; for an active group, in the eigenbasis u_j of its S (which includes its
        own coefficients: s_j = x l_j / (x + l_j)) with sigma_j = u_j^T Sigma_gg u_j = 1 / (x + l_j):
        l_j = x s_j / (x - s_j) where x sigma_j > 1/2, else 1 / sigma_j - x (each form where it has
        no cancellation), and q_j = u_j^T mu_g / sigma_j. A direction below ``COLLINEAR`` of the
        group's largest data precision is unresolved (its columns lie in the span of the active
        ones, or of each other, to working precision)."""
        valid = self.valid[index]
        scale = np.max(self.h_groups[index], axis=1)
        # padding: decoupled directions of eigenvalue -1 - scale, below every resolved one
        S = np.where(valid[:, :, None] & valid[:, None, :], self.S[index], 0.0)
        S = S - ((~valid)[:, :, None] * np.eye(S.shape[1])) * (1.0 + scale)[:, None, None]
        lam, U = np.linalg.eigh(S)
        q = (self.Q[index][:, None, :] @ U)[:, 0, :]
        inside = np.flatnonzero(self.in_model[index])
        if len(inside):
            pos = self.position[self.members[index[inside]]]  # -1 for padding
            ok = pos >= 0
            safe = np.where(ok, pos, 0)
            Sig = self.Sigma[safe[:, :, None], safe[:, None, :]] * (ok[:, :, None] & ok[:, None, :])
            mu = np.where(ok, self.mu[safe], 0.0)
            Ua = U[inside]
            sigma = np.sum(Ua * (Sig @ Ua), axis=1)
            x = self.x[index[inside]][:, None]
            s = lam[inside]
            with np.errstate(divide="ignore", invalid="ignore"):
                lam_a = np.where(x * sigma > 0.5, x * s / (x - s), 1.0 / sigma - x)
                q_a = (mu[:, None, :] @ Ua)[:, 0, :] / sigma
            lam[inside] = np.where(s < 0, s, lam_a)
            q[inside] = q_a
        with np.errstate(invalid="ignore"):
            resolved = (lam >= COLLINEAR * scale[:, None]) & np.isfinite(lam) & np.isfinite(q)
        lam = np.where(resolved, lam, 0.0)
        q2 = np.where(resolved, q * q, 0.0)
        return lam, q2, np.any(resolved, axis=1) & (scale > 0)

    def _leave_group_out_all(self):
        """:meth:`leave_group_out` of every group, kept until the next move or refresh (a group's
        statistics do not depend on its own x, nor on whether it is in the model)."""
        if self._all is None:
            self._all = self.leave_group_out(np.arange(len(self.x)))
        return self._all

    def evaluate(self, rows, polish=False, support=None):
        """(gain, target x, supported) of the best move of each group in ``rows`` (module docstring,
        "Moves"); ``supported`` is judged for the frozen groups (where ``support`` is None) or where
        the mask ``support`` says. The gain is -inf where no move is a candidate: a group with no resolved direction;
        a frozen group that does not enter (the data's support rule, and it is not supported); with
        ``polish`` any add, and a re-estimate that moves ln x by less than ``settle`` weighted by the
        data's share sum_j l_j / (x + l_j) / d_g of the group's precision, or does not gain;
        otherwise a re-estimate that moves ln x by less than ``LOG_ALPHA_TOL``. An active group's
        target is the maximiser of (G1) that Newton's method reaches from its x, a frozen one's the
        global maximiser."""
        lam, q2, resolved = (v[rows] for v in self._leave_group_out_all())
        inside = self.in_model[rows]
        supported = np.zeros(len(rows), dtype=bool)
        judged = resolved & (~inside if support is None else support)
        if np.any(judged):
            supported[judged] = group_supported(lam[judged], q2[judged])
        n = len(rows)
        gain, x_new = np.full(n, -np.inf), self.x[rows].copy()
        keep = np.flatnonzero(resolved & (inside | self.exact | supported) & (inside | (not polish)))
        if len(keep) == 0:
            return gain, x_new, supported
        lam, q2, x, inside = lam[keep], q2[keep], x_new[keep], inside[keep]
        target, value = in_model_maximiser(lam, q2, self.a0, self.b0, np.where(inside, np.log(x), np.nan))
        current = np.where(inside, in_model_values(x[:, None], lam, q2, self.a0, self.b0)[:, 0],
                           frozen_values(x, self.h_groups[rows[keep]], self.a0, self.b0))
        change = value - current
        if polish:
            share = np.sum(lam / (x[:, None] + lam), axis=1) / self.sizes[rows[keep]]
            moved = share * np.abs(target - x) / np.maximum(target, x)
            change = np.where((moved >= self.settle) & (change > 0), change, -np.inf)
        else:
            change = np.where(inside & (np.abs(np.log(target / x)) < LOG_ALPHA_TOL), -np.inf, change)
        gain[keep], x_new[keep] = change, target
        return gain, x_new, supported

    def best_move(self, floor, polish=False):
        """(kind, group, target x, gain) of the move with the largest gain above ``floor``, or None
        (module docstring, "Moves"; with ``polish`` the re-estimates below the floor, :func:`_moves`):
        the active groups not held and, without ``polish``, the frozen ones not held. Where the best
        is a re-estimate above the floor, the joint Newton step of :meth:`newton_trial` instead if it
        gains more (the group ``JOINT``, which :meth:`move` makes)."""
        open_ = ~self.held
        rows = np.flatnonzero(open_ & self.in_model)
        if not polish:
            rows = np.concatenate([rows, np.flatnonzero(open_ & ~self.in_model)])
        if len(rows) == 0:
            return None
        gain, x_new, _ = self.evaluate(rows, polish)
        j = int(np.argmax(gain))
        if not gain[j] > floor:
            return None
        g = int(rows[j])
        if self.in_model[g] and not polish:
            step = self.newton_trial()
            if step is not None and step[0] > gain[j]:
                self._joint = step[1]
                return REESTIMATE, JOINT, math.nan, float(step[0])
        return (REESTIMATE if self.in_model[g] else ADD), g, float(x_new[j]), float(gain[j])

    def move(self, kind, g, x_new):
        """Make the move by the block form of Tipping & Faul's (2003, appendix) updates, O(M K d)
        (module docstring, "Moves"); False, changing nothing, where the pivot block it inverts is not
        positive definite to working precision. The group ``JOINT`` is the joint Newton step that
        :meth:`best_move` found (a fresh factorisation)."""
        if g == JOINT:
            self.x = self._joint
            self.refresh()
            return True
        cols = self.members[g][self.valid[g]]
        d = len(cols)
        if kind == ADD:
            # Sigma_gg' = (S_g + x I)^-1, z = Sigma B_g^T, e = Phi^T W Phi_g - B z
            pivot = self.S[g][:d, :d] + x_new * np.eye(d)
            try:
                chol = scipy.linalg.cho_factor(pivot, lower=True)
            except np.linalg.LinAlgError:
                return False
            new = scipy.linalg.cho_solve(chol, np.eye(d))
            new = 0.5 * (new + new.T)
            z = self.Sigma @ self.B[cols].T
            mu_g = new @ self.Qv[cols]
            column = self._columns(cols)
            e = column - self.B @ z
            K = len(self.active)
            Sigma = np.empty((K + d, K + d))
            Sigma[:K, :K] = self.Sigma + z @ new @ z.T
            Sigma[:K, K:] = -z @ new
            Sigma[K:, :K] = Sigma[:K, K:].T
            Sigma[K:, K:] = new
            self.Sigma = Sigma
            self.mu = np.concatenate([self.mu - z @ mu_g, mu_g])
            self.S = self.S - self._blocks(e, e, new)
            self.Qv = self.Qv - e @ mu_g
            self.B = np.concatenate([self.B, column], axis=1)
            self.active = np.concatenate([self.active, cols])
            self.log_det += -2.0 * float(np.sum(np.log(np.diag(chol[0]))))
            self.in_model[g] = True
            self.order.append(g)
            self._locate()
        else:
            # precision + delta I on the group's block: Sigma' = Sigma - Sigma_:g C Sigma_g:,
            # C = delta (I + delta Sigma_gg)^-1; e = B Sigma_:g
            delta = x_new - self.x[g]
            p = self.position[cols]
            column = self.Sigma[:, p]
            inner = np.eye(d) + delta * column[p]
            try:
                chol = scipy.linalg.cho_factor(inner, lower=True)
            except np.linalg.LinAlgError:
                return False
            C = delta * scipy.linalg.cho_solve(chol, np.eye(d))
            C = 0.5 * (C + C.T)
            e = self.B @ column
            mu_g = self.mu[p]
            self.Sigma = self.Sigma - column @ C @ column.T
            self.mu = self.mu - column @ (C @ mu_g)
            self.S = self.S + self._blocks(e, e, C)
            self.Qv = self.Qv + e @ (C @ mu_g)
            self.log_det -= 2.0 * float(np.sum(np.log(np.diag(chol[0]))))
        self.x[g] = x_new
        self._all = None
        return True

    def add(self, g, x_new):
        return self.move(ADD, g, x_new)

    def reestimate(self, g, x_new):
        return self.move(REESTIMATE, g, x_new)

    def joint_value(self, x):
        """F(x) = 1/2 b_A^T P^-1 b_A - 1/2 ln|P| + sum_g [(a0 + d_g / 2) ln x_g - b0 x_g] over the
        active groups, P = B_AA + diag(x_g(k)): the ELBO as a function of the active groups' E[alpha]
        (``x`` (G,), the frozen entries unused) with q(w) at its optimum for them, up to a constant
        (each group's coordinate of it is (G1): the ELBO gain of any change of the active x is the
        change of F). Returns F, or None where P is not positive definite to working precision."""
        a = self.active
        P = self.B[a] + np.diag(x[self.groups[a]])
        d = 1.0 / np.sqrt(np.diag(P))
        try:
            chol = np.linalg.cholesky(P * d[:, None] * d[None, :])
        except np.linalg.LinAlgError:
            return None
        mu_scaled = scipy.linalg.cho_solve((chol, True), self.b[a] * d)
        log_det = 2.0 * float(np.sum(np.log(np.diag(chol)))) - 2.0 * float(np.sum(np.log(d)))
        act = self.in_model
        shape = self.a0 + 0.5 * self.sizes[act]
        prior = float(np.sum(shape * np.log(x[act]) - self.b0 * x[act]))
        return 0.5 * float((self.b[a] * d) @ mu_scaled) - 0.5 * log_det + prior

    def newton_trial(self):
        """One Newton step on F (:meth:`joint_value`) in ln x over the active groups with a resolved
        direction that this pass has not held, the others held: with mu, Sigma of q(w), F's gradient
        in x_g is (a0 + d_g / 2) / x_g - b0 - 1/2 sum_{k in g} (mu_k^2 + Sigma_kk) and its Hessian the
        group sums of mu_j mu_k Sigma_jk + Sigma_jk^2 / 2 less (a0 + d_g / 2) / x_g^2 on the diagonal
        (dSigma/dx_k = -Sigma e_k e_k^T Sigma); the step solves the Newton equations in ln x (damped
        until minus the Hessian is positive definite), halved until F rises, and is made only where
        it moves some x_g by at least ``settle`` (relative, weighted by the data's share of the
        group's precision, as :meth:`evaluate` weighs a re-estimate). It does the work of many
        cycles of one-group re-estimates, which converge slowly where the active groups' columns are
        correlated. Returns (its ELBO gain, the groups' x after it), or None where no such step
        exists; the state is left as it is."""
        act = np.flatnonzero(self.in_model)
        if len(act) == 0:
            return None
        lam, _, resolved = (v[act] for v in self._leave_group_out_all())
        free = resolved & ~self.held[act]
        if not np.any(free):
            return None
        x = self.x[act]
        members = np.zeros((self.K, len(act)))
        members[np.arange(self.K), np.searchsorted(act, self.groups[self.active])] = 1.0
        mu, Sigma = self.mu, self.Sigma
        shape = self.a0 + 0.5 * self.sizes[act]
        g = shape / x - self.b0 - 0.5 * members.T @ (mu * mu + np.diag(Sigma))
        H = members.T @ (np.outer(mu, mu) * Sigma + 0.5 * Sigma * Sigma) @ members - np.diag(shape / (x * x))
        step = log_newton_step(x, g, H, free)
        if step is None:
            return None
        weight = (np.sum(lam / (x[:, None] + lam), axis=1) / self.sizes[act])[free]
        start = self.joint_value(self.x)
        if start is None:
            return None
        t = 1.0
        for _ in range(30):
            trial = self.x.copy()
            with np.errstate(over="ignore"):
                trial[act[free]] = x[free] * np.exp(t * step)
            if not np.all(np.isfinite(trial) & (trial > 0)):  # a step past the floating-point range: shorter
                t *= 0.5
                continue
            moved = weight * np.abs(trial[act[free]] - x[free]) / np.maximum(trial[act[free]], x[free])
            if not np.max(moved) >= self.settle:
                return None
            value = self.joint_value(trial)
            if value is not None and value > start:
                return value - start, trial
            t *= 0.5
        return None

    def newton_polish(self):
        """The step of :meth:`newton_trial`, made: its ELBO gain, or None (nothing changed)."""
        step = self.newton_trial()
        if step is None:
            return None
        self.x = step[1]
        self.refresh()
        return step[0]

    def polish(self, budget):
        """The re-estimates below the floor of :meth:`best_move` (its ``polish``): one joint Newton
        step on the active groups' precisions (:meth:`newton_polish`) where it makes one, else the
        best re-estimate at a time, at most ``budget``; a refused one holds its group for the pass.
        Returns their gains."""
        if budget > 0:
            gain = self.newton_polish()
            if gain is not None:
                return [gain]
        gains = []
        while len(gains) < budget:
            move = self.best_move(0.0, polish=True)
            if move is None:
                break
            _, g, target, gain = move
            if self.reestimate(g, target):
                gains.append(gain)
            else:
                self.held[g] = True
        return gains

    @property
    def K(self):
        return len(self.active)

    def moments(self):
        return _Moments(self)

    def prior_terms(self):
        """E[ln p(w|alpha)] + E[ln p(alpha)] + H[q(w)] + H[q(alpha)] of every coefficient and group."""
        shape = self.a0 + 0.5 * self.sizes
        return w_alpha_terms(self.active, self.mu, self.Sigma, self.frozen_var(), shape, shape / self.x, self.a0,
                             self.b0, groups=self.groups, log_det=self.log_det)

    def elbo(self):
        return self.factor.elbo_terms(self.moments()) + self.prior_terms()

    def result(self, trace, events, moves, passes, converged):
        supported = np.zeros(len(self.x), dtype=bool)
        active = np.flatnonzero(self.in_model)
        if len(active):
            supported[active] = self.evaluate(active, support=np.ones(len(active), dtype=bool))[2]
        return GroupFastFit(active=self.active.copy(), mu=self.mu.copy(), Sigma=self.Sigma.copy(),
                            x=self.coefficient_x(), frozen_var=self.frozen_var(),
                            supported=supported[self.groups[self.active]],
                            elbo_trace=np.asarray(trace), trace_events=np.asarray(events, dtype=int),
                            num_moves=moves, num_passes=passes, converged=converged, groups=self.groups.copy(),
                            group_active=self.in_model.copy(), group_supported=supported)


def group_schedule(Phi, factor, groups, *, a0=1e-6, b0=1e-6, tol=1e-9, max_passes=1000, max_moves=None,
                   progress=None, target_scale=1.0, entry=None, vague_only=False):
    """The fast variational schedule over groups of coefficients that share one precision (module
    docstring): from the empty model, the best move above ``tol |ELBO|`` at a time (adds by the
    entry rule, re-estimates to the maximiser of (G1)), then the re-estimates below that floor that
    still move a group, then the likelihood factor's update; the stopping rule of
    :func:`ppl_sbl.fast_ard.schedule`. Every move and update is a coordinate ascent step of the
    restricted-family ELBO: it never decreases.

    Parameters
    ----------
    Phi : (N, M) design; ``factor`` the likelihood factor (as for :func:`ppl_sbl.fast_ard.schedule`).
    groups : (M,) ints, each coefficient's group; every label from 0 to max(groups) used.
    a0 : the Gamma prior's shape of every alpha_g (> 0); ``b0`` its rate, a scalar or one per
        coefficient (M,), equal within a group up to the coefficient's own constant: w_k ~
        N(0, 1 / tau_k) with tau_k = alpha_g b0_g / b0_k, the prior of tau_k Gamma(a0, b0_k). The
        fit runs in the units in which every rate is a0 (:func:`ppl_sbl.fast_ard.standard_units`).
    tol, max_passes, max_moves, progress, target_scale : as for :func:`ppl_sbl.fast_ard.schedule`.
    entry : None (by the prior: vague, the data's support; proper, the exact comparison),
        ``"supported"`` or ``"exact"``.
    vague_only : raise :class:`ppl_sbl.fast_ard.NotApplicable` before any fitting where the prior
        is not vague.

    Returns
    -------
    :class:`GroupFastFit` in the caller's units: ``x`` holds E[tau_k] of each coefficient.
    """
    groups = np.asarray(groups)
    Phi = np.asarray(Phi, dtype=np.float64)
    M = Phi.shape[1]
    if groups.shape != (M,) or not np.issubdtype(groups.dtype, np.integer) or groups.min(initial=0) < 0:
        raise ValueError(f"`groups` must be {M} non-negative integers, one per column of Phi; got {groups!r}.")
    if np.any(np.bincount(groups) == 0):
        raise ValueError("`groups` must use every label from 0 to max(groups).")
    if not (tol > 0):
        raise ValueError(f"`tol` must be > 0; got {tol!r}.")
    if entry not in (None, "exact", "supported"):
        raise ValueError(f"`entry` must be None, 'exact' or 'supported'; got {entry!r}.")
    rates = np.broadcast_to(np.asarray(b0, dtype=np.float64), (M,))
    Phi, a0, b0, gain, offset = standard_units(Phi, a0, rates, target_scale)
    if a0 == 0:
        raise ValueError("the group schedule needs a proper Gamma prior (a0, b0 > 0).")
    if vague_only and not is_vague(a0):
        raise NotApplicable(f"the hyperprior shape a0={a0!r} is not vague (a0 >= ppl_sbl.priors.VAGUE_SHAPE): the "
                            "ELBO's optimum keeps every group in the model, where the sweep goes directly.")
    exact = not is_vague(a0) if entry is None else entry == "exact"
    work = _GroupSchedule(Phi, factor, groups, a0, b0, exact)
    fit = run_passes(work, factor, tol, max_passes, max_moves, progress, MOVES_PER_COEFFICIENT * len(work.x))
    return original_units(fit, gain, offset)
