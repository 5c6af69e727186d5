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
# # Grid relevance vector machines: one precision per row and one per column
#
# Some objects are naturally described by a **table** of features rather than a vector: an
# image cut into blocks with several descriptors per block, or, as below, one basis function
# per (centre, input dimension) pair. The relevance vector machine (RVM) of tutorial 01 would
# flatten the $M_1 \times M_2$ table and give every one of its $M_1 M_2$ weights its own prior
# precision. The **grid RVM** (Kropotov et al.) gives one precision $\alpha_i$ to each row and
# one precision $\beta_j$ to each column, and combines them into the precision of weight
# $w_{ij}$. You will:
#
# 1. read the p-grid (product rule) and s-grid (sum rule) models as NumPyro programs;
# 2. see on a noisy sinc with extra noise inputs why tuning $M_1 + M_2$ precisions instead of
#    $M_1 M_2$ protects against overfitting, and how the column precisions switch the noise
#    inputs off;
# 3. understand the log-sum bound that makes the sum rule tractable, and measure how loose it is;
# 4. try both models on a real table (8 x 8 images of handwritten digits), where the grid
#    assumption does not obviously hold;
# 5. rank the models by their ELBO and learn what that ranking does and does not mean;
# 6. check the closed-form guides against NumPyro's Monte Carlo ELBO;
# 7. look at the ELBO traces and at why the p-grid needs so many sweeps.
#
# Every number quoted below is computed in this notebook. Set the environment variable
# `PPL_SBL_QUICK=1` for a fast, smaller run (that is what the test-suite does); the numbers
# printed then differ from a full run, so read the printed output rather than trusting the prose
# for exact values.

# %%
import inspect
import os
import time
import warnings

import matplotlib

QUICK = os.environ.get("PPL_SBL_QUICK", "0") == "1"
if QUICK:
    matplotlib.use("Agg")

import jax
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from numpyro.infer import Predictive
import scipy.stats
from scipy.special import digamma, gammaln

import ppl_sbl
from ppl_sbl import basis, bounds, datasets
from ppl_sbl.models import grid_rvm, rvm

START = time.perf_counter()
N_SINC = 30 if QUICK else 100                         # training points of the noisy sinc
N_TEST = 200 if QUICK else 600                        # test points
NOISE_FEATURES = (0, 2) if QUICK else (0, 2, 10)      # noise inputs added to the sinc
DIGIT_SIZES = (40,) if QUICK else (30, 100, 300)      # training sizes of the digits problem
N_PARTICLES = 500 if QUICK else 4000                  # Monte Carlo particles for check_guide
TOL = 1e-6 if QUICK else 1e-9                         # CAVI's default tol is 1e-9
PRUNE = not QUICK                                     # CAVI's default is to prune
DELTA = 5.55                                          # RBF width parameter of the paper
A0 = 1e-6                                             # default Gamma shape of every prior
pd.set_option("display.width", 120)
print(f"QUICK={QUICK}: N_SINC={N_SINC}, NOISE_FEATURES={NOISE_FEATURES}, DIGIT_SIZES={DIGIT_SIZES}, "
      f"TOL={TOL}, PRUNE={PRUNE}")


def cavi(model, *args, max_sweeps=20000, **kwargs):
    """Fit ``model`` by closed-form CAVI's sweep with this notebook's tolerance (20000: CAVI's default
    limit). The sweep for every model, the paper's algorithm: CAVI's default schedule would fit the
    plain RVM one coefficient at a time (``ppl_sbl.fast_ard``) and the grid RVMs by the sweep."""
    return ppl_sbl.CAVI(model, progress_bar=False, tol=TOL, max_sweeps=max_sweeps, prune=PRUNE,
                        schedule="sweep").run(*args, **kwargs)


