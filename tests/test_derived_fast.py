"""The fast schedule for derived guides (:mod:`ppl_sbl.derived.fast`): its generic likelihood factor
against the shipped factors of :mod:`ppl_sbl.fast_ard`, derived fast fits against the shipped fast
fits, the restricted family's ELBO against the derived guide's own and NumPyro's Monte Carlo ELBO,
and fits of edited models (never a falling ELBO)."""
import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import ppl_sbl
from ppl_sbl import fast_ard
from ppl_sbl.derived import covariance, derived_guide
from ppl_sbl.derived.fast import ard_layout, gamma_offsets, row_factor
from ppl_sbl.derived.structure import analyse
from ppl_sbl.models import robust_rvm, rvm


def _problem(seed, N=40, M=12):
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(N, M)) * rng.uniform(0.3, 2.0, M)
    t = Phi @ (rng.normal(size=M) * (rng.random(M) < 0.4)) + 0.3 * rng.standard_t(4, N)
    return Phi, t, (t > np.median(t)).astype(float)


def _shipped_factor(model, data, t):
    priors = data.priors
    e0, f0 = (float(np.ravel(priors["gamma"].shape)[0]), float(np.ravel(priors["gamma"].rate)[0])) \
        if "gamma" in priors else (None, None)
    c, d = (float(np.ravel(priors["omega"].shape)[0]), float(np.ravel(priors["omega"].rate)[0])) \
        if "omega" in priors else (None, None)
    if model is rvm.regression:
        return fast_ard.GaussianNoise(t, e0, f0)
    if model is rvm.classification:
        return fast_ard.JaakkolaJordan(t)
    if model is robust_rvm.regression:
        return fast_ard.RobustGaussianNoise(t, c, d, e0, f0)
    return fast_ard.RobustJaakkolaJordan(t, c, d)


MODELS = [(rvm.regression, False), (rvm.classification, True), (robust_rvm.regression, False),
          (robust_rvm.classification, True)]


@pytest.mark.parametrize("model, binary", MODELS, ids=lambda v: getattr(v, "__module__", "").split(".")[-1] + "."
                         + getattr(v, "__name__", "") if callable(v) else "")
def test_the_generic_factor_is_the_shipped_factor(model, binary):
    """Same design (up to sign), same (W, r), the same updates and ELBO terms, to 1e-10."""
    Phi, t, labels = _problem(0)
    y = labels if binary else t
    st, data, _ = analyse(model, (Phi, y), {})
    layout = ard_layout(st, data, gamma_offsets(st))
    assert not isinstance(layout, str), layout
    start = derived_guide(model, Phi, y).init(data)
    B, mine = row_factor(st, data, layout, start, {})
    sign = np.sign(B[0, 0] / Phi[0, 0])
    np.testing.assert_allclose(B, sign * Phi, rtol=1e-15)
    shipped = _shipped_factor(model, data, y)
    rng = np.random.default_rng(1)
    for step in range(3):
        m = Phi @ rng.normal(size=Phi.shape[1]) * 0.3
        var = rng.uniform(0.01, 0.2, size=Phi.shape[0])
        ours = types.SimpleNamespace(mean=sign * m, var=var, var_sum=float(np.sum(var)))
        theirs = types.SimpleNamespace(mean=m, var=var, var_sum=float(np.sum(var)))
        if step == 1:
            held = model in (robust_rvm.regression, robust_rvm.classification)
            assert mine.release() == getattr(shipped, "release", lambda: False)() == held
        mine.update(ours)
        shipped.update(theirs)
        (W1, r1), (W2, r2) = mine.weights(), shipped.weights()
        np.testing.assert_allclose(W1, W2, rtol=1e-10)
        np.testing.assert_allclose(sign * r1, r2, rtol=1e-10, atol=1e-12 * np.max(np.abs(r2)))
        assert mine.elbo_terms(ours) == pytest.approx(shipped.elbo_terms(theirs), rel=1e-10)


@pytest.mark.parametrize("model, binary", MODELS, ids=["rvm.regression", "rvm.classification",
                                                       "robust.regression", "robust.classification"])
