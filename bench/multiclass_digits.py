"""Benchmark: the multinomial probit RVM's fast schedule on scikit-learn's digits.

Not a test. Run alone on the machine, one BLAS thread::

    OPENBLAS_NUM_THREADS=1 python bench/multiclass_digits.py [--n-train 1200] [--delta 0.05]
        [--tol 1e-9] [--seed 0] [--rounds 2] [--out results/multiclass_digits.json]

Data: ``sklearn.datasets.load_digits`` (1797 8 x 8 images, 10 classes), pixels scaled to [0, 1],
a random split (``--seed``) into ``--n-train`` training and the rest test images. Design: the
Gaussian RBF ``basis.rbf(X, delta=--delta, bias=True)`` centred on the training images (M = N + 1).
Fit: ``ppl_sbl.CAVI(rvm.multiclass, schedule="fast", tol=--tol).run(Phi, t)``, ``--rounds`` times
(the first includes JAX's compilation of the cone quadrature; ``seconds`` is the fit's own
``result.seconds``). Reported: the test error of the predictive class probabilities' argmax, the
number of distinct relevance vectors (training images whose RBF some class's data support, the
bias column apart), the count per class, the ELBO, passes and moves.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import environment  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-train", type=int, default=1200)
    parser.add_argument("--delta", type=float, default=0.05)
    parser.add_argument("--tol", type=float, default=1e-9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=None, help="write the record as JSON here")
    args = parser.parse_args(argv)

    from sklearn.datasets import load_digits

    import ppl_sbl
    from ppl_sbl import basis
    from ppl_sbl.models import rvm

    digits = load_digits()
    X, y = digits.data / 16.0, digits.target
    order = np.random.default_rng(args.seed).permutation(len(y))
    train, test = order[:args.n_train], order[args.n_train:]
    Phi = basis.rbf(X[train], delta=args.delta, bias=True)
    Phi_test = basis.rbf(X[test], X[train], delta=args.delta, bias=True)
    rounds = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        res = ppl_sbl.CAVI(rvm.multiclass, schedule="fast", tol=args.tol, progress_bar=False).run(Phi, y[train])
        wall = time.perf_counter() - start
        proba = res.predict(Phi_test)
        supported = res.class_supported
        rounds.append({
            "seconds": res.seconds,
            "wall_seconds": wall,
            "test_error": float(np.mean(proba.argmax(1) != y[test])),
            "relevance_vectors": int(supported[1:].any(axis=1).sum()),
            "relevance_vectors_per_class": supported[1:].sum(axis=0).astype(int).tolist(),
            "bias_supported_per_class": supported[0].astype(int).tolist(),
            "elbo": res.elbo,
            "trace_entries": res.num_sweeps,
            "moves": res.num_moves,
            "converged": res.converged,
            "max_row_sum_error": float(np.max(np.abs(proba.sum(1) - 1.0))),
        })
        print(json.dumps(rounds[-1]), flush=True)
    record = {"settings": vars(args), "n_test": int(len(test)), "rounds": rounds,
              "environment": environment("sklearn")}
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(record, fh, indent=1)
    return record


if __name__ == "__main__":
    main()
