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
# # Super-sparse machines: a handful of learned prototypes instead of hundreds of support vectors
#
# A kernel machine predicts with $f(x) = \sum_i \alpha_i k(x, x_i) + b$ over its support
# vectors: every prediction compares the new point with each of them. An SVM on a few thousand
# points easily keeps hundreds, and in biometrics (where a "comparison" may be an expensive
# matching algorithm run on a smart card) that is the cost that matters. Biggio et al. keep the
# form of the machine but let its reference points move: $m$ **virtual prototypes** $c_j$, not
# tied to the training set, learned jointly with the coefficients,
#
# $$f(x) = \sum_{j=1}^m \beta_j\, s(x, c_j) + b \qquad (1)$$
#
# by minimising the weighted squared error with a ridge penalty,
# $\Omega = \frac1n \sum_i v_i (y_i - f(x_i))^2 + \lambda \beta^\top\beta$ (2). You will:
#
# 1. reduce an RBF SVM on a 2-D problem to four virtual prototypes and **watch them move**
#    during training;
# 2. see that the coefficient step (4) is an ordinary weighted ridge regression (checked against
#    scikit-learn) and the posterior mean of a NumPyro program;
# 3. verify handwritten digits with two prototypes per class and look at the prototypes as
#    **images**;
# 4. choose $m$ two ways: the paper's incremental validation rule (8) and the **evidence** of an
#    ARD relevance vector machine over the prototypes, ranked with `ppl_sbl.compare`;
# 5. use a similarity that JAX cannot differentiate, with the paper's direction rule (7);
# 6. tune $m$ with scikit-learn's `GridSearchCV`.
#
# Equation numbers are those of Biggio et al.'s paper on super-sparse learning (the paper's own
# numbering). Every number quoted below is computed in this notebook. Set `PPL_SBL_QUICK=1` for a
# smaller, faster run (what the test-suite does); read the printed output rather than the prose for
# exact values.

# %%
import os
import time

import matplotlib

QUICK = os.environ.get("PPL_SBL_QUICK", "0") == "1"
if QUICK:
    matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_moons
from sklearn.decomposition import PCA
from sklearn.linear_model import Ridge
from sklearn.metrics import pairwise_distances, roc_auc_score
from sklearn.metrics.pairwise import laplacian_kernel
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.svm import SVC

import ppl_sbl
from ppl_sbl import datasets
from ppl_sbl.estimators import SuperSparseClassifier
from ppl_sbl.models import super_sparse as ss

STEPS = 60 if QUICK else 300
N_MOONS = 300 if QUICK else 1000
N_DIGITS = 300 if QUICK else 1000
DIGIT_MS = (1, 2) if QUICK else (1, 2, 4)                 # prototypes per digit machine (section 4)
M_GRID = (5, 4, 3, 2) if QUICK else (6, 5, 4, 3, 2, 1)    # m for rule (8) and the evidence (section 5);
# quick: from above the true m = 3, and through the m = 2 and 4 of the grid search in section 7
print("quick mode" if QUICK else "full mode", "| float64:", np.asarray(ss.similarity_matrix(np.ones((1, 1)),
                                                                                               np.ones((1, 1)))).dtype)

# %% [markdown]
# ## 1. An SVM and its support vectors
#
# Two interleaved half-moons with noise. An RBF SVM separates them well, but look at how many
# training points it keeps: every circled point is evaluated for every prediction.

# %%
X_all, t_all = make_moons(N_MOONS + 2000, noise=0.25, random_state=0)
y_all = np.where(t_all == 1, 1.0, -1.0)
X, X_test, y, y_test = train_test_split(X_all, y_all, train_size=N_MOONS, random_state=0)
gamma = 1.0
svc = SVC(kernel="rbf", gamma=gamma, C=1.0).fit(X, y)
print(f"SVC: {len(svc.support_)} support vectors out of {len(X)} training points, "
      f"test accuracy {svc.score(X_test, y_test):.3f}")

grid = np.stack(np.meshgrid(np.linspace(-2, 3, 150), np.linspace(-1.5, 2, 120)), -1).reshape(-1, 2)


