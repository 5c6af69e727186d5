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
* a site's log density multiplied (``numpyro.handlers.scale``) by a constant or by a Gamma
  element: the scale's expectation multiplies the term.

The structure (which site depends on which, and how) is read from NumPyro's trace of the model:
the mean's Jacobian with respect to the Gaussian latents (checked constant: affine), the log
precision's Jacobian with respect to the log Gamma latents (checked constant, entries 0 or 1).
A model outside the vocabulary raises :class:`NotConjugateError` naming the site.

One sweep updates the Gaussian factors (in the order the model declares them), then the Gamma
factors (in that order), as the hand-written guides of :mod:`ppl_sbl.models` do; the ELBO is
the expected log joint plus the entropies. :func:`derived_guide` returns the
:class:`~ppl_sbl.inference.ClosedFormGuide` that :class:`~ppl_sbl.inference.CAVI` runs.
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
from .inference import ClosedFormGuide

__all__ = ["derived_guide", "NotConjugateError", "DerivedState"]

_SVI_HINT = ("fit this model with SVI instead (numpyro.infer.SVI with an AutoNormal guide and "
             "numpyro.infer.Trace_ELBO), or rewrite the site in the derived-CAVI vocabulary (Gaussian vectors, "
             "Gamma variables with constant shape and rate, Normal likelihoods with a mean affine in the Gaussians "
             "and a precision that is a product of Gammas)")


class NotConjugateError(ValueError):
    """The model leaves the vocabulary of derived CAVI; the message names the site."""


class DerivedState(NamedTuple):
    """q of a derived guide: per Gaussian site its mean (D,) and covariance (D, D); per Gamma site
    its shape and rate (flattened)."""

    mean: dict
    cov: dict
    shape: dict
    rate: dict


class _Term(NamedTuple):
    """One Normal site's expected log density: r = x - mu = a + sum_f B[f] z_f, precision
    tau = exp(c + A ln g) (g all Gamma elements stacked), log-density scale s = exp(cs + As ln g)."""

    a: jax.Array
    B: dict
    c: jax.Array
    A: jax.Array
    cs: jax.Array
    As: jax.Array


class _GammaPrior(NamedTuple):
    shape: jax.Array
    rate: jax.Array
    cs: jax.Array
    As: jax.Array


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
    gauss, gamma, normal_sites, gamma_priors = [], [], [], []
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
        else:
            raise NotConjugateError(
                f"site '{name}': an observed {type(base).__name__} likelihood is not in the derived-CAVI vocabulary "
                f"(Normal with a mean affine in the Gaussian latents); {_SVI_HINT}.")
    return gauss, gamma, normal_sites, gamma_priors


def _flat(x, size):
    return jnp.broadcast_to(jnp.asarray(x, dtype=jnp.float64), size).reshape(-1)


def _affine_check(name, what, f, x0, x1, tol=1e-8):
    """Jacobian of f at x0, checked to predict f(x1) (f affine); returns (f(0)-offset, J)."""
    J = jax.jacfwd(f)(x0)
    f0 = f(x0)
    pred = f0 + J @ (x1 - x0)
    got = f(x1)
    if not np.allclose(np.asarray(pred), np.asarray(got), rtol=tol, atol=tol * (1 + float(jnp.max(jnp.abs(got))))):
        raise NotConjugateError(f"site '{name}': its {what}; {_SVI_HINT}.")
    return f0 - J @ x0, J


