"""The likelihood factors of the fast schedule (:func:`ppl_sbl.fast_ard.schedule`): each gives the
quadratic form (W, r) of its expected log-likelihood in w, its own closed-form updates given the
moments of Phi w, and its part of the ELBO. Gaussian noise (the RVM), the Jaakkola-Jordan bound
(RVM classification), the robust RVM's Gamma-weighted versions of both, and the multinomial
probit's q(y) (the multiclass RVM, one output per class)."""
from __future__ import annotations

import math

import numpy as np
from scipy.special import digamma, log_expit

from .algebra import LOG_2PI, gamma_prior_and_entropy

__all__ = ["Moments", "GaussianNoise", "JaakkolaJordan", "RobustJaakkolaJordan", "RobustGaussianNoise",
           "MultinomialProbit", "weights_change"]

# regression starts with E[gamma] = 1 / (_NOISE_SHARE var(t)) (Tipping & Faul 2003, section 4)
_NOISE_SHARE = 0.1


def _jj_lambda(xi):
    """lambda(xi) = tanh(xi/2) / (4 xi), 1/8 at xi = 0 (``ppl_sbl.bounds.jj_lambda`` in NumPy)."""
    xi = np.abs(xi)
    small = xi < 1e-6
    safe = np.where(small, 1.0, xi)
    return np.where(small, 0.125 - xi**2 / 96.0, np.tanh(safe / 2.0) / (4.0 * safe))


class Moments:
    """The moments of phi_n^T w under the restricted q(w) of a schedule's buffers (its active
    columns, q(w) and frozen variances), for the likelihood factor's updates:
    ``mean`` (N,), ``var`` (N,) (frozen variances included; formed on first use, O(N M)) and
    ``var_sum`` = sum_n var_n (O(M + K^2))."""

    def __init__(self, schedule):
        self._schedule = schedule
        K = schedule.K
        A = schedule.A[:, :K]
        self.mean = A @ schedule.mu[:K]
        frozen_var = schedule.frozen_var()
        self.var_sum = float(np.sum(schedule.gram_active() * schedule.Sigma[:K, :K]) + schedule.col_sq @ frozen_var)
        self._var = None
        self._frozen_var = frozen_var

    @property
    def var(self):
        if self._var is None:
            s = self._schedule
            K = s.K
            A = s.A[:, :K]
            self._var = np.einsum("nk,nk->n", A @ s.Sigma[:K, :K], A) + s.squared() @ self._frozen_var
        return self._var


class GaussianNoise:
    """q(gamma) = Gamma(e, f) of RVM regression as the schedule's likelihood factor: W = E[gamma],
    r = E[gamma] t; update e = e0 + N/2, f = f0 + E||t - Phi w||^2 / 2 (grid RVM eq. (18), the
    frozen variances included). Starts at E[gamma] = 10 / var(t), the noise level Tipping & Faul
    (2003, section 4) start from, a tenth of the target variance."""

    uniform = True

    def __init__(self, t, e0, f0):
        self.t, self.e0, self.f0 = t, e0, f0
        N = t.shape[0]
        spread = float(np.var(t)) if np.var(t) > 0 else float(np.mean(t * t)) or 1.0
        self.e = e0 + 0.5 * N
        self.f = f0 + 0.5 * N * _NOISE_SHARE * spread

    def weights(self):
        g = self.e / self.f
        return np.full(self.t.shape[0], g), g * self.t

    def _square_error(self, moments):
        residual = self.t - moments.mean
        return float(residual @ residual + moments.var_sum)

    def update(self, moments):
        # e = e0 + N/2, f = f0 + E||t - Phi w||^2 / 2  (18)
        self.e = self.e0 + 0.5 * self.t.shape[0]
        self.f = self.f0 + 0.5 * self._square_error(moments)

    def elbo_terms(self, moments):
        """E[ln p(t|w,gamma)] + E[ln p(gamma)] + H[q(gamma)]: the likelihood and gamma terms of the ELBO
        (10) of the grid RVM paper, with E||t - Phi w||^2 = ||t - m||^2 + sum_n v_n."""
        e_gamma = self.e / self.f
        e_log_gamma = digamma(self.e) - math.log(self.f)
        N = self.t.shape[0]
        return float(0.5 * N * (e_log_gamma - LOG_2PI) - 0.5 * e_gamma * self._square_error(moments)
                     + gamma_prior_and_entropy(np.asarray([self.e]), np.asarray([self.f]), self.e0, self.f0))


