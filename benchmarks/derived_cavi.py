"""Benchmark: whole fits of derived guides against the shipped guides and edited models against
the nearest shipped model (issue 41, point 6).

Not a test (``tests/test_benchmarks_derived_cavi.py`` runs ``--quick``). At every size N all the
peers below fit their data in this one process, interleaved (:func:`benchmarks.timing.time_peers`):
a first call of every peer (``first_call_seconds``, with the JAX compilation it included; the
first call of the process also pays JAX's start, the backend's initialisation, which
``first_peer`` names), then ``--rounds`` rounds, each calling every peer once in a fixed order.
The warm time is the median over the rounds. Every fit is ``ppl_sbl.CAVI(model,
progress_bar=False).run(...)`` at the model's default hyperpriors and ``CAVI``'s default schedule
("auto": the fast variational schedule where it applies, otherwise the sweep); the derived
fits re-derive the guide from the model's trace in every call, as ``CAVI(model).run`` does.

Data. Regression: the noisy sinc (``datasets.sinc(n_train=N, n_test=600, seed=0)``, inputs
standardised), design ``basis.rbf(X, delta=5.55, bias=True)`` (M = N + 1), RMSE on the 600
noiseless test targets. Classification: the two-class Gaussian mixture ``datasets.mixture(n_train=N,
n_test=600, seed=0)`` (generated, Bayes error about 20%, inputs standardised), design
``basis.rbf(X, delta=1.0, bias=True)``; test error in percentage points (P(t = 1) > 0.5) on the
600 held-out points of the same generator. Table: the noisy sinc with one standard-normal input that carries no
signal (``noise_features=1``), the grid RVM's per-dimension table ``basis.rbf_table(X, C,
delta=5.55)`` with centres C every other training input, shape (N, N / 2, 2), flattened to
M = N columns.

Comparisons (rows of the table and ``comparisons`` in the record):

``derived`` (issue 41's goals: an ELBO within 1e-8 of the shipped fit's, relative, and a warm time
    within 1.5x): ``CAVI(model)`` (the shipped guide) against ``CAVI(model, guide="derived")`` for
    ``rvm.regression``, ``rvm.classification``, ``robust_rvm.regression`` and
    ``robust_rvm.classification``.
``edited`` (goals at N = 1000 and 2000: warm time within 2x the nearest shipped model's, relevant
    count at most 2x + 2 of its, test RMSE or error at most 5% above its, converged): NumPyro
    programs without a hand-written guide, so ``CAVI(model)`` derives one:

    * :func:`student_t_rvm` (ARD, Gaussian noise with a Gamma(2, 2) precision per point:
      Student-t noise with 4 degrees of freedom) against ``robust_rvm.regression``, whose
      per-point weights have the same Gamma(2, 2) prior by default: the edit is the likelihood,
      normalised in t, where the robust RVM raises the Gaussian density to the weight;
    * :func:`student_t_table_rvm` (the same on the flattened table, one ARD precision per cell)
      against ``robust_rvm.regression`` on the flattened table;
    * :func:`weighted_logit_rvm` (ARD, each point's Bernoulli log-likelihood scaled by a
      Gamma(1.5, 1.5) weight) against ``robust_rvm.classification`` (whose weights have a
      Gamma(2 - ln 2, 2 - ln 2) prior: the edit is the weights' prior);
    * :func:`group_ard_rvm` (one precision per 5 consecutive columns) against ``rvm.regression``
      (goals at N = 1000: warm time within 3x, relevant groups at most 2x + 2 of the groups that
      hold the shipped fit's relevant coefficients, converged; it runs the sweep).

    The edited models' priors are vague and unscaled (Gamma(1e-6, 1e-6) for every ARD precision
    and the noise precision), as a user would write them.

Usage::

    python benchmarks/derived_cavi.py                         # benchmarks/results/derived_cavi_cpu.json
    python benchmarks/derived_cavi.py --sizes 200 1000 --out /tmp/d.json
    python benchmarks/derived_cavi.py --quick --out /tmp/q.json   # N = 60, one call per peer
    python benchmarks/derived_cavi.py --compiled --sizes 200 1000 --skip rvm_regression ...  # compiled peers

Records: ``benchmarks/results/derived_cavi_<backend>.json`` (``_quick`` before ``.json`` with
``--quick``), or ``--out``; per peer and size the median and minimum time over the rounds.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for ``benchmarks.timing``

from benchmarks.timing import CompileClock, Peer, environment, fmt, log, set_blas_threads, time_peers, write_record  # noqa: E402

DELTA = 5.55
N_TEST = 600
GROUP_SIZE = 5
VAGUE = 1e-6
STUDENT_SHAPE = 2.0  # Gamma(2, 2) per-point precisions of the Student-t models (robust_rvm.regression's c0 = d0)
WEIGHT_SHAPE = 1.5  # Gamma(1.5, 1.5) per-point weights of the weighted logit
CLASSIFICATION_DELTA = 1.0
ELBO_GOAL = 1e-8
DERIVED_TIME_GOAL = 1.5
EDITED_TIME_GOAL = 2.0
GROUP_TIME_GOAL = 3.0
QUALITY_GOAL = 1.05
EDITED_GOAL_SIZES = (1000, 2000)
GROUP_GOAL_SIZES = (1000,)

SHIPPED = ("rvm_regression", "rvm_classification", "robust_regression", "robust_classification")
# edited peer -> (nearest shipped peer, its data)
EDITED = {"student_t": "robust_regression", "student_t_table": "robust_regression_table",
          "weighted_logit": "robust_classification", "group_ard": "rvm_regression"}

Problem = collections.namedtuple("Problem", "n Phi t Phi_test t_test Phi_c labels Phi_c_test labels_test "
                                            "X_table t_table X_table_test t_table_test")
Problem.__doc__ = """The data of one size N: the sinc regression design and targets (``Phi``, ``t``
and their test counterparts, noiseless test targets), the classification design and labels
(``Phi_c``, ``labels``, held-out ``Phi_c_test``, ``labels_test``) and the table ((N, N / 2, 2)
``X_table``, ``t_table``, and their test counterparts)."""


# ----------------------------------------------------------------------------------------------
# The edited models (NumPyro programs without a hand-written guide)
# ----------------------------------------------------------------------------------------------
def _ard_weights(M):
    import jax
    import numpyro
    import numpyro.distributions as dist

    alpha = numpyro.sample("alpha", dist.Gamma(VAGUE, VAGUE).expand([M]).to_event(1))
    return numpyro.sample("w", dist.Normal(0.0, jax.lax.rsqrt(alpha)).to_event(1))


def student_t_rvm(Phi, t=None):
    """ARD weights, Gaussian noise with precision gamma * lam_n, lam_n ~ Gamma(2, 2) per point."""
    import jax
    import numpyro
    import numpyro.distributions as dist

    N, M = Phi.shape
    w = _ard_weights(M)
    gamma = numpyro.sample("gamma", dist.Gamma(VAGUE, VAGUE))
    with numpyro.plate("data", N):
        lam = numpyro.sample("lam", dist.Gamma(STUDENT_SHAPE, STUDENT_SHAPE))
        numpyro.sample("t", dist.Normal(Phi @ w, jax.lax.rsqrt(gamma * lam)), obs=t)


def student_t_table_rvm(X, t=None):
    """:func:`student_t_rvm` on a table X of shape (N, I, J): one ARD precision per cell (i, j),
    t_n ~ sum_ij X[n, i, j] w_ij plus Student-t noise."""
    return student_t_rvm(X.reshape(X.shape[0], -1), t)


def weighted_logit_rvm(Phi, t=None):
    """ARD weights, each point's Bernoulli log-likelihood scaled by omega_n ~ Gamma(1.5, 1.5)."""
    import numpyro
    import numpyro.distributions as dist

    N, M = Phi.shape
    w = _ard_weights(M)
    with numpyro.plate("data", N):
        omega = numpyro.sample("omega", dist.Gamma(WEIGHT_SHAPE, WEIGHT_SHAPE))
        with numpyro.handlers.scale(scale=omega):
            numpyro.sample("t", dist.Bernoulli(logits=Phi @ w), obs=t)