def rmse(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def gamma_mean(shapes, rates):
    return np.asarray(shapes) / np.asarray(rates)


# %% [markdown]
# CAVI stops when the relative change of the ELBO between sweeps falls below `tol`. The full
# run uses CAVI's default, $10^{-9}$; quick mode stops at $10^{-6}$, a few tenths of a nat short
# of convergence on these problems, and also switches off CAVI's pruning of switched-off
# weights, which pays for itself only on larger problems.
#
# ## 1. The models: one precision per row and per column
#
# Each object $n$ is a table $X_n$ of shape $M_1 \times M_2$ and the model is linear in it,
# $y_n = \sum_{ij} w_{ij} X_{n,ij}$ (the table flattened in C order, weight $k = i M_2 + j$,
# is an ordinary design-matrix row). The prior on the weights is
#
# $$\alpha_i \sim \mathrm{Gamma}(a_0, b_0),\quad \beta_j \sim \mathrm{Gamma}(c_0, d_0),\qquad
# w_{ij} \mid \alpha, \beta \sim \mathcal N\!\big(0,\ 1/(\alpha_i \beta_j)\big)\ \text{(p-grid,
# eq. (1))} \quad\text{or}\quad \mathcal N\!\big(0,\ 1/(\alpha_i + \beta_j)\big)\ \text{(s-grid,
# eq. (4))},$$
#
# followed by the RVM's likelihood: $t_n \sim \mathcal N(y_n, 1/\gamma)$ with $\gamma \sim
# \mathrm{Gamma}(e_0, f_0)$ for regression, or $t_n \sim \mathrm{Bernoulli}(\sigma(y_n))$ for
# classification. The flat RVM is the case of one precision $\alpha_{ij}$ per cell.
#
# The two rules behave differently:
#
# * **product**: $\ln(\alpha_i\beta_j) = \ln\alpha_i + \ln\beta_j$, so in log space the
#   precision table is a row effect plus a column effect. A large $\alpha_i$ does not force a
#   large precision everywhere in row $i$: a small $\beta_j$ can compensate it.
# * **sum**: $\alpha_i + \beta_j \ge \max(\alpha_i, \beta_j)$, so a large $\alpha_i$ switches
#   off the whole row $i$, and a large $\beta_j$ the whole column $j$, whatever the other
#   factor is.
#
# Here is the regression program (`grid_rvm.classification` has the same prior):

# %%
print(inspect.getsource(grid_rvm.regression))

# %% [markdown]
# `Predictive` draws from the prior. As in tutorial 01 the default hyperparameters
# ($10^{-6}$ everywhere) are too vague to sample from (nearly every precision drawn underflows
# to 0), so we draw with proper Gamma(1/2, 1/2) priors. The sites are the row precisions
# `alpha` $(M_1,)$, the column precisions `beta` $(M_2,)$, the flattened weights `w`
# $(M_1 M_2,)$, the noise precision `gamma` and the targets `t`. From **the same** draw of
# $\alpha$ and $\beta$ we form the precision table of both rules.

# %%
X_toy = np.random.default_rng(0).standard_normal((5, 12, 8))   # 5 objects, tables of 12 x 8
hyper = dict(a0=0.5, b0=0.5, c0=0.5, d0=0.5, e0=2.0, f0=0.1)
draw = Predictive(grid_rvm.regression, num_samples=1)(jax.random.PRNGKey(3), X_toy, kind="p", **hyper)
for site, value in draw.items():
    print(f"site {site!r:8}: shape {tuple(value.shape)}")

alpha, beta = np.asarray(draw["alpha"][0]), np.asarray(draw["beta"][0])
tables = {"p-grid: " + r"$\log_{10}(\alpha_i \beta_j)$": np.log10(np.outer(alpha, beta)),
          "s-grid: " + r"$\log_{10}(\alpha_i + \beta_j)$": np.log10(alpha[:, None] + beta[None, :])}
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
for ax, (title, table) in zip(axes, tables.items()):
    im = ax.imshow(table, cmap="viridis", aspect="auto")
    ax.set(title=title, xlabel="column j", ylabel="row i")
    plt.colorbar(im, ax=ax)
plt.tight_layout()
plt.show()
print(f"flat RVM: {12 * 8} precisions for this table; grid RVM: {12 + 8}")

# %% [markdown]
# The product table is a sum of stripes in log space; the sum table is dominated, cell by cell,
# by the larger of the two precisions, so rows and columns with a large precision show up as
# uniformly "high" stripes.
#
# ## 2. Noisy sinc with noise inputs: why coupling helps
#
# The data set of section 6.1 of the paper: $t = \sin(x)/x + U(-0.2, 0.2)$, to which we append
# $k$ input columns of pure Gaussian noise (all inputs standardised). The basis is the
# **per-dimension RBF table**: for object $x$, centre $c_i$ (a training input) and input
# dimension $j$,
#
# $$X_{ij}(x) = \exp\!\big(-\delta\,(x^{(j)} - c_i^{(j)})^2\big),$$
#
# a table of $N$ centres (rows, precision $\alpha_i$) by $1 + k$ input dimensions
# (columns, precision $\beta_j$). The fitted function is additive over input dimensions,
# $f(x) = \sum_j \sum_i w_{ij} X_{ij}(x)$, and only column 0 carries signal.
#
# We fit three models to each table: the flat RVR on the flattened table (one precision per
# cell), the p-grid and the s-grid.

# %%
sinc = {}     # k -> dict(data, table, test table, fits)
rows = []
for k in NOISE_FEATURES:
    d = datasets.sinc(n_train=N_SINC, n_test=N_TEST, noise_features=k, seed=0)
    T = basis.rbf_table(d.X_train, d.X_train, DELTA)        # (N, N centres, 1 + k input dimensions)
    T_test = basis.rbf_table(d.X_test, d.X_train, DELTA)    # test inputs against the same centres
    N, M1, M2 = T.shape
    fits = {
        "rvm": cavi(rvm.regression, T.reshape(N, -1), d.t_train),
        "p-grid": cavi(grid_rvm.regression, T, d.t_train, kind="p"),
        "s-grid": cavi(grid_rvm.regression, T, d.t_train, kind="s"),
    }
    sinc[k] = dict(data=d, T=T, T_test=T_test, fits=fits)
    for name, res in fits.items():
        flat = name == "rvm"
        pred_test = res.predict(T_test.reshape(len(T_test), -1) if flat else T_test)[0]
        pred_train = res.predict(T.reshape(N, -1) if flat else T)[0]
        rows.append(dict(k=k, model=name, table=f"{M1}x{M2}", precisions=M1 * M2 if flat else M1 + M2,
                         sweeps=res.num_sweeps, converged=res.converged, elbo=res.elbo,
                         train_rmse=rmse(pred_train, d.t_train), test_rmse=rmse(pred_test, d.t_test),
                         n_relevant=int(res.relevant.sum())))
sinc_table = pd.DataFrame(rows)
print(sinc_table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))

# %%
K_MAX = max(NOISE_FEATURES)
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
for name, colour in zip(("rvm", "p-grid", "s-grid"), ("0.6", "k", "C0")):
    sub = sinc_table[sinc_table.model == name]
    axes[0].plot(sub.k, sub.test_rmse, "o-", color=colour, label=f"{name} (test)")
    axes[0].plot(sub.k, sub.train_rmse, "o:", color=colour, label=f"{name} (train)")
axes[0].set(xlabel="number of noise inputs k", ylabel="RMSE", title="noisy sinc: RMSE against noise inputs")
axes[0].legend(fontsize=8)

big = sinc[K_MAX]
x_test = big["data"].X_test[:, 0]
axes[1].plot(x_test, big["data"].t_test, "k--", lw=1, label="true function")
axes[1].plot(big["data"].X_train[:, 0], big["data"].t_train, "o", ms=3, color="0.5", label="training data")
for name, colour in zip(("rvm", "p-grid", "s-grid"), ("0.6", "k", "C0")):
    res = big["fits"][name]
    X_new = big["T_test"].reshape(len(x_test), -1) if name == "rvm" else big["T_test"]
    axes[1].plot(x_test, res.predict(X_new)[0], color=colour, lw=1.2, label=name)
