"""Generation for ``vlcohort eval``: prompts -> completions -> ``items.jsonl`` lines.

What ``items.jsonl`` lacks is generated and appended batch by batch (so a killed run
resumes where it stopped); each line is scored as it is written (:func:`score_record`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

from vlcohort.answers.grading import get_grader
from vlcohort.data.problems import Problem

from .benchmarks import BenchmarkData, BenchmarkError
from .runner import EvalSettings, _key, prompt_view, read_items, score_record



def _generate(generate_fn, adapter, views: Sequence[tuple[Problem, str | None]],
              system_prompt: str | None) -> list[str]:
    """One completion per view (batched)."""
    return generate_fn([adapter.render(p, system_prompt, instr) for p, instr in views])


def text_generator(settings: EvalSettings, adapter, model):
    """``rendered prompts -> texts`` for one model: greedy unless settings ask for samples.

    ``hf``: one batched ``generate`` (``generate_texts``). ``vllm``: one vLLM engine per
    model, serving the loaded weights; each call's requests are seeded from the run's
    seed and a call counter, so a rerun samples the same texts. Returns the function and
    a ``close`` to free the engine."""
    temperature = settings.temperature if settings.samples > 1 else None
    if settings.engine == "hf":
        from vlcohort.analysis.evaluate import generate_texts

        return (lambda rendered: generate_texts(adapter, model, rendered,
                                                settings.max_new_tokens, temperature)), (lambda: None)
    if settings.engine != "vllm":
        raise BenchmarkError(f"--engine {settings.engine!r}: not one of hf, vllm")
    from vlcohort.config import VLLMConfig
    from vlcohort.rollout.base import SamplingParams
    from vlcohort.rollout.engines import make_engine

    from vlcohort.rollout.vllm import EngineUnavailableError

    try:
        engine = make_engine("vllm", adapter, model, vllm=VLLMConfig(
            sleep_mode=False, dtype=settings.vllm_dtype, gpu_memory_utilization=0.8,
            max_num_seqs=max(settings.batch_size, 1)), seed=settings.seed)
    except EngineUnavailableError as e:
        raise BenchmarkError(f"--engine vllm: {e}") from e
    # vLLM: temperature 0 is greedy (argmax), as transformers' do_sample=False
    sampling = SamplingParams(max_new_tokens=settings.max_new_tokens,
                              temperature=0.0 if temperature is None else temperature)
    calls = [0]

    def generate(rendered):
        calls[0] += 1
        seed = settings.seed + calls[0] * len(rendered)
        return engine.generate(rendered, 1, sampling, seed=seed).texts

    return generate, engine.close


def _progress(total: int, desc: str, enabled: bool):
    try:
        from tqdm import tqdm
    except ImportError:  # progress is a nicety, never a dependency
        return None
    return tqdm(total=total, desc=desc, disable=not enabled, file=sys.stderr)


def run_generation(settings: EvalSettings, data: dict[str, BenchmarkData], items_path: Path) -> int:
    """Generate what ``items.jsonl`` lacks, appending as it goes; returns lines written."""
    import torch

    from processors import adapter_for

    done = {_key(r) for r in read_items(items_path)}
    grader = get_grader()
    written = 0
    for spec in settings.models:
        todo = [(name, p, s) for name, d in data.items() for p in d.problems
                for s in range(settings.samples) if (name, p.id, spec, s) not in done]
        if not todo:
            continue
        try:
            adapter = adapter_for(spec)
            model = adapter.load_model()
        except Exception as e:  # noqa: BLE001 - missing folder, bad config, broken weights
            raise BenchmarkError(f"model {spec!r} could not be loaded: {type(e).__name__}: "
                                 f"{e}. Give a checkpoint folder written by save_pretrained, "
                                 "a hub id or a tiny:<name> spec (vlcohort tiny lists them).") from e
        if torch.cuda.is_available() and settings.engine == "hf":
            model = model.to("cuda")  # (a vLLM engine loads its own copy on its device)
        torch.manual_seed(settings.seed)
        generate_fn, close = text_generator(settings, adapter, model)
        try:
            written += _generate_items(settings, spec, todo, adapter, generate_fn, grader,
                                       items_path)
        finally:
            close()
        del model
    return written


def _generate_items(settings: EvalSettings, spec: str, todo: list, adapter, generate_fn, grader,
                    items_path: Path) -> int:
    """Generate and score one model's missing items, appending each batch as it is done."""
    written = 0
    bar = _progress(len(todo), f"eval {spec}", settings.progress)
    with open(items_path, "a", encoding="utf-8") as f:
        for start in range(0, len(todo), settings.batch_size):
            chunk = todo[start:start + settings.batch_size]
            views = [prompt_view(p, settings.prompt) for _, p, _ in chunk]
            if settings.instruction is not None:
                views = [(view, settings.instruction) for view, _ in views]
            texts = _generate(generate_fn, adapter, views, settings.system_prompt)
            for (name, p, s), text in zip(chunk, texts):
                rec = {"benchmark": name, "id": p.id, "model": spec, "sample": s,
                       "prompt": settings.prompt, "response": text,
                       **({"instruction": settings.instruction}
                          if settings.instruction is not None else {}),
                       **({"answer_style": settings.answer_style}
                          if settings.answer_style != "auto" else {}),
                       **score_record(p, text, grader, settings.answer_style)}
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                written += 1
            f.flush()
            if bar is not None:
                bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return written
