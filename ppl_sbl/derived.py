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
precision's Jacobian with respect to the log Gamma latents (checked constant, entries 0 or 1).
A model outside the vocabulary raises :class:`NotConjugateError` naming the site.

One sweep updates the Gaussian factors (in the order the model declares them), then the Gamma
factors (in that order), then the local-bound parameters, as the hand-written guides of
:mod:`ppl_sbl.models` do; the ELBO is the expected log joint plus the entropies. A Gaussian factor
whose terms are diagonal priors and one shared-precision likelihood with a low-rank Gram matrix
is kept in factored form and updated by Woodbury (:func:`ppl_sbl.gaussian.update_active_gaussian`),
as the hand-written RVM does; derived guides do not prune. The sweeps start where the
hand-written guides start, at the data's scale: a noise precision shared by every point of an
observed Normal site at 10 / var(observed values), each Gaussian factor's prior precision at the
unit-information prior (the precision the other terms give each element, over the number of
observations), every other Gamma factor at its prior. :func:`derived_guide` returns the
:class:`~ppl_sbl.guide.ClosedFormGuide` that :class:`~ppl_sbl.inference.CAVI` runs.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import digamma
from numpyro import handlers

from . import expfam
from . import gaussian as _gauss
from .gaussian import low_rank_factor
from .bounds import (expected_log_sigmoid, expected_log_sum_gamma, expected_sigmoid, jj_log_sigmoid_bound,
                     log_sum_bound)
from .guide import ClosedFormGuide

__all__ = ["derived_guide", "covariance", "NotConjugateError", "DerivedState"]

_SVI_HINT = ("fit this model with SVI instead (numpyro.infer.SVI with an AutoNormal guide and "
             "numpyro.infer.Trace_ELBO), or rewrite the site in the derived-CAVI vocabulary (Gaussian vectors, "
             "Gamma variables with constant shape and rate, Normal likelihoods with a mean affine in the Gaussians "
             "and a precision that is a product of Gammas)")


class NotConjugateError(ValueError):
    """The model leaves the vocabulary of derived CAVI; the message names the site."""


class DerivedState(NamedTuple):
    """q of a derived guide: per Gaussian site its mean (D,), covariance (D, D) and log|covariance|;
    per Gamma site its shape and rate (flattened); per Bernoulli site the Jaakkola-Jordan
    parameters xi."""

    mean: dict
    cov: dict
    shape: dict
    rate: dict
    xi: dict
    logdet: dict
    log_eta: dict = {}


class _Term(NamedTuple):
    """One Normal site: r = x - mu = a + sum_f B[f] z_f (B[f] dense, or its diagonal as a vector),
    precision tau = exp(c + A ln g) (g all Gamma elements stacked; A, 0/1, held as the index lists
    of its ones, see :func:`_monosum`), log-density scale exp(cs + As ln g). Where every row shares one
    precision and one scale (``uniform``), G[f] = B[f]^T B[f] is precomputed; with one Gaussian
    factor also a^T a and B^T a (sum_i E[r_i^2] = a^T a + 2 (B^T a)^T E[z] + tr(G E[zz^T]) costs no
    product with B), and where G has low numerical rank its factor F (G = F F^T) in place of G."""

    a: jax.Array
    B: dict
    c: jax.Array
    A: jax.Array
    cs: jax.Array
    As: jax.Array
    G: dict
    aTa: jax.Array
    BTa: dict
    F: dict


class _JJTerm(NamedTuple):
    """One Bernoulli-logit site: logits x = a + sum_f B[f] z_f, signs s = 2 t - 1, log-density
    scale exp(cs + As ln g)."""

    a: jax.Array
    B: dict
    s: jax.Array
    cs: jax.Array
    As: jax.Array


class _GammaPrior(NamedTuple):
    """A Gamma site's constant prior (shape, rate), its log-density scale, and the indices of its
    elements in the stacked Gamma vector."""

    shape: jax.Array
    rate: jax.Array
    cs: jax.Array
    As: jax.Array
    sel: jax.Array


class _SumTerm(NamedTuple):
    """A Normal site whose precision is a sum of Gamma elements (the s-grid): r = a + sum_f B[f] z_f,
    tau_i = sum_j g[idx[i, j]], E[ln tau] through the log-sum bound with parameters eta."""

    a: jax.Array
    B: dict
    idx: jax.Array
    cs: jax.Array
    As: jax.Array


class DerivedData(NamedTuple):
    """The numbers of a derived guide: the terms of each registry entry, and the observed values
    (``observed``: {site: value}, for ArviZ export)."""

    terms: dict
    jj: dict
    priors: dict
    sums: dict = {}
    observed: dict = {}


def _base(fn):
    """The distribution under Independent / Expanded wrappers, and whether it was masked."""
    while True:
        if isinstance(fn, dist.Independent):
            fn = fn.base_dist
        elif isinstance(fn, dist.ExpandedDistribution):
            fn = fn.base_dist
        else:
            return fn


