"""The Bayesian GPLVMs against independent answers: direct Gaussian algebra for q(X) and its KL,
NumPyro's Monte Carlo ELBO of the uncollapsed model for the collapsed bound, finite differences
for the gradients, and the fixed-point equations (5.28) at an optimum."""
import functools
import math
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_sbl import linalg
from ppl_sbl import sparse_gp as sg
from ppl_sbl.models import gplvm
from ppl_sbl.models.gplvm import collapsed, natural, programs


def toy(n=24, p=5, seed=0):
    rng = np.random.default_rng(seed)
    t = rng.uniform(-2, 2, size=n)
    Y = np.stack([np.sin(t), np.cos(t), t, t**2 / 2, 0.1 * rng.normal(size=n)], 1)[:, :p]
    Y = Y + 0.05 * rng.normal(size=Y.shape)
    Z = np.stack([np.where(t > 0, 1.0, -1.0), np.where(t > 0, -1.0, 1.0)], 1)
    return Y, Z


def test_latent_posterior_equals_direct_gaussian_algebra():
    rng = np.random.default_rng(1)
    N, Q = 7, 3
    A = rng.normal(size=(N, N))
    K = A @ A.T / N + 0.1 * np.eye(N)
    mubar, log_lam = rng.normal(size=(N, Q)), rng.normal(size=(N, Q))
    mu, var, kl, cov = gplvm.latent_posterior(jnp.asarray(K), jnp.asarray(mubar), jnp.asarray(log_lam), full=True)
    total = 0.0
    for q in range(Q):
        lam = np.exp(log_lam[:, q]) + gplvm.LAMBDA_FLOOR / np.mean(np.diag(K))  # the floor of `precisions`
        S = np.linalg.inv(np.linalg.inv(K) + np.diag(lam))
        m = K @ mubar[:, q]
        np.testing.assert_allclose(np.asarray(cov[q]), S, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(np.asarray(var[:, q]), np.diag(S), rtol=1e-9)
        np.testing.assert_allclose(np.asarray(mu[:, q]), m, rtol=1e-12)
        # KL(N(m, S) || N(0, K)) by the textbook formula
        total += 0.5 * (np.trace(np.linalg.solve(K, S)) + m @ np.linalg.solve(K, m) - N
                        + np.linalg.slogdet(K)[1] - np.linalg.slogdet(S)[1])
    assert float(kl) == pytest.approx(total, rel=1e-10)


@pytest.fixture(scope="module")
def fitted():
    """The supervised model after 150 natural sweeps (its bound within 0.01 of where 400 leave it)
    and the unsupervised one after 400 L-BFGS steps (neither has converged there)."""
    Y, Z = toy()
    return {m: gplvm.fit(Y, Z, model=m, latent_dim=3, num_inducing=6, max_steps=steps, prior_kernel="rbf")
            for m, steps in (("supervised", 150), ("unsupervised", 400))}


@pytest.mark.parametrize("model", ["supervised", "unsupervised"])
def test_bound_equals_monte_carlo_uncollapsed_elbo(fitted, model):
    """NumPyro's Trace_ELBO of the augmented program (U, F | U, X sampled) and the guide with q(U)
    at its optimum estimates the uncollapsed ELBO; the collapsed bound must equal it."""
    res = fitted[model]
    check = res.check_guide(num_particles=3000, seed=1)
    assert check.passed, check.message
    assert check.standard_error < 0.05 * abs(res.elbo)  # the check has power
    # the bound's parts (E_q[ln p(Z | F)], -KL of q(X), -KL of q(U)) sum to the fit's bound
    parts = res.elbo_parts()
    assert list(parts) == ["log_lik", "-kl_X", "-kl_U"]
    assert math.fsum(parts.values()) == pytest.approx(res.elbo, rel=1e-10)


def test_bound_lies_below_monte_carlo_with_a_suboptimal_q_u(fitted):
    """A perturbed q(U) must lower the Monte Carlo ELBO below the collapsed bound (q(U) optimal)."""
    from ppl_sbl.diagnostics import monte_carlo_elbo

    res = fitted["supervised"]
    g = res.guide
    bad = jax.tree_util.Partial(gplvm.guide, q_mean=g.keywords["q_mean"], q_cov=g.keywords["q_cov"],
                                u_mean=g.keywords["u_mean"] + 0.3, u_cov=g.keywords["u_cov"])
    values = monte_carlo_elbo(res.program, bad, *res.args, num_particles=2000, seed=2, **res.kwargs)
    se = values.std() / math.sqrt(len(values))
    assert values.mean() + 4 * se < res.elbo


@pytest.mark.parametrize("model, prior_kernel", [(m, k) for m in ("supervised", "autoencoder")
                                                  for k in ("rbf", "linear", "matern32")]
                         + [("unsupervised", "rbf")])  # the unsupervised model has no latent prior kernel
def test_gradients_are_finite_and_match_finite_differences(model, prior_kernel):
    Y, Z = toy(12)
    rng = np.random.default_rng(3)
    N, Q, M = len(Y), 2, 4
    free = {"inducing": jnp.asarray(rng.normal(size=(M, Q))), "log_alpha": jnp.asarray(rng.normal(size=Q) * 0.3),
            "log_variance": jnp.asarray(0.1), "log_beta": jnp.asarray(1.5)}
    if model == "unsupervised":
        free.update(mean=jnp.asarray(rng.normal(size=(N, Q))), log_var=jnp.asarray(rng.normal(size=(N, Q)) * 0.3 - 1))
    else:
        free.update(mubar=jnp.asarray(rng.normal(size=(N, Q)) * 0.3), log_lam=jnp.asarray(rng.normal(size=(N, Q))),
                    log_prior={k: jnp.log(jnp.asarray(v)) for k, v in sg.default_params(prior_kernel, Y).items()})
    out = Y if model == "autoencoder" else Z

    def f(p):
        return gplvm.bound(p, {}, jnp.asarray(Y), jnp.asarray(out - out.mean(0)), model=model,
                           prior_kernel=prior_kernel)

    flat, unravel = jax.flatten_util.ravel_pytree(free)
    g = np.asarray(jax.flatten_util.ravel_pytree(jax.grad(f)(free))[0])
    assert np.all(np.isfinite(g))
    for _ in range(3):
        d = rng.normal(size=flat.shape)
        h = 1e-6
        fd = (f(unravel(flat + h * d)) - f(unravel(flat - h * d))) / (2 * h)
        assert float(fd) == pytest.approx(float(g @ d), rel=1e-5, abs=1e-5)


@pytest.fixture(scope="module")
def converged():
    """The supervised model on toy(16) (the shapes of test_natural_fit_never_decreases) fitted by
    natural sweeps until one full sweep raises the bound by at most 1e-14 of it."""
    Y, Z = toy(16)
    return gplvm.fit(Y, Z, model="supervised", latent_dim=3, num_inducing=5, max_steps=3000, tol=1e-14)


def test_fixed_point_equations_hold_at_the_optimum(converged):
    """(5.28): at a maximum, Lambda_q = -2 dF~/dS_q (diagonal, F~ the data term, which depends on S
    only through its diagonal) and mubar_q = dF~/dmu_q."""
    res = converged
    assert res.converged
    p, kp, prior, beta = collapsed.unpack(res.free, res.fixed)

    def data_term(mu, var):
        stats = sg.psi_statistics("rbf_ard", kp, mu, var, p["inducing"])
        return sg.collapsed_bound(res.Z, stats, sg.kernel("rbf_ard", kp, p["inducing"]), beta)

    mu, var = jnp.asarray(res.latent_mean), jnp.asarray(res.latent_var)
    d_mu, d_var = jax.grad(data_term, argnums=(0, 1))(mu, var)
    K_Y = programs.prior_cov(res.Y, res.prior_kernel, prior, res.jitter)
    lam = np.asarray(gplvm.precisions(K_Y, p["log_lam"]))
    np.testing.assert_allclose(-2 * np.asarray(d_var), lam, rtol=1e-3, atol=1e-4 * lam.max())
    # mu_q = K_Y dF~/dmu_q (in the directions K_Y nearly annihilates, mubar itself is free)
    mu = np.asarray(res.latent_mean)
    np.testing.assert_allclose(np.asarray(K_Y @ d_mu), mu, rtol=1e-3, atol=1e-4 * np.abs(mu).max())
    assert np.abs(mu).max() > 0.1  # not a trivial optimum


def test_linear_prior_on_more_points_than_features_works_through_the_jitter():
    """The linear kernel on the digits' 64 pixels has rank <= 64 < N = 100 (a singular K_Y): the
    jitter makes the prior proper, and the bound, its gradient and the fit are finite."""
    from ppl_sbl import datasets

    d = datasets.digits(100, seed=0)
    Y, Z = d.X_train, datasets.one_of_k(d.t_train, np.arange(10))
    K = np.asarray(sg.kernel("linear", sg.default_params("linear", Y), jnp.asarray(Y)))
    assert np.linalg.matrix_rank(K) <= 64 < len(Y)
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.cholesky(K)
    res = gplvm.fit(Y, Z, model="supervised", latent_dim=3, num_inducing=8, prior_kernel="linear", max_steps=60)
    assert np.isfinite(res.elbo) and np.all(np.isfinite(res.latent_mean)) and np.all(res.latent_var > 0)
    assert res.elbo_trace[-1] > res.elbo_trace[0]
    g = jax.grad(lambda f: gplvm.bound(f, res.fixed, res.Y, res.Z, model="supervised", prior_kernel="linear"))(res.free)
    assert all(np.all(np.isfinite(np.asarray(v))) for v in jax.tree_util.tree_leaves(g))
    assert 1 <= len(res.relevant_dims) <= 3


def test_predictions_and_interface(fitted):
    res = fitted["supervised"]
    Y, Z = toy()
    # (5.32) at the training inputs: k_Y^T mubar is mu = (K_Y + jitter) mubar less the jitter's part
    K = np.asarray(sg.kernel("rbf", res.prior_params, jnp.asarray(Y)))
    jitter = res.jitter * np.mean(np.diag(K)) * np.asarray(res.free["mubar"])
    np.testing.assert_allclose(res.transform(Y) + jitter, res.latent_mean, rtol=1e-9, atol=1e-12)
    mean, var = res.predict_latent(Y[:4])
    assert np.all(var > 0) and np.all(var <= res.latent_var[:4] + np.asarray(
        sg.kernel_diag("rbf", res.prior_params, jnp.asarray(Y[:4])))[:, None])
    pred = res.predict(Y)
    assert pred.shape == Z.shape
    assert np.mean(pred.argmax(1) == Z.argmax(1)) > 0.9  # the training labels are learnt
    un = fitted["unsupervised"]
    x_new = un.transform(Y[:3])
    assert x_new.shape == (3, 3)
    # a training point's own latent mean is (near) where its optimised q(x*) lands
    assert np.linalg.norm(x_new - un.latent_mean[:3]) < 0.5 * np.linalg.norm(un.latent_mean[:3])
    from ppl_sbl import compare

    table = compare({"supervised": res, "unsupervised": un})
    assert list(table.columns[:2]) == ["rank", "elbo"]
    idata = res.to_inference_data(num_samples=50)
    assert idata.posterior["X"].shape == (1, 50, 3, len(Y))


def test_bad_inputs_get_named_errors():
    Y, Z = toy()
    with pytest.raises(ValueError, match="`Z` has 23 rows but `Y` has 24"):
        gplvm.fit(Y, Z[:-1])
    with pytest.raises(ValueError, match="`latent_dim` must be between 1 and the data dimension 5"):
        gplvm.fit(Y, Z, latent_dim=6)
    bad = Y.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="`Y` contains 1 NaN"):
        gplvm.fit(bad, Z)
    with pytest.raises(ValueError, match="`Z` is required"):
        gplvm.fit(Y, model="supervised")
    with pytest.raises(ValueError, match="`model` must be one of"):
        gplvm.fit(Y, Z, model="pca")
    with pytest.raises(ValueError, match="`prior_kernel` must be one of"):
        gplvm.fit(Y, Z, prior_kernel="cosine")
    with pytest.raises(ValueError, match="`optimizer` must be one of"):
        gplvm.fit(Y, Z, latent_dim=3, optimizer="adam")
    with pytest.raises(ValueError, match="optimizer='natural' needs the GP-latent prior held fixed"):
        gplvm.fit(Y, Z, model="unsupervised", latent_dim=3, num_inducing=5, optimizer="natural")


