"""The model's trace read as a conjugate-exponential structure: which sites are Gaussian vectors,
which Gamma precisions, how each enters the likelihood terms (affine means, monomial precisions,
sums of Gammas, Gamma-valued scale weights), checked numerically on perturbed traces."""
from __future__ import annotations

import hashlib

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers

from .. import engine
from ..gaussian import design_low_rank_factor
from ..guide import ONCE
from .jacobian import Picks, canonical, jacobian, matvec, to_dense

SVI_HINT = ("fit this model with SVI instead (numpyro.infer.SVI with an AutoNormal guide and "
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
    of its ones, see :func:`monosum`), log-density scale exp(cs + As ln g). Where every row shares one
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


def base_function(fn):
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
    base = base_function(site["fn"])
    shape = site["fn"].shape(site["kwargs"].get("sample_shape", ()))
    if isinstance(base, dist.Gamma):
        return jnp.ones(shape)
    if isinstance(base, dist.Normal):
        return jnp.zeros(shape)
    return None


def trace_model(model, args, kwargs, values=None):
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
        base = base_function(s["fn"])
        observed = s["is_observed"]
        if not observed:
            if isinstance(base, dist.Normal):
                gauss.append(name)
            elif isinstance(base, dist.Gamma):
                gamma.append(name)
            else:
                raise NotConjugateError(
                    f"site '{name}': a latent {type(base).__name__} variable is not conjugate in derived CAVI "
                    f"(latent variables must be Normal or Gamma); {SVI_HINT}.")
        if isinstance(base, dist.Normal):
            normal_sites.append(name)
        elif isinstance(base, dist.Gamma):
            if observed:
                raise NotConjugateError(f"site '{name}': observed Gamma data are not in the derived-CAVI vocabulary; "
                                        f"{SVI_HINT}.")
            gamma_priors.append(name)
        elif isinstance(base, dist.BernoulliLogits):
            bern_sites.append(name)
        else:
            raise NotConjugateError(
                f"site '{name}': an observed {type(base).__name__} likelihood is not in the derived-CAVI vocabulary "
                f"(Normal with a mean affine in the Gaussian latents, or Bernoulli(logits=...) with affine logits); "
                f"{SVI_HINT}.")
    return gauss, gamma, normal_sites, bern_sites, gamma_priors


def flat(x, size):
    return jnp.broadcast_to(jnp.asarray(x, dtype=jnp.float64), size).reshape(-1)


class _Read(NamedTuple):
    """A function of the latent values read where the checks need it: at (z0, u0) (``base``), at
    (z1, u0) (``z1``) and at (z0, u1) (``u1``), z the stacked Gaussian elements and u the logarithms
    of the stacked Gamma elements, and its Jacobian at (z0, u0) in z or in u (``jac``)."""

    base: np.ndarray
    z1: np.ndarray
    u1: np.ndarray
    jac: np.ndarray = None


def _affine_check(name, what, f0, f1, J, x0, x1, tol=1e-8):
    """f affine in x: its Jacobian J at x0 predicts f(x1) = f1 from f(x0) = f0; returns (f(0), J)."""
    pred = f0 + matvec(J, x1 - x0)
    if not np.allclose(pred, f1, rtol=tol, atol=tol * (1 + float(np.max(np.abs(f1), initial=0.0)))):
        raise NotConjugateError(f"site '{name}': its {what}; {SVI_HINT}.")
    return f0 - matvec(J, x0), J


def _monomial(name, what, f: _Read, u0, u1):
    """f(u, z) = ln of a positive quantity (its Jacobian in u): checks it is c + A u (A in {0, 1}, no
    dependence on z); returns c and the index lists of A's ones (see :func:`monosum`), on the host."""
    c, A = _affine_check(name, f"{what} is not a product of Gamma variables", f.base, f.u1, f.jac, u0, u1)
    if not np.allclose(f.base, f.z1):
        raise NotConjugateError(f"site '{name}': its {what} depends on a Gaussian latent variable; {SVI_HINT}.")
    # np.isclose(A, 0) and np.isclose(A, 1) (its default tolerances), without its temporaries
    coef = canonical(A).coef if isinstance(A, Picks) else A
    ones = np.abs(coef - 1.0) <= 1e-8 + 1e-5
    if not np.all(ones | (np.abs(coef) <= 1e-8)):
        raise NotConjugateError(
            f"site '{name}': its {what} raises a Gamma variable to a power other than 1 (derived CAVI needs each "
            f"Gamma element at most once, to the first power); {SVI_HINT}.")
    return c, _index_lists(ones, A, len(u0))