def _safe_value(site):
    """Latent values for tracing the structure: Gamma elements 1, Gaussians 0 (a prior draw
    under vague hyperpriors can underflow to 0 and make the downstream sites invalid)."""
    if site["type"] != "sample" or site.get("is_observed"):
        return None
    base = _base(site["fn"])
    shape = site["fn"].shape(site["kwargs"].get("sample_shape", ()))
    if isinstance(base, dist.Gamma):
        return jnp.ones(shape)
    if isinstance(base, dist.Normal):
        return jnp.zeros(shape)
    return None


def _trace(model, args, kwargs, values=None):
    values = values or {}

    def value(site):
        return values[site["name"]] if site["name"] in values else _safe_value(site)

    with handlers.trace() as tr, handlers.seed(rng_seed=0), handlers.substitute(substitute_fn=value):
        model(*args, **kwargs)
    return tr


def _sites(tr):
    return [(name, s) for name, s in tr.items() if s["type"] == "sample"]


def _classify(tr):
    gauss, gamma, normal_sites, bern_sites, gamma_priors = [], [], [], [], []
    for name, s in _sites(tr):
        base = _base(s["fn"])
        observed = s["is_observed"]
        if not observed:
            if isinstance(base, dist.Normal):
                gauss.append(name)
            elif isinstance(base, dist.Gamma):
                gamma.append(name)
            else:
                raise NotConjugateError(
                    f"site '{name}': a latent {type(base).__name__} variable is not conjugate in derived CAVI "
                    f"(latent variables must be Normal or Gamma); {_SVI_HINT}.")
        if isinstance(base, dist.Normal):
            normal_sites.append(name)
        elif isinstance(base, dist.Gamma):
            if observed:
                raise NotConjugateError(f"site '{name}': observed Gamma data are not in the derived-CAVI vocabulary; "
                                        f"{_SVI_HINT}.")
            gamma_priors.append(name)
        elif isinstance(base, dist.BernoulliLogits):
            bern_sites.append(name)
        else:
            raise NotConjugateError(
                f"site '{name}': an observed {type(base).__name__} likelihood is not in the derived-CAVI vocabulary "
                f"(Normal with a mean affine in the Gaussian latents, or Bernoulli(logits=...) with affine logits); "
                f"{_SVI_HINT}.")
    return gauss, gamma, normal_sites, bern_sites, gamma_priors


def _flat(x, size):
    return jnp.broadcast_to(jnp.asarray(x, dtype=jnp.float64), size).reshape(-1)


def _affine_check(name, what, f, x0, x1, tol=1e-8):
    """Jacobian of f at x0, checked to predict f(x1) (f affine); returns (f(0), J)."""
    J = jax.jacfwd(f)(x0)
    f0 = f(x0)
    got = f(x1)
    pred = f0 + J @ (x1 - x0)
    if not np.allclose(np.asarray(pred), np.asarray(got), rtol=tol, atol=tol * (1 + float(jnp.max(jnp.abs(got))))):
        raise NotConjugateError(f"site '{name}': its {what}; {_SVI_HINT}.")
    return f0 - J @ x0, J


def _monomial(name, what, f, u0, u1, z0, z1):
    """f(u, z) = ln of a positive quantity; checks it is c + A u (A in {0, 1}, no dependence on z);
    returns c and the index lists of A's ones (see :func:`_monosum`)."""
    c, A = _affine_check(name, f"{what} is not a product of Gamma variables", lambda u: f(u, z0), u0, u1)
    if not np.allclose(np.asarray(f(u0, z0)), np.asarray(f(u0, z1))):
        raise NotConjugateError(f"site '{name}': its {what} depends on a Gaussian latent variable; {_SVI_HINT}.")
    An = np.asarray(A)
    if not np.all(np.isclose(An, 0.0) | np.isclose(An, 1.0)):
        raise NotConjugateError(
            f"site '{name}': its {what} raises a Gamma variable to a power other than 1 (derived CAVI needs each "
            f"Gamma element at most once, to the first power); {_SVI_HINT}.")
    # as index lists: row i is the product of the Gamma elements idx[i, :] (padded with the index
    # one past the last element, which stands for a factor 1)
    ones = np.isclose(An, 1.0)
    k = int(ones.sum(1).max()) if An.size else 0
    idx = np.full((An.shape[0], k), An.shape[1], dtype=np.int32)
    for i, row in enumerate(ones):
        cols = np.flatnonzero(row)
        idx[i, :len(cols)] = cols
    return c, jnp.asarray(idx)


def _sum_of_gammas(name, log_f, u0, u1, z0, total):
    """Index lists of a precision that is a sum of two or more distinct Gamma elements (each
    with coefficient 1, no constant), or None if it is not one."""
    f = lambda g: jnp.exp(log_f(jnp.log(g), z0))  # noqa: E731
    g0, g1 = jnp.exp(u0), jnp.exp(u1)
    J = np.asarray(jax.jacfwd(f)(g0))
    if not (np.all(np.isclose(J, 0.0) | np.isclose(J, 1.0)) and np.allclose(np.asarray(f(g1)), J @ np.asarray(g1))
            and np.allclose(np.asarray(f(g0)), J @ np.asarray(g0))):
        return None
    ones = np.isclose(J, 1.0)
    counts = ones.sum(1)
    if counts.min() < 2 or counts.max() != counts.min():
        return None
    return jnp.asarray(np.stack([np.flatnonzero(row) for row in ones]).astype(np.int32))