axes[1].set(xlabel="x (standardised input 0)", ylabel="t", title=f"predictions with k = {K_MAX} noise inputs")
axes[1].legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# Read the table and the left panel. With no noise inputs ($k = 0$) the table has a single
# column, and the p-grid is the flat RVR in disguise: $\alpha_i\beta_0$ is just one precision
# per centre, so the two fit alike. As noise inputs are added, compare how much each model's
# test error grows (the ratios are printed below). The right panel shows what goes wrong: the
# test inputs have their own random noise coordinates, and a prediction that uses them comes
# out jagged along $x$.
#
# The reason is the count in the `precisions` column. The flat RVR tunes one precision per cell,
# i.e. it decides **separately for each of the $N(1+k)$ basis functions** whether to use it.
# With many candidates, some noise-input bumps happen to line up with the noise in the
# training targets, and their precisions are tuned to keep them. The grid models tune one
# precision per centre and **one per input dimension**: to use any bump of noise input $j$,
# the whole column $j$ must be given a small $\beta_j$, and the evidence for that is pooled
# over all $N$ centres of the column, where the chance alignments do not add up. Let us count
# where the flat RVR's relevant weights sit, and look at the grid models' column precisions.

# %%
for name in ("rvm", "p-grid", "s-grid"):
    sub = sinc_table[sinc_table.model == name].set_index("k")
    print(f"{name:7}: test RMSE with k = {K_MAX} noise inputs / with none = {sub.test_rmse[K_MAX] / sub.test_rmse[0]:.2f}")
flat = big["fits"]["rvm"]
relevant_table = flat.relevant.reshape(N_SINC, 1 + K_MAX)
print(f"k = {K_MAX}: flat RVR keeps {int(relevant_table[:, 0].sum())} relevant weights on input 0 "
      f"and {int(relevant_table[:, 1:].sum())} on the {K_MAX} noise inputs")
for name in ("p-grid", "s-grid"):
    res = big["fits"][name]
    e_beta = gamma_mean(res.state.shapes[1], res.state.rates[1])
    print(f"{name}: E[beta_j] = {np.array2string(e_beta, precision=3, max_line_width=120)}")
    if K_MAX:
        print(f"        the smallest noise-input E[beta_j] is {np.min(e_beta[1:]) / e_beta[0]:.3g} times E[beta_0]")

fig, axes = plt.subplots(2, 3, figsize=(14, 7))
for row, name in zip(axes, ("p-grid", "s-grid")):
    ppl_sbl.plot_grid_relevance(big["fits"][name], axes=row, axis_labels=("centre", "input dimension"))
    row[0].set_title(f"{name}: relevance per centre")
    row[1].set_title(f"{name}: relevance per input dimension")
plt.tight_layout()
plt.show()

# %% [markdown]
# The middle panels plot $1/\mathbb E[\beta_j]$: column 0 (the true input) stands far above
# every noise input (the printed ratios say by how much), so the noise inputs are switched off
# as a whole. The right panels show the relevance $1/\mathbb E[\text{precision of } w_{ij}]$
# of every cell. For the p-grid the centres (left panels) are selected too: a few centres carry
# the fit, as in the RVM. For the s-grid the centre panel looks very different, with every
# $1/\mathbb E[\alpha_i]$ huge: section 5 explains this "handing over" of the rows to the
# columns, which turns the s-grid here into one shared (ridge) precision per input dimension.
#
# The `n_relevant` column of the table above counts, for every model by the same rule
# (`result.relevant`), the cells whose weight the data support given all the other weights: the
# ELBO with that weight in the model at its best precision of its own beats the ELBO with it out
# ($q_k^2 > s_k$). It judges each cell as if it had a precision of its own, which the grid models
# do not give it: a grid model's count says which single bumps the data back given the fit, not
# how many precisions the model switched on, so read it next to the precision panels rather than
# as the size of the model.
#
# ## 3. The sum rule needs a second bound: the log-sum bound (31)
#
# For the p-grid every term of the ELBO is available in closed form:
# $\mathbb E[\ln(\alpha_i\beta_j)] = \mathbb E[\ln\alpha_i] + \mathbb E[\ln\beta_j]$. For the
# s-grid the prior term $\ln p(w_{ij}\mid\alpha,\beta)$ contains $\ln(\alpha_i + \beta_j)$, and
# $\mathbb E_q[\ln(\alpha_i+\beta_j)]$ under two independent Gamma factors has no closed form
# that keeps the updates conjugate. The trick (eq. (31)): in log coordinates
# $u = \ln\alpha$, $v = \ln\beta$ the function $f(u, v) = \ln(e^u + e^v)$ is **convex**, so it
# lies above each of its tangent planes. The tangent plane at $(\ln\eta, \ln\zeta)$ is
#
# $$\ln(\alpha+\beta) \;\ge\; \ln(\eta+\zeta) + \frac{\eta\,(\ln\alpha - \ln\eta) + \zeta\,(\ln\beta - \ln\zeta)}{\eta+\zeta},$$
#
# with equality when $\alpha/\beta = \eta/\zeta$. The right-hand side is **linear in
# $\ln\alpha$ and $\ln\beta$**, so its expectation needs only $\mathbb E[\ln\alpha_i]$ and
# $\mathbb E[\ln\beta_j]$, and $q(\alpha_i)$, $q(\beta_j)$ stay Gamma: the shape updates (33)-(34)
# get fractional counts, the **responsibilities**
# $r_{ij} = \eta_{ij}/(\eta_{ij}+\zeta_{ij})$ of the row and $1 - r_{ij}$ of the column.
# Maximising the expected bound over $(\eta, \zeta)$ puts the tangent point at the mean of
# $(u, v)$ under $q$: $\eta_{ij} = \exp\mathbb E[\ln\alpha_i]$,
# $\zeta_{ij} = \exp\mathbb E[\ln\beta_j]$ (eq. (35)). There the expected bound equals
# $f(\mathbb E u, \mathbb E v)$, and what it loses is the **Jensen gap**
# $\mathbb E f(u, v) - f(\mathbb E u, \mathbb E v) \ge 0$: small when $q(\alpha_i)$ and
# $q(\beta_j)$ are concentrated in log space ($\mathrm{Var}\ln\alpha = \psi'(a)$, about $1/a$
# for shape $a$), large when they are broad.
#
# Left: a one-dimensional slice of the bound (the paper's Fig. 2 right, $\beta = 3$, tangent at
# $(\eta, \zeta) = (2, 4)$). Right: the gap for one cell with $\alpha \sim \mathrm{Gamma}(a, a)$
# (mean 1) and $\beta \sim \mathrm{Gamma}(5, 5/3)$ (mean 3) as the shape $a$ of $q(\alpha)$
# grows, using the exact $\mathbb E[\ln(\alpha+\beta)]$ from a one-dimensional quadrature
# (`bounds.expected_log_sum_gamma`). The bound depends on $(\eta, \zeta)$ only through the
# ratio $\eta/\zeta$ ($\ln(e^u + e^v)$ grows linearly along the direction $u = v$, so shifting
# the tangent point along it does not move the plane), so for comparison we also put the
# tangent point at the ratio of the means, $\eta/\zeta = \mathbb E\alpha / \mathbb E\beta$.
# (As $a$ grows, the gap levels off at what the fixed width of $q(\beta)$ alone costs.)

