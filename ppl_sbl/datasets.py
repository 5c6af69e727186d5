"""Built-in data sets, generated or shipped with the package (no network access).

* :func:`sinc`: the noisy sinc of the grid RVM paper (Kropotov et al., section 6.1).
* :func:`ripley`: Ripley's synthetic two-class data (``data/README.md`` gives the source).
"""
from __future__ import annotations

from importlib import resources
from typing import NamedTuple

import numpy as np

__all__ = ["Dataset", "sinc", "ripley"]


class Dataset(NamedTuple):
    """Train and test inputs and targets; ``description`` says where they come from."""

    X_train: np.ndarray
    t_train: np.ndarray
    X_test: np.ndarray
    t_test: np.ndarray
    description: str


def sinc(n_train=100, n_test=600, *, noise=0.2, noise_features=0, normalize=True, seed=0) -> Dataset:
    """Noisy sinc: t = sin(x)/x + U(-noise, noise), x ~ U(-10, 10).

    The grid RVM paper's set-up: 100 training points with uniform noise on [-0.2, 0.2] and 600
    noiseless test points (here evenly spaced on [-10, 10]). ``noise_features`` appends that
    many standard-normal input columns carrying no signal. With ``normalize`` every input column
    is standardised with the training mean and standard deviation (the paper's "normalized
    dataset"; its RBF width delta = 5.55 refers to it).
    """
    if int(n_train) < 1 or int(n_test) < 1:
        raise ValueError("`n_train` and `n_test` must be >= 1.")
    if int(noise_features) < 0:
        raise ValueError(f"`noise_features` must be >= 0; got {noise_features}.")
    rng = np.random.default_rng(seed)
    x = rng.uniform(-10.0, 10.0, int(n_train))
    t = np.sinc(x / np.pi) + rng.uniform(-noise, noise, int(n_train))
    x_test = np.linspace(-10.0, 10.0, int(n_test))
    t_test = np.sinc(x_test / np.pi)
    X = np.column_stack([x, rng.standard_normal((int(n_train), int(noise_features)))])
    X_test = np.column_stack([x_test, rng.standard_normal((int(n_test), int(noise_features)))])
    if normalize:
        mean, std = X.mean(0), X.std(0)
        std = np.where(std > 0, std, 1.0)
        X, X_test = (X - mean) / std, (X_test - mean) / std
    return Dataset(X, t, X_test, t_test, "noisy sinc (Kropotov et al., section 6.1)")


def _read_ripley(name):
    text = resources.files("ppl_sbl").joinpath("data", name).read_text()
    values = np.loadtxt(text.splitlines()[1:])
    return values[:, :2], values[:, 2]


def ripley() -> Dataset:
    """Ripley's synthetic two-class problem: 250 training and 1000 test points, labels 0/1."""
    X, t = _read_ripley("ripley_synth_train.txt")
    X_test, t_test = _read_ripley("ripley_synth_test.txt")
    return Dataset(X, t, X_test, t_test, "Ripley (1996) synthetic two-class data")