def _index_lists(ones, J=None, total=None):
    """Row i of a 0/1 matrix (boolean ``ones``, n x U) as the list of its ones' columns in order,
    padded to the longest row with U (the index one past the last element, a factor 1). For a
    :class:`Picks` matrix J, ``ones`` marks the terms of ``canonical(J)`` that are ones, and U is
    ``total``."""
    if isinstance(J, Picks):
        idx = np.where(ones, canonical(J).idx, total)  # each row's columns sorted, the others after them
        idx = np.sort(idx, axis=1)
        k = int(ones.sum(1).max(initial=0))
        return idx[:, :k].astype(np.int32)
    rows, cols = np.nonzero(ones)  # row by row, each row's columns in order
    counts = np.bincount(rows, minlength=ones.shape[0])
    k = int(counts.max()) if rows.size else 0
    idx = np.full((ones.shape[0], k), ones.shape[1], dtype=np.int32)
    idx[rows, np.arange(rows.size) - np.repeat(np.cumsum(counts) - counts, counts)] = cols
    return idx


def _constant(size, total):
    """(c, index lists) of a log-density scale that is the constant 1 (a site outside
    ``numpyro.handlers.scale``): c = 0 and no Gamma element."""
    return np.zeros(size), np.full((size, 0), total, dtype=np.int32)


def _sum_of_gammas(log_f: _Read, u0, u1):
    """Index lists of a precision f(g) = exp(log_f(ln g)) that is a sum of two or more distinct Gamma
    elements (each with coefficient 1, no constant), or None if it is not one. Its Jacobian in g at
    g0 = exp(u0) is exp(log_f) dlog_f/du / g0 (chain rule)."""
    g0, g1 = np.exp(u0), np.exp(u1)
    f0, f1 = np.exp(log_f.base), np.exp(log_f.u1)
    if isinstance(log_f.jac, Picks):
        p = canonical(log_f.jac)
        J = Picks(p.idx, f0[:, None] * p.coef / np.append(g0, 1.0)[p.idx])
        coef = J.coef
    else:
        J = coef = f0[:, None] * log_f.jac / g0[None, :]
    if not (np.all(np.isclose(coef, 0.0) | np.isclose(coef, 1.0)) and np.allclose(f1, matvec(J, g1))
            and np.allclose(f0, matvec(J, g0))):
        return None
    ones = np.isclose(coef, 1.0)
    counts = ones.sum(1)
    if counts.min() < 2 or counts.max() != counts.min():
        return None
    return _index_lists(ones, J, len(u0))


def _blocks(J, gauss, sizes):
    """The Jacobian J of a site's mean or logits split by Gaussian site: {site: block}, a diagonal
    block (a Gaussian site's own prior) kept as its diagonal, a zero block left out."""
    ends = np.cumsum([sizes[g] for g in gauss])
    if not isinstance(J, Picks):
        B = dict(zip(gauss, np.split(J, ends[:-1], axis=1)))
        return {g: np.diag(b).copy() if is_diagonal(b) else b for g, b in B.items() if np.any(b != 0)}
    p = canonical(J)
    rows = p.idx.shape[0]
    B = {}
    for g, end in zip(gauss, ends):
        start = end - sizes[g]
        inside = (p.idx >= start) & (p.idx < end)
        if not inside.any():
            continue
        if rows == sizes[g] and inside.sum(1).max() == 1:
            col = np.where(inside, p.idx, -1).max(1)
            if np.array_equal(col, start + np.arange(rows)):
                B[g] = np.where(inside, p.coef, 0.0).sum(1)
                continue
        B[g] = to_dense(Picks(np.where(inside, p.idx - start, 0), np.where(inside, p.coef, 0.0)), sizes[g])
    return B


def monosum(idx, u):
    """sum_j u[idx[i, j]] per row (the log of a product of Gamma elements), with u padded by a 0."""
    return jnp.sum(jnp.append(u, 0.0)[idx], axis=-1)


