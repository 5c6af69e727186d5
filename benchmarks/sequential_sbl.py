"""Benchmark: sequential SBL against scikit-learn's ARDRegression and against refitting.

Not a test (the tests run ``--quick``). Data: scikit-image's ``camera`` image downscaled to each
size in ``--sizes`` (default 32, 48, 64, 80, 96, 112, 128), scaled to [0, 1], 45% of the pixels observed at
random; dictionary: the 2-D Haar wavelets of scale 1 (M = number of pixels). Arms:

(a) ``sequential_sbl.fit`` at the fixed noise variance ``--noise-var`` (the image experiment's
    setting);
(b) ``sequential_sbl.fit(update_noise=True)``, started from sigma^2 = var(y), the setting that is
    comparable with ARDRegression, which re-estimates the noise too: sigma^2 after every move (the
    issue's rule; each re-estimate factorises Sigma^-1, block-diagonal over the Haar tiles, and
    refreshes S and Q) and, as (b'), after every ``--noise-every`` moves (``noise_every``); both
    at every size (or those in ``--noise-sizes``);
(c) ``sklearn.linear_model.ARDRegression(fit_intercept=False)`` on the dense design matrix (N x M)
    with its defaults (max_iter 300, tol 1e-3, threshold_lambda 1e4) (it works with N x N
    matrices), at the sizes in increasing order while its time, predicted by a log-log fit over
    the sizes it ran, stays within ``--ard-budget`` (600 s: the goal's "largest size it finishes
    in ten minutes"; or at the sizes in ``--ard-sizes``); where the largest size is not run, its
    time there is extrapolated with that fit (marked '*').
    Both fits are scored with the same formula, L = log N(y | 0, sigma^2 I + D_a A^-1 D_a^T)
    (``sequential_sbl.log_marginal_likelihood``), ARD's with its ``lambda_`` (the functions it
    pruned, lambda >= threshold_lambda, out) and its noise precision ``alpha_``.
(d) one ``add_sample`` (mean over ``--new-samples`` new pixels, added one after the other to
    the state of (a)) against a refit from scratch on the same data (the time of (a)).

Memory: the peak of NumPy's allocations (``tracemalloc``) during (a) at each size, beside the
size of one dense N x N matrix of float64 (the fit never forms one; its largest arrays are K x K,
K the number of active functions, and M x 256 blocks). "peak below one N x N" is a stronger
check than the goal's.

Goals (from the issue): (b) at least 20 times faster than (c) at the largest size ARD finishes
within the budget, with a log marginal likelihood at least as high; one add_sample at least 100 times faster than a
refit; no N x N dense matrix at 128 x 128.

Usage::

    python benchmarks/sequential_sbl.py            # benchmarks/results/sequential_sbl_cpu.json
    python benchmarks/sequential_sbl.py --quick
"""
from __future__ import annotations

import argparse
import os
import sys
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for ``benchmarks.timing``

from benchmarks.timing import environment, log, loglog_predict, timed, write_record  # noqa: E402


def problem(size, seed):
    import numpy as np
    from skimage import data, transform

    img = transform.resize(data.camera().astype(np.float64) / 255.0, (size, size), anti_aliasing=True)
    P = size * size
    rng = np.random.default_rng(seed)
    perm = rng.permutation(P)
    observed = np.sort(perm[: int(round(0.45 * P))])
    return img, observed, perm[int(round(0.45 * P)):]


