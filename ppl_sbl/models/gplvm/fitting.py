"""Fitting a Bayesian GPLVM: the input checks, the starting point (section 5.5.3 of Sauer's
thesis) and :func:`fit`, by the natural-gradient sweeps of :mod:`.natural` or L-BFGS on every
parameter."""
from __future__ import annotations

import functools
import math
import time

import jax.numpy as jnp
import numpy as np

from ppl_sbl import sparse_gp as sg
from ppl_sbl.validation import check_matrix, warn_unconverged

from .collapsed import bound
from .natural import fit_natural
from .programs import MODELS, PRIOR_KERNELS, prior_cov
from .result import GPLVMResult

__all__ = ["OPTIMIZERS", "fit", "initial_parameters"]

OPTIMIZERS = ("natural", "lbfgs")


def _pca(Y, Q):
    Yc = Y - Y.mean(0)
    _, s, Vt = np.linalg.svd(Yc, full_matrices=False)
    X = Yc @ Vt[:Q].T
    return X / max(float(X[:, 0].std()), 1e-12)


def _check(Y, Z, model, latent_dim, num_inducing, prior_kernel):
    if model not in MODELS:
        raise ValueError(f"`model` must be one of {MODELS}; got {model!r}.")
    if prior_kernel not in PRIOR_KERNELS:
        raise ValueError(f"`prior_kernel` must be one of {PRIOR_KERNELS}; got {prior_kernel!r}.")
    Y = check_matrix("Y", Y)
    if Z is not None:
        if np.ndim(Z) == 1:
            raise ValueError("`Z` must be 2-dimensional, one row of outputs per input row; got a vector. Code class "
                             "labels 1-of-K with ppl_sbl.datasets.one_of_k(labels), or pass a single output as "
                             "Z.reshape(-1, 1).")
        Z = check_matrix("Z", Z)
        if len(Z) != len(Y):
            raise ValueError(f"`Z` has {len(Z)} rows but `Y` has {len(Y)}; pass one output row per input row.")
    elif model == "supervised":
        raise ValueError("`Z` is required for model='supervised' (the outputs, e.g. labels coded 1-of-K in "
                         "{-1, 1}); use model='autoencoder' or 'unsupervised' to reconstruct Y.")
    latent_dim = int(latent_dim)
    if not 1 <= latent_dim <= Y.shape[1]:
        raise ValueError(f"`latent_dim` must be between 1 and the data dimension {Y.shape[1]}; got {latent_dim}.")
    if not 1 <= int(num_inducing) <= len(Y):
        raise ValueError(f"`num_inducing` must be between 1 and the number of points {len(Y)}; got {num_inducing}.")
    return Y, Z, latent_dim, int(num_inducing)