def stack_sites(z, names):
    """The sites ``names`` of ``z`` ({site: flat array}) stacked in that order; host arrays stay on
    the host (no program compiled for them)."""
    parts = [z[n] for n in names]
    if all(isinstance(p, np.ndarray) for p in parts):
        return np.concatenate(parts + [np.zeros(0)])
    return jnp.concatenate(parts) if names else jnp.zeros(0)


def unstack_sites(zvec, names, sizes):
    out, start = {}, 0
    for n in names:
        out[n] = zvec[start:start + sizes[n]]
        start += sizes[n]
    return out


class Structure(NamedTuple):
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


_COMPILED = {}  # (key, static arguments, shapes and dtypes of the arrays) -> compiled program

QUICK = ONCE  # the analysis and the start run once per fit


def with_array_inputs(args, kwargs, key=None, numbers=True):
    """``(compile, abstract)`` for functions ``f(*xs, args, kwargs)``: ``compile(f)(*xs)`` runs ``f``
    compiled, the array leaves of (args, kwargs) and, with ``numbers``, its floating-point numbers
    entering as inputs of the program (not as constants in it; :func:`ppl_sbl.engine.array_inputs`);
    ``abstract(f)(*xs)`` traces it for shapes only. With a hashable ``key`` the compiled program is
    kept for every later call with the same key, static arguments and array shapes (``f`` must then
    be the same computation for all). The programs run once per call: they compile with
    :data:`QUICK`."""
    arrays, rebuild, static = engine.array_inputs(args, kwargs, numbers)
    kept = None if key is None or static is None else (
        key, static, tuple((np.shape(a), np.result_type(a).str) for a in arrays))

    def compile(f):
        compiled = _COMPILED.get(kept) if kept is not None else None
        if compiled is None:
            compiled = jax.jit(lambda xs, values: f(*xs, *rebuild(values)), compiler_options=QUICK)
            if kept is not None:
                _COMPILED[kept] = compiled
        return lambda *xs: compiled(xs, arrays)

    def abstract(f):
        return lambda *xs: jax.eval_shape(lambda values: f(*xs, *rebuild(values)), arrays)

    return compile, abstract


def rows_alike(c, A, cs, As):
    """Whether every row of a Normal term has the same precision exp(c + A ln g) and the same
    log-density scale exp(cs + As ln g), whatever the Gamma elements g are."""
    return all(np.ndim(x) == 0 or bool(np.all(np.asarray(x) == np.asarray(x)[:1])) for x in (c, A, cs, As))


def fingerprint(model, args, kwargs, capture=None, numbers=True):
    """What the model reads beyond its arguments: the text of its traced program at these argument
    shapes (the array arguments and, with ``numbers``, the floating-point numbers among them as
    inputs) and the constants in it, with every sample site's distribution parameters and scale as
    outputs. Numbers the model takes from Python globals or closures (a prior's shape, a scale)
    appear in it, so a changed number gives another fingerprint; a changed argument does not. None
    where the model does not trace with these inputs. A list ``capture`` receives the model's trace
    (abstract values: its sites' kinds and shapes)."""
    arrays, rebuild, static = engine.array_inputs(args, kwargs, numbers)

    def read(values):
        a, kw = rebuild(values)
        tr = trace_model(model, a, kw)
        if capture is not None:
            capture.append(tr)
        return [jnp.asarray(leaf) for name, site in _sites(tr)
                for leaf in jax.tree.leaves((site["fn"], site["scale"], site.get("mask")))]

    try:
        closed = jax.make_jaxpr(read)(arrays)
    except Exception:  # the model needs concrete values
        return None
    consts = tuple((np.shape(c), np.result_type(c).str, hashlib.sha1(np.ascontiguousarray(c)).hexdigest())
                   for c in closed.consts)
    return str(closed.jaxpr), consts, numbers


