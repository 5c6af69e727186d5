"""ppl_sbl.linalg against NumPy and SciPy: inverses, log-determinants, Cholesky factors and
triangular inverses of random symmetric positive definite stacks, at sizes on both sides of every
block size (64 for the triangular inverses, 128 for the blocked Cholesky factorisation) and of the
routes' crossover (DEVICE_FACTOR_MAX_N), in float64 to within a few hundred rounding errors."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from ppl_sbl import linalg

RTOL = 1e-10  # float64 results of well-conditioned problems: a wrong formula misses this by far


def spd(rng, n, scale=1.0):
    """G G^T / n + I, times ``scale``: eigenvalues in about [1, 5] (condition number about 5)."""
    G = rng.normal(size=(n, n))
    return scale * (G @ G.T / n + np.eye(n))


def lower_factor(rng, n):
    return scipy.linalg.cholesky(spd(rng, n), lower=True)


def triangular_reference(L):
    """L^-1 by SciPy's triangular solve against the identity."""
    return scipy.linalg.solve_triangular(L, np.eye(L.shape[0]), lower=True)


def b_matrix(K, lam):
    """B = I + A K A, A = diag(lam)^1/2."""
    a = np.sqrt(lam)
    return np.eye(len(lam)) + a[:, None] * K * a[None, :]


def factor_problem(N, Q, seed, spread=1.0):
    """A well-conditioned K (N, N), precisions lam (Q, N) in [e^-spread, e^spread] and directions r
    (Q, N)."""
    rng = np.random.default_rng(seed)
    return spd(rng, N), np.exp(rng.uniform(-spread, spread, size=(Q, N))), rng.normal(size=(Q, N))


def assert_factor_matches_numpy(dinv, logdet, sol, K, lam, r, dims, rtol=RTOL):
    """diag(B_q^-1), log|B_q| and (I + Lambda_q K)^-1 r_q against np.linalg.inv, slogdet and solve."""
    N = K.shape[0]
    for q in dims:
        B = b_matrix(K, lam[q])
        np.testing.assert_allclose(dinv[q], np.diag(np.linalg.inv(B)), rtol=rtol)
        sign, ref = np.linalg.slogdet(B)
        assert sign == 1.0 and logdet[q] == pytest.approx(ref, rel=rtol, abs=rtol)
        if sol is not None:
            np.testing.assert_allclose(sol[q], np.linalg.solve(np.eye(N) + lam[q][:, None] * K, r[q]), rtol=rtol,
                                       atol=rtol * np.abs(r[q]).max())


# ----------------------------------------------------------------------------------------------
# use_host_lapack
# ----------------------------------------------------------------------------------------------
@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the host callback is used on CPU only")
def test_use_host_lapack_needs_two_cores(monkeypatch):
    import os

    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("needs os.sched_getaffinity (Linux)")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert linalg.use_host_lapack() is False
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert linalg.use_host_lapack() is True


# ----------------------------------------------------------------------------------------------
# B^-1 and log|B|
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("N", [1, 7, 60])
def test_host_inverse_and_logdet_against_numpy(N):
    """The upper triangle of each B^-1 against np.linalg.inv, log|B| against slogdet, for a stack
    (2, 3) of precision vectors; the strict lower triangle holds B; float64 out."""
    rng = np.random.default_rng(N)
    K = spd(rng, N)
    lam = np.exp(rng.uniform(-2, 2, size=(2, 3, N)))
    inv, logdet = linalg.host_inverse_and_logdet(K, lam)
    assert inv.shape == (2, 3, N, N) and logdet.shape == (2, 3)
    assert inv.dtype == np.float64 and logdet.dtype == np.float64
    upper, strict_lower = np.triu_indices(N), np.tril_indices(N, -1)
    for i in np.ndindex(2, 3):
        B = b_matrix(K, lam[i])
        np.testing.assert_allclose(inv[i][upper], np.linalg.inv(B)[upper], rtol=RTOL, atol=RTOL * 1e-2)
        np.testing.assert_allclose(inv[i][strict_lower], B[strict_lower], rtol=1e-15)
        assert logdet[i] == pytest.approx(np.linalg.slogdet(B)[1], rel=RTOL, abs=1e-14)