def run_size(size, args, run_ard):
    import numpy as np

    from ppl_sbl import basis
    from ppl_sbl.models import sequential_sbl as ss

    img, observed, unobserved = problem(size, args.seed)
    y = img.ravel()[observed]
    D = basis.haar_2d((size, size), 1)
    N, M = len(y), D.shape[1]
    row = {"size": size, "n": int(N), "m": int(M), "dense_nxn_bytes": int(N) * int(N) * 8}
    log(f"\n== {size} x {size}: N = {N} observed pixels, M = {M} Haar functions")

    tracemalloc.start()
    st_a, sec_a = timed(lambda: ss.fit(D, y, rows=observed, noise_var=args.noise_var))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    row["fixed_noise"] = {"seconds": sec_a, "L": st_a.log_marginal_likelihood, "active": int(len(st_a.active)),
                          "moves": len(st_a.moves), "converged": st_a.converged, "peak_bytes": int(peak)}
    log(f"  (a) fit, sigma^2 = {args.noise_var:g}      : {sec_a:8.2f}s  L {st_a.log_marginal_likelihood:12.3f}  "
        f"K {len(st_a.active):5d}  moves {len(st_a.moves):6d}  peak memory {peak / 2**20:.1f} MiB "
        f"(one N x N matrix: {row['dense_nxn_bytes'] / 2**20:.1f} MiB)")

    noise_fits = {}
    for key, every in [("update_noise", 1), ("update_noise_every", args.noise_every)]:
        if args.noise_sizes is not None and size not in args.noise_sizes:
            continue
        start = float(np.var(y))
        st_b, sec_b = timed(lambda: ss.fit(D, y, rows=observed, noise_var=start, update_noise=True, noise_every=every,
                                           max_steps=args.max_steps))
        noise_fits[key] = st_b
        row[key] = {"seconds": sec_b, "L": st_b.log_marginal_likelihood, "active": int(len(st_b.active)),
                    "moves": len(st_b.moves), "noise_var": st_b.noise_var, "converged": st_b.converged,
                    "noise_every": every, "stop_reason": st_b.stop_reason}
        label = "(b) fit, update_noise" if every == 1 else f"(b') update_noise, every {every}"
        log(f"  {label:<31}: {sec_b:8.2f}s  L {st_b.log_marginal_likelihood:12.3f}  "
            f"K {len(st_b.active):5d}  moves {len(st_b.moves):6d}  sigma^2 {st_b.noise_var:.3g}"
            f"  stop: {st_b.stop_reason}")

    if run_ard:
        from sklearn.linear_model import ARDRegression

        X = D.rows(observed)
        ard = ARDRegression(fit_intercept=False)
        _, sec_c = timed(lambda: ard.fit(X, y))
        keep = ard.lambda_ < ard.threshold_lambda
        alpha = np.where(keep, ard.lambda_, np.inf)
        base = ss.fit(D, y, rows=observed, noise_var=1.0 / ard.alpha_, max_steps=0)
        L_c = ss.log_marginal_likelihood(base, alpha=alpha, noise_var=1.0 / ard.alpha_)
        row["ard"] = {"seconds": sec_c, "L": L_c, "active": int(keep.sum()), "iterations": int(ard.n_iter_),
                      "noise_var": float(1.0 / ard.alpha_)}
        for key, st_b in noise_fits.items():
            # how long (b) / (b') took to pass ARD's log marginal likelihood
            tr, ts = np.asarray(st_b.trace[1:]), np.asarray(st_b.trace_seconds)
            hit = np.flatnonzero(tr >= L_c)
            row[key]["seconds_to_ard_L"] = float(ts[hit[0]]) if len(hit) else None
        log(f"  (c) sklearn ARDRegression      : {sec_c:8.2f}s  L {L_c:12.3f}  K {int(keep.sum()):5d}  "
            f"iterations {ard.n_iter_}  sigma^2 {1.0 / ard.alpha_:.3g}")
        for key, label in (("update_noise", "(b)"), ("update_noise_every", "(b')")):
            if key in row:
                hit = row[key]["seconds_to_ard_L"]
                log(f"      {label} passes ARD's L after {hit:.3f}s: ARD's time / this {sec_c / hit:.1f}" if hit else
                    f"      {label} never reaches ARD's L")

    # (d) add_sample against a refit
    picks = unobserved[: args.new_samples]
    st = st_a
    times = []
    for p in picks:
        (st, _), seconds = timed(lambda: ss.add_sample(st, int(p), img.ravel()[p]))
        times.append(seconds)
    refit, sec_refit = timed(lambda: ss.fit(D, img.ravel()[np.concatenate([observed, picks])],
                                            rows=np.concatenate([observed, picks]), noise_var=args.noise_var))
    row["add_sample"] = {"mean_seconds": float(np.mean(times)), "max_seconds": float(np.max(times)),
                         "samples": len(picks), "refit_seconds": sec_refit,
                         "refit_over_add_sample": sec_refit / float(np.mean(times))}
    log(f"  (d) add_sample                 : {1e3 * np.mean(times):8.3f} ms per sample (max {1e3 * np.max(times):.3f}); "
        f"refit on all {N + len(picks)} samples {sec_refit:.2f}s = {row['add_sample']['refit_over_add_sample']:.0f} x")
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="sizes 6 and 10, every arm at both (seconds)")
    p.add_argument("--sizes", type=int, nargs="+", default=[32, 48, 64, 80, 96, 112, 128])
    p.add_argument("--ard-sizes", type=int, nargs="+", default=None,
                   help="sizes at which ARDRegression runs (default: the sizes in increasing order while its "
                        "time, predicted from the sizes it ran, stays within --ard-budget)")
    p.add_argument("--ard-budget", type=float, default=600.0,
                   help="seconds: the goal compares at the largest size ARDRegression finishes within this (600)")
    p.add_argument("--noise-sizes", type=int, nargs="+", default=None,
                   help="sizes at which (b) and (b') run (default: every size)")
    p.add_argument("--noise-every", type=int, default=50, help="(b')'s noise_every (default 50)")
    p.add_argument("--noise-var", type=float, default=1e-3)
    p.add_argument("--max-steps", type=int, default=20000,
                   help="max_steps of the update_noise fits (b), (b') (default 20000): with sigma^2 free the "
                        "maximum lies at sigma^2 -> 0 on these images (K reaches N) and the last gains are tiny")
    p.add_argument("--new-samples", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join(HERE, "results", "sequential_sbl_cpu.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.ard_sizes, args.noise_sizes, args.new_samples, args.noise_every = [6, 10], [6, 10], [6, 10], 10, 10
    sizes = sorted(set(args.sizes) | set(args.ard_sizes or []))
    env = environment("sklearn", "skimage")
    log(f"# sequential SBL benchmark  {env['date']}  backend=cpu (NumPy)  cpus={env['cpu_count']}  "
        f"load={env['load_average']}  sizes={sizes}  ARD at "
        f"{args.ard_sizes or f'the sizes it is predicted to finish within {args.ard_budget:.0f}s'}")
    rows, stopped = [], False
    for s in sizes:
        if args.ard_sizes is not None:
            run_ard = s in args.ard_sizes
        else:
            done = [(r["size"] ** 2, r["ard"]["seconds"]) for r in rows if "ard" in r]
            # from one point: the cubic cost of its N x N solves, N^1.5 in the pixels
            predicted = loglog_predict([p for p, _ in done], [t for _, t in done], s * s, slope_if_single=1.5)
            predicted = predicted[0] if predicted else 0.0
            run_ard = not stopped and predicted <= args.ard_budget
            if not run_ard and not stopped:
                log(f"# ARDRegression not run from {s} x {s} on: predicted {predicted:.0f}s > {args.ard_budget:.0f}s")
            stopped = stopped or not run_ard
        rows.append(run_size(s, args, run_ard))
        if "ard" in rows[-1] and rows[-1]["ard"]["seconds"] > args.ard_budget:
            stopped = True

    ard = [r for r in rows if "ard" in r]
    summary = {}
    nan = float("nan")
    log("\nsize     N      M | (a) fit s   (b) s  (b') s  (c) ARD s | (c)/(b) (c)/(b') | L(b)-L(c) L(b')-L(c) | "
        "add_sample ms  refit/add")
    for r in rows:
        b, b2, c = r.get("update_noise"), r.get("update_noise_every"), r.get("ard")
        ratio = lambda x: c["seconds"] / x["seconds"] if x and c else nan
        diff = lambda x: x["L"] - c["L"] if x and c else nan
        log(f"{r['size']:>4} {r['n']:>5} {r['m']:>6} | {r['fixed_noise']['seconds']:>9.2f} "
            f"{b['seconds'] if b else nan:>7.2f} {b2['seconds'] if b2 else nan:>7.2f} {c['seconds'] if c else nan:>10.2f} | "
            f"{ratio(b):>7.2f} {ratio(b2):>8.2f} | {diff(b):>9.2f} {diff(b2):>10.2f} | "
            f"{1e3 * r['add_sample']['mean_seconds']:>13.3f} {r['add_sample']['refit_over_add_sample']:>10.0f}")
    finished = [r for r in ard if r["ard"]["seconds"] <= args.ard_budget]
    if finished:
        largest = max(finished, key=lambda r: r["size"])
        summary["ard_largest_size"] = largest["size"]
        for key, tag in (("update_noise", "every_move"), ("update_noise_every", "noise_every")):
            if key in largest:
                b = largest[key]
                summary[f"ard_over_ours_{tag}_at_largest_ard_size"] = largest["ard"]["seconds"] / b["seconds"]
                summary[f"L_ours_{tag}_minus_ard"] = b["L"] - largest["ard"]["L"]
                if b.get("seconds_to_ard_L"):
                    summary[f"ard_over_ours_{tag}_to_ard_L"] = largest["ard"]["seconds"] / b["seconds_to_ard_L"]
        both = [r for r in ard if "update_noise" in r]
        if both and max(r["size"] for r in both) < largest["size"]:
            r = max(both, key=lambda r: r["size"])
            summary["every_move_largest_size_run"] = r["size"]
            summary["ard_over_ours_every_move_there"] = r["ard"]["seconds"] / r["update_noise"]["seconds"]
            log(f"# (b), sigma^2 after every move, ran up to {r['size']} x {r['size']} (ARD finished "
                f"{largest['size']} x {largest['size']}): not run beyond")
        ex = loglog_predict([r["size"] ** 2 for r in ard], [r["ard"]["seconds"] for r in ard], max(sizes) ** 2)
        if ex and max(sizes) not in {r["size"] for r in ard}:
            summary["ard_extrapolated_seconds_at_largest"] = ex[0]
            summary["ard_loglog_slope_in_pixels"] = ex[1]
            log(f"# ARDRegression at {max(sizes)} x {max(sizes)} extrapolated: {ex[0]:.0f}s* (log-log slope {ex[1]:.2f} "
                "in the number of pixels; not run)")
    summary["add_sample_speedup_min"] = min(r["add_sample"]["refit_over_add_sample"] for r in rows)
    biggest = max(rows, key=lambda r: r["size"])
    summary["peak_bytes_at_largest"] = biggest["fixed_noise"]["peak_bytes"]
    summary["dense_nxn_bytes_at_largest"] = biggest["dense_nxn_bytes"]
    goals = {  # the issue's: sigma^2 re-estimated after every move, at the largest size ARD finished; the
        # fit to its own convergence (tol 1e-13), and the fit stopped at the first move whose L exceeds ARD's
        "fit_20x_faster_than_ard": summary.get("ard_over_ours_every_move_at_largest_ard_size", 0) >= 20,
        "passes_ard_L_20x_sooner_than_ard_finishes": summary.get("ard_over_ours_every_move_to_ard_L", 0) >= 20,
        "L_at_least_ard": summary.get("L_ours_every_move_minus_ard", -1) >= -1e-6,
        "add_sample_100x_faster_than_refit": summary["add_sample_speedup_min"] >= 100,
        "peak_below_one_nxn_at_largest": summary["peak_bytes_at_largest"] < summary["dense_nxn_bytes_at_largest"],
    }
    log("# goals: " + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in goals.items()))
    log("# " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in summary.items()))
    out = args.out.replace(".json", "_quick.json") if args.quick else args.out
    write_record({"benchmark": "sequential SBL vs ARDRegression and refits", "environment": env, "args": vars(args),
                  "rows": rows, "summary": summary, "goals": goals}, out)


if __name__ == "__main__":
    main()
