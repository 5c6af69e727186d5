"""Fast variational sparse Bayesian learning for the ARD RVM: one coefficient at a time.

Shutin, Buchgraber, Kulkarni & Poor (2011), "Fast variational sparse Bayesian learning with
automatic relevance determination for superimposed signals", IEEE Trans. Signal Process. 59(12),
take the alternation of q(w) and q(alpha_k) for one coefficient k to its fixed point in closed
form and decide from it whether k belongs in the model. Their derivation has a0 = b0 = 0; here it
is carried out for the Gamma(a0, b0) hyperpriors (shape, rate) of ``ppl_sbl.models.rvm``.

Model and likelihood. alpha_k ~ Gamma(a0, b0), w_k | alpha_k ~ N(0, 1/alpha_k), and a
likelihood that, with gamma (regression) or xi (Jaakkola-Jordan bound) held, is quadratic in w:

    E ln p(t | w) = -1/2 w^T Phi^T diag(W) Phi w + r^T Phi w + const,

W = E[gamma] 1, r = E[gamma] t (regression); W_n = 2 omega_n lambda(xi_n), r_n = omega_n (t_n - 1/2)
(JJ, per-point weights omega_n of the robust RVM, 1 otherwise).

Restricted family. An active set A has a joint q(w_A) = N(mu, Sigma); every coefficient outside
A is frozen, q(w_k) = N(0, v_k) independent of the rest (the ``frozen_var`` of
:class:`ppl_sbl.gaussian.ActiveGaussian`). Every coefficient keeps q(alpha_k) = Gamma(a, b_k),
a = a0 + 1/2, and x_k := E[alpha_k] = a / b_k.

Collapsed ELBO of one coefficient. Maximising the ELBO over q(w) (given the x) and writing
q(alpha_k) through x_k, the ELBO as a function of coefficient k's factors, the others' q(alpha)
held and q(w) re-optimised, is a constant plus

    in the model:  f_in(x)  = 1/2 q_k^2 / (x + s_k) - 1/2 ln(1 + s_k / x) + a0 ln x - b0 x   (1)
    frozen:        f_out(x) = -1/2 ln(1 + h_k / x) + a0 ln x - b0 x                        (2)

(-1/2 ln(x + s) + a ln x = -1/2 ln(1 + s/x) + a0 ln x), with h_k = sum_n W_n phi_nk^2 the data
precision of w_k alone (frozen: v_k = 1 / (x + h_k) is optimal) and s_k, q_k its leave-one-out
precision and quality given the active set without k: with C = Phi_{A\\k}^T W Phi_{A\\k} +
diag(x_{A\\k}) and g = (Phi^T W phi_k)_{A\\k},

    s_k = h_k - g^T C^-1 g,    q_k = phi_k^T r - g^T C^-1 (Phi^T r)_{A\\k}                     (3)

(Tipping & Faul's s_m, q_m; for an active k, s_k = 1/Sigma_kk - x_k and q_k = mu_k / Sigma_kk).
With a0 = b0 = 0, (1) is Tipping & Faul's l(alpha) and (2) tends to 0 as x -> inf.

Stationary points. f_in'(x) = 0 is, with u = x / s, beta = b0 s and d = q^2/s - 1,

    2 beta u^3 + (4 beta - 2 a0) u^2 + (2 beta + d - 4 a0) u - (2 a0 + 1) = 0               (4)

(-2 x (x + s)^2 f_in'(x) = 2 b0 x^3 + (4 b0 s - 2 a0) x^2 + (2 b0 s^2 + q^2 - s - 4 a0 s) x -
(2 a0 + 1) s^2, with x = s u and divided by s^2); it has one or three positive
roots when b0 > 0, and with a0 = b0 = 0 the single root u = 1/d, x = s^2 / (q^2 - s), when
q^2 > s, else the supremum 0 at x = inf. The fixed point of alternating the coordinate updates of
q(w) and q(alpha_k) (b_k = b0 + (mu_k^2 + Sigma_kk)/2) is a root of (4); :func:`in_model_optimum`
returns the global maximiser over x > 0. f_out'(x) = 0 is

    2 b0 x^2 + 2 (b0 h - a0) x - (2 a0 + 1) h = 0                                          (5)

with one positive root when b0 > 0 (:func:`frozen_optimum`).

Moves (:func:`schedule`). An add (frozen -> in the model at the maximiser of (1)) or a
re-estimate (in the model, x -> the maximiser of (1)); the gain of a move is the difference of
the maximum of (1) and the current value of (1) or (2), the exact change of the restricted-family
ELBO. The moves update Sigma, mu and the statistics S_m = h_m - B_m^T Sigma B_m,
Q_m = (Phi^T r)_m - B_m^T mu of every coefficient (B = Phi^T diag(W) Phi_A) by rank-one formulas
(Tipping & Faul 2003, appendix), O(M K) per move plus one product with the design for an add.
The best move is taken while one gains more than tol |ELBO|; the re-estimates left below that
floor are then made in turn (many small moves can add up to more than the floor), and a pass
ends when neither kind is left, or after ``MOVES_PER_COEFFICIENT`` M moves (so that the number
of passes bounds the work). Between passes the likelihood factor updates itself given q(w)
(q(gamma), xi, the robust RVM's weights), q(w) and the statistics are recomputed for its new
(W, r), and each frozen q(alpha_k) goes to the maximiser of (2). Every move and every update is
a coordinate ascent step of the restricted-family ELBO, so the ELBO never decreases.

Sparsity: the entry condition. A frozen coefficient is the special case of an active one that
is independent of the rest with mean zero, and s_k <= h_k, so

    f_in(x) - f_out(x) = q_k^2 / (2 (x + s_k)) + 1/2 ln((x + h_k) / (x + s_k)) >= 0   for every x:

max f_in >= max f_out for every coefficient, with equality only when q_k = 0 and s_k = h_k.
With b0 > 0, taking a coefficient in never lowers the ELBO, and one the data do not support
(q_k^2 < s_k) still gains about sqrt(2 b0) (sqrt(h_k) - sqrt(s_k - q_k^2)) <= sqrt(2 b0 h_k)
nats by entering (for small b0 the maxima of (1) and (2) are near -sqrt(2 b0 (s_k - q_k^2))
and -sqrt(2 b0 h_k)): the ELBO's own optimum has every coefficient in the model, as the plain
sweep's fixed point does. The gains vanish with a0 = b0 = 0, where both maxima tend to 0 at
x = inf when q_k^2 <= s_k and the condition "k belongs in the model iff max f_in > max f_out"
becomes Shutin et al.'s (and Tipping & Faul's) q_k^2 > s_k. :func:`schedule` takes one of the two
by the prior (``entry`` chooses otherwise):

* vague (:func:`ppl_sbl.priors.is_vague`: a0 < ``ppl_sbl.priors.VAGUE_SHAPE``, as the defaults
  are): the limit's condition. A frozen coefficient enters only when the data support it,
  q_k^2 > s_k, and it passes the alignment test (below); the fit is sparse, and the frozen
  coefficients cost the ELBO the sum of their gains above against the dense fixed point (each
  at most sqrt(2 b0 h_k); with the default rates b0 = a0 in the units the schedule works in,
  :func:`standard_units`, so the cost grows like sqrt(a0));
* proper (a0 >= ``VAGUE_SHAPE``): the exact comparison. An add's gain is max f_in - max f_out,
  and it is made, like any other move, when that is the largest gain and above the floor
  tol |ELBO|; every frozen coefficient whose column the statistics resolve is a candidate, the
  ones the data do not support included (they enter at a large E[alpha_k]), and the alignment
  test does not apply (E[alpha] keeps the active block's precision from being singular; the
  spread limit below still guards the moves). The fit goes to the ELBO's dense optimum, unless
  the spread limit stops the adds on a strongly collinear design: ``CAVI``'s default schedule
  runs the sweep under such priors, and ``CAVIResult.refine()`` continues any fast fit with it.

Either way an active coefficient is never frozen (that would lower the ELBO), and one the data
stop supporting goes on at the maximiser of (1), a large E[alpha_k] of order sqrt(s_k / (2 b0))
with a negligible mean; the relevant coefficients are the active ones the data support.

Grouped precisions. Where one alpha_g is shared by a group of coefficients (group ARD, the RVMs'
``groups=``; one group of all of them is Bayesian ridge regression), :func:`group_schedule`
adds and re-estimates whole groups by the block form of (1) and (2): the same restricted family,
moves, passes and stopping rule, with a group's leave-group-out statistics in place of s_k and q_k
(:mod:`ppl_sbl.fast_ard.groups`).

Several outputs. A likelihood factor with ``num_outputs`` = C (the multinomial probit's q(y):
:class:`MultinomialProbit`) has C coefficient vectors on one design, each with its own ARD prior
and restricted family; given the factor the ELBO is a sum over them, so each output runs the
moves above on its own (W_c, r_c), and the factor's update between passes couples them (a
:class:`MultiFastFit`; parameter expansion and Newton steps for the factor's update, see
``outputs.schedule_outputs``).

Collinear designs. A column of zeros (h_k = 0, hence s_k = q_k = 0) never enters the model; a
column whose leave-one-out precision is below ``1e-10`` of its own data precision lies in the
span of the active columns to working precision (s_k may even come out negative from rounding):
it is not added if frozen, nor re-estimated if active; and, under vague priors, a frozen column
whose |cosine| with an active column exceeds ``MAX_ALIGNMENT`` (1 - 1e-3) is nearly collinear with
it (Tipping's SparseBayes's alignment test) and is not added. The statistics S and Q come from the
Gram matrix, so their rounding error grows with the conditioning of the active block, measured by
its spread

    kappa = sum_{k in A} (h_k + x_k) Sigma_kk,

the trace of the inverse of its precision Phi_A^T W Phi_A + diag(x_A) scaled to a unit diagonal
(1 for orthogonal columns; between 1/lambda_min and K/lambda_min of the scaled precision). No move
may take kappa above ``MAX_SPREAD``, beyond which the moves' gains would not be exact to working
precision; a move is checked for that, and for a positive pivot of its rank-one update
(1/Sigma_kk' > 0), before anything changes. A pass makes at most ``MOVES_PER_COEFFICIENT`` M
moves whatever the design.
"""
from __future__ import annotations