def test_host_inverse_and_logdet_broadcasts_a_stack_of_k_and_marks_failures():
    """K (2, 1, N, N) against lam (3, N): each pair; an indefinite B gives NaN for it only."""
    rng = np.random.default_rng(2)
    N = 9
    Ks = np.stack([spd(rng, N), spd(rng, N) - 3.0 * np.eye(N)])[:, None]  # the second is indefinite
    lam = np.exp(rng.uniform(-3, -1, size=(3, N)))  # lam < 1 / 2: B positive definite for both K
    lam[2] = 10.0  # B = I + 10 A (K - 3 I) A is indefinite for the second K
    inv, logdet = linalg.host_inverse_and_logdet(Ks, lam)
    assert inv.shape == (2, 3, N, N)
    upper = np.triu_indices(N)
    for k in range(2):
        for q in range(3):
            B = b_matrix(Ks[k, 0], lam[q])
            if np.linalg.eigvalsh(B).min() <= 0:
                assert (k, q) == (1, 2) and np.isnan(logdet[k, q]) and np.all(np.isnan(inv[k, q]))
                continue
            np.testing.assert_allclose(inv[k, q][upper], np.linalg.inv(B)[upper], rtol=RTOL, atol=1e-12)
            assert logdet[k, q] == pytest.approx(np.linalg.slogdet(B)[1], rel=RTOL)
    assert np.isnan(logdet[1, 2])


@pytest.mark.parametrize("host", [True, False])
def test_inverse_and_logdet_both_routes_under_jit_and_vmap(monkeypatch, host):
    """Through the host callback (its upper triangle) and through JAX's Cholesky (all of B^-1),
    jitted and vmapped over the precision vectors, against np.linalg.inv and slogdet."""
    monkeypatch.setattr(linalg, "use_host_lapack", lambda: host)
    rng = np.random.default_rng(5)
    N, Q = 40, 4
    K = spd(rng, N)
    lam = np.exp(rng.uniform(-3, 3, size=(Q, N)))
    direct = linalg.inverse_and_logdet(jnp.asarray(K), jnp.asarray(lam))
    mapped = jax.jit(jax.vmap(linalg.inverse_and_logdet, in_axes=(None, 0)))(jnp.asarray(K), jnp.asarray(lam))
    rows = np.triu_indices(N) if host else np.indices((N, N)).reshape(2, -1)
    for inv, logdet in (direct, mapped):
        inv, logdet = np.asarray(inv), np.asarray(logdet)
        assert inv.dtype == np.float64
        for q in range(Q):
            B = b_matrix(K, lam[q])
            np.testing.assert_allclose(inv[q][tuple(rows)], np.linalg.inv(B)[tuple(rows)], rtol=RTOL, atol=1e-13)
            assert logdet[q] == pytest.approx(np.linalg.slogdet(B)[1], rel=RTOL)


# ----------------------------------------------------------------------------------------------
# The host route
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("N", [1, 7, 64, 65, 131, 300])
def test_triangular_inverse_against_scipy(N):
    """In place (the same array back) against SciPy's triangular solve and numpy's inverse, from
    one trtri block (N <= 64) to three levels of recursion, odd sizes included; the strict upper
    triangle stays zero."""
    L = lower_factor(np.random.default_rng(N), N)
    work = np.array(L, order="F")
    inv = linalg.triangular_inverse(work)
    assert inv is work
    ref = triangular_reference(L)
    np.testing.assert_allclose(inv, ref, rtol=0, atol=1e-12 * np.abs(ref).max())
    np.testing.assert_allclose(inv, np.linalg.inv(L), rtol=0, atol=1e-12 * np.abs(ref).max())
    assert np.all(np.triu(inv, 1) == 0.0)


@pytest.mark.parametrize("base", [1, 2, 5])
def test_triangular_inverse_with_small_blocks(base):
    """The recursion down to blocks of 1, 2 or 5 rows gives the same inverse."""
    L = lower_factor(np.random.default_rng(base), 23)
    inv = linalg.triangular_inverse(np.array(L, order="F"), base=base)
    ref = triangular_reference(L)
    np.testing.assert_allclose(inv, ref, rtol=0, atol=1e-12 * np.abs(ref).max())