class JaakkolaJordan:
    """The Jaakkola-Jordan bound of a Bernoulli-logit likelihood as the schedule's likelihood
    factor (grid RVM eq. (27)-(30)): W = 2 omega lambda(xi), r = omega (t - 1/2), with per-point
    weights omega (1 here; the robust RVM's E[omega_n] in :class:`RobustJaakkolaJordan`); update
    xi_n^2 = E[(phi_n^T w)^2] (30), the frozen variances included. Starts at xi = 0."""

    uniform = False
    extrapolates = True  # :meth:`parameters` converge linearly over the passes

    def __init__(self, t):
        self.t = t
        self.omega = np.ones_like(t)
        self.xi = np.zeros_like(t)

    def weights(self):
        lam = _jj_lambda(self.xi)
        return 2.0 * self.omega * lam, self.omega * (self.t - 0.5)

    def update(self, moments):
        # xi_n^2 = E[(phi_n^T w)^2], the frozen variances included  (30)
        self.xi = np.sqrt(moments.mean**2 + moments.var)

    def parameters(self):
        """The variational parameters that :meth:`update` sets, as one vector (xi): the schedule
        extrapolates their sequence (:func:`ppl_sbl.fast_ard.passes.run_passes`)."""
        return self.xi.copy()

    def set_parameters(self, value):
        self.xi = np.maximum(value, 0.0)

    def pointwise(self, moments):
        """The bound (27) on ln p(t_n | w), in expectation under q(w), for every point."""
        xi = self.xi
        lam = _jj_lambda(xi)
        mean = moments.mean
        return log_expit(xi) + 0.5 * ((2.0 * self.t - 1.0) * mean - xi) - lam * (mean**2 + moments.var - xi**2)

    def elbo_terms(self, moments):
        """sum_n omega_n E_q of the JJ bound (27): the likelihood terms of the objective (28)."""
        return float(np.sum(self.omega * self.pointwise(moments)))


class RobustJaakkolaJordan(JaakkolaJordan):
    """The robust RVM's classification likelihood (Hwang & Jeong 2015) as the schedule's factor:
    the JJ bound with each point's term weighted by E[omega_n], q(omega_n) = Gamma(c, d~_n);
    update in the paper's order: d~_n = d - E_q(w)[ln h(w, xi_n)] (14)-(15) at the current xi,
    then xi (16). Starts at q(omega_n) = Gamma(c, d), xi = 0, and holds q(omega) there (updating
    xi alone) until the schedule has converged once (:meth:`release`): the weights are then
    judged by the fit of every point, not by the first passes' small models."""

    def __init__(self, t, c, d):
        super().__init__(t)
        self.c, self.d = c, d
        self.omega_rate = np.full_like(t, d)
        self.held = True

    def release(self):
        """Let q(omega) update from now on; True if it was held (the schedule goes on)."""
        held, self.held = self.held, False
        return held

    def _omega(self):
        return self.c / self.omega_rate

    def parameters(self):
        """xi, and the rates of q(omega) once they update (:meth:`release`)."""
        return self.xi.copy() if self.held else np.concatenate([self.xi, self.omega_rate])

    def set_parameters(self, value):
        n = self.xi.shape[0]
        super().set_parameters(value[:n])
        if not self.held:
            self.omega_rate = np.maximum(value[n:], np.finfo(float).tiny)  # a rate is positive

    def weights(self):
        self.omega = self._omega()
        return super().weights()

    def update(self, moments):
        # d~_n = d - E[ln h(w, xi_n)] at the current xi (14)-(15), then xi (16)
        if not self.held:
            self.omega_rate = self.d - self.pointwise(moments)
        super().update(moments)

    def elbo_terms(self, moments):
        """sum_n E[omega_n] E[ln h(w, xi_n)] + E[ln p(omega)] + H[q(omega)]: the likelihood and weight
        terms of the bound (17) of Hwang & Jeong."""
        shape = np.full_like(self.omega_rate, self.c)
        return float(np.sum(self._omega() * self.pointwise(moments))
                     + gamma_prior_and_entropy(shape, self.omega_rate, self.c, self.d))