def _analyse(model, args, kwargs):
    tr = _trace(model, args, kwargs)
    gauss, gamma, normal_sites, gamma_priors = _classify(tr)
    shapes = {name: tuple(jnp.shape(tr[name]["value"])) for name in gauss + gamma}
    sizes = {name: int(np.prod(shapes[name], dtype=int)) for name in shapes}
    # stacked Gamma elements: offsets into ln g
    offsets, total = {}, 0
    for name in gamma:
        offsets[name] = total
        total += sizes[name]
    key = jax.random.PRNGKey(0)
    k1, k2, k3, k4 = jax.random.split(key, 4)
    z0 = {n: jax.random.normal(jax.random.fold_in(k1, i), (sizes[n],)) for i, n in enumerate(gauss)}
    z1 = {n: jax.random.normal(jax.random.fold_in(k2, i), (sizes[n],)) for i, n in enumerate(gauss)}
    u0 = 0.3 * jax.random.normal(k3, (total,))
    u1 = 0.3 * jax.random.normal(k4, (total,))

    def values(z, u):
        out = {n: z[n].reshape(shapes[n]) for n in gauss}
        out.update({n: jnp.exp(u[offsets[n]:offsets[n] + sizes[n]]).reshape(shapes[n]) for n in gamma})
        return out

    def site(z, u, name):
        return _trace(model, args, kwargs, values(z, u))[name]

    def residual(name, size):
        def r(zvec, u):
            z = _unstack(zvec, gauss, sizes)
            s = site(z, u, name)
            fn = _base(s["fn"])
            return _flat(s["value"], size) - _flat(fn.loc, size)
        return r

    def log_precision(name, size):
        def lp(u, z):
            s = site(z, u, name)
            return -2.0 * jnp.log(_flat(_base(s["fn"]).scale, size))
        return lp

    def log_scale(name, size):
        def ls(u, z):
            s = site(z, u, name)
            return jnp.zeros(size) if s["scale"] is None else jnp.log(_flat(s["scale"], size))
        return ls

    zv0, zv1 = _stack(z0, gauss), _stack(z1, gauss)
    terms, priors = {}, {}
    for name in normal_sites + gamma_priors:
        s = tr[name]
        size = int(np.prod(jnp.shape(s["value"]), dtype=int))
        # the log-density scale: a constant or a monomial in the Gamma elements, not the Gaussians
        cs, As = _monomial(name, "log-density scale (numpyro.handlers.scale)", log_scale(name, size), u0, u1, z0, z1)
        if name in gamma_priors:
            for other_u, other_z in ((u1, z0), (u0, z1)):
                fn_a, fn_b = _base(s["fn"]), _base(site(other_z, other_u, name)["fn"])
                if not (np.allclose(_flat(fn_a.concentration, size), _flat(fn_b.concentration, size))
                        and np.allclose(_flat(fn_a.rate, size), _flat(fn_b.rate, size))):
                    raise NotConjugateError(
                        f"site '{name}': a Gamma prior whose shape or rate depends on other latent variables is not "
                        f"conjugate in derived CAVI (they must be constants); {_SVI_HINT}.")
            fn = _base(s["fn"])
            priors[name] = _GammaPrior(_flat(fn.concentration, size), _flat(fn.rate, size), cs, As)
            continue
        r = residual(name, size)
        a, J = _affine_check(name, "mean is not affine in the Gaussian latent variables", lambda zv: r(zv, u0), zv0,
                             zv1)
        r_u1 = r(zv0, u1)
        if not np.allclose(np.asarray(r(zv0, u0)), np.asarray(r_u1)):
            raise NotConjugateError(f"site '{name}': its mean depends on a Gamma variable; {_SVI_HINT}.")
        B = {}
        start = 0
        for g in gauss:
            B[g] = J[:, start:start + sizes[g]]
            start += sizes[g]
        c, A = _monomial(name, "precision (1 / scale^2)", log_precision(name, size), u0, u1, z0, z1)
        terms[name] = _Term(a, B, c, A, cs, As)
    return dict(gauss=gauss, gamma=gamma, shapes=shapes, sizes=sizes, offsets=offsets, total=total, terms=terms,
                priors=priors, normal_sites=normal_sites)


def _stack(z, names):
    return jnp.concatenate([z[n] for n in names]) if names else jnp.zeros(0)


def _unstack(zvec, names, sizes):
    out, start = {}, 0
    for n in names:
        out[n] = zvec[start:start + sizes[n]]
        start += sizes[n]
    return out


