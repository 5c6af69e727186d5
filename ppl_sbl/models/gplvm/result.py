"""A fitted Bayesian GPLVM, :class:`GPLVMResult`: q(X), the kernels, predictions at new inputs
(Sauer's thesis, 5.29-5.32) and the shared result interface of :mod:`ppl_sbl.result`."""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ppl_sbl import sparse_gp as sg
from ppl_sbl.result import ResultMethods
from ppl_sbl.portable import Saveable
from ppl_sbl.validation import check_matrix

from .collapsed import data_term_parts, optimal_q_u, q_x, unpack
from .latent import VARIANCE_FLOOR, precisions, whiten
from .programs import PROGRAMS, guide, prior_cov

__all__ = ["GPLVMResult"]

# q(X) of a fitted result (its covariances too), compiled once per model, kernel and shape
_q_x_compiled = jax.jit(q_x, static_argnums=(0, 4, 5), static_argnames=("full", "k_grad"))


@functools.partial(jax.jit, static_argnums=(5, 6))
def _latent_predictive(Y, Y_new, mubar, log_lam, prior, prior_kernel, jitter):
    """q(x*) of new inputs (5.30): per latent dimension, mean k_*^T mubar_q (5.32) and variance
    k_** - k_*^T (K_Y + Lambda_q^-1)^-1 k_*. Returns (n*, Q) means and variances."""
    K_Y = prior_cov(Y, prior_kernel, prior, jitter)
    k_s = sg.kernel(prior_kernel, prior, Y, Y_new)  # (N, n*)
    k_ss = sg.kernel_diag(prior_kernel, prior, Y_new)

    def one(mb, ll):
        w = whiten(K_Y, precisions(K_Y, ll), k_s)
        return k_s.T @ mb, jnp.maximum(k_ss - jnp.sum(w**2, 0), VARIANCE_FLOOR)  # (5.32), (5.30)

    mean, var = jax.vmap(one, in_axes=(1, 1))(mubar, log_lam)
    return mean.T, var.T


@functools.partial(jax.jit, static_argnums=6)
def _predictive_means(kernel_params, inducing, stats, Z, beta, draws, jitter):
    """E[f_*] under q(U) (3.28) at each of the (S, n*, Q) draws of x*: (S, n*, D)."""
    return jax.vmap(lambda x: sg.predict_f("rbf_ard", kernel_params, inducing, stats, Z, beta, x, jitter)[0])(draws)



