"""Built-in data sets: the recipes hold, checked by independent computations."""
import numpy as np
import pytest
from scipy.stats import multivariate_normal

from ppl_sbl import datasets


def _bayes_error_by_quadrature(centres, step=0.02):
    """1/2 int min(p0, p1) dx on a grid: the Bayes error of the two equal-weight mixtures."""
    lo, hi = centres.min() - 2.5, centres.max() + 2.5
    g = np.arange(lo, hi, step)
    xx = np.stack(np.meshgrid(g, g), axis=-1)
    dens = [np.mean([multivariate_normal(m, np.eye(2) / 5).pdf(xx) for m in c], axis=0) for c in centres]
    return 0.5 * np.sum(np.minimum(*dens)) * step**2


@pytest.mark.parametrize("seed", [0, 1])
def test_mixture_recipe_and_bayes_error(seed):
    d = datasets.mixture(noise_features=3, seed=seed, normalize=False)
    assert d.X_train.shape == (200, 5) and d.X_test.shape == (5000, 5)
    assert d.t_train.mean() == 0.5 and set(np.unique(d.t_test)) == {0.0, 1.0}
    centres = datasets.mixture_centres(seed)
    err = _bayes_error_by_quadrature(centres)
    assert 0.185 <= err <= 0.215, err  # the recipe's regime, within the Monte Carlo selection error
    # points lie around their class's centres: the nearest centre is of the right class mostly
    d2 = ((d.X_test[:, None, None, :2] - centres[None]) ** 2).sum(-1).min(-1)
    assert np.mean(np.argmin(d2, axis=1) == d.t_test) > 0.7
    # the noise columns are standard normal and carry no label information
    assert abs(d.X_test[:, 2:].std() - 1) < 0.05 and abs(np.corrcoef(d.X_test[:, 2], d.t_test)[0, 1]) < 0.05


def test_digits_table_shapes_and_split():
    d = datasets.digits_table(100, seed=1)
    assert d.X_train.shape == (100, 8, 8) and d.X_train.shape[0] + d.X_test.shape[0] == 1797
    assert abs(d.t_train.mean() - 0.5) < 0.05 and set(np.unique(d.t_train)) == {0.0, 1.0}
    flat = d.X_train.reshape(100, -1)
    np.testing.assert_allclose(flat.mean(0), 0.0, atol=1e-12)
    with pytest.raises(ValueError, match="n_train"):
        datasets.digits_table(5000)