def _monomial(name, what, f, u0, u1, z0, z1):
    """f(u, z) = ln of a positive quantity; checks it is c + A u (A in {0, 1}, no dependence on z)."""
    c, A = _affine_check(name, f"{what} is not a product of Gamma variables", lambda u: f(u, z0), u0, u1)
    if not np.allclose(np.asarray(f(u0, z0)), np.asarray(f(u0, z1))):
        raise NotConjugateError(f"site '{name}': its {what} depends on a Gaussian latent variable; {_SVI_HINT}.")
    An = np.asarray(A)
    if not np.all(np.isclose(An, 0.0) | np.isclose(An, 1.0)):
        raise NotConjugateError(
            f"site '{name}': its {what} raises a Gamma variable to a power other than 1 (derived CAVI needs each "
            f"Gamma element at most once, to the first power); {_SVI_HINT}.")
    return c, jnp.asarray(np.round(An))


class DerivedData(NamedTuple):
    terms: dict
    priors: dict


# ----------------------------------------------------------------------------------------------
# The expected log joint over the mean parameters
# ----------------------------------------------------------------------------------------------
def _expected_log_joint(terms, priors, means, second, g_mean, g_log):
    """E_q[ln p] as a function of E[z], E[zz^T] of each Gaussian site and E[g], E[ln g] of all
    Gamma elements (stacked)."""
    log_g_mean = jnp.log(g_mean)
    total = 0.0
    for t in terms.values():
        mean_r = t.a + sum(t.B[f] @ means[f] for f in t.B)
        # E[r^2] = E[r]^2 + sum_f rowsum(B_f Cov_f B_f^T), with Cov_f = E[zz^T]_f - m_f m_f^T
        er2 = mean_r ** 2 + sum(jnp.sum((t.B[f] @ (second[f] - jnp.outer(means[f], means[f]))) * t.B[f], 1)
                                for f in t.B)
        e_tau = jnp.exp(t.c + t.A @ log_g_mean)
        e_log_tau = t.c + t.A @ g_log
        e_scale = jnp.exp(t.cs + t.As @ log_g_mean)
        total = total + jnp.sum(e_scale * expfam.normal_expected_log_density(er2, e_tau, e_log_tau))
    for name, p in priors.items():
        e_scale = jnp.exp(p.cs + p.As @ log_g_mean)
        # the prior's own element: E[g] and E[ln g] at this site's slice
        total = total + jnp.sum(e_scale * expfam.gamma_expected_log_density(p.shape, p.rate, p.mean_sel @ g_mean,
                                                                             p.mean_sel @ g_log))
    return total