def test_derived_fast_fits_are_the_shipped_fast_fits(model, binary):
    Phi, t, labels = _problem(2, N=50, M=20)  # the shape of the edited models' fits below
    y = labels if binary else t
    shipped = ppl_sbl.CAVI(model).run(Phi, y)
    derived = ppl_sbl.CAVI(model, guide="derived").run(Phi, y)
    assert shipped.schedule == derived.schedule == "fast"
    assert derived.elbo == pytest.approx(shipped.elbo, rel=1e-8)
    np.testing.assert_array_equal(derived.relevant, shipped.relevant)
    # the restricted family's ELBO is the derived guide's ELBO of its state
    assert float(derived.guide_spec.elbo(derived.state, derived.data)) == pytest.approx(derived.elbo, rel=1e-10)
    new = Phi[:7] + 0.1
    ours, theirs = jax.tree.leaves(derived.predict(new)), jax.tree.leaves(shipped.predict(new))
    if model is robust_rvm.regression:  # the derived predictive variance holds omega at its prior mean
        ours, theirs = ours[:1], theirs[:1]
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-7)


class _Compiles:
    """The XLA programs compiled inside the block (backend compilations)."""

    def __enter__(self):
        self.durations = []
        jax.monitoring.register_event_duration_secs_listener(self._listen)
        return self

    def _listen(self, event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            self.durations.append(duration)

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self._listen)


