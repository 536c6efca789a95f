"""Benchmark: ``vlcohort eval`` generation with length-sorted batches against plain HF
``generate`` batching in input order (the peer), on the same items, model and batch size.

Run from the project root::

    python bench/eval_generation.py [--items 128] [--batch-size 8] [--max-new-tokens 32]

What it does: builds tiny:qwen2 (sharpened, so greedy completions differ from item to
item), makes ``--items`` questions whose lengths spread like a benchmark's (a few words
to a few hundred, drawn log-uniformly, in random order), then times
:func:`vlcohort.eval.generation.generate_shard` with ``length_sorted`` off (input order: each batch
padded to its longest prompt, as plain batching does) and on (longest first), alternating
the two ``--repeats`` times after one untimed warm-up each. Both write and score their
records exactly as ``vlcohort eval`` does; the sorted run's time includes its extra
rendering pass that measures the prompts.

Last lines: items/s of each, ``ratio_sorted_vs_input_order``, the share of prompt
positions that are padding in each, and how many greedy texts agree (they must all).
On a tiny model on CPU most of a step is fixed per-call cost, so the ratio understates
what sorting saves on a real model, where attention over padding is real work. A
benchmark prints ratios against a peer measured in the same run; it is not a timed test.
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = ("the answer is of to in triangle circle square find x solve for y how many "
         "degrees area perimeter length angle radius line segment midpoint parallel").split()


def questions(n: int, seed: int, shortest: int = 4, longest: int = 400) -> list[str]:
    """``n`` questions of log-uniform word counts in [shortest, longest], random order."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = int(math.exp(rng.uniform(math.log(shortest), math.log(longest))))
        out.append(" ".join(rng.choice(WORDS) for _ in range(words)) + f" ({i})?")
    return out


def padding_share(lengths: list[int], batch_size: int) -> float:
    """Padding positions / all prompt positions when ``lengths`` are batched in order."""
    pad = total = 0
    for start in range(0, len(lengths), batch_size):
        chunk = lengths[start:start + batch_size]
        pad += sum(max(chunk) - n for n in chunk)
        total += max(chunk) * len(chunk)
    return pad / total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (1: steady figures on a shared machine, where "
                         "several threads spin against other processes)")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    from vlcohort.data.problems import Problem
    from vlcohort.eval.generation import generate_shard, length_order, prompt_tokens, text_generator
    from vlcohort.eval.runner import EvalSettings, prompt_view
    from vlcohort.processors import adapter_for
    from vlcohort.processors.tiny import sharpen, tiny_model_path

    work = Path(tempfile.mkdtemp(prefix="bench-eval-gen-"))
    try:
        folder = work / "qwen2"
        shutil.copytree(tiny_model_path("tiny:qwen2"), folder)
        sharpen(adapter_for(folder).load_model(), seed=args.seed, scale=0.2).save_pretrained(folder)
        adapter = adapter_for(folder)
        model = adapter.load_model()
        torch.manual_seed(args.seed)
        settings = EvalSettings([str(folder)], ["bench"], work, work, progress=False,
                                max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
        todo = [("bench", Problem(id=str(i), text=q, images=[], options=None, gold="1",
                                  source="bench"), 0)
                for i, q in enumerate(questions(args.items, args.seed))]
        generate, _ = text_generator(settings, adapter, model)
        lengths = [prompt_tokens(adapter, adapter.render(*_view(p, settings, prompt_view)))
                   for _, p, _ in todo]
        print(f"items {len(todo)}, batch {args.batch_size}, max_new_tokens "
              f"{args.max_new_tokens}, prompt tokens min/median/max {min(lengths)}/"
              f"{int(statistics.median(lengths))}/{max(lengths)}, torch threads "
              f"{torch.get_num_threads()}")

        def run(sorted_: bool, tag: str) -> tuple[float, dict]:
            out = work / f"{tag}.jsonl"
            out.unlink(missing_ok=True)
            start = time.perf_counter()
            generate_shard(settings, str(folder), todo, adapter, generate, out,
                           length_sorted=sorted_)
            seconds = time.perf_counter() - start
            import json

            texts = {json.loads(x)["id"]: json.loads(x)["response"]
                     for x in out.read_text().splitlines()}
            return seconds, texts

        run(False, "warm-plain"), run(True, "warm-sorted")
        times: dict[str, list[float]] = {"input_order": [], "sorted": []}
        texts = {}
        for r in range(args.repeats):
            for name, sorted_ in (("input_order", False), ("sorted", True)):
                seconds, texts[name] = run(sorted_, f"{name}{r}")
                times[name].append(seconds)
                print(f"repeat {r} {name}: {seconds:.2f} s", flush=True)
        rate = {k: len(todo) / statistics.median(v) for k, v in times.items()}
        agree = sum(texts["sorted"][k] == v for k, v in texts["input_order"].items())
        new_tokens = [len(adapter.tokenizer(t, add_special_tokens=False)["input_ids"])
                      for t in texts["input_order"].values()]
        print(f"completion tokens (re-tokenised) mean {statistics.mean(new_tokens):.1f}, "
              f"max {max(new_tokens)}")
        order = length_order(lengths)
        print(f"padding_share_input_order {padding_share(lengths, args.batch_size):.3f}")
        print(f"padding_share_sorted {padding_share([lengths[i] for i in order], args.batch_size):.3f}")
        print(f"greedy_texts_agree {agree}/{len(todo)}")
        print(f"input_order_items_per_s {rate['input_order']:.2f}")
        print(f"sorted_items_per_s {rate['sorted']:.2f}")
        print(f"ratio_sorted_vs_input_order {rate['sorted'] / rate['input_order']:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _view(problem, settings, prompt_view):
    view, instruction = prompt_view(problem, settings.prompt)
    return view, settings.system_prompt, instruction


if __name__ == "__main__":
    raise SystemExit(main())