class RobustGaussianNoise:
    """The robust RVM's regression likelihood, t_n ~ N(phi_n^T w, 1/(gamma omega_n)), as the
    schedule's factor: W_n = E[gamma] E[omega_n], r_n = W_n t_n; update in the model's order,
    q(gamma): e = e0 + N/2, f = f0 + sum_n E[omega_n] E[r_n^2] / 2, then q(omega_n):
    c~ = c + 1/2, d~_n = d + E[gamma] E[r_n^2] / 2. Starts at E[gamma] = 10 / var(t) (as
    :class:`GaussianNoise`) and q(omega_n) = Gamma(c, d), held there (q(gamma) updating alone)
    until the schedule has converged once (:meth:`release`)."""

    uniform = False

    def __init__(self, t, c, d, e0, f0):
        self.t, self.c, self.d, self.e0, self.f0 = t, c, d, e0, f0
        N = t.shape[0]
        spread = float(np.var(t)) if np.var(t) > 0 else float(np.mean(t * t)) or 1.0
        self.e = e0 + 0.5 * N
        self.f = f0 + 0.5 * N * _NOISE_SHARE * spread
        self.omega_shape = np.full(N, c)
        self.omega_rate = np.full(N, d)
        self.held = True

    def release(self):
        """Let q(omega) update from now on; True if it was held (the schedule goes on)."""
        held, self.held = self.held, False
        return held

    def weights(self):
        W = (self.e / self.f) * self.omega_shape / self.omega_rate
        return W, W * self.t

    def _square_errors(self, moments):
        return (self.t - moments.mean) ** 2 + moments.var

    def update(self, moments):
        sq = self._square_errors(moments)
        self.e = self.e0 + 0.5 * self.t.shape[0]
        self.f = self.f0 + 0.5 * float(np.sum(self.omega_shape / self.omega_rate * sq))
        if not self.held:
            self.omega_shape = np.full_like(sq, self.c + 0.5)
            self.omega_rate = self.d + 0.5 * (self.e / self.f) * sq

    def elbo_terms(self, moments):
        """E[ln p(t | w, gamma, omega)] + E[ln p(gamma)] + H[q(gamma)] + E[ln p(omega)] + H[q(omega)],
        every term exact (the robust RVM regression guide's ELBO, ``ppl_sbl/models/robust_rvm.py``)."""
        e_gamma, e_log_gamma = self.e / self.f, digamma(self.e) - math.log(self.f)
        e_omega = self.omega_shape / self.omega_rate
        e_log_omega = digamma(self.omega_shape) - np.log(self.omega_rate)
        log_lik = 0.5 * np.sum(e_log_gamma + e_log_omega - LOG_2PI) - 0.5 * e_gamma * np.sum(
            e_omega * self._square_errors(moments))
        return float(log_lik + gamma_prior_and_entropy(np.asarray([self.e]), np.asarray([self.f]), self.e0, self.f0)
                     + gamma_prior_and_entropy(self.omega_shape, self.omega_rate, self.c, self.d))