def test_one_compiled_program_serves_every_design_of_a_shape():
    """The design is an input of a derived guide's compiled programs (analysis, start, row
    program, predictions), never a constant in them: a fit on a second design of the same shape
    compiles nothing, is the shipped guide's fit on that design, and predicts from it
    (Phi_new E[w], diag(Phi_new Sigma Phi_new^T) + 1 / E[gamma])."""
    (Phi1, t1, _), (Phi2, t2, _) = _problem(20, N=30, M=9), _problem(21, N=30, M=9)
    ppl_sbl.CAVI(rvm.regression, guide="derived").run(Phi1, t1).predict(Phi1[:5])
    shipped = ppl_sbl.CAVI(rvm.regression).run(Phi2, t2)
    with _Compiles() as compiles:
        derived = ppl_sbl.CAVI(rvm.regression, guide="derived").run(Phi2, t2)
        mean, var = derived.predict(Phi2[:5])
    assert compiles.durations == []
    assert derived.schedule == shipped.schedule == "fast"
    assert derived.elbo == pytest.approx(shipped.elbo, rel=1e-8)
    np.testing.assert_array_equal(derived.relevant, shipped.relevant)
    new, q = Phi2[:5], derived.state
    cov = np.asarray(covariance(q, "w"))
    np.testing.assert_allclose(mean, new @ np.asarray(q.mean["w"]), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(var, np.sum((new @ cov) * new, 1) + np.asarray(q.rate["gamma"] / q.shape["gamma"]),
                               rtol=1e-10)


def test_a_new_value_of_a_hyperparameter_compiles_nothing():
    """A number among the model's arguments (the prior rates b0 and f0) is an input of the derived
    guide's programs and of the results' programs (predictions, Monte Carlo ELBO, draws), not a
    constant in them: a fit at new values is the same guide, compiles nothing, and is the shipped
    guide's fit at those values (the numbers were read, not left at the first fit's); the reused
    programs give what programs made for the new values alone give."""
    Phi, t, _ = _problem(22, N=30, M=9)
    cavi = ppl_sbl.CAVI(rvm.regression, guide="derived")
    first = cavi.run(Phi, t, b0=1e-3, f0=1e-2)
    first.predict(Phi[:5])
    first.monte_carlo_elbo(num_particles=50)
    first.sample(0, 10)
    shipped = ppl_sbl.CAVI(rvm.regression).run(Phi, t, b0=0.5, f0=0.2)
    with _Compiles() as compiles:
        second = cavi.run(Phi, t, b0=0.5, f0=0.2)
        mean, _ = second.predict(Phi[:5])
        mc = second.monte_carlo_elbo(num_particles=50)
        draws = second.sample(0, 10)
    assert compiles.durations == []
    assert derived_guide(rvm.regression, Phi, t, b0=1e-3, f0=1e-2) is derived_guide(rvm.regression, Phi, t, b0=0.5,
                                                                                      f0=0.2)
    assert second.elbo == pytest.approx(shipped.elbo, rel=1e-8)
    assert abs(second.elbo - first.elbo) > 1.0
    np.testing.assert_array_equal(second.relevant, shipped.relevant)
    np.testing.assert_allclose(mean, Phi[:5] @ np.asarray(second.state.mean["w"]), rtol=1e-10, atol=1e-12)
    # the Monte Carlo ELBO of the reused program is that of a program made for these values alone
    second.guide_spec._compiled.clear()
    jax.clear_caches()
    np.testing.assert_allclose(mc, second.monte_carlo_elbo(num_particles=50), rtol=1e-12)
    for name, value in second.sample(0, 10).items():
        np.testing.assert_allclose(draws[name], value, rtol=1e-12, atol=1e-300)


def rvm_with_host_rate(Phi, t=None, *, b0=1e-6):
    """The RVM with the weights' prior rate taken through Python's ``math`` (a concrete number)."""
    N, M = Phi.shape
    rate = math.sqrt(b0) ** 2
    alpha = numpyro.sample("alpha", dist.Gamma(1e-6, rate).expand([M]).to_event(1))
    w = numpyro.sample("w", dist.Normal(0.0, jax.lax.rsqrt(alpha)).to_event(1))
    gamma = numpyro.sample("gamma", dist.Gamma(1e-6, 1e-6))
    numpyro.sample("t", dist.Normal(Phi @ w, jax.lax.rsqrt(gamma)), obs=t)


def rvm_with_rate(Phi, t=None, *, b0=1e-6):
    """:func:`rvm_with_host_rate` with the rate used as it is."""
    N, M = Phi.shape
    alpha = numpyro.sample("alpha", dist.Gamma(1e-6, b0).expand([M]).to_event(1))
    w = numpyro.sample("w", dist.Normal(0.0, jax.lax.rsqrt(alpha)).to_event(1))
    gamma = numpyro.sample("gamma", dist.Gamma(1e-6, 1e-6))
    numpyro.sample("t", dist.Normal(Phi @ w, jax.lax.rsqrt(gamma)), obs=t)


def test_a_model_that_needs_a_number_as_a_python_value_keeps_it_a_constant():
    """A model that takes a number into Python's ``math`` does not trace with it as an input: the
    number is a constant of its programs (one guide per value), and every value gives the fit of
    the same model written without ``math`` (fit, predictions, Monte Carlo ELBO)."""
    Phi, t, _ = _problem(23, N=30, M=9)
    for b0 in (1e-3, 0.5):
        host = ppl_sbl.CAVI(rvm_with_host_rate, tol=1e-10).run(Phi, t, b0=b0)
        plain = ppl_sbl.CAVI(rvm_with_rate, tol=1e-10).run(Phi, t, b0=b0)
        assert host.elbo == pytest.approx(plain.elbo, rel=1e-10), b0
        np.testing.assert_allclose(host.predict(Phi[:5])[0], plain.predict(Phi[:5])[0], rtol=1e-8, atol=1e-10)
        # the results' programs too (here with the number as a constant): the same Monte Carlo ELBO
        np.testing.assert_allclose(host.monte_carlo_elbo(num_particles=20), plain.monte_carlo_elbo(num_particles=20),
                                   rtol=1e-6)
    assert derived_guide(rvm_with_host_rate, Phi, t, b0=1e-3) is not derived_guide(rvm_with_host_rate, Phi, t, b0=0.5)
    assert derived_guide(rvm_with_rate, Phi, t, b0=1e-3) is derived_guide(rvm_with_rate, Phi, t, b0=0.5)


def student_t_rvm(Phi, t=None):
    """ARD weights, Gaussian noise with a Gamma precision per point (Student-t noise)."""
    N, M = Phi.shape
    alpha = numpyro.sample("alpha", dist.Gamma(1e-6, 1e-6).expand([M]).to_event(1))
    w = numpyro.sample("w", dist.Normal(0.0, jax.lax.rsqrt(alpha)).to_event(1))
    gamma = numpyro.sample("gamma", dist.Gamma(1e-6, 1e-6))
    with numpyro.plate("data", N):
        lam = numpyro.sample("lam", dist.Gamma(2.0, 2.0))
        numpyro.sample("t", dist.Normal(Phi @ w, jax.lax.rsqrt(gamma * lam)), obs=t)


def weighted_logit_rvm(Phi, t=None):
    """ARD weights, each point's Bernoulli log-likelihood scaled by a Gamma weight."""
    N, M = Phi.shape
    alpha = numpyro.sample("alpha", dist.Gamma(1e-6, 1e-6).expand([M]).to_event(1))
    w = numpyro.sample("w", dist.Normal(0.0, jax.lax.rsqrt(alpha)).to_event(1))
    with numpyro.plate("data", N):
        omega = numpyro.sample("omega", dist.Gamma(1.5, 1.5))
        with numpyro.handlers.scale(scale=omega):
            numpyro.sample("t", dist.Bernoulli(logits=Phi @ w), obs=t)


@pytest.mark.parametrize("seed", range(3))
def test_edited_models_fit_fast_and_the_elbo_never_falls(seed):
    Phi, t, labels = _problem(10 + seed, N=50, M=20)
    for model, y in ((student_t_rvm, t), (weighted_logit_rvm, labels)):
        res = ppl_sbl.CAVI(model).run(Phi, y)
        assert res.schedule == "fast" and res.converged
        trace = np.asarray(res.elbo_trace)
        assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:])), np.min(np.diff(trace))
        assert float(res.guide_spec.elbo(res.state, res.data)) == pytest.approx(res.elbo, rel=1e-10)
        assert 0 < int(np.sum(res.relevant)) < Phi.shape[1]