def _monosum(idx, u):
    """sum_j u[idx[i, j]] per row (the log of a product of Gamma elements), with u padded by a 0."""
    return jnp.sum(jnp.append(u, 0.0)[idx], axis=-1)


def _stack(z, names):
    return jnp.concatenate([z[n] for n in names]) if names else jnp.zeros(0)


def _unstack(zvec, names, sizes):
    out, start = {}, 0
    for n in names:
        out[n] = zvec[start:start + sizes[n]]
        start += sizes[n]
    return out


class _Structure(NamedTuple):
    """What the sweep's code depends on (hashable: the key under which a derived guide is reused)."""

    gauss: tuple
    gamma: tuple
    sizes: tuple
    shapes: tuple
    event_dims: tuple
    latent_order: tuple
    normal: tuple  # (name, uniform)
    bernoulli: tuple
    priors: tuple
    observed: str
    touches: tuple  # (site, the Gamma sites its expected log density depends on)
    lowrank: tuple  # Gaussian factors kept in factored form (Woodbury)
    sums: tuple = ()  # Normal sites whose precision is a sum of Gamma elements (log-sum bound)


def _analyse(model, args, kwargs):
    """(structure, data) of model(*args, **kwargs) from its trace; see the module docstring."""
    tr = _trace(model, args, kwargs)
    gauss, gamma, normal_sites, bern_sites, gamma_priors = _classify(tr)
    if not gauss and not gamma:
        name = getattr(model, "__name__", repr(model))
        raise NotConjugateError(
            f"model {name} has no latent Normal or Gamma sites, so there is nothing for derived CAVI to infer; "
            "attach a hand-written guide with @ppl_sbl.closed_form_guide(guide), or fit the model with SVI.")
    shapes = {name: tuple(jnp.shape(tr[name]["value"])) for name in gauss + gamma}
    sizes = {name: int(np.prod(shapes[name], dtype=int)) for name in shapes}
    offsets, total = {}, 0
    for name in gamma:  # stacked Gamma elements: offsets into ln g
        offsets[name] = total
        total += sizes[name]
    k1, k2, k3, k4 = jax.random.split(jax.random.PRNGKey(0), 4)
    z0 = {n: jax.random.normal(jax.random.fold_in(k1, i), (sizes[n],)) for i, n in enumerate(gauss)}
    z1 = {n: jax.random.normal(jax.random.fold_in(k2, i), (sizes[n],)) for i, n in enumerate(gauss)}
    u0 = 0.3 * jax.random.normal(k3, (total,))
    u1 = 0.3 * jax.random.normal(k4, (total,))
    zv0, zv1 = _stack(z0, gauss), _stack(z1, gauss)

    def site(z, u, name):
        values = {n: z[n].reshape(shapes[n]) for n in gauss}
        values.update({n: jnp.exp(u[offsets[n]:offsets[n] + sizes[n]]).reshape(shapes[n]) for n in gamma})
        return _trace(model, args, kwargs, values)[name]

    def linear_part(name, size):
        """r = x - mu (Normal) or the logits (Bernoulli) as a function of (stacked z, u)."""
        def f(zvec, u):
            st = site(_unstack(zvec, gauss, sizes), u, name)
            fn = _base(st["fn"])
            if isinstance(fn, dist.Normal):
                return _flat(st["value"], size) - _flat(fn.loc, size)
            return _flat(fn.logits, size)
        return f

    def log_precision(name, size):
        return lambda u, z: -2.0 * jnp.log(_flat(_base(site(z, u, name)["fn"]).scale, size))

    def log_scale(name, size):
        def ls(u, z):
            sc = site(z, u, name)["scale"]
            return jnp.zeros(size) if sc is None else jnp.log(_flat(sc, size))
        return ls

    terms, jj, priors, normal, sums = {}, {}, {}, [], {}
    for name in [n for n, _ in _sites(tr)]:
        st = tr[name]
        size = int(np.prod(jnp.shape(st["value"]), dtype=int))
        # the log-density scale: a constant or a monomial in the Gamma elements, not the Gaussians
        cs, As = _monomial(name, "log-density scale (numpyro.handlers.scale)", log_scale(name, size), u0, u1, z0, z1)
        if name in gamma_priors:
            for other_u, other_z in ((u1, z0), (u0, z1)):
                fa, fb = _base(st["fn"]), _base(site(other_z, other_u, name)["fn"])
                if not (np.allclose(_flat(fa.concentration, size), _flat(fb.concentration, size))
                        and np.allclose(_flat(fa.rate, size), _flat(fb.rate, size))):
                    raise NotConjugateError(
                        f"site '{name}': a Gamma prior whose shape or rate depends on other latent variables is not "
                        f"conjugate in derived CAVI (they must be constants); {_SVI_HINT}.")
            fn = _base(st["fn"])
            sel = jnp.arange(offsets[name], offsets[name] + size, dtype=jnp.int32)
            priors[name] = _GammaPrior(_flat(fn.concentration, size), _flat(fn.rate, size), cs, As, sel)
            continue
        f = linear_part(name, size)
        what = "mean" if name in normal_sites else "logits"
        a, J = _affine_check(name, f"{what} is not affine in the Gaussian latent variables", lambda zv: f(zv, u0),
                             zv0, zv1)
        if not np.allclose(np.asarray(f(zv0, u0)), np.asarray(f(zv0, u1))):
            raise NotConjugateError(f"site '{name}': its {what} depends on a Gamma variable; {_SVI_HINT}.")
        B = dict(zip(gauss, np.split(np.asarray(J), np.cumsum([sizes[g] for g in gauss])[:-1], axis=1)))
        # a diagonal block (a Gaussian site's own prior) is kept as its diagonal: no dense products
        B = {g: jnp.asarray(np.diag(b).copy() if _is_diagonal(b) else b) for g, b in B.items() if np.any(b != 0)}
        if name in bern_sites:
            t = np.asarray(st["value"], dtype=np.float64).reshape(-1)
            if not np.all((t == 0) | (t == 1)):
                raise ValueError(f"site '{name}': Bernoulli observations must be 0 or 1; got the values "
                                 f"{np.unique(t)[:5]}. Code the labels as 0/1.")
            jj[name] = _JJTerm(a, B, jnp.asarray(2.0 * t - 1.0), cs, As)
            continue
        try:
            c, A = _monomial(name, "precision (1 / scale^2)", log_precision(name, size), u0, u1, z0, z1)
        except NotConjugateError as not_product:
            idx = _sum_of_gammas(name, log_precision(name, size), u0, u1, z0, total)
            if idx is None:
                raise not_product
            sums[name] = _SumTerm(a, B, idx, cs, As)
            continue
        uniform = bool(np.all(np.asarray(A) == np.asarray(A)[:1]) and np.all(np.asarray(As) == np.asarray(As)[:1])
                       and np.ptp(np.asarray(c)) == 0 and np.ptp(np.asarray(cs)) == 0)  # every row alike
        G, aTa, BTa, F = {}, jnp.zeros(()), {}, {}
        if uniform:
            G = {g: (jnp.diag(b ** 2) if b.ndim == 1 else b.T @ b) for g, b in B.items()}
            if len(B) == 1:
                (g, b), = B.items()
                aTa, BTa = jnp.sum(a ** 2), {g: _apply(b, a) if b.ndim == 1 else b.T @ a}
                factor = low_rank_factor(np.asarray(G[g])) if b.ndim == 2 else None
                if factor is not None:
                    F, G = {g: jnp.asarray(factor)}, {}
        terms[name] = _Term(a, B, c, A, cs, As, G, aTa, BTa, F)
        normal.append((name, uniform, tuple(B), tuple(F)))
    latent_order = tuple(n for n, _ in _sites(tr) if n in gauss or n in gamma)
    observed = [n for n, st in _sites(tr) if st["is_observed"]]
    def touched(*indices, own=None):
        cols = set(np.concatenate([np.asarray(i).ravel() for i in indices]).tolist()) - {total}
        found = {n for n in gamma for c_ in cols if offsets[n] <= c_ < offsets[n] + sizes[n]}
        return tuple(sorted(found | ({own} if own else set())))

    touches = tuple([(n, touched(t.A, t.As)) for n, t in terms.items()]
                    + [(n, touched(t.idx, t.As)) for n, t in sums.items()]
                    + [(n, touched(t.As)) for n, t in jj.items()]
                    + [(n, touched(p_.As, own=n)) for n, p_ in priors.items()])
    # Gaussian factors kept in factored form: every term on them is diagonal or the one low-rank term
    lowrank = []
    for g in gauss:
        on = [t for t in terms.values() if g in t.B]
        if any(g in t.B for t in list(jj.values()) + list(sums.values())):
            continue
        low = [t for t in on if t.F]
        if len(low) == 1 and all(len(t.B) == 1 and (t.F or t.B[g].ndim == 1) for t in on):
            lowrank.append(g)
    structure = _Structure(
        gauss=tuple(gauss), gamma=tuple(gamma), sizes=tuple(sorted(sizes.items())),
        shapes=tuple(sorted(shapes.items())), event_dims=tuple((n, tr[n]["fn"].event_dim) for n in latent_order),
        latent_order=latent_order, normal=tuple(normal), bernoulli=tuple((n, tuple(jj[n].B)) for n in jj),
        sums=tuple((n, tuple(sums[n].B), tuple(sums[n].idx.shape)) for n in sums),
        priors=tuple(priors), observed=observed[0] if observed else "", touches=touches, lowrank=tuple(lowrank))
    values = {n: jnp.asarray(st_["value"]) for n, st_ in _sites(tr) if st_["is_observed"]}
    return structure, DerivedData(terms, jj, priors, sums, values)