def draw_boundary(ax, fun, **kw):
    ax.contour(grid[:, 0].reshape(120, 150), grid[:, 1].reshape(120, 150), fun(grid).reshape(120, 150), [0], **kw)


fig, ax = plt.subplots(figsize=(6, 4))
ax.scatter(*X.T, c=y, cmap="coolwarm", s=8, alpha=0.6)
ax.scatter(*X[svc.support_].T, s=40, facecolors="none", edgecolors="k", lw=0.6, label="support vectors")
draw_boundary(ax, svc.decision_function, colors="k")
ax.set_title(f"RBF SVM: {len(svc.support_)} kernel evaluations per prediction")
ax.legend(loc="lower left", fontsize=8)
plt.show()

# %% [markdown]
# ## 2. Four virtual prototypes, moving
#
# The paper's recommendation for reducing a trained kernel machine: use its decision values
# $g(x_i)$ on the training points as regression targets, and fit (1) to them
# (`fit_to_decision_values`). Training alternates two steps:
#
# * the **beta-step** (4): with the prototypes fixed, $(\beta, b)$ solve weighted ridge normal
#   equations;
# * the **c-step** (5)-(6): a gradient step on every prototype, the gradient of $\Omega$ taken by
#   automatic differentiation *through* the solve of (4) (so it includes how $\beta$ and $b$
#   respond), halved until $\Omega$ goes down; early on, a repulsion term that decays as $1/t$
#   keeps prototypes that start close together from collapsing onto each other.
#
# `trace_prototypes=True` keeps the prototypes after every step, so we can draw their paths.

# %%
t0 = time.perf_counter()
res = ss.fit_to_decision_values(svc, X, m=4, gamma=gamma, max_steps=STEPS, seed=1, trace_prototypes=True)
print(f"{res.steps} steps in {time.perf_counter() - t0:.1f} s (stop: {res.stop_reason}); "
      f"Omega {res.objective_trace[0]:.4f} -> {res.objective:.4f}")
acc = np.mean(np.sign(res.decision_function(X_test)) == y_test)
agree = np.mean(np.sign(res.decision_function(X_test)) == np.sign(svc.decision_function(X_test)))
print(f"super-sparse, m = 4: test accuracy {acc:.3f} (SVC {svc.score(X_test, y_test):.3f}); "
      f"agrees with the SVC on {agree:.1%} of the test points, with {res.m} instead of {len(svc.support_)} "
      "kernel evaluations per prediction")

# %%
fig, ax = plt.subplots(1, 2, figsize=(12, 4.2))
ax[0].scatter(*X.T, c=y, cmap="coolwarm", s=6, alpha=0.35)
draw_boundary(ax[0], svc.decision_function, colors="k", linestyles="--")
draw_boundary(ax[0], res.decision_function, colors="tab:green")
path = res.prototype_trace
for j in range(res.m):
    ax[0].plot(path[:, j, 0], path[:, j, 1], "-", color="tab:green", lw=1)
    ax[0].plot(*path[0, j], "o", color="tab:green", mfc="white", ms=7)
    ax[0].plot(*path[-1, j], "*", color="tab:green", ms=14, mec="k")
    ax[0].annotate(f"beta {res.beta[j]:+.2f}", path[-1, j], xytext=(6, 6), textcoords="offset points", fontsize=8)
ax[0].set_title("prototypes from training points (o) to their learned places (*);\n"
                "SVC boundary dashed, super-sparse boundary green", fontsize=9)
ax[1].semilogy(res.objective_trace - res.objective_trace.min() + 1e-6 * res.objective_trace.min())
ax[1].set_xlabel("c-step")
ax[1].set_ylabel("Omega - final Omega (log scale)")
ax[1].set_title("the objective (2) along the alternation", fontsize=9)
plt.tight_layout()
plt.show()