def test_a_derived_fast_fit_passes_check_guide():
    Phi, t, _ = _problem(5, N=50, M=20)  # the shape of test_edited_models_fit_fast_and_the_elbo_never_falls
    res = ppl_sbl.CAVI(student_t_rvm).run(Phi, t)
    assert res.schedule == "fast"
    check = res.check_guide(num_particles=4000)
    assert check.passed, check


def test_structures_without_ard_fall_back_to_the_sweep():
    rng = np.random.default_rng(3)
    Phi = rng.normal(size=(30, 6))
    t = Phi[:, 0] + 0.1 * rng.normal(size=30)

    def shared_with_noise(Phi, t=None):
        """One precision for the weights that also scales the noise (not ARD: it enters the likelihood)."""
        alpha = numpyro.sample("alpha", dist.Gamma(1e-6, 1e-6))
        w = numpyro.sample("w", dist.Normal(0.0, jnp.full(Phi.shape[1], 1.0) * jax.lax.rsqrt(alpha)).to_event(1))
        numpyro.sample("t", dist.Normal(Phi @ w, jax.lax.rsqrt(alpha)), obs=t)

    assert ppl_sbl.CAVI(shared_with_noise).run(Phi, t).schedule == "sweep"
    with pytest.raises(fast_ard.NotApplicable, match="also enters"):
        ppl_sbl.CAVI(shared_with_noise, schedule="fast").run(Phi, t)
    assert ppl_sbl.CAVI(rvm.regression, guide="derived").run(Phi, t, a0=1.0, b0=1.0).schedule == "sweep"


