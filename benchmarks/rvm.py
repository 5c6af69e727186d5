"""Benchmark: relevance vector fits against compiled peers, above all fastrvm's C++ SparseBayes.

Not a test (``tests/test_benchmarks_rvm.py`` runs ``--quick``). Every peer fits the same design in this
one process, and the peers are interleaved (:func:`benchmarks.timing.time_peers`): at each size a
first "warm" call of every peer (its wall time recorded apart as ``first_call_seconds``, with the
JAX compilation it included), then ``--rounds`` rounds, round r calling every peer once in a fixed
order before round r + 1 starts, so that all peers see the same state of a shared machine. Times
are the median and the minimum over the rounds; ratios are a peer's median (minimum) over
fastrvm's median (minimum).

Regression (default): the noisy sinc (``datasets.sinc(n_train=N, n_test=600, seed=0)``), design
``basis.rbf(X, delta=5.55, bias=True)`` (the bias column first, M = N + 1), RMSE on the 600
noiseless test targets; and Friedman #1 (scikit-learn's ``make_friedman1(N + 600, noise=1,
random_state=0)``: N training and 600 test points, design ``basis.rbf(X, delta=1, bias=True)``,
RMSE on the noisy test targets; ``--regression-data`` picks either). Peers, in this order:

``fastrvm``
    ``fastrvm.RVR(kernel="precomputed", fit_intercept=True)`` on the square RBF part
    ``basis.rbf(X, delta=5.55)``: its intercept is our bias column 0, its ``relevance_`` index j our
    column j + 1 (:func:`fastrvm_columns`), so it fits the same design. Predictions are
    ``Phi_test[:, columns] @ coef`` (fastrvm 0.1.5's own ``predict`` cannot take a precomputed
    kernel: it checks for N columns and then for one column per relevance vector).
``sequential_sbl``
    ``models.sequential_sbl.fit(Phi, t, noise_var=var(t), update_noise=True)``: our type-II fit
    (Tipping & Faul's fast marginal likelihood maximisation) with its default stopping rule.
``sequential_sbl_compiled``
    ``sequential_sbl`` with ``compiled=True``: the same steps as one compiled XLA program
    (:mod:`ppl_sbl.models.sequential_sbl.compiled`; its first call at a size compiles it).
``sequential_sbl_to_fastrvm_L``
    ``sequential_sbl_compiled`` stopped (``max_steps``) at the first step after which its L is at
    least fastrvm's (:class:`AtFastrvmL`): the time to a fit as good as fastrvm's by the objective
    both maximise. fastrvm's L is that of its columns at the precisions and noise that maximise L
    over them (:func:`fastrvm_log_marginal_likelihood`).
``sequential_sbl_exact``
    The same with ``tol=1e-13``: the exact local optimum of L (no alignment guard). The default
    rule's goal is an L within 0.1 nats of it (``L_default_minus_exact`` per size).
``sequential_sbl_exact_guarded``
    ``tol=1e-13`` with the default rule's alignment guard (``max_alignment=ss.MAX_ALIGNMENT``): the
    exact local optimum over the same candidates, which measures the stopping rule alone
    (``L_default_minus_exact_guarded``).
``cavi_fast``
    ``ppl_sbl.CAVI(rvm.regression, schedule="fast", progress_bar=False).run(Phi, t)``: the fast
    variational schedule (:mod:`ppl_sbl.fast_ard`).
``cavi_fast_compiled``
    ``cavi_fast`` with ``compiled=True``: the same schedule as one compiled XLA program
    (:mod:`ppl_sbl.fast_ard.compiled`; its first call at a size compiles it).
``cavi``
    ``ppl_sbl.CAVI(rvm.regression, schedule="sweep", progress_bar=False).run(Phi, t)``: our variational
    sweep.
``ard``
    scikit-learn ``ARDRegression()`` (default settings) on Phi.

The peers are the dictionaries :func:`regression_peers` and :func:`classification_peers`, name ->
:class:`benchmarks.timing.Peer` (a fit and a function that describes its result): adding a peer is one entry, and
every peer gets a ``--skip-<name>-above N`` option.

Slow peers. ``--skip-<name>-above N`` skips a peer at sizes above N (defaults: ``ard`` above 300,
``cavi`` above 5000, ``sequential_sbl_exact`` above 2000); its time there is extrapolated by a log-log fit over the sizes where it ran (slope 3, the
dense solve's, assumed where it ran at one size only) and marked '*', not measured. A peer whose
warm call takes more than ``--cap`` seconds (default 120) is called no more at that size: its time
there is that one call less the JAX compilation it included (marked '~').

The floor outside the schedule: for the compiled peers (``*_compiled``, ``sequential_sbl_to_fastrvm_L``)
the record splits each timed call into the time in the compiled program and the rest, the host's
(checking and preparing the arrays, the program's dispatch and transfers, building the result):
``program_seconds``, ``host_seconds`` (medians over the rounds), ``program_ratio_to_fastrvm`` (the
program alone over fastrvm's median) and ``program_us_per_move``
(:class:`benchmarks.timing.ProgramSplit`).

The record also gives, per size: every peer's test RMSE and its ratio to fastrvm's, its number of
design columns in the model (``relevant``, the bias included where it is in) and of relevance
vectors (``relevance_vectors``, the RBF columns only), the overlap of each type-II fit's active
columns with fastrvm's (the size of the intersection and the symmetric difference, in our column
numbering), L of both type-II fits and the ELBO of the sweep.

Classification (``--classification``): Ripley's synthetic data, RBF width delta = 4.0 (Tipping's
width 0.5, as the ``ppl-sbl`` command's default) and a bias, on ``ripley`` (``datasets.ripley()``: 250
training and 1000 test points) and ``ripley_pooled`` (``datasets.ripley_pooled()``'s 1250 points
split 60/40 at random, seed 0, clean labels, inputs as they are: 750 training and 500 test
points), and ``moons`` (scikit-learn's ``make_moons(1250, noise=0.3, random_state=0)``: 750
training and 500 test points). Peers: ``fastrvm.RVC(kernel="precomputed", fit_intercept=True)``
(the same column mapping), ``CAVI(rvm.classification)`` with the fast schedule (host loop and
``compiled=True``) and with the sweep (``schedule="fast"``, ``schedule="sweep"``), and
``CAVI(robust_rvm.classification)`` with all three; test error in
percentage points (P(t = 1) > 0.5, fastrvm: logit > 0). Where the sweeps take longer than the cap
per fit, they are called once each.

Usage::

    python benchmarks/rvm.py                                      # benchmarks/results/rvm_cpu.json
    python benchmarks/rvm.py --sizes 100 300 1000 --out /tmp/rvm.json
    python benchmarks/rvm.py --classification                     # rvm_classification_cpu.json
    python benchmarks/rvm.py --classification --datasets ripley --out /tmp/rvm_c.json
    python benchmarks/rvm.py --quick --out /tmp/q.json                  # N = 50, 80 (seconds)
    python benchmarks/rvm.py --classification --quick --out /tmp/qc.json  # 100 Ripley points

Records: ``benchmarks/results/rvm_<backend>.json`` and ``rvm_classification_<backend>.json``
(``_quick`` before ``.json`` with ``--quick``), or ``--out``; per peer and size the median and
minimum time, not the rounds' samples.
"""
from __future__ import annotations

