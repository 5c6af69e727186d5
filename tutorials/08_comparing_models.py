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
# # Comparing sparse models: the ELBO, leave-one-out and a test set
#
# Every fit in this library ends with an evidence lower bound (ELBO), and it is tempting to
# rank models by it: the ELBO bounds the log evidence $\ln p(t \mid \text{model})$, and the
# evidence is what Bayesian model comparison is about. This tutorial shows what that number is
# made of, when it answers the question you are asking, and what to use beside it. You will:
#
# 1. split the ELBO of two sparse models into its parts and find the **Occam factor** of their
#    vague hyperpriors, a constant that can decide the ranking by itself;
# 2. rank the same models by the ELBO, by **leave-one-out** cross-validation (exact for Gaussian
#    likelihoods, Pareto-smoothed importance sampling otherwise) and by the log predictive
#    density on a **held-out test set**, side by side;
# 3. choose an RBF kernel width by each of the three criteria;
# 4. see the comparisons that are not meaningful (different data, different schedules, an
#    unnormalised likelihood), the `ComparisonWarning` that `compare` raises for them, and what
#    the only `weight` column of a comparison means.
#
# Every number quoted below is computed in this notebook. Set the environment variable
# `PPL_SBL_QUICK=1` for a fast, smaller run (that is what the test-suite does); the numbers
# printed then differ from a full run, so read the printed output rather than trusting the prose
# for exact values.

# %%
import os
import time
import warnings

import matplotlib

QUICK = os.environ.get("PPL_SBL_QUICK", "0") == "1"
if QUICK:
    matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import scipy.special
import scipy.stats

import ppl_sbl
from ppl_sbl import basis, datasets
from ppl_sbl.models import robust_rvm, rvm

START = time.perf_counter()
N_TRAIN = 100                         # sinc training points
N_TEST = 1000 if QUICK else 5000      # sinc test points (noisy, the same recipe)
N_DRAWS = 400 if QUICK else 2000      # draws from q for PSIS-LOO
N_RIPLEY = 100 if QUICK else 250      # Ripley training points used (of 250)
DELTA = 5.55                          # RBF width parameter of the grid-RVM paper (standardised inputs)
A0_GRID = np.array([1e-8, 1e-6, 1e-4, 1e-2, 1.0]) if QUICK else np.logspace(-8, 0, 17)
DELTAS = np.array([1.0, 5.55, 20.0, 80.0]) if QUICK else DELTA * 2.0 ** np.arange(-3.0, 4.01, 0.5)
pd.set_option("display.width", 200)
print(f"QUICK={QUICK}: N_TRAIN={N_TRAIN}, N_TEST={N_TEST}, N_DRAWS={N_DRAWS}, "
      f"N_RIPLEY={N_RIPLEY}, {len(A0_GRID)} hyperprior shapes, {len(DELTAS)} kernel widths")


def comparison_warnings(caught):
    """The messages of the ComparisonWarnings recorded by ``warnings.catch_warnings(record=True)``."""
    return [str(w.message) for w in caught if issubclass(w.category, ppl_sbl.ComparisonWarning)]


def compare_and_warn(fits, **kwargs):
    """``ppl_sbl.compare(fits, **kwargs)``, printing every ComparisonWarning it raises."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ppl_sbl.ComparisonWarning)
        table = ppl_sbl.compare(fits, **kwargs)
    messages = comparison_warnings(caught)
    for message in messages:
        print(f"ComparisonWarning: {message}\n")
    if not messages:
        print("(no ComparisonWarning)\n")
    return table


# %% [markdown]
# ## 1. Two models of one sinc, and what their ELBOs are made of
#
# The data are the noisy sinc of tutorial 01, $t = \sin(x)/x + U(-0.2, 0.2)$, with a held-out
# test set drawn from the **same** recipe (noisy targets, so that its log predictive density
# measures the same thing leave-one-out estimates). The basis is one RBF per training point plus
# a bias. Two models share it:
#
# * **ARD** (`rvm.regression`): one precision $\alpha_k$ per basis function, $M$ of them;
# * **shared**: one precision for all weights (`groups=np.zeros(M, int)`), Bayesian ridge.
#
# Both fits run the sweep (`schedule="sweep"`) to the ELBO's own fixed point, so that their
# ELBOs are comparable numbers; section 4 shows what goes wrong otherwise. `prune=False` keeps
# every array at its shape, so that all the fits below share one compiled sweep.

# %%
def sinc_problem(n_train, n_test, seed):
    """Noisy sinc training and test sets from one draw of the recipe, standardised with the
    training inputs' mean and standard deviation."""
    raw = datasets.sinc(n_train=n_train + n_test, normalize=False, seed=seed)
    X, X_test = datasets.standardize(raw.X_train[:n_train], raw.X_train[n_train:])
    return X, raw.t_train[:n_train], X_test, raw.t_train[n_train:]