def test_classifier_estimator_any_labels():
    from ppl_sbl import GPLVMClassifier

    Y, Z = toy(30)
    labels = np.where(Z[:, 0] > 0, "pos", "neg")
    for classifier in ("posterior", "knn"):
        clf = GPLVMClassifier(latent_dim=2, num_inducing=5, classifier=classifier, max_steps=60).fit(Y, labels)
        assert list(clf.classes_) == ["neg", "pos"]
        proba = clf.predict_proba(Y)
        np.testing.assert_allclose(proba.sum(1), 1.0)
        # predict agrees with the largest probability wherever that is unambiguous
        sure = proba.max(1) > 0.75
        assert np.all(clf.predict(Y)[sure] == clf.classes_[proba[sure].argmax(1)])
        assert clf.score(Y, labels) > 0.9
        assert clf.transform(Y[:3]).shape == (3, 2)
    for optimizer in ("natural", "lbfgs"):  # passed through to the fit, and a parameter for clone / GridSearchCV
        clf = GPLVMClassifier(latent_dim=2, num_inducing=5, max_steps=5, optimizer=optimizer).fit(Y, labels)
        assert clf.result_.info["optimizer"] == optimizer and clf.get_params()["optimizer"] == optimizer
    with pytest.raises(ValueError, match="at least two classes"):
        GPLVMClassifier().fit(Y, np.zeros(len(Y)))
    with pytest.raises(ValueError, match="`classifier` must be"):
        GPLVMClassifier(classifier="svm").fit(Y, labels)
    with pytest.raises(ValueError, match="not fitted"):
        GPLVMClassifier().predict(Y)



