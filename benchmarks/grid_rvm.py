"""Benchmark: grid RVM (p-grid and s-grid) against the RVM on the same flattened basis.

Not a test. The grid RVM paper (Kropotov et al.) says a sweep of the p-grid or s-grid costs
about the same as an RVM sweep; the goal here is that a grid sweep costs at most 1.2 times an
RVM sweep of the same size. Every problem uses the per-dimension RBF table of the paper
(``basis.rbf_table``, delta = 5.55, one centre per training point): T of shape (N, N, d), one
row per centre and one column per input dimension. The three models fitted to it are

* ``grid_rvm.regression(T, t, kind="p")`` / ``kind="s"`` (``classification`` for labels), and
* ``rvm.regression(T.reshape(N, -1), t)`` (``classification``): the plain RVM on the same
  flattened basis, M = N d coefficients.

Problems: the noisy sinc (regression, ``datasets.sinc``) and the Gaussian mixture
(classification, ``datasets.mixture``), each with ``k`` standard-normal noise input columns
appended (d = 1 + k for the sinc, 2 + k for the mixture), so that M = N d grows with k.

Measurements per problem:

1. Per sweep, at the full size M (no pruning): one jitted sweep (the updates, then the ELBO of
   the updated state), compiled first, then timed over blocks of chained sweeps
   (``state, elbo = sweep(state, data)``, ``block_until_ready`` at the end of a block of about
   ``--block-seconds``, the same number of sweeps for the three models, sized from the fastest
   sweep seen so far) from one warm state (after ``--warm-sweeps`` sweeps from ``init``). The
   three models are timed in interleaved rounds (the order rotating from round to round) for
   ``--seconds`` per problem; the table gives the minimum over rounds, the ratio of the medians
   and the ratio of the minimum process CPU times (all threads); the JSON keeps each model's
   minimum, median and maximum, not the rounds' samples. The goal is judged twice: on the
   minima, and on the median of the per-round ratios (the three models of a round run back to
   back, so slow changes of the machine's load cancel; a single lucky block of one model moves
   the minimum but not this median); the 5th, 10th and 25th percentile ratios are printed beside
   them. On a shared machine the minimum over many short blocks is the least disturbed estimate;
   ``--single-thread`` (XLA on one thread) steadies it further. With ``--breakdown`` (default,
   but not with ``--quick``) the two halves are timed the same way: ``jax.jit(guide.update)``
   (chained) and ``jax.jit(guide.elbo)`` (calls on one updated state, issued back to back).
2. XLA's static cost of the compiled sweep (and halves): flops, bytes accessed and the number
   of fused kernels, which no other load on the machine disturbs.
3. To convergence: ``ppl_sbl.CAVI(model, tol, max_sweeps, schedule="sweep").run(...)`` with the
   default pruning (the sweep for the three models: CAVI's default schedule would run the RVM's
   fast schedule of ``ppl_sbl.fast_ard``),
   the first run of that problem's shapes in this process ("incl. jit"). Its compilation time
   (tracing, lowering and XLA compilation of every function jitted during the run, as reported
   by ``jax.monitoring``) is subtracted to give "excl. jit"; with ``--repeat-convergence`` the
   run is repeated (every shape now compiled) and the second wall time is recorded as well.
   Pruning changes the sizes, so the time per sweep of these runs is not the per-sweep cost at
   size M, and the number of sweeps to convergence differs between the models. Only problems
   with M <= ``--converge-max-m`` (default 1000) are run to convergence: the larger ones take
   thousands of sweeps.

The table prints the per-sweep times and the ratios grid/RVM, the wall times and ratios to
convergence, sweeps to convergence, active coefficients at the end, ELBO (not comparable
across models: different priors), test RMSE (sinc, 600 noiseless points) or test error
(mixture), and how many input dimensions keep at least one relevant coefficient. A JSON
record goes to ``benchmarks/results/``.

Usage::

    python benchmarks/grid_rvm.py --quick           # smoke run, tiny sizes
    python benchmarks/grid_rvm.py                   # sinc k = 0, 5, 20; mixture k = 0, 10, 30
    python benchmarks/grid_rvm.py --single-thread   # the same, XLA on one thread (steadier on a busy machine)
    python benchmarks/grid_rvm.py --sinc-noise 0 5 20 --mixture-noise 0 --converge-max-m 0   # converge everywhere
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for ``benchmarks.timing``

from benchmarks.timing import (CompileClock, Timer, environment, fmt, interleaved_rounds, load_average,  # noqa: E402
                               log, run_chained, summarise, timed, write_record, xla_cost)

DELTA = 5.55
MODELS = ("p", "s", "rvm")
GOAL = 1.2


# ----------------------------------------------------------------------------------------------
# Set-up
# ----------------------------------------------------------------------------------------------
def problem(task, k, n, n_test, seed=0):
    """Data set, training table T (N, N, d) and test table (N_test, N, d)."""
    from ppl_sbl import basis, datasets

    if task == "regression":
        d = datasets.sinc(n_train=n, n_test=n_test, noise_features=k, seed=seed)
    else:
        d = datasets.mixture(n_train=n, n_test=n_test, noise_features=k, seed=seed)
    T = basis.rbf_table(d.X_train, d.X_train, DELTA)
    T_test = basis.rbf_table(d.X_test, d.X_train, DELTA)
    return d, T, T_test


def guide_of(task, model):
    from ppl_sbl.models import grid_rvm, rvm

    table = {
        ("regression", "p"): grid_rvm.REGRESSION_GUIDE,
        ("regression", "s"): grid_rvm.S_REGRESSION_GUIDE,
        ("regression", "rvm"): rvm.REGRESSION_GUIDE,
        ("classification", "p"): grid_rvm.CLASSIFICATION_GUIDE,
        ("classification", "s"): grid_rvm.S_CLASSIFICATION_GUIDE,
        ("classification", "rvm"): rvm.CLASSIFICATION_GUIDE,
    }
    return table[task, model]


def model_of(task, model):
    from ppl_sbl.models import grid_rvm, rvm

    module = rvm if model == "rvm" else grid_rvm
    return getattr(module, task)


def call_args(model, T, t):
    """Positional and keyword arguments of the model: the table, or the flattened basis."""
    if model == "rvm":
        return (T.reshape(T.shape[0], -1), t), {}
    return (T, t), {"kind": model}


def new_inputs(model, T_test):
    return T_test.reshape(T_test.shape[0], -1) if model == "rvm" else T_test


# ----------------------------------------------------------------------------------------------
# Per-sweep timing at the full size
# ----------------------------------------------------------------------------------------------
def time_sweeps(task, T, t, *, rounds, min_rounds, seconds, block_seconds, warm_sweeps, breakdown, max_reps, clock):
    """Per-sweep (and per-update / per-ELBO) seconds of the three models at the full size: blocks of
    chained sweeps in interleaved rounds, the order rotating (:func:`benchmarks.timing.interleaved_rounds`);
    the record keeps each one's minimum, median and maximum over the rounds and the ratios to the RVM."""
    import jax
    import numpy as np

    import ppl_sbl

    setups = {}
    for model in MODELS:
        g = guide_of(task, model)  # its halves, update and ELBO, for the breakdown
        args, kwargs = call_args(model, T, t)
        cavi = ppl_sbl.CAVI(model_of(task, model), schedule="sweep")
        state, data = cavi.init(*args, **kwargs)
        sweep = cavi.step  # the updates, then the ELBO of the updated state; compiled once per guide
        with Timer(clock) as first:
            warm, value = jax.block_until_ready(sweep(state, data))
        if warm_sweeps:
            warm, value = run_chained(sweep, warm, data, warm_sweeps)
        estimate = min(timed(lambda: run_chained(sweep, warm, data, 1))[1] for _ in range(7))
        setup = {"data": data, "warm": warm, "sweep": sweep, "estimate": estimate,
                 "first_call_seconds": first.wall, "compile_seconds": first.compile,
                 "factored": bool(warm.w.base.shape[0] > 0),
                 "rank": int(warm.w.cov.shape[0]) if warm.w.base.shape[0] else None,
                 "warm_elbo": float(value)}
        if breakdown:
            setup["update"] = jax.jit(g.update)
            setup["elbo"] = jax.jit(g.elbo)
            setup["updated"] = jax.block_until_ready(setup["update"](warm, data))
            jax.block_until_ready(setup["elbo"](setup["updated"], data))
        # the sweep's own compiled program (CAVI.step calls it): its static cost without compiling it again
        setup["cost"] = {"sweep": xla_cost(ppl_sbl.engine.compiled_step(cavi.resolved_guide), state, data)}
        if breakdown:
            setup["cost"]["update"] = xla_cost(setup["update"], warm, data)
            setup["cost"]["elbo"] = xla_cost(setup["elbo"], setup["updated"], data)
        setups[model] = setup

    # the same number of sweeps per block for all three (a block's fixed costs weigh the same),
    # from the fastest time per sweep seen so far (re-estimated after every round: on a busy
    # machine the first estimates are far too slow)
    def block_reps(per_sweep):
        return int(min(max_reps, max(1, math.ceil(block_seconds / max(per_sweep, 1e-7)))))

    reps = [block_reps(statistics.median(setups[m]["estimate"] for m in MODELS))]
    reps_used = []

    # one block of reps[0] calls of each, timed per call
    def sweeps(s):  # chained sweeps, each on the last one's state
        return lambda: run_chained(s["sweep"], s["warm"], s["data"], reps[0])

    def updates(s):  # chained updates
        def block():
            state = s["warm"]
            for _ in range(reps[0]):
                state = s["update"](state, s["data"])
            jax.block_until_ready(state)
        return block

    def elbos(s):  # the ELBO of one state, calls issued back to back
        return lambda: jax.block_until_ready([s["elbo"](s["updated"], s["data"]) for _ in range(reps[0])])

    parts = ("sweep", "update", "elbo") if breakdown else ("sweep",)
    functions = {}
    for model in MODELS:
        s = setups[model]
        functions[model, "sweep"] = sweeps(s)
        if breakdown:
            functions[model, "update"] = updates(s)
            functions[model, "elbo"] = elbos(s)

    def resize(samples):
        reps_used.append(reps[0])
        reps[0] = block_reps(statistics.median(min(samples[m, "sweep"]["wall"]) for m in MODELS))

    samples = interleaved_rounds(functions, rounds, warm=False, rotate=True, min_rounds=min_rounds, seconds=seconds,
                                 units=lambda: reps[0], after_round=resize)
    out = {}
    for model in MODELS:
        s = setups[model]
        _, value = run_chained(s["sweep"], s["warm"], s["data"], max(reps_used))  # finite over the longest block
        rec = {
            "rounds": len(reps_used),
            "reps_per_round": {"min": min(reps_used), "max": max(reps_used)},
            "first_call_seconds": s["first_call_seconds"],
            "compile_seconds": s["compile_seconds"],
            "factored_covariance": s["factored"],
            "woodbury_rank": s["rank"],
            "elbo_after_warm_up": s["warm_elbo"],
            "elbo_after_one_block": float(value),
            "finite": bool(np.isfinite(float(value))),
            "xla_cost": s["cost"],
        }
        for part in parts:
            rec[part] = summarise(samples[model, part]["wall"])
            cpu = summarise(samples[model, part]["cpu"])
            rec[part + "_cpu"] = {"min": cpu["min"], "median": cpu["median"]}
        out[model] = rec
    for model in ("p", "s"):
        wall, ref = samples[model, "sweep"]["wall"], samples["rvm", "sweep"]["wall"]
        out[model]["ratio_to_rvm"] = {
            stat: out[model]["sweep"][stat] / out["rvm"]["sweep"][stat] for stat in ("min", "median")
        }
        # per-round ratios (the three models of one round run back to back, so slow drifts of the
        # machine's load cancel): their median, and percentiles of each model's own samples
        out[model]["ratio_to_rvm"]["paired_median"] = statistics.median(a / b for a, b in zip(wall, ref))
        out[model]["ratio_to_rvm"]["percentiles"] = {
            q: float(np.percentile(wall, q) / np.percentile(ref, q)) for q in (5, 10, 25)
        }
        out[model]["flops_ratio_to_rvm"] = out[model]["xla_cost"]["sweep"]["flops"] / out["rvm"]["xla_cost"]["sweep"]["flops"]
        out[model]["cpu_ratio_to_rvm"] = {
            stat: out[model]["sweep_cpu"][stat] / out["rvm"]["sweep_cpu"][stat] for stat in ("min", "median")
        }
        if breakdown:
            out[model]["update_ratio_to_rvm"] = out[model]["update"]["min"] / out["rvm"]["update"]["min"]
            out[model]["elbo_ratio_to_rvm"] = out[model]["elbo"]["min"] / out["rvm"]["elbo"]["min"]
    return out