def heldout_lpd(result, Phi_test, t_test):
    """ln p(t*_n | t) of every test point under the fit's Gaussian predictive (the same
    predictive as the exact leave-one-out: q(w), E[gamma])."""
    mean, var = (np.asarray(a) for a in result.predict(Phi_test))
    return scipy.stats.norm.logpdf(t_test, mean, np.sqrt(var))


X, t, X_test, t_test = sinc_problem(N_TRAIN, N_TEST, seed=0)
Phi = np.asarray(basis.rbf(X, delta=DELTA, bias=True))
Phi_test = np.asarray(basis.rbf(X_test, X, delta=DELTA, bias=True))
N, M = Phi.shape
SHARED = np.zeros(M, int)
SWEEP = ppl_sbl.CAVI(rvm.regression, schedule="sweep", prune=False, tol=1e-7)

ard = SWEEP.run(Phi, t)
shared = SWEEP.run(Phi, t, groups=SHARED)
fits = {"ARD": ard, "shared": shared}
by_elbo = compare_and_warn(fits, by="elbo")
print(by_elbo.drop(columns=["bound", "local_bound"]).to_string(float_format="%.2f"))

# %% [markdown]
# The shared-precision model wins by more than a thousand nats (`d_elbo`), and `compare` warns
# that the ranking is decided by the hyperpriors, not by the data. The `log_norm` column is
# where to look. Each precision has a $\mathrm{Gamma}(a_0, b_0)$ prior, and its density
# $b_0^{a_0} x^{a_0 - 1} e^{-b_0 x} / \Gamma(a_0)$ carries the **normalising constant**
# $a_0 \ln b_0 - \ln\Gamma(a_0)$. It depends on neither the data nor the fit, and for a vague
# prior ($a_0 \to 0$, $\ln\Gamma(a_0) \approx \ln(1/a_0)$) it is about $-\ln(1/a_0)$ per
# precision: $-13.8$ nats at the default $a_0 = 10^{-6}$. With $G$ precisions the ELBO carries
# $G\,(a_0 \ln b_0 - \ln\Gamma(a_0))$ in total.
#
# `result.elbo_parts()` gives the terms that sum to the ELBO: the expected log-likelihood
# `log_lik`, minus the KL divergence of each factor of $q$ from its prior (`-kl_w`, `-kl_alpha`,
# `-kl_gamma`, the Gamma ones computed from the prior's kernel), and each hyperprior's constant
# (`log_norm_alpha`, `log_norm_gamma`). Let us print them, recompute `log_norm_alpha` by hand
# from the default rates $b_{0k} = a_0\,\mathrm{var}(t) / \overline{\phi_{\cdot k}^2}$ (per
# group: the group's mean of $\overline{\phi_{\cdot k}^2}$; `ppl_sbl.priors`), and take it out.

# %%
def log_norm(a0, b0):
    """sum over precisions of a0 ln b0 - ln Gamma(a0): the Gamma hyperpriors' log normalising constants."""
    return float(np.sum(a0 * np.log(b0) - scipy.special.gammaln(a0)))


def default_rates(a0, Phi, t, shared):
    """The default rates b0 = a0 var(t) / mean_n phi_nk^2 (one per column, or one for the shared group)."""
    m = np.mean(Phi**2, axis=0)
    return a0 * np.var(t) / (np.mean(m, keepdims=True) if shared else m)


A0 = 1e-6   # the default shape of every hyperprior
parts = pd.DataFrame({name: res.elbo_parts() for name, res in fits.items()}).fillna(0.0)
parts.loc["sum of the parts"] = parts.sum()
parts.loc["elbo"] = [res.elbo for res in fits.values()]
parts.loc["log_norm_alpha by hand"] = [log_norm(A0, default_rates(A0, Phi, t, False)),
                                       log_norm(A0, default_rates(A0, Phi, t, True))]
parts.loc["elbo - log_norm_alpha"] = parts.loc["elbo"] - parts.loc["log_norm_alpha"]
print(parts.to_string(float_format="%.2f"))
for name in fits:
    assert np.isclose(parts.loc["log_norm_alpha by hand", name], parts.loc["log_norm_alpha", name], rtol=1e-9)
    assert np.isclose(parts.loc["sum of the parts", name], parts.loc["elbo", name], rtol=1e-10)

# %% [markdown]
# Read the last row: without the hyperpriors' constants the ranking flips, and ARD leads. The
# constant of the shared model is one precision's worth, the ARD model's $M$ precisions' worth,
# and the difference is larger than the whole gap between the two ELBOs.
#
# Which of the two rankings do the data support? A check that involves no hyperprior at all:
# the **marginal likelihood of the data at the fitted precisions**,
# $\ln \mathcal N\big(t \mid 0,\ \Phi\,\mathrm{diag}(1/\mathbb E[\alpha])\,\Phi^\top + \mathbb E[\gamma]^{-1} I\big)$,
# the type-II maximum-likelihood objective of Tipping's RVM, computed here with SciPy.