def fit(Y, Z=None, *, model="supervised", latent_dim=10, num_inducing=30, prior_kernel="rbf", snr="default",
        optimize_prior=False, optimizer=None, max_steps=300, tol=1e-10, hyper_steps=20, prune=1e-6, seed=0,
        jitter=sg.JITTER, progress_bar=None):
    """Fit a Bayesian GPLVM by maximising the collapsed bound.

    Parameters
    ----------
    Y : (N, P) inputs (the data for the autoencoder and unsupervised models).
    Z : (N, D) outputs of the supervised model (e.g. labels 1-of-K in {-1, 1}); ignored otherwise.
    model : "supervised", "autoencoder" or "unsupervised".
    latent_dim : Q, the latent dimensions ARD starts from (at most P).
    num_inducing : M inducing inputs, initialised at M latent means chosen at random.
    prior_kernel : the kernel of the GP-latent prior (5.2): "rbf" (5.4), "linear" (5.3) or
        "matern32" (5.5), its parameters set from the inputs' median squared distance (section
        5.5.3) and kept (default), or with ``optimize_prior`` its length-scale optimised (5.26;
        its variance stays fixed: with it free, the bound is flat along a joint rescaling of the
        prior, q(X), the inducing inputs and the ARD alphas).
    snr : signal-to-noise ratio sigma_f^2 beta at which the signal variance (the outputs'
        variance) and the noise precision are fixed; None frees both; "default": 100 for the
        supervised model (section 5.5.3), None for the others.
    optimizer : "natural" (the default for the supervised and autoencoder models with the latent
        prior fixed): sweeps of a damped natural-gradient step on q(X), the fixed point of (5.28)
        (see :func:`ppl_sbl.models.gplvm.natural.fit_natural`), and ``hyper_steps`` L-BFGS
        iterations on the inducing inputs and kernel parameters with q(X) held; each sweep needs
        one Cholesky factorisation and one triangular inverse per latent dimension and trial step.
        "lbfgs" (the only choice for the unsupervised model and with ``optimize_prior``): L-BFGS
        on all parameters at once with the exact gradient in (mubar, lambda), which needs B_q^-1
        in full.
    max_steps, tol : sweeps ("natural") or L-BFGS iterations ("lbfgs"), and the relative
        tolerance on the bound (the rise over one sweep; for L-BFGS scipy's ``ftol``). The
        default cap returns within a minute on a few hundred points (the bound is then usually
        still rising: a :class:`ppl_sbl.ConvergenceWarning` says so); with the signal-to-noise
        ratio fixed high, the further the bound climbs, the fewer latent dimensions ARD keeps, and
        test accuracy can fall, so the cap is worth a cross-validation.
    hyper_steps : L-BFGS iterations on the hyperparameters per natural sweep.
    prune : natural sweeps update only the latent dimensions whose step would raise the bound by
        at least this fraction of the most any one dimension's would (those ARD has switched off
        sit at their fixed point), and every dimension every 10th sweep and before declaring
        convergence (the bound stays exact; see
        :func:`ppl_sbl.models.gplvm.natural.fit_natural`); 0 updates all of them in
        every sweep.
    progress_bar : show one (tqdm) with the bound; None: only for fits expected to take more than a
        few seconds (N x Q x max_steps above 10^6).

    Returns
    -------
    GPLVMResult
    """
    if optimizer is not None and optimizer not in OPTIMIZERS:
        raise ValueError(f"`optimizer` must be one of {OPTIMIZERS} (or None for the model's default); "
                         f"got {optimizer!r}.")
    if progress_bar is None:
        progress_bar = len(np.asarray(Y)) * int(latent_dim) * int(max_steps) > 1e6
    free, fixed, Yj, Zj, z_mean = initial_parameters(Y, Z, model=model, latent_dim=latent_dim,
                                                     num_inducing=num_inducing, prior_kernel=prior_kernel, snr=snr,
                                                     optimize_prior=optimize_prior, seed=seed, jitter=jitter)
    natural_applies = model != "unsupervised" and "log_prior" not in free
    if optimizer is None:
        optimizer = "natural" if natural_applies else "lbfgs"
    if optimizer == "natural" and not natural_applies:
        raise ValueError("optimizer='natural' needs the GP-latent prior held fixed (model 'supervised' or "
                         "'autoencoder' with optimize_prior=False); use optimizer='lbfgs'.")
    start = time.perf_counter()
    if optimizer == "natural":
        free, value, info = fit_natural(free, fixed, Yj, Zj, prior_kernel=prior_kernel, jitter=jitter,
                                        max_steps=max_steps, tol=tol, hyper_steps=hyper_steps,
                                        progress_bar=progress_bar, prune=prune)
    else:
        objective = functools.partial(bound, model=model, prior_kernel=prior_kernel, jitter=jitter)
        free, value, info = sg.maximize(objective, free, args=(fixed, Yj, Zj), max_steps=max_steps, tol=tol,
                                        progress_bar=progress_bar)
        info["optimizer"] = "lbfgs"
    if not info["converged"] and info["steps"] >= int(max_steps):
        warn_unconverged(f"gplvm.fit ({info['optimizer']})", max_steps, "max_steps")
    return GPLVMResult(model=model, prior_kernel=prior_kernel, free=free, fixed=fixed, Y=Yj, Z=Zj,
                       z_mean=jnp.asarray(z_mean), elbo=value, elbo_trace=np.asarray(info["trace"]),
                       converged=info["converged"], info=info, seconds=time.perf_counter() - start, jitter=jitter)


