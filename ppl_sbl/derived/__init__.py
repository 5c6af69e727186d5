"""Closed-form CAVI derived from a NumPyro model: no hand-written guide.

For a model built from a small vocabulary of conditionally conjugate pieces, the mean-field
updates follow from the expected log joint alone (the construction of Hoffman & Johnson's
Autoconj): if ``E_q[ln p(x, z)]`` is linear in the expected sufficient statistics ``E[t(z_f)]``
of a factor ``q(z_f)`` (the others held fixed), the optimal ``q(z_f)`` has natural parameters
``d E_q[ln p] / d E[t(z_f)]``. Here that gradient is taken by JAX autodiff of the expected log
joint written over a registry of expected log densities:

* **Gaussian latent vectors** (``Normal`` sites, any event shape flattened): ``t(z) = (z, z z^T)``,
  ``q(z) = N(m, Sigma)`` with ``Sigma^-1 = -2 dL/dE[zz^T]`` and ``Sigma^-1 m = dL/dE[z]``;
* **Gamma latent variables** with constant shape and rate: ``t(z) = (ln z, z)``, each element a
  ``Gamma(1 + dL/dE[ln z], -dL/dE[z])``;
* **Normal sites** (latent or observed) whose mean is affine in the Gaussian latents and whose
  precision ``1 / scale^2`` is a constant times a product of Gamma elements (each at most once):
  ``E[ln N(x | mu, 1/tau)] = (E[ln tau] - ln 2 pi - E[tau] E[(x - mu)^2]) / 2`` with
  ``E[tau] = tau(E[z])`` and ``E[ln tau] = ln tau(exp E[ln z])`` (exact for such products of
  independent factors);
* **Normal sites whose precision is a sum** of two or more Gamma elements (the s-grid RVM): the
  log-sum bound ``E[ln sum_k x_k] >= ln S + sum_k r_k (E[ln x_k] - ln eta_k)`` (``S = sum eta``,
  ``r_k = eta_k / S``), its ``ln eta_k = E[ln x_k]`` updated in the sweep;
* **Bernoulli-logit observations** with logits affine in the Gaussian latents: the
  Jaakkola-Jordan bound, its ``xi^2 = E[x^2]`` updated in the sweep (``elbo_exact`` evaluates both
  bounds' expectations by quadrature);
* a site's log density multiplied (``numpyro.handlers.scale``) by a constant or by a Gamma
  element: the scale's expectation multiplies the term.

The structure (which site depends on which, and how) is read from NumPyro's trace of the model:
the mean's Jacobian with respect to the Gaussian latents (checked constant: affine), the log
precision's Jacobian with respect to the log Gamma latents (checked constant, entries 0 or 1);
both by forward mode over the model's jaxpr with structured tangents
(:mod:`ppl_sbl.derived.jacobian`: a design is read in O(N M), not multiplied by the identity).
A model outside the vocabulary raises :class:`NotConjugateError` naming the site.

One sweep updates the Gaussian factors (in the order the model declares them), then the Gamma
factors (in that order), then the local-bound parameters, as the hand-written guides of
:mod:`ppl_sbl.models` do; the ELBO is the expected log joint plus the entropies, and the guide's
``elbo_parts`` splits it by site (``log_lik`` for the observed sites; ``-kl_<site>``, and for
Gamma sites ``log_norm_<site>``, for the latent ones; :meth:`ppl_sbl.result.FitResult.elbo_parts`).
A Gaussian factor whose terms are diagonal priors and one shared-precision likelihood with a
low-rank Gram matrix is kept in factored form and updated by Woodbury
(:func:`ppl_sbl.gaussian.update_active_gaussian`), as the hand-written RVM does; the sweeps do not prune. Where the one Gaussian vector has an ARD
prior (one Gamma element per coefficient, or per group of them), the guide also has the fast schedule of the shipped RVMs (:mod:`ppl_sbl.derived.fast`),
which ``CAVI``'s default ``schedule="auto"`` runs under a vague prior. The sweeps start where the
hand-written guides start, at the data's scale: a noise precision shared by every point of an
observed Normal site at 10 / var(observed values), each Gaussian factor's prior precision at the
unit-information prior (the precision the other terms give each element, over the number of
observations), every other Gamma factor at its prior. :func:`derived_guide` returns the
:class:`~ppl_sbl.guide.ClosedFormGuide` that :class:`~ppl_sbl.inference.CAVI` runs.
"""
from .build import covariance, derived_guide
from .structure import DerivedData, DerivedState, NotConjugateError

# saved results name these classes by the module users import them from
for _cls in (DerivedData, DerivedState, NotConjugateError):
    _cls.__module__ = __name__

__all__ = ["derived_guide", "covariance", "NotConjugateError", "DerivedState", "DerivedData"]