# %%
x = np.geomspace(0.05, 30, 300)
y, eta, zeta = 3.0, 2.0, 4.0
tangent = np.log(eta + zeta) + (eta * (np.log(x) - np.log(eta)) + zeta * (np.log(y) - np.log(zeta))) / (eta + zeta)

shapes = np.geomspace(0.25, 100, 40)   # quadrature needs a total shape >= 1/2
c_beta = np.full_like(shapes, 5.0)
exact = np.asarray(bounds.expected_log_sum_gamma([shapes, c_beta], [shapes, c_beta / 3.0]))
e_log = [digamma(shapes) - np.log(shapes), digamma(c_beta) - np.log(c_beta / 3.0)]   # E[ln alpha], E[ln beta]
at_optimum = np.asarray(bounds.log_sum_bound(e_log, e_log)[0])                       # eta, zeta from (35)
at_means = np.asarray(bounds.log_sum_bound(e_log, [np.zeros_like(shapes), np.full_like(shapes, np.log(3.0))])[0])

fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
axes[0].semilogx(x, np.log(x + y), "k", label=r"$\ln(\alpha + 3)$")
axes[0].semilogx(x, tangent, "C3--", label=r"bound (31), $\eta=2, \zeta=4$")
axes[0].axvline(eta * y / zeta, color="0.8", lw=0.8)
axes[0].set(xlabel=r"$\alpha$", title=r"tight where $\alpha/\beta = \eta/\zeta$")
axes[0].legend()
axes[1].loglog(shapes, exact - at_optimum, "C0", label=r"gap at $\eta=e^{E\ln\alpha}, \zeta=e^{E\ln\beta}$ (35)")
axes[1].loglog(shapes, exact - at_means, "C1--", label=r"gap at $\eta/\zeta=E\alpha/E\beta$")
axes[1].set(xlabel="shape a of q(alpha)", ylabel="nats lost per cell",
            title=r"$E[\ln(\alpha+\beta)]$ minus its bound")
axes[1].legend(fontsize=8)
plt.tight_layout()
plt.show()
print(f"gap at (35): {exact[0] - at_optimum[0]:.3g} nats for shape {shapes[0]:.2g}, "
      f"{exact[-1] - at_optimum[-1]:.3g} nats for shape {shapes[-1]:.3g}")
print(f"gap with the ratio of the means: {exact[0] - at_means[0]:.3g} nats for shape {shapes[0]:.2g}; "
      f"never smaller than at (35): {bool(np.all(at_means <= at_optimum + 1e-12))}")

# %% [markdown]
# The fitted s-grids report the nats the bound loses, summed over all cells and with the
# factor 1/2 of the Gaussian log density, in `res.bound_gaps`; `res.elbo_exact` is the ELBO of
# the same $q$ with every $\mathbb E[\ln(\alpha_i+\beta_j)]$ computed by quadrature, so
# `elbo_exact - elbo` must be the same number:

# %%
for k in NOISE_FEATURES:
    res = sinc[k]["fits"]["s-grid"]
    print(f"sinc, k = {k:2d}: bound_gaps = {res.bound_gaps}, elbo_exact - elbo = {res.elbo_exact - res.elbo:.3g}")

# %% [markdown]
# On the sinc the gap is tiny. With the rows handed over to the columns (section 5),
# $\mathbb E[\alpha_i]$ is negligible next to $\beta_j$, so $\ln(\alpha_i + \beta_j)$ is
# practically $\ln\beta_j$, which the bound captures exactly ($r_{ij} \approx 0$). We will meet
# larger gaps on the digits below.
#
# ## 4. A real table: 8 x 8 images of handwritten digits
#
# scikit-learn's digits as pixel tables ($8 \times 8$, intensities standardised pixel by pixel),
# two classes: digits 0-4 (label 1) against 5-9 (label 0). The flat RVM classifier has 64
# precisions, the grid models $8 + 8 = 16$: one per pixel row, one per pixel column. Both use
# the Jaakkola-Jordan bound on the logistic likelihood (and the s-grid also the log-sum bound).