# %% [markdown]
# The prototypes start on training points and drift to where they summarise their class best:
# roughly the centres of each moon's arms, away from the boundary. That is the opposite of
# support vectors, which sit *on* the boundary. The coefficient signs say which class a
# prototype speaks for.
#
# ## 3. The beta-step is ridge regression, and a posterior mean
#
# With the prototypes fixed, (2) is a weighted ridge regression on the similarity features
# $S_{ij} = s(x_i, c_j)$ with an unpenalised intercept. scikit-learn's `Ridge` minimises
# $\sum_i v_i (y_i - f(x_i))^2 + \alpha \|\beta\|^2$, so $\alpha = n\lambda$ must give the same
# coefficients: an independent check of `beta_step`.

# %%
v = np.random.default_rng(0).uniform(0.5, 2.0, len(X))
S = np.asarray(ss.similarity_matrix(X, res.prototypes, "rbf", gamma))
g = svc.decision_function(X)
beta, b = (np.asarray(a) for a in ss.beta_step(S, g, v, 1e-3))
ridge = Ridge(alpha=len(X) * 1e-3).fit(S, g, sample_weight=v)
print("largest difference to scikit-learn's Ridge: beta", np.max(np.abs(beta - ridge.coef_)),
      " b", abs(float(b) - ridge.intercept_))

# %% [markdown]
# The same computation has a probabilistic reading, which is how the library connects this
# model to the rest of sparse Bayesian learning: `ss.model` is the NumPyro program
# $\beta_j \sim \mathcal N(0, 1/(n\lambda\tau))$, a flat prior on $b$, and
# $y_i \sim \mathcal N(f(x_i), 1/(\tau v_i))$. Its log posterior over $(\beta, b)$ is
# $-\frac{n\tau}{2}\Omega + \text{const}$, so the beta-step is its posterior mean for any noise
# precision $\tau$, and the prototypes are parameters of the program. Section 5 swaps the fixed
# ridge prior for ARD precisions to get an evidence for $m$.
#
# ## 4. Digits: verification with two prototypes per client
#
# The paper's application is biometric verification: is this person who they claim to be? Here
# each handwritten digit class plays a client, all other digits the impostors. As in the
# paper's eigenface setting the images go through PCA (95% of the variance) and the similarity is
# an RBF with $\gamma = 1/\text{median squared distance}$.

# %%
d = datasets.digits(N_DIGITS, seed=0)
pca = PCA(n_components=0.95, svd_solver="full").fit(d.X_train)
Xd, Xd_test = pca.transform(d.X_train), pca.transform(d.X_test)
sq = pairwise_distances(Xd, metric="sqeuclidean")
gamma_d = 1.0 / float(np.median(sq[np.triu_indices(len(Xd), 1)]))
client = 3
yd, yd_test = np.where(d.t_train == client, 1.0, -1.0), np.where(d.t_test == client, 1.0, -1.0)
svc_d = SVC(kernel="rbf", gamma=gamma_d, C=10.0).fit(Xd, yd)
gd = svc_d.decision_function(Xd)
print(f"PCA to {pca.n_components_} dimensions, gamma = {gamma_d:.4f}; SVC for client '{client}': "
      f"{len(svc_d.support_)} support vectors, test AUC {roc_auc_score(yd_test, svc_d.decision_function(Xd_test)):.4f}")

rows = []
for m in DIGIT_MS:
    r = ss.fit_to_decision_values(svc_d, Xd, m=m, gamma=gamma_d, max_steps=STEPS, seed=0, trace_prototypes=True)
    rand = ss.fit(Xd, gd, m=m, gamma=gamma_d, max_steps=0, seed=0)  # random training images, beta-step only
    rows.append((m, roc_auc_score(yd_test, r.decision_function(Xd_test)),
                 roc_auc_score(yd_test, rand.decision_function(Xd_test)), r))
    print(f"m = {m}: AUC learned prototypes {rows[-1][1]:.4f}, random training images {rows[-1][2]:.4f} "
          f"({m} similarity evaluations per test image)")

# %% [markdown]
# Learned prototypes beat the same number of randomly chosen training images by a wide margin,
# and a couple of them come close to the SVM. What do they look like? Map them back to pixels
# with the PCA's inverse transform, at a few moments of training:

