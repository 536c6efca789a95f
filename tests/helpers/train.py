"""The short one-agent training run most end-to-end tests start from (``tests/test_train.py``
and the tests of checkpoints, exports, resumes, the console and the trackers)."""

from __future__ import annotations

# One agent, ground-truth reward on multiple-choice questions, answers read as the last
# capital letter: a random tiny model then gets some answers right by chance, so rewards
# vary within groups and updates really happen (a random model emits no <answer> tags).
FAST = ["method=gt_reward", "agents=[{name: A, path: 'tiny:qwen2_5_vl'}]",
        "reward.answer_style=last_letter", "data.tasks=[shape_colour, shape_kind]",
        "data.num_problems=16", "rollout.prompts_per_step=2", "rollout.rollouts_per_prompt=8",
        "rollout.max_new_tokens=16", "grpo.micro_batch_seqs=8", "optim.lr=1e-3",
        "optim.warmup_ratio=0", "log.plot=false", "log.tensorboard=false", "run.seed=4",
        # the demo recipe's comparison arms, held-out eval and vote gate / KL are off here
        "arms=[]", "eval.every=0", "reward.min_share=0", "grpo.kl_coef=0",
        "optim.schedule=cosine", "checkpoint.keep_last=2", "data.shuffle_options=true",
        "prompt.system_prompt=You are a helpful assistant."]