# %%
digit_rows, digit_fits = [], {}
for n in DIGIT_SIZES:
    g = datasets.digits_table(n, seed=0)
    fits = {
        "rvm": cavi(rvm.classification, g.X_train.reshape(n, -1), g.t_train),
        "p-grid": cavi(grid_rvm.classification, g.X_train, g.t_train, kind="p"),
        "s-grid": cavi(grid_rvm.classification, g.X_train, g.t_train, kind="s"),
    }
    digit_fits[n] = (g, fits)
    for name, res in fits.items():
        X_new = g.X_test.reshape(len(g.X_test), -1) if name == "rvm" else g.X_test
        error = float(np.mean((res.predict(X_new) > 0.5) != g.t_test))
        digit_rows.append(dict(n_train=n, model=name, sweeps=res.num_sweeps, converged=res.converged,
                               elbo=res.elbo, elbo_exact=res.elbo_exact, bound_gaps=res.bound_gaps,
                               test_error=error, n_relevant=int(res.relevant.sum())))
digit_table = pd.DataFrame(digit_rows)
print(digit_table.drop(columns="bound_gaps").to_string(index=False, float_format=lambda v: f"{v:.4f}"))
print()
for r in digit_rows:
    if r["model"] != "rvm":
        print(f"n = {r['n_train']:3d} {r['model']}: bound gaps (nats) "
              + ", ".join(f"{k} {v:.3f}" for k, v in r["bound_gaps"].items()))

fig, ax = plt.subplots(figsize=(6, 3.5))
for name, colour in zip(("rvm", "p-grid", "s-grid"), ("0.6", "k", "C0")):
    sub = digit_table[digit_table.model == name]
    ax.plot(sub.n_train, sub.test_error, "o-", color=colour, label=name)
ax.set(xscale="log", xlabel="training images", ylabel="test error", title="digits 0-4 vs 5-9")
ax.legend()
plt.tight_layout()
plt.show()
best = digit_table.loc[digit_table.groupby("n_train").test_error.idxmin(), ["n_train", "model"]]
print("lowest test error:", ", ".join(f"n = {n}: {m}" for n, m in best.itertuples(index=False)))

# %% [markdown]
# Compare the test errors yourself (the line below the plot says which model had the lowest test
# error at each size): on this problem the grid models do **not** beat the flat RVM. Coupling
# the precisions is an assumption about the problem: that relevance factorises into a row effect
# and a column effect. For the sinc table that is exactly right (a noise input is irrelevant at
# every centre). For a digit it is not: the pixels that separate 0-4 from 5-9 follow the
# strokes, and a map "row effect times (or plus) column effect" cannot pick out a stroke in the
# middle of the image without also switching on, or off, its whole row and column. The maps make
# this visible (largest training size; the flat RVM's map is $-\log_{10}\mathbb E[\alpha_k]$ per
# pixel, darker is more relevant, as in the grid models' cell images):

# %%
n_show = max(DIGIT_SIZES)
g, fits = digit_fits[n_show]
fig, axes = plt.subplots(2, 4, figsize=(16, 7))
e_alpha_flat = gamma_mean(fits["rvm"].state.alpha_shape, fits["rvm"].state.alpha_rate).reshape(8, 8)
for row, name in zip(axes, ("p-grid", "s-grid")):
    ppl_sbl.plot_grid_relevance(fits[name], axes=row[:3], axis_labels=("pixel row", "pixel column"))
    row[0].set_title(f"{name}: relevance per pixel row")
    row[1].set_title(f"{name}: relevance per pixel column")
im = axes[0, 3].imshow(-np.log10(e_alpha_flat), cmap="Greys")
axes[0, 3].set(title=r"flat RVM: $-\log_{10} E[\alpha_k]$ per pixel", xlabel="pixel column", ylabel="pixel row")
plt.colorbar(im, ax=axes[0, 3])
axes[1, 3].imshow(np.abs(g.X_train).mean(0), cmap="Greys")
axes[1, 3].set(title="mean |standardised pixel| (training)", xlabel="pixel column", ylabel="pixel row")

# pixels with (almost) no information: constant on the training set, or constant in >= 95% of
# the images
pixels = g.X_train.reshape(n_show, -1)
mode_share = np.array([np.unique(col, return_counts=True)[1].max() / n_show for col in pixels.T]).reshape(8, 8)
constant, rare = mode_share == 1.0, (mode_share >= 0.95) & (mode_share < 1.0)
for ax in (axes[0, 2], axes[1, 2], axes[0, 3]):
    for mask, marker in ((constant, "x"), (rare, ".")):
        r, c = np.nonzero(mask)
        ax.plot(c, r, marker, color="C3", ms=8, mew=2, ls="none")
plt.tight_layout()
plt.show()
print(f"n = {n_show}: flat RVM relevant pixels (row, column): "
      f"{[tuple(map(int, rc)) for rc in np.argwhere(fits['rvm'].relevant.reshape(8, 8))]}")
print(f"{int(constant.sum())} pixels constant on the training set (x), {int(rare.sum())} more with one value "
      f"in >= 95% of the images (.)")
if constant.any():
    print(f"flat RVM: E[alpha_k] of the constant pixels lies in [{e_alpha_flat[constant].min():.3g}, "
          f"{e_alpha_flat[constant].max():.3g}]")
for name in ("p-grid", "s-grid"):
    res = fits[name]
    e_row, e_col = (gamma_mean(a, b) for a, b in zip(res.state.shapes, res.state.rates))
    print(f"{name}: E[alpha_i] (rows) {np.array2string(e_row, precision=2, max_line_width=150)}")
    print(f"{' ' * len(name)}  E[beta_j] (columns) {np.array2string(e_col, precision=2, max_line_width=150)}")

