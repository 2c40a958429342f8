"""The search strategy a tuning session draws its candidates with (MetaSchedule's
evolutionary search), and when its genetic iterations are worth their cost."""

from __future__ import annotations

from typing import Any

from tvm.s_tir import meta_schedule as ms

from dlas.tuning.metaschedule.cost_model import ChanceRanking

#: Rounds of initial sampling that may find no valid schedule before a task's search gives
#: up (MetaSchedule's default: 5). On a GPU, 5-15% of random samples of these small convs
#: pass `VerifyGPUCode` (thread extents of at least a warp); at 5% and a population of 16,
#: 5 empty rounds came before 16 valid samples and the H100's tuned point got 0 trials.
#: A round costs milliseconds (no build), and only rounds that find none count.
INIT_SAMPLE_ROUNDS = 64


def evolutionary_search(population: int, breed: bool = True,
                        ) -> ms.search_strategy.EvolutionarySearch:
    """The search strategy of every tuning session; `breed` False: a batch is drawn from
    the sampled population without MetaSchedule's genetic iterations (`breeds`)."""
    return ms.search_strategy.EvolutionarySearch(
        population_size=population, init_min_unmeasured=min(50, population),
        max_fail_count=INIT_SAMPLE_ROUNDS, **({} if breed else {"genetic_num_iters": 0}))


def breeds(cost_model: Any, needs: list[int], per_iter: int) -> bool:
    """Whether a session's search runs MetaSchedule's genetic iterations: not in a session
    ranked by chance (`cost_model.ChanceRanking`) that gives every task one batch (each
    task's trials `needs` at most `per_iter`), the quickstart's.

    Why: the evolutionary search samples a population, mutates it for 4 generations
    (parents drawn by their predicted score) and picks the batch by predicted score among
    everything it visited. Ranked by chance, every one of those draws is uniform, so the
    batch is a uniform pick of random samples and of random mutants of random samples,
    while the mutants cost ~4 replays and checks of the schedule per member of the
    population. The one thing the generations add is breeding from the best measured
    candidates that seed the population (a fifth of it), which only a task's later batches
    have: in its first, the only measured record is its minimal schedule (measured before
    the search), whose hand-written trace has no sampled decision to mutate. Measured on
    the quickstart's tuned point (ResNet18-w0.5 GEMM, 3 tasks of 32, 17 and 15 trials, a
    2-vCPU Zen 3, 2026-12-01): the three batches' draws took 17.5 s on one thread with the
    generations and the point 53-54 s; without them the point took 35 s, and the model
    read 4.390 ms against 4.383 (same seed, other candidates)."""
    return not (isinstance(cost_model, ChanceRanking) and max(needs, default=0) <= per_iter)
