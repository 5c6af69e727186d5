"""XLA's compile time for ppl-sbl's programs with its loop emitters (``xla_cpu_use_fusion_emitters``
false, the flag :func:`ppl_sbl.quick_compile_flags` sets for the command line and the tests) beside
its default fusion emitters, and with the loop emitters and LLVM unoptimised
(``xla_backend_optimization_level`` 0, which ``quick_compile_flags(optimize=False)`` adds for the
tests), and the compiled programs' run time.

Programs: a whole CAVI fit as one program (:func:`ppl_sbl.engine.fit`, sweeps to the fixed point in
one ``lax.while_loop``) of

- ``rvm_regression``: ``rvm.REGRESSION_GUIDE`` on the noisy sinc (``datasets.sinc(n_train=N)``),
  RBF design with bias, width 5.55;
- ``rvm_classification``: ``rvm.CLASSIFICATION_GUIDE`` on Ripley's 250 training points, width 4.0;
- ``robust_rvm_classification``: ``robust_rvm.CLASSIFICATION_GUIDE`` on the same design.

Each round lowers the program afresh for each option and times ``Lowered.compile`` with it (the
persistent cache off), the options in turn; the executables' runs are timed in interleaved rounds
(:func:`benchmarks.timing.interleaved_rounds`). All executables must give the same ELBO (to 1e-12
relative) and the same number of sweeps; the ratios are to XLA's default (``fusion``).

Run ``python benchmarks/compile_time.py`` (``--quick``: the sinc regression at N = 40, one round);
the record goes to ``benchmarks/results/compile_time_<backend>.json``. On a jaxlib without the
choice of emitters (0.11.1 and newer) it records that and stops.
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for ``benchmarks.timing``

from benchmarks.timing import environment, fmt, interleaved_rounds, log, set_blas_threads, summarise, write_record  # noqa: E402

OPTION = "xla_cpu_use_fusion_emitters"
#: the compile options timed, by name (``fusion``: XLA's default)
OPTIONS = {"loop": {OPTION: False}, "fusion": {OPTION: True},
           "loop_unoptimized": {OPTION: False, "xla_backend_optimization_level": 0}}


def programs(sizes, quick):
    """(label, guide, design, targets) of each program."""
    from ppl_sbl import basis, datasets
    from ppl_sbl.models import robust_rvm, rvm

    out = []
    for n in sizes:
        d = datasets.sinc(n_train=n, n_test=10, seed=0)
        out.append((f"rvm_regression_sinc{n}", rvm.REGRESSION_GUIDE, basis.rbf(d.X_train, delta=5.55, bias=True),
                    d.t_train))
    if not quick:
        r = datasets.ripley()
        Phi = basis.rbf(r.X_train, delta=4.0, bias=True)
        out.append(("rvm_classification_ripley250", rvm.CLASSIFICATION_GUIDE, Phi, r.t_train))
        out.append(("robust_rvm_classification_ripley250", robust_rvm.CLASSIFICATION_GUIDE, Phi, r.t_train))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 300], help="sinc training sizes")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    p.add_argument("--max-sweeps", type=int, default=2000, help="the fit's sweeps at most (default 2000)")
    p.add_argument("--blas-threads", type=int, default=1, help="OpenBLAS threads (0: as set)")
    p.add_argument("--quick", action="store_true", help="the sinc regression at N = 40, one round")
    p.add_argument("--out", default=None, help="the JSON record (default benchmarks/results/compile_time_<backend>.json)")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.rounds = [40], 1
    set_blas_threads(args.blas_threads)

    import jax
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_enable_compilation_cache", False)
    from ppl_sbl import engine

    out = args.out or os.path.join(HERE, "results", f"compile_time_{jax.default_backend()}.json")
    record = {"environment": environment(), "arguments": vars(args), "programs": {}}
    for label, guide, Phi, t in programs(args.sizes, args.quick):
        data = engine.strong(guide.prepare(Phi, t))

        def fit(data, guide=guide):
            _, elbo, sweeps, _ = engine.fit(guide, data, max_sweeps=args.max_sweeps)
            return elbo, sweeps

        lowered = jax.jit(fit).lower(data)
        try:
            compiled = {name: lowered.compile(options) for name, options in OPTIONS.items()}
        except Exception as err:  # this jaxlib has no choice of emitters
            record["unavailable"] = f"{type(err).__name__}: {err}"
            log(f"# no choice of emitters in this jaxlib: {record['unavailable']}")
            break
        compiles = {name: {"wall": []} for name in OPTIONS}
        for _ in range(args.rounds):  # interleaved; a fresh lowering each time (JAX keeps compiled lowerings)
            for name, options in OPTIONS.items():
                fresh = jax.jit(functools.partial(fit)).lower(data)
                start = time.perf_counter()
                fresh.compile(options)
                compiles[name]["wall"].append(time.perf_counter() - start)
        runs = interleaved_rounds({name: (lambda c=c: jax.block_until_ready(c(data))) for name, c in compiled.items()},
                                  args.rounds)
        results = {name: c(data) for name, c in compiled.items()}
        elbos = {name: float(r[0]) for name, r in results.items()}
        sweeps = {name: int(r[1]) for name, r in results.items()}
        row = {"n": int(Phi.shape[0]), "m": int(Phi.shape[1]), "elbo": elbos, "sweeps": sweeps,
               "same_fit": all(bool(np.isclose(elbos[name], elbos["fusion"], rtol=1e-12, atol=0))
                               and sweeps[name] == sweeps["fusion"] for name in OPTIONS)}
        for name in OPTIONS:
            row[name] = {"compile_seconds": summarise(compiles[name]["wall"]), "run_seconds": summarise(runs[name]["wall"])}
        text = []
        for name in OPTIONS:
            if name != "fusion":
                row[f"compile_ratio_{name}_to_fusion"] = (row[name]["compile_seconds"]["median"]
                                                          / row["fusion"]["compile_seconds"]["median"])
                row[f"run_ratio_{name}_to_fusion"] = (row[name]["run_seconds"]["median"]
                                                      / row["fusion"]["run_seconds"]["median"])
            text.append(f"{name} compile {fmt(row[name]['compile_seconds']['median'])} s run "
                        f"{fmt(row[name]['run_seconds']['median'], '.4f')} s"
                        + ("" if name == "fusion" else f" (x{fmt(row[f'compile_ratio_{name}_to_fusion'])}, "
                                                       f"x{fmt(row[f'run_ratio_{name}_to_fusion'])})"))
        log(f"{label}: " + "; ".join(text) + f"; {sweeps['fusion']} sweeps; same fit: {row['same_fit']}")
        record["programs"][label] = row
        write_record(record, out, announce=False)
    write_record(record, out)
    return record


if __name__ == "__main__":
    main()