def test_host_lapack_and_jax_paths_give_the_same_q_x_and_gradient(monkeypatch):
    """The inverse of B_q by LAPACK's potri in a host callback and by JAX's Cholesky and cho_solve
    (the path without the callback) give the same q(X), KL and gradients (each route against the
    dense inverse: tests/test_linalg.py)."""
    rng = np.random.default_rng(3)
    N, Q = 60, 3
    X = rng.normal(size=(N, 4))
    K_Y = sg.add_jitter(sg.kernel("rbf", {"variance": 1.0, "alpha": 0.3}, jnp.asarray(X)))
    mubar, log_lam = jnp.asarray(rng.normal(size=(N, Q))), jnp.asarray(rng.normal(size=(N, Q)))

    def objective(mubar, log_lam):
        mu, var, kl = gplvm.latent_posterior(K_Y, mubar, log_lam)
        return kl + jnp.sum(jnp.sin(var)) + jnp.sum(mu**2)

    results = []
    for host in (True, False):
        monkeypatch.setattr(linalg, "use_host_lapack", lambda host=host: host)
        results.append(jax.value_and_grad(objective, (0, 1))(mubar, log_lam))
    (v1, (gm1, gl1)), (v2, (gm2, gl2)) = results
    np.testing.assert_allclose(v1, v2, rtol=1e-11)
    np.testing.assert_allclose(gm1, gm2, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(gl1, gl2, rtol=1e-9, atol=1e-11)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs os.sched_setaffinity (Linux)")
def test_bound_and_gradient_finish_on_a_single_core():
    """A process pinned to one core (a one-CPU container) evaluates q(X), its KL and their
    gradient 30 times, dispatched without waiting, at a size where XLA hands a host callback its
    operands asynchronously. Through the callback this waited forever in about half of the runs of
    100 evaluations (a race, so the loop alone is no sure detector; hence the check that one core
    means no callback); the library takes JAX's own Cholesky instead, and the loop takes seconds."""
    script = textwrap.dedent("""
        import os
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        import numpy as np, jax, jax.numpy as jnp
        from ppl_sbl import sparse_gp as sg
        from ppl_sbl import linalg
        from ppl_sbl.models import gplvm
        assert not linalg.use_host_lapack(), "one core: the host callback must not be used"
        rng = np.random.default_rng(0)
        N, Q = 300, 20
        K = sg.add_jitter(sg.kernel("rbf", {"variance": 1.0, "alpha": 0.2}, jnp.asarray(rng.normal(size=(N, 5)))))
        f = jax.jit(jax.value_and_grad(lambda l: gplvm.latent_posterior(K, jnp.zeros((N, Q)), l)[2]))
        log_lam = jnp.asarray(rng.uniform(-1.0, 3.0, size=(N, Q)))
        values = [f(log_lam + 1e-3 * i) for i in range(30)]  # dispatched without waiting
        assert all(np.isfinite(float(v)) and np.all(np.isfinite(np.asarray(g))) for v, g in values)
        print("finished")
    """)
    try:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180,
                             env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired:
        pytest.fail("the bound's gradient did not finish in 180 s on one core (a callback waiting forever)")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "finished" in out.stdout


# ----------------------------------------------------------------------------------------------
# The natural-gradient fit
# ----------------------------------------------------------------------------------------------
def test_update_of_some_latent_dimensions_equals_the_whole_computation():
    """:meth:`NaturalProblem.update` of a subset of latent dimensions (the pruned sweep) from the
    state at (mubar, lambda) equals q(X)'s moments computed afresh for every dimension at the new
    (mubar, lambda), which differ from the old in that subset only (by numpy's solve for the mean
    step, not :func:`ppl_sbl.linalg.host_factor`'s); the KL per dimension sums to :func:`gplvm.bound`'s KL."""
    rng = np.random.default_rng(11)
    Y, Z = toy(26, seed=4)
    free, fixed, Yj, Zj, _ = gplvm.initial_parameters(Y, Z, model="supervised", latent_dim=5, num_inducing=6)
    prob = natural.NaturalProblem(free, fixed, Yj, Zj, prior_kernel="rbf", jitter=sg.JITTER)
    N, Q = 26, 5
    mubar = rng.normal(size=(N, Q))
    lam = np.exp(rng.uniform(-2, 3, size=(N, Q)))
    state = prob.update(None, mubar, lam, np.arange(Q))
    dims = np.array([1, 3])
    lam_new = lam.copy()
    lam_new[:, dims] *= np.exp(rng.normal(size=(N, 2)))
    r, rho = rng.normal(size=(N, Q)), 0.7
    part = prob.update(state, mubar, lam_new, dims, r, rho)
    moved = mubar.copy()
    for q in dims:
        moved[:, q] += rho * np.linalg.solve(np.eye(N) + lam_new[:, q][:, None] * prob.K, r[:, q])
    whole = prob.update(None, moved, lam_new, np.arange(Q))
    for a, b in zip(part, whole):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    # the untouched dimensions are the old state's exactly
    for a, b in zip(part, state):
        np.testing.assert_array_equal(np.delete(np.atleast_2d(a), dims, axis=-1), np.delete(np.atleast_2d(b), dims, axis=-1))
    # the KL term, summed over the dimensions, against bound(): data term minus bound
    free_new = {**free, "mubar": jnp.asarray(moved), "log_lam": jnp.asarray(np.log(lam_new - prob.floor))}
    hyper = {k: v for k, v in free_new.items() if k not in ("mubar", "log_lam")}
    F = float(prob.F_value(whole[1], whole[2], hyper, fixed, Zj))
    exact = float(gplvm.bound(free_new, fixed, Yj, Zj, model="supervised", prior_kernel="rbf"))
    assert F - np.sum(part[3]) == pytest.approx(exact, rel=1e-9)


def test_pruned_natural_fit_is_monotone_and_ends_on_a_full_sweep():
    """With 5 latent dimensions for data with one underlying coordinate, ARD switches most off
    and the pruned sweeps skip them: the bound never falls, some sweeps update fewer than Q
    dimensions, every tenth updates all of them, and a converged fit's last sweep was a full
    one; the bound reported is :func:`gplvm.bound` at the returned parameters. With prune = 0
    every sweep updates all Q."""
    Y, Z = toy(26)  # the shapes of test_update_of_some_latent_dimensions_equals_the_whole_computation
    res = gplvm.fit(Y, Z, latent_dim=5, num_inducing=6, max_steps=1000, tol=1e-5, prune=1e-3)
    updated = res.info["updated_dims"]
    assert np.all(np.diff(res.elbo_trace) >= 0.0)
    assert updated.min() < 5 and np.all(updated[::10] == 5)
    assert res.converged and updated[-1] == 5
    objective = functools.partial(gplvm.bound, model="supervised", prior_kernel="rbf")
    assert float(objective(res.free, res.fixed, res.Y, res.Z)) == pytest.approx(res.elbo, rel=1e-8)
    full = gplvm.fit(Y, Z, latent_dim=5, num_inducing=6, max_steps=30, prune=0.0)
    assert np.all(full.info["updated_dims"] == 5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_natural_gradient_is_the_gradient_in_means_and_variances(seed):
    """The gradient in (mu_q, diag S_q) of :func:`gplvm.natural_gradient` against JAX's
    autodiff of :func:`gplvm.bound` (which differentiates through B_q^-1 in full) by the chain
    rule: d/dmubar = K_Y d/dmu, d/dlambda = -(S o S) d/ds (dS = -S dLambda S), and the
    hyperparameters' gradients equal; at random points of a random problem."""
    rng = np.random.default_rng(seed)
    Y, Z = toy(18, seed=seed)
    free, fixed, Yj, Zj, _ = gplvm.initial_parameters(Y, Z, model="supervised", latent_dim=3, num_inducing=5,
                                                      snr=None if seed == 2 else "default", seed=seed)
    free = {k: v + 0.3 * rng.normal(size=np.shape(v)) for k, v in free.items()}
    value, grads = gplvm.natural_gradient(free, fixed, Yj, Zj)
    objective = functools.partial(gplvm.bound, model="supervised", prior_kernel="rbf")
    exact, auto = jax.value_and_grad(objective)(free, fixed, Yj, Zj)
    assert value == pytest.approx(float(exact), rel=1e-10)
    _, _, prior, _ = collapsed.unpack(free, fixed)
    K = programs.prior_cov(Yj, "rbf", prior, sg.JITTER)
    _, _, _, S = gplvm.latent_posterior(K, free["mubar"], free["log_lam"], full=True)
    np.testing.assert_allclose(np.asarray(K @ grads["mean"]), np.asarray(auto["mubar"]), rtol=1e-6,
                               atol=1e-8 * np.abs(auto["mubar"]).max())
    e = np.exp(np.asarray(free["log_lam"]))
    d_lam = -np.einsum("qnm,mq->nq", np.asarray(S) ** 2, grads["var"])
    np.testing.assert_allclose(e * d_lam, np.asarray(auto["log_lam"]), rtol=1e-6,
                               atol=1e-8 * np.abs(auto["log_lam"]).max())
    for k in free:
        if k not in ("mubar", "log_lam"):
            np.testing.assert_allclose(np.asarray(grads[k]), np.asarray(auto[k]), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_natural_fit_never_decreases(seed, request):
    """On random problems (two sizes, supervised with the noise fixed or free, autoencoder): the bound
    never falls from one sweep to the next, each sweep's natural step is an ascent step (rho > 0
    for most sweeps), and the reported bound is :func:`gplvm.bound` (B_q^-1 by potri, KL by the
    same formula) at the returned parameters. Seed 0 is the fit of the `converged` fixture (the
    same problem and starting point, its sweeps run to convergence instead of 300)."""
    n = (16, 26)[seed % 2]  # two sizes: the problems share their compiled programs
    Y, Z = toy(n, seed=seed)
    model = "autoencoder" if seed == 3 else "supervised"
    if seed == 0:
        res = request.getfixturevalue("converged")
        assert res.info["steps"] > 300
    else:
        res = gplvm.fit(Y, Z, model=model, latent_dim=3, num_inducing=5, max_steps=300, seed=seed,
                        snr=None if seed == 2 else "default")
    assert res.info["optimizer"] == "natural"
    trace = np.asarray(res.elbo_trace)
    assert np.all(np.diff(trace) >= 0.0) and trace[-1] > trace[0]
    assert np.mean(res.info["step_sizes"] >= 0.1) > 0.5
    # the two routes to B_q^-1 (potrf + potri; potrf + a triangular inverse, by LAPACK or compiled)
    # differ by rounding: each entry by about eps cond(B_q) (machine epsilon), over N Q entries
    _, _, prior, _ = collapsed.unpack(res.free, res.fixed)
    K = np.asarray(programs.prior_cov(res.Y, "rbf", prior, sg.JITTER))
    lam = np.asarray(gplvm.precisions(jnp.asarray(K), res.free["log_lam"]))
    cond = max(np.linalg.cond(np.eye(n) + np.sqrt(l)[:, None] * K * np.sqrt(l)[None, :]) for l in lam.T)
    objective = functools.partial(gplvm.bound, model=model, prior_kernel="rbf")
    rounding = np.finfo(float).eps * cond * lam.size * (1.0 + abs(res.elbo))
    assert float(objective(res.free, res.fixed, res.Y, res.Z)) == pytest.approx(res.elbo, abs=rounding)


def test_fit_compiles_the_latent_prior_covariance_once():
    """The prior's default parameters and the same parameters read back from their logarithms have
    one type (float64, not weakly typed), so a fit compiles K_Y's function once for its shapes."""
    Y, Z = toy(17, seed=5)
    programs.prior_cov.clear_cache()
    res = gplvm.fit(Y, Z, latent_dim=2, num_inducing=4, max_steps=3)
    assert res.info["optimizer"] == "natural"
    assert programs.prior_cov._cache_size() == 1
