"""The workspace of the fast marginal likelihood maximisation (Tipping & Faul 2003): mutable
buffers for Sigma, mu, S and Q that the three moves (add, re-estimate, delete) change by rank-one
updates (T&F 2003, appendix), never by refactorising C, with the noise re-estimate and the exact
refreshes from scratch (:mod:`.algebra`) beside them.
"""
from __future__ import annotations

import math

import numpy as np

from . import algebra
from .design import design_of
from .gains import move_gains
from .state import SBLState

__all__ = ["Workspace"]


class Workspace:
    """Mutable buffers for a run of moves; ``state()`` hands out an immutable copy."""

    def __init__(self, st: SBLState, keep_gram=True):
        self.st = st
        self.design = design_of(st, prefer_sparse=True)
        self.beta = 1.0 / st.noise_var
        self.active = list(int(m) for m in st.active)
        self.pos = {m: k for k, m in enumerate(self.active)}
        self.alpha = st.alpha.copy()
        K = len(self.active)
        cap = max(64, int(1.25 * K))
        # Sigma and mu live in buffers with spare capacity, updated in place (a K x K temporary
        # per move would dominate the cost once K is in the thousands)
        self._Sbuf = np.zeros((cap, cap))
        st.sigma_into(self._Sbuf[:K, :K])
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
        """The component label of each active function (see :meth:`blocks`)."""
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
        """``move_gains`` of every function, the active ones' small factors from Sigma and mu; no add
        of an ``aligned`` function or one collinear with an active one (gain -inf)."""
        gain, new = move_gains(self.alpha, self.S, self.Q, self.a, np.diag(self.Sigma), self.mu)
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
            algebra.rank_one(self.Sigma, s_ii, w)
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
        algebra.rank_one(self.Sigma, -kappa, col)
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
        algebra.rank_one(self.Sigma, -1.0 / s_jj, col)
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
        """A label per active function: the connected components of D_a^T D_a != 0."""
        self._next_label = len(self.active)  # labels given to new components from here on
        return algebra.components(self.gram)

    def blocks(self):
        """The active functions grouped by component, components of equal size stacked ((n_k, k)
        index arrays): Sigma^-1 is block-diagonal over them (see :mod:`.algebra`). The labels
        follow the adds (a new function merges the components it touches); a delete leaves its
        component whole, which is still block-diagonal, until the next exact refresh recomputes
        them."""
        if self._blocks_cache is None:
            self._blocks_cache = algebra.blocks_of(self._label)
        return self._blocks_cache

    def _likelihood_at(self, noise_var, blocks=None):
        """L at one noise variance with alpha fixed, and the block Cholesky factors it comes from
        (see ``_likelihoods``)."""
        L, factors = self._likelihoods([noise_var], blocks)
        return float(L[0]), factors[0]

    def _likelihoods(self, noise_vars, blocks=None, residuals=False):
        """:func:`.algebra.likelihoods` of the active functions at each of the noise variances."""
        a = self.a
        blocks = self.blocks() if blocks is None else blocks
        return algebra.likelihoods(noise_vars, blocks, self.gram, self.alpha[a], self.st.Dty[a], self.st.y,
                                   self.st.yty, self.active_product, residuals=residuals)

    def logdet_rounding(self, blocks):
        """:func:`.algebra.logdet_rounding` of the active functions (``blocks``: :meth:`blocks`)."""
        return algebra.logdet_rounding(self.Sigma, self.gram, blocks, self.beta)

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
        (:meth:`logdet_rounding`), nor where the proposal from the rank-one updated mu changes
        ln sigma^2 by less than ``min_log_change``."""
        a = self.a
        N = self.design.n
        old = self.noise_var
        blocks = self.blocks()
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
        if gain <= 1e-13 * max(1.0, abs(self.L)) or gain <= self.logdet_rounding(blocks):
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
                self._set_noise(float(value), algebra.posterior_from(chol_value), self.L + (L_value - ref))
                return True
        return False

    def joint_derivatives(self, noise=True):
        """(g, H): the gradient and Hessian of L = log L(y | alpha, sigma^2) = -(N log 2 pi + log|C|
        + y^T C^-1 y) / 2, C = sigma^2 I + D_a A^-1 D_a^T (Faul & Pilikos, section 2, whose equations
        carry no numbers), in (ln alpha_a, and ln beta where ``noise``) at the state, beta =
        1 / sigma^2, from Sigma, mu and the residual e = y - D_a mu (Sigma = (A + beta D_a^T
        D_a)^-1, mu = beta Sigma D_a^T y):

            g_k = (1 - alpha_k Sigma_kk - alpha_k mu_k^2) / 2
            H_jk = alpha_j alpha_k (Sigma_jk^2 + 2 mu_j mu_k Sigma_jk) / 2
                   - delta_jk alpha_k (Sigma_kk + mu_k^2) / 2
            g_beta = (N - K + sum_k alpha_k Sigma_kk - beta ||e||^2) / 2
            H_k,beta = alpha_k (Sigma_kk - (Sigma A Sigma)_kk) / 2 - alpha_k mu_k (Sigma A mu)_k
            H_beta,beta = (-sum_k alpha_k (Sigma_kk - (Sigma A Sigma)_kk) - beta ||e||^2) / 2
                          + mu^T A Sigma A mu

        (dSigma/d alpha_k = -Sigma e_k e_k^T Sigma, dmu/d alpha_k = -mu_k Sigma e_k; beta dSigma/d beta
        = -(Sigma - Sigma A Sigma), beta dmu/d beta = Sigma A mu, as beta D_a^T e = A mu.) The
        gradient's alpha part is Tipping & Faul's re-estimate condition, its beta part the noise
        re-estimate's (:meth:`reestimate_noise`)."""
        a = self.a
        K = len(a)
        alpha, Sigma, mu = self.alpha[a], self.Sigma, self.mu
        d = np.diag(Sigma)
        g = 0.5 * (1.0 - alpha * d - alpha * mu * mu)
        H = 0.5 * (np.outer(alpha, alpha) * (Sigma * Sigma + 2.0 * np.outer(mu, mu) * Sigma)
                   - np.diag(alpha * (d + mu * mu)))
        if not noise:
            return g, H
        e = self.st.y - self.active_product(mu) if K else self.st.y
        ee = float(e @ e)
        am = alpha * mu
        S_am = Sigma @ am
        rest = d - np.einsum("ij,j,ji->i", Sigma, alpha, Sigma)  # diag(Sigma - Sigma A Sigma)
        g_beta = 0.5 * (self.design.n - K + float(alpha @ d) - self.beta * ee)
        cross = 0.5 * alpha * rest - alpha * mu * S_am
        H_beta = 0.5 * (-float(alpha @ rest) - self.beta * ee) + float(am @ S_am)
        return np.append(g, g_beta), np.block([[H, cross[:, None]], [cross[None, :], np.array([[H_beta]])]])

    def joint_step(self, free, min_gain, noise=True, radius=1.0, max_halvings=6):
        """One Newton step on L over ln alpha of the active functions ``free`` (a mask over
        :attr:`a`) and, where ``noise``, ln beta, the others held (:meth:`joint_derivatives`):
        minus the Hessian damped (Levenberg-Marquardt) until it is positive definite and the step
        moves no parameter by more than ``radius`` (a factor e), then halved until L, evaluated
        exactly from the block factorisation at the new values, rises by more than ``min_gain``
        (and than the rounding of the two evaluations) over L evaluated the same way at the old
        ones. Kept where it does (Sigma, mu, S, Q and L set exactly), the state left as it was
        otherwise. Returns the gain, or None."""
        a = self.a.copy()
        K = len(a)
        free = np.append(np.asarray(free, dtype=bool), True) if noise else np.asarray(free, dtype=bool)
        if K == 0 or not np.any(free):
            return None
        g, H = self.joint_derivatives(noise)
        neg = -H[np.ix_(free, free)]
        if not (np.all(np.isfinite(neg)) and np.all(np.isfinite(g))):
            return None
        w, V = np.linalg.eigh(0.5 * (neg + neg.T))
        c = V.T @ g[free]

        def step_at(damping):
            return V @ (c / (w + damping))

        low = max(0.0, -float(w[0])) * 1.01 + 1e-10 * max(abs(float(w[-1])), 1.0)
        damping = low
        while np.max(np.abs(step_at(damping))) > radius:
            damping = 2.0 * damping + 1e-12
        if damping > low:  # the least damping within the radius, by bisection
            for _ in range(30):
                mid = 0.5 * (low + damping)
                low, damping = (mid, damping) if np.max(np.abs(step_at(mid))) > radius else (low, mid)
        step = np.zeros(len(g))
        step[free] = step_at(damping)
        blocks = self.blocks()
        # a rise within the rounding of the two evaluations of L is no rise (:meth:`logdet_rounding`)
        min_gain = max(min_gain, 2.0 * self.logdet_rounding(blocks))
        old_alpha, old_noise = self.alpha[a].copy(), self.noise_var
        ref = self._likelihoods([old_noise], blocks)[0][0]
        for h in range(max_halvings):
            t = step * 0.5 ** h
            self.alpha[a] = old_alpha * np.exp(t[:K])
            noise_var = old_noise * math.exp(-t[K]) if noise else old_noise
            L, factors = self._likelihoods([noise_var], blocks)
            if L[0] - ref > min_gain:
                gain = float(L[0] - ref)
                self._set_noise(noise_var, algebra.posterior_from(factors[0]), self.L + gain, clear=True)
                return gain
        self.alpha[a] = old_alpha
        return None

    def _set_noise(self, noise_var, blocks, L, clear=False):
        """Full statistics at a new noise variance from the blocks of :func:`.algebra.posterior_from`:
        Sigma block by block (written over the old blocks: Sigma is zero outside the components,
        which only merge between exact refreshes; ``clear`` zeroes it first), mu = Sigma D_a^T y /
        sigma^2, S and Q from the factor F (:func:`.algebra.statistics_from_factor`)."""
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
        cross = self._Bbuf[:, :K] if self._Bbuf is not None else None
        self.S, self.Q = algebra.statistics_from_factor(self.design, a, [(idx, Fb) for idx, _, Fb in blocks],
                                                        self.beta, self.sq_norms, self.st.Dty, cross)

    def refresh(self):
        """Sigma, mu, S, Q and L recomputed from the Gram matrix of the active functions (a K x K
        Cholesky factorisation and 2K products with the dictionary): the rank-one updates lose
        accuracy over many moves when the dictionary is ill-conditioned (overlapping RBFs)."""
        self._label = self._components()
        L, chol = self._likelihood_at(self.noise_var)
        self.drift.append((len(self.moves), float(self.L - L)))
        self._set_noise(self.noise_var, algebra.posterior_from(chol), L, clear=True)

    def state(self, *, converged, seconds, exact=True, stop_reason=""):
        a = self.a.copy()
        st = self.st.replace(
            noise_var=float(self.noise_var), active=a, alpha=self.alpha.copy(), mu=self.mu.copy(),
            Sigma=self.Sigma.copy(), S=self.S.copy(), Q=self.Q.copy(),
            log_marginal_likelihood=float(self.L),
            trace=list(self.trace), moves=list(self.moves), converged=bool(converged), seconds=float(seconds),
            trace_seconds=list(self.trace_seconds), refresh_drift=list(self.drift), stop_reason=stop_reason,
            rollbacks=list(self.rollbacks))
        if exact:
            st.log_marginal_likelihood = self._likelihood_at(self.noise_var)[0]
        return st