def initial_parameters(Y, Z=None, *, model="supervised", latent_dim=10, num_inducing=30, prior_kernel="rbf",
                       snr="default", optimize_prior=False, seed=0, jitter=sg.JITTER):
    """The starting point of :func:`fit` (section 5.5.3): q(X) means by PCA (mubar = K_Y^-1 mu by a
    ridge solve), lambda = 10 / mean(diag K_Y), inducing inputs at M latent means chosen at random,
    ARD alphas from the latent means' median squared distance, the latent prior from the inputs'.
    Returns (free, fixed, Y, centred Z, Z's column means), the arguments of :func:`bound`."""
    Y, Z, Q, M = _check(Y, Z, model, latent_dim, num_inducing, prior_kernel)
    if model != "supervised":
        Z = Y
    if snr == "default":
        snr = 100.0 if model == "supervised" else None
    z_mean = Z.mean(0)
    Zc = Z - z_mean
    N = len(Y)
    Yj, Zj = jnp.asarray(Y), jnp.asarray(Zc)
    X0 = _pca(Y, Q)
    signal = max(float(np.mean(np.var(Zc, 0))), 1e-12)
    med = np.median(np.asarray(sg.sqdist(jnp.asarray(X0), jnp.asarray(X0)))[np.triu_indices(N, 1)]) if N > 1 else 1.0
    rng = np.random.default_rng(seed)
    params = {
        "inducing": jnp.asarray(X0[rng.choice(N, M, replace=False)]),
        "log_alpha": jnp.full(Q, -math.log(max(med, 1e-12))),
        "log_variance": jnp.asarray(math.log(signal)),
        "log_beta": jnp.asarray(math.log((snr if snr else 100.0) / signal)),
    }
    fixed = {}
    if model == "unsupervised":
        params["mean"] = jnp.asarray(X0)
        params["log_var"] = jnp.full((N, Q), math.log(0.5))
    else:
        prior0 = sg.default_params(prior_kernel, Y)
        K_Y = np.asarray(prior_cov(Yj, prior_kernel, prior0, jitter))
        # mubar such that mu = K_Y mubar starts at the PCA projection (scaled to K_Y's scale)
        X0 = X0 * math.sqrt(float(np.mean(np.diag(K_Y))))
        ridge = K_Y + 1e-3 * float(np.mean(np.diag(K_Y))) * np.eye(N)
        params["mubar"] = jnp.asarray(np.linalg.solve(ridge, X0))
        params["log_lam"] = jnp.full((N, Q), math.log(10.0 / float(np.mean(np.diag(K_Y)))))
        log_prior = {k: jnp.log(jnp.asarray(v, dtype=jnp.float64)) for k, v in prior0.items()}
        # the prior's variance stays fixed: scaling it by c^2 with q(X) and the inducing inputs by c
        # and alpha by 1 / c^2 leaves the bound unchanged (a flat direction); its length-scale
        # (alpha_p of (5.26), or the Matern length-scale) is optimised
        shape = {k: v for k, v in log_prior.items() if k != "variance"}
        if optimize_prior and shape:
            params["log_prior"] = shape
            fixed["log_prior_variance"] = log_prior.get("variance")
        else:
            fixed["log_prior"] = log_prior
        params["inducing"] = jnp.asarray(np.asarray(params["inducing"]) * math.sqrt(float(np.mean(np.diag(K_Y)))))
        params["log_alpha"] = params["log_alpha"] - math.log(float(np.mean(np.diag(K_Y))))
    if snr is not None:
        fixed["log_variance"] = params.pop("log_variance")
        fixed["log_beta"] = params.pop("log_beta")
    return params, fixed, Yj, Zj, z_mean
