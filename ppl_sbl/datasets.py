"""Built-in data sets, generated or shipped with the package (no network access).

* :func:`sinc`: the noisy sinc of the grid RVM paper (Kropotov et al., section 6.1).
* :func:`ripley`: Ripley's synthetic two-class data (``data/README.md`` gives the source).
* :func:`mixture`: the Gaussian-mixture two-class problem of Hastie, Tibshirani and Friedman
  (section 2.3.3), regenerated from its recipe, used in the grid RVM paper (section 6.1).
* :func:`digits_table`: scikit-learn's bundled 8 x 8 handwritten digits as pixel tables for a
  two-class problem (needs the ``sklearn`` extra).
* :func:`biopsy`: the original Wisconsin breast cancer data (MASS ``biopsy``, 683 complete rows;
  ``data/README.md`` gives the source).
* :func:`split_with_label_noise`: the robust RVM paper's protocol: a random 60/40 split with a
  share of the training labels flipped (used with :func:`ripley_pooled` and :func:`biopsy_data`).
"""
from __future__ import annotations

from importlib import resources
from typing import NamedTuple

import numpy as np

__all__ = [
    "Dataset",
    "sinc",
    "ripley",
    "ripley_pooled",
    "mixture",
    "mixture_bayes_error",
    "mixture_centres",
    "digits_table",
    "digits",
    "one_of_k",
    "biopsy",
    "biopsy_data",
    "flip_labels",
    "split_with_label_noise",
    "standardize",
]


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
        X, X_test = standardize(X, X_test)
    return Dataset(X, t, X_test, t_test, "noisy sinc (Kropotov et al., section 6.1)")


def standardize(X, X_test):
    """Standardise every column with the training mean and standard deviation (constant columns
    are only centred)."""
    mean, std = X.mean(0), X.std(0)
    std = np.where(std > 0, std, 1.0)
    return (X - mean) / std, (X_test - mean) / std


def _noise_columns(rng, n, k):
    return rng.standard_normal((int(n), int(k)))


def mixture(n_train=200, n_test=5000, *, noise_features=0, normalize=True, seed=0) -> Dataset:
    """The two-class Gaussian mixture of Hastie, Tibshirani & Friedman (2009, section 2.3.3).

    Recipe: ten centres m_k ~ N((1, 0), I) for class 0 and ten m_k ~ N((0, 1), I) for class 1;
    each point picks one of its class's centres with probability 1/10 and is drawn from
    N(m_k, I / 5). Classes are balanced (n/2 points each, train and test); labels are 0/1.
    The Bayes error of a draw of centres varies a lot (from 6% to 32% over seeds), so the
    centres are redrawn until it lies in [0.19, 0.21], the regime of the book's realisation
    (0.21) and of the grid RVM paper's (19%) (see :func:`mixture_centres`). ``noise_features``
    appends that many standard-normal columns; ``normalize`` standardises every column with
    the training set.
    """
    if int(n_train) < 2 or int(n_test) < 2:
        raise ValueError("`n_train` and `n_test` must be >= 2.")
    if int(noise_features) < 0:
        raise ValueError(f"`noise_features` must be >= 0; got {noise_features}.")
    centres = mixture_centres(seed)
    rng = np.random.default_rng([seed, 1])

    def draw(n):
        labels, X = _mixture_draw(rng, centres, n)
        return np.column_stack([X, _noise_columns(rng, n, noise_features)]), labels.astype(float)

    X, t = draw(int(n_train))
    X_test, t_test = draw(int(n_test))
    if normalize:
        X, X_test = standardize(X, X_test)
    return Dataset(X, t, X_test, t_test, "Gaussian mixture (Hastie, Tibshirani & Friedman 2009, section 2.3.3)")


