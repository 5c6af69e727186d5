"""Benchmark: variational RVM regression on the noisy sinc, ours (closed-form CAVI) vs peers.

Not a test. Fits the same problem -- noisy sinc, Gaussian RBF basis (delta = 5.55) centred on
every training point plus a bias, so M = N + 1 -- at several training sizes N with

1. ``ppl_sbl.CAVI(rvm.regression)`` to convergence (tol 1e-9), pruned and un-pruned;
2. scikit-learn ``ARDRegression()`` with default settings on the same Phi;
3. NumPyro SVI (``AutoNormal`` guide, Adam) on the same NumPyro model ``rvm.regression``
   (default hyperparameters), run in jitted ``lax.scan`` chunks until the smoothed training
   loss stops changing (relative change of the per-chunk mean < ``--svi-rtol`` on
   ``--svi-patience`` consecutive chunks) or until its time budget is spent.

Every peer runs in this one process, one after the other. The table gives wall times (CAVI
with and without jit compilation), time ratios, ELBOs, test RMSE on the 600 noiseless test
points, the number of relevant basis functions and the number of sweeps / iterations / steps.
A JSON record goes to ``bench/results/``.

Usage::

    python bench/rvm.py --quick                      # smoke run, N = 50, 100, < 1 minute
    python bench/rvm.py                              # N = 100, 300, 1000, SVI budget 600 s
    python bench/rvm.py --sizes 100 300 1000 --svi-budget 120 --skip-ard-above 300
    python bench/rvm.py --sizes 100 --n 5000         # plus CAVI alone at N = 5000 (peak RSS)

Timing notes
------------
* ``CAVI`` compiles one sweep per guide and shape and reuses it across calls, so the first
  ``run`` on a problem is "CAVI incl. jit" and a second ``run`` of the same problem is
  "CAVI excl. jit". JAX's persistent compilation cache is also switched on (a temporary
  directory), which only matters for the per-bucket shapes that pruning compiles.
* SVI's clock counts only its optimisation steps: the ELBO estimates taken between chunks (to
  find when SVI first comes within 1 nat of our ELBO) are not counted.
* Where a peer is skipped at some N (``--skip-ard-above``, ``--skip-svi-above``), its time is
  extrapolated from the sizes where it ran with a log-log fit and labelled as extrapolated.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings

from _common import environment

HERE = os.path.dirname(os.path.abspath(__file__))
DELTA = 5.55
N_TEST = 600


# ----------------------------------------------------------------------------------------------
# Set-up
# ----------------------------------------------------------------------------------------------
def _enable_compilation_cache():
    import jax

    cache_dir = tempfile.mkdtemp(prefix="ppl_sbl_bench_jax_cache_")
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return cache_dir


def problem(n, seed=0):
    from ppl_sbl import basis, datasets

    d = datasets.sinc(n_train=n, n_test=N_TEST, seed=seed)
    Phi = basis.rbf(d.X_train, delta=DELTA, bias=True)
    Phi_test = basis.rbf(d.X_test, d.X_train, delta=DELTA, bias=True)
    return d, Phi, Phi_test


def rmse(pred, target):
    import numpy as np

    return float(np.sqrt(np.mean((np.asarray(pred) - np.asarray(target)) ** 2)))


# ----------------------------------------------------------------------------------------------
# Peers
# ----------------------------------------------------------------------------------------------
def run_cavi(Phi, t, Phi_test, t_test, *, prune, tol, max_sweeps, repeat=True):
    """CAVI.run twice (with the persistent cache on: compile, then cached); wall times of each."""
    import numpy as np

    import ppl_sbl
    from ppl_sbl.models import rvm

    cavi = ppl_sbl.CAVI(rvm.regression, tol=tol, max_sweeps=max_sweeps, prune=prune, progress_bar=False)
    start = time.perf_counter()
    res = cavi.run(Phi, t)
    first = time.perf_counter() - start
    second = float("nan")
    if repeat:
        start = time.perf_counter()
        res2 = cavi.run(Phi, t)
        second = time.perf_counter() - start
        if res2.num_sweeps != res.num_sweeps or not np.isclose(res2.elbo, res.elbo, rtol=1e-10, atol=1e-8):
            print(
                f"  [warn] repeated CAVI run differs: {res.num_sweeps} vs {res2.num_sweeps} sweeps, "
                f"ELBO {res.elbo!r} vs {res2.elbo!r}",
                flush=True,
            )
        res = res2
    mean, _ = res.predict(Phi_test)
    return {
        "seconds_incl_jit": first,
        "seconds_excl_jit": second,
        "seconds_reported_by_result": float(res.seconds),
        "elbo": float(res.elbo),
        "num_sweeps": int(res.num_sweeps),
        "converged": bool(res.converged),
        "relevant": int(np.sum(res.relevant)),
        "relevant_rule": "res.relevant (E[alpha_k] < E[gamma] ||phi_k||^2, conditional)",
        "num_active_at_end": int(ppl_sbl.inference._num_active(res.state)) if prune else int(Phi.shape[1]),
        "prune_events": [list(map(int, e)) for e in res.prune_events],
        "rmse": rmse(mean, t_test),
    }


def run_ard(Phi, t, Phi_test, t_test):
    import numpy as np
    from sklearn.linear_model import ARDRegression

    ard = ARDRegression()
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ard.fit(Phi, t)
    seconds = time.perf_counter() - start
    coef = np.asarray(ard.coef_)
    return {
        "seconds": seconds,
        "rmse": rmse(ard.predict(Phi_test), t_test),
        "relevant": int(np.sum(np.abs(coef) > 1e-6)),
        "relevant_rule": "|coef_| > 1e-6",
        "relevant_lambda_below_threshold": int(np.sum(np.asarray(ard.lambda_) < ard.threshold_lambda)),
        "num_iterations": int(getattr(ard, "n_iter_", -1)),
        "max_iter": int(ard.max_iter),
        "noise_precision": float(ard.alpha_),
        "warnings": sorted({f"{w.category.__name__}: {w.message}" for w in caught}),
    }


def run_svi(Phi, t, Phi_test, t_test, *, target_elbo, budget, lr, chunk, rtol, patience,
            monitor_particles, final_particles, seed=0, max_steps=None):
    """SVI (AutoNormal + Adam) in jitted scan chunks until convergence or the time budget."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal

    from ppl_sbl.models import rvm

    Phi_j, t_j = jnp.asarray(Phi), jnp.asarray(t)
    model = rvm.regression
    guide = AutoNormal(model)
    svi = SVI(model, guide, numpyro.optim.Adam(lr), Trace_ELBO())
    key_init, key_mon, key_final = jax.random.split(jax.random.PRNGKey(seed), 3)

    compile_start = time.perf_counter()
    state = svi.init(key_init, Phi_j, t_j)

    @jax.jit
    def run_chunk(state):
        return jax.lax.scan(lambda s, _: svi.update(s, Phi_j, t_j), state, None, length=chunk)

    def elbo_fn(particles):
        est = Trace_ELBO(num_particles=particles, vectorize_particles=True)
        return jax.jit(lambda key, params: -est.loss(key, params, model, guide, Phi_j, t_j))

    monitor = elbo_fn(monitor_particles)
    # compile both before the clock starts (on a throw-away copy of the state)
    jax.block_until_ready(run_chunk(state))
    jax.block_until_ready(monitor(key_mon, svi.get_params(state)))
    compile_seconds = time.perf_counter() - compile_start

    train_seconds = 0.0
    steps = 0
    means, history = [], []
    first_within_1nat = None
    quiet = 0
    converged = False
    while True:
        start = time.perf_counter()
        state, losses = run_chunk(state)
        losses = np.asarray(jax.block_until_ready(losses))
        train_seconds += time.perf_counter() - start
        steps += chunk
        if not np.all(np.isfinite(losses)):
            print(f"  [warn] SVI loss not finite after {steps} steps", flush=True)
            break
        means.append(float(losses.mean()))
        key_mon, sub = jax.random.split(key_mon)
        est = float(monitor(sub, svi.get_params(state)))
        history.append((steps, train_seconds, -means[-1], est))
        if first_within_1nat is None and target_elbo is not None and est >= target_elbo - 1.0:
            first_within_1nat = {"seconds": train_seconds, "steps": steps, "elbo_estimate": est}
        if len(means) > 1:
            rel = abs(means[-1] - means[-2]) / max(abs(means[-1]), 1e-300)
            quiet = quiet + 1 if rel < rtol else 0
            if quiet >= patience:
                converged = True
                break
        if train_seconds >= budget or (max_steps is not None and steps >= max_steps):
            break

    params = svi.get_params(state)
    # final ELBO with many particles, in batches of `monitor_particles`
    batches = max(1, final_particles // monitor_particles)
    keys = jax.random.split(key_final, batches)
    values = np.array([float(monitor(k, params)) for k in keys])
    final_elbo = float(values.mean())
    final_se = float(values.std(ddof=1) / math.sqrt(batches)) if batches > 1 else float("nan")
    w = guide.median(params)["w"]
    pred = np.asarray(Phi_test) @ np.asarray(w)
    alpha_median = np.asarray(guide.median(params)["alpha"])
    gamma_median = float(guide.median(params)["gamma"])
    data_precision = gamma_median * np.sum(np.asarray(Phi) ** 2, axis=0)
    return {
        "seconds": train_seconds,
        "compile_seconds": compile_seconds,
        "steps": steps,
        "converged": converged,
        "budget": budget,
        "elbo": final_elbo,
        "elbo_se": final_se,
        "elbo_particles": batches * monitor_particles,
        "first_within_1nat_of_cavi": first_within_1nat,
        "target_elbo": target_elbo,
        "rmse": rmse(pred, t_test),
        "relevant": int(np.sum(alpha_median < data_precision)),
        "relevant_rule": "median alpha_k < median gamma * ||phi_k||^2",
        "history_every": max(1, len(history) // 200),
        "history": [list(h) for h in history[:: max(1, len(history) // 200)]],
        "lr": lr,
        "chunk": chunk,
    }


# ----------------------------------------------------------------------------------------------
# CAVI alone at a large N, in a fresh subprocess (peak RSS)
# ----------------------------------------------------------------------------------------------
def child_cavi(n, prune, tol, max_sweeps):
    import jax

    import ppl_sbl  # noqa: F401  (float64)

    d, Phi, Phi_test = problem(n)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = run_cavi(Phi, d.t_train, Phi_test, d.t_test, prune=prune, tol=tol, max_sweeps=max_sweeps, repeat=False)
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    out["rss_after_data_mib"] = rss_before / 1024.0
    out["n"] = n
    out["prune"] = prune
    out["backend"] = jax.default_backend()
    print("CHILD_JSON " + json.dumps(out), flush=True)


def measure_in_subprocess(n, prune, tol, max_sweeps, timeout):
    cmd = [sys.executable, os.path.abspath(__file__), "--_child", str(n), "--tol", repr(tol),
           "--max-sweeps", str(max_sweeps)] + ([] if prune else ["--_child-no-prune"])
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"n": n, "prune": prune, "error": f"timed out after {timeout} s"}
    wall = time.perf_counter() - start
    for line in proc.stdout.splitlines():
        if line.startswith("CHILD_JSON "):
            out = json.loads(line[len("CHILD_JSON "):])
            out["subprocess_wall_seconds"] = wall
            return out
    return {"n": n, "prune": prune, "error": (proc.stderr or proc.stdout)[-2000:]}


# ----------------------------------------------------------------------------------------------
# Reporting
# ----------------------------------------------------------------------------------------------
def extrapolate(sizes, seconds, n):
    """Log-log least-squares fit of time against N; returns (seconds at n, slope) or None."""
    import numpy as np

    pts = [(s, x) for s, x in zip(sizes, seconds) if x is not None and x > 0 and math.isfinite(x)]
    if not pts:
        return None
    if len(pts) == 1:  # one point: assume the O(M^3) growth of a dense solve
        return float(pts[0][1] * (n / pts[0][0]) ** 3), 3.0
    ls = np.log([p[0] for p in pts])
    lt = np.log([p[1] for p in pts])
    slope, icept = np.polyfit(ls, lt, 1)
    return float(np.exp(icept + slope * math.log(n))), float(slope)


def fill_extrapolations(rows, peer):
    measured = [(r["n"], r[peer]["seconds"]) for r in rows if r.get(peer) and "seconds" in r[peer]]
    for r in rows:
        if r.get(peer) is None:
            ex = extrapolate([m[0] for m in measured], [m[1] for m in measured], r["n"])
            r[peer + "_extrapolated"] = (
                None if ex is None
                else {"seconds": ex[0], "loglog_slope": ex[1], "from_sizes": [m[0] for m in measured],
                      "slope_assumed": len(measured) == 1}
            )


def fmt(x, spec=".1f", none="-"):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return none
    return format(x, spec)


def peer_seconds(r, peer):
    if r.get(peer) is not None:
        return r[peer]["seconds"], ""
    ex = r.get(peer + "_extrapolated")
    if ex:
        return ex["seconds"], "*"
    return None, ""


def print_table(rows):
    lines = []
    head = (f"{'N':>5} {'M':>5} | {'CAVI+jit':>8} {'CAVI':>7} {'CAVIfull':>8} {'ARD':>9} {'SVI':>8} | "
            f"{'ARD/CAVI':>8} {'SVI/CAVI':>8} | {'ELBO ours':>10} {'ELBO full':>10} {'ELBO SVI':>15} "
            f"{'SVI<1nat@':>10} | {'RMSE ours':>9} {'full':>7} {'ARD':>7} {'SVI':>7} | "
            f"{'rel ours':>8} {'full':>5} {'ARD':>5} {'SVI':>5} | {'sweeps':>6} {'full':>5} {'ARDit':>5} "
            f"{'SVIsteps':>8}")
    lines.append(head)
    lines.append("-" * len(head))
    for r in rows:
        cp, cf = r["cavi_pruned"], r["cavi_full"]
        base = cp["seconds_excl_jit"]
        ard_s, ard_mark = peer_seconds(r, "ard")
        svi_s, svi_mark = peer_seconds(r, "svi")
        a, s = r.get("ard"), r.get("svi")
        if s is not None:
            svi_elbo = f"{s['elbo']:.2f}+-{s['elbo_se']:.2f}"
            hit = s["first_within_1nat_of_cavi"]
            svi_hit = f"{hit['seconds']:.1f}s" if hit else f"never/{s['seconds']:.0f}s"
        else:
            svi_elbo, svi_hit = "-", "-"
        lines.append(
            f"{r['n']:>5} {r['m']:>5} | {fmt(cp['seconds_incl_jit'], '.2f'):>8} {fmt(base, '.2f'):>7} "
            f"{fmt(cf['seconds_excl_jit'], '.2f'):>8} {fmt(ard_s, '.2f') + ard_mark:>9} "
            f"{fmt(svi_s, '.1f') + svi_mark:>8} | "
            f"{fmt(ard_s / base if ard_s else None, '.1f') + ard_mark:>8} "
            f"{fmt(svi_s / base if svi_s else None, '.1f') + svi_mark:>8} | "
            f"{cp['elbo']:>10.3f} {cf['elbo']:>10.3f} {svi_elbo:>15} {svi_hit:>10} | "
            f"{cp['rmse']:>9.4f} {cf['rmse']:>7.4f} {fmt(a and a['rmse'], '.4f'):>7} "
            f"{fmt(s and s['rmse'], '.4f'):>7} | "
            f"{cp['relevant']:>8} {cf['relevant']:>5} {fmt(a and a['relevant'], 'd'):>5} "
            f"{fmt(s and s['relevant'], 'd'):>5} | {cp['num_sweeps']:>6} {cf['num_sweeps']:>5} "
            f"{fmt(a and a['num_iterations'], 'd'):>5} {fmt(s and s['steps'], 'd'):>8}"
        )
    lines += [
        "",
        "Columns: CAVI+jit = pruned CAVI.run first call (includes jit compilation); CAVI = second call",
        "  (persistent compilation cache warm: excludes XLA compilation); CAVIfull = un-pruned, second call;",
        "  ARD = sklearn ARDRegression() defaults; SVI = AutoNormal+Adam training time (to convergence or budget).",
        "  Ratios are against CAVI (pruned, excl. jit). '*' = extrapolated (log-log fit over the sizes where",
        "  the peer ran; slope 3 assumed where it ran at one size only), not measured.",
        "  ELBO SVI = Trace_ELBO estimate (+- standard error) at SVI's final parameters; SVI<1nat@ = SVI",
        "  training time at which its ELBO estimate first came within 1 nat of our best (pruned or full) ELBO.",
        "  rel: ours = res.relevant.sum(); ARD = (|coef_| > 1e-6).sum() (same as lambda_ < threshold_lambda",
        "  unless reported otherwise in the JSON); SVI = median alpha_k < median gamma * ||phi_k||^2.",
        "  RMSE on the 600 noiseless test points.",
    ]
    text = "\n".join(lines)
    print(text, flush=True)
    return text



# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000], help="training sizes N (M = N + 1)")
    p.add_argument("--skip-ard-above", type=int, default=None, metavar="N",
                   help="skip ARDRegression for sizes > N (time extrapolated)")
    p.add_argument("--skip-svi-above", type=int, default=None, metavar="N",
                   help="skip SVI for sizes > N (time extrapolated)")
    p.add_argument("--svi-budget", type=float, default=600.0, metavar="SECONDS",
                   help="SVI training time budget per size (default 600)")
    p.add_argument("--svi-lr", type=float, default=1e-2, help="Adam step size (default 1e-2)")
    p.add_argument("--svi-chunk", type=int, default=1000, help="SVI steps per jitted scan chunk")
    p.add_argument("--svi-rtol", type=float, default=1e-5,
                   help="SVI converged when the chunk-mean loss changes by less than this (relative)")
    p.add_argument("--svi-patience", type=int, default=3, help="... on this many consecutive chunks")
    p.add_argument("--svi-monitor-particles", type=int, default=64,
                   help="particles of the ELBO estimate taken after every chunk")
    p.add_argument("--svi-final-particles", type=int, default=4096, help="particles of SVI's final ELBO")
    p.add_argument("--tol", type=float, default=1e-9, help="CAVI tolerance")
    p.add_argument("--max-sweeps", type=int, default=20000, help="CAVI max sweeps")
    p.add_argument("--n", dest="cavi_only", type=int, nargs="*", default=[], metavar="N",
                   help="extra sizes for our (pruned) CAVI alone, each in a fresh subprocess "
                        "recording peak RSS, e.g. --n 5000")
    p.add_argument("--cavi-only-timeout", type=float, default=3600.0, help="timeout (s) of each --n subprocess")
    p.add_argument("--quick", action="store_true", help="smoke run: N = 50, 100, tiny budgets (< 1 min)")
    p.add_argument("--out", default=None, help="JSON output path (default bench/results/rvm_<backend>.json)")
    p.add_argument("--_child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--_child-no-prune", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.sizes = [50, 100]
        args.svi_budget = min(args.svi_budget, 2.0)
        args.svi_chunk = min(args.svi_chunk, 500)
        args.svi_final_particles = min(args.svi_final_particles, 512)
        if args.skip_ard_above is None:
            args.skip_ard_above = 50  # exercise the extrapolation path
        if args.skip_svi_above is None:
            args.skip_svi_above = 50  # SVI's compilation (~10 s) dominates a smoke run
    return args


def main(argv=None):
    args = parse_args(argv)
    import ppl_sbl  # noqa: F401  (float64 on)

    if args._child is not None:
        child_cavi(args._child, not args._child_no_prune, args.tol, args.max_sweeps)
        return

    cache_dir = _enable_compilation_cache()
    env = environment("sklearn")
    print(f"# ppl-sbl RVM benchmark  {env['date']}  host={env['hostname']}  backend={env['jax_backend']} "
          f"devices={env['jax_devices']}  cpus={env['cpu_count']}", flush=True)
    print(f"# versions {env['versions']}", flush=True)
    print(f"# sizes={args.sizes} svi_budget={args.svi_budget}s skip_ard_above={args.skip_ard_above} "
          f"skip_svi_above={args.skip_svi_above} quick={args.quick}", flush=True)

    # warm-up at a tiny size: one-off eager-op compilations are not charged to the first size
    d, Phi, Phi_test = problem(20)
    for prune in (True, False):
        run_cavi(Phi, d.t_train, Phi_test, d.t_test, prune=prune, tol=args.tol, max_sweeps=args.max_sweeps,
                 repeat=False)

    out = args.out
    if out is None:
        suffix = env["jax_backend"] + ("_quick" if args.quick else "")
        out = os.path.join(HERE, "results", f"rvm_{suffix}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    base = {
        "benchmark": "rvm regression, noisy sinc, RBF delta=5.55 + bias (M = N + 1), 600 noiseless test points",
        "environment": env,
        "args": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        "compilation_cache_dir": cache_dir,
    }

    def save(extra):
        # written after every size, so that a run cut short still leaves its record
        with open(out, "w") as fh:
            json.dump({**base, **extra}, fh, indent=1, default=float)

    rows = []
    t_all = time.perf_counter()
    for n in sorted(args.sizes):
        d, Phi, Phi_test = problem(n)
        row = {"n": n, "m": int(Phi.shape[1])}
        print(f"\n== N = {n}, M = {Phi.shape[1]}", flush=True)
        row["cavi_pruned"] = run_cavi(Phi, d.t_train, Phi_test, d.t_test, prune=True, tol=args.tol,
                                      max_sweeps=args.max_sweeps)
        c = row["cavi_pruned"]
        print(f"  CAVI pruned : {c['seconds_incl_jit']:.2f}s incl. jit, {c['seconds_excl_jit']:.2f}s excl.; "
              f"ELBO {c['elbo']:.4f}; {c['num_sweeps']} sweeps; relevant {c['relevant']}; RMSE {c['rmse']:.4f}",
              flush=True)
        row["cavi_full"] = run_cavi(Phi, d.t_train, Phi_test, d.t_test, prune=False, tol=args.tol,
                                    max_sweeps=args.max_sweeps)
        c = row["cavi_full"]
        print(f"  CAVI full   : {c['seconds_incl_jit']:.2f}s incl. jit, {c['seconds_excl_jit']:.2f}s excl.; "
              f"ELBO {c['elbo']:.4f}; {c['num_sweeps']} sweeps; relevant {c['relevant']}; RMSE {c['rmse']:.4f}",
              flush=True)
        target = max(row["cavi_pruned"]["elbo"], row["cavi_full"]["elbo"])

        if args.skip_ard_above is not None and n > args.skip_ard_above:
            row["ard"] = None
            print("  ARD         : skipped", flush=True)
        else:
            row["ard"] = a = run_ard(Phi, d.t_train, Phi_test, d.t_test)
            print(f"  ARD         : {a['seconds']:.2f}s; {a['num_iterations']} iterations; relevant {a['relevant']} "
                  f"(lambda<thr: {a['relevant_lambda_below_threshold']}); RMSE {a['rmse']:.4f}"
                  + (f"; warnings {a['warnings']}" if a["warnings"] else ""), flush=True)

        if args.skip_svi_above is not None and n > args.skip_svi_above:
            row["svi"] = None
            print("  SVI         : skipped", flush=True)
        else:
            row["svi"] = s = run_svi(
                Phi, d.t_train, Phi_test, d.t_test, target_elbo=target, budget=args.svi_budget, lr=args.svi_lr,
                chunk=args.svi_chunk, rtol=args.svi_rtol, patience=args.svi_patience,
                monitor_particles=args.svi_monitor_particles, final_particles=args.svi_final_particles,
            )
            hit = s["first_within_1nat_of_cavi"]
            print(f"  SVI         : {s['seconds']:.1f}s (+{s['compile_seconds']:.1f}s compile); {s['steps']} steps; "
                  f"converged {s['converged']}; ELBO {s['elbo']:.3f} +- {s['elbo_se']:.3f} "
                  f"(ours {target:.3f}); within 1 nat: "
                  f"{'at %.1fs / %d steps' % (hit['seconds'], hit['steps']) if hit else 'never'}; "
                  f"relevant {s['relevant']}; RMSE {s['rmse']:.4f}", flush=True)
        rows.append(row)
        save({"rows": rows, "partial": True, "completed_sizes": [r["n"] for r in rows]})

    fill_extrapolations(rows, "ard")
    fill_extrapolations(rows, "svi")

    cavi_only = []
    for n in args.cavi_only:
        print(f"\n== CAVI alone (pruned) at N = {n}, fresh subprocess", flush=True)
        measured = measure_in_subprocess(n, True, args.tol, args.max_sweeps, args.cavi_only_timeout)
        cavi_only.append(measured)
        if "error" in measured:
            print(f"  failed: {measured['error']}", flush=True)
        else:
            print(f"  {measured['seconds_incl_jit']:.1f}s incl. jit ({measured['subprocess_wall_seconds']:.1f}s process); "
                  f"peak RSS {measured['peak_rss_mib']:.0f} MiB (after building Phi: {measured['rss_after_data_mib']:.0f} MiB); "
                  f"ELBO {measured['elbo']:.3f}; {measured['num_sweeps']} sweeps; relevant {measured['relevant']}; "
                  f"RMSE {measured['rmse']:.4f}", flush=True)

    print("", flush=True)
    table = print_table(rows)
    total = time.perf_counter() - t_all
    print(f"\n# total benchmark time {total:.1f}s", flush=True)

    save({"rows": rows, "partial": False, "cavi_only": cavi_only, "table": table, "total_seconds": total})
    print(f"# wrote {out}", flush=True)


if __name__ == "__main__":
    main()