# %%
def marginal_likelihood(res, Phi, t):
    """ln N(t | 0, Phi diag(1/E[alpha]) Phi^T + I / E[gamma]), E[alpha] expanded from groups to coefficients."""
    state = res.state
    alpha = np.asarray(state.alpha_shape / state.alpha_rate)
    alpha = np.broadcast_to(alpha, (Phi.shape[1],)) if alpha.size == 1 else alpha
    gamma = float(state.gamma_shape / state.gamma_rate)
    cov = (Phi / alpha) @ Phi.T + np.eye(len(t)) / gamma
    return float(scipy.stats.multivariate_normal(np.zeros(len(t)), cov).logpdf(t))


for name, res in fits.items():
    print(f"{name:>7}: ln p(t | E[alpha], E[gamma]) = {marginal_likelihood(res, Phi, t):7.2f}, "
          f"relevant basis functions {int(res.relevant.sum()):3d} of {M}")

# %% [markdown]
# The data's own marginal likelihood at the fitted precisions agrees with the ELBO without the
# constants: it is higher for ARD, which keeps a handful of basis functions.
#
# ### The Bartlett-Lindley paradox: the gap grows like $G \ln(1/a_0)$
#
# If the constant decides the ranking, then making the hyperprior vaguer should widen the gap
# without limit, while a criterion that measures predictions should not move. Refit both models
# for a range of shapes $a_0$ (the rates stay on the data's scale), and record the ELBO
# difference, the difference of the `log_norm` columns, and the difference of the
# **leave-one-out** expected log predictive densities $\mathrm{elpd}_\text{loo}$
# (`compare(by="loo")`, section 2) with its standard error `dse`.

# %%
rows = []
for a0 in A0_GRID:
    pair = {"ARD": SWEEP.run(Phi, t, a0=a0), "shared": SWEEP.run(Phi, t, a0=a0, groups=SHARED)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ppl_sbl.ComparisonWarning)   # printed above for a0 = 1e-6
        e = ppl_sbl.compare(pair, by="elbo", sort=False)
        lo = ppl_sbl.compare(pair, by="loo", sort=False)
    lpd = {name: heldout_lpd(res, Phi_test, t_test).sum() for name, res in pair.items()}
    rows.append({"a0": a0, "d_elbo": e.loc["ARD", "elbo"] - e.loc["shared", "elbo"],
                 "d_log_norm": e.loc["ARD", "log_norm"] - e.loc["shared", "log_norm"],
                 "d_elpd_loo": lo.loc["ARD", "elpd_loo"] - lo.loc["shared", "elpd_loo"],
                 "dse": lo["dse"].max(), "d_test_lpd": lpd["ARD"] - lpd["shared"],
                 "n_relevant_ARD": int(pair["ARD"].relevant.sum())})
scan = pd.DataFrame(rows).set_index("a0")
scan["d_elbo - d_log_norm"] = scan["d_elbo"] - scan["d_log_norm"]
print("differences ARD - shared (nats; positive favours ARD):")
print(scan.to_string(float_format="%.2f"))

fig, axes = plt.subplots(1, 2, figsize=(12, 4))
ax = axes[0]
ax.semilogx(scan.index, scan["d_elbo"], "o-", color="C0", label="ELBO(ARD) - ELBO(shared)")
ax.semilogx(scan.index, scan["d_log_norm"], "s--", color="C3", label="difference of log_norm")
ax.semilogx(scan.index, scan["d_elbo - d_log_norm"], "^-", color="C2", label="ELBO difference without log_norm")
ax.semilogx(scan.index, -(M - 1) * np.log(1 / scan.index), ":", color="0.4", label=r"$-(M-1)\ln(1/a_0)$")
ax.axhline(0, color="k", lw=0.8)
ax.set(xlabel=r"hyperprior shape $a_0$", ylabel="nats", title="the ELBO difference follows the constants")
ax.legend(fontsize=8)
ax = axes[1]
ax.errorbar(scan.index, scan["d_elpd_loo"], yerr=scan["dse"], fmt="o-", color="C1", capsize=3,
            label=r"elpd$_\mathrm{loo}$(ARD) - elpd$_\mathrm{loo}$(shared) $\pm$ dse")
ax.semilogx(scan.index, scan["d_test_lpd"] * N / N_TEST, "s--", color="C4",
            label=f"held-out lpd difference x N/N_test ({N}/{N_TEST})")