# %% [markdown]
# The flat RVM keeps a scattered set of individual pixels. The grid maps are, by construction,
# a row profile combined with a column profile. Three caveats when reading these pictures:
#
# * Pixels marked **x** are constant on the training set, so all their features are 0 and the
#   data say nothing about their weights. Their precisions simply stay near where CAVI started
#   them (the printed range of the flat RVM's $\mathbb E[\alpha_k]$ there), which can look
#   "relevant" in a map but is not. Pixels marked **.** have one value in at least 95% of the
#   training images; after standardisation they hold a few large values and otherwise a
#   constant, so a weight on them acts as a detector of a rare stroke.
# * For the s-grid, a bar far above the others (look for $1/\mathbb E[\text{precision}]$ of
#   $10^4$ or more) usually marks a row or column that has handed its responsibility to the other
#   axis, with $\mathbb E[\beta_j] \approx 0$ (section 5 explains this): its cells are governed
#   by the other axis alone, so the bar says nothing about relevance. The printed
#   $\mathbb E[\alpha_i]$, $\mathbb E[\beta_j]$ show which.
# * The cell images, which combine both axes into the precision each weight actually gets,
#   are the safer read.
#
# ## 5. Ranking models by their ELBO, and what it means
#
# `ppl_sbl.compare` ranks fitted models by their ELBO (a lower bound on $\ln p(t)$). We add a
# fourth model to the sinc comparison: the flat RVR with **one** precision shared by all weights
# (Bayesian ridge, `groups=np.zeros(M, int)`).

# %%
d, T = big["data"], big["T"]
N, M1, M2 = T.shape
ridge = cavi(rvm.regression, T.reshape(N, -1), d.t_train, groups=np.zeros(M1 * M2, int))
big["fits"]["ridge"] = ridge
table = ppl_sbl.compare({"rvm": big["fits"]["rvm"], "p-grid": big["fits"]["p-grid"],
                         "s-grid": big["fits"]["s-grid"], "ridge": ridge})
T_test_flat = big["T_test"].reshape(len(d.t_test), -1)
table["test_rmse"] = [rmse(big["fits"][name].predict(T_test_flat if name in ("rvm", "ridge") else big["T_test"])[0],
                           d.t_test) for name in table.index]
print(f"noisy sinc with k = {K_MAX} noise inputs ({M1} x {M2} table):")
print(table.to_string(float_format=lambda v: f"{v:.4g}"))
print(f"highest ELBO: {table.index[0]}; lowest test RMSE: {table.test_rmse.idxmin()}")

# %% [markdown]
# Why are the ELBOs so far apart? Each precision $\lambda$ with prior
# $\mathrm{Gamma}(a_0, b_0)$ enters the ELBO through $-\mathrm{KL}(q(\lambda)\,\|\,p(\lambda))$.
# With the vague default $a_0 = b_0 = 10^{-6}$, the prior's normaliser alone contributes
# $\ln\Gamma(a_0) \approx \ln(1/a_0)$ nats of KL as soon as $q(\lambda)$ has a shape of order one,
# i.e. as soon as the data pin $\lambda$ down: an **Occam factor paid once per precision,
# fixed by the hyperprior rather than by the data**. Let us compute the KL of every precision
# factor of every model, and the rest of the ELBO (data fit and weight terms):

# %%
def gamma_kl(a, b, a0, b0):
    """KL(Gamma(a, b) || Gamma(a0, b0)), shape/rate, elementwise."""
    a, b, a0, b0 = (np.asarray(x, float) for x in (a, b, a0, b0))
    return ((a - a0) * digamma(a) - gammaln(a) + gammaln(a0) + a0 * (np.log(b) - np.log(b0))
            + a * (b0 - b) / b)


def precision_factors(res):
    """(shape, rate, prior shape, prior rate) of every precision factor of a fit: one for the RVM,
    one per axis for the grid (the default prior rates are on the data's scale: ``ppl_sbl.priors``)."""
    state, data = res.state, res.data
    if hasattr(state, "alpha_shape"):
        return [(state.alpha_shape, state.alpha_rate, data.a0, data.b0)]
    return list(zip(state.shapes, state.rates, data.prior_shapes, data.prior_rates))


print(f"ln Gamma(a0) = {gammaln(A0):.2f}, ln(1/a0) = {np.log(1 / A0):.2f}")
occam = {}
for name, res in big["fits"].items():
    kls = np.concatenate([gamma_kl(a, b, a0, b0) for a, b, a0, b0 in precision_factors(res)])
    paid = int(np.sum(kls > 1.0))
    occam[name] = kls.sum()
    print(f"{name:7}: {len(kls):4d} precisions, {paid:4d} of them cost > 1 nat; total KL {kls.sum():8.1f} nats "
          f"({kls.sum() / max(paid, 1):.2f} per paid precision); ELBO {res.elbo:8.1f}; "
          f"ELBO + KL = {res.elbo + kls.sum():8.1f}")

# %% [markdown]
# Read the last column: once the precision KLs are added back, the models are far closer
# than their ELBOs; most of the ELBO differences are the number of **paid** precisions times
# roughly $\ln(1/a_0)$ (the "per paid precision" column). So:
#
# * the flat RVR pays for $M_1 M_2$ precisions, the p-grid for $M_1 + M_2$, the ridge for one,
#   and their ELBOs are ordered accordingly;
# * the s-grid pays for far fewer than its $M_1 + M_2$ (the "cost > 1 nat" count). Under the sum
#   rule a row can hand **all** of its responsibility to the columns: when $r_{ij} \to 0$ for
#   every $j$, update (33) leaves $q(\alpha_i)$ at the prior shape $a_0$, with $\mathbb
#   E[\alpha_i] = a_0/b_i \approx 0$, and a Gamma factor still at its prior shape costs
#   essentially no KL. The precision of $w_{ij}$ is then $\beta_j$ alone: the s-grid has become
#   one shared ridge precision per input dimension. The counts below show how many rows (and
#   columns) did this:

# %%
for k in NOISE_FEATURES:
    s = sinc[k]["fits"]["s-grid"]
    row_shape, col_shape = np.asarray(s.state.shapes[0]), np.asarray(s.state.shapes[1])
    handed = row_shape < A0 + 1e-3
    print(f"sinc k = {k:2d}: {int(handed.sum())} of {len(row_shape)} rows at the prior shape "
          f"(max E[alpha_i] {gamma_mean(s.state.shapes[0], s.state.rates[0]).max():.2g}); "
          f"column shapes {np.array2string(col_shape, precision=2)}")
for n in DIGIT_SIZES:
    s = digit_fits[n][1]["s-grid"]
    for axis, label in ((0, "pixel rows"), (1, "pixel columns")):
        sh = np.asarray(s.state.shapes[axis])
        print(f"digits n = {n:3d}: {int(np.sum(sh < A0 + 1e-3))} of 8 {label} at the prior shape")

# %% [markdown]
# What the ELBO ranking tells us, then: with vague hyperpriors it is dominated by how many
# precisions a model *uses*, at about $\ln(1/a_0)$ nats each, a price set by the hyperprior and
# not by the data. Compare the two lines printed under the `compare` table: the model with the
# highest ELBO need not be the most accurate. The ridge pays for a single precision, but that
# one precision must serve the signal input and the noise inputs alike, so it cannot fit the
# sinc without also fitting the noise: compare its test RMSE with the grid models'. The digits
# tell the same story: the grid models (16 precisions) have ELBOs far above the flat RVM (64
# precisions), and a higher test error. An ELBO comparison between models with different numbers
# of hyperparameters is only as meaningful as the hyperpriors (try exercise 2).
#
# ## 6. Are the closed-form guides right? `check_guide`
#
# `check_guide` builds a NumPyro guide from the fitted $q$ and lets NumPyro's `Trace_ELBO`
# average $\ln p(t, w, \alpha, \beta, \gamma) - \ln q(w, \alpha, \beta, \gamma)$ over draws from
# $q$, replaying the model program of section 1.
#
# * **p-grid**: no local bound is involved, so the analytic ELBO must equal the Monte Carlo
#   value up to its standard error.
# * **s-grid**: the analytic objective uses the log-sum bound, so it must lie *below* the Monte
#   Carlo value, and `elbo_exact` (quadrature) must *equal* it.
#
# We use the sinc table with two noise inputs.

# %%
k_check = 2
check_p = ppl_sbl.check_guide(sinc[k_check]["fits"]["p-grid"], num_particles=N_PARTICLES)
print("p-grid:", check_p.message)
assert check_p.passed, check_p.message


# %% [markdown]
# The s-grid fitted with the default priors cannot be checked this way: its handed-over rows
# keep $q(\alpha_i) = \mathrm{Gamma}(a_0 + \tfrac12\sum_j r_{ij}, b_i)$ with a shape of about
# $10^{-6}$, and almost every draw of such a factor underflows to exactly 0 in float64, where
# the log densities are not finite. (`check_guide` notices this and says so in its message
# instead of returning a number.) The probability of such a draw, for the rows of that fit:

# %%
s_default = sinc[k_check]["fits"]["s-grid"]
tiny = np.finfo(np.float64).tiny
p_zero = scipy.stats.gamma(a=np.asarray(s_default.state.shapes[0]), scale=1 / np.asarray(s_default.state.rates[0])).cdf(tiny)
print(f"P(alpha_i < {tiny:.1e}) under q: min {p_zero.min():.5f}, median {np.median(p_zero):.5f} over the {len(p_zero)} rows")

# %% [markdown]
# The check is about the algebra of the guide, not about these priors, so we refit the s-grid
# on the same table with moderate priors $a_0 = b_0 = c_0 = d_0 = 1/2$:

# %%
d2, T2 = sinc[k_check]["data"], sinc[k_check]["T"]
s_moderate = cavi(grid_rvm.regression, T2, d2.t_train, kind="s", a0=0.5, b0=0.5, c0=0.5, d0=0.5)
print(s_moderate)
print(f"bound gap: {s_moderate.bound_gaps}")
check_s = ppl_sbl.check_guide(s_moderate, num_particles=N_PARTICLES)
print("s-grid, priors 1/2:", check_s.message)
assert check_s.passed, check_s.message

# %% [markdown]
# ## 7. ELBO traces: monotone, but slow for the p-grid
#
# Every CAVI update maximises the ELBO over one factor with the others fixed, and the updates
# of $\eta, \zeta$ (35) maximise the bound, so the traces can never go down. The number of
# sweeps differs a lot between the models, though:

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
for name, colour in zip(("rvm", "p-grid", "s-grid"), ("0.6", "k", "C0")):
    res = big["fits"][name]
    steps = np.diff(res.elbo_trace)
    assert np.all(steps >= -1e-8 * abs(res.elbo)), f"{name}: the ELBO decreased"
    ppl_sbl.plot_elbo_trace(res, ax=axes[0], color=colour, label=name)
    distance = np.maximum(res.elbo - res.elbo_trace, 1e-12)
    axes[1].semilogy(np.arange(1, res.num_sweeps + 1), distance, color=colour, label=name)
    within = int(np.argmax(distance < 1.0)) + 1
    print(f"{name:7}: {res.num_sweeps:6d} sweeps (converged: {res.converged}); within 1 nat of the final "
          f"ELBO after {within} sweeps; smallest step {steps.min():.2e}")