# ----------------------------------------------------------------------------------------------
# The result
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class GPLVMResult(ResultMethods, Saveable):
    """A fitted Bayesian GPLVM: the bound (``elbo``), q(X), the kernels and the predictions."""

    model: str
    prior_kernel: str
    free: dict
    fixed: dict
    Y: Any
    Z: Any  # the centred outputs
    z_mean: Any
    elbo: float
    elbo_trace: np.ndarray
    converged: bool
    info: dict
    seconds: float
    jitter: float = sg.JITTER

    bound = "none"  # the collapsed bound equals the uncollapsed ELBO with q(U) at its optimum
    elbo_exact = None
    @property
    def inference(self):
        how = ("natural-gradient steps on q(X) (the fixed point of 5.28) and L-BFGS on the hyperparameters"
               if self.info.get("optimizer") == "natural" else "L-BFGS")
        return f"collapsed variational bound (Titsias & Lawrence 2010) maximised by {how}"

    # parameters ------------------------------------------------------------------------------
    @functools.cached_property
    def _unpacked(self):
        return unpack(self.free, self.fixed)

    @property
    def kernel_params(self):
        return self._unpacked[1]

    @property
    def prior_params(self):
        return self._unpacked[2]

    @property
    def noise_var(self):
        return float(1.0 / self._unpacked[3])

    @property
    def inducing(self):
        return self._unpacked[0]["inducing"]

    @property
    def ard_alpha(self):
        """The RBF-ARD inverse squared length-scales alpha_q (5.7)."""
        return np.asarray(self.kernel_params["alpha"])

    @functools.cached_property
    def _qx(self):
        p, _, prior, _ = self._unpacked
        return _q_x_compiled(self.model, p, prior, self.Y, self.prior_kernel, self.jitter, full=True)

    @property
    def latent_mean(self):
        """(N, Q) the means of q(X)."""
        return np.asarray(self._qx[0])

    @property
    def latent_var(self):
        """(N, Q) the marginal variances of q(X)."""
        return np.asarray(self._qx[1])

    @property
    def relevance(self):
        """alpha_q E[x_q^2] (mean over the points): the scale-free weight of dimension q in the
        RBF-ARD kernel's exponent."""
        return self.ard_alpha * np.mean(self.latent_mean**2 + self.latent_var, 0)

    @property
    def relevant(self):
        """Dimensions whose relevance is at least 1e-3 of the largest (ARD kept them)."""
        r = self.relevance
        return r >= 1e-3 * r.max()

    @property
    def relevant_dims(self):
        """The indices of the latent dimensions ARD kept, by decreasing relevance."""
        r = self.relevance
        keep = np.flatnonzero(self.relevant)
        return keep[np.argsort(-r[keep])]

    effective_parameters = float("nan")

    @property
    def stats(self):
        mu, var = self._qx[0], self._qx[1]
        return sg.psi_statistics("rbf_ard", self.kernel_params, mu, var, self.inducing)

    # prediction ------------------------------------------------------------------------------
    def predict_latent(self, Y_new):
        """q(x*) of new inputs (5.30): per latent dimension q, mean k_*^T mubar_q (5.32) and
        variance k_** - k_*^T (K_Y + Lambda_q^-1)^-1 k_* (the conditional prior averaged over
        q(X)). Returns means and variances (n*, Q). Not for the unsupervised model (no K_Y; see
        :meth:`transform`)."""
        if self.model == "unsupervised":
            raise ValueError("the unsupervised GPLVM has no latent prior over inputs; use `transform`, which "
                             "optimises q(x*) for each new point.")
        Y_new = jnp.asarray(self._check_new(Y_new))
        p, _, prior, _ = self._unpacked
        mean, var = _latent_predictive(self.Y, Y_new, p["mubar"], p["log_lam"], prior, self.prior_kernel, self.jitter)
        return np.asarray(mean), np.asarray(var)

    def transform(self, Y_new, *, max_steps=500):
        """Latent means of new inputs: eq. (5.32) for the supervised and autoencoder models; for
        the unsupervised model q(x*) maximising the bound on the training and new points together
        (the other parameters fixed)."""
        if self.model != "unsupervised":
            return self.predict_latent(Y_new)[0]
        Y_new = jnp.asarray(self._check_new(Y_new))
        p, kp, _, beta = self._unpacked
        mu, var = self._qx[0], self._qx[1]
        # start each new point at the latent mean of its nearest training input
        d = np.asarray(sg.sqdist(Y_new, self.Y))
        start = {"mean": mu[np.argmin(d, 1)], "log_var": jnp.log(var[np.argmin(d, 1)])}
        Zall = jnp.concatenate([self.Z, Y_new - self.z_mean])

        def objective(q, mu, var, Zall):
            m = jnp.concatenate([mu, q["mean"]])
            v = jnp.concatenate([var, jnp.exp(q["log_var"])])
            stats = sg.psi_statistics("rbf_ard", kp, m, v, p["inducing"])
            kl = 0.5 * jnp.sum(q["mean"] ** 2 + jnp.exp(q["log_var"]) - 1.0 - q["log_var"])
            return sg.collapsed_bound(Zall, stats, sg.kernel("rbf_ard", kp, p["inducing"]), beta, self.jitter) - kl

        q, _, _ = sg.maximize(objective, start, args=(mu, var, Zall), max_steps=max_steps)
        return np.asarray(q["mean"])

    def predict(self, Y_new, *, num_samples=64, seed=0, return_draws=False):
        """The predictive mean of the outputs at new inputs (5.29): E[f_*] under q(U), averaged over
        ``num_samples`` draws of x* ~ q(x*) (5.30); the column means added back. For labels coded
        1-of-K, the class is the argmax. ``return_draws``: also the (num_samples, n*, D) means
        given each draw."""
        mean, var = self.predict_latent(Y_new)
        rng = np.random.default_rng(seed)
        draws = mean[None] + np.sqrt(var)[None] * rng.normal(size=(int(num_samples),) + mean.shape)
        f = _predictive_means(self.kernel_params, self.inducing, self.stats, self.Z, 1.0 / self.noise_var,
                              jnp.asarray(draws), self.jitter)
        f = np.asarray(f) + np.asarray(self.z_mean)
        return (f.mean(0), f) if return_draws else f.mean(0)

    def _check_new(self, Y_new):
        Y_new = check_matrix("Y_new", Y_new)
        if Y_new.shape[1] != self.Y.shape[1]:
            raise ValueError(f"`Y_new` has {Y_new.shape[1]} columns; the model was fitted on {self.Y.shape[1]}.")
        return Y_new

    # the shared result interface -------------------------------------------------------------
    @property
    def latent_dim(self):
        return int(self.ard_alpha.shape[0])

    @property
    def num_inducing(self):
        return int(self.inducing.shape[0])

    @property
    def program(self):
        return PROGRAMS[self.model]

    @property
    def args(self):
        return (self.Y, self.Z)

    @property
    def kwargs(self):
        kw = {"latent_dim": self.latent_dim, "num_inducing": self.num_inducing, "kernel_params": self.kernel_params,
              "noise_var": self.noise_var, "inducing": self.inducing, "jitter": self.jitter}
        if self.model != "unsupervised":
            kw.update(prior_kernel=self.prior_kernel, prior_params=self.prior_params)
        return kw

    @property
    def guide(self):
        """:func:`guide` with q(X) and the optimal q(U) of this fit."""
        mu, var, _, cov = self._qx
        u_mean, u_cov = optimal_q_u(self.kernel_params, self.inducing, self.stats, self.Z, 1.0 / self.noise_var,
                                    self.jitter)
        return functools.partial(guide, q_mean=mu, q_cov=cov, u_mean=u_mean, u_cov=u_cov)

    def elbo_parts(self):
        """The bound (5.20) as the terms of the uncollapsed ELBO with q(U) at its optimum, each in
        nats, summing to :attr:`elbo` (no hyperpriors: the kernels' parameters, the noise precision
        and the inducing inputs are point estimates):

        ``log_lik``
            E_q[ln p(Z | F)] under q(X) q(U) p(F | U, X) (5.11): the expected log-likelihood of
            the (centred) outputs, N D ln(beta / 2 pi) / 2 - beta sum_d E||z_d - f_d||^2 / 2
            through the Psi statistics (5.22-5.24), including the trace term -beta D (psi0 -
            tr(K_uu^-1 Psi2)) / 2 (:func:`.collapsed.data_term_parts`).
        ``-kl_X``
            -KL(q(X) || p(X)): p(X | Y) the GP-latent prior N(0, K_Y) per latent dimension (5.2),
            the KL term of (5.20) (:func:`.latent.latent_posterior`); N(0, I) for the
            unsupervised model.
        ``-kl_U``
            -sum_d KL(q(u_d) || N(0, K_uu)), q(U) the optimal one that the bound collapses
            (Titsias 2009; :func:`.collapsed.optimal_q_u`).

        ``log_lik - kl_U`` is the collapsed data term F~ of (5.20). F is drawn from p(F | U, X) in
        both the program and the guide, so it has no KL term."""
        mu, var, kl_x = self._qx[0], self._qx[1], self._qx[2]
        log_lik, kl_u = data_term_parts(mu, var, self.free, self.fixed, self.Z, self.jitter)
        return {"log_lik": float(log_lik), "-kl_X": -float(kl_x), "-kl_U": -float(kl_u)}

    def check_guide(self, num_particles=2000, seed=0, num_se=4.0, rtol=1e-6):
        """NumPyro's Monte Carlo ``Trace_ELBO`` of the program and :attr:`guide` (the uncollapsed
        ELBO with q(U) at its optimum) against the collapsed bound: equal up to Monte Carlo error
        (and the jitter on K_ff, O(jitter N D beta))."""
        return super().check_guide(num_particles=num_particles, seed=seed, num_se=num_se, rtol=rtol)

    def sample(self, key, num_samples):
        from numpyro.infer import Predictive

        pred = Predictive(self.program, guide=self.guide, num_samples=int(num_samples), return_sites=["X", "U", "F"])
        return {k: np.asarray(v) for k, v in pred(key, *self.args, **self.kwargs).items()}

    def to_inference_data(self, num_samples=500, seed=0):
        """ArviZ ``InferenceData``: draws of X (latent dimension, point), U and F from the guide,
        pointwise log-likelihoods of the outputs, the outputs, and the bound's trace."""
        return super().to_inference_data(num_samples=num_samples, seed=seed)


# saved results name their class ``ppl_sbl.models.gplvm:GPLVMResult``, as before the module became a
# package (the package re-exports it), so that files load whichever side of the split wrote them
GPLVMResult.__module__ = "ppl_sbl.models.gplvm"