from .algebra import frozen_optimum, frozen_value, in_model_optimum, in_model_value
from .groups import GroupFastFit, group_schedule, group_supported
from .factors import GaussianNoise, JaakkolaJordan, MultinomialProbit, RobustGaussianNoise, RobustJaakkolaJordan
from .results import active_gaussian, alpha_factors
from .schedule import (ADD, LOG_ALPHA_TOL, MAX_ALIGNMENT, MAX_SPREAD, MOVES_PER_COEFFICIENT, NEWTON, REESTIMATE,
                       UPDATE, FastFit, Moments, MultiFastFit, NotApplicable, Plan, Planned, schedule,
                       schedule_many)
from .units import standard_units

__all__ = [
    "in_model_value",
    "frozen_value",
    "in_model_optimum",
    "frozen_optimum",
    "Moments",
    "FastFit",
    "MultiFastFit",
    "schedule",
    "schedule_many",
    "Plan",
    "Planned",
    "group_schedule",
    "group_supported",
    "GroupFastFit",
    "standard_units",
    "GaussianNoise",
    "JaakkolaJordan",
    "RobustJaakkolaJordan",
    "RobustGaussianNoise",
    "MultinomialProbit",
    "active_gaussian",
    "alpha_factors",
    "LOG_ALPHA_TOL",
    "MAX_ALIGNMENT",
    "MAX_SPREAD",
    "MOVES_PER_COEFFICIENT",
    "ADD",
    "REESTIMATE",
    "UPDATE",
    "NEWTON",
    "NotApplicable",
]
