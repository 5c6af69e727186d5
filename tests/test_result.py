"""The FitResult protocol: the three kinds of result (closed-form CAVI, sequential type-II, the
Bayesian GPLVM) offer the same members, and the export and comparison layers read them alike."""
import math

import jax
import numpy as np
import pytest

import ppl_sbl
from ppl_sbl import basis, datasets
from ppl_sbl.models import gplvm, rvm
from ppl_sbl.models import sequential_sbl as ss
from ppl_sbl.result import FitResult


@pytest.fixture(scope="module")
def results():
    d = datasets.sinc(40, noise=0.1, seed=0)
    Phi, t = basis.rbf(d.X_train, delta=1.0, bias=True), d.t_train
    Y = np.random.default_rng(0).standard_normal((30, 4))
    Z = np.tanh(Y[:, :2]) + 0.05 * np.random.default_rng(1).standard_normal((30, 2))
    results = {
        "cavi": ppl_sbl.CAVI(rvm.regression, progress_bar=False, schedule="sweep").run(Phi, t),
        "sequential": ss.fit(Phi, t, noise_var=0.01),
    }
    with pytest.warns(ppl_sbl.ConvergenceWarning):  # a short fit is enough to read its members
        results["gplvm"] = gplvm.fit(Y, Z, latent_dim=2, num_inducing=5, max_steps=20, progress_bar=False)
    # what each program conditions on: its observed site and the values given to the fit
    expected = {"cavi": ("t", t), "sequential": ("y", t), "gplvm": ("Z", Z - Z.mean(0))}
    return results, expected


@pytest.mark.parametrize("kind", ["cavi", "sequential", "gplvm"])
def test_each_result_is_a_fit_result(results, kind):
    res, (site, value) = results[0][kind], results[1][kind]
    assert isinstance(res, FitResult)
    assert list(res.observed) == [site]
    np.testing.assert_allclose(res.observed[site], value, rtol=0, atol=1e-12)
    draws = res.sample(jax.random.PRNGKey(0), 7)
    loglik = res.log_likelihood(draws)
    assert set(loglik) == {site} and loglik[site].shape[0] == 7 and np.all(np.isfinite(loglik[site]))
    assert np.isfinite(res.elbo) and res.elbo == pytest.approx(float(np.asarray(res.elbo_trace)[-1]))
    assert isinstance(res.inference, str) and res.bound == "none"
    # the ELBO's parts: log_lik first, and they sum to the objective
    parts = res.elbo_parts()
    assert list(parts)[0] == "log_lik" and all(k.startswith(("-kl_", "log_norm_")) for k in list(parts)[1:])
    assert math.fsum(parts.values()) == pytest.approx(res.elbo, rel=1e-10)


def test_compare_ranks_every_kind_of_result(results):
    results = results[0]
    with pytest.warns(ppl_sbl.ComparisonWarning, match="different observed data"):  # t, y and Z
        table = ppl_sbl.compare(results)
    assert set(table.index) == set(results)
    for name, res in results.items():
        assert table.loc[name, "elbo"] == pytest.approx(res.elbo)
        assert table.loc[name, "n_relevant"] == int(np.sum(res.relevant))
        assert sum(res.elbo_parts().values()) == pytest.approx(res.elbo, rel=1e-10)
    with pytest.raises(ValueError, match="same observations"):  # the GPLVM's Z against t
        ppl_sbl.compare(results, by="loo", num_samples=200)
    same_data = {k: results[k] for k in ("cavi", "sequential")}  # both fitted to t (sites t and y)
    by_loo = ppl_sbl.compare(same_data, by="loo", num_samples=200)
    assert set(by_loo.index) == set(same_data) and set(by_loo["loo"]) == {"exact"}
    assert by_loo["weight"].sum() == pytest.approx(1.0)


@pytest.mark.parametrize("kind", ["cavi", "sequential"])
def test_inference_data_reads_the_protocol(results, kind):
    res = results[0][kind]
    idata = ppl_sbl.to_inference_data(res, num_samples=20)
    (site, value), = res.observed.items()
    np.testing.assert_array_equal(idata.observed_data[site].values, value)
    assert idata.log_likelihood[site].shape[:2] == (1, 20)
    assert idata.attrs["inference"] == res.inference
    assert idata.sample_stats["elbo_trace"].shape[-1] == len(np.asarray(res.elbo_trace))