# ----------------------------------------------------------------------------------------------
# The expected log joint over the mean parameters (the registry of expected log densities)
# ----------------------------------------------------------------------------------------------
def _is_diagonal(b):
    return b.shape[0] == b.shape[1] and np.count_nonzero(b - np.diag(np.diag(b))) == 0


def _apply(b, x):
    """B x, for B stored dense (2-d) or as its diagonal (1-d)."""
    return b * x if b.ndim == 1 else b @ x


def _linear_moments(t, means, second):
    """E[v] and E[v^2] of v = a + sum_f B_f z_f under the mean-field q (factors independent)."""
    mean = t.a + sum(_apply(t.B[f], means[f]) for f in t.B)
    var = 0.0
    for f, b in t.B.items():
        if isinstance(second[f], tuple):  # factored factor: (diag E[zz^T], tr(G E[zz^T]))
            var = var + b ** 2 * (second[f][0] - means[f] ** 2)
            continue
        cov = second[f] - jnp.outer(means[f], means[f])
        var = var + (b ** 2 * jnp.diag(cov) if b.ndim == 1 else jnp.sum((b @ cov) * b, 1))
    return mean, mean ** 2 + var


def _expected_log_joint(data, means, second, g_mean, g_log, local, exact=None):
    """E_q[ln p] as a function of E[z], E[zz^T] of each Gaussian site, E[g], E[ln g] of all Gamma
    elements (stacked) and the local-bound parameters ``local = (xi, log_eta)``: with the
    Jaakkola-Jordan bound on Bernoulli terms and the log-sum bound on sums of precisions, or,
    with ``exact = (shapes, rates)`` of the stacked Gamma elements, their exact expectations by
    quadrature."""
    xi, log_eta = local
    log_g_mean = jnp.log(g_mean)
    total = 0.0
    for t in data.terms.values():
        e_tau = jnp.exp(t.c + _monosum(t.A, log_g_mean))
        e_log_tau = t.c + _monosum(t.A, g_log)
        e_scale = jnp.exp(t.cs + _monosum(t.As, log_g_mean))
        if t.F or t.BTa:  # one precision and scale for every row, one Gaussian factor
            (f,) = t.BTa
            quad = second[f][1] if t.F else jnp.sum(t.G[f] * second[f])  # tr(G E[zz^T])
            er2 = t.aTa + 2.0 * t.BTa[f] @ means[f] + quad
            n = t.a.shape[0]
            total = total + e_scale[0] * (0.5 * n * (e_log_tau[0] - expfam.LOG_2PI) - 0.5 * e_tau[0] * er2)
        elif t.G:  # one precision and scale for every row: sum_i E[r_i^2] through the Gram matrices
            mean = t.a + sum(_apply(t.B[f], means[f]) for f in t.B)
            er2 = jnp.sum(mean ** 2) + sum(jnp.sum(t.G[f] * (second[f] - jnp.outer(means[f], means[f])))
                                           for f in t.G)
            n = t.a.shape[0]
            total = total + e_scale[0] * (0.5 * n * (e_log_tau[0] - expfam.LOG_2PI) - 0.5 * e_tau[0] * er2)
        else:
            _, er2 = _linear_moments(t, means, second)
            total = total + jnp.sum(e_scale * expfam.normal_expected_log_density(er2, e_tau, e_log_tau))
    for name, t in data.jj.items():
        mean, ex2 = _linear_moments(t, means, second)
        e_scale = jnp.exp(t.cs + _monosum(t.As, log_g_mean))
        if exact is not None:
            pointwise = expected_log_sigmoid(t.s * mean, ex2 - mean ** 2)
        else:
            pointwise = jj_log_sigmoid_bound(t.s * mean, ex2, xi[name])
        total = total + jnp.sum(e_scale * pointwise)
    for name, t in data.sums.items():
        _, er2 = _linear_moments(t, means, second)
        e_tau = _monosum(t.idx, g_mean)
        k = t.idx.shape[1]
        if exact is not None:
            e_log_tau = expected_log_sum_gamma([exact[0][t.idx[:, j]] for j in range(k)],
                                               [exact[1][t.idx[:, j]] for j in range(k)])
        else:
            e_log_tau = log_sum_bound([g_log[t.idx[:, j]] for j in range(k)],
                                      [log_eta[name][:, j] for j in range(k)])[0]
        e_scale = jnp.exp(t.cs + _monosum(t.As, log_g_mean))
        total = total + jnp.sum(e_scale * expfam.normal_expected_log_density(er2, e_tau, e_log_tau))
    for p in data.priors.values():
        e_scale = jnp.exp(p.cs + _monosum(p.As, log_g_mean))
        total = total + jnp.sum(e_scale * expfam.gamma_expected_log_density(p.shape, p.rate, g_mean[p.sel],
                                                                             g_log[p.sel]))
    return total


