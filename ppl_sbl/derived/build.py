"""The derived guide: closed-form updates from the gradient of the expected log joint with respect
to each factor's mean parameters (the conjugate-exponential fixed point), and the derived
guide's ELBO, NumPyro guide, predictions and relevance."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import digamma

from .. import expfam, gaussian
from ..bounds import expected_sigmoid
from ..fast_ard import NotApplicable, Planned
from ..guide import ClosedFormGuide
from .fast import ard_layout, gamma_offsets, plan_fast
from .jacobian import jacobian
from .objective import expected_log_joint, expected_log_terms, linear_moments, prior_log_normalisers
from .structure import (QUICK, DerivedData, DerivedState, Structure, analyse, base_function, flat, monosum, stack_sites,
                        trace_model, unstack_sites, with_array_inputs)


# ----------------------------------------------------------------------------------------------
# The guide
# ----------------------------------------------------------------------------------------------
_GUIDES = {}  # (model, structure, fingerprint) -> (guide, the arguments it was last analysed on)


def covariance(state, name):
    """The covariance of the Gaussian factor ``name`` of a derived guide's state, as a dense matrix
    (factors on low-rank designs are kept in factored form during the sweeps)."""
    cov = state.cov[name]
    return gaussian.full_covariance(cov) if isinstance(cov, gaussian.ActiveGaussian) else cov


def derived_guide(model, *args, **kwargs) -> ClosedFormGuide:
    """The closed-form guide of ``model(*args, **kwargs)`` derived from its trace (see the module
    docstring). Raises :class:`NotConjugateError` naming the first site outside the vocabulary.

    The guide is reused (and its sweep compiled once) for every call with the same structure (the
    same sites, shapes and dependencies, and the same numbers read from outside the arguments: a
    prior parameter taken from a global that has changed gives a new guide,
    :func:`ppl_sbl.derived.structure.fingerprint`); its ``prepare`` reads the numbers of new
    arguments."""
    structure, data, mark = analyse(model, args, kwargs)
    key = (model, structure, mark)
    if key not in _GUIDES:
        last = {}
        _GUIDES[key] = (_build(model, structure, last, mark), last)
    guide, last = _GUIDES[key]
    last["analysed"] = (args, kwargs, data)  # ``prepare`` on the same arguments reuses this analysis
    return guide


def _same(a, b):
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _build(model, st: Structure, last: dict, mark=None) -> ClosedFormGuide:
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
        m, q = state.mean[f], state.cov[f]
        factored = isinstance(q, gaussian.ActiveGaussian) and q.base.shape[0] > 0
        if f in lowrank and not factored:  # a fast fit's restricted family on a low-rank design
            full, F = covariance(state, f), data.terms[factor_term[f]].F[f]
            return jnp.diag(full) + m ** 2, jnp.sum(F * (full @ F)) + jnp.sum((F.T @ m) ** 2)
        if f not in lowrank:
            return covariance(state, f) + jnp.outer(m, m)
        F = data.terms[factor_term[f]].F[f]
        # tr(F^T Sigma F) as kept by the update (``factor_var``: no cancellation where the data
        # dominate the prior)
        return (gaussian.covariance_diagonal(q) + m ** 2, jnp.sum(q.factor_var) + jnp.sum((F.T @ m) ** 2))

    def gamma_moments(state):
        g_shape, g_rate = stack_sites(state.shape, gamma), stack_sites(state.rate, gamma)
        return g_shape / g_rate, digamma(g_shape) - jnp.log(g_rate)

    def moments(state, data):
        means = {f: state.mean[f] for f in gauss}
        second = {f: second_moment(state, data, f) for f in gauss}
        return (means, second, *gamma_moments(state))

    grad_gauss = jax.grad(expected_log_joint, argnums=(1, 2))
    grad_gamma = jax.grad(expected_log_joint, argnums=(3, 4))

    def prepare(*a, **kw):
        seen = last.get("analysed")
        if seen is not None and _same(seen[0], a) and seen[1].keys() == kw.keys() and _same(
                tuple(seen[1].values()), tuple(kw.values())):
            return seen[2]
        other, data, _ = analyse(model, a, kw)
        if other != st:
            raise ValueError("these arguments give the model another structure; call derived_guide(model, ...) "
                             "with them (CAVI does).")
        return data

    def init(data):
        cov = {f: (gaussian.init_active_gaussian(sizes[f], data.terms[factor_term[f]].F[f].shape[1],
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
        for a product of Gamma elements (the minimum-norm deviation from their prior log-means, so
        that a data scale held in one element's prior stays with it), evenly for a sum. Every other Gamma
        element stays at its prior."""
        g_mean, _ = gamma_moments(state)
        log_mean, changed = jnp.log(g_mean), jnp.zeros(total, dtype=bool)
        prior_log = log_mean  # every element at its prior mean

        def counts(index):  # how many rows of an index list (rows, k) hold each Gamma element
            return jnp.zeros(total + 1).at[jnp.asarray(index).reshape(-1)].add(1.0)[:total]

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
            # where every other term reads f's moments row by row (no Gram matrix), the diagonal
            # of E[ff^T] carries them exactly at the start's diagonal covariance, and the gradient
            # in it is the diagonal h wanted, without the M x M gradient (an O(N M^2) product)
            diagonal = f not in lowrank and all(f not in t.G and f not in t.F for t in others.terms.values())
            if diagonal:
                second = {**second, f: (jnp.diag(second[f]), jnp.zeros(()))}
            _, d_second = grad_gauss(others, means, second, g_now, log_mean, (state.xi, state.log_eta))
            if f in lowrank:
                F = data.terms[factor_term[f]].F[f]
                h = -2.0 * d_second[f][0] - 2.0 * d_second[f][1] * jnp.sum(F ** 2, 1)
            elif diagonal:
                h = -2.0 * d_second[f][0]
            else:
                h = -2.0 * jnp.diag(d_second[f])
            log_target = jnp.log(gaussian.start_prior_precision(h, n_obs))
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
            else:  # a product: the minimum-norm least-squares solution about the prior log-means
                design = jnp.sum(jax.nn.one_hot(own.A, total + 1, dtype=jnp.float64), axis=1)[:, :total]
                prior_pad = jnp.concatenate([prior_log, jnp.zeros(1)])
                u = jnp.linalg.pinv(design) @ (y - jnp.sum(prior_pad[own.A], axis=1)) + prior_log
            log_mean = jnp.where(mask, u, log_mean)
            changed = changed | mask
        shape = stack_sites(state.shape, gamma)
        rate = jnp.where(changed, shape / jnp.exp(log_mean), stack_sites(state.rate, gamma))
        return state._replace(rate=unstack_sites(rate, gamma, sizes))

    def update(state, data):
        for f in gauss:  # Gaussian factors first, in the model's order
            means, second, g_mean, g_log = moments(state, data)
            d_mean, d_second = grad_gauss(data, means, second, g_mean, g_log, (state.xi, state.log_eta))
            if f in lowrank:  # Sigma^-1 = diag(d) + c F F^T: Woodbury, in factored form
                d_diag, d_quad = d_second[f]
                F = data.terms[factor_term[f]].F[f]
                q = gaussian.update_active_gaussian(state.cov[f], -2.0 * d_diag, None, d_mean[f],
                                                  jnp.zeros(sizes[f]), data_factor=F * jnp.sqrt(-2.0 * d_quad))
                q = gaussian.factor_variance(q, -2.0 * d_quad)
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
            state = state._replace(xi={n: jnp.sqrt(linear_moments(t, means, second)[1]) for n, t in data.jj.items()})
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
        return expected_log_joint(data, *moments(state, data), (state.xi, state.log_eta)) + entropy(state)

    def elbo_exact(state, data):
        exact = (stack_sites(state.shape, gamma), stack_sites(state.rate, gamma))
        return expected_log_joint(data, *moments(state, data), (state.xi, state.log_eta), exact=exact) + entropy(state)

    def elbo_parts(state, data):
        """The ELBO of q as named terms (:meth:`ppl_sbl.result.FitResult.elbo_parts`), each an exact
        expectation (the Jaakkola-Jordan and log-sum bounds replaced by their values under q, by
        quadrature, as in ``elbo_exact``): ``log_lik``, the expected log densities of the observed
        sites, summed; for each latent site, in the model's order, ``-kl_<site>`` = E_q[s ln p(site
        | parents)] + H[q(site)], and for a Gamma site (its prior's shape a0 and rate b0 are
        constants) ``log_norm_<site>`` = sum E[s] (a0 ln b0 - ln Gamma(a0)), its prior's log
        normalising constant, which ``-kl_<site>`` then leaves out. s is the site's log-density
        scale (``numpyro.handlers.scale`` by a constant or a Gamma element; 1 without one), kept
        inside the site's terms (``log_norm_<site>`` then depends on q only where s is a Gamma
        element). They sum to ``elbo_exact`` where the model uses a bound, else to ``elbo``."""
        exact = (stack_sites(state.shape, gamma), stack_sites(state.rate, gamma))
        means, second, g_mean, g_log = moments(state, data)
        logs = expected_log_terms(data, means, second, g_mean, g_log, (state.xi, state.log_eta), exact=exact)
        norms = prior_log_normalisers(data, g_mean)
        log_lik = 0.0
        for name, value in logs.items():
            if name not in sizes:  # an observed site
                log_lik = log_lik + value
        parts = {"log_lik": jnp.asarray(log_lik)}
        for name in st.latent_order:
            if name in gauss:
                parts[f"-kl_{name}"] = logs[name] + expfam.gaussian_entropy(state.logdet[name], sizes[name])
                continue
            entropy_ = jnp.sum(expfam.gamma_entropy(state.shape[name], state.rate[name]))
            parts[f"-kl_{name}"] = logs[name] - norms[name] + entropy_
            parts[f"log_norm_{name}"] = norms[name]
        return parts

    def guide_fn(state):
        def guide(*a, **kw):
            for name in st.latent_order:
                shape = shapes[name]
                if name in gauss:
                    if len(shape) == 0:
                        numpyro.sample(name, dist.Normal(state.mean[name][0], jnp.sqrt(covariance(state, name)[0, 0])))
                    elif len(shape) == 1 and event_dim[name] == 1:
                        numpyro.sample(name, dist.MultivariateNormal(state.mean[name], covariance(state, name),
                                                                     validate_args=False))
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

        def program(q, a, kw):
            tr = trace_model(model, a, kw)  # at the safe values: the sites' shapes and priors
            if name not in tr:
                raise ValueError(f"the model called with these arguments has no site '{name}'.")
            values = {}
            for n in gamma:  # E[g] from q where the shapes agree, else the prior mean
                if tuple(jnp.shape(tr[n]["value"])) == shapes[n]:
                    values[n] = (q.shape[n] / q.rate[n]).reshape(shapes[n])
                else:
                    fn = base_function(tr[n]["fn"])
                    values[n] = jnp.broadcast_to(fn.concentration / fn.rate, jnp.shape(tr[n]["value"]))

            def linear(zvec):
                z = unstack_sites(zvec, gauss, sizes)
                st_ = trace_model(model, a, kw, {**values, **{f: z[f].reshape(shapes[f]) for f in gauss}})[name]
                fn = base_function(st_["fn"])
                size = int(np.prod(jnp.shape(st_["value"]), dtype=int))
                scale = flat(fn.scale, size) if isinstance(fn, dist.Normal) else None
                return flat(fn.loc if isinstance(fn, dist.Normal) else fn.logits, size), scale
            zvec = stack_sites(q.mean, gauss)
            (mean, scale), J = linear(zvec), jacobian(lambda zv: linear(zv)[0], zvec)[1]
            blocks = np.cumsum([sizes[f] for f in gauss])[:-1]
            var = sum(jnp.sum((b @ covariance(q, f)) * b, 1) for f, b in zip(gauss, jnp.split(J, blocks, axis=1)))
            if scale is not None:
                return mean, var + scale ** 2
            return expected_sigmoid(mean, var)

        for numbers in (True, False):  # the state and the new arguments are inputs of the program
            try:
                compiled = with_array_inputs(new_args, new_kwargs, key=("predict", model, st, mark), numbers=numbers)
                return compiled[0](program)(state)
            except Exception:  # does not trace with the numbers as inputs: as constants, else op by op
                continue
        return program(state, new_args, new_kwargs)

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
        prior = jnp.exp(own.c + monosum(own.A, jnp.log(g_mean))) if own is not None else jnp.zeros(sizes[f])
        return prior, total - prior

    def coefficients(state, data):
        """The first Gaussian factor for the relevance rule (``ClosedFormGuide.coefficients``): q as
        an ActiveGaussian (a dense covariance as one with every coefficient active), E[tau] of its
        own prior site, and where that precision is one Gamma element per coefficient, the
        element as each coefficient's group (coefficients sharing an element are judged as a
        group; a constant precision is a group of its own)."""
        f = gauss[0]
        mean, cov = state.mean[f], state.cov[f]
        if isinstance(cov, gaussian.ActiveGaussian):
            q = cov._replace(mean=mean)
        else:
            n = sizes[f]
            q = gaussian.ActiveGaussian(mean=mean, cov=cov, base=jnp.zeros(0, cov.dtype),
                                        index=jnp.arange(n, dtype=jnp.int32), frozen_var=jnp.zeros(n, cov.dtype),
                                        log_det=state.logdet[f], factor_var=jnp.zeros(0, cov.dtype))
        own = data.terms.get(f)
        if own is None:
            return q, jnp.zeros(sizes[f]), None
        prior = jnp.exp(own.c + monosum(own.A, jnp.log(gamma_moments(state)[0])))
        if own.A.shape[1] != 1:
            return q, prior, None
        element = own.A[:, 0]
        return q, prior, jnp.where(element < total, element, total + jnp.arange(element.shape[0]))

    programs = {}  # the fast schedule's compiled row functions

    def start_gammas(data):
        """The Gamma factors of ``init``'s state, all the fast schedule reads of it (the Gaussian
        factors' start is left out of the program)."""
        state = init(data)
        return state._replace(mean={}, cov={}, xi={}, logdet={}, log_eta={})

    compiled_start = jax.jit(start_gammas, compiler_options=QUICK)

    def fast_plan(*a, tol, max_passes, progress=None, vague_only=False, compiled=False, **kw):
        """The fast schedule where the model's Gaussian vector has an ARD prior
        (:mod:`ppl_sbl.derived.fast`), set up: a :class:`ppl_sbl.fast_ard.Plan` whose fit
        finishes as (data, state, fit)."""
        data = prepare(*a, **kw)
        layout = ard_layout(st, data, gamma_offsets(st))
        if isinstance(layout, str):  # before the start is compiled: the sweep runs instead
            raise NotApplicable(layout)
        start_state = jax.tree.map(np.asarray, compiled_start(data))
        plan = plan_fast(st, data, start_state, programs, tol=tol, max_passes=max_passes, progress=progress,
                         vague_only=vague_only, compiled=compiled)
        return plan._replace(finish=lambda fit: (data,) + plan.finish(fit))

    has_jj, has_sum = bool(st.bernoulli), bool(st.sums)
    bound = "+".join(b for b, on in (("jaakkola-jordan", has_jj), ("log-sum", has_sum)) if on) or "none"
    return ClosedFormGuide(prepare=prepare, init=jax.jit(init), update=update, elbo=elbo, guide=guide_fn, predict=predict,
                           relevance=relevance, coefficients=coefficients, elbo_exact=elbo_exact if (has_jj or has_sum) else None,
                           elbo_parts=elbo_parts, fast=Planned(fast_plan), fast_plan=fast_plan,
                           bound=bound, observed=st.observed)