# ----------------------------------------------------------------------------------------------
# To convergence
# ----------------------------------------------------------------------------------------------
def run_convergence(task, model, d, T, T_test, *, tol, max_sweeps, repeat, clock):
    import numpy as np

    import ppl_sbl

    args, kwargs = call_args(model, T, d.t_train)
    cavi = ppl_sbl.CAVI(model_of(task, model), tol=tol, max_sweeps=max_sweeps, progress_bar=False, schedule="sweep")
    with Timer(clock) as tm:
        res = cavi.run(*args, **kwargs)
    rec = {
        "seconds_incl_jit": tm.wall,
        "compile_seconds": tm.compile,
        "compile_seconds_parts": tm.compile_parts,
        "compilations": tm.compilations,
        "seconds_excl_jit": tm.wall - tm.compile,
        "seconds_reported_by_result": float(res.seconds),
    }
    if repeat:
        start = time.perf_counter()
        res2 = cavi.run(*args, **kwargs)
        rec["seconds_second_run"] = time.perf_counter() - start
        if res2.num_sweeps != res.num_sweeps or not np.isclose(res2.elbo, res.elbo, rtol=1e-10, atol=1e-8):
            log(f"  [warn] repeated CAVI run differs: {res.num_sweeps} vs {res2.num_sweeps} sweeps, "
                f"ELBO {res.elbo!r} vs {res2.elbo!r}")
    N, _, dims = T.shape
    relevant = np.asarray(res.relevant)
    out = res.predict(new_inputs(model, T_test))
    if task == "regression":
        mean = np.asarray(out[0])
        rec["rmse"] = float(np.sqrt(np.mean((mean - d.t_test) ** 2)))
    else:
        rec["test_error"] = float(np.mean((np.asarray(out) > 0.5) != (d.t_test > 0.5)))
    rec.update({
        "elbo": float(res.elbo),
        "num_sweeps": int(res.num_sweeps),
        "converged": bool(res.converged),
        "seconds_per_sweep_excl_jit": rec["seconds_excl_jit"] / max(res.num_sweeps, 1),
        "num_prunes": len(res.prune_events),
        "num_active_at_end": int(res.num_active),
        "relevant": int(relevant.sum()),
        "relevant_dims": int(relevant.reshape(N, dims).any(axis=0).sum()),
        "relevant_rule": "res.relevant; relevant_dims = input dimensions (table columns) with a relevant cell",
    })
    return rec


