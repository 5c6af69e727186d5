"""Benchmark: where the GPLVM's compiled route for q(X)'s moments stops paying.

The natural-gradient fit computes q(X)'s moments (per latent dimension: the Cholesky factor of
C_q = K_Y + Lambda_q^-1, log|B_q| and diag(B_q^-1), section 5.4) by one of two routes:
``linalg.device_factor`` (one compiled JAX program for every latent dimension, batched matrix
products around small LAPACK calls, ``linalg.stacked_cholesky_inverse``) or
``linalg.host_factor`` (LAPACK's potrf and a triangular inverse per latent dimension, from the
host). ``linalg.DEVICE_FACTOR_MAX_N`` is the largest N the fit sends to the compiled route. This
times both on the bench's problem (``benchmarks/gplvm.py``: digits, the supervised model at its starting
point, Q = 20) at each N of ``--sizes``, interleaved with JAX's batched Cholesky of the Q matrices
B_q (``benchmarks/gplvm.py``'s reference) in one process, and prints each route's time over the
reference (medians and minima over the rounds) and which route is faster by each statistic.

Usage::

    OPENBLAS_NUM_THREADS=1 python benchmarks/gplvm_crossover.py   # benchmarks/results/gplvm_cpu_crossover.json
    python benchmarks/gplvm_crossover.py --quick
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for ``benchmarks.timing``

from benchmarks.timing import environment, log, write_record  # noqa: E402
from benchmarks.gplvm import cholesky_reference, interleaved_timings, problem  # noqa: E402


def time_routes(N, args):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from ppl_sbl import sparse_gp as sg
    from ppl_sbl import linalg
    from ppl_sbl.models import gplvm

    free, fixed, Y, Z, _ = problem(N, args)
    prob = gplvm.natural.NaturalProblem(free, fixed, Y, Z, prior_kernel="rbf", jitter=sg.JITTER)
    lam = np.ascontiguousarray(np.asarray(gplvm.precisions(jnp.asarray(prob.K), free["log_lam"])).T)  # (Q, N)
    B, chol = cholesky_reference(prob.K_device, lam)
    r = np.zeros_like(lam)
    device = [np.asarray(x) for x in linalg.device_factor(prob.K_device, lam, r)]
    host = linalg.host_factor(prob.K, lam, r)
    agreement = float(np.max(np.abs(device[0] - host[0]) / np.abs(host[0])))
    t, t_min = interleaved_timings({
        "chol": lambda: jax.block_until_ready(chol(B)),
        "device": lambda: [np.asarray(x) for x in linalg.device_factor(prob.K_device, lam, r)],
        "host": lambda: linalg.host_factor(prob.K, lam, r),
    }, args.reps if N <= 300 else max(2, args.reps // 3))
    row = {"n": N, "jax_cholesky_seconds": t["chol"], "jax_cholesky_min_seconds": t_min["chol"],
           "device_seconds": t["device"], "device_min_seconds": t_min["device"],
           "host_seconds": t["host"], "host_min_seconds": t_min["host"],
           "device_over_jax_cholesky": t["device"] / t["chol"], "device_min_over_jax_cholesky": t_min["device"] / t_min["chol"],
           "host_over_jax_cholesky": t["host"] / t["chol"], "host_min_over_jax_cholesky": t_min["host"] / t_min["chol"],
           "faster_by_medians": "device" if t["device"] < t["host"] else "host",
           "faster_by_minima": "device" if t_min["device"] < t_min["host"] else "host",
           "routes_diag_inverse_max_relative_difference": agreement,
           "fit_takes": "device" if N <= linalg.DEVICE_FACTOR_MAX_N else "host"}
    log(f"{N:>5} | {row['device_over_jax_cholesky']:6.2f} {row['device_min_over_jax_cholesky']:6.2f} | "
        f"{row['host_over_jax_cholesky']:6.2f} {row['host_min_over_jax_cholesky']:6.2f} | "
        f"{row['faster_by_medians']:>7} {row['faster_by_minima']:>7} | {row['fit_takes']:>7} | {agreement:9.1e}")
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="N 50 and 100, Q 5, 3 rounds (seconds)")
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 200, 256, 400, 512, 600, 800])
    p.add_argument("--latent-dim", type=int, default=20)
    p.add_argument("--num-inducing", type=int, default=30)
    p.add_argument("--reps", type=int, default=40, help="rounds up to N = 300; a third of them above")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join(HERE, "results", "gplvm_cpu_crossover.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.latent_dim, args.num_inducing, args.reps = [50, 100], 5, 10, 3
    from ppl_sbl import linalg

    env = environment()
    log(f"# GPLVM q(X) moments: compiled route against host route  {env['date']}  cpus={env['cpu_count']}  "
        f"blas threads={env['blas_threads_env']}  Q={args.latent_dim}  the fit's compiled route up to N = "
        f"{linalg.DEVICE_FACTOR_MAX_N}")
    log("\n    N | device / chol JAX: medians minima | host / chol JAX: medians minima | faster: medians minima | "
        "fit takes | diag B^-1 max rel. diff.")
    rows = [time_routes(N, args) for N in args.sizes]
    record = {"benchmark": "GPLVM q(X) moments, compiled (device) against host LAPACK route", "environment": env,
              "args": vars(args), "device_factor_max_n": linalg.DEVICE_FACTOR_MAX_N, "rows": rows}
    out = args.out.replace(".json", "_quick.json") if args.quick else args.out
    write_record(record, out)


if __name__ == "__main__":
    main()
