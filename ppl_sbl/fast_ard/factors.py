"""The likelihood factors of the fast schedule (:func:`ppl_sbl.fast_ard.schedule`): each gives the
quadratic form (W, r) of its expected log-likelihood in w, its own closed-form updates given the
moments of Phi w, and its part of the ELBO. Gaussian noise (the RVM), the Jaakkola-Jordan bound
(RVM classification), and the robust RVM's Gamma-weighted versions of both."""
from __future__ import annotations

import math

import numpy as np
from scipy.special import digamma, log_expit

from .algebra import LOG_2PI, _gamma_prior_and_entropy

__all__ = ["GaussianNoise", "JaakkolaJordan", "RobustJaakkolaJordan", "RobustGaussianNoise"]

# regression starts with E[gamma] = 1 / (_NOISE_SHARE var(t)) (Tipping & Faul 2003, section 4)
_NOISE_SHARE = 0.1


def _jj_lambda(xi):
    """lambda(xi) = tanh(xi/2) / (4 xi), 1/8 at xi = 0 (``ppl_sbl.bounds.jj_lambda`` in NumPy)."""
    xi = np.abs(xi)
    small = xi < 1e-6
    safe = np.where(small, 1.0, xi)
    return np.where(small, 0.125 - xi**2 / 96.0, np.tanh(safe / 2.0) / (4.0 * safe))


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
                     + _gamma_prior_and_entropy(np.asarray([self.e]), np.asarray([self.f]), self.e0, self.f0))


class JaakkolaJordan:
    """The Jaakkola-Jordan bound of a Bernoulli-logit likelihood as the schedule's likelihood
    factor (grid RVM eq. (27)-(30)): W = 2 omega lambda(xi), r = omega (t - 1/2), with per-point
    weights omega (1 here; the robust RVM's E[omega_n] in :class:`RobustJaakkolaJordan`); update
    xi_n^2 = E[(phi_n^T w)^2] (30), the frozen variances included. Starts at xi = 0."""

    uniform = False

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
    then xi (16). Starts at q(omega_n) = Gamma(c, d), xi = 0."""

    def __init__(self, t, c, d):
        super().__init__(t)
        self.c, self.d = c, d
        self.omega_rate = np.full_like(t, d)

    def _omega(self):
        return self.c / self.omega_rate

    def weights(self):
        self.omega = self._omega()
        return super().weights()

    def update(self, moments):
        # d~_n = d - E[ln h(w, xi_n)] at the current xi (14)-(15), then xi (16)
        self.omega_rate = self.d - self.pointwise(moments)
        super().update(moments)

    def elbo_terms(self, moments):
        """sum_n E[omega_n] E[ln h(w, xi_n)] + E[ln p(omega)] + H[q(omega)]: the likelihood and weight
        terms of the bound (17) of Hwang & Jeong."""
        shape = np.full_like(self.omega_rate, self.c)
        return float(np.sum(self._omega() * self.pointwise(moments))
                     + _gamma_prior_and_entropy(shape, self.omega_rate, self.c, self.d))


class RobustGaussianNoise:
    """The robust RVM's regression likelihood, t_n ~ N(phi_n^T w, 1/(gamma omega_n)), as the
    schedule's factor: W_n = E[gamma] E[omega_n], r_n = W_n t_n; update in the model's order,
    q(gamma): e = e0 + N/2, f = f0 + sum_n E[omega_n] E[r_n^2] / 2, then q(omega_n):
    c~ = c + 1/2, d~_n = d + E[gamma] E[r_n^2] / 2. Starts at E[gamma] = 10 / var(t) (as
    :class:`GaussianNoise`) and q(omega_n) = Gamma(c, d)."""

    uniform = False

    def __init__(self, t, c, d, e0, f0):
        self.t, self.c, self.d, self.e0, self.f0 = t, c, d, e0, f0
        N = t.shape[0]
        spread = float(np.var(t)) if np.var(t) > 0 else float(np.mean(t * t)) or 1.0
        self.e = e0 + 0.5 * N
        self.f = f0 + 0.5 * N * _NOISE_SHARE * spread
        self.omega_shape = np.full(N, c)
        self.omega_rate = np.full(N, d)

    def weights(self):
        W = (self.e / self.f) * self.omega_shape / self.omega_rate
        return W, W * self.t

    def _square_errors(self, moments):
        return (self.t - moments.mean) ** 2 + moments.var

    def update(self, moments):
        sq = self._square_errors(moments)
        self.e = self.e0 + 0.5 * self.t.shape[0]
        self.f = self.f0 + 0.5 * float(np.sum(self.omega_shape / self.omega_rate * sq))
        self.omega_shape = np.full_like(sq, self.c + 0.5)
        self.omega_rate = self.d + 0.5 * (self.e / self.f) * sq

    def elbo_terms(self, moments):
        """E[ln p(t | w, gamma, omega)] + E[ln p(gamma)] + H[q(gamma)] + E[ln p(omega)] + H[q(omega)],
        every term exact (the robust RVM regression guide's ELBO, ``models/robust_rvm.py``)."""
        e_gamma, e_log_gamma = self.e / self.f, digamma(self.e) - math.log(self.f)
        e_omega = self.omega_shape / self.omega_rate
        e_log_omega = digamma(self.omega_shape) - np.log(self.omega_rate)
        log_lik = 0.5 * np.sum(e_log_gamma + e_log_omega - LOG_2PI) - 0.5 * e_gamma * np.sum(
            e_omega * self._square_errors(moments))
        return float(log_lik + _gamma_prior_and_entropy(np.asarray([self.e]), np.asarray([self.f]), self.e0, self.f0)
                     + _gamma_prior_and_entropy(self.omega_shape, self.omega_rate, self.c, self.d))