# ----------------------------------------------------------------------------------------------
# The guide
# ----------------------------------------------------------------------------------------------
_GUIDES = {}  # (model, structure) -> (guide, the arguments it was last analysed on)


def covariance(state, name):
    """The covariance of the Gaussian factor ``name`` of a derived guide's state, as a dense matrix
    (factors on low-rank designs are kept in factored form during the sweeps)."""
    cov = state.cov[name]
    return _gauss.dense_covariance(cov) if isinstance(cov, _gauss.ActiveGaussian) else cov


def derived_guide(model, *args, **kwargs) -> ClosedFormGuide:
    """The closed-form guide of ``model(*args, **kwargs)`` derived from its trace (see the module
    docstring). Raises :class:`NotConjugateError` naming the first site outside the vocabulary.

    The guide is reused (and its sweep compiled once) for every call with the same structure (the
    same sites, shapes and dependencies); its ``prepare`` reads the numbers of new arguments."""
    structure, data = _analyse(model, args, kwargs)
    key = (model, structure)
    if key not in _GUIDES:
        last = {}
        _GUIDES[key] = (_build(model, structure, last), last)
    guide, last = _GUIDES[key]
    last["analysed"] = (args, kwargs, data)  # ``prepare`` on the same arguments reuses this analysis
    return guide


