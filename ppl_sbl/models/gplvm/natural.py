"""The natural-gradient fit of the supervised and autoencoder GPLVMs with the latent prior fixed:
sweeps of a damped natural-gradient step on q(X), the fixed point of (5.28) of Sauer's thesis, and
L-BFGS on the hyperparameters with q(X) held."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ppl_sbl import linalg
from ppl_sbl import sparse_gp as sg

from .collapsed import data_term, unpack
from .latent import LAMBDA_FLOOR, VARIANCE_FLOOR, precisions
from .programs import prior_cov

__all__ = ["NaturalProblem", "natural_gradient", "fit_natural"]

_MIN_RHO = 2.0**-30  # below it the natural step is refused for this sweep (the bound's rounding)
_FULL_SWEEP_EVERY = 10  # natural sweeps: every latent dimension's q(X) is updated at least this often


@functools.lru_cache(maxsize=None)
def _data_term_functions(jitter):
    """F~ compiled once per jitter: its value, and its value and gradient in (mu, diag S, the
    hyperparameters). The q(X) step and the hyperparameters' L-BFGS steps take their parts of the
    one gradient program: the reverse pass through the Psi statistics is shared by all three
    gradients, and one program per shape compiles in a fraction of the time of three."""
    f = functools.partial(data_term, jitter=jitter)
    return jax.jit(f), jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2)))


def _flat(tree):
    """(the leaves of ``tree`` as one float64 numpy vector, the inverse: a vector to the same tree
    of numpy arrays): ``ravel_pytree`` without its per-call JAX operations, for the L-BFGS loop,
    whose jitted objective takes numpy leaves directly."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    shapes = [np.shape(leaf) for leaf in leaves]
    ends = np.cumsum([int(np.prod(s)) for s in shapes])

    def unflatten(v):
        parts = np.split(np.asarray(v, dtype=np.float64), ends[:-1])
        return jax.tree_util.tree_unflatten(treedef, [x.reshape(s) for x, s in zip(parts, shapes)])

    return np.concatenate([np.ravel(np.asarray(leaf, dtype=np.float64)) for leaf in leaves]), unflatten


class NaturalProblem:
    """The pieces of the bound that the natural-gradient fit evaluates, for the supervised or
    autoencoder model with the latent prior fixed: K_Y (computed once), the data term F~ and its
    gradients (compiled once per jitter), and q(X)'s moments from (mubar, lambda) by
    :func:`ppl_sbl.linalg.device_factor` (every latent dimension, N <=
    :data:`ppl_sbl.linalg.DEVICE_FACTOR_MAX_N`) or :func:`ppl_sbl.linalg.host_factor` (larger N, or
    some of the dimensions)."""

    def __init__(self, free, fixed, Y, Z, *, prior_kernel, jitter):
        self.F_value, self.F_grad = _data_term_functions(jitter)
        _, _, prior_params, _ = unpack(free, fixed)
        self.K = np.asarray(prior_cov(Y, prior_kernel, prior_params, jitter))
        self.K_device = jnp.asarray(self.K)  # for linalg.device_factor, transferred once
        self.floor = LAMBDA_FLOOR / float(np.mean(np.diag(self.K)))
        self.fixed, self.Z = fixed, Z

    def moments(self, mubar, lam, r=None, rho=0.0):
        """(mubar, mu, diag S, KL) of q(X) at (mubar, lambda) (N, Q); with ``r`` (N, Q), mubar first
        moves by rho (I + Lambda_q K_Y)^-1 r_q (the same factorisations)."""
        state = self.update(None, mubar, lam, slice(None), r, rho)  # a slice: views, not copies
        return state[0], state[1], state[2], float(np.sum(state[3]))

    def update(self, state, mubar, lam, dims, r=None, rho=0.0):
        """q(X)'s moments with the latent dimensions ``dims`` recomputed at (mubar, lambda) (and
        moved along ``r`` as in :meth:`moments`) and the others taken from ``state``, the tuple
        (mubar, mu, diag S, KL per dimension (Q,)) this returns (None: ``dims`` must be all of
        them). Only ``dims`` are factorised: the bound stays exact, each dimension's q(x_q)
        entering the KL term on its own."""
        N, Q = lam.shape
        if N <= linalg.DEVICE_FACTOR_MAX_N and len(np.arange(Q)[dims]) == Q:  # every dimension: one program
            rr = np.zeros((Q, N)) if r is None else r.T
            factors = linalg.device_factor(self.K_device, np.ascontiguousarray(lam.T), rr)
            dinv, logdet, sol = (np.asarray(x) for x in factors)
            sol = None if r is None else sol
        else:
            dinv, logdet, sol = linalg.host_factor(self.K, lam[:, dims].T, None if r is None else r[:, dims].T)
        if state is None:
            mubar_new, mu, var, kl = np.array(mubar, dtype=np.float64), np.empty((N, Q)), np.empty((N, Q)), np.empty(Q)
        else:
            mubar_new, mu, var, kl = (np.array(x) for x in state)
        m = mubar[:, dims] if sol is None else mubar[:, dims] + rho * sol.T
        mubar_new[:, dims] = m
        mu[:, dims] = self.K @ m
        var[:, dims] = np.maximum((1.0 - dinv.T) / lam[:, dims], VARIANCE_FLOOR)
        # KL(q(x_q) || N(0, K_Y)), the KL term of (5.20) in the parameters of (5.28): tr(K_Y^-1 S_q) =
        # tr(B_q^-1) = sum dinv, mu_q^T K_Y^-1 mu_q = mubar_q^T mu_q, log|K_Y| - log|S_q| = log|B_q|
        kl[dims] = 0.5 * (np.sum(dinv, 1) + np.sum(m * mu[:, dims], 0) - N + logdet)
        return mubar_new, mu, var, kl

    def value(self, mu, var, kl, hyper):
        v = float(self.F_value(mu, var, hyper, self.fixed, self.Z)) - kl  # numpy in: no device_put per array
        return v if np.isfinite(v) else -np.inf

    def gradient(self, mu, var, hyper):
        """F~ and its gradients in the means, the marginal variances and the hyperparameters."""
        return self.F_grad(mu, var, hyper, self.fixed, self.Z)

    def q_gradient(self, mu, var, hyper):
        """F~ and its gradients in the means and marginal variances only (the q(X) step)."""
        F, (g_mu, g_var, _) = self.F_grad(mu, var, hyper, self.fixed, self.Z)
        return F, (g_mu, g_var)


