"""The fast variational schedule (:mod:`ppl_sbl.fast_ard`) for derived guides.

Where a model's one Gaussian vector w has an ARD prior (w_k ~ N(0, 1 / (e^{c_k} alpha_k)), one
Gamma element alpha_k per coefficient with a constant prior, read nowhere else; or one element
shared by each group of coefficients, group ARD: :mod:`ppl_sbl.fast_ard.groups`), every likelihood
term of the derived vocabulary is, with the other factors held, a quadratic form in w: a term
reads w through v = a + B w, and its expected log density is linear in E[v] and E[v^2]
(Normal terms with Gamma-product precisions and Gamma-valued scales, Bernoulli terms under the
Jaakkola-Jordan bound). With eta = B w stacked over the terms' rows (the schedule's design
Phi = B), the likelihood's part of the ELBO is

    L(m, e) = sum_n ( r_n m_n - 1/2 W_n e_n ) + const,   m_n = E[eta_n], e_n = E[eta_n^2],

so W = -2 dL/de and r = dL/dm, taken by autodiff of the expected log densities written over the
rows' moments (:class:`RowFactor`). The other factors update as the derived sweep updates them,
from the same gradient with respect to their mean parameters: each other Gamma site in the model's
order, ``Gamma(1 + dL/dE[ln g], -dL/dE[g])``, then the Jaakkola-Jordan xi^2 = E[v^2]. Gamma sites
with one element per observation (per-point precisions or weights) are held at their start until
the schedule has converged once, as the robust RVM's factors hold q(omega)
(:class:`ppl_sbl.fast_ard.RobustGaussianNoise`). With ``compiled=True`` the schedule runs as one
compiled program (:class:`ppl_sbl.fast_ard.compiled_factors.Rows`: the row program inside it), one
precision per coefficient. The fit's state is the derived guide's: q(w)
an :class:`ppl_sbl.gaussian.ActiveGaussian` of the restricted family, q(alpha) and the other
factors as Gamma shapes and rates.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import digamma

from .. import expfam
from ..bounds import jj_log_sigmoid_bound
from ..fast_ard import NotApplicable, Plan
from ..fast_ard.groups import group_schedule
from ..fast_ard.results import active_gaussian
from ..priors import is_vague
from .objective import expected_log_terms
from .structure import QUICK, DerivedData, DerivedState, monosum, rows_alike, stack_sites, unstack_sites

__all__ = ["gamma_offsets", "ard_layout", "RowFactor", "row_factor", "plan_fast"]


class Layout:
    """Where the ARD prior and the likelihood's rows sit in a derived structure: the Gaussian site
    ``f``, its precision site ``alpha``, for each coefficient k the stacked Gamma index of its
    alpha element and the constant c_k, the likelihood terms (Normal, then Bernoulli), and
    ``groups`` (each coefficient's element of ``alpha``) where elements are shared, else None."""

    def __init__(self, f, alpha, element, c, normal, bernoulli, groups=None):
        self.f, self.alpha, self.element, self.c = f, alpha, element, c
        self.normal, self.bernoulli, self.groups = normal, bernoulli, groups


def gamma_offsets(st):
    """{Gamma site: the index of its first element in the stacked Gamma vector}."""
    sizes, offsets, total = dict(st.sizes), {}, 0
    for n in st.gamma:
        offsets[n] = total
        total += sizes[n]
    return offsets


def ard_layout(st, data, offsets):
    """The :class:`Layout` of a derived structure whose one Gaussian site has an ARD prior (one Gamma
    element per coefficient) or a grouped one (one Gamma element shared by each group of
    coefficients, every element used), or the reason (text) why the fast schedule does not apply."""
    if len(st.gauss) != 1:
        return "the fast schedule needs one Gaussian vector; the model has " + ", ".join(st.gauss)
    if st.sums:
        return "a precision that is a sum of Gamma elements (log-sum bound) has no fast schedule"
    f = st.gauss[0]
    own = data.terms.get(f)
    if own is None or f not in own.B or own.A.shape[1] != 1:
        return f"site '{f}' needs a prior N(0, 1 / (c alpha_k)) with one Gamma element alpha_k per coefficient or group"
    index = np.asarray(own.A[:, 0])
    sizes = dict(st.sizes)
    total = sum(sizes[n] for n in st.gamma)
    owners = [n for n in st.gamma if offsets[n] <= index.min() and index.max() < offsets[n] + sizes[n]]
    if not owners or index.max() >= total:
        return f"the precisions of '{f}' are not elements of one Gamma site"
    alpha = owners[0]
    used = np.bincount(index - offsets[alpha], minlength=sizes[alpha])
    if np.any(used == 0):
        return f"some elements of the precision site '{alpha}' are not the precision of any element of '{f}'"
    touching = [site for site, gammas in st.touches if alpha in gammas and site not in (f, alpha)]
    if touching:
        return f"the precision site '{alpha}' of '{f}' also enters {touching}"
    b = np.asarray(own.B[f])
    if b.ndim != 1 or not np.all(np.abs(b) == 1.0) or not np.all(np.asarray(own.a) == 0.0):
        return f"the prior of '{f}' is not centred at zero"
    if np.any(np.asarray(own.As) < total) or np.any(np.asarray(own.cs) != 0.0):
        return f"the prior of '{f}' is scaled"
    shape = np.asarray(data.priors[alpha].shape)
    if not np.all(shape == shape.ravel()[0]):
        return f"the Gamma priors of '{alpha}' have different shapes"
    normal = tuple(n for n in data.terms if n != f)
    groups = None if np.all(used == 1) else index - offsets[alpha]
    return Layout(f, alpha, index, np.broadcast_to(np.asarray(own.c), index.shape), normal, tuple(data.jj), groups)


def _rows(data, layout, M):
    """The design B (rows of every likelihood term, stacked) and each term's slice of the rows."""
    blocks, slices, start = [], {}, 0
    for name in layout.normal + layout.bernoulli:
        t = data.terms[name] if name in data.terms else data.jj[name]
        n = int(np.shape(t.a)[0])
        b = t.B.get(layout.f)
        if b is None:
            block = np.zeros((n, M))
        else:
            b = np.asarray(b)
            block = np.diag(b) if b.ndim == 1 else b
        blocks.append(block)
        slices[name] = slice(start, start + n)
        start += n
    return np.ascontiguousarray(np.concatenate(blocks, axis=0)), slices


def _offset_moments(t, m, e):
    """E[v], E[v^2] of v = a + eta for a term's rows, from m = E[eta], e = E[eta^2]."""
    return t.a + m, e + 2.0 * t.a * m + t.a ** 2


def _row_terms(data, layout, slices, m, e, g_mean, g_log, xi):
    """The likelihood terms' expected log densities as a function of the rows' m = E[eta],
    e = E[eta^2] (eta = B w) and the Gamma moments: Normal terms as in
    :func:`ppl_sbl.derived.objective.expected_log_terms`, Bernoulli terms under the
    Jaakkola-Jordan bound (grid RVM paper eq. (27))."""
    log_g_mean = jnp.log(g_mean)
    total = 0.0
    for name in layout.normal:
        t = data.terms[name]
        _, second = _offset_moments(t, m[slices[name]], e[slices[name]])
        e_tau = jnp.exp(t.c + monosum(t.A, log_g_mean))
        e_log_tau = t.c + monosum(t.A, g_log)
        e_scale = jnp.exp(t.cs + monosum(t.As, log_g_mean))
        total = total + jnp.sum(e_scale * expfam.normal_expected_log_density(second, e_tau, e_log_tau))
    for name in layout.bernoulli:
        t = data.jj[name]
        mean, second = _offset_moments(t, m[slices[name]], e[slices[name]])
        e_scale = jnp.exp(t.cs + monosum(t.As, log_g_mean))
        total = total + jnp.sum(e_scale * jj_log_sigmoid_bound(t.s * mean, second, xi[name]))
    return total


def _other_priors(data, layout, g_mean, g_log):
    """E[s ln p(g)] of every Gamma site but the ARD precisions, their priors' constants included
    (:func:`ppl_sbl.derived.objective.expected_log_terms` on those sites alone)."""
    priors = {name: p for name, p in data.priors.items() if name != layout.alpha}
    terms = expected_log_terms(DerivedData({}, {}, priors, {}, {}), {}, {}, g_mean, g_log, ({}, {}))
    return sum(terms.values(), 0.0)


def _uniform(data, layout):
    """Whether W = -2 dL/dE[eta^2] is the same for every row whatever q is: one Normal term whose
    rows are alike (:func:`ppl_sbl.derived.structure.rows_alike`) and no Bernoulli term."""
    if layout.bernoulli or len(layout.normal) != 1:
        return False
    t = data.terms[layout.normal[0]]
    return rows_alike(t.c, t.A, t.cs, t.As)


class RowFactor:
    """The likelihood's factors of a derived guide as the fast schedule's factor (see the module
    docstring): ``weights()`` -> (W, r), ``update(moments)``, ``elbo_terms(moments)``,
    ``release()``. Holds the stacked Gamma shapes and rates (the ARD elements' entries unused) and
    the Jaakkola-Jordan xi of every Bernoulli term. ``uniform`` where W is the same for every row
    whatever q is (:func:`_uniform`): the schedule then keeps the design's projections, as for the
    shipped Gaussian noise."""

    def __init__(self, st, data, layout, slices, g_shape, g_rate, programs):
        # what the row program reads: the terms without their design blocks (B, Gram matrices,
        # low-rank factors), so that a call passes no N x M arrays
        self.data = data._replace(
            terms={n: t._replace(B={}, G={}, F={}, BTa={}) for n, t in data.terms.items()},
            jj={n: t._replace(B={}) for n, t in data.jj.items()})
        self.layout = layout
        self.uniform = _uniform(data, layout)
        self.g_shape, self.g_rate = np.array(g_shape, dtype=float), np.array(g_rate, dtype=float)
        self.xi = {name: np.zeros(np.shape(data.jj[name].s)) for name in layout.bernoulli}
        self.rows, self.row_function = programs["rows"], programs["row_function"]
        self._weights = None
        # with Bernoulli terms, xi and the other factors' rates converge linearly over the passes,
        # as the shipped JJ factors' do (:class:`ppl_sbl.fast_ard.passes.Extrapolation`)
        self.extrapolates = bool(layout.bernoulli)
        sizes = dict(st.sizes)
        n_obs = sum(int(np.size(v)) for v in data.observed.values())
        self.others = [n for n in st.gamma if n != layout.alpha]
        self.held = {n for n in self.others if sizes[n] == n_obs and n_obs > 1}
        offsets = gamma_offsets(st)
        self.block = {n: slice(offsets[n], offsets[n] + sizes[n]) for n in st.gamma}
        # the other factors start at the derived start's means, with the shapes their updates give
        # (for a precision the shape 1 + dL/dE[ln g] does not depend on q(w))
        self.zero = np.zeros(max(s.stop for s in slices.values()))
        g_mean, _ = self._moments()
        d_log = self._evaluate(self.zero, self.zero)["d_log"]
        for n in self.others:
            if n not in self.held:
                sl = self.block[n]
                self.g_shape[sl] = 1.0 + d_log[sl]
                self.g_rate[sl] = self.g_shape[sl] / g_mean[sl]

    def compiled_form(self):
        """The compiled schedule's kind of this factor (:class:`ppl_sbl.fast_ard.compiled_factors.Rows`)."""
        from ..fast_ard.compiled_factors import Rows

        return Rows(program=self.row_function, uniform=self.uniform, rows=int(self.zero.shape[0]),
                    others=tuple((self.block[n].start, self.block[n].stop, n in self.held) for n in self.others),
                    bernoulli=tuple((n, tuple(np.shape(self.xi[n]))) for n in self.layout.bernoulli))

    def set_factors(self, g_shape, g_rate, held, xi):
        """The Gamma factors a compiled fit ended with (shapes, rates of the stacked vector),
        whether the per-observation ones are still held, and the Bernoulli terms' xi."""
        self.g_shape, self.g_rate = np.array(g_shape, dtype=float), np.array(g_rate, dtype=float)
        self.xi = {name: np.array(value, dtype=float) for name, value in xi.items()}
        if not held:
            self.held = set()
        self._weights = None

    def release(self):
        """Let the per-observation Gamma factors update from now on; True if any was held."""
        held, self.held = bool(self.held), set()
        return held

    def _moments(self):
        return self.g_shape / self.g_rate, digamma(self.g_shape) - np.log(self.g_rate)

    def _updated(self):
        return [n for n in self.others if n not in self.held]

    def parameters(self):
        """xi of every Bernoulli term, then the rates of the other Gamma factors that update, as
        one vector (in the order of the shipped JJ factors': xi, then the weights' rates)."""
        return np.concatenate([self.xi[n] for n in self.layout.bernoulli]
                              + [self.g_rate[self.block[n]] for n in self._updated()])

    def set_parameters(self, value):
        start = 0
        for n in self.layout.bernoulli:
            size = self.xi[n].size
            self.xi[n] = np.maximum(value[start:start + size], 0.0).reshape(self.xi[n].shape)
            start += size
        for n in self._updated():
            sl = self.block[n]
            size = sl.stop - sl.start
            self.g_rate[sl] = np.maximum(value[start:start + size], np.finfo(float).tiny)  # a rate is positive
            start += size
        self._weights = None

    def _evaluate(self, m, e):
        """The row program (:func:`row_programs`) at the rows' moments m, e and the current q of
        the other factors, its outputs on the host."""
        g_mean, g_log = self._moments()
        out = self.rows(self.data, m, e, g_mean, g_log, self.xi, self.g_shape, self.g_rate)
        return jax.tree.map(np.asarray, out)

    def weights(self):
        """(W, r): constants of the terms given the other factors' q (kept until they change)."""
        return self._at_zero()[:2]

    def _at_zero(self):
        """(W, r, value at m = e = 0) of the row program given the other factors' q, kept until
        they change."""
        if self._weights is None:
            out = self._evaluate(self.zero, self.zero)
            self._weights = out["W"], out["r"], float(out["value"])
        return self._weights

    def _second_moments(self, moments):
        """(m, e): the rows' E[eta] and E[eta^2]. With a uniform W the terms weigh every row's
        E[eta^2] alike, so each row gets the mean variance, sum_n Var[eta_n] / N (O(M + K^2),
        without the O(N M) per-row variances)."""
        m = np.asarray(moments.mean)
        var = moments.var_sum / m.shape[0] if self.uniform else np.asarray(moments.var)
        return m, var + m * m

    def update(self, moments):
        m, e = self._second_moments(moments)
        out = None
        for n in self.others:
            if n in self.held:
                continue
            # the conjugate-exponential fixed point: natural parameters = dL/d(E[ln g], E[g])
            # (ppl_sbl.derived, Hoffman & Johnson's Autoconj), the derived sweep's Gamma update
            out = self._evaluate(m, e)
            sl = self.block[n]
            self.g_shape[sl] = 1.0 + out["d_log"][sl]
            self.g_rate[sl] = -out["d_mean"][sl]
        if self.layout.bernoulli:  # xi_n^2 = E[v_n^2], grid RVM paper eq. (30), whatever the other factors
            self.xi = (self._evaluate(m, e) if out is None else out)["xi"]
        self._weights = None

    def elbo_terms(self, moments):
        """The terms are linear in the rows' moments: value(0, 0) + r^T m - W^T e / 2."""
        m, e = self._second_moments(moments)
        W, r, value = self._at_zero()
        return value + float(np.vdot(r, m)) - 0.5 * float(np.vdot(W, e))


def row_programs(layout, slices, blocks):
    """The compiled program of a :class:`RowFactor` (the data are its arguments), ``{"rows": f}``:
    ``f(data, m, e, g_mean, g_log, xi, g_shape, g_rate)`` -> ``value``, the likelihood terms and
    the other Gamma sites' expected log priors and entropies (their elements ``blocks``, (start,
    stop) per site); ``d_mean``, ``d_log``, its gradient in E[g] and E[ln g]; ``W``, ``r``, -2 and 1
    times its gradient in e and m (constants: the terms are linear in m and e); ``xi`` = sqrt(E[v^2])
    per Bernoulli term. One program for all, so the first call compiles once; ``{"row_function": f}``
    the same function not compiled (the compiled schedule's program calls it)."""

    def objective(data, m, e, g_mean, g_log, xi):
        return _row_terms(data, layout, slices, m, e, g_mean, g_log, xi) + _other_priors(data, layout, g_mean, g_log)

    def rows(data, m, e, g_mean, g_log, xi, g_shape, g_rate):
        # one reverse pass: the other Gamma sites' terms do not depend on m and e
        value, (d_m, d_e, d_mean, d_log) = jax.value_and_grad(objective, argnums=(1, 2, 3, 4))(
            data, m, e, g_mean, g_log, xi)
        for start, stop in blocks:
            value = value + jnp.sum(expfam.gamma_entropy(g_shape[start:stop], g_rate[start:stop]))
        out = {}
        for name in layout.bernoulli:
            _, second = _offset_moments(data.jj[name], m[slices[name]], e[slices[name]])
            out[name] = jnp.sqrt(second)
        return {"value": value, "d_mean": d_mean, "d_log": d_log, "W": -2.0 * d_e, "r": d_m, "xi": out}

    return {"rows": jax.jit(rows, compiler_options=QUICK), "row_function": rows}


def row_factor(st, data, layout, start_state, programs_cache):
    """(design B, :class:`RowFactor`) of a derived structure with the ARD ``layout``
    (:func:`ard_layout`), its Gamma factors at ``start_state``'s means (a derived guide's init);
    compiled programs are kept in ``programs_cache``."""
    Phi, slices = _rows(data, layout, dict(st.sizes)[layout.f])
    key = (st, tuple((n, s.start, s.stop) for n, s in slices.items()))
    if key not in programs_cache:
        offsets, sizes = gamma_offsets(st), dict(st.sizes)
        blocks = tuple((offsets[n], offsets[n] + sizes[n]) for n in st.gamma if n != layout.alpha)
        programs_cache[key] = row_programs(layout, slices, blocks)
    g_shape = np.asarray(stack_sites(start_state.shape, st.gamma))
    g_rate = np.asarray(stack_sites(start_state.rate, st.gamma))
    return Phi, RowFactor(st, data, layout, slices, g_shape, g_rate, programs_cache[key])


def plan_fast(st, data, start_state, programs_cache, *, tol, max_passes, progress, vague_only, compiled=False):
    """The fast schedule on a derived structure, set up: a :class:`ppl_sbl.fast_ard.Plan` whose
    ``finish(fit)`` returns (state, fit) with ``state`` a :class:`ppl_sbl.derived.DerivedState` of
    the restricted family. Raises :class:`ppl_sbl.fast_ard.NotApplicable` where the structure has
    no ARD vector (the reason in its message) or, with ``vague_only``, where the ARD prior is not
    vague."""
    sizes, offsets = dict(st.sizes), gamma_offsets(st)
    layout = ard_layout(st, data, offsets)
    if isinstance(layout, str):
        raise NotApplicable(layout)
    f, alpha = layout.f, layout.alpha
    prior = data.priors[alpha]
    a0 = float(np.asarray(prior.shape).ravel()[0])
    rate = np.asarray(prior.rate, dtype=float) * np.ones(sizes[alpha])
    b0 = rate[layout.element - offsets[alpha]] * np.exp(-layout.c)  # the prior of tau_k = e^{c_k} alpha_k
    if vague_only and not is_vague(a0):
        raise NotApplicable(f"the hyperprior shape a0={a0!r} of '{alpha}' is not vague: the sweep fits it.")
    Phi, factor = row_factor(st, data, layout, start_state, programs_cache)
    options = dict(a0=a0, b0=b0, tol=tol, max_passes=max_passes, progress=progress)
    if layout.groups is None:
        run, shape = None, a0 + 0.5
        options["compiled"] = compiled
    elif compiled:
        raise ValueError("`compiled=True` fits one precision per coefficient; this model's precisions are shared by "
                         "groups: use compiled=False.")
    else:
        def run(Phi, factor, **options):
            return group_schedule(Phi, factor, layout.groups, **options)

        shape = a0 + 0.5 * np.bincount(layout.groups)[layout.groups]

    def finish(fit):
        q = active_gaussian(fit)
        frozen = np.asarray(fit.frozen_var)
        log_det = float(q.log_det) + float(np.sum(np.log(frozen[frozen > 0])))
        alpha_rate = np.array(factor.g_rate)
        alpha_shape = np.array(factor.g_shape)
        alpha_shape[layout.element] = shape
        alpha_rate[layout.element] = shape / np.asarray(fit.x) * np.exp(layout.c)  # E[alpha] = E[tau_k] e^{-c_k}
        state = DerivedState(mean={f: q.mean}, cov={f: q},
                             **jax.device_put(dict(shape=unstack_sites(alpha_shape, st.gamma, sizes),
                                                   rate=unstack_sites(alpha_rate, st.gamma, sizes),
                                                   xi={n: np.asarray(v) for n, v in factor.xi.items()},
                                                   logdet={f: np.float64(log_det)})), log_eta={})
        return state, fit

    return Plan(Phi, factor, options, finish, run)
