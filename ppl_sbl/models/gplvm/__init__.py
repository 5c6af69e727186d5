"""Supervised, autoencoder and unsupervised Bayesian GPLVMs (Sauer's thesis, chapter 5; Titsias &
Lawrence 2010; Damianou et al. 2011), on the sparse GP of :mod:`ppl_sbl.sparse_gp`.

The supervised model (Fig. 5.1 b), for inputs Y (N, P) and outputs Z (N, D)::

    X[:, q] ~ N(0, K_Y)                       q = 1..Q        (5.1-5.2; K_Y = k_prior(Y, Y))
    U[:, d] ~ N(0, K_uu)                      d = 1..D        (5.10; inducing inputs X_u, RBF-ARD)
    F[:, d] | U, X ~ p(F | U, X)              (the GP on X given U, so that F ~ N(0, K_X) (5.6))
    Z[n, d] ~ N(F[n, d], 1 / beta)

with the RBF-ARD kernel on X (5.7): a latent dimension whose alpha_q goes to zero drops out. The
autoencoder model (Fig. 5.1 c) is the same program with Z = Y; the unsupervised Bayesian GPLVM
(Fig. 5.1 a) has X ~ N(0, I) instead of the GP-latent prior.

The guide (5.11): q(X) = prod_q N(mu_q, S_q) in the reparametrisation of Opper & Archambeau
(5.28): S_q = (K_Y^-1 + Lambda_q)^-1, mu_q = K_Y mubar_q, with Lambda_q = diag(lambda_q) (2 Q N
free parameters); q(U) optimal and analytic; F drawn from p(F | U, X) as in the model (5.11), so
that it cancels. The collapsed bound (5.20), derived afresh (the printed one drops the factor D on
psi0 and tr(K_uu^-1 Psi2) and the +QN/2 of the KL term):

    F = sum_d [ log N(z_d | 0, ...) collapsed ]  - beta D (psi0 - tr(K_uu^-1 Psi2)) / 2  - KL(q(X) || p(X | Y))

(:func:`ppl_sbl.sparse_gp.collapsed_bound` with the Psi statistics (5.22-5.24) of q(X)), and with
B_q = I + Lambda_q^1/2 K_Y Lambda_q^1/2,

    KL = sum_q [ tr(B_q^-1) + mubar_q^T K_Y mubar_q - N + log|B_q| ] / 2,
    S_q = K_Y - K_Y Lambda_q^1/2 B_q^-1 Lambda_q^1/2 K_Y,

so K_Y is never inverted (one Cholesky factorisation of B_q per latent dimension, O(Q N^3),
section 5.4). The bound is maximised over (mubar, lambda), the inducing inputs and the kernels'
parameters (5.25-5.27): by default in sweeps of a damped natural-gradient step on q(X) (the
fixed point of 5.28, :func:`.natural.fit_natural`) and L-BFGS on the hyperparameters, else by L-BFGS on
everything (``optimizer="lbfgs"``). The supervised model's signal variance and noise precision are
fixed at a high signal-to-noise ratio by default (section 5.5.3; ``snr=None`` frees them).
Outputs are centred by their column means (added back by ``predict``).

The package, one file per part:

* :mod:`.programs`: the three NumPyro programs, the guide and the latent prior's covariance K_Y;
* :mod:`.latent`: q(X) from (mubar, lambda) (5.28), its KL term and their gradient;
* :mod:`.collapsed`: the bound (5.20), its data term and the optimal q(U);
* :mod:`.natural`: the natural-gradient fit;
* :mod:`.fitting`: :func:`fit` and its starting point :func:`initial_parameters`;
* :mod:`.result`: :class:`GPLVMResult` and the predictions (5.29-5.32).

The batched factorisations of B_q are :mod:`ppl_sbl.linalg`'s.
"""
from __future__ import annotations

from .collapsed import bound
from .fitting import OPTIMIZERS, fit, initial_parameters
from .latent import LAMBDA_FLOOR, latent_posterior, precisions  # noqa: F401 (public, not in __all__)
from .natural import natural_gradient
from .programs import MODELS, PRIOR_KERNELS, autoencoder, guide, supervised, unsupervised
from .result import GPLVMResult

__all__ = [
    "supervised",
    "autoencoder",
    "unsupervised",
    "guide",
    "latent_posterior",
    "natural_gradient",
    "bound",
    "fit",
    "initial_parameters",
    "GPLVMResult",
    "MODELS",
    "OPTIMIZERS",
    "PRIOR_KERNELS",
]