def analyse(model, args, kwargs):
    """(structure, data, fingerprint) of model(*args, **kwargs) from its trace; see the module
    docstring and :func:`fingerprint`.

    Every site is read at three points of the latent values, with its Jacobians, in one compiled
    program where the model traces under ``jax.jit`` (kept for later calls with the same argument
    shapes and fingerprint); a model that needs concrete values (NumPy calls on its arguments) is
    read op by op instead."""
    mark = None
    for numbers in (True, False):  # the numbers among the arguments as inputs, else as constants
        traced = []  # the fingerprint's trace serves the analysis's structure
        mark = fingerprint(model, args, kwargs, capture=traced, numbers=numbers)
        if mark is not None:
            try:
                compiled = with_array_inputs(args, kwargs, key=("analyse", model, mark), numbers=numbers)
                return (*_analyse(model, args, kwargs, *compiled, traced), mark)
            except Exception:  # the model does not trace with these inputs (it needs concrete values)
                pass
    eager = lambda f: lambda *xs: f(*xs, args, kwargs)  # noqa: E731
    return (*_analyse(model, args, kwargs, eager, eager), mark)


def _analyse(model, args, kwargs, compile, abstract, traced=None):
    first = list(traced or [])  # the trace at the safe values: site kinds, shapes and event dimensions
    if not first:  # (no numbers read)
        abstract(lambda a, kw: first.append(trace_model(model, a, kw)))()
    tr = first[0]
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
    site_names = [n for n, _ in _sites(tr)]
    site_sizes = {n: int(np.prod(jnp.shape(tr[n]["value"]), dtype=int)) for n in site_names}
    scaled = [n for n in site_names if tr[n]["scale"] is not None]  # the others' scale is the constant 1
    draw = np.random.default_rng(0)  # two generic points of the latent values
    z0 = {n: draw.standard_normal(sizes[n]) for n in gauss}
    z1 = {n: draw.standard_normal(sizes[n]) for n in gauss}
    u0, u1 = 0.3 * draw.standard_normal(total), 0.3 * draw.standard_normal(total)
    zv0, zv1 = (np.concatenate([z[n] for n in gauss] + [np.zeros(0)]) for z in (z0, z1))

    def read(zvec, u, a, kw):
        """Per site: the log of its log-density scale; a Gamma prior's shape and rate; r = x - mu
        (Normal) or the logits (Bernoulli); a Normal's log precision."""
        z = unstack_sites(zvec, gauss, sizes)
        values = {n: z[n].reshape(shapes[n]) for n in gauss}
        values.update({n: jnp.exp(u[offsets[n]:offsets[n] + sizes[n]]).reshape(shapes[n]) for n in gamma})
        trace = trace_model(model, a, kw, values)
        out = {"scale": {}, "prior": {}, "linear": {}, "precision": {}, "observed": {}}
        for name in site_names:
            st, size = trace[name], site_sizes[name]
            if st["is_observed"]:
                out["observed"][name] = st["value"]
            if name in scaled:
                out["scale"][name] = jnp.log(flat(st["scale"], size))
            fn = base_function(st["fn"])
            if name in gamma_priors:
                out["prior"][name] = (flat(fn.concentration, size), flat(fn.rate, size))
            elif isinstance(fn, dist.Normal):
                out["linear"][name] = flat(st["value"], size) - flat(fn.loc, size)
                out["precision"][name] = -2.0 * jnp.log(flat(fn.scale, size))
            else:
                out["linear"][name] = flat(fn.logits, size)
        return out

    def program(zv0, zv1, u0, u1, a, kw):
        # the three points in one batch: what depends on the data only is computed once
        points = jax.vmap(lambda zv, u: read(zv, u, a, kw))(jnp.stack([zv0, zv1, zv0]), jnp.stack([u0, u0, u1]))
        observed = read(zv0, u0, a, kw)["observed"]
        points = [{**jax.tree.map(lambda x: x[i], {k: v for k, v in points.items() if k != "observed"}),
                   **({"observed": observed} if i == 0 else {})} for i in range(3)]
        d_z = jacobian(lambda zv: read(zv, u0, a, kw)["linear"], zv0, structured=True)[1]
        d_u = jacobian(lambda u: {k: read(zv0, u, a, kw)[k] for k in ("scale", "precision")}, u0, structured=True)[1]
        return points, d_z, d_u

    points, d_z, d_u = jax.tree.map(np.asarray, compile(program)(zv0, zv1, u0, u1))
    base, at_z1, at_u1 = points
    d_u = {**d_u, "linear": d_z}

    def at(kind, name):
        return _Read(base[kind][name], at_z1[kind][name], at_u1[kind][name], d_u.get(kind, {}).get(name))

    terms, jj, priors, normal, sums = {}, {}, {}, [], {}
    for name in site_names:
        size = site_sizes[name]
        # the log-density scale: a constant or a monomial in the Gamma elements, not the Gaussians
        cs, As = (_monomial(name, "log-density scale (numpyro.handlers.scale)", at("scale", name), u0, u1)
                  if name in scaled else _constant(size, total))
        if name in gamma_priors:
            prior = at("prior", name)
            for other in (prior.u1, prior.z1):
                if not (np.allclose(prior.base[0], other[0]) and np.allclose(prior.base[1], other[1])):
                    raise NotConjugateError(
                        f"site '{name}': a Gamma prior whose shape or rate depends on other latent variables is not "
                        f"conjugate in derived CAVI (they must be constants); {SVI_HINT}.")
            sel = np.arange(offsets[name], offsets[name] + size, dtype=np.int32)
            priors[name] = _GammaPrior(prior.base[0], prior.base[1], cs, As, sel)
            continue
        linear = at("linear", name)
        what = "mean" if name in normal_sites else "logits"
        a, J = _affine_check(name, f"{what} is not affine in the Gaussian latent variables", linear.base, linear.z1,
                             linear.jac, zv0, zv1)
        if not np.allclose(linear.base, linear.u1):
            raise NotConjugateError(f"site '{name}': its {what} depends on a Gamma variable; {SVI_HINT}.")
        B = _blocks(J, gauss, sizes)
        if name in bern_sites:
            t = np.asarray(base["observed"][name], dtype=np.float64).reshape(-1)
            if not np.all((t == 0) | (t == 1)):
                raise ValueError(f"site '{name}': Bernoulli observations must be 0 or 1; got the values "
                                 f"{np.unique(t)[:5]}. Code the labels as 0/1.")
            jj[name] = _JJTerm(a, B, 2.0 * t - 1.0, cs, As)
            continue
        try:
            c, A = _monomial(name, "precision (1 / scale^2)", at("precision", name), u0, u1)
        except NotConjugateError as not_product:
            idx = _sum_of_gammas(at("precision", name), u0, u1)
            if idx is None:
                raise not_product
            sums[name] = _SumTerm(a, B, idx, cs, As)
            continue
        uniform = rows_alike(c, A, cs, As)
        G, aTa, BTa, F = {}, np.zeros(()), {}, {}
        if uniform:
            # one dense block: its Gram matrix's low-rank factor from the design's columns (O(N M r)),
            # the Gram matrix itself only where there is none
            factor = None
            if len(B) == 1:
                (g, b), = B.items()
                aTa, BTa = np.sum(a ** 2), {g: apply_matrix(b, a) if b.ndim == 1 else b.T @ a}
                factor = design_low_rank_factor(b) if b.ndim == 2 else None
            if factor is not None:
                F = {g: factor}
            else:
                G = {g: np.diag(b ** 2) if b.ndim == 1 else b.T @ b for g, b in B.items()}
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
    structure = Structure(
        gauss=tuple(gauss), gamma=tuple(gamma), sizes=tuple(sorted(sizes.items())),
        shapes=tuple(sorted(shapes.items())), event_dims=tuple((n, tr[n]["fn"].event_dim) for n in latent_order),
        latent_order=latent_order, normal=tuple(normal), bernoulli=tuple((n, tuple(jj[n].B)) for n in jj),
        sums=tuple((n, tuple(sums[n].B), tuple(sums[n].idx.shape)) for n in sums),
        priors=tuple(priors), observed=observed[0] if observed else "", touches=touches, lowrank=tuple(lowrank))
    # the numbers to the device as they are: no program compiled (jnp.asarray would compile one per
    # shape); the analysis itself works on the host
    return structure, jax.device_put(DerivedData(terms, jj, priors, sums, base["observed"]))




def is_diagonal(b):
    return b.shape[0] == b.shape[1] and np.count_nonzero(b - np.diag(np.diag(b))) == 0


def apply_matrix(b, x):
    """B x, for B stored dense (2-d) or as its diagonal (1-d)."""
    return b * x if b.ndim == 1 else b @ x
