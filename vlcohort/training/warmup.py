"""Supervised warm-up of one agent before label-free RL.

Two terms, both through the adapter's real batches and the core's log-probs
(``logprobs.completion_logprobs``):

- **supervised** (on ``warmup.tasks``, with gold): maximise log p(answer completion), the
  completion being ``answer_template`` filled with the gold letter plus the end-of-turn
  token. It teaches the answer format and the agent's own skill family.
- **uniform** (on ``warmup.uniform_tasks``, no gold used): for each question, the K option
  letters give K candidate completions with sequence log-probs l_1..l_K. The loss
  ``-logsumexp(l)`` keeps the answer format likely, and ``-mean_k log_softmax(l)_k`` pulls
  the choice among the options towards uniform.

Why the uniform term: plain supervised warm-up on one family makes a tiny model
confidently wrong on the other (top option at p ~ 0.999): all G rollouts then agree,
every advantage is zero and no peer vote can teach it. Measured on a tiny VLM and the
synthetic shape tasks: 100 more warm-up steps with this term left it confident on its own
family and uniform (~0.25 accuracy over four options) on the other. Uniform over the
options means "knows the format, does not know the answer", which is the starting point
the method assumes.

Warmed-up weights are saved with ``save_pretrained`` under ``<run>/warmup/<agent>/`` with a
fingerprint of everything that shaped them; a re-run with the same fingerprint reuses them.
That folder is built from the agent's name by :func:`vlcohort.run_folder.child` only
(:func:`warmed_up_folder`); ``vlcohort train --overwrite`` keeps ``warmup/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Sequence

import torch

from vlcohort import run_folder
from vlcohort.config_schema import Config, ModelConfig, WarmupConfig
from vlcohort.data.problems import LETTERS, Problem
from vlcohort.training.logprobs import completion_logprobs

FINGERPRINT = "warmup.json"


def answer_ids(adapter, letter: str, template: str) -> list[int]:
    """Token ids of the completion that answers ``letter``, end-of-turn included."""
    ids = adapter.tokenizer.encode(template.format(letter), add_special_tokens=False)
    return ids + adapter.stop_token_ids()[:1]


def _sequence_logprobs(adapter, model, rendered, completions) -> torch.Tensor:
    """[N] summed log-probs of ``completions[i]`` after ``rendered[i]``."""
    batch = adapter.encode_training(adapter.encode_prompts(rendered), completions)
    batch = batch.to(next(model.parameters()).device)
    lp = completion_logprobs(adapter, model, batch)  # [N, T]
    return (lp * batch.completion_mask).sum(dim=1)


def supervised_loss(adapter, model, rendered, problems: Sequence[Problem], template: str) -> torch.Tensor:
    completions = [answer_ids(adapter, p.gold, template) for p in problems]
    return -_sequence_logprobs(adapter, model, rendered, completions).mean()


def uniform_loss(adapter, model, rendered, problems: Sequence[Problem], template: str
                 ) -> tuple[torch.Tensor, float]:
    """(loss, mean probability mass the model puts on well-formed answers)."""
    K = len(problems[0].options)
    if any(len(p.options or ()) != K for p in problems):
        raise ValueError("uniform warm-up needs multiple-choice problems with the same "
                         "number of options")
    rows = [r for r in rendered for _ in range(K)]  # row b*K + k
    completions = [answer_ids(adapter, LETTERS[k], template) for _ in problems for k in range(K)]
    seq = _sequence_logprobs(adapter, model, rows, completions).view(len(problems), K)  # [B, K]
    format_term = -torch.logsumexp(seq, dim=1)  # [B]
    spread_term = -torch.log_softmax(seq, dim=1).mean(dim=1) - torch.log(torch.tensor(float(K)))
    loss = (format_term + spread_term).mean()
    return loss, float(torch.exp(-format_term.detach()).mean())


def fingerprint(mc: ModelConfig, cfg: Config, seed: int) -> str:
    payload = json.dumps({"path": mc.path, "warmup": vars(mc.warmup), "seed": seed,
                          "system": cfg.prompt.system_prompt,
                          "instruction": cfg.prompt.instruction,
                          "image_size": cfg.data.image_size,
                          "shuffle_options": cfg.data.shuffle_options}, sort_keys=True, default=str)
    return hashlib.sha1(payload.encode()).hexdigest()[:16]


def warmed_up_folder(run_dir: Path, name: str) -> Path:
    """``<run>/warmup/<name>``, built by :func:`vlcohort.run_folder.child`: an agent name
    that is not one plain folder name, or a link at ``warmup/`` or at the agent's folder
    resolving out of the run folder, is refused (a one-line error naming the key)."""
    warmups = run_folder.child(run_dir, "warmup", what="the warm-up folder")
    return run_folder.child(warmups, name, what="agents.*.name")


def reusable(folder: Path, key: str) -> bool:
    """Whether ``folder`` holds a warm-up with fingerprint ``key``. A link planted at the
    warm-up folder (or at ``warmup/``) is refused here, before any training, since the
    weights would be saved through it."""
    run_folder.refuse_link(folder.parent)
    f = run_folder.refuse_link(folder) / FINGERPRINT
    return f.is_file() and json.loads(f.read_text()).get("fingerprint") == key


def _pool(tasks: Sequence[str], n: int, seed: int, cfg: Config) -> list[Problem]:
    from vlcohort.data.synthetic import make_dataset

    if not tasks:
        return []
    return make_dataset(tuple(tasks), n=n, seed=seed, image_size=cfg.data.image_size,
                        shuffle_options=cfg.data.shuffle_options)


def warm_up(agent, mc: ModelConfig, cfg: Config, folder: Path, seed: int, log=print) -> dict:
    """Train ``agent.model`` in place by ``mc.warmup``; save it to ``folder``; return stats."""
    w: WarmupConfig = mc.warmup
    adapter, model = agent.adapter, agent.model
    sys_prompt, instr = cfg.prompt.system_prompt, cfg.prompt.instruction
    pool = _pool(w.tasks, max(w.batch_size * 8, 256), seed, cfg)
    upool = _pool(w.uniform_tasks, max(w.batch_size * 8, 256), seed + 1, cfg)
    render = {}  # rendered prompts are reused across steps

    def rendered(ps):
        for p in ps:
            if p.id not in render:
                render[p.id] = adapter.render(p, sys_prompt, instr)
        return [render[p.id] for p in ps]

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=w.lr, betas=(0.9, 0.98))
    rng = random.Random(seed)
    model.train()
    t0 = time.perf_counter()
    stats: dict = {}
    total = w.steps + w.uniform_steps
    for step in range(total):
        opt.zero_grad(set_to_none=True)
        loss = torch.zeros(())
        if pool and (step < w.steps or w.keep_supervised):
            batch = rng.sample(pool, min(w.batch_size, len(pool)))
            sup = supervised_loss(adapter, model, rendered(batch), batch, w.answer_template)
            loss = loss + sup
            stats["supervised_loss"] = float(sup.detach())
        if upool and step >= w.steps:
            batch = rng.sample(upool, min(w.batch_size, len(upool)))
            uni, mass = uniform_loss(adapter, model, rendered(batch), batch, w.answer_template)
            loss = loss + w.uniform_weight * uni
            stats["uniform_loss"], stats["format_mass"] = float(uni.detach()), mass
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if (step + 1) % max(1, total // 5) == 0 or step + 1 == total:
            log(f"warm-up {agent.name}: step {step + 1}/{total} "
                + " ".join(f"{k}={v:.3f}" for k, v in stats.items())
                + f" ({time.perf_counter() - t0:.0f}s)")
    model.eval()
    save_weights(model, adapter.processor, folder)
    stats["seconds"] = time.perf_counter() - t0
    return stats


def save_weights(model, processor, folder: Path) -> Path:
    """``save_pretrained`` of the model and its processor as ``folder``, without writing
    through a link planted in the run folder.

    ``save_pretrained`` opens its files by name and follows links, so it writes into a
    fresh folder beside ``folder`` that only this call has seen; that folder then replaces
    ``folder`` whole (an earlier warm-up's files, and any link among them, go with it). A
    link at ``folder`` itself or at its parent is refused, not replaced: it may have been
    made on purpose, and the run stops to ask."""
    folder = Path(folder)
    folder.parent.parent.mkdir(parents=True, exist_ok=True)  # the run folder, as named
    parent = run_folder.real_dir(folder.parent)
    folder = run_folder.refuse_link(folder)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=parent))
    try:
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
        os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide the weights from other users
        if folder.exists() or folder.is_symlink():
            run_folder.remove(run_folder.real_dir(folder))
        os.rename(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def save_fingerprint(folder: Path, key: str, stats: dict) -> None:
    """The fingerprint beside the weights, written as :func:`save_weights` writes them:
    never through a link planted at its name."""
    run_folder.write_text(run_folder.real_dir(folder) / FINGERPRINT,
                          json.dumps({"fingerprint": key, "stats": stats}, indent=1))