def derived_guide(model, *args, **kwargs) -> ClosedFormGuide:
    """The closed-form guide of ``model(*args, **kwargs)`` derived from its trace (see the module
    docstring). Raises :class:`NotConjugateError` naming the first site outside the vocabulary."""
    info = _analyse(model, args, kwargs)
    gauss, gamma, sizes, offsets, total = info["gauss"], info["gamma"], info["sizes"], info["offsets"], info["total"]
    priors = {}
    for name, p in info["priors"].items():
        sel = np.zeros((sizes[name], total))
        sel[np.arange(sizes[name]), offsets[name] + np.arange(sizes[name])] = 1.0
        priors[name] = _PriorSel(p.shape, p.rate, p.cs, p.As, jnp.asarray(sel))
    data0 = DerivedData(info["terms"], priors)

    def moments(state):
        means = {f: state.mean[f] for f in gauss}
        second = {f: state.cov[f] + jnp.outer(state.mean[f], state.mean[f]) for f in gauss}
        g_shape = _stack(state.shape, gamma)
        g_rate = _stack(state.rate, gamma)
        return means, second, g_shape / g_rate, digamma(g_shape) - jnp.log(g_rate)

    def ell(data, means, second, g_mean, g_log):
        return _expected_log_joint(data.terms, data.priors, means, second, g_mean, g_log)

    grad_gauss = jax.grad(ell, argnums=(1, 2))
    grad_gamma = jax.grad(ell, argnums=(3, 4))

    def prepare(*a, **kw):
        if a == args and kw == kwargs:
            return data0
        other = _analyse(model, a, kw)
        return DerivedData(other["terms"], {n: _PriorSel(p.shape, p.rate, p.cs, p.As, priors[n].mean_sel)
                                            for n, p in other["priors"].items()})

    def init(data):
        shape = {n: data.priors[n].shape for n in gamma}
        rate = {n: data.priors[n].rate for n in gamma}
        mean = {f: jnp.zeros(sizes[f]) for f in gauss}
        cov = {f: jnp.eye(sizes[f]) for f in gauss}
        return DerivedState(mean, cov, shape, rate)

    def update(state, data):
        for f in gauss:  # Gaussian factors first, in the model's order
            means, second, g_mean, g_log = moments(state)
            d_mean, d_second = grad_gauss(data, means, second, g_mean, g_log)
            P = -(d_second[f] + d_second[f].T)  # -2 dL/dE[zz^T], symmetrised
            L = jnp.linalg.cholesky(P)
            cov = jax.scipy.linalg.cho_solve((L, True), jnp.eye(sizes[f]))
            mean = jax.scipy.linalg.cho_solve((L, True), d_mean[f])
            state = state._replace(mean={**state.mean, f: mean}, cov={**state.cov, f: cov})
        for n in gamma:  # then the Gamma factors, in the model's order
            means, second, g_mean, g_log = moments(state)
            d_gmean, d_glog = grad_gamma(data, means, second, g_mean, g_log)
            sl = slice(offsets[n], offsets[n] + sizes[n])
            state = state._replace(shape={**state.shape, n: 1.0 + d_glog[sl]}, rate={**state.rate, n: -d_gmean[sl]})
        return state

    def elbo(state, data):
        means, second, g_mean, g_log = moments(state)
        value = ell(data, means, second, g_mean, g_log)
        for f in gauss:
            value = value + expfam.gaussian_entropy(jnp.linalg.slogdet(state.cov[f])[1], sizes[f])
        for n in gamma:
            value = value + jnp.sum(expfam.gamma_entropy(state.shape[n], state.rate[n]))
        return value

    tr0 = _trace(model, args, kwargs)
    latent_order = [n for n, _ in _sites(tr0) if n in gauss or n in gamma]
    event_dim = {n: tr0[n]["fn"].event_dim for n in latent_order}

    def guide_fn(state):
        def guide(*a, **kw):
            for name in latent_order:
                shape = info["shapes"][name]
                if name in gauss:
                    if len(shape) == 0:
                        numpyro.sample(name, dist.Normal(state.mean[name][0], jnp.sqrt(state.cov[name][0, 0])))
                    elif len(shape) == 1 and event_dim[name] == 1:
                        numpyro.sample(name, dist.MultivariateNormal(state.mean[name], state.cov[name]))
                    else:
                        raise NotImplementedError(
                            f"site '{name}': the NumPyro guide of a derived Gaussian factor covers vectors with one "
                            "event dimension (declare the site with .to_event(1))")
                else:
                    q = dist.Gamma(state.shape[name].reshape(shape), state.rate[name].reshape(shape))
                    numpyro.sample(name, q.to_event(event_dim[name]) if event_dim[name] else q)
        return guide

    def predict(state, data, *new_args, **new_kwargs):
        raise NotImplementedError("predictions from a derived guide: use numpyro.infer.Predictive with guide(state)")

    def relevance(state, data):
        f = gauss[0]
        return jnp.diag(jnp.linalg.inv(state.cov[f])), jnp.zeros(sizes[f])

    return ClosedFormGuide(prepare=prepare, init=init, update=update, elbo=elbo, guide=guide_fn, predict=predict,
                           relevance=relevance, observed=_observed_name(model, args, kwargs))


class _PriorSel(NamedTuple):
    shape: jax.Array
    rate: jax.Array
    cs: jax.Array
    As: jax.Array
    mean_sel: jax.Array


def _observed_name(model, args, kwargs):
    tr = _trace(model, args, kwargs)
    names = [n for n, s in _sites(tr) if s["is_observed"]]
    return names[0] if names else ""

