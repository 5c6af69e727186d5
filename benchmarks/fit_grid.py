"""Many fast fits in one compiled call: ``fit_grid(schedule="fast")`` over a grid of kernel widths,
beside one fit and beside the same fits one by one.

Problems: the noisy sinc (``datasets.sinc(n_train=N, seed=0)``, ``rvm.regression``) and Ripley's
data (its 250 training points, ``rvm.classification``), each with an RBF design with bias,
``basis.rbf(X, delta=w, bias=True)``, for ``--widths`` widths w spaced evenly in log between a
quarter and four times the width of ``benchmarks/rvm.py`` (sinc 5.55, Ripley 4.0).

Peers, timed warm in interleaved rounds (:func:`benchmarks.timing.time_peers`):

- ``one_fit``: ``CAVI(model, schedule="fast", compiled=True)`` at the grid's middle width;
- ``one_by_one``: the same call for every width in turn;
- ``grid_sequential``: ``fit_grid(model, designs, t, schedule="fast", batch_size=1, threads=1)``:
  the fits one after the other inside one compiled program;
- ``grid_threads``: the same with ``threads`` = the CPU count (the default on a CPU): the fits in
  that many groups, each group's program called from its own thread;
- ``grid_vmapped``: ``fit_grid(..., batch_size=len(widths))``: all fits vmapped (each step runs
  every branch that some fit takes; ``--skip-vmapped`` leaves it out);
- the scikit-learn estimators (``RVR``, ``RVC``; their hyperprior rates on the data's scale, so
  their ELBOs are not the CAVI peers'): ``estimator_fit``, one ``fit`` at the middle width (the
  default host schedule); ``estimator_loop``, one ``fit`` per width; ``elbo_search``,
  ``ELBOSearch(estimator, {"delta": widths}).fit`` (the widths in one compiled program through
  ``fit_grid``), checked against ``estimator_loop`` (the same ELBOs to 1e-7 relative: the compiled
  and the host schedule, each to its tolerance 1e-9).

Every grid's fits are checked against the one-by-one fits (the same ELBO to 1e-9 relative, the same
number of moves). The ratio the issue sets a goal for is a grid's time over ``one_fit``'s: at most
4 on a CPU with 16 widths (the estimators' rows: over ``estimator_fit``'s).

Run ``python benchmarks/fit_grid.py`` (``--quick``: the sinc at N = 100 with 4 widths, one round);
the record goes to ``benchmarks/results/fit_grid_<backend>.json``.
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for ``benchmarks.timing``

from benchmarks.timing import (CompileClock, Peer, environment, fmt, log, set_blas_threads, time_peers,  # noqa: E402
                               write_record)

GOAL_RATIO = 4.0
SINC_DELTA, RIPLEY_DELTA = 5.55, 4.0


def problems(sizes, quick):
    """(label, model name, X, t, centre width) of each problem."""
    from ppl_sbl import datasets

    out = [(f"sinc{n}", "regression", *_sinc(datasets, n), SINC_DELTA) for n in sizes]
    if not quick:
        d = datasets.ripley()
        out.append(("ripley250", "classification", d.X_train, d.t_train, RIPLEY_DELTA))
    return out


def _sinc(datasets, n):
    d = datasets.sinc(n_train=n, n_test=10, seed=0)
    return d.X_train, d.t_train


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 300], help="sinc training sizes")
    p.add_argument("--widths", type=int, default=16, help="kernel widths in the grid (default 16)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds after the warm call (default 3)")
    p.add_argument("--cap", type=float, default=60.0, help="a peer whose warm call takes longer is not repeated")
    p.add_argument("--skip-vmapped", action="store_true", help="leave out grid_vmapped")
    p.add_argument("--blas-threads", type=int, default=1, help="OpenBLAS threads (0: as set)")
    p.add_argument("--quick", action="store_true", help="the sinc at N = 100, 4 widths, one round")
    p.add_argument("--out", default=None, help="the JSON record (default benchmarks/results/fit_grid_<backend>.json)")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.widths, args.rounds = [100], 4, 1
    set_blas_threads(args.blas_threads)

    import jax
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    import ppl_sbl
    from ppl_sbl.models import rvm

    out = args.out or os.path.join(HERE, "results", f"fit_grid_{jax.default_backend()}.json")
    record = {"environment": environment(), "arguments": vars(args), "goal_ratio": GOAL_RATIO, "problems": {}}
    clock = CompileClock()
    for label, kind, X, t, centre in problems(args.sizes, args.quick):
        model = getattr(rvm, kind)
        widths = list(centre * np.logspace(-np.log10(4), np.log10(4), args.widths))
        designs = [ppl_sbl.basis.rbf(X, delta=w, bias=True) for w in widths]
        middle = designs[len(designs) // 2]

        def cavi(Phi):
            return ppl_sbl.CAVI(model, schedule="fast", compiled=True, progress_bar=False).run(Phi, t)

        def grid(batch_size, threads=1):
            return lambda _: list(ppl_sbl.fit_grid(model, designs, t, schedule="fast", batch_size=batch_size,
                                                   threads=threads).values())

        def describe_fits(fits, _):
            return {"elbo": [float(f.elbo) for f in fits], "moves": [int(f.num_moves) for f in fits]}

        Estimator = ppl_sbl.RVR if kind == "regression" else ppl_sbl.RVC

        def estimators(ws):
            return lambda _: [Estimator(delta=w).fit(X, t) for w in ws]

        def search(_):
            return ppl_sbl.ELBOSearch(Estimator(), {"delta": widths}).fit(X, t)

        def describe_estimators(fits, _):
            return {"elbo": [float(f.elbo_) for f in fits]}

        def describe_search(found, _):
            return {"elbo": [float(v) for v in found.candidates_["elbo"]]}

        peers = {
            "estimator_fit": Peer(estimators([widths[len(widths) // 2]]), describe_estimators),
            "estimator_loop": Peer(estimators(widths), describe_estimators),
            "elbo_search": Peer(search, describe_search),
            "one_fit": Peer(lambda _: [cavi(middle)], describe_fits),
            "one_by_one": Peer(lambda _: [cavi(Phi) for Phi in designs], describe_fits),
            "grid_sequential": Peer(grid(1), describe_fits),
            "grid_threads": Peer(grid(1, os.cpu_count() or 1), describe_fits),
            "grid_vmapped": Peer(grid(len(designs)), describe_fits),
        }
        log(f"{label}: {len(widths)} widths, N = {X.shape[0]}")
        rows = time_peers(peers, None, rounds=args.rounds, cap=args.cap,
                          skip={"grid_vmapped"} if args.skip_vmapped else set(), clock=clock)
        reference = rows["one_by_one"]
        for name in ("grid_sequential", "grid_threads", "grid_vmapped"):
            row = rows[name]
            if "elbo" in row and "elbo" in reference:
                row["same_fits_as_one_by_one"] = bool(
                    np.allclose(row["elbo"], reference["elbo"], rtol=1e-9) and row["moves"] == reference["moves"])
        if "elbo" in rows["elbo_search"] and "elbo" in rows["estimator_loop"]:
            rows["elbo_search"]["same_fits_as_one_by_one"] = bool(
                np.allclose(rows["elbo_search"]["elbo"], rows["estimator_loop"]["elbo"], rtol=1e-7))
        one = rows["one_fit"].get("seconds")
        single = rows["estimator_fit"].get("seconds")
        for name, row in rows.items():
            base = single if name.startswith(("estimator", "elbo")) else one
            if base and row.get("seconds") is not None:
                row["ratio_to_one_fit"] = row["seconds"] / base
            log(f"  {name:16s} {fmt(row.get('seconds'), '.4f')} s  x{fmt(row.get('ratio_to_one_fit'), '.1f')} one fit"
                + (" (estimator_fit)" if name.startswith(("estimator", "elbo")) else "")
                + f"  first call {fmt(row.get('first_call_seconds'), '.1f')} s"
                + (f"  same fits: {row['same_fits_as_one_by_one']}" if "same_fits_as_one_by_one" in row else ""))
        record["problems"][label] = {"widths": widths, "n": int(X.shape[0]), "peers": rows}
        write_record(record, out, announce=False)
    write_record(record, out)
    return record


if __name__ == "__main__":
    main()
