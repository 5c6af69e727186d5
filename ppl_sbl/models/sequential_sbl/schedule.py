"""The fast marginal likelihood maximisation (Tipping & Faul 2003): :func:`fit` from the model
with no function, :func:`resume` from a state, and the :class:`Schedule` of moves, noise
re-estimates, exact refreshes and rollbacks that :func:`resume` runs on a
:class:`.workspace.Workspace`.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Optional

import numpy as np

from ppl_sbl import basis as _basis
from ppl_sbl.validation import check_positive, warn_unconverged

from .design import Design
from .program import LOG_2PI
from .state import SBLState
from .workspace import Workspace

__all__ = ["LOG_ALPHA_TOL", "LOG_NOISE_TOL", "MAX_ALIGNMENT", "JOINT_MAX_ACTIVE", "significant", "Schedule", "fit",
           "resume"]

LOG_ALPHA_TOL = 1e-3  # the practical rule: smallest change of ln alpha_m a re-estimate makes
LOG_NOISE_TOL = 1e-6  # ... and of ln sigma^2 that keeps the fit going
MAX_ALIGNMENT = 1.0 - 1e-3  # ... and the largest |cosine| of a function added with an active one
# the joint Newton step (``Schedule.joint_move``) is tried with at most this many active functions:
# it factorises their dense (K + 1) x (K + 1) Hessian, O(K^3), where a single move costs O(M K)
JOINT_MAX_ACTIVE = 512


def significant(gain, new, alpha, active):
    """The gains with every re-estimate that changes ln alpha_m by less than ``LOG_ALPHA_TOL``
    set to -inf (the practical rule of :func:`resume`)."""
    if len(active):
        old, target = alpha[active], new[active]
        with np.errstate(divide="ignore", invalid="ignore"):
            small = np.isfinite(target) & (np.abs(np.log(target / old)) < LOG_ALPHA_TOL)
        gain = gain.copy()
        gain[active[small]] = -np.inf
    return gain


def _bar(progress_bar, total):
    if not progress_bar:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="sequential SBL", leave=False)


def _check_samples(D, y, rows):
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(y)):
        raise ValueError("`y` contains NaN or infinite values (for an image: pass only the observed pixels, "
                         "with their indices as `rows`).")
    if rows is None:
        if D.shape[0] != len(y):
            raise ValueError(f"`D` has {D.shape[0]} rows but `y` has {len(y)} entries; pass one row per sample "
                             "(or a dictionary over all points and the sampled points as `rows`).")
        rows = np.arange(len(y))
    else:
        rows = np.asarray(rows)
        if rows.dtype.kind not in "iu" or rows.ndim != 1 or len(rows) != len(y):
            raise ValueError(f"`rows` must be {len(y)} integer point indices, one per entry of `y`.")
        if len(rows) and (rows.min() < 0 or rows.max() >= D.shape[0]):
            raise ValueError(f"`rows` must index the dictionary's {D.shape[0]} points.")
    return y, rows.astype(np.int64)


def _initial_state(D, y, rows, noise_var):
    design = Design(D, rows, np.zeros((0, D.shape[1])))
    beta = 1.0 / noise_var
    Dty = design.rmatvec(y)
    norms = design.sq_norms()
    yty = float(y @ y)
    N = len(y)
    L = -0.5 * (N * LOG_2PI + N * math.log(noise_var) + beta * yty)
    M = D.shape[1]
    return SBLState(dictionary=D, rows=rows, y=y, extra_rows=np.zeros((0, M)), noise_var=float(noise_var),
                    active=np.zeros(0, np.int64), alpha=np.full(M, np.inf), mu=np.zeros(0), _sigma=np.zeros((0, 0)),
                    S=beta * norms, Q=beta * Dty, log_marginal_likelihood=L, trace=[L], moves=[], Dty=Dty, yty=yty)


def fit(D, y, *, noise_var, update_noise=False, noise_every=1, tol=None, max_steps=100000, rows=None,
        refresh_every=500, align_tol=0.0, max_alignment=None, progress_bar=None, compiled=False):
    """Fast marginal likelihood maximisation (Tipping & Faul 2003), a deterministic path.

    Parameters
    ----------
    D : (N, M) array, ``scipy.sparse`` matrix or :class:`ppl_sbl.basis.Dictionary`
        The design matrix; or a dictionary over P points of which ``rows`` were sampled.
    y : (N,)
    noise_var : float
        sigma^2 (the starting value with ``update_noise``).
    update_noise : bool
        Re-estimate sigma^2 after every move (Tipping & Faul's re-estimate), keeping the new value
        only where it does not lower L (otherwise the largest step towards it, by halving, that
        does not).
        This keeps D_a^T D_a (K x K) and costs a Cholesky factorisation (O(K^3)) per move, and
        2K products with the dictionary (O(M K^2) for a dense design matrix, whose D^T D_a the fit
        holds).
    noise_every : int
        With ``update_noise``, re-estimate sigma^2 only after every ``noise_every``-th move (and
        where no other move gains); 1 (default) is the rule above.
    tol : float or None
        ``None`` (default): the practical rule of Tipping's SparseBayes, see :func:`resume`.
        A number: the exact local optimum, stop when the largest gain of a move is at most
        ``tol * max(1, |L|)`` (checked with exact statistics, see ``refresh_every`` of
        :func:`resume`); ``1e-13`` reaches it to rounding.
    rows : (N,) int, optional
        The points of ``D`` at which y was sampled (default: row n of D for sample n).
    refresh_every, align_tol, max_alignment, compiled : see :func:`resume`.

    Returns
    -------
    SBLState
        The start is the model with no function; the first move adds the function with the
        largest (d_m^T y)^2 / ||d_m||^2 (the best single add). Then every step makes the add,
        re-estimate or delete with the largest exact gain in L.
    """
    D = _basis.as_dictionary(D)
    check_positive("noise_var", noise_var)
    y, rows = _check_samples(D, y, rows)
    state = _initial_state(D, y, rows, float(noise_var))
    return resume(state, update_noise=update_noise, noise_every=noise_every, tol=tol, max_steps=max_steps,
                  refresh_every=refresh_every, align_tol=align_tol, max_alignment=max_alignment,
                  progress_bar=progress_bar, compiled=compiled)


def resume(state: SBLState, *, update_noise=False, noise_every=1, tol=None, max_steps=100000, refresh_every=500,
           align_tol=0.0, max_alignment=None, progress_bar=None, compiled=False):
    """Go on maximising L from ``state`` (after :func:`add_sample` or :func:`add_basis`).

    ``tol=None`` (default), the practical rule (Tipping's SparseBayes): a move is *significant*
    when it is an add or a delete that raises L (by more than ``1e-13 * max(1, |L|)``, the
    rounding of the updated statistics), or a re-estimate that raises L and changes ln alpha_m by
    at least ``LOG_ALPHA_TOL`` (1e-3); each step makes the significant move with the largest
    gain. Re-estimates below that change are never made (each would gain of the order of
    (Delta ln alpha)^2 nats). The fit stops ("practical") when no move is significant by exact
    statistics and, with ``update_noise``, the noise re-estimate changes ln sigma^2 by less than
    ``LOG_NOISE_TOL`` (1e-6). ``tol`` a number: the exact local optimum, every move considered,
    stop when the largest gain is at most ``tol * max(1, |L|)`` (the rules below).

    ``noise_every``: with ``update_noise``, re-estimate sigma^2 after every ``noise_every``-th
    move (1, the default, is after every move; each re-estimate costs O(K^3), so larger values
    trade the path for speed, as Tipping's SparseBayes does) and always once more where no move
    gains, continuing if that raises L by more than the tolerance.

    ``refresh_every``: recompute Sigma, mu, S, Q and L exactly from the K x K Gram matrix of the
    active functions after this many moves (at least K, so the O(K^3) refresh never dominates)
    and before declaring convergence; ``None``: never (pure rank-one updates).

    Ill-conditioned dictionaries (overlapping RBFs): the active functions' small factors come from
    Sigma and mu where S and Q cannot give them (see :func:`.gains.small_factors`), and the
    rank-one updates drift (by hundreds of nats between refreshes on the image experiment's RBFs),
    so that moves can be chosen on wrong statistics. Where an exact refresh finds L below the highest L of the
    earlier refreshes by more than the rounding of the two evaluations (eps sum |H^-1| |H|, up
    to 1e-2 nats there), the fit goes back to the state of that refresh and makes as many moves
    again, each on statistics refreshed first (``state.rollbacks`` records it). So L, evaluated
    exactly, never falls.

    ``max_alignment``: no function is added whose |cosine| over the samples with an active
    function exceeds it (SparseBayes's alignment test). ``None`` (default): ``MAX_ALIGNMENT`` =
    1 - 1e-3 with the practical rule, no such guard with ``tol``. A nearly collinear pair of
    functions (RBFs centred a hair apart) can carry a coefficient pair of opposite signs, large
    and ill-determined, whose coordinate moves zig-zag for thousands of steps, each gaining
    little; the guard keeps such pairs out, as SparseBayes does. Pass it with ``tol`` for the
    exact local optimum among the functions the guard allows.

    ``align_tol``: a function out of the model is not added where S_m sigma^2 / ||d_m||^2 <
    align_tol, the share of its norm outside the span of the active functions (in C^-1's metric;
    Tipping's SparseBayes has a pairwise guard of this kind). 0 (default): no such guard. On
    overcomplete, overlapping dictionaries a small value (1e-4) keeps the fit away from nearly
    collinear sets of functions, at a lower L.

    Stopping: when the largest gain is at most ``tol * max(1, |L|)`` ("tolerance"), or when the
    gains are rounding ("rounding"): L recomputed from scratch at an exact refresh makes no
    progress when it lies less than ``tol * max(1, |L|)`` per move made since the previous refresh
    above the highest L of the earlier refreshes (where sigma^2 is tiny the evaluation from
    scratch carries rounding of its own, so that a comparison with the previous refresh alone
    passes on noise), although the moves claimed more. The fit stops after three such refreshes in
    a row where the claimed gains were tiny themselves (below ``max(1e3 tol, 1e-10) * max(1, |L|)``
    per move, the precision float64 and the rank-one updates leave), or after eight in a row
    whatever the claims (statistics that drift on an ill-conditioned dictionary faster than the
    refreshes correct them; where the refreshes do correct them, the exact L rises and the fit goes
    on). This happens where sigma^2 is tiny (the noise re-estimated towards 0 on a dictionary that
    can interpolate the data: L's terms grow as 1 / sigma^2) or the dictionary is ill-conditioned;
    there the tolerance alone would let the fit trade rounding errors for ever.

    ``compiled``: run the steps in one compiled XLA program (:mod:`.compiled`, which holds the
    design over the samples as a dense matrix): the same steps, moves and L to rounding, without
    the Python loop's cost per step, which dominates small fits. The first call at a new shape
    compiles the program (kept in JAX's persistent cache where :func:`ppl_sbl.compilation_cache`
    has switched it on). Where the host
    schedule would go back to an earlier state (``rollbacks``) or meet statistics that are not
    numbers, the fit is run again by the host schedule. ``trace_seconds`` then holds, for each
    entry, the time at which the program call that made it returned.
    """
    if int(noise_every) < 1:
        raise ValueError(f"`noise_every` must be >= 1; got {noise_every!r}.")
    practical = tol is None
    if practical:
        tol = 1e-13  # the floor of a gain that counts, and the rounding rules' scale
    elif not (float(tol) > 0):
        raise ValueError(f"`tol` must be None or > 0; got {tol!r}.")
    start = time.perf_counter()
    if max_alignment is None and practical:
        max_alignment = MAX_ALIGNMENT
    if max_alignment is not None and not 0.0 < float(max_alignment) <= 1.0:
        raise ValueError(f"`max_alignment` must be in (0, 1] or None; got {max_alignment!r}.")
    if compiled:
        done = _compiled(state, update_noise=update_noise, noise_every=int(noise_every), tol=tol, practical=practical,
                         max_steps=max_steps, refresh_every=refresh_every, align_tol=float(align_tol),
                         max_alignment=max_alignment, progress_bar=progress_bar, start=start)
        if done is not None:
            return done
    work = Workspace(state, keep_gram=update_noise)
    work.align_tol = float(align_tol)
    if max_alignment is not None:
        work.init_alignment(max_alignment)
    bar = _bar(progress_bar, max_steps)
    schedule = Schedule(work, tol=tol, practical=practical, update_noise=update_noise,
                        noise_every=int(noise_every), refresh_every=refresh_every, start=start)
    converged, stop_reason = schedule.run(max_steps, bar)
    if bar is not None:
        bar.close()
    if not converged and stop_reason != "ill-conditioned":
        warn_unconverged("the sequential SBL", max_steps, "max_steps")
    return work.state(converged=converged, seconds=time.perf_counter() - start,
                      stop_reason=stop_reason if converged or stop_reason == "ill-conditioned" else "max_steps")


def _compiled(state, *, progress_bar, start, max_steps, **settings):
    """:func:`resume` in the compiled program (:func:`.compiled.run`); None where the host schedule
    must run instead."""
    from . import compiled as C

    if not C.supports(state):
        raise ValueError(f"`compiled=True` forms the design over the samples as a dense matrix, here "
                         f"{C.dense_bytes(state) / 2**20:.0f} MiB, above the limit of "
                         f"{C.MAX_DENSE_BYTES / 2**20:.0f} MiB (compiled.MAX_DENSE_BYTES) for a dictionary "
                         "that is not a dense matrix; fit it with `compiled=False`.")
    bar = _bar(progress_bar, max_steps)
    out = C.run(state, max_steps=int(max_steps), rounding=max(1e3 * settings["tol"], 1e-10), bar=bar, start=start,
                log_alpha_tol=LOG_ALPHA_TOL, log_noise_tol=LOG_NOISE_TOL, joint_max_active=JOINT_MAX_ACTIVE, **settings)
    if bar is not None:
        bar.close()
    if out is None:
        return None
    fields, converged, reason = out
    if not converged:
        warn_unconverged("the sequential SBL", max_steps, "max_steps")
    Sigma = fields.pop("Sigma")
    return state.replace(Sigma=Sigma, converged=converged, stop_reason=reason, seconds=time.perf_counter() - start,
                         **fields)


@dataclasses.dataclass
class Schedule:
    """What :func:`resume` keeps beside the workspace while it runs: when to refresh the
    statistics exactly, when the gains are rounding, and the state to go back to.

    ``work``, ``tol``, ``practical``, ``update_noise``, ``noise_every`` and ``refresh_every`` are
    :func:`resume`'s (``tol`` = 1e-13 under the practical rule); ``start``: the clock of the run.
    """

    work: Workspace
    tol: float
    practical: bool
    update_noise: bool
    noise_every: int
    refresh_every: Optional[int]
    start: float
    # the precision float64 and the rank-one updates leave L, per move (see the stopping rule)
    rounding: float = dataclasses.field(init=False)
    # L where the last noise re-estimate found no value that raises L
    failed_at: Optional[float] = None
    # the step of the last exact refresh; the refresh interval, and whether the updates drift: the first
    # refresh comes early (16 moves) and the interval doubles while the updates do not drift, so that an
    # ill-conditioned dictionary is caught before hundreds of moves on drifted statistics
    last_refresh: int = 0
    interval: int = dataclasses.field(init=False)
    drifting: bool = False
    # L at the last exact refresh, the highest; refresh intervals in a row without exact progress, and
    # those of them whose moves claimed only rounding
    exact_L: Optional[float] = None
    best_L: Optional[float] = None
    stalls: int = 0
    quiet: int = 0
    # rollback: the state at the exact refresh with the highest L, and the step before which every move
    # is made on exact statistics (a refresh before each) after the moves since it were undone
    checkpoint: Optional[dict] = None
    exact_until: int = 0
    # the step before which no joint Newton step is tried (after one that gained too little)
    joint_after: int = 0

    def __post_init__(self):
        self.rounding = max(1e3 * self.tol, 1e-10)
        self.interval = min(16, self.refresh_every or 16)
        if self.work.sq_norms is None:
            self.work.sq_norms = self.work.design.sq_norms()

    def noise_move(self):
        """Re-estimate sigma^2 (:meth:`.Workspace.reestimate_noise`) and record it where it raised
        L; returns by how much. A re-estimate that found no better value is tried again once the
        moves since have raised L by more than rounding: where sigma^2 is tiny, L evaluated at
        neighbouring values differs by more than the gains the proposal promises, and each retry
        costs a factorisation."""
        work = self.work
        if self.failed_at is not None and work.L - self.failed_at <= self.rounding * max(1.0, abs(work.L)):
            return 0.0
        before = work.L
        if work.reestimate_noise(min_log_change=LOG_NOISE_TOL if self.practical else 0.0):
            self.failed_at = None
            work.trace.append(work.L)
            work.moves.append(("noise", -1))
            work.trace_seconds.append(time.perf_counter() - self.start)
            return work.L - before
        self.failed_at = work.L
        return 0.0

    def stuck(self):
        """Whether the gains are rounding (the stopping rule "rounding" of :func:`resume`)."""
        return self.quiet >= 3 or self.stalls >= 8

    def refresh(self, moves):
        """An exact refresh after ``moves`` moves: the next interval shorter while the rank-one
        updates drift, longer (up to ``refresh_every``) once not, and the count of refreshes
        without exact progress."""
        work = self.work
        claimed = work.L  # accumulated from the moves' gains
        work.refresh()
        self.drifting = abs(work.drift[-1][1]) > 1e-9 * max(1.0, abs(work.L))
        self.interval = (max(16, self.interval // 4) if self.drifting
                         else min(int(self.refresh_every), 2 * self.interval))
        scale = moves * max(1.0, abs(work.L))
        stalled = self.exact_L is not None and moves > 0 and work.L - self.best_L < self.tol * scale
        self.stalls = self.stalls + 1 if stalled else 0
        self.quiet = self.quiet + 1 if stalled and claimed - self.exact_L < self.rounding * scale else 0
        self.exact_L = work.L
        self.best_L = work.L if self.best_L is None else max(self.best_L, work.L)

    def after_refresh(self, step, moves):
        """Keep the state at a new best exact L; where the exact L fell below the best (moves chosen
        on drifted statistics, an ill-conditioned dictionary), go back to that state and make the
        next ``moves`` moves each on statistics refreshed first, which makes every gain exact.
        Returns whether it went back."""
        work, checkpoint = self.work, self.checkpoint
        # a fall within the rounding of the two evaluations of L is no fall (where H is ill-conditioned,
        # eps sum |H^-1| |H| reaches 1e-2 nats: ``logdet_rounding``)
        if checkpoint is not None and step >= self.exact_until and (
                work.L < checkpoint["L"] - 1e-9 * max(1.0, abs(checkpoint["L"]))
                - 2.0 * work.logdet_rounding(work.blocks())):
            fell = float(work.L - checkpoint["L"])
            work.restore(checkpoint)
            work.rollbacks.append((len(work.moves), fell))
            self.exact_L = work.L
            self.exact_until = step + max(int(moves), 1)
            return True
        if checkpoint is None or work.L >= checkpoint["L"]:
            self.checkpoint = work.checkpoint()
        return False

    def refresh_at(self, step):
        """:meth:`refresh` and :meth:`after_refresh` at ``step``; returns whether it went back."""
        moves = step - self.last_refresh
        self.refresh(moves)
        rolled_back = self.after_refresh(step, moves)
        self.last_refresh = step
        return rolled_back

    def corrupted(self):
        """Whether the updated statistics have drifted beyond use: S_m = d_m^T C^-1 d_m lies in
        [0, ||d_m||^2 / sigma^2] (C >= sigma^2 I); outside it (or not finite) they have."""
        work = self.work
        cap = work.beta * work.sq_norms
        S = work.S
        return not (np.all(np.isfinite(S)) and np.all(np.isfinite(work.Q))
                    and np.all(S >= -max(work.align_tol, 1e-9) * cap) and np.all(S <= (1.0 + 1e-9) * cap))

    def refresh_due(self, step):
        """Whether an exact refresh comes before the move at ``step``: after ``interval`` moves
        (at least K while the updates do not drift), every move after a rollback, and whenever
        the statistics are :meth:`corrupted`."""
        return self.refresh_every is not None and step > self.last_refresh and (
            step - self.last_refresh >= (self.interval if self.drifting
                                         else max(self.interval, len(self.work.active)))
            or step < self.exact_until or self.corrupted())

    def gains(self):
        """The workspace's gains, under the practical rule only the significant moves'."""
        gain, new = self.work.gains()
        if self.practical:
            gain = significant(gain, new, self.work.alpha, self.work.a)
        return gain, new

    def make_move(self, step, m, alpha_new, gain):
        """Add, re-estimate or delete function ``m`` (whichever takes alpha_m to ``alpha_new``),
        record it, and re-estimate sigma^2 after every ``noise_every``-th move."""
        work = self.work
        if not np.isfinite(work.alpha[m]):
            work.add(m, alpha_new)
            kind = "add"
        elif np.isfinite(alpha_new):
            work.update(m, alpha_new)
            kind = "update"
        else:
            work.delete(m)
            kind = "delete"
        work.L += gain
        work.trace.append(work.L)
        work.moves.append((kind, m))
        work.trace_seconds.append(time.perf_counter() - self.start)
        if self.update_noise and (step + 1) % self.noise_every == 0:
            self.noise_move()

    def joint_move(self, step, gain, new, best):
        """Where the best move is a re-estimate and no add or delete gains beyond rounding
        (``rounding``; the moves left are re-estimates, which converge slowly one coordinate at a
        time where the active functions or the noise are coupled), one joint Newton step on ln
        alpha of every active function that stays (finite re-estimate) and, with
        ``update_noise``, ln sigma^2 (:meth:`.Workspace.joint_step`), kept where it gains more than
        the best single move (``best``); recorded as a move of kind ``"joint"``. Returns whether
        it was made. Not tried with more than ``JOINT_MAX_ACTIVE`` active functions, nor for K
        steps after one that gained too little (K active functions)."""
        work = self.work
        if len(work.active) > JOINT_MAX_ACTIVE or step < self.joint_after:
            return False
        significant = gain > self.rounding * max(1.0, abs(work.L))
        structural = ~np.isfinite(work.alpha) | ~np.isfinite(new)  # adds and deletes
        if np.any(significant & structural):
            return False
        made = work.joint_step(np.isfinite(new[work.a]), best, noise=self.update_noise)
        if made is None:
            self.joint_after = step + len(work.active)
            return False
        work.trace.append(work.L)
        work.moves.append(("joint", -1))
        work.trace_seconds.append(time.perf_counter() - self.start)
        return True

    def run(self, max_steps, bar=None):
        """Up to ``max_steps`` steps, each the best move; returns (converged, stop_reason)."""
        work, tol = self.work, self.tol
        converged, stop_reason = False, "max_steps"
        for step in range(int(max_steps)):
            if self.refresh_due(step):
                rolled_back = self.refresh_at(step)
                if not rolled_back and self.stuck():
                    converged, stop_reason = True, "rounding"
                    break
            gain, new = work.gains()
            if np.isnan(gain).any():
                # a function's statistics are at rounding level (an active function nearly collinear
                # with others, alpha -> 0): refresh them; if exact ones are too, the fit cannot go on
                if self.refresh_every is not None and step > self.last_refresh:
                    self.refresh_at(step)
                    gain, new = work.gains()
                if np.isnan(gain).any():
                    stop_reason = "ill-conditioned"
                    break
            if self.practical:
                gain = significant(gain, new, work.alpha, work.a)
            m = int(np.argmax(gain))
            best = float(gain[m])
            if not (best > tol * max(1.0, abs(work.L))):
                if self.update_noise:
                    before = work.noise_var
                    raised = self.noise_move()
                    if (abs(math.log(work.noise_var / before)) >= LOG_NOISE_TOL if self.practical
                            else raised > tol * max(1.0, abs(work.L))):
                        continue
                if self.refresh_every is not None and step > self.last_refresh:
                    # no move gains by the updated statistics: make sure by exact ones
                    if self.refresh_at(step):
                        continue
                    gain, _ = self.gains()
                    if np.max(gain) > tol * max(1.0, abs(work.L)) and not self.stuck():
                        continue
                converged = True
                stop_reason = "rounding" if self.stuck() else "practical" if self.practical else "tolerance"
                break
            if not (np.isfinite(work.alpha[m]) and np.isfinite(new[m]) and self.joint_move(step, gain, new, best)):
                self.make_move(step, m, new[m], best)
            if bar is not None and step % 50 == 0:
                bar.update(50 if step else 0)
                bar.set_postfix(L=f"{work.L:.4f}", active=len(work.active))
        return converged, stop_reason