import argparse
import collections
import math
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for ``benchmarks.timing``

from benchmarks.timing import (CompileClock, Peer, ProgramSplit, environment, fmt, log, loglog_predict,  # noqa: E402
                               set_blas_threads, set_cores, time_peers, write_record)

REFERENCE = "fastrvm"
DELTA = 5.55
CLASSIFICATION_DELTA = 4.0
N_TEST = 600
EXACT_TOL = 1e-13
L_GOAL_NATS = 0.1
SKIP_ABOVE = {"ard": 300}
CLASSIFICATION_DATA = ("ripley", "ripley_pooled", "moons")
REGRESSION_DATA = ("sinc", "friedman")
FRIEDMAN_DELTA = 1.0  # exp(-d^2) on Friedman #1's ten inputs in [0, 1]
MOONS = (750, 500, 0.3)  # make_moons: training and test points, noise

Problem = collections.namedtuple("Problem", "name X t X_test t_test Phi Phi_test K")
Problem.__doc__ = """One data set and its design.

Attributes
----------
name : str
X, t, X_test, t_test : arrays
    Training and test inputs and targets.
Phi, Phi_test : (N, N + 1), (N_test, N + 1) arrays
    The RBF design with the bias column first (centres: the training inputs).
K : (N, N) array
    ``Phi[:, 1:]`` (C-contiguous): the square kernel that fastrvm takes.
"""


# ----------------------------------------------------------------------------------------------
# Problems
# ----------------------------------------------------------------------------------------------
def make_problem(name, X, t, X_test, t_test, delta):
    """The :class:`Problem` of a data set: RBF design of width ``delta`` with the bias column first."""
    import numpy as np

    from ppl_sbl import basis

    Phi = basis.rbf(X, delta=delta, bias=True)
    Phi_test = basis.rbf(X_test, X, delta=delta, bias=True)
    return Problem(name, X, t, X_test, t_test, Phi, Phi_test, np.ascontiguousarray(Phi[:, 1:]))


def regression_problem(n, data="sinc"):
    """The noisy sinc at ``n`` training points (seed 0) and its 600 noiseless test points; or
    Friedman #1 (``data="friedman"``: scikit-learn's ``make_friedman1``, 10 inputs, noise 1, seed 0;
    ``n`` training and 600 test points with their noise, RBF width ``FRIEDMAN_DELTA``)."""
    from ppl_sbl import datasets

    if data == "friedman":
        from sklearn.datasets import make_friedman1

        X, t = make_friedman1(n_samples=n + N_TEST, noise=1.0, random_state=0)
        return make_problem(f"friedman{n}", X[:n], t[:n], X[n:], t[n:], FRIEDMAN_DELTA)
    if data != "sinc":
        raise ValueError(f"unknown regression data {data!r}; choose from {REGRESSION_DATA}.")
    d = datasets.sinc(n_train=n, n_test=N_TEST, seed=0)
    return make_problem(f"sinc{n}", d.X_train, d.t_train, d.X_test, d.t_test, DELTA)


def classification_problem(name, subsample=0):
    """Ripley's data (``ripley``: 250 / 1000, or ``ripley_pooled``: a 60/40 split, 750 / 500) or two
    moons (``moons``: scikit-learn's ``make_moons`` with noise 0.3, seed 0, 750 / 500).

    Parameters
    ----------
    name : {"ripley", "ripley_pooled", "moons"}
    subsample : int
        0: every training point; otherwise that many training points, evenly spaced in the training
        set's order (Ripley's training set is sorted by class, so both classes stay in), and every
        test point.

    Returns
    -------
    Problem
    """
    import numpy as np

    from ppl_sbl import datasets

    if name == "ripley":
        d = datasets.ripley()
    elif name == "ripley_pooled":
        X, t = datasets.ripley_pooled()
        d = datasets.split_with_label_noise(X, t, label_noise=0.0, normalize=False, seed=0, name="Ripley pooled")
    elif name == "moons":
        from sklearn.datasets import make_moons

        n_train, n_test, noise = MOONS
        X, t = make_moons(n_samples=n_train + n_test, noise=noise, random_state=0)
        t = t.astype(float)
        d = argparse.Namespace(X_train=X[:n_train], t_train=t[:n_train], X_test=X[n_train:], t_test=t[n_train:])
    else:
        raise ValueError(f"unknown data set {name!r}; choose from {CLASSIFICATION_DATA}.")
    X, t = d.X_train, d.t_train
    label = name
    if subsample and subsample < len(t):
        idx = np.round(np.linspace(0, len(t) - 1, subsample)).astype(int)
        X, t = X[idx], t[idx]
        label = f"{name}[{subsample}/{len(d.t_train)}]"
    return make_problem(label, X, t, d.X_test, d.t_test, CLASSIFICATION_DELTA)


# ----------------------------------------------------------------------------------------------
# Describing the fits
# ----------------------------------------------------------------------------------------------
def rmse(pred, target):
    """Root mean squared error."""
    import numpy as np

    return float(np.sqrt(np.mean((np.asarray(pred) - np.asarray(target)) ** 2)))


def error_percent(score, t, threshold):
    """Test error in percentage points: the share of ``score > threshold`` that disagrees with ``t > 0.5``."""
    import numpy as np

    return float(100.0 * np.mean((np.asarray(score) > threshold) != (np.asarray(t) > 0.5)))