def natural_gradient(free, fixed, Y, Z, *, prior_kernel="rbf", jitter=sg.JITTER):
    """The bound and its gradient in the coordinates the natural-gradient fit moves in: q(X)'s
    means mu_q and marginal variances s_q = diag S_q (within the Opper-Archambeau family (5.28),
    where the KL term's gradient is free: d(-KL)/dmu_q = -mubar_q, d(-KL)/ds_q = lambda_q / 2),
    and the hyperparameters. One Cholesky factorisation and one triangular inverse per latent
    dimension, where the gradient in (mubar, lambda) needs B_q^-1 in full. Returns (bound,
    {"mean": (N, Q), "var": (N, Q), and the hyperparameters' keys}). For the supervised or
    autoencoder model with the latent prior fixed."""
    prob = NaturalProblem(free, fixed, Y, Z, prior_kernel=prior_kernel, jitter=jitter)
    lam = np.asarray(precisions(jnp.asarray(prob.K), free["log_lam"]))
    mubar, mu, var, kl = prob.moments(np.asarray(free["mubar"], dtype=np.float64), lam)
    hyper = {k: v for k, v in free.items() if k not in ("mubar", "log_lam")}
    F, (g_mu, g_var, g_hyper) = prob.gradient(mu, var, hyper)
    return float(F) - kl, {**g_hyper, "mean": np.asarray(g_mu) - mubar, "var": np.asarray(g_var) + 0.5 * lam}