def group_ard_rvm(Phi, t=None):
    """One precision per group of ``GROUP_SIZE`` consecutive columns, Gaussian noise."""
    import jax
    import numpy as np
    import numpyro
    import numpyro.distributions as dist

    N, M = Phi.shape
    groups = np.arange(M) // GROUP_SIZE
    alpha = numpyro.sample("alpha", dist.Gamma(VAGUE, VAGUE).expand([int(groups[-1]) + 1]).to_event(1))
    w = numpyro.sample("w", dist.Normal(0.0, jax.lax.rsqrt(alpha[groups])).to_event(1))
    gamma = numpyro.sample("gamma", dist.Gamma(VAGUE, VAGUE))
    with numpyro.plate("data", N):
        numpyro.sample("t", dist.Normal(Phi @ w, jax.lax.rsqrt(gamma)), obs=t)


# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------
def make_problem(n):
    """The :class:`Problem` at ``n`` training points (see the module docstring)."""
    from ppl_sbl import basis, datasets

    d = datasets.sinc(n_train=n, n_test=N_TEST, seed=0)
    Phi = basis.rbf(d.X_train, delta=DELTA, bias=True)
    Phi_test = basis.rbf(d.X_test, d.X_train, delta=DELTA, bias=True)

    c = datasets.mixture(n_train=n, n_test=N_TEST, seed=0)
    Phi_c = basis.rbf(c.X_train, delta=CLASSIFICATION_DELTA, bias=True)
    Phi_c_test = basis.rbf(c.X_test, c.X_train, delta=CLASSIFICATION_DELTA, bias=True)

    g = datasets.sinc(n_train=n, n_test=N_TEST, noise_features=1, seed=0)
    centres = g.X_train[::2]
    X_table = basis.rbf_table(g.X_train, centres, delta=DELTA)
    X_table_test = basis.rbf_table(g.X_test, centres, delta=DELTA)
    return Problem(n, Phi, d.t_train, Phi_test, d.t_test, Phi_c, c.t_train, Phi_c_test, c.t_test,
                   X_table, g.t_train, X_table_test, g.t_test)


