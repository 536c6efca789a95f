"""Overrides for short CoMAS runs (``method: comas``) of tiny text agents on the bundled
math problems (``tests/test_comas.py``, ``tests/test_overwrite_marker.py``)."""

from __future__ import annotations

TEXT3 = "agents=[{name: A, path: 'tiny:qwen2'}, {name: B, path: 'tiny:qwen2'}, {name: C, path: 'tiny:qwen2'}]"
TEXT_DATA = ["data.source=file", "data.path=tests/data/real_math.jsonl", "data.preset=math"]
SMALL = ["method=comas", "rollout.prompts_per_step=2", "rollout.rollouts_per_prompt=1",
         "rollout.max_new_tokens=8", "grpo.micro_batch_seqs=4", "log.plot=false",
         "log.tensorboard=false", "arms=[]", "eval.every=0", "optim.lr=1e-3",
         "optim.warmup_ratio=0"]