ax.set_xscale("log")
ax.axhline(0, color="k", lw=0.8)
ax.set(xlabel=r"hyperprior shape $a_0$", ylabel="nats", title="the predictive differences stay put")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# The left panel is **Bartlett's (or Lindley's) paradox**. As $a_0 \to 0$ the difference of the
# constants falls like $-(M-1)\ln(1/a_0)$ (the dotted line), and the ELBO difference falls
# with it: in the limit of an improper prior, any model with more vague hyperparameters loses,
# whatever the data. The evidence of a model with an improper prior is defined only up to such
# constants, so a comparison between models with different numbers of vague hyperparameters is
# a comparison of arbitrary numbers. The ELBO difference without the constants (green) varies
# far less. The right panel, the leave-one-out and held-out differences, stays on the scale of a
# few nats across eight orders of magnitude of $a_0$: they measure predictions, and the
# predictions hardly depend on $a_0$.
#
# What to do about it:
#
# * compare models with the **same** number of vague hyperparameters by ELBO (the constants
#   cancel; section 3 does so across kernel widths);
# * otherwise compare by leave-one-out or on held-out data, or give the hyperparameters proper
#   priors whose constants mean something (a larger $a_0$ chosen for the problem, not to win).
#
# `compare` counts the vague hyperparameters of every fit (`n_vague`: Gamma sites with shape
# below `ppl_sbl.priors.VAGUE_SHAPE`) and warns when their constants are larger than the
# ELBO difference, as it did above.

# %%
print(f"VAGUE_SHAPE = {ppl_sbl.priors.VAGUE_SHAPE}")
print(f"n_vague: ARD {ppl_sbl.comparison.vague_hyperparameters(ard)}, "
      f"shared {ppl_sbl.comparison.vague_hyperparameters(shared)} (the noise precision counts too)")


# %% [markdown]
# ## 2. ELBO, leave-one-out and a test set, side by side
#
# Leave-one-out cross-validation scores a model by how well it predicts each training point
# from the others, $\mathrm{elpd}_\text{loo} = \sum_n \ln p(t_n \mid t_{-n})$ (Vehtari, Gelman &
# Gabry 2017). `compare(fits, by="loo")` computes it two ways:
#
# * **exactly** where the model has a closed form (`result.loo_exact()`): for the Gaussian
#   RVM, removing one point from $q(w)$ is a rank-one update (Sherman-Morrison), with the
#   hyperparameters held at their fitted means; the `loo` column says `exact`;
# * by **Pareto-smoothed importance sampling** (PSIS, ArviZ's `az.loo`) on the pointwise
#   log-likelihood of draws from $q$ otherwise; `pareto_k_max` is the largest Pareto shape
#   estimate, and above 0.7 the importance weights of that point are unreliable.
#
# The table is ArviZ's: `elpd_loo`, its standard error `se`, the effective number of parameters
# `p_loo`, the difference to the best `elpd_diff` with its standard error `dse`, and `weight`
# (section 4). The held-out log predictive density is $\sum_n \ln p(t^*_n \mid t)$ over the
# test points.

# %%
by_loo = compare_and_warn(fits, by="loo")
print(by_loo.to_string(float_format="%.3f"))
loo_exact = ard.loo_exact()
print(f"\nARD: sum of result.loo_exact() = {loo_exact.sum():.3f} (the elpd_loo above)")

sinc_lpd = {name: heldout_lpd(res, Phi_test, t_test) for name, res in fits.items()}
for name, res in fits.items():
    rmse = np.sqrt(np.mean((np.asarray(res.predict(Phi_test)[0]) - t_test) ** 2))
    print(f"{name:>7}: held-out lpd {sinc_lpd[name].sum():8.2f} over {N_TEST} points "
          f"({sinc_lpd[name].mean():.4f} per point), test RMSE {rmse:.4f}")

# %% [markdown]
# Now models without a closed form: RVM classification (`rvm.classification`, a logistic
# likelihood with the Jaakkola-Jordan bound) on Ripley's two-class data, with an RBF basis of
# width 0.5 ($\delta = 4$, Tipping's choice). Three fits: ARD by the default fast schedule, one
# shared precision (the fast schedule's one group, added or not), and the robust RVM of tutorial 03
# (`robust_rvm.classification`, fast schedule): the models that the command line's main job,
# `ppl-sbl compare --dataset ripley`, compares. The held-out criterion is the Bernoulli
# log-likelihood of the 1000 test labels under $P(t = 1 \mid t_\text{train}) = \mathbb
# E_q[\sigma(\phi^\top w)]$.

# %%
ripley = datasets.ripley()
use = np.sort(np.random.default_rng(0).choice(len(ripley.t_train), N_RIPLEY, replace=False))
Xr, tr = ripley.X_train[use], ripley.t_train[use]
Phi_r = np.asarray(basis.rbf(Xr, delta=4.0, bias=True))
Phi_r_test = np.asarray(basis.rbf(ripley.X_test, Xr, delta=4.0, bias=True))
class_fits = {
    "ARD": ppl_sbl.CAVI(rvm.classification).run(Phi_r, tr),
    "shared": ppl_sbl.CAVI(rvm.classification).run(Phi_r, tr, groups=np.zeros(Phi_r.shape[1], int)),
    "robust": ppl_sbl.CAVI(robust_rvm.classification).run(Phi_r, tr),
}
print({name: res.schedule for name, res in class_fits.items()})