def group_ard_rvm(Phi, t=None):
    """One precision per pair of columns (group ARD), Gaussian noise."""
    N, M = Phi.shape
    groups = np.arange(M) // 2
    alpha = numpyro.sample("alpha", dist.Gamma(1e-6, 1e-6).expand([M // 2]).to_event(1))
    w = numpyro.sample("w", dist.Normal(0.0, jax.lax.rsqrt(alpha[groups])).to_event(1))
    gamma = numpyro.sample("gamma", dist.Gamma(1e-6, 1e-6))
    with numpyro.plate("data", N):
        numpyro.sample("t", dist.Normal(Phi @ w, jax.lax.rsqrt(gamma)), obs=t)


def test_derived_group_ard_is_the_shipped_group_fit():
    """The derived guide of a group-ARD program runs the group schedule on the generic factor and
    lands where rvm.regression(groups=) does on the shipped factor, with the same priors."""
    Phi, t, _ = _problem(4, N=50, M=20)
    derived = ppl_sbl.CAVI(group_ard_rvm).run(Phi, t)
    shipped = ppl_sbl.CAVI(rvm.regression).run(Phi, t, groups=np.arange(20) // 2, a0=1e-6, b0=1e-6, e0=1e-6,
                                                f0=1e-6)
    assert derived.schedule == shipped.schedule == "fast"
    assert derived.elbo == pytest.approx(shipped.elbo, rel=1e-8)
    np.testing.assert_array_equal(derived.relevant, shipped.relevant)
    assert float(derived.guide_spec.elbo(derived.state, derived.data)) == pytest.approx(derived.elbo, rel=1e-10)
    check = derived.check_guide(num_particles=4000)
    assert check.passed, check


@pytest.mark.parametrize("model, binary", [(rvm.regression, False), (student_t_rvm, False), (weighted_logit_rvm, True)],
                         ids=["rvm.regression", "student_t_rvm", "weighted_logit_rvm"])
def test_derived_fast_fit_compiled_is_the_host_fit(model, binary):
    """``CAVI(model, guide="derived", compiled=True)``: the derived factor (its (W, r), updates and
    terms from the row program) in the compiled schedule: the same moves and fit as the host loop;
    uniform W (the RVM), W by point with per-point precisions held until the first convergence
    (Student-t noise), and a Bernoulli term under the JJ bound with per-point weights, its xi and
    the weights' rates extrapolated over the passes."""
    Phi, t, labels = _problem(10, N=50, M=20)
    y = labels if binary else t
    host = ppl_sbl.CAVI(model, guide="derived", progress_bar=False).run(Phi, y)
    fast = ppl_sbl.CAVI(model, guide="derived", compiled=True, progress_bar=False).run(Phi, y)
    assert host.schedule == fast.schedule == "fast" and fast.converged and fast.num_moves == host.num_moves
    np.testing.assert_allclose(fast.elbo_trace, host.elbo_trace, rtol=1e-10)
    np.testing.assert_array_equal(fast.relevant, host.relevant)
    for site in host.state.rate:
        np.testing.assert_allclose(fast.state.rate[site], host.state.rate[site], rtol=1e-7)
        np.testing.assert_allclose(fast.state.shape[site], host.state.shape[site], rtol=1e-9)
    for name in host.state.xi:
        np.testing.assert_allclose(fast.state.xi[name], host.state.xi[name], rtol=1e-7)
    assert float(fast.guide_spec.elbo(fast.state, fast.data)) == pytest.approx(fast.elbo, rel=1e-10)
    np.testing.assert_allclose(np.asarray(fast.predict(Phi[:5])), np.asarray(host.predict(Phi[:5])), rtol=1e-7,
                               atol=1e-10)


def test_derived_group_ard_compiled_is_a_named_error():
    Phi, t, _ = _problem(4, N=50, M=20)
    with pytest.raises(ValueError, match="groups"):
        ppl_sbl.CAVI(group_ard_rvm, compiled=True, progress_bar=False).run(Phi, t)


def test_fit_grid_runs_a_derived_guide_in_one_compiled_program():
    """``fit_grid(model, designs, t, schedule="fast")`` for a model of the user's (its derived
    guide's plan, every design's fit in one compiled program): each fit the one
    ``CAVI(model, compiled=True)`` makes of its design."""
    Phi, t, _ = _problem(10, N=50, M=20)
    designs = [Phi, 0.5 * Phi, Phi[:, ::-1]]
    grid = ppl_sbl.fit_grid(student_t_rvm, designs, t, schedule="fast")
    for design, fit in zip(designs, grid.values()):
        one = ppl_sbl.CAVI(student_t_rvm, compiled=True, progress_bar=False).run(design, t)
        assert fit.schedule == "fast" and fit.converged and fit.num_moves == one.num_moves
        np.testing.assert_allclose(fit.elbo_trace, one.elbo_trace, rtol=1e-10)
        np.testing.assert_array_equal(fit.relevant, one.relevant)
        np.testing.assert_allclose(fit.state.rate["lam"], one.state.rate["lam"], rtol=1e-7)