# ----------------------------------------------------------------------------------------------
# Reporting
# ----------------------------------------------------------------------------------------------
def print_table(rows, breakdown):
    lines = ["Per sweep at the full size M (no pruning), milliseconds, minimum over rounds:"]
    head = (f"{'task':<14} {'k':>3} {'N':>4} {'M':>5} {'form':>6} | {'p':>8} {'s':>8} {'RVM':>8} | "
            f"{'p/RVM':>5} {'s/RVM':>5} {'goal':>4} | {'med p/R':>7} {'s/R':>5} | {'cpu p/R':>7} {'s/R':>5} | "
            f"{'flop p/R':>8} {'s/R':>5} | {'kern p':>6} {'s':>4} {'RVM':>4}")
    if breakdown:
        head += (f" | {'upd p':>7} {'upd s':>7} {'upd RVM':>7} {'elbo p':>7} {'elbo s':>7} {'elbo RVM':>8} | "
                 f"{'upd p/R':>7} {'s/R':>5} {'elbo p/R':>8} {'s/R':>5}")
    lines += [head, "-" * len(head)]
    for r in rows:
        ps = r["per_sweep"]
        ms = {m: 1e3 * ps[m]["sweep"]["min"] for m in MODELS}
        ok = max(ps["p"]["ratio_to_rvm"]["min"], ps["s"]["ratio_to_rvm"]["min"]) <= GOAL
        form = f"W{ps['rvm']['woodbury_rank']}" if ps["rvm"]["factored_covariance"] else "dense"
        line = (f"{r['task']:<14} {r['k']:>3} {r['n']:>4} {r['m']:>5} {form:>6} | {ms['p']:>8.3f} {ms['s']:>8.3f} "
                f"{ms['rvm']:>8.3f} | {ps['p']['ratio_to_rvm']['min']:>5.2f} {ps['s']['ratio_to_rvm']['min']:>5.2f} "
                f"{'yes' if ok else 'NO':>4} | {ps['p']['ratio_to_rvm']['median']:>7.2f} "
                f"{ps['s']['ratio_to_rvm']['median']:>5.2f} | {ps['p']['cpu_ratio_to_rvm']['min']:>7.2f} "
                f"{ps['s']['cpu_ratio_to_rvm']['min']:>5.2f} | {ps['p']['flops_ratio_to_rvm']:>8.3f} "
                f"{ps['s']['flops_ratio_to_rvm']:>5.3f} | {ps['p']['xla_cost']['sweep']['fusions']:>6} "
                f"{ps['s']['xla_cost']['sweep']['fusions']:>4} {ps['rvm']['xla_cost']['sweep']['fusions']:>4}")
        if breakdown:
            up = {m: 1e3 * ps[m]["update"]["min"] for m in MODELS}
            el = {m: 1e3 * ps[m]["elbo"]["min"] for m in MODELS}
            line += (f" | {up['p']:>7.3f} {up['s']:>7.3f} {up['rvm']:>7.3f} {el['p']:>7.3f} {el['s']:>7.3f} "
                     f"{el['rvm']:>8.3f} | {ps['p']['update_ratio_to_rvm']:>7.2f} {ps['s']['update_ratio_to_rvm']:>5.2f} "
                     f"{ps['p']['elbo_ratio_to_rvm']:>8.2f} {ps['s']['elbo_ratio_to_rvm']:>5.2f}")
        lines.append(line)

    conv_rows = [r for r in rows if r.get("convergence")]
    if conv_rows:
        lines += ["", "To convergence (CAVI's sweep, pruning on), seconds excl. jit (incl. jit in brackets):"]
        head = (f"{'task':<14} {'k':>3} {'M':>5} | {'p':>14} {'s':>14} {'RVM':>14} | {'p/RVM':>5} {'s/RVM':>5} | "
                f"{'sweeps p':>8} {'s':>5} {'RVM':>5} | {'ms/sw p':>7} {'s':>6} {'RVM':>6} | {'active p':>8} {'s':>5} "
                f"{'RVM':>5} | {'ELBO p':>10} {'s':>10} {'RVM':>10} | {'test p':>7} {'s':>7} {'RVM':>7} | "
                f"{'dims p':>6} {'s':>3} {'RVM':>3}")
        lines += [head, "-" * len(head)]
        for r in conv_rows:
            c = r["convergence"]
            ex = {m: c[m]["seconds_excl_jit"] for m in MODELS}
            metric = "rmse" if r["task"] == "regression" else "test_error"
            unconverged = {m: "" if c[m]["converged"] else "!" for m in MODELS}
            lines.append(
                f"{r['task']:<14} {r['k']:>3} {r['m']:>5} | "
                + " ".join(f"{fmt(ex[m], '.2f') + ' (' + fmt(c[m]['seconds_incl_jit'], '.1f') + ')':>14}" for m in MODELS)
                + f" | {ex['p'] / ex['rvm']:>5.2f} {ex['s'] / ex['rvm']:>5.2f} | "
                + f"{str(c['p']['num_sweeps']) + unconverged['p']:>8} {str(c['s']['num_sweeps']) + unconverged['s']:>5} "
                + f"{str(c['rvm']['num_sweeps']) + unconverged['rvm']:>5} | "
                + f"{1e3 * c['p']['seconds_per_sweep_excl_jit']:>7.2f} {1e3 * c['s']['seconds_per_sweep_excl_jit']:>6.2f} "
                + f"{1e3 * c['rvm']['seconds_per_sweep_excl_jit']:>6.2f} | "
                + f"{c['p']['num_active_at_end']:>8} {c['s']['num_active_at_end']:>5} {c['rvm']['num_active_at_end']:>5} | "
                + f"{c['p']['elbo']:>10.2f} {c['s']['elbo']:>10.2f} {c['rvm']['elbo']:>10.2f} | "
                + f"{c['p'][metric]:>7.4f} {c['s'][metric]:>7.4f} {c['rvm'][metric]:>7.4f} | "
                + f"{c['p']['relevant_dims']:>6} {c['s']['relevant_dims']:>3} {c['rvm']['relevant_dims']:>3}"
            )
    lines += [
        "",
        "Columns: k = noise input columns (d = 1 + k for the sinc, 2 + k for the mixture); M = N d coefficients;",
        "  form = covariance form of q(w) at size M (dense, or W<r>: Woodbury, factored with rank r; the same for",
        "  all three models). Per sweep: chained jitted sweeps (update + ELBO) from one warm state, minimum over",
        f"  interleaved rounds; goal: grid/RVM <= {GOAL} for both grids (on the minima); med = ratio of the",
        "  medians over rounds; cpu = ratio of the minimum process CPU times (all threads); flop = ratio of",
        "  XLA's flop counts of the compiled sweeps (LAPACK calls not counted: the same in all three); kern =",
        "  fused kernels in the compiled sweep (each costs a fixed launch overhead on CPU). upd / elbo:",
        "  jax.jit(guide.update) chained, jax.jit(guide.elbo) on one state, back to back; R = RVM.",
        "  To convergence: CAVI.run with tol and pruning as given, first run of the shape (incl. jit) minus the",
        "  compilation time reported by jax.monitoring (excl. jit); '!' = not converged within max_sweeps;",
        "  ms/sw = excl.-jit time per sweep (pruned sizes); active = coefficients left unpruned; ELBO not",
        "  comparable across models (different priors); test = RMSE on the noiseless sinc test points or",
        "  test error rate on the mixture; dims = input dimensions with at least one relevant coefficient.",
    ]
    text = "\n".join(lines)
    log(text)
    return text



# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sinc-noise", type=int, nargs="*", default=[0, 5, 20], metavar="K",
                   help="noise input columns of the sinc (regression) problems (default 0 5 20)")
    p.add_argument("--mixture-noise", type=int, nargs="*", default=[0, 10, 30], metavar="K",
                   help="noise input columns of the mixture (classification) problems (default 0 10 30)")
    p.add_argument("--n-sinc", type=int, default=100, help="sinc training size N (default 100, the paper's)")
    p.add_argument("--n-mixture", type=int, default=200, help="mixture training size N (default 200, the paper's)")
    p.add_argument("--n-test-sinc", type=int, default=600, help="noiseless sinc test points (default 600)")
    p.add_argument("--n-test-mixture", type=int, default=2000, help="mixture test points (default 2000)")
    p.add_argument("--seconds", type=float, default=60.0,
                   help="time per problem for the interleaved timing rounds (default 60 s)")
    p.add_argument("--rounds", type=int, default=500, help="at most this many rounds per problem (default 500)")
    p.add_argument("--min-rounds", type=int, default=5, help="at least this many, whatever the time (default 5)")
    p.add_argument("--block-seconds", type=float, default=0.02,
                   help="target length of one timed block of chained sweeps (default 0.02 s, at least one sweep: "
                        "many short blocks, whose minimum is least disturbed by other work on the machine)")
    p.add_argument("--max-reps", type=int, default=2000, help="most sweeps in one timed block")
    p.add_argument("--warm-sweeps", type=int, default=10, help="sweeps from init before the timed blocks start")
    p.add_argument("--breakdown", dest="breakdown", action="store_true", default=None,
                   help="also time jax.jit(guide.update) and jax.jit(guide.elbo) on their own (default: on, "
                        "off with --quick)")
    p.add_argument("--no-breakdown", dest="breakdown", action="store_false", help="do not time them")
    p.add_argument("--converge-max-m", type=int, default=1000, metavar="M",
                   help="run to convergence only where M = N d <= M (default 1000: sinc k = 0, 5 and mixture "
                        "k = 0; larger fits take thousands of sweeps); 0: everywhere")
    p.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                   help="skip the tiny warm-up fits (one-off eager compilations then count to the first problem)")
    p.add_argument("--no-convergence", dest="convergence", action="store_false", help="per-sweep timings only")
    p.add_argument("--repeat-convergence", action="store_true",
                   help="run each fit to convergence a second time (shapes compiled) and record its wall time")
    p.add_argument("--tol", type=float, default=1e-9, help="CAVI tolerance (default 1e-9, CAVI's default)")
    p.add_argument("--max-sweeps", type=int, default=20000, help="CAVI max sweeps (default 20000)")
    p.add_argument("--single-thread", action="store_true",
                   help="XLA on one CPU thread (XLA_FLAGS, set before jax is imported): steadier timings on a "
                        "shared machine")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: sinc k = 1 (N = 30, M = 60), mixture k = 1 (N = 40, M = 120), 5 timing rounds, "
                        "to convergence (100 sweeps at most) where M <= 60 only (the sinc; the mixture takes the "
                        "skipping path), no warm-up, no breakdown")
    p.add_argument("--out", default=None, help="JSON output path (default benchmarks/results/grid_rvm_<backend>.json)")
    args = p.parse_args(argv)
    if args.breakdown is None:
        args.breakdown = not args.quick  # two more compilations per model: most of a smoke run's time
    if args.quick:
        args.sinc_noise = [1]
        args.mixture_noise = [1]
        args.n_sinc = 30
        args.n_mixture = 40
        args.n_test_sinc = 100
        args.n_test_mixture = 200
        args.rounds = min(args.rounds, 5)
        args.min_rounds = min(args.min_rounds, 5)
        args.seconds = min(args.seconds, 1.0)
        args.warm_sweeps = min(args.warm_sweeps, 3)
        args.max_sweeps = min(args.max_sweeps, 100)
        args.converge_max_m = 60
        args.warm_up = False
    return args