def bernoulli_lpd(result, Phi_test, t_test):
    """ln p(t*_n | t) of every test label under P(t = 1) = E_q[sigma(phi^T w)]."""
    p = np.clip(np.asarray(result.predict(Phi_test)), 1e-12, 1 - 1e-12)
    return np.where(t_test == 1, np.log(p), np.log1p(-p))


class_elbo = compare_and_warn(class_fits, by="elbo")
print(class_elbo[["elbo", "d_elbo", "log_lik", "-kl_latent", "-kl_hyper", "log_norm", "local_bound", "n_vague",
                  "n_relevant", "schedule"]].to_string(float_format="%.2f"))
class_loo = compare_and_warn({k: class_fits[k] for k in ("ARD", "shared")}, by="loo", num_samples=N_DRAWS)
print(class_loo.to_string(float_format="%.3f"))
ripley_lpd = {name: bernoulli_lpd(res, Phi_r_test, ripley.t_test) for name, res in class_fits.items()}
for name, res in class_fits.items():
    error = np.mean((np.asarray(res.predict(Phi_r_test)) > 0.5) != ripley.t_test)
    print(f"{name:>7}: held-out lpd {ripley_lpd[name].sum():8.2f} over {len(ripley.t_test)} points "
          f"({ripley_lpd[name].mean():.4f} per point), test error {error:.1%}")

# %% [markdown]
# By ELBO the shared precision wins by more than a thousand nats, and `compare` raises two
# warnings: vague hyperparameters (section 1) and the robust RVM's unnormalised likelihood
# (section 4). Leave-one-out (the `loo` column says `psis`;
# check that `pareto_k_max` stays below 0.7) and the test set rank ARD and the shared precision
# by a few nats, and the test errors are within a fraction of a percent. The ELBO table's
# `local_bound` column holds the nats the Jaakkola-Jordan bound loses against the exact ELBO of
# $q$ (by quadrature). Leave-one-out compares only the two plain RVMs here; the robust one
# returns in section 4.
#
# The figure puts the three criteria next to each other, as the difference of the shared model
# to ARD **per data point** (the ELBO and $\mathrm{elpd}_\text{loo}$ divided by the number of
# training points, the held-out lpd by the number of test points), with one standard error of
# the difference (`dse` for leave-one-out, $\sqrt{n\,\mathrm{var}(d_i)}$ of the pointwise test
# differences $d_i$, divided by $n$).

# %%
def paired_se(a, b):
    """Standard error of sum(a - b) for pointwise values a, b: sqrt(n var(a - b))."""
    d = np.asarray(a) - np.asarray(b)
    return float(np.sqrt(len(d) * np.var(d)))


problems = {"sinc (exact LOO)": (fits, by_loo, sinc_lpd), "Ripley (PSIS-LOO)": (class_fits, class_loo, ripley_lpd)}
side_by_side = {}
for label, (fs, lo, lpd) in problems.items():
    n, n_test = len(next(iter(fs.values())).observed["t"]), len(lpd["ARD"])
    side_by_side[label] = {
        "ELBO": (fs["shared"].elbo - fs["ARD"].elbo) / n,
        "elpd_loo": (lo.loc["shared", "elpd_loo"] - lo.loc["ARD", "elpd_loo"]) / n,
        "se elpd_loo": lo["dse"].max() / n,   # the two-model tables: dse of their difference
        "held-out lpd": (lpd["shared"].sum() - lpd["ARD"].sum()) / n_test,
        "se held-out": paired_se(lpd["shared"], lpd["ARD"]) / n_test,
    }
side = pd.DataFrame(side_by_side).T
print("shared - ARD, nats per point (positive favours the shared precision):")
print(side.to_string(float_format="%.4f"))

fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
x = np.arange(len(side))
axes[0].bar(x, side["ELBO"], color=["C0", "C1"])
axes[1].bar(x, side["elpd_loo"], yerr=side["se elpd_loo"], color=["C0", "C1"], capsize=4)
axes[2].bar(x, side["held-out lpd"], yerr=side["se held-out"], color=["C0", "C1"], capsize=4)
for ax, title in zip(axes, ["ELBO", r"elpd$_\mathrm{loo}$ ($\pm$ dse)", r"held-out lpd ($\pm$ se)"]):
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(x, list(side.index), fontsize=8)
    ax.set(title=f"{title}: shared - ARD", ylabel="nats per point")
plt.tight_layout()
plt.show()

# %% [markdown]
# Read the scales of the three panels. The ELBO difference is set by the hyperpriors'
# constants (section 1): more than ten nats per point in favour of the shared precision, on
# both problems. The leave-one-out and held-out differences are hundredths of a nat per point
# or less, hundreds of times smaller, and a few standard errors at most: the two models predict
# about equally well, and ARD does it with a handful of basis functions. Read their signs in the
# printed table with their standard errors. The exact leave-one-out of the sinc holds the
# hyperparameters at the full-data fit, which favours the model with more of them, ARD (section
# 3): in a close call like this one it can lean towards ARD where the test set does not.
#
# ## 3. Choosing a kernel width by each criterion
#
# A comparison where the ELBO is on safe ground: the **same** model (ARD) with the same number of
# vague hyperparameters on the same data, fitted by the same schedule, for a grid of RBF widths
# $\delta$ in $\phi_j(x) = \exp(-\delta (x - x_j)^2)$. The constants cancel, `compare` raises no
# warning, and each criterion picks a width.