class MultinomialProbit:
    """q(y_n) of the multinomial probit (Girolami & Rogers 2006; ``rvm.multiclass``) as the factor
    of the fast schedule with C outputs: q(y_n) = N(m~_n, I_C) restricted to the cone of class t_n.

    Given q(y), output c is a regression on targets E[y_c] with unit noise precision: W_c = 1,
    r_c = E[y_c]. Update: m~_n = E[W]^T phi_n (the optimal q(y_n) given q(W)), then ln Z_n, E[y_n]
    and E||y_n - m~_n||^2 (and Cov[y_n] for a Newton step) by quadrature
    (:func:`ppl_sbl.probit.cone_moments`), once per update. Both accelerations of the schedule
    with several outputs apply: parameter expansion (:meth:`expansion`; the model is invariant
    under (W, y) -> (c W, c y) but for the unit noise of y) and Newton steps (:meth:`curvature`;
    ln Z_n is concave in m_n). Starts at m~ = 0.
    """

    uniform = True

    def __init__(self, t, num_classes):
        self.t = np.asarray(t, dtype=np.int32)
        self.num_outputs = int(num_classes)
        self.loc = np.zeros((self.t.shape[0], self.num_outputs))
        self._cov = None
        self._refresh()

    def _refresh(self, curvature=False):
        from ..probit import compiled_cone_moments

        out = [np.asarray(v) for v in compiled_cone_moments(self.loc, self.t, square=True, covariance=curvature)]
        self.log_z, self.mean, self.square = out[:3]
        self._cov = out[3] if curvature else None

    def weights(self, c):
        return np.ones(self.t.shape[0]), self.mean[:, c]

    def relocate(self, location, curvature=False):
        """q(y_n) = N(m_n, I) restricted to the cone of t_n for the means m = ``location`` (N, C): the
        optimum given a q(W) with E[W]^T phi_n = m_n; ``curvature=True`` also computes Cov[y_n]."""
        self.loc = np.asarray(location, dtype=np.float64)
        self._refresh(curvature)

    def update(self, moments, scale=1.0, curvature=False):
        """q(y_n): the cone-truncated N(c E[W]^T phi_n, I), with c = ``scale`` (1: the plain update; the
        schedule's parameter expansion passes the c of :meth:`expansion`)."""
        self.relocate(scale * np.stack([m.mean for m in moments], axis=1), curvature)

    def curvature(self):
        """dF/dm = E[y_n] - m_n and d2F/dm_n^2 = Cov[y_n] - I of F(m) = sum_n ln Z_n(m_n), the profiled
        likelihood, at the current location (after an update with ``curvature=True``)."""
        if self._cov is None:
            raise RuntimeError("curvature() needs the last update made with curvature=True.")
        return self.mean - self.loc, self._cov - np.eye(self.num_outputs)

    def snapshot(self):
        return self.loc, self.log_z, self.mean, self.square, self._cov

    def restore(self, state):
        self.loc, self.log_z, self.mean, self.square, self._cov = state

    def _square_error(self, moments):
        """S = sum_n E||y_n - W^T phi_n||^2 = sum_n E||y_n - m~_n||^2 + 2 (m~_n - m_n)^T (E[y_n] - m~_n)
        + ||m~_n - m_n||^2, plus sum_c sum_n Var[phi_n^T w_c]; and the terms ``elbo_terms`` needs."""
        mean = np.stack([m.mean for m in moments], axis=1)
        offset = self.loc - mean
        cross = float(np.sum(offset * (self.mean - self.loc)))
        offset_sq = float(np.sum(offset * offset))
        var_sum = sum(m.var_sum for m in moments)
        return float(np.sum(self.square)) + 2.0 * cross + offset_sq + var_sum, cross, offset_sq, var_sum

    def expansion(self, moments, alpha_sum, num_coefficients, a0, b0):
        """The parameter-expansion step's z = c^2 (see ``rvm._multiclass_update``): with S = sum_n
        E||y_n - W^T phi_n||^2 under the current q, A = sum E[alpha] and K = N C - 2 a0 (M C), the
        transformed q (W -> c W, alpha -> alpha / z, y -> c y) has the ELBO of q plus
        f(z) = -(z - 1) S / 2 + K/2 ln z - b0 (1/z - 1) A (the Jacobian, the likelihood of y and
        the Gamma prior; the rest is invariant), concave in ln z and largest at
        z = (K + sqrt(K^2 + 8 S b0 A)) / (2 S)."""
        N, C = self.loc.shape
        S = self._square_error(moments)[0]
        K = N * C - 2.0 * a0 * num_coefficients
        return (K + math.sqrt(K * K + 8.0 * S * b0 * alpha_sum)) / (2.0 * S)

    def elbo_terms(self, moments):
        """sum_n E[ln p(y_n | W)] + H[q(y_n)] = sum_n ln Z_n - (m~_n - m_n)^T (E[y_n] - m~_n)
        - 1/2 ||m~_n - m_n||^2 - 1/2 sum_c Var[phi_n^T w_c] (``rvm._multiclass_elbo``), with m_n
        and the variances from the outputs' moments."""
        _, cross, offset_sq, var_sum = self._square_error(moments)
        return float(np.sum(self.log_z) - cross - 0.5 * offset_sq - 0.5 * var_sum)


def weights_change(old, new):
    """The largest relative change, over the points, of the likelihood factor's quadratic form
    (W, r) between two of its updates: the factor's part of the stopping rule, whose bound
    sqrt(tol) is the sweep's on its state (:func:`ppl_sbl.engine.state_tol`)."""
    change = 0.0
    for a, b in zip(old, new):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        scale = np.maximum(np.maximum(np.abs(a), np.abs(b)), 1e-300)
        change = max(change, float(np.max(np.abs(a - b) / scale, initial=0.0)))
    return change