def fastrvm_columns(model):
    """Our design columns and coefficients of a fastrvm fit with ``fit_intercept=True``.

    Parameters
    ----------
    model : fastrvm.RVR or fastrvm.RVC (binary)
        Fitted on the square kernel ``Phi[:, 1:]`` (or on the inputs with the same RBF kernel).

    Returns
    -------
    columns : (K + 1,) int
        0 (the intercept, our bias column) and ``relevance_ + 1``.
    coef : (K + 1,) float
        ``intercept_`` and ``dual_coef_``, so that ``Phi[:, columns] @ coef`` is its prediction
        (regression) or logit (classification).
    """
    import numpy as np

    columns = np.concatenate([[0], np.asarray(model.relevance_, dtype=np.int64) + 1])
    coef = np.concatenate([np.atleast_1d(np.asarray(model.intercept_, dtype=np.float64))[:1],
                           np.asarray(model.dual_coef_, dtype=np.float64).ravel()])
    return columns, coef


def _columns_fields(columns):
    import numpy as np

    columns = np.sort(np.asarray(columns, dtype=np.int64))
    return {"relevance_columns": columns.tolist(), "relevant": int(len(columns)),
            "relevance_vectors": int(np.sum(columns > 0))}


def describe_fastrvm(model, p):
    """fastrvm (RVR or RVC): columns in our numbering, coefficients, test RMSE or error."""
    import numpy as np

    columns, coef = fastrvm_columns(model)
    out = _columns_fields(columns)
    score = p.Phi_test[:, columns] @ coef
    out.update(coef_columns=columns.tolist(), coef=coef.tolist(), relevance_vectors=int(len(model.relevance_)),
               n_iter=int(np.ravel(model.n_iter_)[0]), fit_status=int(model.fit_status_))
    if hasattr(model, "beta_"):
        L, alpha, noise_var = fastrvm_log_marginal_likelihood(p.Phi, p.t, columns)
        out.update(beta=float(model.beta_), rmse=rmse(score, p.t_test), log_marginal_likelihood=L,
                   L_alpha=alpha.tolist(), L_noise_var=noise_var)
    else:
        out.update(test_error=error_percent(score, p.t_test, 0.0))
    return out


def fastrvm_log_marginal_likelihood(Phi, t, columns):
    """fastrvm's fit on our objective, for its columns (the intercept our column 0): the type-II
    log marginal likelihood L at the precisions and noise variance that maximise it over those
    columns (the local maximum ``sequential_sbl.fit`` reaches on them from the empty model, to
    ``tol=1e-13``): the best fastrvm's choice of columns does on our objective (fastrvm's own
    precisions refer to its internal basis). Returns (L, the precisions (one per column, inf where
    the maximum leaves a column out), the noise variance)."""
    import numpy as np

    from ppl_sbl.models import sequential_sbl as ss

    state = ss.fit(np.asarray(Phi)[:, np.asarray(columns)], t, noise_var=float(np.var(t)), update_noise=True,
                   tol=EXACT_TOL, progress_bar=False)
    return float(state.log_marginal_likelihood), np.asarray(state.alpha, dtype=np.float64), float(state.noise_var)


def describe_sequential_sbl(state, p):
    """Our type-II fit: active columns, mean coefficients, L, moves, stop reason, test RMSE."""
    import numpy as np

    from ppl_sbl.models import sequential_sbl as ss

    active = np.asarray(state.active, dtype=np.int64)
    out = _columns_fields(active)
    out.update(coef_columns=active.tolist(), coef=np.asarray(state.mu, dtype=np.float64).tolist(),
               log_marginal_likelihood=float(state.log_marginal_likelihood), moves=len(state.moves),
               stop_reason=str(state.stop_reason), converged=bool(state.converged), noise_var=float(state.noise_var),
               rmse=rmse(ss.predict(state, p.Phi_test)[0], p.t_test))
    return out


def describe_cavi(res, p):
    """A CAVI result: relevant columns (``res.relevant``), ELBO, sweeps, test RMSE (regression) or
    error at P(t = 1) = 0.5 (classification)."""
    import numpy as np

    out = _columns_fields(np.flatnonzero(np.asarray(res.relevant)))
    out.update(elbo=float(res.elbo), num_sweeps=int(res.num_sweeps), converged=bool(res.converged))
    if res.num_moves is not None:
        out["num_moves"] = int(res.num_moves)
    pred = res.predict(p.Phi_test)
    if isinstance(pred, tuple):
        out["rmse"] = rmse(pred[0], p.t_test)
    else:
        out["test_error"] = error_percent(pred, p.t_test, 0.5)
    return out


def describe_ard(model, p):
    """scikit-learn's ARDRegression: columns with |coef_| > 1e-6, iterations, test RMSE."""
    import numpy as np

    out = _columns_fields(np.flatnonzero(np.abs(model.coef_) > 1e-6))
    out.update(relevant_rule="|coef_| > 1e-6", n_iter=int(model.n_iter_), max_iter=int(model.max_iter),
               noise_precision=float(model.alpha_), rmse=rmse(model.predict(p.Phi_test), p.t_test))
    return out