def warm_up(clock):
    """One-off eager-op compilations at a tiny size, not charged to the first problem."""
    for task in ("regression", "classification"):
        d, T, T_test = problem(task, 1, 12, 10)
        for model in MODELS:
            run_convergence(task, model, d, T, T_test, tol=1e-9, max_sweeps=20, repeat=False, clock=clock)


def main(argv=None):
    args = parse_args(argv)
    if args.single_thread:
        if "jax" in sys.modules:
            raise RuntimeError("--single-thread must be given before jax is imported")
        flags = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flags).strip()
    import ppl_sbl  # noqa: F401  (float64 on)

    clock = CompileClock()
    env = environment()
    log(f"# ppl-sbl grid RVM benchmark  {env['date']}  host={env['hostname']}  backend={env['jax_backend']} "
        f"devices={env['jax_devices']}  cpus={env['cpu_count']}  load={env['load_average']}")
    log(f"# versions {env['versions']}")
    log(f"# sinc k={args.sinc_noise} (N={args.n_sinc})  mixture k={args.mixture_noise} (N={args.n_mixture})  "
        f"timing {args.seconds}s/problem ({args.min_rounds}-{args.rounds} rounds)  tol={args.tol}  max_sweeps={args.max_sweeps}  quick={args.quick}")

    if args.warm_up:
        warm_up(clock)

    out = args.out
    if out is None:
        suffix = env["jax_backend"] + ("_quick" if args.quick else "")
        out = os.path.join(HERE, "results", f"grid_rvm_{suffix}.json")
    base = {
        "benchmark": "grid RVM (p-grid, s-grid) vs RVM on the same flattened per-dimension RBF table "
                     "(delta=5.55, centres = training inputs): sinc regression, mixture classification",
        "goal": f"per sweep at the same size: grid / RVM <= {GOAL}",
        "environment": env,
        "args": vars(args),
    }

    def save(extra, announce=False):  # after every problem too: a run cut short leaves its record
        write_record({**base, **extra}, out, announce=announce)

    problems = [("regression", k, args.n_sinc, args.n_test_sinc) for k in args.sinc_noise]
    problems += [("classification", k, args.n_mixture, args.n_test_mixture) for k in args.mixture_noise]
    rows = []
    t_all = time.perf_counter()
    for task, k, n, n_test in problems:
        d, T, T_test = problem(task, k, n, n_test)
        N, _, dims = T.shape
        row = {"task": task, "data": "sinc" if task == "regression" else "mixture", "k": k, "n": N, "d": dims,
               "m": N * dims, "n_test": int(T_test.shape[0])}
        log(f"\n== {task} ({row['data']}), k = {k}, N = {N}, d = {dims}, M = {N * dims}")
        # to convergence first: the first use of these shapes in this process (incl. jit)
        if args.convergence and (not args.converge_max_m or row["m"] <= args.converge_max_m):
            conv = {}
            for model in MODELS:
                c = conv[model] = run_convergence(task, model, d, T, T_test, tol=args.tol, max_sweeps=args.max_sweeps,
                                                  repeat=args.repeat_convergence, clock=clock)
                metric = f"RMSE {c['rmse']:.4f}" if task == "regression" else f"test error {c['test_error']:.4f}"
                second = f", second run {c['seconds_second_run']:.2f}s" if "seconds_second_run" in c else ""
                log(f"  converge {model:>3}: {c['seconds_excl_jit']:.2f}s excl. jit ({c['seconds_incl_jit']:.2f}s incl., "
                    f"{c['compile_seconds']:.2f}s compiling {c['compilations']} functions{second}); "
                    f"{c['num_sweeps']} sweeps, converged {c['converged']}; {c['num_prunes']} prunes, "
                    f"{c['num_active_at_end']} active; ELBO {c['elbo']:.3f}; {metric}; relevant {c['relevant']} "
                    f"in {c['relevant_dims']} dims")
            row["convergence"] = conv
        else:
            row["convergence"] = None
            log("  converge: skipped")
        ps = row["per_sweep"] = time_sweeps(task, T, d.t_train, rounds=args.rounds, min_rounds=args.min_rounds,
                                            seconds=args.seconds, block_seconds=args.block_seconds,
                                            warm_sweeps=args.warm_sweeps, breakdown=args.breakdown,
                                            max_reps=args.max_reps, clock=clock)
        for model in MODELS:
            x = ps[model]
            extra = ""
            if args.breakdown:
                extra = f"; update {1e3 * x['update']['min']:.3f} ms, elbo {1e3 * x['elbo']['min']:.3f} ms"
            ratio = f"; /RVM {x['ratio_to_rvm']['min']:.2f} (median {x['ratio_to_rvm']['median']:.2f})" if model != "rvm" else ""
            log(f"  per sweep {model:>3}: {1e3 * x['sweep']['min']:.3f} ms min, {1e3 * x['sweep']['median']:.3f} ms median "
                f"({x['rounds']} rounds of {x['reps_per_round']['min']}-{x['reps_per_round']['max']} sweeps){ratio}{extra}")
        rows.append(row)
        save({"rows": rows, "partial": True})

    log("")
    table = print_table(rows, args.breakdown)
    worst = max(max(r["per_sweep"]["p"]["ratio_to_rvm"]["min"], r["per_sweep"]["s"]["ratio_to_rvm"]["min"]) for r in rows)
    goal_met = worst <= GOAL
    log(f"\n# goal (grid sweep <= {GOAL} x RVM sweep, minimum over rounds): "
        f"{'met' if goal_met else 'NOT met'}; worst ratio {worst:.2f}")
    worst_paired = max(max(r["per_sweep"][m]["ratio_to_rvm"]["paired_median"] for m in ("p", "s")) for r in rows)
    goal_met_paired = worst_paired <= GOAL
    log(f"# goal on the median of the per-round ratios: {'met' if goal_met_paired else 'NOT met'}; "
        f"worst ratio {worst_paired:.2f}")
    for r in rows:
        pr = {m: r["per_sweep"][m]["ratio_to_rvm"] for m in ("p", "s")}
        log(f"#   {r['task']:<14} k={r['k']:<3} M={r['m']:<5} p/RVM, s/RVM: min {pr['p']['min']:.2f} {pr['s']['min']:.2f}; "
            + "; ".join(f"{q}th pct {pr['p']['percentiles'][q]:.2f} {pr['s']['percentiles'][q]:.2f}" for q in (5, 10, 25))
            + f"; per-round median {pr['p']['paired_median']:.2f} {pr['s']['paired_median']:.2f}")
    total = time.perf_counter() - t_all
    env["load_average_end"] = load_average()
    log(f"# total benchmark time {total:.1f}s")
    save({"rows": rows, "partial": False, "goal_met": goal_met, "worst_ratio": worst,
          "goal_met_per_round_median": goal_met_paired, "worst_per_round_median_ratio": worst_paired, "table": table,
          "total_seconds": total}, announce=True)


if __name__ == "__main__":
    main()