def fit_natural(free, fixed, Y, Z, *, prior_kernel, jitter, max_steps, tol, hyper_steps, progress_bar, prune):
    """Maximise the bound of the supervised or autoencoder model (the latent prior fixed) by
    alternating two ascent steps, each accepted only if the bound does not fall:

    * q(X): the fixed point of (5.28) as a damped natural-gradient step (Opper & Archambeau 2009;
      Khan & Lin 2017). With g_mu, g_s the gradients of the data term F~ in the means and
      marginal variances, lambda* = -2 g_s and rho in (0, 1]:

          lambda <- lambda + rho (lambda* - lambda),     mu <- mu + rho S_q' (g_mu - mubar_q)

      (S_q' the new covariance; in mubar: mubar += rho (I + Lambda_q' K_Y)^-1 (g_mu - mubar)), the
      step in the natural parameters (S^-1, S^-1 mu) of q(X); rho = 1 is the fixed point itself.
      rho is halved until the bound does not fall, and doubled (up to 1) at the next step. Both
      parts are ascent directions: d bound / d lambda = (S o S)(lambda* - lambda) / 2 with S o S
      positive semi-definite, d bound / d mubar = K_Y (g_mu - mubar). The step needs, per
      latent dimension, the Cholesky factor of B_q, log|B_q| and diag(B_q^-1) only
      (:func:`ppl_sbl.linalg.host_factor` / :func:`ppl_sbl.linalg.device_factor`,
      :func:`natural_gradient`): the gradient in (mu, diag S) is free, where the gradient in
      (mubar, lambda) needs B_q^-1 in full.
    * the hyperparameters (inducing inputs, ARD alphas, and the signal variance and noise
      precision where free): ``hyper_steps`` L-BFGS iterations on F~ with q(X) held, which costs
      no N x N work at all (the KL term is constant).

    The q(X) step skips the latent dimensions that sit at their fixed point, as those ARD has
    switched off soon do (the data term no longer depends on them: g_mu, g_s -> 0): a dimension
    whose step would raise the bound by less than ``prune`` times the most any one dimension's
    would (to first order, with S_q by its diagonal: sum_n s_qn r_qn^2 + sum_n (s_qn (lambda*_qn -
    lambda_qn))^2 / 2, r_q = g_mu - mubar_q) keeps its q(x_q), and its factorisation drops out of
    the sweep (fits keep a few of 20 dimensions). q(X) factorises over the dimensions, so this is
    block-coordinate ascent: the bound stays exact and each accepted step still raises it. Every
    dimension is updated at the first sweep, every ``_FULL_SWEEP_EVERY``-th, and after a sweep
    that stalls; convergence is declared only on a full sweep. ``prune`` = 0 updates every
    dimension in every sweep.

    Converged when one sweep over every dimension raises the bound by at most ``tol`` |bound|.
    Returns (free, bound, info) like :func:`ppl_sbl.sparse_gp.maximize`."""
    import scipy.optimize

    prob = NaturalProblem(free, fixed, Y, Z, prior_kernel=prior_kernel, jitter=jitter)
    floor = prob.floor
    lam = np.asarray(precisions(jnp.asarray(prob.K), free["log_lam"]))
    flat, unravel = _flat({k: v for k, v in free.items() if k not in ("mubar", "log_lam")})
    hyper = unravel(flat)
    Q = lam.shape[1]
    everything = np.arange(Q)
    state = prob.update(None, np.asarray(free["mubar"], dtype=np.float64), lam, everything)
    mubar, mu, var, kl = state[0], state[1], state[2], float(np.sum(state[3]))
    current = prob.value(mu, var, kl, hyper)
    if not np.isfinite(current):
        raise FloatingPointError("the bound is not finite at the starting point; check the inputs for extreme values.")
    rho, trace, rhos, live_counts, converged, message = 1.0, [], [], [], False, "max_steps reached"
    full_due = True  # the first sweep updates every latent dimension
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=int(max_steps), desc="natural steps")
    for step in range(int(max_steps)):
        start = current
        # q(X): the damped fixed-point step
        _, (g_mu, g_var) = prob.q_gradient(mu, var, hyper)
        target = -2.0 * np.asarray(g_var)
        r = np.asarray(g_mu) - mubar
        # the latent dimensions this sweep updates: all of them every _FULL_SWEEP_EVERY sweeps and
        # after a sweep that stalled, else those whose step would raise the bound by at least
        # ``prune`` times the most any one would: the first-order rise of a full step (rho = 1),
        # r_q^T S_q r_q + (lambda* - lambda)^T (S_q o S_q) (lambda* - lambda) / 2, with S_q by its
        # diagonal (no N x N work)
        full = full_due or prune <= 0 or step % _FULL_SWEEP_EVERY == 0
        if full:
            dims = everything
        else:
            gain = np.sum(var * r**2, 0) + 0.5 * np.sum((var * (target - lam)) ** 2, 0)
            dims = np.flatnonzero(gain >= prune * gain.max())
        live_counts.append(len(dims))
        rho = min(1.0, 2.0 * rho)
        while rho >= _MIN_RHO:
            lam_new = lam.copy()
            lam_new[:, dims] = np.maximum(lam[:, dims] + rho * (target[:, dims] - lam[:, dims]), floor * (1.0 + 1e-3))
            trial = prob.update(state, mubar, lam_new, dims, r, rho)
            trial_kl = float(np.sum(trial[3]))
            v = prob.value(trial[1], trial[2], trial_kl, hyper)
            if v >= current:
                lam, state, current = lam_new, trial, v
                mubar, mu, var, kl = state[0], state[1], state[2], trial_kl
                break
            rho *= 0.5
        rhos.append(rho)
        # hyperparameters with q(X) held
        def negative(v, mu=mu, var=var):
            val, (_, _, g) = prob.F_grad(mu, var, unravel(v), fixed, Z)
            val, g = float(val), _flat(g)[0]
            if not np.isfinite(val) or not np.all(np.isfinite(g)):
                return np.inf, np.zeros_like(g)
            return -val, -g

        res = scipy.optimize.minimize(negative, flat, jac=True, method="L-BFGS-B",
                                      options={"maxiter": int(hyper_steps), "maxcor": 20})
        if np.isfinite(res.fun) and -res.fun - kl >= current:
            flat = np.asarray(res.x)
            hyper, current = unravel(flat), -float(res.fun) - kl
        trace.append(current)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(bound=f"{current:.4f}", rho=f"{rho:.2g}", dims=len(dims))
        stalled = current - start <= tol * abs(current)
        if stalled and full:
            converged, message = True, "the bound rose by at most tol |bound| in one sweep over every latent dimension"
            break
        full_due = stalled  # a pruned sweep that stalls: the next one revisits every dimension
    if bar is not None:
        bar.close()
    out = {**jax.tree_util.tree_map(jnp.asarray, hyper), "mubar": jnp.asarray(mubar),
           "log_lam": jnp.asarray(np.log(lam - floor))}
    return out, current, {"steps": step + 1, "converged": converged, "message": message, "trace": trace,
                          "optimizer": "natural", "step_sizes": np.asarray(rhos),
                          "updated_dims": np.asarray(live_counts)}