# ----------------------------------------------------------------------------------------------
# The peers
# ----------------------------------------------------------------------------------------------
class AtFastrvmL:
    """``sequential_sbl_compiled`` stopped at the first step (``max_steps``) after which its L is at
    least fastrvm's on the same problem (:func:`fastrvm_log_marginal_likelihood`): the time our
    type-II fit takes to a fit as good as fastrvm's by the objective both maximise. The step is found
    at the first call on a problem (the warm call, untimed): fastrvm's fit and L; our full compiled
    fit (where it does not reach fastrvm's L, the full fit is the one timed); then the fewest steps
    whose fit reaches it, by bisection (L never falls from one step to the next)."""

    def __init__(self):
        self.stops = {}  # problem name -> (step, fastrvm's L)

    @staticmethod
    def fit_steps(p, max_steps):
        """The compiled type-II fit of ``sequential_sbl_compiled`` stopped after ``max_steps`` steps."""
        import numpy as np

        from ppl_sbl.models import sequential_sbl as ss

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # stopped at max_steps on purpose: not converged
            return ss.fit(p.Phi, p.t, noise_var=float(np.var(p.t)), update_noise=True, progress_bar=False,
                          compiled=True, max_steps=max_steps)

    def fit(self, p):
        import fastrvm

        if p.name not in self.stops:
            ref = fastrvm.RVR(kernel="precomputed", fit_intercept=True).fit(p.K, p.t)
            L_ref = fastrvm_log_marginal_likelihood(p.Phi, p.t, fastrvm_columns(ref)[0])[0]
            full = self.fit_steps(p, 100000)
            step = None
            if full.log_marginal_likelihood >= L_ref:
                low, step = 0, len(full.trace)  # the fit after `low` steps is below L_ref, after `step` not
                while step - low > 1:
                    mid = (low + step) // 2
                    low, step = (low, mid) if self.fit_steps(p, mid).log_marginal_likelihood >= L_ref else (mid, step)
            self.stops[p.name] = (step, L_ref)
        step, _ = self.stops[p.name]
        return self.fit_steps(p, 100000 if step is None else step)

    def describe(self, state, p):
        out = describe_sequential_sbl(state, p)
        step, L_ref = self.stops[p.name]
        out.update(fastrvm_L=L_ref, max_steps=step, reaches_fastrvm_L=bool(state.log_marginal_likelihood >= L_ref))
        return out


def _fit_ard(p):
    from sklearn.linear_model import ARDRegression

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ARDRegression().fit(p.Phi, p.t)


def regression_peers():
    """The regression peers, name -> :class:`Peer`, in the order in which every round calls them.

    Returns
    -------
    dict
    """
    import fastrvm
    import numpy as np

    import ppl_sbl
    from ppl_sbl.fast_ard import compiled as fast_compiled
    from ppl_sbl.models import rvm
    from ppl_sbl.models import sequential_sbl as ss
    from ppl_sbl.models.sequential_sbl import compiled as type2_compiled

    at_fastrvm_L = AtFastrvmL()
    return {
        "fastrvm": Peer(lambda p: fastrvm.RVR(kernel="precomputed", fit_intercept=True).fit(p.K, p.t), describe_fastrvm),
        "sequential_sbl": Peer(lambda p: ss.fit(p.Phi, p.t, noise_var=float(np.var(p.t)), update_noise=True,
                                                progress_bar=False), describe_sequential_sbl),
        "sequential_sbl_compiled": Peer(ProgramSplit(lambda p: ss.fit(p.Phi, p.t, noise_var=float(np.var(p.t)),
                                                                      update_noise=True, progress_bar=False,
                                                                      compiled=True), type2_compiled),
                                        describe_sequential_sbl),
        "sequential_sbl_to_fastrvm_L": Peer(ProgramSplit(at_fastrvm_L.fit, type2_compiled), at_fastrvm_L.describe),
        "sequential_sbl_exact": Peer(lambda p: ss.fit(p.Phi, p.t, noise_var=float(np.var(p.t)), update_noise=True,
                                                      tol=EXACT_TOL, progress_bar=False), describe_sequential_sbl),
        "sequential_sbl_exact_guarded": Peer(lambda p: ss.fit(p.Phi, p.t, noise_var=float(np.var(p.t)), update_noise=True,
                                                              tol=EXACT_TOL, max_alignment=ss.MAX_ALIGNMENT,
                                                              progress_bar=False), describe_sequential_sbl),
        "cavi_fast": Peer(lambda p: ppl_sbl.CAVI(rvm.regression, schedule="fast", progress_bar=False).run(p.Phi, p.t),
                          describe_cavi),
        "cavi_fast_compiled": Peer(ProgramSplit(lambda p: ppl_sbl.CAVI(rvm.regression, schedule="fast", compiled=True,
                                                                       progress_bar=False).run(p.Phi, p.t),
                                                fast_compiled), describe_cavi),
        "cavi": Peer(lambda p: ppl_sbl.CAVI(rvm.regression, schedule="sweep", progress_bar=False).run(p.Phi, p.t),
                     describe_cavi),
        "ard": Peer(_fit_ard, describe_ard),
    }


def classification_peers():
    """The classification peers, name -> :class:`Peer`, in the order in which every round calls them.

    Returns
    -------
    dict
    """
    import fastrvm

    import ppl_sbl
    from ppl_sbl.fast_ard import compiled as fast_compiled
    from ppl_sbl.models import robust_rvm, rvm

    return {
        "fastrvm": Peer(lambda p: fastrvm.RVC(kernel="precomputed", fit_intercept=True).fit(p.K, p.t), describe_fastrvm),
        "cavi_fast": Peer(lambda p: ppl_sbl.CAVI(rvm.classification, schedule="fast", progress_bar=False)
                          .run(p.Phi, p.t), describe_cavi),
        "cavi_fast_compiled": Peer(ProgramSplit(lambda p: ppl_sbl.CAVI(
            rvm.classification, schedule="fast", compiled=True, progress_bar=False).run(p.Phi, p.t),
            fast_compiled), describe_cavi),
        "cavi": Peer(lambda p: ppl_sbl.CAVI(rvm.classification, schedule="sweep", progress_bar=False).run(p.Phi, p.t),
                     describe_cavi),
        "cavi_robust_fast": Peer(lambda p: ppl_sbl.CAVI(robust_rvm.classification, schedule="fast", progress_bar=False)
                                 .run(p.Phi, p.t), describe_cavi),
        "cavi_robust_fast_compiled": Peer(ProgramSplit(lambda p: ppl_sbl.CAVI(
            robust_rvm.classification, schedule="fast", compiled=True, progress_bar=False).run(p.Phi, p.t),
            fast_compiled), describe_cavi),
        "cavi_robust": Peer(lambda p: ppl_sbl.CAVI(robust_rvm.classification, schedule="sweep", progress_bar=False)
                            .run(p.Phi, p.t), describe_cavi),
    }


# ----------------------------------------------------------------------------------------------
# Extrapolation, ratios and the type-II comparison
# ----------------------------------------------------------------------------------------------
def extrapolate(rows, name):
    """Fill the time of peer ``name`` where it was skipped by a log-log fit of its median time
    against N over the rows of the same data set where it ran (slope 3 assumed where it ran at one
    size only)."""
    for r in rows:
        rec = r["peers"][name]
        measured = [(o["n"], o["peers"][name]["seconds"]) for o in rows if o.get("dataset") == r.get("dataset")
                    and o["peers"][name]["status"] in ("measured", "capped") and o["peers"][name]["seconds"] > 0]
        if rec["status"] != "skipped" or not measured:
            continue
        seconds, slope, assumed = loglog_predict([m[0] for m in measured], [m[1] for m in measured], r["n"],
                                                 slope_if_single=3.0)
        rec.update(extrapolated=True, seconds=float(seconds), loglog_slope=float(slope),
                   slope_assumed=assumed, from_sizes=[m[0] for m in measured])