# ----------------------------------------------------------------------------------------------
# The peers
# ----------------------------------------------------------------------------------------------
def _rmse(pred, target):
    import numpy as np

    return float(np.sqrt(np.mean((np.asarray(pred) - np.asarray(target)) ** 2)))


def describe(kind):
    """``describe(result, problem)`` for a fit on the data ``kind`` ("regression",
    "classification", "table" or "table_flat", the table flattened): schedule, convergence, ELBO, sweeps or moves, relevant columns
    (and groups of ``GROUP_SIZE``), test RMSE or error."""
    import numpy as np

    def fn(res, p):
        columns = np.flatnonzero(np.asarray(res.relevant))
        out = {"schedule": res.schedule, "converged": bool(res.converged), "elbo": float(res.elbo),
               "num_sweeps": int(res.num_sweeps), "num_moves": res.num_moves, "relevant": int(len(columns)),
               "relevance_columns": columns.tolist(),
               "relevant_groups": int(len(np.unique(columns // GROUP_SIZE)))}
        if kind == "classification":
            prob = np.asarray(res.predict(p.Phi_c_test))
            out["test_error"] = float(100.0 * np.mean((prob > 0.5) != (p.labels_test > 0.5)))
        elif kind == "table":
            out["rmse"] = _rmse(res.predict(p.X_table_test)[0], p.t_table_test)
        elif kind == "table_flat":
            out["rmse"] = _rmse(res.predict(p.X_table_test.reshape(len(p.t_table_test), -1))[0], p.t_table_test)
        else:
            out["rmse"] = _rmse(res.predict(p.Phi_test)[0], p.t_test)
        return out
    return fn


def peers(compiled=False):
    """name -> :class:`Peer`, in the order in which every round calls them: each shipped model
    with its own guide and with the derived one, then the shipped model on the flattened table,
    then the edited models; with ``compiled``, then the derived fits and the edited models with
    the fast schedule as one compiled program (``CAVI(..., compiled=True)``: ``<name>_compiled``)."""
    import ppl_sbl
    from ppl_sbl.models import robust_rvm, rvm

    def cavi(model, data, guide=None, **kw):
        kw.update({} if guide is None else {"guide": guide})
        if data == "regression":
            return lambda p: ppl_sbl.CAVI(model, progress_bar=False, **kw).run(p.Phi, p.t)
        if data == "classification":
            return lambda p: ppl_sbl.CAVI(model, progress_bar=False, **kw).run(p.Phi_c, p.labels)
        if data == "table":  # the shipped model takes the flattened design, the edited one the table
            if model is student_t_table_rvm:
                return lambda p: ppl_sbl.CAVI(model, progress_bar=False).run(p.X_table, p.t_table)
            return lambda p: ppl_sbl.CAVI(model, progress_bar=False).run(p.X_table.reshape(p.n, -1), p.t_table)
        raise ValueError(data)

    out = {}
    for name, model, data in (("rvm_regression", rvm.regression, "regression"),
                              ("rvm_classification", rvm.classification, "classification"),
                              ("robust_regression", robust_rvm.regression, "regression"),
                              ("robust_classification", robust_rvm.classification, "classification")):
        out[name] = Peer(cavi(model, data), describe(data))
        out[name + "_derived"] = Peer(cavi(model, data, "derived"), describe(data))
    out["robust_regression_table"] = Peer(cavi(robust_rvm.regression, "table"), describe("table_flat"))
    out["student_t"] = Peer(cavi(student_t_rvm, "regression"), describe("regression"))
    out["student_t_table"] = Peer(cavi(student_t_table_rvm, "table"), describe("table"))
    out["weighted_logit"] = Peer(cavi(weighted_logit_rvm, "classification"), describe("classification"))
    out["group_ard"] = Peer(cavi(group_ard_rvm, "regression"), describe("regression"))
    if compiled:
        for name, model, data in (("rvm_regression_derived", rvm.regression, "regression"),
                                  ("rvm_classification_derived", rvm.classification, "classification"),
                                  ("robust_regression_derived", robust_rvm.regression, "regression"),
                                  ("robust_classification_derived", robust_rvm.classification, "classification"),
                                  ("student_t", student_t_rvm, "regression"),
                                  ("weighted_logit", weighted_logit_rvm, "classification")):
            guide = "derived" if name.endswith("_derived") else None
            out[name + "_compiled"] = Peer(cavi(model, data, guide, compiled=True), describe(data))
    return out


# ----------------------------------------------------------------------------------------------
# Comparisons and goals
# ----------------------------------------------------------------------------------------------
def _goal(value, ok):
    """{"value", "met"}; met is None where the value is missing."""
    return {"value": value, "met": None if value is None else bool(ok(value))}


def _ok(rec):
    return rec.get("status") in ("measured", "capped")


def compare_derived(n, name, peers_rec):
    """The derived guide of shipped model ``name`` against its own guide."""
    s, d = peers_rec[name], peers_rec[name + "_derived"]
    row = {"kind": "derived", "n": n, "model": name, "against": name, "peer": name + "_derived"}
    if not (_ok(s) and _ok(d)):
        row["goals"] = {"elbo": _goal(None, None), "time": _goal(None, None)}
        return row
    ratio = d["seconds"] / s["seconds"]
    rel = abs(d["elbo"] - s["elbo"]) / abs(s["elbo"])
    row.update(seconds=d["seconds"], seconds_against=s["seconds"], ratio=ratio,
               first_call_seconds=d["first_call_seconds"], first_call_seconds_against=s["first_call_seconds"],
               elbo_relative_difference=rel, schedule=d["schedule"], schedule_against=s["schedule"],
               relevant=d["relevant"], relevant_against=s["relevant"], converged=d["converged"],
               converged_against=s["converged"])
    row["goals"] = {"elbo": _goal(rel, lambda v: v <= ELBO_GOAL),
                    "time": _goal(ratio, lambda v: v <= DERIVED_TIME_GOAL)}
    return row


def compare_edited(n, name, peers_rec):
    """Edited model ``name`` against its nearest shipped model; the goals apply at the sizes issue 41
    names (``applies``)."""
    near = EDITED[name]
    e, s = peers_rec[name], peers_rec[near]
    group = name == "group_ard"
    row = {"kind": "edited", "n": n, "model": name, "against": near, "peer": name,
           "applies": n in (GROUP_GOAL_SIZES if group else EDITED_GOAL_SIZES)}
    if not (_ok(e) and _ok(s)):
        row["goals"] = {k: _goal(None, None) for k in ("time", "relevant", "quality", "converged")}
        return row
    quality = "rmse" if "rmse" in e else "test_error"
    ratio = e["seconds"] / s["seconds"]
    count, count_against = ((e["relevant_groups"], s["relevant_groups"]) if group else (e["relevant"], s["relevant"]))
    q, q_against = e[quality], s[quality]
    q_ratio = q / q_against if q_against > 0 else (1.0 if q == 0 else float("inf"))
    row.update(seconds=e["seconds"], seconds_against=s["seconds"], ratio=ratio,
               first_call_seconds=e["first_call_seconds"], first_call_seconds_against=s["first_call_seconds"],
               count_of="relevant_groups" if group else "relevant", count=count, count_against=count_against,
               quality=quality, quality_value=q, quality_against=q_against, quality_ratio=q_ratio,
               schedule=e["schedule"], schedule_against=s["schedule"], converged=e["converged"],
               converged_against=s["converged"])
    goals = {"time": _goal(ratio, lambda v: v <= (GROUP_TIME_GOAL if group else EDITED_TIME_GOAL)),
             "relevant": _goal(count, lambda v: v <= 2 * count_against + 2),
             "converged": _goal(e["converged"], bool)}
    if not group:
        goals["quality"] = _goal(q_ratio, lambda v: v <= QUALITY_GOAL)
    row["goals"] = goals
    return row


def _cell(goal):
    return "-" if goal is None or goal["met"] is None else ("pass" if goal["met"] else "FAIL")


def print_table(comparisons):
    """The comparisons as one table (warm medians; first calls include compilation), with the
    goals as pass/fail columns ('-': no value; goals in parentheses do not apply at that size)."""
    head = (f"{'N':>5} {'model':<22} {'against':<24} {'s':>8} {'s against':>9} {'ratio':>6} {'1st s':>6} "
            f"{'1st ag.':>7} {'elbo rel':>8} {'count':>9} {'test':>15} {'schedule':>11} {'conv':>5}  goals")
    lines = [head, "-" * len(head)]
    for c in comparisons:
        if "seconds" not in c:
            lines.append(f"{c['n']:>5} {c['model']:<22} {c['against']:<24} (a fit failed or was skipped)")
            continue
        if c["kind"] == "derived":
            count = f"{c['relevant']}/{c['relevant_against']}"
            test = "-"
            elbo = fmt(c["elbo_relative_difference"], ".1e")
        else:
            count = f"{c['count']}/{c['count_against']}" + ("g" if c["count_of"] == "relevant_groups" else "")
            unit = "" if c["quality"] == "rmse" else "%"
            spec = ".4f" if c["quality"] == "rmse" else ".1f"
            test = f"{fmt(c['quality_value'], spec)}{unit}/{fmt(c['quality_against'], spec)}{unit}"
            elbo = "-"
        conv = "y" if c["converged"] else "n"
        sched = f"{c['schedule']}/{c['schedule_against']}"
        goals = " ".join(f"{k}:{_cell(g)}" for k, g in c["goals"].items())
        if c["kind"] == "edited" and not c["applies"]:
            goals = f"({goals})"
        lines.append(f"{c['n']:>5} {c['model']:<22} {c['against']:<24} {fmt(c['seconds'], '.3f'):>8} "
                     f"{fmt(c['seconds_against'], '.3f'):>9} {fmt(c['ratio'], '.2f'):>6} "
                     f"{fmt(c['first_call_seconds'], '.1f'):>6} {fmt(c['first_call_seconds_against'], '.1f'):>7} "
                     f"{elbo:>8} {count:>9} {test:>15} {sched:>11} {conv:>5}  {goals}")
    text = "\n".join(lines)
    log(text)
    return text


def goal_summary(comparisons):
    """Every goal that applies, met or not: (list of 'N model goal' strings failed, count applied)."""
    failed, applied = [], 0
    for c in comparisons:
        if c["kind"] == "edited" and not c["applies"]:
            continue
        for k, g in c["goals"].items():
            applied += 1
            if g["met"] is not True:
                failed.append(f"N={c['n']} {c['model']} {k}")
    return failed, applied


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------
def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[200, 1000, 2000], help="training sizes N (default 200 1000 2000)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds after the first call (default 3)")
    p.add_argument("--cap", type=float, default=60.0,
                   help="seconds: a peer whose first call takes longer is called once only at that size (default 60)")
    p.add_argument("--skip", nargs="+", default=[], help="peers not run")
    p.add_argument("--compiled", action="store_true",
                   help="also the derived fits and edited models with CAVI(..., compiled=True), against the loop")
    p.add_argument("--blas-threads", type=int, default=1,
                   help="OPENBLAS_NUM_THREADS, set before numpy is imported (default 1; 0: leave it as it is)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: N = 60, one call per peer (--cap 0: its time is that call less its compilation)")
    p.add_argument("--out", default=None, help="JSON record (default benchmarks/results/derived_cavi_<backend>[_quick].json)")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.rounds, args.cap = [60], 1, 0.0
    return args


def main(argv=None):
    args = parse_args(argv)
    set_blas_threads(args.blas_threads)
    import ppl_sbl  # noqa: F401  (float64 on)

    all_peers = peers(args.compiled)
    unknown = set(args.skip) - set(all_peers)
    if unknown:
        raise SystemExit(f"--skip: unknown peers {sorted(unknown)}; choose from {list(all_peers)}")
    clock = CompileClock()
    env = environment()
    out = args.out or os.path.join(HERE, "results", f"derived_cavi_{env['jax_backend']}"
                                   + ("_quick" if args.quick else "") + ".json")
    log(f"# derived guides and edited models against the shipped guides  {env['date']}  host={env['hostname']}  "
        f"backend={env['jax_backend']}  cpus={env['cpu_count']}  load={env['load_average']}  "
        f"blas threads={env['blas_threads_env']}")
    log(f"# sizes={args.sizes} rounds={args.rounds} cap={args.cap:g}s; seconds: median of the rounds (warm); "
        "'1st': the first call, compilation included (the process's first call also pays JAX's start)")
    record = {
        "benchmark": "derived guides vs shipped guides, edited models vs the nearest shipped model (issue 41 point 6)",
        "timing": ("seconds: median over the rounds after a first call; first_call_seconds: that first call, JAX "
                   "compilation included; the first call of the process (first_peer) also pays JAX's start"),
        "first_peer": next(name for name in all_peers if name not in args.skip),
        "goals": {"derived_elbo_relative": ELBO_GOAL, "derived_time_ratio": DERIVED_TIME_GOAL,
                  "edited_time_ratio": EDITED_TIME_GOAL, "edited_relevant": "at most 2 x nearest + 2",
                  "edited_quality_ratio": QUALITY_GOAL, "edited_sizes": list(EDITED_GOAL_SIZES),
                  "group_time_ratio": GROUP_TIME_GOAL, "group_relevant": "groups at most 2 x nearest's + 2",
                  "group_sizes": list(GROUP_GOAL_SIZES)},
        "group_size": GROUP_SIZE, "environment": env, "args": vars(args), "rows": [], "comparisons": [],
        "partial": True,
    }
    start_all = time.perf_counter()
    for n in sorted(args.sizes):
        problem = make_problem(n)
        log(f"\n== N = {n}: sinc M = {problem.Phi.shape[1]}, table {problem.X_table.shape[1:]} "
            f"(M = {problem.X_table.shape[1] * problem.X_table.shape[2]}), test {N_TEST}")
        row = {"n": n, "m": int(problem.Phi.shape[1]), "m_table": int(problem.X_table.shape[1] * problem.X_table.shape[2]),
               "rounds": args.rounds,
               "peers": time_peers(all_peers, problem, rounds=args.rounds, cap=args.cap, skip=set(args.skip),
                                   clock=clock)}
        for name, rec in row["peers"].items():
            if _ok(rec):
                q = f"RMSE {rec['rmse']:.4f}" if "rmse" in rec else f"error {rec['test_error']:.1f}%"
                log(f"  {name:<28} {rec['seconds']:8.3f}s median ({rec['status']}); first call "
                    f"{rec['first_call_seconds']:.2f}s; {rec['schedule']}, converged {rec['converged']}, "
                    f"{rec['relevant']} relevant; {q}; ELBO {rec['elbo']:.6f}")
        record["rows"].append(row)
        record["comparisons"] += ([compare_derived(n, name, row["peers"]) for name in SHIPPED]
                                  + [compare_edited(n, name, row["peers"]) for name in EDITED])
        for name, rec in row["peers"].items():  # the compiled schedule against the loop: the same fit
            base = row["peers"].get(name[:-len("_compiled")]) if name.endswith("_compiled") else None
            if base is not None and _ok(rec) and _ok(base):
                row.setdefault("compiled", {})[name] = {
                    "over_loop": rec["seconds"] / base["seconds"],
                    "elbo_relative_difference": abs(rec["elbo"] - base["elbo"]) / abs(base["elbo"])}
                log(f"  {name:<28} {rec['seconds'] / base['seconds']:.2f}x the loop's warm time; ELBO relative "
                    f"difference {row['compiled'][name]['elbo_relative_difference']:.1e}")
        write_record(record, out, announce=False)
    log("")
    record["table"] = print_table(record["comparisons"])
    failed, applied = goal_summary(record["comparisons"])
    record["goals_failed"], record["goals_applied"] = failed, applied
    log(f"\n# issue 41 goals: {applied - len(failed)} of {applied} met" + (f"; not met: {', '.join(failed)}"
                                                                          if failed else ""))
    record["total_seconds"] = time.perf_counter() - start_all
    record["partial"] = False
    log(f"# total benchmark time {record['total_seconds']:.1f}s")
    write_record(record, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