@pytest.mark.parametrize("N", [1, 30, 64, 65, 131])
def test_host_factor_against_numpy(N):
    """diag(B_q^-1), log|B_q| and (I + Lambda_q K)^-1 r_q against numpy (the triangular inverse
    inside recursing above N = 64); without ``r`` no solves."""
    Q = 4
    K, lam, r = factor_problem(N, Q, seed=3)
    dinv, logdet, sol = linalg.host_factor(K, lam, r)
    assert dinv.shape == (Q, N) and logdet.shape == (Q,) and sol.shape == (Q, N) and dinv.dtype == np.float64
    assert_factor_matches_numpy(dinv, logdet, sol, K, lam, r, range(Q))
    dinv2, logdet2, none = linalg.host_factor(K, lam)
    assert none is None
    np.testing.assert_array_equal(dinv2, dinv)
    np.testing.assert_array_equal(logdet2, logdet)


def test_host_factor_with_precisions_over_eight_orders_of_magnitude():
    """lam_qn from e^-9 to e^9 (B_q badly scaled, C_q = K + Lambda_q^-1 too): still within a few
    hundred rounding errors of numpy's inverse, slogdet and solve of B_q itself."""
    rng = np.random.default_rng(4)
    N, Q = 50, 3
    X = rng.normal(size=(N, 3))
    K = np.exp(-0.5 * np.sum((X[:, None] - X[None]) ** 2, -1)) + 1e-6 * np.eye(N)
    lam, r = np.exp(rng.uniform(-9, 9, size=(Q, N))), rng.normal(size=(Q, N))
    dinv, logdet, sol = linalg.host_factor(K, lam, r)
    for q in range(Q):
        B = b_matrix(K, lam[q])
        np.testing.assert_allclose(dinv[q], np.diag(np.linalg.inv(B)), rtol=1e-9)
        assert logdet[q] == pytest.approx(np.linalg.slogdet(B)[1], rel=1e-10)
        np.testing.assert_allclose(sol[q], np.linalg.solve(np.eye(N) + lam[q][:, None] * K, r[q]), rtol=1e-7,
                                   atol=1e-9 * np.abs(r[q]).max())


@pytest.mark.parametrize("chunk_dims", [1, 3, 5])
def test_host_factor_chunks_and_failed_factorisations(chunk_dims):
    """In chunks of 1, 3 (the last one shorter) and 5 matrices: the same results; a B_q that is
    not positive definite gives NaN in its row only."""
    rng = np.random.default_rng(5)
    N, Q = 40, 5
    K = spd(rng, N) - 2.0 * np.eye(N)  # indefinite: B_q is positive definite for small lam only
    lam = np.exp(rng.uniform(-8, np.log(0.2), size=(Q, N)))
    lam[2] = 50.0  # B_2 = I + 50 (K) with K indefinite: potrf fails
    r = rng.normal(size=(Q, N))
    dinv, logdet, sol = linalg.host_factor(K, lam, r, chunk_elements=chunk_dims * N * N)
    assert np.all(np.isnan(dinv[2])) and np.isnan(logdet[2]) and np.all(np.isnan(sol[2]))
    assert_factor_matches_numpy(dinv, logdet, sol, K, lam, r, (0, 1, 3, 4))


# ----------------------------------------------------------------------------------------------
# The compiled route
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("N", [1, 7, 64, 65, 128, 131, 257])
def test_stacked_triangular_inverse_against_scipy(N):
    """Each of a stack of three against SciPy's triangular solve, from one batched solve (N <= 64)
    to three levels of blocking, odd sizes (a padded block) included."""
    rng = np.random.default_rng(N)
    Ls = np.stack([lower_factor(rng, N) for _ in range(3)])
    inv = np.asarray(linalg.stacked_triangular_inverse(jnp.asarray(Ls)))
    assert inv.dtype == np.float64
    for L, W in zip(Ls, inv):
        ref = triangular_reference(L)
        np.testing.assert_allclose(W, ref, rtol=0, atol=1e-12 * np.abs(ref).max())
        assert np.all(np.triu(W, 1) == 0.0)