# %%
r2 = next(r for m, _, _, r in rows if m == 2)
moments = np.unique(np.linspace(0, r2.steps, 4).astype(int))
fig, ax = plt.subplots(2, len(moments), figsize=(2.2 * len(moments), 4.6), squeeze=False)
for k, t in enumerate(moments):
    images = pca.inverse_transform(r2.prototype_trace[t])
    for j in range(2):
        ax[j, k].imshow(np.clip(images[j].reshape(8, 8), 0, 1), cmap="gray_r", vmin=0, vmax=1)
        ax[j, k].set_title(f"step {t}" + (f", beta {r2.beta[j]:+.2f}" if t == r2.steps else ""), fontsize=8)
        ax[j, k].axis("off")
fig.suptitle(f"client '{client}': the two virtual prototypes from training images to learned images", fontsize=9)
plt.tight_layout()
plt.show()

# %% [markdown]
# The prototype with a positive coefficient turns into a smooth, "average" 3: a virtual image
# that is no single training digit but summarises the client. The negative one becomes a
# blend of impostor digits. This is the interpretability argument of the paper: a decision
# reads as "close to this 3 and far from that non-3".
#
# ## 5. How many prototypes? Validation (8) and evidence
#
# The paper picks $m$ by minimising $L_\text{val}(m) + \mu m$ (8) over a decreasing grid, each
# smaller machine warm-started from the larger one after dropping the prototypes with the
# smallest $|\beta_j|$ (`select_m`). The library adds a Bayesian answer that needs no held-out
# data: replace the fixed ridge prior by an ARD precision per coefficient (a relevance vector
# machine over the prototypes and a bias, fitted by closed-form CAVI) and score each $m$ by its
# ELBO, a lower bound on the log evidence. Each extra prototype then has to pay for itself: the
# Occam factor of its precision's hyperprior costs about 14 nats unless the data need it.
#
# A regression where we know the answer: three Gaussian bumps in 2-D plus noise of standard
# deviation 0.1.

# %%
rng = np.random.default_rng(0)
centres = np.array([[-1.5, -1.0], [1.0, 1.5], [1.5, -1.5]])


def bumps(n):
    Z = rng.uniform(-3, 3, (n, 2))
    f = np.exp(-0.5 * pairwise_distances(Z, centres, metric="sqeuclidean")) @ np.array([2.0, -1.5, 1.0]) + 0.5
    return Z, f + 0.1 * rng.standard_normal(n)


Z, u = bumps(200 if QUICK else 400)
Z_val, u_val = bumps(200)
m_grid = M_GRID
best, table = ss.select_m(Z, u, Z_val, u_val, grid=m_grid, mu=0.0, gamma=0.5, max_steps=STEPS, seed=0)
scores, fits = ss.evidence_over_m(Z, u, grid=m_grid, gamma=0.5, max_steps=STEPS, seed=0)
ranked = ppl_sbl.compare({f"m = {m}": scores[m] for m in m_grid})
print(table[["m", "validation_loss", "objective", "steps"]].to_string(index=False))
print(f"rule (8) picks m = {best.m}")
print(ranked[["rank", "elbo", "d_elbo", "n_relevant"]].to_string())

# %%
fig, ax = plt.subplots(1, 2, figsize=(11, 3.8))
ax[0].semilogy(table["m"], table["validation_loss"], "o-")
ax[0].set_xlabel("m")
ax[0].set_ylabel("validation MSE")
ax[0].axhline(0.01, color="gray", ls=":", label="noise variance")
ax[0].legend()
ax[0].set_title("rule (8): validation loss against m", fontsize=9)
ax[1].plot(list(m_grid), [float(scores[m].elbo) for m in m_grid], "s-", color="tab:purple")
ax[1].set_xlabel("m")
ax[1].set_ylabel("ELBO (nats)")
ax[1].set_title("evidence: ELBO of the ARD RVM over the prototypes", fontsize=9)
plt.tight_layout()
plt.show()

