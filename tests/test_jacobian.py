"""The structured forward-mode Jacobian (ppl_sbl.derived.jacobian) against jax.jacfwd."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_sbl.derived.jacobian import jacobian

jax.config.update("jax_enable_x64", True)

R = np.random.default_rng(3)
PHI = R.standard_normal((7, 5))
TABLE = R.standard_normal((7, 3, 2))
GROUPS = np.array([0, 0, 1, 1, 2])
MASK = np.array([True, False, True, True, False, True, False])


def mean_of_weights(x):  # Phi @ w, the weights a slice of x
    return PHI @ x[:5] - x[5]


def weights_on_the_left(x):
    return {"a": x[:5] @ PHI.T, "b": x[2:4] - 1.0}


def table(x):  # a contraction over two axes after a reshape
    return jnp.einsum("nij,ij->n", TABLE, x[:6].reshape(3, 2)) + jnp.sum(x[6:8])


def gamma_precisions(u):  # a site's log precision: logs of products and sums of exponentials
    alpha, gamma, lam = jnp.exp(u[:5]), jnp.exp(u[5]), jnp.exp(u[6:13])
    return [-2.0 * jnp.log(jax.lax.rsqrt(alpha[GROUPS])), jnp.log(gamma * lam), jnp.log(alpha[:3] + alpha[1:4])]


def masked_and_broadcast(x):
    w = jnp.where(MASK[:5], x[:5], 0.0)
    z = jnp.concatenate([x[:2], jnp.zeros(3), 2.0 * x[3:5]])
    return jnp.where(MASK, PHI @ w, jnp.sum(z) / 3.0) + jnp.broadcast_to(x[7], (7,)) * x[6]


def nonlinear(x):
    y = jax.nn.softplus(x[:4]) * jnp.tanh(x[4:8]) / (1.0 + x[:4] ** 2)
    return jnp.sum(jnp.outer(y, x[:3]), 0), jnp.sort(x)[::-1], jnp.cumsum(x[2:6])


def inner_jit(x):
    f = jax.jit(lambda v, P: P @ v[::-1])
    return f(x[1:6], PHI).reshape(7, 1).T


@pytest.mark.parametrize("fn,n", [(mean_of_weights, 6), (weights_on_the_left, 5), (table, 8), (gamma_precisions, 13),
                                  (masked_and_broadcast, 8), (nonlinear, 8), (inner_jit, 6)])
@pytest.mark.parametrize("under_jit", [False, True])
def test_jacobian_equals_jacfwd(fn, n, under_jit):
    x = R.standard_normal(n)
    run = jax.jit(lambda v: jacobian(fn, v)) if under_jit else (lambda v: jacobian(fn, v))
    value, J = run(x)
    expected = jax.jacfwd(fn)(x)
    assert jax.tree.structure(J) == jax.tree.structure(expected)
    for got, want in zip(jax.tree.leaves(J), jax.tree.leaves(expected)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    for got, want in zip(jax.tree.leaves(value), jax.tree.leaves(fn(x))):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_a_design_is_read_without_multiplying_by_the_identity():
    """Phi @ w becomes Phi scattered into the block: no (N, M) x (M, M) product in the program."""
    Phi = R.standard_normal((50, 40))
    text = jax.jit(lambda v: jacobian(lambda x: Phi @ x, v)[1]).lower(np.zeros(40)).as_text()
    assert "dot_general" not in text and "dot(" not in text
    np.testing.assert_array_equal(jax.jit(lambda v: jacobian(lambda x: Phi @ x, v)[1])(np.zeros(40)), Phi)


@pytest.mark.parametrize("fn,n,picks", [(gamma_precisions, 13, True), (masked_and_broadcast, 8, False),
                                        (weights_on_the_left, 5, True)])
def test_structured_leaves_hold_the_same_jacobian(fn, n, picks):
    """The Picks form (host helpers matvec, to_dense, canonical) against the dense Jacobian."""
    from ppl_sbl.derived.jacobian import Picks, canonical, matvec, to_dense

    x, v = R.standard_normal(n), R.standard_normal(n)
    _, J = jax.jit(lambda a: jacobian(fn, a, structured=True))(x)
    dense = jax.jacfwd(fn)(x)
    kinds = set()
    for got, want in zip(jax.tree.leaves(J, is_leaf=lambda a: isinstance(a, Picks)), jax.tree.leaves(dense)):
        got = jax.tree.map(np.asarray, got)
        kinds.add(type(got).__name__)
        np.testing.assert_allclose(to_dense(got, n), want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(matvec(got, v), np.reshape(want, (-1, n)) @ v, rtol=1e-12, atol=1e-12)
        if isinstance(got, Picks):
            c = canonical(got)
            np.testing.assert_allclose(to_dense(Picks(np.where(c.idx < 0, 0, c.idx), c.coef), n).reshape(-1, n),
                                       np.reshape(want, (-1, n)), rtol=1e-12, atol=1e-12)
            live = c.idx >= 0
            assert np.all(np.diff(np.where(live, c.idx, n), axis=1) > 0)  # sorted, distinct, live terms first
    assert ("Picks" in kinds) == picks
