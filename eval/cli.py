"""``vlcohort eval`` arguments and dispatch (the CLI only parses; :mod:`eval.runner` works).

    vlcohort eval --model ckpt/ --benchmark mathvista,wemath --data-dir bench/ --out runs/eval
    vlcohort eval score --benchmark mathvista --data bench/ --responses r.jsonl --json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .benchmarks import BENCHMARKS, DEFAULT_BENCHMARKS, BenchmarkError

# Kept in step with eval.runner.PROMPTS (a test checks); the runner, which pulls in the grader
# and voting, is imported only when ``eval`` runs, so other subcommands start fast.
PROMPT_STYLES = ("boxed", "answer_tag", "official")
# Kept in step with vlcohort.answers.extract.STYLES (a test checks), for the same reason.
ANSWER_STYLES = ("auto", "answer_tag", "boxed", "phrase", "direct", "last_line", "last_letter",
                 "last_number")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", nargs="?", default="run", choices=["run", "score"],
                   help="run: generate and score (default); score: score saved responses")
    p.add_argument("--model", action="append", default=[], metavar="PATH_OR_SPEC",
                   help="checkpoint folder, hub id or tiny: spec (repeat for an ensemble)")
    p.add_argument("--benchmark", default=",".join(DEFAULT_BENCHMARKS),
                   help=f"comma-separated, from: {', '.join(BENCHMARKS)} (default: the four "
                        "vision-language ones; gsm8k and math500 are text-only)")
    p.add_argument("--data-dir", "--data", dest="data_dir", type=Path, default=Path("."),
                   help="folder of the official annotation files (or one file, for score)")
    p.add_argument("--out", type=Path, default=Path("runs/eval"), help="output folder")
    p.add_argument("--samples", type=int, default=1, help="samples per item (1: greedy)")
    p.add_argument("--limit", type=int, default=None, help="first N items per benchmark")
    p.add_argument("--prompt", default="boxed", choices=list(PROMPT_STYLES))
    p.add_argument("--answer-style", default="auto", choices=list(ANSWER_STYLES),
                   help="answer extraction: auto (tag, box, phrase, a bare answer-shaped "
                        "reply), direct (also any short one-line reply), last_line (also a "
                        "short last line), or one marker / guess by name")
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--scorer", default="vlcohort", choices=["vlcohort", "official"])
    p.add_argument("--responses", type=Path, help="score: JSONL with id and response per line")
    p.add_argument("--json", action="store_true", help="score: print the summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--engine", default="hf", choices=["hf", "vllm"],
                   help="generation engine: hf (transformers generate) or vllm (vLLM's CUDA "
                        "build on a GPU, or its CPU build)")
    p.add_argument("--vllm-dtype", default="auto",
                   choices=["auto", "bfloat16", "float16", "float32"],
                   help="--engine vllm: the engine's weights dtype")


def run(args: argparse.Namespace) -> int:
    from .runner import EvalSettings, markdown_table, run as run_eval, score_responses

    try:
        if args.action == "score":
            if args.responses is None:
                raise BenchmarkError("vlcohort eval score needs --responses FILE.jsonl")
            summary = score_responses(args.benchmark, args.data_dir, args.responses, args.scorer,
                                      answer_style=args.answer_style)
        else:
            if not args.model:
                raise BenchmarkError("vlcohort eval needs --model PATH_OR_SPEC (repeatable)")
            summary = run_eval(EvalSettings(
                models=args.model, benchmarks=args.benchmark.split(","), data_dir=args.data_dir,
                out=args.out, samples=args.samples, limit=args.limit, prompt=args.prompt,
                max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                batch_size=args.batch_size, scorer=args.scorer, progress=not args.no_progress,
                engine=args.engine, vllm_dtype=args.vllm_dtype, answer_style=args.answer_style))
    except BenchmarkError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2) if args.json else markdown_table(summary))
    return 0