# %% [markdown]
# Below the true three prototypes the validation loss is far above the noise level; from three
# on it sits at it and extra prototypes buy nothing, so (8) with any price $\mu > 0$ would stop at
# three. The ELBO says the same without a validation set: it rises steeply up to the true $m$
# and then falls by roughly the Occam factor per superfluous prototype (each has to be switched
# off by its ARD precision). The fit is not convex, though: a run that lands in a poor local
# optimum at the true $m$ (a prototype stuck between two bumps) shows up as a dip in both
# curves, which is why the incremental procedure, which prunes from a larger machine, is more
# reliable than fitting each $m$ from scratch.
#
# ## 6. A similarity JAX cannot differentiate: rule (7)
#
# In the paper's second face experiment the similarity is a graph-matching score with no
# formula, let alone a gradient. Rule (7) replaces $\partial s(x_i, c_k) / \partial c_k$ by the
# direction $x_i - c_k$ and moves one prototype at a time. Any Python function `s(X, C)` works;
# here scikit-learn's Laplacian kernel, computed in NumPy (so JAX cannot trace it).

# %%
laplace = lambda A, B: laplacian_kernel(A, B, gamma=0.5)  # noqa: E731
print("traceable by JAX:", ss.is_traceable(laplace, X[:3], X[:2]))
res_bb = ss.fit_to_decision_values(svc, X, m=4, similarity=laplace, max_steps=STEPS, seed=1, repulsion=0.0)
acc_bb = np.mean(np.sign(res_bb.decision_function(X_test)) == y_test)
print(f"gradient used: {res_bb.gradient}; Omega {res_bb.objective_trace[0]:.4f} -> {res_bb.objective:.4f} in "
      f"{res_bb.steps} steps (stop: {res_bb.stop_reason}); test accuracy {acc_bb:.3f}")

fig, ax = plt.subplots(figsize=(5, 3.2))
ax.plot(res_bb.objective_trace, label="Laplacian similarity, rule (7)")
ax.plot(res.objective_trace, label="RBF, exact gradient (section 2)")
ax.set_xlabel("step")
ax.set_ylabel("Omega (2)")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# The direction $x_i - c_k$ is only a stand-in for the gradient (for the Laplacian kernel the
# true one is $\gamma\, s\, (x_i - c_k)/\|x_i - c_k\|$), so each move is accepted only if the
# objective goes down, and the descent stops earlier, when no step along the surrogate lowers
# it (`stop_reason == "line_search"`). We switched the repulsion off here: pushed along a
# surrogate direction it can cost more than it helps, and with `repulsion=0` the objective is
# guaranteed never to increase. Compare both curves: exact gradients go further when they exist.
#
# ## 7. A scikit-learn estimator
#
# `SuperSparseClassifier` fits (1) to the labels coded $-1/+1$ (one machine per class against
# the rest for more than two classes) and plugs into scikit-learn's model selection. Here
# `GridSearchCV` tunes $m$ and the RBF width on the moons.

# %%
search = GridSearchCV(SuperSparseClassifier(max_steps=STEPS // 2),
                      {"m": [2, 4, 8] if not QUICK else [2, 4], "gamma": [0.5, 1.0, 2.0] if not QUICK else [1.0]},
                      cv=3).fit(X, y)
print("best:", search.best_params_, f"cross-validated accuracy {search.best_score_:.3f}; "
      f"test accuracy {search.score(X_test, y_test):.3f} with "
      f"{search.best_estimator_.similarity_evaluations_per_point_} evaluations per prediction")

# %% [markdown]
# ## Summary
#
# * A super-sparse machine keeps the kernel machine's form (1) but learns where its $m$
#   reference points go; fitted to an SVM's decision values, a few prototypes reproduce its
#   decisions at a fraction of the test-time cost.
# * Training alternates an exact ridge solve (4) (a NumPyro posterior mean) with gradient steps
#   on the prototypes, differentiated through that solve; the objective never increases without
#   the repulsion.
# * $m$ can be chosen by validation (8) or by the ELBO of an ARD RVM over the prototypes,
#   compared with `ppl_sbl.compare` like every other model in the library.
# * `experiments/super_sparse.py` runs the full comparison on digits (all ten classes,
#   m = 1 to 10, against random, k-medoids and border prototypes) and on regression problems.
#
# **Try it:** change the client digit; fit directly to the labels instead of the SVM's decision
# values (`ss.fit(Xd, yd, m=2, ...)`) and compare the AUC; turn the repulsion off
# (`repulsion=0`) and start all prototypes on the same point (`init=`).
