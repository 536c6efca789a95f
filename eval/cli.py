"""``vlcohort eval`` arguments and dispatch (the CLI only parses; :mod:`vlcohort.eval.runner` works).

    vlcohort eval --model ckpt/ --benchmark mathvista,wemath --data-dir bench/ --out runs/eval
    vlcohort eval score --benchmark mathvista --data bench/ --responses r.jsonl --json
    vlcohort eval score --data bench/ --out runs/eval --judge https://api.openai.com/v1 \
        --judge-model gpt-4o-2024-08-06 --scorer official   # re-score items.jsonl, judged
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from .datasets import BENCHMARKS, DEFAULT_BENCHMARKS, TEXT_BENCHMARKS, BenchmarkError

# Kept in step with vlcohort.eval.runner.PROMPTS (a test checks); the runner, which pulls in the grader
# and voting, is imported only when ``eval`` runs, so other subcommands start fast.
PROMPT_STYLES = ("boxed", "answer_tag", "official")
# Kept in step with vlcohort.answers.extract.STYLES (a test checks), for the same reason.
ANSWER_STYLES = ("auto", "answer_tag", "boxed", "phrase", "direct", "last_line", "last_expression",
                 "first_line", "last_letter", "last_number")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", nargs="?", default="run", choices=["run", "score"],
                   help="run: generate and score (default); score: score saved responses")
    p.add_argument("--model", action="append", default=[], metavar="PATH_OR_SPEC",
                   help="checkpoint folder, hub id or tiny: spec (repeat for an ensemble)")
    p.add_argument("--benchmark", default=",".join(DEFAULT_BENCHMARKS),
                   help=f"comma-separated, from: {', '.join(BENCHMARKS)} (default: the four "
                        f"vision-language ones; text-only: {', '.join(TEXT_BENCHMARKS)}); or "
                        "a group: text7 (the paper's Table 1: gsm8k, math500, amc, humaneval, "
                        "gpqa, mbpp, livecodebench) or comas7 (the CoMAS comparison: gsm8k, "
                        "math500, humaneval, mbpp, scibench, gpqa, mmlu), printed as a table "
                        "in that column order")
    p.add_argument("--since", default=None, metavar="YYYY-MM-DD",
                   help="livecodebench: first contest date kept (default 2024-08-01)")
    p.add_argument("--until", default=None, metavar="YYYY-MM-DD",
                   help="livecodebench: contest date the window ends before (default "
                        "2025-02-01: August 2024 to January 2025)")
    p.add_argument("--data-dir", "--data", dest="data_dir", type=Path, default=Path("."),
                   help="folder of the official annotation files (or one file, for score)")
    p.add_argument("--out", type=Path, default=None,
                   help="output folder (run: default runs/eval; score: where items.jsonl and "
                        "the summary go, and, without --responses, the items.jsonl re-scored)")
    p.add_argument("--samples", type=int, default=1, help="samples per item (1: greedy)")
    p.add_argument("--limit", type=int, default=None, help="first N items per benchmark")
    p.add_argument("--prompt", default="boxed", choices=list(PROMPT_STYLES))
    p.add_argument("--answer-style", default="auto", choices=list(ANSWER_STYLES),
                   help="answer extraction: auto (tag, box, phrase, a bare answer-shaped "
                        "reply), direct (also any short one-line reply), last_line (also a "
                        "short last line), or one marker / guess by name")
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--max-prompt-tokens", type=int, default=4096,
                   help="skip (and count) items whose prompt is longer, in the model's "
                        "tokens; 0: no limit")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--scorer", default="vlcohort", choices=["vlcohort", "official"],
                   help="whose verdicts the summary counts, and items.jsonl's `correct` holds: "
                        "this project's grader (kept in `grader_correct` too) or the benchmark's "
                        "official rules where it has them")
    p.add_argument("--responses", type=Path, help="score: JSONL with id and response per line")
    p.add_argument("--json", action="store_true", help="score: print the summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--engine", default="hf", choices=["hf", "vllm"],
                   help="generation engine: hf (transformers generate) or vllm (vLLM's CUDA "
                        "build on a GPU, or its CPU build)")
    p.add_argument("--vllm-dtype", default=None,
                   choices=["auto", "bfloat16", "float16", "float32"],
                   help="deprecated alias of --dtype")
    p.add_argument("--device", default="auto",
                   help="auto (cuda when a GPU is visible, else cpu) | cpu | cuda | cuda:N")
    p.add_argument("--dtype", default=None, choices=["auto", "bfloat16", "float16", "float32"],
                   help="weights dtype, both engines (default auto: the checkpoint's on a "
                        "GPU, float32 on CPU; vllm serves the loaded model's dtype)")
    p.add_argument("--data-parallel", default="1", metavar="N|auto",
                   help="worker processes, one device each (a GPU of its own), each taking a "
                        "shard of the items (default 1; auto: one per visible GPU)")
    add_judge_arguments(p)


def add_judge_arguments(p: argparse.ArgumentParser) -> None:
    """The judge for the steps the official pipelines run through GPT (eval/judge.py)."""
    p.add_argument("--judge", default=None, metavar="URL_OR_PATH",
                   help="judge for the official GPT steps (MathVista extraction, MathVerse "
                        "extraction and scoring): an OpenAI-compatible API root "
                        "(http(s)://.../v1) or a local model (folder, hub id, tiny: spec); "
                        "its outputs are cached in items.jsonl, and the summary reports the "
                        "judged verdicts beside the rule-based ones")
    p.add_argument("--judge-model", default=None, metavar="NAME",
                   help="the model a URL judge asks for (required with a URL)")
    p.add_argument("--judge-max-tokens", type=int, default=1024,
                   help="most tokens per judge output")
    p.add_argument("--judge-concurrency", type=int, default=8,
                   help="parallel requests to a URL judge (a local judge's batch size)")
    p.add_argument("--judge-retries", type=int, default=3,
                   help="URL judge: retries of a failed connection, timeout, 429 or 5xx "
                        "(exponential backoff from 1 s)")
    p.add_argument("--judge-timeout", type=float, default=120.0, metavar="SECONDS",
                   help="URL judge: wall-clock seconds one request may take, connecting, "
                        "sending and reading the whole reply (each retry has its own); "
                        "replies over 4 MiB are refused, and the API key is never shown")
    p.add_argument("--judge-api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="environment variable holding the URL judge's API key (sent when set)")


def make_judge(args: argparse.Namespace):
    """The judge the flags name, or None."""
    if args.judge is None:
        return None
    from .judge import make_judge as make

    return make(args.judge, args.judge_model, max_tokens=args.judge_max_tokens,
                concurrency=args.judge_concurrency, api_key_env=args.judge_api_key_env,
                retries=args.judge_retries, timeout_s=args.judge_timeout)


def run(args: argparse.Namespace) -> int:
    from .judge import JudgeError
    from .runner import markdown_table

    try:
        # stdout carries the summary only (``--json`` is parsed by scripts): what libraries
        # print while models load (DeepSpeed's accelerator line, ...) goes to stderr
        with contextlib.redirect_stdout(sys.stderr):
            summary = _work(args)
    except (BenchmarkError, JudgeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # writing the outputs: a full disk, a read-only folder
        print(f"error: {e.filename or 'output'}: {e.strerror or e}; free space or choose "
              "another --out", file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=2) if args.json else markdown_table(summary))
    return 0


def check_out(out: Path | None) -> None:
    """``--out`` must be a folder (made when missing) whose ``items.jsonl`` is a file:
    found before any work, not when hours of responses are written."""
    if out is None:
        return
    if out.exists() and not out.is_dir():
        raise BenchmarkError(f"--out {out}: is a file; give a folder (made when missing) "
                             "for items.jsonl and the summary.")
    items = out / "items.jsonl"
    if items.is_dir():
        raise BenchmarkError(f"--out {out}: {items} is a folder, where the per-item file "
                             "belongs; move it away or choose another --out.")


def _work(args: argparse.Namespace) -> dict:
    from .runner import EvalSettings, score_responses
    from .runner import run as run_eval

    judge = make_judge(args)
    check_out(args.out)
    if args.action == "score":
        if args.responses is None and args.out is None:
            raise BenchmarkError("vlcohort eval score needs --responses FILE.jsonl, or "
                                 "--out DIR holding an items.jsonl to re-score")
        summary = score_responses(args.benchmark, args.data_dir, args.responses, args.scorer,
                                  answer_style=args.answer_style, judge=judge, out=args.out)
    else:
        if not args.model:
            raise BenchmarkError("vlcohort eval needs --model PATH_OR_SPEC (repeatable)")
        if args.max_prompt_tokens < 0:
            raise BenchmarkError(f"--max-prompt-tokens {args.max_prompt_tokens}: give a "
                                 "number of tokens > 0, or 0 for no limit")
        summary = run_eval(EvalSettings(
            models=args.model, benchmarks=args.benchmark.split(","), data_dir=args.data_dir,
            out=args.out or Path("runs/eval"), samples=args.samples, limit=args.limit,
            prompt=args.prompt,
            max_new_tokens=args.max_new_tokens, max_prompt_tokens=args.max_prompt_tokens,
            temperature=args.temperature,
            batch_size=args.batch_size, scorer=args.scorer, progress=not args.no_progress,
            engine=args.engine, vllm_dtype=args.vllm_dtype or "auto",
            answer_style=args.answer_style, device=args.device,
            dtype=args.dtype or "auto", data_parallel=args.data_parallel,
            since=args.since, until=args.until), judge=judge)
    return summary