@pytest.mark.parametrize("N", [1, 50, 128, 129, 300])
def test_stacked_cholesky_inverse_against_scipy(N):
    """(L^-1, sum log L_ii) of C = L L^T against SciPy's Cholesky factor, its triangular inverse and
    numpy's slogdet (one block up to N = 128, then one and two levels of Schur complements, odd
    halves included), for matrices of scale 1, 1e-4 and 1e4; a matrix whose last Schur complement is
    not positive definite gives NaN in that matrix only."""
    rng = np.random.default_rng(N)
    Cs = [spd(rng, N, scale) for scale in (1.0, 1e-4, 1e4)]
    bad = Cs[0].copy()
    bad[N - 1, N - 1] = -1.0  # the last pivot fails
    W, log_diag = (np.asarray(x) for x in linalg.stacked_cholesky_inverse(jnp.asarray(np.stack(Cs + [bad]))))
    for C, w, ld in zip(Cs, W, log_diag):
        L = scipy.linalg.cholesky(C, lower=True)
        ref = triangular_reference(L)
        np.testing.assert_allclose(w, ref, rtol=0, atol=1e-12 * np.abs(ref).max())
        assert np.all(np.triu(w, 1) == 0.0)
        assert ld == pytest.approx(np.sum(np.log(np.diag(L))), rel=RTOL, abs=1e-12)
        assert 2.0 * ld == pytest.approx(np.linalg.slogdet(C)[1], rel=RTOL, abs=1e-12)
        np.testing.assert_allclose(w.T @ w, np.linalg.inv(C), rtol=0, atol=1e-11 * np.abs(np.linalg.inv(C)).max())
    assert np.isnan(log_diag[-1]) and np.isnan(W[-1][N - 1]).any()
    assert np.all(np.isfinite(W[:-1])) and np.all(np.isfinite(log_diag[:-1]))


@pytest.mark.parametrize("N", [1, 30, 128, 129, 300])
def test_device_factor_against_numpy_and_the_host_route(N):
    """diag(B_q^-1), log|B_q| and the solves against numpy and against :func:`host_factor`; zero
    directions give zero solves."""
    Q = 4
    K, lam, r = factor_problem(N, Q, seed=6)
    dinv, logdet, sol = (np.asarray(x) for x in linalg.device_factor(jnp.asarray(K), lam, r))
    assert dinv.dtype == np.float64
    assert_factor_matches_numpy(dinv, logdet, sol, K, lam, r, range(Q))
    host = linalg.host_factor(K, lam, r)
    for a, b in zip((dinv, logdet, sol), host):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=RTOL * np.abs(b).max())
    zero = np.asarray(linalg.device_factor(jnp.asarray(K), lam, np.zeros_like(r))[2])
    assert np.all(zero == 0.0)


def test_device_factor_marks_failed_factorisations():
    """An indefinite C_q = K + Lambda_q^-1 gives NaN in its row only; the others equal the host
    route's."""
    rng = np.random.default_rng(7)
    N, Q = 140, 4
    K = spd(rng, N) - 2.0 * np.eye(N)
    lam = np.full((Q, N), 0.2)
    lam[1] = 50.0
    r = rng.normal(size=(Q, N))
    dinv, logdet, sol = (np.asarray(x) for x in linalg.device_factor(jnp.asarray(K), lam, r))
    host = linalg.host_factor(K, lam, r)
    assert np.all(np.isnan(dinv[1])) and np.isnan(logdet[1]) and np.all(np.isnan(sol[1]))
    assert np.all(np.isnan(host[0][1]))
    for q in (0, 2, 3):
        np.testing.assert_allclose(dinv[q], host[0][q], rtol=RTOL)
        assert logdet[q] == pytest.approx(host[1][q], rel=RTOL)
        np.testing.assert_allclose(sol[q], host[2][q], rtol=RTOL, atol=RTOL * np.abs(host[2][q]).max())


@pytest.mark.parametrize("offset", [0, 1])
def test_both_routes_at_the_crossover(offset):
    """At N = DEVICE_FACTOR_MAX_N (the largest N callers send to the compiled route) and one above:
    both routes against numpy."""
    N, Q = linalg.DEVICE_FACTOR_MAX_N + offset, 2
    K, lam, r = factor_problem(N, Q, seed=8)
    device = [np.asarray(x) for x in linalg.device_factor(jnp.asarray(K), lam, r)]
    host = linalg.host_factor(K, lam, r)
    assert_factor_matches_numpy(*device, K, lam, r, range(Q))
    assert_factor_matches_numpy(*host, K, lam, r, range(Q))