axes[0].set_ylim(min(f.elbo for f in big["fits"].values()) - 200, max(f.elbo for f in big["fits"].values()) + 50)
axes[0].legend()
axes[1].set(xlabel="sweep", ylabel="final ELBO - ELBO", title="distance to the final ELBO")
axes[1].legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# Why is the p-grid slow? The prior of the weights, $p(w \mid \alpha, \beta)$, depends on
# $\alpha$ and $\beta$ only through the products $\alpha_i\beta_j$, which do not change under
# $\alpha \to c\,\alpha$, $\beta \to \beta/c$. Moving $q$ along that direction (scaling the
# rates of every $q(\alpha_i)$ by $1/c$ and of every $q(\beta_j)$ by $c$) changes the ELBO only
# through terms proportional to the hyperparameters $a_0, b_0, c_0, d_0$, so with vague priors
# the ELBO is almost flat along it. Coordinate ascent updates $\alpha$ given $\beta$, then
# $\beta$ given $\alpha$, and along such a flat, strongly coupled direction it moves in tiny
# steps. The one-column table ($k = 0$) shows this most plainly, because there
# $\alpha_i\beta_0$ is all the model uses. We stop a copy of that p-grid fit at the sweep where
# its ELBO first comes within 0.1 nats of the final value and compare the two.

# %%
p_final = sinc[0]["fits"]["p-grid"]
d0_, T0_ = sinc[0]["data"], sinc[0]["T"]
early = int(np.argmax(p_final.elbo - p_final.elbo_trace < 0.1)) + 1
with warnings.catch_warnings():  # stopped before convergence on purpose: no ConvergenceWarning
    warnings.simplefilter("ignore", ppl_sbl.ConvergenceWarning)
    p_early = cavi(grid_rvm.regression, T0_, d0_.t_train, kind="p", max_sweeps=early)


def log_means(res):
    return [np.log(gamma_mean(a, b)) for a, b in zip(res.state.shapes, res.state.rates)]


(la0, lb0), (la1, lb1) = log_means(p_early), log_means(p_final)
kept = p_final.relevant                       # one column: cell i is centre i
cell_shift = (la1 + lb1[0]) - (la0 + lb0[0])  # change of ln(E[alpha_i] E[beta_0])
pred0, pred1 = p_early.predict(sinc[0]["T_test"])[0], p_final.predict(sinc[0]["T_test"])[0]
print(f"sweeps {early} -> {p_final.num_sweeps} (converged: {p_final.converged}): "
      f"ELBO {p_early.elbo:.3f} -> {p_final.elbo:.3f}")
print(f"ln E[beta_0] moved by {lb1[0] - lb0[0]:+.2f}; ln E[alpha_i] of the {int(kept.sum())} relevant centres "
      f"by {np.median(la1[kept] - la0[kept]):+.2f} (median)")
print(f"their products ln(E[alpha_i] E[beta_0]) moved by at most {np.max(np.abs(cell_shift[kept])):.3f}")
print(f"largest change of the test predictions: {np.max(np.abs(pred1 - pred0)):.2e}")

# %% [markdown]
# Read the printout: over the late sweeps, the scale of $\beta_0$ and that of the relevant
# $\alpha_i$ move by similar amounts in opposite directions, while their products, and with
# them the predictions, hardly move, for a fraction of a nat of ELBO. If you only need
# predictions, a looser `tol` is usually enough for the p-grid; for an ELBO comparison, let it
# converge.
#
# ## Summary
#
# * A grid RVM gives one precision to each **row** and each **column** of a table of features
#   ($M_1 + M_2$ instead of the flat RVM's $M_1 M_2$), combined by the product (p-grid) or the
#   sum (s-grid). Under the sum rule a large row or column precision switches off the whole row
#   or column; under the product rule the other factor can compensate it.
# * Fewer precisions means fewer chances to tune a precision to the noise: with per-dimension
#   RBF tables, the grid models' test error grows far less than the flat RVR's as noise inputs
#   are added, and the column precisions single out the one informative input.
# * The coupling is an assumption. On the digit images, whose relevant pixels do not factorise
#   into rows and columns, the flat RVM predicted better (the printed comparison by training
#   size).
# * The s-grid needs the log-sum bound (31), the tangent plane of the convex
#   $\ln(e^u + e^v)$ in log space, tight in expectation up to a Jensen gap when
#   $\eta = \exp\mathbb E\ln\alpha$, $\zeta = \exp\mathbb E\ln\beta$ (35); `bound_gaps` and
#   `elbo_exact - elbo` measure that gap.
# * With vague hyperpriors the ELBO charges about $\ln(1/a_0)$ nats per precision the data pin
#   down, so ELBO rankings favour models with fewer precisions (ridge, grids, and especially an
#   s-grid whose rows hand their responsibility to the columns), whatever the test error says.
# * `check_guide` confirms the algebra: the p-grid's ELBO equals NumPyro's Monte Carlo ELBO;
#   the s-grid's bound lies below it and its quadrature ELBO equals it.
# * The p-grid's ELBO is nearly flat along $\alpha \to c\alpha$, $\beta \to \beta/c$, so CAVI
#   needs many sweeps there.
#
# ## Exercises
#
# 1. Add more noise inputs to the sinc (the paper goes up to 20). Where does the flat RVR's
#    test error level off? Do the grid models' $\mathbb E[\beta_j]$ for the noise inputs stay
#    large?
# 2. Refit the sinc models with $a_0 = b_0 = c_0 = d_0 = 10^{-2}$ (and the RVR with
#    $a_0 = b_0 = 10^{-2}$). How do the ELBO differences in the `compare` table change? Does the
#    s-grid still hand its rows over?
# 3. Fit the digits with the images transposed (`g.X_train.transpose(0, 2, 1)`). Which results
#    change and which do not, for each of the three models?
# 4. Use the ordinary RBF basis `basis.rbf(d.X_train, delta=DELTA)` (one column per centre,
#    distances over all inputs) as an $N \times 1$ table for the grid models (`Phi[:, :,
#    None]`). How do they compare with the flat RVR there, and why?
# 5. Tables with more than two axes: `grid_rvm.regression` accepts $(N, M_1, M_2, M_3)$ arrays
#    with `axis_priors=[(a, b)] * 3`. Build a table of (centre, input dimension, RBF width)
#    with two or three widths and see which width the third axis selects.

# %%
print(f"total run time: {time.perf_counter() - START:.1f} s")