# %%
width_fits, width_lpd = {}, {}
for delta in DELTAS:
    P = np.asarray(basis.rbf(X, delta=delta, bias=True))
    P_test = np.asarray(basis.rbf(X_test, X, delta=delta, bias=True))
    width_fits[float(delta)] = SWEEP.run(P, t)
    width_lpd[float(delta)] = heldout_lpd(width_fits[float(delta)], P_test, t_test)
width_elbo = compare_and_warn(width_fits, by="elbo", sort=False)
width_loo = compare_and_warn(width_fits, by="loo", sort=False)
widths = pd.DataFrame({
    "elbo": width_elbo["elbo"],
    "elpd_loo": width_loo["elpd_loo"],
    "se": width_loo["se"],
    "elpd_diff": width_loo["elpd_diff"],
    "dse": width_loo["dse"],
    "p_loo": width_loo["p_loo"],
    "stacking weight": width_loo["weight"],
    "held-out lpd": [width_lpd[d].sum() for d in width_fits],
    "n_relevant": width_elbo["n_relevant"],
}, index=list(width_fits))
widths.index.name = "delta"
print(widths.to_string(float_format="%.3f"))
picks = {name: float(widths[column].idxmax()) for name, column in
         [("ELBO", "elbo"), ("LOO", "elpd_loo"), ("held-out", "held-out lpd")]}
close = [round(d, 3) for d in widths.index[widths["elpd_diff"] <= widths["dse"]]]
print(f"\nwidths whose elpd_loo is within one dse of the best: {close}")
best = picks["held-out"]
print(f"what each choice costs on the {N_TEST} test points, against the held-out best (delta = {best:.3g}):")
for name, delta in picks.items():
    loss = width_lpd[best].sum() - width_lpd[delta].sum()
    print(f"  {name:>8}: delta = {delta:6.3g}, held-out lpd {width_lpd[delta].sum():8.1f}, lower by {loss:6.1f} "
          f"(se {paired_se(width_lpd[best], width_lpd[delta]):.1f})")

fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharex=True)
axes[0].plot(widths.index, widths["elbo"], "o-", color="C0")
axes[1].errorbar(widths.index, widths["elpd_loo"], yerr=widths["se"], fmt="o-", color="C1", capsize=3)
axes[2].plot(widths.index, widths["held-out lpd"], "o-", color="C2")
for ax, name, title in zip(axes, ["ELBO", "LOO", "held-out"],
                           ["ELBO", r"elpd$_\mathrm{loo}$ $\pm$ se", f"held-out lpd ({N_TEST} points)"]):
    ax.axvline(picks[name], color="0.5", ls="--", lw=1)
    ax.set(xscale="log", xlabel=r"RBF width parameter $\delta$", ylabel="nats",
           title=f"{title}: picks {picks[name]:.3g}")
plt.tight_layout()
plt.show()

# %% [markdown]
# Compare the three printed choices. The error bars of $\mathrm{elpd}_\text{loo}$ are its
# standard error `se`; for choosing between two widths the one that matters is `dse`, the
# standard error of the *difference*, smaller because the same points are hard for every width.
# Even so, leave-one-out cannot tell apart the widths printed as within one `dse` of the best,
# and the ELBO curve is as flat over them: with $N$ training points neither criterion resolves
# differences of a few nats, and its pick among those widths is close to arbitrary. The
# held-out set has many more points and resolves finer differences; the last lines say what
# each choice costs there. Look also at `p_loo` of the width leave-one-out picks.
#
# Why may the ELBO and leave-one-out pick differently, even with the constants cancelled?
#
# * **They score different predictions.** By the chain rule the log evidence is
#   $\ln p(t) = \sum_n \ln p(t_n \mid t_1, \dots, t_{n-1})$: it scores the model's predictions
#   starting from the prior with no data at all, then from one point, then two. A width whose
#   prior puts much mass on functions the data rule out pays for it there, even if its
#   predictions from $N - 1$ points are good. Leave-one-out scores only predictions from
#   $N - 1$ points, which is what you use a fitted model for. The evidence answers "which model
#   is more probable to have generated these data, under these priors"; leave-one-out answers
#   "which fitted model predicts new data better".
# * **The ELBO is a bound.** It lies below $\ln p(t)$ by $\mathrm{KL}(q \,\|\, p(\cdot \mid t))$,
#   and how much the mean-field $q$ loses can differ from width to width.
# * **This leave-one-out holds the hyperparameters.** The exact form removes a point from
#   $q(w)$ with $\mathbb E[\alpha]$ and $\mathbb E[\gamma]$ fixed at the full-data fit. ARD
#   chose its relevant basis functions, one precision each, with the left-out point in the
#   data, so the score is optimistic, the more so the more flexible the fit: `p_loo`, the
#   effective number of parameters, grows at narrow widths, where a basis function serves only
#   a few points. The held-out set has no such bias; where leave-one-out prefers a narrower
#   kernel than the held-out set does, this is the likely reason.
#
# The `stacking weight` column is the combination of widths whose averaged predictive scores
# best by leave-one-out (section 4).
#
# ## 4. When a comparison is not meaningful
#
# `compare` checks that a table means what it seems to, and warns with
# `ppl_sbl.ComparisonWarning` (a `UserWarning`, so `warnings.simplefilter("error",
# ppl_sbl.ComparisonWarning)` turns it into an error) when it does not. Each warning says what to
# compare instead. Section 1 met the vague hyperparameters; the Ripley table of section 2 raised
# the unnormalised likelihood's.
#
# **Different schedules.** `CAVI`'s default for the ARD models is the fast schedule, one
# coefficient at a time (tutorial 01, section 7). Coefficients it never adds stay frozen at zero,
# so its $q$ belongs to a smaller family than the sweep's, and its ELBO lies below the sweep's
# fixed point. On the sinc, the same ARD model by both schedules:

# %%
fast = ppl_sbl.CAVI(rvm.regression).run(Phi, t)     # the default: the fast schedule
print(f"ARD, fast schedule: ELBO {fast.elbo:.2f}, relevant {int(fast.relevant.sum())}; "
      f"sweep: ELBO {ard.elbo:.2f}, relevant {int(ard.relevant.sum())}; the sweep is {ard.elbo - fast.elbo:.2f} "
      "nats higher")
refined = fast.refine()   # continues the fast fit with the sweep, every coefficient back in the model
print(f"fast.refine(): ELBO {refined.elbo:.2f} (+{refined.refined_by:.2f} nats; the sweep from the empty start: "
      f"{ard.elbo:.2f})")

# %% [markdown]
# The gap between the schedules is small next to the thousands of nats of section 2, but it is
# of the size of the differences between kernel widths in section 3, so an ELBO comparison
# that mixes schedules can be decided by the schedule. Fit every model with
# `schedule="sweep"`, or continue a fast fit with the sweep, `result.refine()` (without pruning,
# so it ends at the dense fixed point, a little above a pruned sweep), before comparing ELBOs.
# Leave-one-out does not warn: it scores
# predictions, whatever schedule produced them.
#
# **An unnormalised likelihood.** The robust RVM raises each point's Bernoulli likelihood to a
# Gamma-distributed power $\omega_n$. That weighted likelihood is not a normalised density of
# the labels (`result.likelihood_normalised` is False), so its ELBO does not bound the evidence of
# the data, and comparing it with the plain RVM's ELBO compares two different quantities. Its
# posterior predictive is still a proper distribution of a new label, so leave-one-out and
# held-out data compare it fairly with the others, as the tables of section 2 did; compare
# robust RVMs among themselves by ELBO (tutorial 03 chooses their kernel width so).

# %%
print({name: res.likelihood_normalised for name, res in class_fits.items()})
robust_elbo = compare_and_warn({"ARD": class_fits["ARD"], "robust": class_fits["robust"]}, by="elbo")
print(robust_elbo[["elbo", "d_elbo", "log_lik", "log_norm", "n_vague", "n_relevant", "schedule"]].to_string(
    float_format="%.2f"))
print(f"\nheld-out lpd per test point: ARD {ripley_lpd['ARD'].mean():.4f}, robust {ripley_lpd['robust'].mean():.4f}; "
      f"difference {ripley_lpd['robust'].mean() - ripley_lpd['ARD'].mean():+.4f} "
      f"(se {paired_se(ripley_lpd['robust'], ripley_lpd['ARD']) / len(ripley.t_test):.4f})")

# %% [markdown]
# **Different data.** An evidence or a leave-one-out score is a statement about one data set.
# Fit the shared model to the same targets in other units (centimetres, $100\,t$): the default
# hyperpriors follow the units, so the fit is the same, but every log density of $t$ moves by
# $-N \ln 100$, and the comparison with the ARD fit of $t$ is meaningless. `compare` warns, by
# ELBO and by leave-one-out alike.

# %%
shared_cm = SWEEP.run(Phi, 100 * t, groups=SHARED)
print(f"ELBO: shared on t {shared.elbo:.2f}, shared on 100 t {shared_cm.elbo:.2f}; "
      f"difference {shared.elbo - shared_cm.elbo:.2f}, N ln 100 = {N * np.log(100):.2f}")
_ = compare_and_warn({"ARD on t": ard, "shared on 100 t": shared_cm}, by="elbo")
_ = compare_and_warn({"ARD on t": ard, "shared on 100 t": shared_cm}, by="loo")

