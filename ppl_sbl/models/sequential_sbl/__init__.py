"""Sequential sparse Bayesian learning (Faul & Pilikos; Tipping & Faul 2003).

The model, over the active set a of a dictionary D (N samples x M candidate functions)::

    c_m ~ N(0, 1/alpha_m)  for m in a,     y_n ~ N(d_n^T c, sigma^2),

with the precisions alpha (alpha_m = inf: function m is out of the program) and optionally the
noise variance sigma^2 set by type-II maximum likelihood: they maximise the log marginal likelihood

    L = log N(y | 0, C),  C = sigma^2 I + D_a A^-1 D_a^T                       (section 2)

The posterior q(c) = N(mu, Sigma), Sigma = (A + D_a^T D_a / sigma^2)^-1, mu = Sigma D_a^T y /
sigma^2, is exact given alpha, so the ELBO of :func:`model` and :func:`guide` equals L for every
draw (``result.check_guide()`` confirms it against NumPyro's ``Trace_ELBO``).

:func:`fit` is the fast marginal likelihood maximisation of Tipping & Faul (2003): in terms of
the sparsity and quality factors S_m = d_m^T C^-1 d_m and Q_m = d_m^T C^-1 y (and s_m = alpha_m
S_m / (alpha_m - S_m), q_m = alpha_m Q_m / (alpha_m - S_m) for active m; s = S, q = Q otherwise)
the best alpha_m given the rest is s_m^2 / (q_m^2 - s_m) where q_m^2 > s_m, and inf otherwise.
Each step makes the single move (add m, re-estimate alpha_m, or delete m) with the largest
exact gain in L (by default among the moves Tipping's SparseBayes counts as significant, and
until none is left; with ``tol``, among all of them until none gains more than tol |L|); Sigma,
mu, S and Q follow by rank-one updates (T&F 2003, appendix), never by refactorising C (a K x K
refactorisation every few hundred moves and before stopping keeps them exact on ill-conditioned
dictionaries). :func:`add_sample` takes a new sample (section 3 and the appendix of Faul &
Pilikos), :func:`add_basis` new candidate functions, :func:`expected_delta_L` the expected change
of L at a point not yet sampled (section 4), the uncertainty map of the image experiment.

Notation: ``D`` the design matrix (or a :class:`ppl_sbl.basis.Dictionary` over P points of which
the samples are ``rows``), ``y`` the samples, ``noise_var`` = sigma^2, ``beta`` = 1 / sigma^2,
``active`` the indices of the functions in the model (in the order of ``mu`` and ``Sigma``).

Misprints in the paper (each formula here is checked against a direct computation in the tests):
in the appendix's updates of S and Q the factor inside the brackets is 1/sigma^2, not
1/sigma*^2; in section 4, sigma-bar is a variance that the formula uses as a standard deviation,
and log 1/sqrt(2 pi sigma*) means log 1/(sqrt(2 pi) sigma*).

The package, bottom to top: :mod:`.program` (the model and its guide), :mod:`.design` (rows of the
design matrix and products with it), :mod:`.algebra` (rank-one updates, block factorisations),
:mod:`.state` (:class:`SBLState`, :func:`predict`), :mod:`.gains` (the gains of the three moves),
:mod:`.workspace` (the rank-one moves on mutable buffers), :mod:`.schedule` (:func:`fit`,
:func:`resume`), :mod:`.compiled` (the same steps as one compiled XLA program, ``compiled=True``),
:mod:`.online` (:func:`add_sample`, :func:`add_basis`, :func:`log_marginal_likelihood`) and
:mod:`.maps` (the uncertainty maps of section 4).
"""
from __future__ import annotations

from .design import design_rows
from .maps import augmented_variance, expected_delta_L, neighbour_statistics
from .online import add_basis, add_sample, log_marginal_likelihood
from .program import LOG_2PI, guide, model
from .schedule import LOG_ALPHA_TOL, LOG_NOISE_TOL, MAX_ALIGNMENT, fit, resume
from .state import SBLState, predict

__all__ = [
    "model",
    "guide",
    "fit",
    "resume",
    "add_sample",
    "add_basis",
    "predict",
    "expected_delta_L",
    "neighbour_statistics",
    "augmented_variance",
    "log_marginal_likelihood",
    "SBLState",
]
