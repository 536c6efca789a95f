"""Every seed a run derives from ``run.seed``, in one place.

Each stream of randomness is a pure function of the run seed and its position (step,
agent, group rank, refill round, shard), so a resumed run samples what the straight run
did and no two streams of one run coincide. The strides are primes far apart.
"""

from __future__ import annotations

#: Sampling seeds: ``seed * SEED_STRIDE + step * STEP_SEED_STRIDE + agent``. Two primes
#: far apart, so no (step, agent) pair of one run shares a seed with another's.
SEED_STRIDE = 1_000_003
STEP_SEED_STRIDE = 1_009

#: Rollout seeds of the R ranks of one agent group differ by multiples of this prime, so a
#: group's ranks never sample the same stream (``rollout_seed`` spaces steps by 1_009).
RANK_SEED_STRIDE = 7919

#: ``rollout.dynamic_sampling``: refill round k of a step adds k times this prime to the
#: seeds, so a refill never resamples the step's first round (or another step's).
ROUND_SEED_STRIDE = 104_729

#: ``data.decouple``: agent a's shard is shuffled with seed ``run.seed * SHARD_SEED_STRIDE +
#: a``, a prime stride so the A shard orders never coincide with each other or the stream's.
SHARD_SEED_STRIDE = 1009

#: The held-out problems are drawn from the training families with the run seed plus this
#: prime, so they are never the training draw (the synthetic generator is seeded per item).
EVAL_SEED_OFFSET = 7919

#: ``vlcohort diversity``'s default synthetic seed: the held-out set that a training run
#: with ``run.seed=0`` measures ``eval/<a>/<t>/acc`` on (``EVAL_SEED_OFFSET``), so no
#: training problem of such a run is among them.
HELD_OUT_SEED = 0 + EVAL_SEED_OFFSET


#: ``eval.holdout`` draws the held-out share of the training file with ``run.seed`` plus this
#: prime, and ``eval.limit`` its sample of a held-out file with this prime plus one more, so
#: neither draw is the stream's epoch shuffle (seeded by ``run.seed`` and the epoch).
HOLDOUT_SEED_OFFSET = 15_485_863

#: Co-rewarding-II: the EMA teacher's rollout seed is the policy's plus this prime, so at
#: step 1, when the EMA still equals the policy, the teacher draws other samples than the
#: policy did. (The same prime as HOLDOUT_SEED_OFFSET, on another stream: sampling seeds,
#: not the data split's shuffle; kept so that Co-rewarding-II runs sample as before.)
TEACHER_SEED_OFFSET = 15_485_863

#: ``eval.samples > 1``: the sampled answers of agent a at step s are drawn with
#: ``rollout_seed(seed + EVAL_SAMPLE_SEED_OFFSET, s, a)``, inside a forked RNG, so an
#: evaluation never moves the training's RNG streams (a resume stays exact) and never
#: repeats a rollout's draw.
EVAL_SAMPLE_SEED_OFFSET = 32_452_843


def rollout_seed(seed: int, step: int, agent: int) -> int:
    """Sampling seed of one agent's rollouts at one step: a pure function of the run seed,
    so rollouts do not depend on how much randomness anything else used before (a model
    build, a resume), and a resumed run samples exactly what the straight run did."""
    return (seed * SEED_STRIDE + step * STEP_SEED_STRIDE + agent) % (2**31 - 1)


def step_rollout_seed(seed: int, step: int, agent: int, group_rank: int = 0,
                      round_: int = 0) -> int:
    """The seed of one rank's rollouts of one agent in one dynamic-sampling round."""
    return rollout_seed(seed, step, agent) + RANK_SEED_STRIDE * group_rank + ROUND_SEED_STRIDE * round_
