"""``vlcohort train``: the recipe, readable top to bottom: setup -> step loop -> cleanup.

Status: setup is built (resolved config saved to the run folder, every agent's adapter and
model loaded through ``from_pretrained``, a one-prompt generation check per agent). The RL
step loop (rollouts, vote, rewards, GRPO update) is the trainer issue (#4) and is not built
yet; ``main`` says so plainly instead of pretending to train.
"""

from __future__ import annotations

import sys
import time

import torch
from PIL import Image, ImageDraw

from .agent import Agent, build_agent
from .config import Config, resolved_text, save_resolved
from .problems import Problem


def probe_problem() -> Problem:
    """A small drawn multiple-choice question, to check that every agent can see and answer."""
    image = Image.new("RGB", (112, 112), "white")
    ImageDraw.Draw(image).ellipse((28, 28, 84, 84), fill="red")
    return Problem(id="probe-0", text="What colour is the shape?", images=[image],
                   options=["red", "green", "blue", "yellow"], source="probe")


def setup(cfg: Config) -> list[Agent]:
    torch.manual_seed(cfg.run.seed)
    return [build_agent(mc) for mc in cfg.agents]


def probe(agent: Agent, cfg: Config) -> str:
    """Render the probe problem, generate one completion, return its text."""
    adapter = agent.adapter
    rendered = adapter.render(probe_problem(), cfg.prompt.system_prompt, cfg.prompt.instruction)
    batch = adapter.encode_prompts([rendered])
    with torch.no_grad():
        out = agent.model.generate(
            **batch.inputs, max_new_tokens=min(16, cfg.rollout.max_new_tokens), do_sample=True,
            temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, top_k=0,
            eos_token_id=adapter.stop_token_ids(), pad_token_id=adapter.pad_token_id(),
        )
    return adapter.tokenizer.decode(out[0, batch.prompt_len:], skip_special_tokens=False)


def main(cfg: Config) -> int:
    print(resolved_text(cfg))
    path = save_resolved(cfg, cfg.run.output_dir)
    print(f"saved {path}")
    t0 = time.perf_counter()
    agents = setup(cfg)
    for agent in agents:
        params = sum(p.numel() for p in agent.model.parameters())
        text = probe(agent, cfg)
        print(f"agent {agent.name}: {agent.family} ({type(agent.model).__name__}, "
              f"{params:,} parameters) from {agent.adapter.path}")
        print(f"  probe completion: {text!r}")
    print(f"setup + probe: {time.perf_counter() - t0:.1f} s")
    print("\nNOT BUILT YET: the RL step loop (rollouts -> vote -> rewards -> GRPO update) is "
          "issue #4. Nothing was trained.", file=sys.stderr)
    return 0