def split_programs(row, peers):
    """For the compiled peers (a :class:`benchmarks.timing.ProgramSplit` fit) measured over the
    rounds: the medians over those rounds of the time in the compiled program and of the rest of the
    call, the host's (``program_seconds``, ``host_seconds``: the floor outside the schedule), and the
    program's time per move (``program_us_per_move``)."""
    for name, rec in row["peers"].items():
        fit = peers[name].fit
        if not isinstance(fit, ProgramSplit) or rec.get("status") != "measured":
            continue
        rec.update(fit.summary(rec["rounds"]))
        moves = rec.get("moves", rec.get("num_moves"))
        if moves:
            rec["program_us_per_move"] = 1e6 * rec["program_seconds"] / moves


def add_ratios(row):
    """Each peer's median and minimum time, and RMSE, over fastrvm's (where both exist); for the
    compiled peers also the program's time alone over fastrvm's (``program_ratio_to_fastrvm``)."""
    ref = row["peers"][REFERENCE]
    for rec in row["peers"].values():
        if "program_seconds" in rec:
            rec["program_ratio_to_fastrvm"] = rec["program_seconds"] / ref["seconds"]
        if "seconds" in rec:
            rec["ratio_to_fastrvm"] = rec["seconds"] / ref["seconds"]
        if "min_seconds" in rec:
            rec["min_ratio_to_fastrvm"] = rec["min_seconds"] / ref["min_seconds"]
        if "rmse" in rec and "rmse" in ref:
            rec["rmse_ratio_to_fastrvm"] = rec["rmse"] / ref["rmse"]


def nearest_distances(X, columns, others):
    """For each RBF column in ``columns`` (our numbering, 0 the bias is left out), the input-space
    distance from its centre to the nearest centre of the RBF columns in ``others`` (inf if none)."""
    import numpy as np

    a = [c - 1 for c in columns if c > 0]
    b = [c - 1 for c in others if c > 0]
    if not a:
        return []
    if not b:
        return [math.inf] * len(a)
    d = np.sqrt(np.sum((np.asarray(X)[a][:, None, :] - np.asarray(X)[b][None, :, :]) ** 2, axis=-1))
    return [float(x) for x in d.min(axis=1)]


def compare_type2(row, X):
    """The overlap of each type-II fit's active columns with fastrvm's (and, for the columns in one
    only, the input-space distance from each centre to the other fit's nearest centre), and L
    (default - exact)."""
    ref = set(row["peers"][REFERENCE]["relevance_columns"])
    overlap = {}
    for name in ("sequential_sbl", "sequential_sbl_exact", "sequential_sbl_exact_guarded"):
        rec = row["peers"].get(name)
        if rec is None or "relevance_columns" not in rec:
            continue
        ours = set(rec["relevance_columns"])
        only_ours, only_ref = sorted(ours - ref), sorted(ref - ours)
        overlap[name] = {"intersection": len(ours & ref), "symmetric_difference": sorted(ours ^ ref),
                         "only_ours": only_ours, "only_fastrvm": only_ref, "ours": len(ours), "fastrvm": len(ref),
                         "only_ours_nearest_fastrvm_distance": nearest_distances(X, only_ours, sorted(ref)),
                         "only_fastrvm_nearest_ours_distance": nearest_distances(X, only_ref, sorted(ours))}
    row["overlap_with_fastrvm"] = overlap
    default = row["peers"].get("sequential_sbl", {})
    for suffix in ("", "_guarded"):
        exact = row["peers"].get("sequential_sbl_exact" + suffix, {})
        if "log_marginal_likelihood" in default and "log_marginal_likelihood" in exact:
            gap = default["log_marginal_likelihood"] - exact["log_marginal_likelihood"]
            row["L_default_minus_exact" + suffix] = gap
            row["L_default_within_goal" + suffix] = bool(gap >= -L_GOAL_NATS)
        else:
            row["L_default_minus_exact" + suffix] = None
            row["L_default_within_goal" + suffix] = None


# ----------------------------------------------------------------------------------------------
# Reporting
# ----------------------------------------------------------------------------------------------
def mark(rec):
    """'*' extrapolated, '~' one capped call, '!' failed, '' measured over the rounds."""
    return {"skipped": "*", "capped": "~", "failed": "!"}.get(rec["status"], "")


def peer_note(rec):
    """A short note of a peer's own statistics for the table."""
    parts = []
    if rec["status"] == "failed":
        return "FAILED: " + rec["error"][:200]
    if rec["status"] == "skipped":
        if rec.get("extrapolated"):
            parts.append(f"skipped, extrapolated (slope {rec['loglog_slope']:.2f}"
                         + (" assumed" if rec["slope_assumed"] else f" from N = {rec['from_sizes']}") + ")")
        else:
            parts.append("skipped")
        return "; ".join(parts)
    if rec["status"] == "capped":
        parts.append(f"capped: one call, less {rec['first_call_compile_seconds']:.1f} s compilation")
    if "moves" in rec:
        parts.append(f"{rec['moves']} moves, {rec['stop_reason']}")
    if "num_sweeps" in rec:
        parts.append(f"{rec['num_sweeps']} sweeps" + ("" if rec["converged"] else " (not converged)"))
    if "n_iter" in rec:
        parts.append(f"{rec['n_iter']} iterations")
    return "; ".join(parts)


def _distances(ds):
    return "[" + ", ".join(f"{d:.2f}" for d in ds) + "]"