# %% [markdown]
# ### The only `weight` column: stacking, not model probabilities
#
# A table of ELBOs invites normalising $\exp(\mathrm{ELBO})$ over the models and calling the
# result posterior model probabilities. That is right only when the models have equal prior
# probabilities, **proper** hyperpriors (else the constants of section 1 set the answer), and
# bounds tight enough that the differences of the ELBOs are the differences of the log
# evidences. `compare(by="elbo")` therefore reports no weights. Here is what that
# normalisation would say across the $a_0$ scan of section 1:

# %%
p_ard = scipy.special.expit(scan["d_elbo"])    # exp(ELBO_ARD) / (exp(ELBO_ARD) + exp(ELBO_shared))
print(pd.DataFrame({"d_elbo": scan["d_elbo"], "'P(ARD)' from exp(ELBO)": p_ard,
                    "log10 'P(ARD)'": scan["d_elbo"] / np.log(10)}).to_string(float_format="%.3g"))
print("\nstacking weights, sinc (default a0):", by_loo["weight"].round(3).to_dict())
print("stacking weights, Ripley:", class_loo["weight"].round(3).to_dict())
print("stacking weights over the kernel widths:", widths["stacking weight"].round(3).to_dict())

# %% [markdown]
# The exp(ELBO) "probability" of ARD moves by hundreds of orders of magnitude with $a_0$ (read
# the last column): it reports the constants, not the data.
#
# The `weight` column of `compare(by="loo")` is something else: the **stacking** weights of
# Yao et al. (2018), the non-negative weights summing to one that maximise the leave-one-out
# score of the *mixture* of the models' predictive distributions,
# $\max_w \sum_n \ln \sum_k w_k\, p(t_n \mid t_{-n}, M_k)$. They answer "how should I average
# these models' predictions", not "which model is true": a model gets weight zero when the
# others already make its predictions (two nearly identical fits split the weight
# arbitrarily), a model with a lower $\mathrm{elpd}_\text{loo}$ can get more weight than a
# better one whose predictions the best model already covers (compare the stacking weights of
# the kernel widths with their `elpd_diff`), and a weight of 1 is not certainty. Use them to
# combine predictions, and `elpd_diff` with `dse` to rank.
#
# ## Summary
#
# * `result.elbo_parts()` splits the ELBO into the expected log-likelihood, the KL terms of the
#   weights and hyperparameters, and the hyperpriors' log normalising constants (`log_norm_*`).
#   With vague hyperpriors the constants are about $-\ln(1/a_0)$ per precision and can decide a
#   comparison between models with different numbers of precisions on their own (the
#   Bartlett-Lindley paradox); `compare` warns when they do.
# * `compare(by="loo")` ranks by the leave-one-out predictive density, exact for the Gaussian
#   RVM and PSIS (with Pareto $k$) otherwise, with standard errors of the differences; it does
#   not depend on the constants, nor on the schedule. The exact form holds the
#   hyperparameters, and is optimistic for flexible fits.
# * A held-out test set, where you can afford one, is the independent check of both.
# * ELBO comparisons are safe between fits of the same data by the same schedule, with
#   normalised likelihoods and the same number of vague hyperparameters: choosing a kernel width
#   is the typical case. Even then the evidence and leave-one-out answer different questions.
# * The only weights the library reports are stacking weights, for averaging predictions.
#
# ## Exercises
#
# 1. Give both models of section 1 a proper prior, e.g. $a_0 = 1$, $b_0 = 1$ for every
#    precision (`a0=1.0, b0=1.0`). Does the ELBO ranking now agree with leave-one-out? How does
#    it change with $b_0$ at $a_0 = 1$?
# 2. Repeat the kernel-width selection of section 3 for the shared-precision model. Does it
#    prefer the same width as ARD by each criterion? Is its exact leave-one-out closer to the
#    held-out lpd (it holds one precision, not one per basis function)?
# 3. Draw ten sinc data sets (`seed=0..9` in `sinc_problem`) and count how often the ELBO and
#    leave-one-out pick the width that the held-out lpd picks.
# 4. For the Ripley fits, raise `num_samples` of `compare(by="loo")` and watch `elpd_loo` and
#    `pareto_k_max` settle. Which points have the largest Pareto $k$
#    (`ppl_sbl.comparison.loo(result)["pareto_k"]`)? Where are they in the input plane?
# 5. Leave-one-out of the whole fitting procedure: for a few widths of section 3, refit every
#    factor without point $n$ (`SWEEP.run(P[keep], t[keep], b0=..., f0=...)` with the full fit's
#    rates, `res.data.b0` and `res.data.lik.f0`), predict the point, and compare the sum with
#    `res.loo_exact().sum()`. How optimistic is holding the hyperparameters, and how does it grow
#    with $\delta$? Does PSIS on the same fits (`ppl_sbl.compare(width_fits, by="loo",
#    loo_method="psis")`) warn where it is, with `pareto_k_max` above 0.7?

# %%
print(f"total run time: {time.perf_counter() - START:.1f} s")
