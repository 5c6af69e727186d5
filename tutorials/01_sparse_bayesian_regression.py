# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Sparse Bayesian regression: the relevance vector machine as a NumPyro program
#
# This tutorial fits a regression model that has **more weights than data points** and still
# does not overfit, because the prior lets the data switch most of the weights off. You will:
#
# 1. set up a problem with one basis function per training point;
# 2. read the model as a plain NumPyro program and see what its *ARD* prior means;
# 3. fit it with closed-form coordinate-ascent variational inference (CAVI);
# 4. check the closed-form answer against NumPyro's own Monte Carlo ELBO;
# 5. look at the *relevance vectors* the fit keeps;
# 6. compare it with a model that has a single shared prior precision (Bayesian ridge);
# 7. fit the same model one coefficient at a time (the fast schedule, `CAVI`'s default for this
#    model) and see what it costs.
#
# Every number quoted below is computed in this notebook. Set the environment variable
# `PPL_SBL_QUICK=1` for a fast, smaller run (that is what the test-suite does); the numbers
# printed then differ from a full run, so read the printed output rather than trusting the prose
# for exact values.

# %%
import inspect
import os
import time

import matplotlib

QUICK = os.environ.get("PPL_SBL_QUICK", "0") == "1"
if QUICK:
    matplotlib.use("Agg")

import jax
import matplotlib.pyplot as plt
import numpy as np
import scipy.stats
from numpyro.infer import Predictive

import ppl_sbl
from ppl_sbl import basis, datasets
from ppl_sbl.models import rvm

START = time.perf_counter()
N_TRAIN = 50 if QUICK else 100        # training points
N_TEST = 200 if QUICK else 600        # test points (noise-free sinc on an even grid)
N_PARTICLES = 500 if QUICK else 4000  # Monte Carlo particles for check_guide
N_DRAWS = 100 if QUICK else 500       # draws from q for the posterior plots
DELTA = 5.55                          # RBF width parameter of the grid-RVM paper
print(f"QUICK={QUICK}: N_TRAIN={N_TRAIN}, N_TEST={N_TEST}, N_PARTICLES={N_PARTICLES}")

# %% [markdown]
# ## 1. The problem: noisy sinc with one basis function per data point
#
# The targets are $t_n = \sin(x_n)/x_n + \varepsilon_n$ with $\varepsilon_n \sim U(-0.2, 0.2)$
# and $x_n \sim U(-10, 10)$; the inputs are standardised. As features we use a Gaussian RBF
# $\phi_j(x) = \exp(-\delta (x - x_j)^2)$ **centred on every training input** $x_j$, plus a
# constant (bias) column. With $N$ data points the design matrix $\Phi$ is $N \times (N+1)$:
# there are more weights than observations, so least squares can interpolate the noise exactly
# and is not even unique. Something has to choose which basis functions to use.

# %%
d = datasets.sinc(n_train=N_TRAIN, n_test=N_TEST, seed=0)
Phi = basis.rbf(d.X_train, delta=DELTA, bias=True)                  # (N, N + 1); column 0 = bias
Phi_test = basis.rbf(d.X_test, d.X_train, delta=DELTA, bias=True)   # same centres, test inputs
x_train, x_test = d.X_train[:, 0], d.X_test[:, 0]
N, M = Phi.shape
print(f"Phi: {N} data points x {M} basis functions (rank {np.linalg.matrix_rank(Phi)})")

fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
axes[0].plot(x_test, d.t_test, "k-", lw=1, label="true function")
axes[0].plot(x_train, d.t_train, "o", ms=4, color="C0", label="training data")
axes[0].set(xlabel="x (standardised)", ylabel="t", title="noisy sinc")
axes[0].legend()
for j in np.argsort(x_train)[:: max(1, N // 6)]:
    axes[1].plot(x_test, Phi_test[:, j + 1], lw=1)
    axes[1].axvline(x_train[j], color="0.85", lw=0.8, zorder=0)
axes[1].set(xlabel="x (standardised)", ylabel=r"$\phi_j(x)$", title="a few of the RBF basis functions")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 2. The model is a NumPyro program
#
# The model is an ordinary NumPyro function. It gives **every weight its own prior precision**
# $\alpha_k$ (automatic relevance determination, ARD), with a Gamma hyperprior (shape/rate):
#
# $$\alpha_k \sim \mathrm{Gamma}(a_0, b_0),\quad w_k \mid \alpha_k \sim \mathcal N(0, 1/\alpha_k),\quad
# \gamma \sim \mathrm{Gamma}(e_0, f_0),\quad t_n \mid w, \gamma \sim \mathcal N(\phi_n^\top w, 1/\gamma).$$
#
# If the data push $\alpha_k$ to a very large value, the prior pins $w_k$ at zero and basis
# function $k$ drops out: sparsity comes out of the posterior, not from a hand-set threshold.
# Here is the source (the `groups` argument lets several weights share one precision; we use it
# in section 6):

# %%
print(inspect.getsource(rvm.regression))

# %% [markdown]
# Because it is a plain NumPyro program, `Predictive` draws from the **prior predictive**.
# The default shapes $a_0 = e_0 = 10^{-6}$ are deliberately vague, and the default rates are
# set on the data's scale, $b_{0k} = a_0\,\mathrm{var}(t) / \overline{\phi_{\cdot k}^2}$ and
# $f_0 = e_0\,\mathrm{var}(t)$ (`ppl_sbl.priors`): the prior mean of each precision is the one
# the data's units suggest, so that rescaling $t$ or a column of $\Phi$ rescales the fit and
# changes nothing else. A Gamma with shape $10^{-6}$ (here $\mathrm{Gamma}(10^{-6}, 10^{-6})$)
# puts almost all of its mass below the smallest normal float64, so nearly every draw of $\alpha_k$ underflows to 0, and then prior draws of
# $w \sim \mathcal N(0, 1/\alpha)$ are infinite or NaN (try
# `Predictive(rvm.regression, num_samples=5)(jax.random.PRNGKey(0), Phi)`). Let us compute that
# probability, and then look at prior draws under a proper, informative choice
# $a_0 = b_0 = 1$, $e_0 = 2$, $f_0 = 0.1$ instead, to see what "one precision per weight"
# means for functions.

# %%
tiny = np.finfo(np.float64).tiny   # smallest positive normal float64, about 2.2e-308
p_tiny = scipy.stats.gamma(a=1e-6, scale=1 / 1e-6).cdf(tiny)
print(f"Gamma(1e-6, 1e-6): P(alpha < {tiny:.1e}) = {p_tiny:.5f}")

prior = Predictive(rvm.regression, num_samples=6)(
    jax.random.PRNGKey(1), Phi_test, a0=1.0, b0=1.0, e0=2.0, f0=0.1
)
f_prior = Phi_test @ np.asarray(prior["w"]).T   # noise-free function draws, (N_TEST, 6)
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(x_test, f_prior, lw=1)
ax.set(xlabel="x (standardised)", ylabel="f(x)",
       title=r"prior draws of $f = \Phi w$ with $a_0=b_0=1$ (heavy-tailed weights)")
plt.tight_layout()
plt.show()

# %% [markdown]
# Marginally, each $w_k$ under a Gamma precision is Student-t: most weights are small, a few
# are large. That heavy-tailed shape is what favours sparse solutions.
#
# ## 3. The closed-form guide and CAVI
#
# We approximate the posterior by the mean-field family
# $q(w, \alpha, \gamma) = q(w)\, \prod_k q(\alpha_k)\, q(\gamma)$ with
# $q(w) = \mathcal N(\mu, \Sigma)$, $q(\alpha_k) = \mathrm{Gamma}(a_k, b_k)$,
# $q(\gamma) = \mathrm{Gamma}(e, f)$. Because the model is conjugate, each factor's optimum
# given the others is available in closed form (Bishop & Tipping, 2000). One CAVI **sweep**:
#
# $$\Sigma = \big(\operatorname{diag} \mathbb E[\alpha] + \mathbb E[\gamma]\, \Phi^\top\Phi\big)^{-1},\qquad
# \mu = \mathbb E[\gamma]\, \Sigma \Phi^\top t,$$
# $$a_k = a_0 + \tfrac12,\qquad b_k = b_0 + \tfrac12 \mathbb E[w_k^2],$$
# $$e = e_0 + \tfrac N2,\qquad f = f_0 + \tfrac12 \mathbb E\|t - \Phi w\|^2,$$
#
# with $\mathbb E[\alpha_k] = a_k/b_k$, $\mathbb E[w_k^2] = \mu_k^2 + \Sigma_{kk}$,
# $\mathbb E[\gamma] = e/f$ and
# $\mathbb E\|t-\Phi w\|^2 = \|t - \Phi\mu\|^2 + \operatorname{tr}(\Phi^\top\Phi\,\Sigma)$.
# Each update maximises the evidence lower bound (ELBO) over one factor with the rest fixed,
# so **the ELBO can never decrease** from sweep to sweep. `CAVI(..., schedule="sweep")` iterates
# these sweeps until the relative change is below `tol`. (It also *prunes*: a weight whose
# precision has grown so large that freezing it at 0 costs less than $10^{-3}$ nats is removed
# from the linear algebra, which keeps the sweeps cheap.) We name the schedule because for this
# model `CAVI`'s default is a faster one, one coefficient at a time (section 7); the sweep is the
# textbook algorithm, and its dense fixed point is the one the fast fit is compared with below.

# %%
res = ppl_sbl.CAVI(rvm.regression, tol=1e-7, schedule="sweep").run(Phi, d.t_train)
print(res)
print(f"{res.num_sweeps} sweeps in {res.seconds:.2f} s, converged: {res.converged}")

steps = np.diff(res.elbo_trace)
print(f"smallest ELBO change between sweeps: {steps.min():.3e}")
assert np.all(steps >= -1e-8 * abs(res.elbo)), "the ELBO decreased: a CAVI update is wrong"

fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
ppl_sbl.plot_elbo_trace(res, ax=axes[0])
ppl_sbl.plot_elbo_trace(res, ax=axes[1])
axes[1].set_ylim(res.elbo - 50, res.elbo + 5)
axes[1].set_title("ELBO trace (zoom on the last 50 nats)")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 4. Is the closed-form guide right? `check_guide`
#
# The analytic ELBO is a long formula, and a wrong sign in it would still give a smooth,
# increasing trace. `check_guide` asks NumPyro to estimate the **same** quantity independently:
# it builds a NumPyro guide from the fitted $q$, and `Trace_ELBO` averages
# $\ln p(t, w, \alpha, \gamma) - \ln q(w, \alpha, \gamma)$ over draws from $q$, replaying
# the model above. The two must agree up to Monte Carlo error; the message gives the
# z-score of the difference.

# %%
check = ppl_sbl.check_guide(res, num_particles=N_PARTICLES)
print(check.message)
assert check.passed, check.message

# %% [markdown]
# ## 5. Relevance vectors
#
# Predictions for a new input use $q(w)$ and $q(\gamma)$: the predictive mean is
# $\phi(x)^\top \mu$ and the predictive variance of a new observation is
# $1/\mathbb E[\gamma] + \phi(x)^\top \Sigma\, \phi(x)$ with $1/\mathbb E[\gamma] = f/e$.
#
# Which basis functions did the fit keep? `res.relevant` uses a **scale-free** rule: weight
# $k$ is relevant when the data support it, i.e. when the ELBO with $w_k$ in the model at its
# best precision beats the ELBO with it out (its own hyperprior taken vague). Given the other
# weights, the data give $w_k$ a precision $s_k = 1/\Sigma_{kk} - \mathbb E[\alpha_k]$ (which
# accounts for overlapping basis functions) and a "quality" $q_k = \mu_k/\Sigma_{kk}$, and the
# comparison comes down to $q_k^2 > s_k$ (section 7 derives it). Rescaling a column of $\Phi$ or
# the targets does not change the verdict, unlike a threshold on $|\mu_k|$. The centres of the
# relevant RBFs are the **relevance vectors**. The left panel below plots $q_k^2/s_k$ against
# the line at 1.

# %%
mean, var = (np.asarray(a) for a in res.predict(Phi_test))
sd = np.sqrt(var)
rel_basis = res.relevant[1:]                    # column 0 is the bias
rmse_ard = float(np.sqrt(np.mean((mean - d.t_test) ** 2)))
noise_sd = float(np.sqrt(res.state.gamma_rate / res.state.gamma_shape))  # sqrt(1 / E[gamma])
print(f"relevant basis functions: {int(rel_basis.sum())} of {N} RBFs; bias relevant: {bool(res.relevant[0])}")
print(f"test RMSE {rmse_ard:.4f}; fitted noise sd sqrt(1/E[gamma]) = {noise_sd:.4f} "
      f"(the uniform noise has sd {0.2 / np.sqrt(3):.4f})")

draws = res.sample(0, N_DRAWS)                  # {'alpha', 'w', 'gamma'} drawn from q
f_post = Phi_test @ draws["w"][:20].T

fig, ax = plt.subplots(figsize=(9, 4))
ax.fill_between(x_test, mean - 2 * sd, mean + 2 * sd, color="C0", alpha=0.2, label=r"$\pm 2$ sd (new observation)")
ax.plot(x_test, f_post, color="C0", lw=0.4, alpha=0.5)
ax.plot(x_test, mean, "C0", lw=2, label="predictive mean")
ax.plot(x_test, d.t_test, "k--", lw=1, label="true function")
ax.plot(x_train, d.t_train, "o", ms=3, color="0.5", label="training data")
ax.plot(x_train[rel_basis], d.t_train[rel_basis], "o", ms=10, mfc="none", mec="C3", mew=2,
        label="relevance vectors")
ax.set(xlabel="x (standardised)", ylabel="t", title="RVM fit (thin lines: 20 functions drawn from q)")
ax.legend(fontsize=8, loc="upper left")
plt.show()

fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
ppl_sbl.plot_relevance(res, ax=axes[0])
axes[0].set_title("how strongly the data support each basis function")
e_alpha = np.asarray(res.state.alpha_shape / res.state.alpha_rate)
axes[1].semilogy(np.arange(M), e_alpha, "o", ms=3, color="0.5")
axes[1].semilogy(np.flatnonzero(res.relevant), e_alpha[res.relevant], "o", ms=5, color="C3")
axes[1].set(xlabel="basis function k", ylabel=r"$\mathbb{E}[\alpha_k]$", title="posterior mean precisions")
plt.tight_layout()
plt.show()
print(f"median E[alpha_k]: relevant {np.median(e_alpha[res.relevant]):.3g}, "
      f"others {np.median(e_alpha[~res.relevant]):.3g}")

# %% [markdown]
# Most precisions end up far larger than the relevant ones (compare the two medians printed
# above), so their weights are pinned close to zero with a tiny posterior spread: those basis
# functions are switched off, and the prediction is essentially a sum of the few relevant RBFs (plus the bias if it
# is relevant). The relevance vectors are chosen *jointly*: a centre is kept because its bump,
# together with the other kept bumps, explains the data, not because its own point is special.
#
# ## 6. Comparing models by their ELBO
#
# The ELBO is a lower bound on the log evidence $\ln p(t)$, so it can rank models. As an
# alternative we fit the same basis with **one shared precision** for all weights
# (`groups=np.zeros(M, int)`): that is Bayesian ridge regression, which shrinks every weight
# by the same amount and switches none off. `compare` ranks fits by ELBO and shows its parts:
# `log_lik` (the expected log-likelihood), the KL terms of the weights (`-kl_latent`) and of the
# precisions (`-kl_hyper`), and `log_norm`, the hyperpriors' log normalising constants, which
# depend on neither the data nor the fit. Watch that last column.

# %%
# one shared precision: the default schedule adds the one group of all coefficients, or not
ridge = ppl_sbl.CAVI(rvm.regression, tol=1e-7).run(Phi, d.t_train, groups=np.zeros(M, int))
table = ppl_sbl.compare({"ARD (RVM)": res, "shared precision (ridge)": ridge})
print(table.to_string())

mean_ridge = np.asarray(ridge.predict(Phi_test)[0])
rmse_ridge = float(np.sqrt(np.mean((mean_ridge - d.t_test) ** 2)))
print(f"\ntest RMSE: ARD {rmse_ard:.4f}, ridge {rmse_ridge:.4f}")
gap = res.elbo - ridge.elbo
print(f"ELBO(ARD) - ELBO(ridge) = {gap:.1f} nats = {gap / (M - 1):.2f} nats per extra precision")

# %% [markdown]
# Read the table carefully. The ARD model has $M$ precisions, the ridge model one, and with
# the vague hyperprior of shape $a_0 = 10^{-6}$ every precision that $q$ pins down
# costs an **Occam penalty** in the ELBO (the KL divergence from its extremely diffuse prior).
# The printed gap per extra precision shows the size of that cost. Since the penalty is set by
# the hyperprior, not by the data, it should shrink when the hyperprior is less vague. Let us
# measure the gap for a few values of the shape $a_0$ (the rates stay on the data's scale,
# $b_{0k} = a_0\,\mathrm{var}(t) / \overline{\phi_{\cdot k}^2}$; per extra precision, next to
# $\ln a_0$):

# %%
HYPER = (1e-6, 1e-2) if QUICK else (1e-6, 1e-3, 1e-1)
print(f"{'a0':>8} {'ELBO ARD':>10} {'ELBO ridge':>11} {'gap/(M-1)':>10} {'ln a0':>7} "
      f"{'n_rel':>6} {'RMSE ARD':>9} {'RMSE ridge':>10}")
for h in HYPER:
    if h == 1e-6:   # the defaults: reuse the two fits above
        fits = [res, ridge]
    else:
        fits = [ppl_sbl.CAVI(rvm.regression, tol=1e-7, schedule="sweep").run(Phi, d.t_train, a0=h, groups=g)
                for g in (None, np.zeros(M, int))]
    rmses = [np.sqrt(np.mean((np.asarray(f.predict(Phi_test)[0]) - d.t_test) ** 2)) for f in fits]
    print(f"{h:8.0e} {fits[0].elbo:10.1f} {fits[1].elbo:11.1f} {(fits[0].elbo - fits[1].elbo) / (M - 1):10.2f} "
          f"{np.log(h):7.2f} {int(fits[0].relevant.sum()):6d} {rmses[0]:9.4f} {rmses[1]:10.4f}")

# %% [markdown]
# What to take from these numbers:
#
# * The ELBO gap per extra precision moves with $\ln a_0$: it is mostly the price of the
#   hyperprior, paid once per precision. With vague hyperpriors the ELBO therefore strongly
#   prefers the model with fewer precisions, whatever the data say. An ELBO comparison between
#   models with different numbers of hyperparameters is only as meaningful as the hyperpriors.
# * The test RMSEs of the two models are printed above: compare them yourself. On this easy,
#   one-dimensional problem shrinking all weights together is a strong competitor, and the ARD
#   model's advantage is not accuracy but **sparsity**: it predicts with a handful of basis
#   functions instead of all of them, and it tells you which ones.
# * The `n_rel` column counts the ARD model's relevant weights. `relevant` judges each precision
#   as a whole: the ridge model's one precision is relevant when the data support it (the ELBO
#   with all its weights in the model at their best shared precision beats the ELBO with them
#   out), and then every weight it keeps counts as relevant, since all of them are used. The
#   verdict reads the block of $q(w)$ of all the group's weights together, not one weight at a
#   time.
#
# ### What ARD does *not* select: input features
#
# ARD here chooses among **basis functions** (centres), not among input dimensions. If we add
# input columns that carry no signal, every RBF measures distances in all dimensions, so the
# noise dimensions distort every basis function and no choice of centres can undo that:

# %%
NOISE_FEATURES = (0, 1) if QUICK else (0, 1, 2)
for k in NOISE_FEATURES:
    dk = datasets.sinc(n_train=N_TRAIN, n_test=N_TEST, noise_features=k, seed=0)
    Pk = basis.rbf(dk.X_train, delta=DELTA, bias=True)
    Pk_test = basis.rbf(dk.X_test, dk.X_train, delta=DELTA, bias=True)
    # k = 0 is the data set used above (same seed), so reuse that fit
    rk = res if k == 0 else ppl_sbl.CAVI(rvm.regression, tol=1e-7, schedule="sweep").run(Pk, dk.t_train)
    rmse_k = np.sqrt(np.mean((np.asarray(rk.predict(Pk_test)[0]) - dk.t_test) ** 2))
    print(f"noise features {k}: relevant {int(rk.relevant.sum()):3d}/{Pk.shape[1]}, "
          f"ELBO {rk.elbo:9.1f}, test RMSE {rmse_k:.4f}")

# %% [markdown]
# The test error grows with every noise dimension. Selecting input features needs ARD over the
# *inputs*, e.g. one precision per input column with a linear basis (`basis.linear`), or one
# length-scale per input dimension in the kernel.
#
# ## 7. One coefficient at a time: the fast schedule
#
# The sweep above updates *every* weight and precision at every sweep, and an irrelevant
# precision grows only by a constant factor per sweep, so the fit takes thousands of sweeps and
# every sweep works on all $M$ weights. Shutin et al. (2011) noticed that for **one**
# coefficient $k$, with everything else held, alternating $q(w)$ and $q(\alpha_k)$ has a
# fixed point in closed form. Write $s_k$ and $q_k$ for the precision and the "quality" the data
# give $w_k$ once the other active weights have explained what they can (Tipping & Faul's
# leave-one-out factors). Then the ELBO as a function of $x = \mathbb E[\alpha_k]$ is, up to a
# constant,
#
# $$f_\text{in}(x) = \frac{q_k^2}{2(x+s_k)} - \tfrac12\ln\Big(1+\frac{s_k}{x}\Big) + a_0\ln x - b_0 x$$
#
# with $w_k$ in the model, and $f_\text{out}(x) = -\tfrac12\ln(1 + h_k/x) + a_0 \ln x - b_0 x$
# with $w_k$ *frozen* (mean zero, independent of the rest; $h_k$ the precision the data give
# $w_k$ alone). The fixed point is the best root of a cubic. With $a_0 = b_0 = 0$ this is
# Tipping & Faul's $x = s^2/(q^2 - s)$, and the coefficient belongs in the model exactly when
# $q_k^2 > s_k$. The fast schedule, `CAVI`'s default for the ARD models (`schedule="auto"`;
# `schedule="fast"` names it), starts from the empty model and makes one such move at a time: it
# adds a coefficient the data support, or re-estimates the precision of one in the model.
# Between passes it updates $q(\gamma)$.

# %%
fast = ppl_sbl.CAVI(rvm.regression).run(Phi, d.t_train)                   # the default: the fast schedule
fast = ppl_sbl.CAVI(rvm.regression).run(Phi, d.t_train)                   # a second, warm run
assert fast.schedule == "fast"
sweep_warm = ppl_sbl.CAVI(rvm.regression, schedule="sweep").run(Phi, d.t_train)
print(fast)
print(f"fast:  {fast.seconds:.3f} s, {fast.num_moves} moves, relevant {fast.relevance_indices.tolist()}")
print(f"sweep: {sweep_warm.seconds:.3f} s, {sweep_warm.num_sweeps} sweeps, relevant {res.relevance_indices.tolist()}")
mean_fast = np.asarray(fast.predict(Phi_test)[0])
rmse_fast = float(np.sqrt(np.mean((mean_fast - d.t_test) ** 2)))
print(f"test RMSE: fast {rmse_fast:.4f}, sweep {rmse_ard:.4f}; ELBO: fast {fast.elbo:.2f}, sweep {res.elbo:.2f}")
check_fast = ppl_sbl.check_guide(fast, num_particles=N_PARTICLES)
print(check_fast.message)
assert check_fast.passed, check_fast.message

fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
axes[0].plot(fast.elbo_trace, "C1", label="fast: after each move and pass")
axes[0].plot(res.elbo_trace, "C0", label="sweep: after each sweep")
axes[0].set(xscale="log", xlabel="moves / sweeps", ylabel="ELBO", ylim=(res.elbo - 0.2 * abs(res.elbo), None),
            title="the ELBO never decreases, on either path")
axes[0].legend(fontsize=8)
axes[1].plot(x_test, mean, "C0", lw=2, label="sweep")
axes[1].plot(x_test, mean_fast, "C1--", lw=2, label="fast")
axes[1].plot(x_test, d.t_test, "k:", lw=1, label="true function")
fast_rv = fast.relevant[1:]
axes[1].plot(x_train[fast_rv], d.t_train[fast_rv], "o", ms=10, mfc="none", mec="C1", mew=2,
             label="fast's relevance vectors")
axes[1].set(xlabel="x (standardised)", ylabel="t", title="predictive means")
axes[1].legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# Both results count relevant weights by the same rule, $q_k^2 > s_k$ read from each fit's own
# $q(w)$ and $q(\alpha)$ (a frozen weight has mean zero, so $q_k = 0$), so the two lists printed
# above compare directly.
#
# Why is the fast fit's ELBO a little *lower*? Plot $f_\text{in}$ and $f_\text{out}$ for one
# basis function the data do not support. Because a frozen weight is just an active weight
# forced to be independent with mean zero, $f_\text{in}(x) \ge f_\text{out}(x)$ for every $x$.
# With $b_0 > 0$ each coefficient left out therefore costs a little, about
# $\sqrt{2 b_0}\,(\sqrt{h_k} - \sqrt{s_k - q_k^2})$ nats. The sweep's dense fixed point keeps
# every coefficient "in" at a huge precision and collects those crumbs. Summed over the
# hundreds of left-out basis functions they explain the gap printed above. With
# $a_0 = b_0 \to 0$ the two curves meet as $x \to \infty$, and "frozen" becomes the same as
# "switched off".

# %%
from ppl_sbl import fast_ard

g = float(fast.state.gamma_shape / fast.state.gamma_rate)
in_model = np.flatnonzero(np.asarray(fast.state.w.index) < M)
active = np.asarray(fast.state.w.index)[in_model]
A = Phi[:, active]
C = g * A.T @ A + np.diag(np.asarray(fast.state.alpha_shape / fast.state.alpha_rate)[active])
Ci = np.linalg.inv(C)
S_all = g * np.sum(Phi**2, axis=0) - g**2 * np.einsum("mk,kl,ml->m", Phi.T @ A, Ci, Phi.T @ A)
Q_all = g * Phi.T @ d.t_train - g**2 * (Phi.T @ A) @ Ci @ (A.T @ d.t_train)
frozen = np.setdiff1d(np.arange(M), active)
k = int(frozen[np.argmin(Q_all[frozen] ** 2 / S_all[frozen])])   # the least supported frozen one
s_k, q_k, h_k = S_all[k], Q_all[k], g * np.sum(Phi[:, k] ** 2)
xs = np.logspace(0, 7, 400)
f_in = fast_ard.in_model_value(xs, s_k, q_k, 1e-6, 1e-6)
f_out = fast_ard.frozen_value(xs, h_k, 1e-6, 1e-6)
best_in = fast_ard.in_model_optimum(s_k, q_k, 1e-6, 1e-6)
best_out = fast_ard.frozen_optimum(h_k, 1e-6, 1e-6)
fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
axes[0].semilogx(xs, f_in, "C0", label=r"$f_\mathrm{in}$ (in the model)")
axes[0].semilogx(xs, f_out, "C3", label=r"$f_\mathrm{out}$ (frozen)")
axes[0].plot(*best_in, "o", color="C0")
axes[0].plot(*best_out, "o", color="C3")
axes[0].set(xlabel=r"$x = \mathbb{E}[\alpha_k]$", ylabel="ELBO (up to a constant)",
            ylim=(float(best_out[1]) - 1.0, float(best_in[1]) + 0.2),
            title=f"basis function {k}: $q^2/s$ = {q_k**2 / s_k:.2g} (unsupported)")
axes[0].legend(fontsize=8)
axes[1].loglog(xs, f_in - f_out, "C2")
axes[1].set(xlabel=r"$x = \mathbb{E}[\alpha_k]$", ylabel=r"$f_\mathrm{in} - f_\mathrm{out}$",
            title="never negative; vanishes only as $x \\to \\infty$")
plt.tight_layout()
plt.show()
gap_k = float(fast_ard.in_model_optimum(s_k, q_k, 1e-6, 1e-6)[1] - fast_ard.frozen_optimum(h_k, 1e-6, 1e-6)[1])
print(f"leaving basis function {k} out costs {gap_k:.4f} nats; "
      f"sqrt(2 b0)(sqrt h - sqrt(s - q^2)) = {np.sqrt(2e-6) * (np.sqrt(h_k) - np.sqrt(s_k - q_k**2)):.4f}")

# %% [markdown]
# ## Choosing the width by the ELBO
#
# The RBF width $\delta$ was fixed above. The ELBO is a lower bound on the log evidence
# $\ln p(\mathbf{t} \mid \delta)$, so it can choose $\delta$ from the training data alone, without
# holding any of them out: `ppl_sbl.ELBOSearch` takes scikit-learn's `GridSearchCV` interface, fits
# every setting to all the data and keeps the one with the highest ELBO. For `ppl_sbl.RVR` and
# `ppl_sbl.RVC` a grid over `delta` runs as one compiled program (`ppl_sbl.fit_grid`: the fast
# schedule of every width, the same fits as one by one). Does the width the evidence prefers also
# predict the test set well?

# %%
widths = np.geomspace(0.05, 100, 8 if QUICK else 24)
search = ppl_sbl.ELBOSearch(ppl_sbl.RVR(), {"delta": widths}).fit(d.X_train, d.t_train)
table = search.candidates_
table["test_rmse"] = [
    float(np.sqrt(np.mean((ppl_sbl.RVR(delta=w).fit(d.X_train, d.t_train).predict(d.X_test) - d.t_test) ** 2)))
    for w in widths
]
print(table[["param_delta", "elbo", "rank", "n_relevance_vectors", "test_rmse"]].round(4).to_string(index=False))
best_rmse = int(np.argmin(table["test_rmse"]))
print(f"the ELBO picks delta = {search.best_params_['delta']:.3g} (test RMSE "
      f"{table['test_rmse'][search.best_index_]:.4f}); the test RMSE is lowest at delta = {widths[best_rmse]:.3g} "
      f"({table['test_rmse'][best_rmse]:.4f}), {search.best_score_ - table['elbo'][best_rmse]:.1f} nats "
      "below the best ELBO")

fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
axes[0].semilogx(widths, table["elbo"], "o-", color="C0")
axes[0].axvline(search.best_params_["delta"], color="C3", ls="--", label="highest ELBO")
axes[0].set(xlabel=r"RBF width parameter $\delta$", ylabel="ELBO", title="the evidence (lower bound)")
axes[0].legend(fontsize=8)
axes[1].loglog(widths, table["test_rmse"], "o-", color="C2")
axes[1].axvline(search.best_params_["delta"], color="C3", ls="--")
axes[1].set(xlabel=r"RBF width parameter $\delta$", ylabel="test RMSE", title="held-out error (not used to choose)")
plt.tight_layout()
plt.show()

# %% [markdown]
# Read the two panels together. Widths that are too wide (small $\delta$) cannot bend with the
# sinc: the ELBO rules them out by tens of nats or more, and their test error is several times
# the best. Over the widths that fit, the ELBO is nearly flat (a few to tens of nats from end to
# end) and its maximum leans towards narrow RBFs with more relevance vectors, whose test error is
# clearly above the lowest: under the vague hyperprior the bound's Occam factor for extra basis
# functions is weak. The ELBO is a bound on the evidence, not the evidence, and the evidence
# answers "which width explains these training data", not "which width predicts best". The gap
# between the chosen width and the best one is printed above; exercise 7 asks how it behaves with
# more data.
# (The test RMSE column refits each width with `RVR`, one at a time, for this comparison only.)

# %% [markdown]
# The fast schedule is `CAVI`'s default for the ARD models wherever it applies (with `groups=` it
# adds and re-estimates whole groups; with `init_state=` or `prune=False` the default runs the
# sweep; `result.schedule` says which ran),
# and what `ppl_sbl.RVR` and `ppl_sbl.RVC` use. Its speed against compiled peers (Tipping's
# SparseBayes in C++, `fastrvm`) is measured in `benchmarks/rvm.py`.
#
# ## Exercises
#
# 1. Change `DELTA` (the RBF width) to 1 and to 30. How do the number of relevance vectors, the
#    ELBO and the test RMSE change? Which width does the ELBO prefer?
# 2. Refit with `tol=1e-3` and compare the ELBO and number of sweeps with the fit above. Is the
#    ELBO trace still monotone?
# 3. Run `ppl_sbl.check_guide` on the ridge fit. Then deliberately break the model: copy the
#    source of `rvm.regression` into a new function with, say, `t ~ N(Phi w, 2/gamma)`, attach
#    `rvm.REGRESSION_GUIDE` to it with `ppl_sbl.closed_form_guide`, fit it, and run
#    `check_guide` again. What happens to the z-score?
# 4. Use `res.to_inference_data()` and `arviz.loo` to compare the ARD and ridge fits by
#    leave-one-out predictive accuracy instead of the ELBO. Do the two criteria agree?
# 5. Fit the same model with NUTS (`numpyro.infer.MCMC(NUTS(rvm.regression), ...)`), using a
#    proper hyperprior such as $a_0 = b_0 = 10^{-2}$ (why not the default?). Compare the
#    posterior predictive with the variational one; where does mean-field $q$ look
#    over-confident?
# 6. `ppl_sbl.RVR(delta=DELTA)` wraps all of this as a scikit-learn estimator. Check that its
#    `predict(X_test, return_std=True)` matches `res.predict` above.
# 7. Repeat the width search with `datasets.sinc(n_train=400)`. Does the ELBO's choice move
#    closer to the width with the lowest test RMSE? Compare `ELBOSearch` with scikit-learn's
#    `GridSearchCV(ppl_sbl.RVR(), {"delta": widths}, cv=5)`: the widths they pick and their run times.

# %%
print(f"total run time: {time.perf_counter() - START:.1f} s")
