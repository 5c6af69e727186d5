"""Sweep time of derived CAVI against the hand-written guides, side by side in one process.

Not a test (``tests/test_benchmarks_derived_cavi.py`` runs ``--quick``). For each model and size N:
the hand-written guide of the library and the guide :func:`ppl_sbl.derived.derived_guide`
derives from the same NumPyro program, both started from their initial states (computed by
``jax.jit(guide.init)``) and run for ``--warm`` sweeps; then one jitted sweep (the updates
followed by the ELBO, as :class:`ppl_sbl.CAVI` runs it) is timed, median of ``--repeats`` calls
after a compiling call. Both states are checked to agree (relative ELBO difference) so that
equal work is timed. The time to derive the guide (reading the model's trace, one-off) is
reported separately.

Models: RVM regression and classification (Bishop & Tipping; design: Gaussian RBF basis of width
``r = 2`` on the inputs plus a bias, M = N + 1, sinc data as in ``ppl_sbl.datasets.sinc``); p-grid
regression (Kropotov et al.; random 8 x 8 tables, M = 64). Sizes N = 300 and 1000 (quick: N = 63
only, where the RVM's M = N + 1 is the p-grid's 64, so that the three models share their shapes).
The hand-written RVM regression keeps q(w) in a factored (low-rank) form where the Gram
matrix of the design has low numerical rank, as a smooth RBF basis does; the derived guide keeps
dense covariances, so that case measures what the factored form saves.

No pruning in either (pruning is a property of the CAVI loop, not of the sweep).
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for ``benchmarks.timing``

from benchmarks.timing import environment, log, repeat_timed, run_chained, timed, write_record  # noqa: E402


def problems(N, seed):
    import numpy as np

    from ppl_sbl import basis, datasets
    from ppl_sbl.models import grid_rvm, rvm

    d = datasets.sinc(N, 10, seed=seed)
    Phi = basis.rbf(d.X_train, d.X_train, 1.0 / (2 * 2.0 ** 2), bias=True)
    labels = (d.t_train > 0.2).astype(float)
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, 8, 8))
    W = np.zeros((8, 8))
    W[1:3, 2:5] = rng.normal(size=(2, 3))
    t_grid = X.reshape(N, -1) @ W.ravel() + 0.3 * rng.normal(size=N)
    return {"rvm_regression": (rvm.regression, (Phi, d.t_train)),
            "rvm_classification": (rvm.classification, (Phi, labels)),
            "p_grid_regression": (grid_rvm.regression, (X, t_grid))}


def time_sweep(guide, args, warm, repeats):
    """(median seconds of one jitted sweep of ``guide`` over ``repeats`` calls after a compiling one,
    the ELBO after ``warm`` sweeps from the initial state)."""
    import jax
    import numpy as np

    data = guide.prepare(*args)
    state = jax.jit(guide.init)(data)  # one compiled program rather than many small eager ones (untimed)

    @jax.jit
    def sweep(state, data):
        state = guide.update(state, data)
        return state, guide.elbo(state, data)

    state, value = run_chained(sweep, state, data, warm)
    seconds, _ = repeat_timed(lambda: jax.block_until_ready(sweep(state, data)), repeats, warm=True)
    return float(np.median(seconds)), float(value)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="N = 63 (M = 64 for every model); 5 repeats")
    p.add_argument("--sizes", type=int, nargs="+", default=None, help="N (default 300 1000)")
    p.add_argument("--warm", type=int, default=5, help="sweeps before timing (default 5)")
    p.add_argument("--repeats", type=int, default=None, help="timed sweeps (median; default 20)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON record (default benchmarks/results/derived_cavi_cpu.json)")
    args = p.parse_args(argv)
    if args.sizes is None:
        args.sizes = [63] if args.quick else [300, 1000]
    if args.repeats is None:
        args.repeats = 5 if args.quick else 20
    if args.out is None:
        if args.quick:
            p.error("--quick needs --out (the full record lives in benchmarks/results)")
        args.out = os.path.join(HERE, "results", "derived_cavi_cpu.json")

    import ppl_sbl  # noqa: F401  (float64 on)
    from ppl_sbl.derived import derived_guide
    from ppl_sbl.inference import resolve_guide

    env = environment()
    log(f"# derived vs hand-written CAVI sweeps  {env['date']}  backend={env['jax_backend']}  "
        f"cpus={env['cpu_count']}  load={env['load_average']}")
    log(f"# one jitted sweep (updates + ELBO) after {args.warm} sweeps, median of {args.repeats}; goal: derived "
        "at most 1.5 x hand-written")
    rows = []
    for N in args.sizes:
        for name, (model, margs) in problems(N, args.seed).items():
            hand = resolve_guide(model.closed_form_guide, margs, {})
            derived, derive_s = timed(lambda: derived_guide(model, *margs))
            th, eh = time_sweep(hand, margs, args.warm, args.repeats)
            td, ed = time_sweep(derived, margs, args.warm, args.repeats)
            M = int(margs[0].reshape(margs[0].shape[0], -1).shape[1])
            row = {"model": name, "N": N, "M": M, "hand_seconds": th, "derived_seconds": td, "ratio": td / th,
                   "derive_seconds": derive_s, "elbo_hand": eh, "elbo_derived": ed,
                   "elbo_relative_difference": abs(eh - ed) / abs(eh), "goal_met": td / th <= 1.5}
            rows.append(row)
            log(f"{name:20s} N={N:5d} M={M:5d}: hand {th * 1e3:8.2f} ms, derived {td * 1e3:8.2f} ms, ratio "
                f"{td / th:6.2f} ({'within' if row['goal_met'] else 'above'} 1.5); derivation {derive_s:.1f} s; "
                f"ELBOs agree to {row['elbo_relative_difference']:.1e}")
    write_record({"benchmark": "derived CAVI sweep against the hand-written guides", "args": vars(args),
                  "environment": env, "rows": rows}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
