"""vlcohort: label-free RL of vision-language models (and plain LLMs) by a cohort.

The small public API, for scripts and notebooks (the trainer itself runs from
``vlcohort train``)::

    from vlcohort import extract_answer, is_equivalent, majority_vote, grpo
    extract_answer("... so the answer is <answer>C</answer>")      # 'C'
    is_equivalent("C", "45°", options=["30°", "40°", "45°", "60°"])  # True
    majority_vote(["C", "45°", "B", None], options=[...]).label       # 'C'
    grpo.group_advantages(rewards)                                     # [B, G]

The packages follow the stages of the cohort step: ``data`` (problems and loaders),
``rollout`` (generation engines), ``answers`` (extraction, the one grader, votes),
``training`` (agents, rewards, the GRPO maths and update, checkpoints, process groups),
``recipes`` (the cohort step and loop, comparison arms, self-play, the run driver),
``analysis`` (metrics, dynamics, plots, diversity, simulation, held-out accuracy).
"""

from vlcohort.answers.extract import extract_answer
from vlcohort.answers.grading import is_equivalent
from vlcohort.answers.voting import majority_vote
from vlcohort.training import grpo

__all__ = ["extract_answer", "is_equivalent", "majority_vote", "grpo"]