def print_rows(rows, kind):
    """The table: one line per size and peer, then the type-II comparison (regression) and the
    ratios of the medians to fastrvm's. Returns the text."""
    quality = "RMSE   /fastrvm" if kind == "regression" else "error %"
    head = (f"{'data':>18} {'N':>5} {'M':>5} | {'peer':<21} {'median s':>9} {'min s':>9} {'first s':>8} | "
            f"{'/fastrvm':>9} {'(min)':>8} | {quality:>16} | {'cols':>4} {'RVs':>4} | {'L / ELBO':>11} | notes")
    lines = [head, "-" * len(head)]
    for r in rows:
        for name, rec in r["peers"].items():
            m = mark(rec)
            if kind == "regression":
                q = (f"{fmt(rec.get('rmse'), '.4f'):>7} {fmt(rec.get('rmse_ratio_to_fastrvm'), '.2f'):>8}")
            else:
                q = f"{fmt(rec.get('test_error'), '.1f'):>16}"
            bound = rec.get("log_marginal_likelihood", rec.get("elbo"))
            lines.append(
                f"{r['data']:>18} {r['n']:>5} {r['m']:>5} | {name:<21} {fmt(rec.get('seconds'), '.4f') + m:>9} "
                f"{fmt(rec.get('min_seconds'), '.4f'):>9} {fmt(rec.get('first_call_seconds'), '.3f'):>8} | "
                f"{fmt(rec.get('ratio_to_fastrvm'), '.1f') + m:>9} {fmt(rec.get('min_ratio_to_fastrvm'), '.1f'):>8} | "
                f"{q:>16} | {fmt(rec.get('relevant'), 'd'):>4} {fmt(rec.get('relevance_vectors'), 'd'):>4} | "
                f"{fmt(bound, '.3f'):>11} | {peer_note(rec)}")
        for name, o in r.get("overlap_with_fastrvm", {}).items():
            lines.append(f"{'':>31} {name} vs fastrvm: |intersection| {o['intersection']} of {o['ours']} (ours) and "
                         f"{o['fastrvm']} (fastrvm); symmetric difference {o['symmetric_difference']} "
                         f"(only ours {o['only_ours']}, only fastrvm {o['only_fastrvm']}); nearest other centre: "
                         f"{_distances(o['only_ours_nearest_fastrvm_distance'])} / "
                         f"{_distances(o['only_fastrvm_nearest_ours_distance'])}")
        for name, rec in r["peers"].items():
            if "program_seconds" in rec:
                per_move = rec.get("program_us_per_move")
                lines.append(f"{'':>31} {name}: in the program {1e3 * rec['program_seconds']:.2f} ms "
                             f"({rec['program_ratio_to_fastrvm']:.1f}x fastrvm), on the host "
                             f"{1e3 * rec['host_seconds']:.2f} ms"
                             + ("" if per_move is None else f"; {per_move:.1f} us a move"))
            if "fastrvm_L" in rec:
                full = r["peers"].get("sequential_sbl_compiled", {}).get("log_marginal_likelihood")
                passed = (f"passed at step {rec['max_steps']} (L {rec['log_marginal_likelihood']:.3f})" if
                          rec["reaches_fastrvm_L"] else "not reached")
                lines.append(f"{'':>31} {name}: fastrvm's columns at their L-maximising precisions and noise: L "
                             f"{rec['fastrvm_L']:.3f}; {passed}; our full fit {fmt(full, '.3f')}")
        for suffix, what in (("", ""), ("_guarded", ", the same alignment guard")):
            if r.get("L_default_minus_exact" + suffix) is not None:
                lines.append(f"{'':>31} L default - L exact (tol={EXACT_TOL:g}{what}) = "
                             f"{r['L_default_minus_exact' + suffix]:.4f} nats (goal >= -{L_GOAL_NATS:g}: "
                             f"{'met' if r['L_default_within_goal' + suffix] else 'NOT met'})")
    names = list(rows[0]["peers"]) if rows else []
    lines += ["", "Median time / fastrvm's median (minimum / minimum in brackets):",
              f"{'data':>18} {'N':>5} | " + " ".join(f"{n:>22}" for n in names)]
    for r in rows:
        cells = []
        for n in names:
            rec = r["peers"][n]
            cells.append(f"{fmt(rec.get('ratio_to_fastrvm'), '.1f') + mark(rec)} "
                         f"({fmt(rec.get('min_ratio_to_fastrvm'), '.1f')})")
        lines.append(f"{r['data']:>18} {r['n']:>5} | " + " ".join(f"{c:>22}" for c in cells))
    lines += [
        "",
        "Times: median (min) over the rounds after a warm call per peer and size (first s: that call, with any",
        "  JAX compilation); peers interleaved round by round in one process. '*' skipped at this size, time",
        "  extrapolated (log-log fit), not measured; '~' warm call above --cap: that one call less its compilation.",
        "cols: design columns in the model (bias included where in; fastrvm's intercept always is); RVs: RBF",
        "  columns only (fastrvm: len(relevance_)); ours from res.relevant / state.active; ARD |coef_| > 1e-6.",
    ] + (["L / ELBO: the sweeps' ELBO."] if kind != "regression" else [
        "L / ELBO: type-II log marginal likelihood (sequential_sbl) or the sweep's ELBO (cavi).",
        "Overlap: columns in our numbering (0 the bias, j the RBF centred on training point j - 1); nearest other",
        f"  centre: input distance to the other fit's nearest RBF centre (RBF exp(-{DELTA:g} d^2): 0.5 at d = "
        f"{math.sqrt(math.log(2) / DELTA):.2f}).",
    ])
    text = "\n".join(lines)
    log(text)
    return text


# ----------------------------------------------------------------------------------------------
# The issue's goals
# ----------------------------------------------------------------------------------------------
GOAL_SIZES = (1000, 2000, 5000)
CLASSIFICATION_SECONDS = {"ripley": 0.5, "ripley_pooled": 2.0, "moons": 2.0}
# the time of our fastest fast-VB fit (the loop or the compiled program) over fastrvm's: at most 1x
# for regression at every size, at most 2x for classification; type II's fastest (``sequential_sbl``, the loop, or
# ``sequential_sbl_compiled``) 1x
RATIO_GOALS = {"regression": 1.0, "classification": 2.0}


