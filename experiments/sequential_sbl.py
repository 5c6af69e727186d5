"""The image experiment of Faul & Pilikos (section 5): inpainting with sequential SBL.

Not a test (the tests run ``--quick``). scikit-image's bundled ``camera`` image, downscaled to
``--size`` (128 x 128; 32 x 32 in quick mode) with anti-aliasing and scaled to [0, 1]; 55% of the
pixels removed at random (seed ``--seed``). Stages, each with PSNR and SSIM (scikit-image, data
range 1, observed pixels kept at their values, predictions clipped to [0, 1]):

A. Haar wavelets of scale 1 (2 x 2 tiles) fitted to the observed pixels (the paper's Fig. 2):
   the reconstruction, its absolute error, E[delta L] at every missing pixel (section 4, with the
   mean and variance of the ``--neighbours`` nearest observed pixels) and the predictive
   variance. How well each map finds the pixels with large error: the area under the ROC curve
   for "among the 10% of missing pixels with the largest absolute error", scored by -E[delta L]
   and by the predictive variance.
B. 5% more pixels (of the whole image) gathered where E[delta L] is most negative, added one by
   one with ``add_sample`` and the fit resumed (Fig. 3); against 5% more chosen at random.
C. The missing pixels with E[delta L] > 0 accepted (their predictions join the data as
   pseudo-samples), the rest reconstructed with Haar wavelets of scale 2 (4 x 4 tiles, Fig. 4).
D. Gaussian RBFs centred at every pixel, standard deviation ``--rbf-sd`` pixels (the paper's
   "radius 8"), fitted to the observed pixels; E[delta L] with S = all samples, as in the paper;
   predictive variance and the augmented variance of Rasmussen & Quinonero-Candela (a function
   centred at the query pixel joins with prior precision 1 / var(y), our choice) (Fig. 5); beside
   it, E[delta L] with the k nearest samples as S (``auc_edl_knn``).

Maps as in the paper: E[delta L] divided by its largest magnitude (to [-1, 1]), errors and
variances scaled to [0, 1] (min-max).

The noise variance is fixed at ``--noise-var`` (1e-3: a standard deviation of 8 grey levels of
255); the paper does not give its value. The paper reports FSIM, which is not implemented here.

Usage::

    python experiments/sequential_sbl.py            # experiments/results/sequential_sbl_experiments.json
    python experiments/sequential_sbl.py --quick --out-dir /tmp/ssbl
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for ``benchmarks.timing``

from benchmarks.timing import environment, log, save_figure, timed, write_record  # noqa: E402

PAPER_FSIM = {"A haar1": 0.74, "B guided +5%": 0.93, "C haar2 on the rest": 0.91, "D rbf": 0.88}


def camera(size):
    import numpy as np
    from skimage import data, transform

    img = data.camera().astype(np.float64) / 255.0
    return transform.resize(img, (size, size), anti_aliasing=True)


def metrics(img, recon):
    import numpy as np
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    rec = np.clip(recon, 0.0, 1.0)
    return {"psnr": float(peak_signal_noise_ratio(img, rec, data_range=1.0)),
            "ssim": float(structural_similarity(img, rec, data_range=1.0))}


def reconstruct(state, img, observed, fill=None):
    """Observed pixels at their values, the others predicted (or taken from ``fill``)."""
    import numpy as np

    from ppl_sbl.models import sequential_sbl as ss

    P = img.size
    mean, var = ss.predict(state, np.arange(P))
    recon = mean.copy()
    recon[observed] = img.ravel()[observed]
    if fill is not None:
        idx, values = fill
        recon[idx] = values
    return recon.reshape(img.shape), var


def error_auc(abs_err, scores):
    """Area under the ROC curve of ``scores`` for the 10% of pixels with the largest error."""
    import numpy as np
    from sklearn.metrics import roc_auc_score

    cut = np.quantile(abs_err, 0.9)
    labels = abs_err >= cut
    return float(roc_auc_score(labels, scores))


def coords(idx, width):
    import numpy as np

    return np.column_stack(np.divmod(np.asarray(idx), width)).astype(np.float64)


def uncertainty(state, img, observed, missing, k):
    """E[delta L] and the predictive variance at the missing pixels."""
    from ppl_sbl.models import sequential_sbl as ss

    W = img.shape[1]
    y = state.y
    pts = state.rows
    m_bar, v_bar = ss.neighbour_statistics(coords(missing, W), coords(pts, W), y, k=k)
    edl = ss.expected_delta_L(state, missing, m_bar, v_bar)
    _, var = ss.predict(state, missing)
    return edl, var


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="32 x 32 image (the tests)")
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--missing", type=float, default=0.55)
    p.add_argument("--extra", type=float, default=0.05, help="share of the image gathered in stage B (default 0.05)")
    p.add_argument("--neighbours", type=int, default=8)
    p.add_argument("--rbf-sd", type=float, default=8.0)
    p.add_argument("--noise-var", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-figures", action="store_true")
    p.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    args = p.parse_args(argv)
    if args.quick:
        args.size = 32
    import numpy as np

    from ppl_sbl import basis
    from ppl_sbl.models import sequential_sbl as ss

    os.makedirs(args.out_dir, exist_ok=True)
    suffix = "_quick" if args.quick else ""
    env = environment("skimage", "sklearn")
    log(f"# sequential SBL image experiment  {env['date']}  size={args.size}  missing={args.missing:.0%}  "
        f"noise_var={args.noise_var:g}  k={args.neighbours}  rbf sd={args.rbf_sd:g}  seed={args.seed}")
    img = camera(args.size)
    H, W = img.shape
    P = H * W
    rng = np.random.default_rng(args.seed)
    observed = np.sort(rng.choice(P, int(round((1 - args.missing) * P)), replace=False))
    missing = np.setdiff1d(np.arange(P), observed)
    truth = img.ravel()
    record = {"experiment": "Faul & Pilikos section 5, camera image", "environment": env, "args": vars(args),
              "paper_fsim": PAPER_FSIM, "stages": {}}
    maps = {}

    def report(name, state, recon, seconds, extra=None):
        rec = {**metrics(img, recon), "active": int(len(state.active)), "log_marginal_likelihood":
               state.log_marginal_likelihood, "moves": len(state.moves), "seconds": seconds,
               "stop_reason": state.stop_reason, "refreshes": len(state.refresh_drift),
               "largest_drift": max((abs(d) for _, d in state.refresh_drift), default=0.0),
               "rollbacks": len(state.rollbacks), **(extra or {})}
        record["stages"][name] = rec
        fsim = PAPER_FSIM.get(name)
        log(f"  {name:<22} PSNR {rec['psnr']:6.2f} dB  SSIM {rec['ssim']:.4f}  K {rec['active']:5d}  "
            f"L {rec['log_marginal_likelihood']:11.2f}  {seconds:7.2f}s  stop {state.stop_reason}"
            f" ({len(state.refresh_drift)} refreshes, {len(state.rollbacks)} rollbacks)"
            + (f"  [paper FSIM {fsim}]" if fsim else "")
            + "".join(f"  {k} {v:.3f}" for k, v in (extra or {}).items() if isinstance(v, float)))

    # A. Haar scale 1 ---------------------------------------------------------------------------
    haar1 = basis.haar_2d((H, W), 1)
    stA, secA = timed(lambda: ss.fit(haar1, truth[observed], rows=observed, noise_var=args.noise_var))
    reconA, varA = reconstruct(stA, img, observed)
    edlA, pvarA = uncertainty(stA, img, observed, missing, args.neighbours)
    errA = np.abs(reconA.ravel() - truth)[missing]
    aucA = {"auc_edl": error_auc(errA, -edlA), "auc_variance": error_auc(errA, pvarA)}
    report("A haar1", stA, reconA, secA, aucA)
    maps["A"] = (reconA, errA, edlA, pvarA)

    # B. 5% more samples: guided by E[delta L] and at random ------------------------------------
    n_extra = int(round(args.extra * P))
    guided = missing[np.argsort(edlA)[:n_extra]]
    random_pick = rng.choice(missing, n_extra, replace=False)
    stages_b = {}
    for name, picks in [("B guided +5%", guided), ("B random +5%", random_pick)]:
        t = time.perf_counter()
        st = stA
        per_sample = []
        for p_ in picks:
            (st, _), one = timed(lambda: ss.add_sample(st, int(p_), truth[p_]))
            per_sample.append(one)
        st = ss.resume(st)
        seconds = time.perf_counter() - t
        obs_b = np.concatenate([observed, picks])
        recon, _ = reconstruct(st, img, obs_b)
        rest = np.setdiff1d(missing, picks)
        edl, pvar = uncertainty(st, img, obs_b, rest, args.neighbours)
        err = np.abs(recon.ravel() - truth)[rest]
        report(name, st, recon, seconds, {"add_sample_ms": 1e3 * float(np.mean(per_sample)),
                                          "auc_edl": error_auc(err, -edl), "auc_variance": error_auc(err, pvar)})
        stages_b[name] = (recon, picks)

    # C. accept E[delta L] > 0, Haar scale 2 on the rest ----------------------------------------
    accepted = missing[edlA > 0]
    rest = missing[edlA <= 0]
    pseudo = np.concatenate([observed, accepted])
    values = np.concatenate([truth[observed], reconA.ravel()[accepted]])
    order = np.argsort(pseudo)
    haar2 = basis.haar_2d((H, W), 2)
    stC, secC = timed(lambda: ss.fit(haar2, values[order], rows=pseudo[order], noise_var=args.noise_var))
    reconC, _ = reconstruct(stC, img, observed, fill=(accepted, reconA.ravel()[accepted]))
    report("C haar2 on the rest", stC, reconC, secC, {"accepted_share": float(len(accepted) / len(missing)),
                                                      "accepted_abs_error": float(np.mean(np.abs(
                                                          reconA.ravel()[accepted] - truth[accepted])))
                                                      if len(accepted) else float("nan"),
                                                      "rest_abs_error_haar1": float(np.mean(np.abs(
                                                          reconA.ravel()[rest] - truth[rest]))),
                                                      "rest_abs_error_haar2": float(np.mean(np.abs(
                                                          reconC.ravel()[rest] - truth[rest])))})

    # D. Gaussian RBFs --------------------------------------------------------------------------
    rbf = basis.gaussian_rbf_2d((H, W), args.rbf_sd)
    stD, secD = timed(lambda: ss.fit(rbf, truth[observed], rows=observed, noise_var=args.noise_var))
    reconD, _ = reconstruct(stD, img, observed)
    edlD, pvarD = uncertainty(stD, img, observed, missing, None)
    errD = np.abs(reconD.ravel() - truth)[missing]
    alpha_new = 1.0 / float(np.var(truth[observed]))
    augD, sec_aug = timed(lambda: ss.augmented_variance(stD, missing, lambda q: rbf.columns([q])[:, 0], alpha_new))
    edlD_knn, _ = uncertainty(stD, img, observed, missing, args.neighbours)
    report("D rbf", stD, reconD, secD, {"auc_edl": error_auc(errD, -edlD), "auc_variance": error_auc(errD, pvarD),
                                        "auc_edl_knn": error_auc(errD, -edlD_knn),
                                        "auc_augmented_variance": error_auc(errD, augD),
                                        "share_negative_edl": float(np.mean(edlD < 0)),
                                        "augmented_seconds": sec_aug})
    maps["D"] = (reconD, errD, edlD, pvarD, augD)

    if not args.no_figures:
        record["figures"] = figures(img, observed, missing, maps, stages_b, reconC, args, suffix)
        log("# figures: " + ", ".join(record["figures"]))
    write_record(record, os.path.join(args.out_dir, f"sequential_sbl_experiments{suffix}.json"))
    return record


def _image(values, idx, shape):
    import numpy as np

    out = np.full(shape[0] * shape[1], np.nan)
    out[idx] = values
    return out.reshape(shape)


def figures(img, observed, missing, maps, stages_b, reconC, args, suffix):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    shape = img.shape
    names = []
    scaled = lambda v: v / np.nanmax(np.abs(v)) if np.nanmax(np.abs(v)) > 0 else v  # E[delta L]: to [-1, 1]
    minmax = lambda v: (v - np.nanmin(v)) / max(np.nanmax(v) - np.nanmin(v), 1e-300)  # errors, variances: [0, 1]

    decimated = np.full(img.size, np.nan)
    decimated[observed] = img.ravel()[observed]
    reconA, errA, edlA, pvarA = maps["A"]
    fig, ax = plt.subplots(2, 3, figsize=(11, 7.5))
    panels = [(img, "original", "gray", (0, 1)), (decimated.reshape(shape), "55% removed", "gray", (0, 1)),
              (reconA, "Haar scale 1 reconstruction", "gray", (0, 1)),
              (_image(minmax(errA), missing, shape), "absolute error (scaled)", "magma", (0, 1)),
              (_image(scaled(edlA), missing, shape), "E[delta L] (scaled to [-1, 1])", "RdBu", (-1, 1)),
              (_image(minmax(pvarA), missing, shape), "predictive variance (scaled)", "viridis", (0, 1))]
    names.append(_draw(fig, ax, panels, "Sequential SBL, Haar wavelets of scale 1 (Faul & Pilikos Fig. 1-2)", args,
                       f"sequential_sbl_haar1{suffix}.png"))

    fig, ax = plt.subplots(1, 3, figsize=(11, 4))
    (rg, picks_g), (rr, _) = stages_b["B guided +5%"], stages_b["B random +5%"]
    for a, (v, title) in zip(ax, [(rg, "+5% where E[delta L] is most negative"), (rr, "+5% at random"),
                                   (reconC, "accept E[delta L] > 0, Haar scale 2 on the rest")]):
        a.imshow(v, cmap="gray", vmin=0, vmax=1)
        a.set_title(title, fontsize=9)
        a.axis("off")
    r, c = np.divmod(picks_g, shape[1])
    ax[0].plot(c, r, ".", ms=1.5, color="tab:red")
    fig.suptitle("Improving the reconstruction (Fig. 3 and 4)")
    names.append(save_figure(fig, os.path.join(args.out_dir, f"sequential_sbl_improve{suffix}.png")))

    reconD, errD, edlD, pvarD, augD = maps["D"]
    fig, ax = plt.subplots(1, 5, figsize=(16, 3.6))
    panels = [(reconD, f"Gaussian RBFs (sd {args.rbf_sd:g} px)", "gray", (0, 1)),
              (_image(minmax(errD), missing, shape), "absolute error (scaled)", "magma", (0, 1)),
              (_image(scaled(edlD), missing, shape), "E[delta L], S = all samples", "RdBu", (-1, 1)),
              (_image(minmax(pvarD), missing, shape), "predictive variance", "viridis", (0, 1)),
              (_image(minmax(augD), missing, shape), "augmented variance", "viridis", (0, 1))]
    names.append(_draw(fig, ax, panels, "Gaussian RBFs (Fig. 5)", args, f"sequential_sbl_rbf{suffix}.png"))
    return names


def _draw(fig, ax, panels, title, args, name):
    """Images (value, title, colour map, (vmin, vmax)) on the axes, then the figure saved."""
    import numpy as np

    for a, (v, sub, cmap, lim) in zip(np.ravel(ax), panels):
        a.imshow(v, cmap=cmap, vmin=lim[0], vmax=lim[1])
        a.set_title(sub, fontsize=9)
        a.axis("off")
    fig.suptitle(title)
    return save_figure(fig, os.path.join(args.out_dir, name))


if __name__ == "__main__":
    main()