def _same(a, b):
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _build(model, st: _Structure, last: dict) -> ClosedFormGuide:
    gauss, gamma = st.gauss, st.gamma
    sizes, shapes, event_dim = dict(st.sizes), dict(st.shapes), dict(st.event_dims)
    offsets, total = {}, 0
    for name in gamma:
        offsets[name] = total
        total += sizes[name]

    touches = dict(st.touches)

    def _touching(data, n):
        """The terms whose expected log density depends on Gamma site n (the others have no
        gradient with respect to it: skipping them saves re-evaluating the likelihood)."""
        keep = lambda d: {k: v for k, v in d.items() if n in touches[k]}  # noqa: E731
        return DerivedData(keep(data.terms), keep(data.jj), keep(data.priors), keep(data.sums), {})

    lowrank = set(st.lowrank)
    factor_term = {f: name for name, _, _, fs in st.normal for f in fs}  # the term holding f's factor F

    def second_moment(state, data, f):
        """E[zz^T] of a dense factor; (diag E[zz^T], tr(F F^T E[zz^T])) of a factored one."""
        m = state.mean[f]
        if f not in lowrank:
            return state.cov[f] + jnp.outer(m, m)
        q, F = state.cov[f], data.terms[factor_term[f]].F[f]
        # tr(F^T Sigma F) as kept by the update (``factor_var``: no cancellation where the data
        # dominate the prior)
        return (_gauss.covariance_diagonal(q) + m ** 2, jnp.sum(q.factor_var) + jnp.sum((F.T @ m) ** 2))

    def gamma_moments(state):
        g_shape, g_rate = _stack(state.shape, gamma), _stack(state.rate, gamma)
        return g_shape / g_rate, digamma(g_shape) - jnp.log(g_rate)

    def moments(state, data):
        means = {f: state.mean[f] for f in gauss}
        second = {f: second_moment(state, data, f) for f in gauss}
        return (means, second, *gamma_moments(state))

    grad_gauss = jax.grad(_expected_log_joint, argnums=(1, 2))
    grad_gamma = jax.grad(_expected_log_joint, argnums=(3, 4))

    def prepare(*a, **kw):
        seen = last.get("analysed")
        if seen is not None and _same(seen[0], a) and seen[1].keys() == kw.keys() and _same(
                tuple(seen[1].values()), tuple(kw.values())):
            return seen[2]
        other, data = _analyse(model, a, kw)
        if other != st:
            raise ValueError("these arguments give the model another structure; call derived_guide(model, ...) "
                             "with them (CAVI does).")
        return data

    def init(data):
        cov = {f: (_gauss.init_active_gaussian(sizes[f], data.terms[factor_term[f]].F[f].shape[1],
                                               factor=data.terms[factor_term[f]].F[f]) if f in lowrank
                   else jnp.eye(sizes[f])) for f in gauss}
        state = DerivedState(mean={f: jnp.zeros(sizes[f]) for f in gauss}, cov=cov,
                             shape={n: data.priors[n].shape for n in gamma},
                             rate={n: data.priors[n].rate for n in gamma},
                             xi={n: jnp.ones_like(t.s) for n, t in data.jj.items()},
                             logdet={f: jnp.zeros(()) for f in gauss},
                             log_eta={n: jnp.zeros(t.idx.shape) for n, t in data.sums.items()})  # eta = 1
        return start(state, data)

    def start(state, data):
        """The Gamma factors' means at the data's scale, as the hand-written guides start
        (:mod:`ppl_sbl.models.rvm`): (1) the Gamma elements in the precision of every row of an
        observed Normal site (a shared noise precision) at 10 / var(observed values) (divided
        evenly in logarithm among them, the constant factor of the precision taken out); (2) the
        Gamma elements in the precision of each Gaussian factor's own prior so that this
        precision matches the unit-information prior h_k / N
        (:func:`ppl_sbl.gaussian.start_prior_precision`), h_k the precision the other terms give
        element k at this start and N the number of observations: by least squares in logarithm
        (minimum norm) for a product of Gamma elements, evenly for a sum. Every other Gamma
        element stays at its prior."""
        g_mean, _ = gamma_moments(state)
        log_mean, changed = jnp.log(g_mean), jnp.zeros(total, dtype=bool)

        def counts(index):  # how many rows of an index list (rows, k) hold each Gamma element
            index = jnp.asarray(index).reshape(index.shape[0], -1)
            return jnp.sum(jax.nn.one_hot(index, total + 1, dtype=jnp.float64), axis=(0, 1))[:total]

        for name, t in data.terms.items():  # (1) shared precisions of observed Normal sites
            if name not in data.observed or t.A.shape[1] == 0:
                continue
            shared = counts(t.A) == t.A.shape[0]
            y = jnp.asarray(data.observed[name]).reshape(-1)
            spread = jnp.var(y)
            spread = jnp.where(spread > 0, spread, jnp.mean(y * y))
            target = jnp.log(10.0 / jnp.where(spread > 0, spread, 1.0)) - jnp.mean(t.c)
            log_mean = jnp.where(shared, target / jnp.maximum(jnp.sum(shared), 1), log_mean)
            changed = changed | shared
        n_obs = sum(int(np.prod(jnp.shape(v))) for v in data.observed.values())
        for f in gauss:  # (2) each Gaussian factor's own prior precision
            own, own_sum = data.terms.get(f), data.sums.get(f)
            if own is None and own_sum is None:
                continue
            others = DerivedData({k: v for k, v in data.terms.items() if k != f}, data.jj, data.priors,
                                 {k: v for k, v in data.sums.items() if k != f}, {})
            g_now = jnp.exp(log_mean)
            means, second, _, _ = moments(state, data)
            _, d_second = grad_gauss(others, means, second, g_now, log_mean, (state.xi, state.log_eta))
            if f in lowrank:
                F = data.terms[factor_term[f]].F[f]
                h = -2.0 * d_second[f][0] - 2.0 * d_second[f][1] * jnp.sum(F ** 2, 1)
            else:
                h = -2.0 * jnp.diag(d_second[f])
            log_target = jnp.log(_gauss.start_prior_precision(h, n_obs))
            if own_sum is not None:
                mask = counts(own_sum.idx) > 0
                log_mean = jnp.where(mask, jnp.mean(log_target) - np.log(own_sum.idx.shape[1]), log_mean)
                changed = changed | mask
                continue
            if own.A.shape[1] == 0:
                continue
            y = log_target - own.c
            mask = counts(own.A) > 0
            if own.A.shape[1] == 1:  # one element per row: the mean over the rows holding it
                total_y = jax.ops.segment_sum(y, own.A[:, 0], num_segments=total + 1)[:total]
                u = total_y / jnp.maximum(counts(own.A), 1.0)
            else:  # a product: the minimum-norm least-squares solution
                design = jnp.sum(jax.nn.one_hot(own.A, total + 1, dtype=jnp.float64), axis=1)[:, :total]
                u = jnp.linalg.pinv(design) @ y
            log_mean = jnp.where(mask, u, log_mean)
            changed = changed | mask
        shape = _stack(state.shape, gamma)
        rate = jnp.where(changed, shape / jnp.exp(log_mean), _stack(state.rate, gamma))
        return state._replace(rate=_unstack(rate, gamma, sizes))

    def update(state, data):
        for f in gauss:  # Gaussian factors first, in the model's order
            means, second, g_mean, g_log = moments(state, data)
            d_mean, d_second = grad_gauss(data, means, second, g_mean, g_log, (state.xi, state.log_eta))
            if f in lowrank:  # Sigma^-1 = diag(d) + c F F^T: Woodbury, in factored form
                d_diag, d_quad = d_second[f]
                F = data.terms[factor_term[f]].F[f]
                q = _gauss.update_active_gaussian(state.cov[f], -2.0 * d_diag, None, d_mean[f],
                                                  jnp.zeros(sizes[f]), data_factor=F * jnp.sqrt(-2.0 * d_quad))
                q = _gauss.factor_variance(q, -2.0 * d_quad)
                state = state._replace(mean={**state.mean, f: q.mean}, cov={**state.cov, f: q},
                                       logdet={**state.logdet, f: q.log_det})
                continue
            P = -(d_second[f] + d_second[f].T)  # Sigma^-1 = -2 dL/dE[zz^T], symmetrised
            chol = jnp.linalg.cholesky(P)
            cov = jax.scipy.linalg.cho_solve((chol, True), jnp.eye(sizes[f]))
            mean = cov @ d_mean[f]
            logdet = -2.0 * jnp.sum(jnp.log(jnp.diag(chol)))
            state = state._replace(mean={**state.mean, f: mean}, cov={**state.cov, f: cov},
                                   logdet={**state.logdet, f: logdet})
        # the Gaussian moments are fixed from here on: computed once for the Gamma and xi updates
        means, second, _, _ = moments(state, data)
        for n in gamma:  # then the Gamma factors, in the model's order
            g_mean, g_log = gamma_moments(state)
            d_gmean, d_glog = grad_gamma(_touching(data, n), means, second, g_mean, g_log, (state.xi, state.log_eta))
            sl = slice(offsets[n], offsets[n] + sizes[n])
            state = state._replace(shape={**state.shape, n: 1.0 + d_glog[sl]}, rate={**state.rate, n: -d_gmean[sl]})
        if data.jj:  # then the local-bound parameters: xi^2 = E[x^2]
            state = state._replace(xi={n: jnp.sqrt(_linear_moments(t, means, second)[1]) for n, t in data.jj.items()})
        if data.sums:  # and ln eta_k = E[ln x_k] (the log-sum bound is tight in expectation there)
            _, g_log = gamma_moments(state)
            state = state._replace(log_eta={n: g_log[t.idx] for n, t in data.sums.items()})
        return state

    def entropy(state):
        value = 0.0
        for f in gauss:
            value = value + expfam.gaussian_entropy(state.logdet[f], sizes[f])
        for n in gamma:
            value = value + jnp.sum(expfam.gamma_entropy(state.shape[n], state.rate[n]))
        return value

    def elbo(state, data):
        return _expected_log_joint(data, *moments(state, data), (state.xi, state.log_eta)) + entropy(state)

    def elbo_exact(state, data):
        exact = (_stack(state.shape, gamma), _stack(state.rate, gamma))
        return _expected_log_joint(data, *moments(state, data), (state.xi, state.log_eta), exact=exact) + entropy(state)

    def guide_fn(state):
        def guide(*a, **kw):
            for name in st.latent_order:
                shape = shapes[name]
                if name in gauss:
                    if len(shape) == 0:
                        numpyro.sample(name, dist.Normal(state.mean[name][0], jnp.sqrt(covariance(state, name)[0, 0])))
                    elif len(shape) == 1 and event_dim[name] == 1:
                        numpyro.sample(name, dist.MultivariateNormal(state.mean[name], covariance(state, name)))
                    else:
                        raise NotImplementedError(
                            f"site '{name}': the NumPyro guide of a derived Gaussian factor covers vectors with one "
                            "event dimension (declare the site with .to_event(1))")
                else:
                    q = dist.Gamma(state.shape[name].reshape(shape), state.rate[name].reshape(shape))
                    numpyro.sample(name, q.to_event(event_dim[name]) if event_dim[name] else q)
        return guide

    def predict(state, data, *new_args, **new_kwargs):
        """For new arguments of the model (e.g. a new design matrix): the observed site's predictive
        mean and variance (Normal: mean affine in the Gaussians plus the noise variance 1 / E[tau];
        a Gamma site whose shape differs for the new arguments, such as a per-point noise scale,
        enters at its prior mean) or P(t = 1) = E_q[sigmoid(logits)] (Bernoulli)."""
        name = st.observed
        if not name:
            raise ValueError("the model has no observed site to predict.")
        means = {f: state.mean[f] for f in gauss}
        g_means = {n: state.shape[n] / state.rate[n] for n in gamma}
        tr = _trace(model, new_args, new_kwargs)
        if name not in tr:
            raise ValueError(f"the model called with these arguments has no site '{name}'.")
        values = {}
        for n in gamma:  # E[g] from q where the shapes agree, else the prior mean
            if tuple(jnp.shape(tr[n]["value"])) == shapes[n]:
                values[n] = g_means[n].reshape(shapes[n])
            else:
                fn = _base(tr[n]["fn"])
                values[n] = jnp.broadcast_to(fn.concentration / fn.rate, jnp.shape(tr[n]["value"]))

        def site_at(zvec):
            z = _unstack(zvec, gauss, sizes)
            vals = {**values, **{f: z[f].reshape(shapes[f]) for f in gauss}}
            return _trace(model, new_args, new_kwargs, vals)[name]

        def linear(zvec):
            fn = _base(site_at(zvec)["fn"])
            size = int(np.prod(jnp.shape(site_at(zvec)["value"]), dtype=int))
            return _flat(fn.loc if isinstance(fn, dist.Normal) else fn.logits, size)

        m = _stack(means, gauss)
        mean = linear(m)
        J = jax.jacfwd(linear)(m)
        blocks = np.cumsum([sizes[f] for f in gauss])[:-1]
        var = sum(jnp.sum((b @ covariance(state, f)) * b, 1) for f, b in zip(gauss, jnp.split(J, blocks, axis=1)))
        fn = _base(site_at(m)["fn"])
        if isinstance(fn, dist.Normal):
            return mean, var + _flat(fn.scale, mean.shape[0]) ** 2
        return expected_sigmoid(mean, var)

    def relevance(state, data):
        """(prior precision, data precision) of each element of the first Gaussian factor: E[tau]
        of its own prior site, and the rest of the diagonal of its natural precision."""
        f = gauss[0]
        means, second, g_mean, g_log = moments(state, data)
        _, d_second = grad_gauss(data, means, second, g_mean, g_log, (state.xi, state.log_eta))
        if f in lowrank:
            F = data.terms[factor_term[f]].F[f]
            total = -2.0 * d_second[f][0] - 2.0 * d_second[f][1] * jnp.sum(F ** 2, 1)
        else:
            total = -2.0 * jnp.diag(d_second[f])
        own = data.terms.get(f)
        prior = jnp.exp(own.c + _monosum(own.A, jnp.log(g_mean))) if own is not None else jnp.zeros(sizes[f])
        return prior, total - prior

    has_jj, has_sum = bool(st.bernoulli), bool(st.sums)
    bound = "+".join(b for b, on in (("jaakkola-jordan", has_jj), ("log-sum", has_sum)) if on) or "none"
    return ClosedFormGuide(prepare=prepare, init=init, update=update, elbo=elbo, guide=guide_fn, predict=predict,
                           relevance=relevance, elbo_exact=elbo_exact if (has_jj or has_sum) else None,
                           bound=bound, observed=st.observed)