def goals(row, kind):
    """The speed goals at one size (None where a peer did not run): at every size, the fastest fast-VB
    fit's time over fastrvm's (``RATIO_GOALS``) and, for regression, the fastest type-II fit's (1x); regression, N in GOAL_SIZES:
    the type-II fit's median within 2x fastrvm's and its RMSE within 2% of fastrvm's; the fast
    schedule's median within 3x fastrvm's, relevance vectors at most 2 fastrvm's + 2, RMSE within
    2% of the sweep's and ELBO above the sweep's or within 0.1% of it. Classification: the fast
    schedule's median under CLASSIFICATION_SECONDS and its test error within 0.5 points of the
    sweep's, for the RVM and the robust RVM."""
    peers = row["peers"]

    def get(name, field):
        rec = peers.get(name, {})
        return rec.get(field) if rec.get("status") in ("measured", "capped") else None

    def check(value, ok):
        return None if value is None else {"value": value, "met": bool(ok(value))}

    out = {}
    ratios = [v for v in (get("cavi_fast", "ratio_to_fastrvm"), get("cavi_fast_compiled", "ratio_to_fastrvm"))
              if v is not None]
    out["fastest_fast_vb_ratio"] = check(min(ratios) if ratios else None, lambda v: v <= RATIO_GOALS[kind])
    if kind == "regression":
        type2 = [v for v in (get("sequential_sbl", "ratio_to_fastrvm"), get("sequential_sbl_compiled", "ratio_to_fastrvm"))
                 if v is not None]
        out["fastest_type2_ratio"] = check(min(type2) if type2 else None, lambda v: v <= 1.0)
    fast_ratio = get("cavi_fast", "ratio_to_fastrvm")
    if kind == "regression":
        if row["n"] not in GOAL_SIZES:
            return out
        ref_rvs, ref_rmse = get(REFERENCE, "relevance_vectors"), get(REFERENCE, "rmse")
        out["type2_time_ratio"] = check(get("sequential_sbl", "ratio_to_fastrvm"), lambda v: v <= 2.0)
        t2 = get("sequential_sbl", "rmse")
        out["type2_rmse_over_fastrvm"] = check(None if t2 is None else t2 / ref_rmse, lambda v: v <= 1.02)
        out["fast_time_ratio"] = check(fast_ratio, lambda v: v <= 3.0)
        rvs = get("cavi_fast", "relevance_vectors")
        out["fast_relevance_vectors"] = check(rvs, lambda v: v <= 2 * ref_rvs + 2)
        fast_rmse, sweep_rmse = get("cavi_fast", "rmse"), get("cavi", "rmse")
        out["fast_rmse_over_sweep"] = check(None if None in (fast_rmse, sweep_rmse) else fast_rmse / sweep_rmse,
                                            lambda v: v <= 1.02)
        fast_elbo, sweep_elbo = get("cavi_fast", "elbo"), get("cavi", "elbo")
        out["fast_elbo_below_sweep_relative"] = check(
            None if None in (fast_elbo, sweep_elbo) else (sweep_elbo - fast_elbo) / abs(sweep_elbo), lambda v: v <= 1e-3)
    else:
        limit = CLASSIFICATION_SECONDS.get(row["data"].split("[")[0])
        out["fast_seconds"] = check(get("cavi_fast", "seconds"), lambda v: limit is not None and v < limit)
        fast_err, sweep_err = get("cavi_fast", "test_error"), get("cavi", "test_error")
        out["fast_error_minus_sweep_points"] = check(
            None if None in (fast_err, sweep_err) else fast_err - sweep_err, lambda v: v <= 0.5)
        out["robust_fast_seconds"] = check(get("cavi_robust_fast", "seconds"),
                                           lambda v: limit is not None and v < limit)
        fast_err, sweep_err = get("cavi_robust_fast", "test_error"), get("cavi_robust", "test_error")
        out["robust_fast_error_minus_sweep_points"] = check(
            None if None in (fast_err, sweep_err) else fast_err - sweep_err, lambda v: v <= 0.5)
    return out


def print_goals(rows, kind):
    lines = ["", "Goals (value, met):"]
    for r in rows:
        g = r.get("goals")
        if not g:
            continue
        cells = ", ".join(f"{k} {fmt(v['value'], '.4g')} {'yes' if v['met'] else 'NO'}" if v else f"{k} -"
                          for k, v in g.items())
        lines.append(f"  {r['data']} N = {r['n']}: {cells}")
    text = "\n".join(lines)
    log(text)
    return text


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------
def _flag(name):
    return "--skip-" + name.replace("_", "-") + "-above"