def _mixture_draw(rng, centres, n, balanced=True):
    labels = np.repeat([0, 1], [n // 2, n - n // 2]) if balanced else rng.integers(0, 2, n)
    X = centres[labels, rng.integers(0, 10, n)] + rng.standard_normal((n, 2)) / np.sqrt(5.0)
    return labels, X


def mixture_bayes_error(centres, n=20_000, seed=0) -> float:
    """Monte Carlo error rate of the Bayes rule (which knows the centres) on ``n`` fresh points."""
    labels, X = _mixture_draw(np.random.default_rng(seed), centres, int(n), balanced=False)
    d2 = np.sum((X[:, None, None, :] - centres[None]) ** 2, axis=-1)  # (n, 2, 10)
    log_density = np.logaddexp.reduce(-2.5 * d2, axis=-1)  # N(x | m_k, I/5), common factors dropped
    return float(np.mean(np.argmax(log_density, axis=1) != labels))


def mixture_centres(seed=0, bayes_error=(0.19, 0.21)) -> np.ndarray:
    """The (2, 10, 2) centres of :func:`mixture`: the first draw from ``seed`` whose Monte Carlo
    Bayes error lies in ``bayes_error``."""
    rng = np.random.default_rng([seed, 0])
    for _ in range(1000):
        centres = np.stack([rng.normal([1.0, 0.0], 1.0, (10, 2)), rng.normal([0.0, 1.0], 1.0, (10, 2))])
        if bayes_error[0] <= mixture_bayes_error(centres) <= bayes_error[1]:
            return centres
    raise RuntimeError("no draw of mixture centres had a Bayes error in the requested range.")


def digits(n_train=500, *, seed=0) -> Dataset:
    """scikit-learn's bundled handwritten digits (1797 images of 8 x 8 pixels, UCI; ten classes)
    as 64 features scaled to [0, 1] (intensity / 16), labels 0-9. ``n_train`` images drawn at
    random, stratified by class, from ``seed`` (all 1797 with ``n_train=None``); the rest form the
    test set."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:  # pragma: no cover - depends on the extras
        raise ImportError("digits needs scikit-learn: pip install 'ppl-sbl[sklearn]'.") from err
    d = load_digits()
    X, labels = d.data / 16.0, d.target.astype(np.int64)
    if n_train is None:
        return Dataset(X, labels, X[:0], labels[:0], "scikit-learn digits, 64 pixels in [0, 1], ten classes")
    n_train = int(n_train)
    if not 10 <= n_train <= len(labels) - 10:
        raise ValueError(f"`n_train` must be between 10 and {len(labels) - 10}; got {n_train}.")
    from sklearn.model_selection import train_test_split

    train, test = train_test_split(np.arange(len(labels)), train_size=n_train, stratify=labels, random_state=seed)
    return Dataset(X[train], labels[train], X[test], labels[test],
                   "scikit-learn digits, 64 pixels in [0, 1], ten classes")


def one_of_k(labels, classes=None):
    """Labels coded 1-of-K in {-1, 1} (Sauer's thesis, section 5.3): (N, K), one column per class."""
    labels = np.asarray(labels)
    classes = np.unique(labels) if classes is None else np.asarray(classes)
    return np.where(labels[:, None] == classes[None, :], 1.0, -1.0)


def digits_table(n_train=200, *, positive=(0, 1, 2, 3, 4), seed=0) -> Dataset:
    """scikit-learn's bundled handwritten digits (1797 images of 8 x 8 pixels, UCI) as tables.

    ``X`` has shape (N, 8, 8) (rows x columns of pixels), intensities standardised pixel by
    pixel with the training set (pixels constant on the training set become 0). Labels are 1
    for a digit in ``positive`` (default: 0-4 against 5-9, a balanced two-class problem with
    enough images for training sets up to 500), else 0. ``n_train`` images are drawn at random
    (stratified by label) from ``seed``; the rest form the test set.
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:  # pragma: no cover - depends on the extras
        raise ImportError("digits_table needs scikit-learn: pip install 'ppl-sbl[sklearn]'.") from err
    digits = load_digits()
    images, labels = digits.images.astype(float), np.isin(digits.target, positive).astype(float)
    n_train = int(n_train)
    if not 2 <= n_train < len(labels) - 1:
        raise ValueError(f"`n_train` must be between 2 and {len(labels) - 2}; got {n_train}.")
    rng = np.random.default_rng(seed)
    train = []
    for value in (0.0, 1.0):
        idx = rng.permutation(np.flatnonzero(labels == value))
        share = int(round(n_train * len(idx) / len(labels)))
        train.append(idx[: max(1, share)])
    train = np.concatenate(train)
    test = np.setdiff1d(np.arange(len(labels)), train)
    X, X_test = standardize(images[train].reshape(len(train), -1), images[test].reshape(len(test), -1))
    return Dataset(X.reshape(-1, 8, 8), labels[train], X_test.reshape(-1, 8, 8), labels[test],
                   f"scikit-learn digits as 8 x 8 pixel tables, {positive} against the rest")


def _read_ripley(name):
    text = resources.files("ppl_sbl").joinpath("data", name).read_text()
    values = np.loadtxt(text.splitlines()[1:])
    return values[:, :2], values[:, 2]


def ripley() -> Dataset:
    """Ripley's synthetic two-class problem: 250 training and 1000 test points, labels 0/1."""
    X, t = _read_ripley("ripley_synth_train.txt")
    X_test, t_test = _read_ripley("ripley_synth_test.txt")
    return Dataset(X, t, X_test, t_test, "Ripley (1996) synthetic two-class data")


def ripley_pooled():
    """Ripley's 250 training and 1000 test points pooled: (X (1250, 2), t (1250,)), labels 0/1
    (the robust RVM paper splits all of them 60/40 at random)."""
    d = ripley()
    return np.vstack([d.X_train, d.X_test]), np.concatenate([d.t_train, d.t_test])


def biopsy_data():
    """The original Wisconsin breast cancer data (MASS ``biopsy``): the 683 rows without missing
    values, X (683, 9) the nine cytological scores (integers 1-10), t = 1 for malignant (239)
    and 0 for benign (444). Not scikit-learn's 569-row diagnostic set."""
    import csv

    text = resources.files("ppl_sbl").joinpath("data", "biopsy.csv").read_text()
    rows = list(csv.DictReader(text.splitlines()))
    keep = [r for r in rows if all(r[f"V{i}"] != "" for i in range(1, 10))]
    X = np.array([[float(r[f"V{i}"]) for i in range(1, 10)] for r in keep])
    t = np.array([1.0 if r["class"] == "malignant" else 0.0 for r in keep])
    return X, t


def flip_labels(t, share, rng):
    """A copy of the 0/1 labels ``t`` with round(share * N) of them, chosen at random, flipped;
    returns (flipped labels, indices flipped)."""
    if not 0.0 <= float(share) <= 1.0:
        raise ValueError(f"`label_noise` must be a share in [0, 1]; got {share}.")
    t = np.asarray(t, dtype=float).copy()
    idx = rng.choice(len(t), int(round(float(share) * len(t))), replace=False)
    t[idx] = 1.0 - t[idx]
    return t, np.sort(idx)


def split_with_label_noise(X, t, *, test_fraction=0.4, label_noise=0.0, normalize=True, seed=0, name="data",
                           return_flipped=False):
    """The robust RVM paper's protocol (section 4.2): a random split into training (60%) and
    test (40%) sets, then ``label_noise`` of the training labels flipped at random (the test
    labels stay clean). ``normalize`` standardises every input with the training mean and
    standard deviation. With ``return_flipped`` also the indices (into the training set) of
    the flipped labels: ``(dataset, flipped)``."""
    X, t = np.asarray(X, dtype=float), np.asarray(t, dtype=float)
    if not 0.0 < float(test_fraction) < 1.0:
        raise ValueError(f"`test_fraction` must lie in (0, 1); got {test_fraction}.")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(t))
    n_test = int(round(float(test_fraction) * len(t)))
    test, train = order[:n_test], order[n_test:]
    t_train, flipped = flip_labels(t[train], label_noise, rng)
    X_train, X_test = X[train], X[test]
    if normalize:
        X_train, X_test = standardize(X_train, X_test)
    data = Dataset(X_train, t_train, X_test, t[test],
                   f"{name}: random {1 - test_fraction:.0%}/{test_fraction:.0%} split (seed {seed}), "
                   f"{len(flipped)} training labels flipped")
    return (data, flipped) if return_flipped else data


def biopsy(*, test_fraction=0.4, label_noise=0.0, normalize=True, seed=0) -> Dataset:
    """:func:`biopsy_data` split as in the robust RVM paper (:func:`split_with_label_noise`)."""
    X, t = biopsy_data()
    return split_with_label_noise(X, t, test_fraction=test_fraction, label_noise=label_noise,
                                  normalize=normalize, seed=seed, name="Wisconsin breast cancer (MASS biopsy)")