def base_parser():
    """The options that do not depend on the peers."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--classification", action="store_true", help="Ripley's data instead of the sinc")
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000, 2000, 5000],
                   help="regression training sizes N (M = N + 1)")
    p.add_argument("--regression-data", nargs="+", default=list(REGRESSION_DATA), choices=REGRESSION_DATA,
                   help="regression data sets (default both; quick: sinc)")
    p.add_argument("--datasets", nargs="+", default=list(CLASSIFICATION_DATA), choices=CLASSIFICATION_DATA,
                   help="classification data sets (default both)")
    p.add_argument("--subsample", type=int, default=0,
                   help="classification: that many training points, evenly spaced (0: all; quick: 100)")
    p.add_argument("--peers", nargs="+", default=None,
                   help="run only these peers (fastrvm, the reference, is always run)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds after the warm call (default 3)")
    p.add_argument("--cap", type=float, default=120.0,
                   help="seconds: a peer whose warm call takes longer is called once only at that size (default 120)")
    p.add_argument("--blas-threads", type=int, default=1,
                   help="OPENBLAS_NUM_THREADS, set before numpy is imported (default 1; 0: leave it as it is)")
    p.add_argument("--cores", type=int, default=0,
                   help="run the process on its first CORES CPUs, set before JAX starts (default 0: all it may "
                        "use; 1: every peer on one core, XLA's thread pool too)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: N = 50, 80 and 1 round (ARD and the CAVI sweep skipped above 50, their times "
                        "there extrapolated); classification: 100 Ripley points, 1 round")
    p.add_argument("--out", default=None,
                   help="JSON record (default benchmarks/results/rvm[_classification]_<backend>[_quick].json)")
    return p


def parse_args(argv, peer_names, skip_above):
    """The command line (see the module docstring), with a ``--skip-<name>-above`` option for every
    peer but the reference (defaults: ``skip_above``, name -> N)."""
    p = base_parser()
    for name in peer_names:
        if name != REFERENCE:
            p.add_argument(_flag(name), dest=f"skip_{name}_above", type=int, default=skip_above.get(name),
                           metavar="N", help=f"skip {name} at sizes above N, its time extrapolated (default "
                                             f"{skip_above.get(name)})")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes = [50, 80]
        args.regression_data = ["sinc"]
        args.datasets = ["ripley"]
        args.subsample = args.subsample or 100
        args.rounds = 1
        given = argv if argv is not None else sys.argv[1:]
        # regression: ARD, the sweep and the compiled schedule skipped at N = 80, which exercises the
        # extrapolation (and spares the compilation of their programs at a second size)
        for name in ("ard", "cavi", "cavi_fast_compiled"):
            if not args.classification and name in peer_names and _flag(name) not in given:
                setattr(args, f"skip_{name}_above", 50)
    return args


def select(peers, wanted):
    """The peers named in ``wanted`` (None: all), fastrvm first and always."""
    if wanted is None:
        return peers
    unknown = set(wanted) - set(peers)
    if unknown:
        raise SystemExit(f"unknown peers {sorted(unknown)}; choose from {list(peers)}")
    return {name: peer for name, peer in peers.items() if name == REFERENCE or name in wanted}


def main(argv=None):
    pre, _ = base_parser().parse_known_args(argv)
    set_blas_threads(pre.blas_threads)
    set_cores(pre.cores)
    import importlib.metadata

    import ppl_sbl  # noqa: F401  (float64 on)

    kind = "classification" if pre.classification else "regression"
    all_peers = regression_peers() if kind == "regression" else classification_peers()
    args = parse_args(argv, list(all_peers), SKIP_ABOVE if kind == "regression" else {})
    peers = select(all_peers, args.peers)
    clock = CompileClock()
    env = environment("sklearn")
    env["versions"]["fastrvm"] = importlib.metadata.version("fastrvm")
    out = args.out
    if out is None:
        stem = "rvm" + ("_classification" if args.classification else "")
        out = os.path.join(HERE, "results", f"{stem}_{env['jax_backend']}" + ("_quick" if args.quick else "") + ".json")
    log(f"# ppl-sbl RVM speed benchmark ({kind}) against fastrvm  {env['date']}  host={env['hostname']}  "
        f"backend={env['jax_backend']}  cpus={env['cpu_count']}  load={env['load_average']}  "
        f"blas threads={env['blas_threads_env']}  cpu affinity={env['cpu_affinity']}")
    log(f"# versions {env['versions']}")
    log(f"# peers {list(peers)}  rounds={args.rounds}  cap={args.cap:g}s  "
        + (f"data={args.regression_data} sizes={args.sizes}" if kind == "regression" else
           f"data={args.datasets} subsample={args.subsample}")
        + "  skip above: " + str({n: getattr(args, f"skip_{n}_above") for n in peers if n != REFERENCE}))

    record = {
        "benchmark": ("rvm regression speed, noisy sinc (RBF delta=5.55, 600 noiseless test points) and Friedman #1 "
                      f"(RBF delta={FRIEDMAN_DELTA:g}, 600 noisy test points), bias column first (M = N + 1)"
                      if kind == "regression" else
                      "rvm classification speed, Ripley and two moons, RBF delta=4.0 + bias column first (M = N + 1)"),
        "kind": kind, "reference": REFERENCE, "peers": list(peers), "exact_tol": EXACT_TOL, "l_goal_nats": L_GOAL_NATS,
        "environment": env, "args": vars(args), "rows": [], "partial": True,
    }

    rows = record["rows"]
    start_all = time.perf_counter()
    problems = ([(data, lambda n=n, data=data: regression_problem(n, data)) for data in args.regression_data
                 for n in sorted(args.sizes)] if kind == "regression" else
                [(name, lambda name=name: classification_problem(name, args.subsample)) for name in args.datasets])
    for dataset, make in problems:
        problem = make()
        n = len(problem.t)
        skip = {name for name in peers if name != REFERENCE and getattr(args, f"skip_{name}_above") is not None
                and n > getattr(args, f"skip_{name}_above")}
        log(f"\n== {problem.name}: N = {n}, M = {problem.Phi.shape[1]}, test {len(problem.t_test)}"
            + (f"; skipped {sorted(skip)}" if skip else ""))
        for peer in peers.values():
            if isinstance(peer.fit, ProgramSplit):
                peer.fit.reset()
        row = {"data": problem.name, "dataset": dataset, "n": n, "m": int(problem.Phi.shape[1]),
               "n_test": int(len(problem.t_test)),
               "rounds": args.rounds,
               "peers": time_peers(peers, problem, rounds=args.rounds, cap=args.cap, skip=skip, clock=clock)}
        for name, rec in row["peers"].items():
            if rec["status"] in ("measured", "capped"):
                q = (f"RMSE {rec['rmse']:.4f}" if "rmse" in rec else f"error {rec['test_error']:.1f}%")
                log(f"  {name:<21} {rec['seconds']:9.4f}s median, {rec['min_seconds']:.4f}s min over "
                    f"{rec['rounds']} ({rec['status']}); first call {rec['first_call_seconds']:.3f}s; {q}; "
                    f"{rec['relevant']} columns; {peer_note(rec)}")
        split_programs(row, peers)
        if kind == "regression":
            compare_type2(row, problem.X)
        rows.append(row)
        write_record(record, out, announce=False)
    for name in peers:
        if name != REFERENCE:
            extrapolate(rows, name)
    for row in rows:
        add_ratios(row)
        row["goals"] = goals(row, kind)
    log("")
    record["table"] = print_rows(rows, kind) + print_goals(rows, kind)
    for suffix, what in (("", ""), ("_guarded", " with the same alignment guard")):
        gaps = [r["L_default_minus_exact" + suffix] for r in rows if r.get("L_default_minus_exact" + suffix) is not None]
        if gaps:
            record["L_default_within_goal_at_every_size" + suffix] = bool(min(gaps) >= -L_GOAL_NATS)
            log(f"\n# type-II default rule within {L_GOAL_NATS:g} nats of the tol={EXACT_TOL:g} optimum{what} at "
                f"every size where both ran: {record['L_default_within_goal_at_every_size' + suffix]} "
                f"(worst {min(gaps):.4f} nats)")
    record["total_seconds"] = time.perf_counter() - start_all
    record["partial"] = False
    log(f"# total benchmark time {record['total_seconds']:.1f}s")
    write_record(record, out)


if __name__ == "__main__":
    main()
