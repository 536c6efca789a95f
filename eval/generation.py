"""Generation for ``vlcohort eval``: prompts -> completions -> ``items.jsonl`` lines.

Flow of one run (:func:`run_generation`):

1. **Placement** (:func:`plan_placement`): device, dtype and the number of data-parallel
   workers are checked before any model loads, so a wrong combination (cuda asked with
   no GPU visible, float16 on CPU, more workers than GPUs) costs a second, not a load.
2. **Resume**: part files a killed run left (``items.part<i>.jsonl``) are merged into
   ``items.jsonl`` first; a truncated final line (the signature of a kill mid-write) is
   dropped with a warning naming the file and line. What ``items.jsonl`` then holds is
   not generated again.
3. **Workers**: the missing items of each model are dealt round-robin to N workers
   (worker i takes items i, i+N, ...: a deterministic shard whose prompt lengths look
   like everyone else's). One worker runs in this process; with N > 1 each is a spawned
   process with its own device (a GPU of its own, or a share of the CPU cores) and its
   own engine, appending to its own part file as batches finish.
4. **Length-sorted batches** (hf engine): a worker renders its items once to measure
   their prompts (text tokens + each image's tokens, the family's rule), then batches
   them longest first: less left padding per batch, and a memory problem shows in the
   first batch, not after hours. Greedy texts do not depend on the batch a prompt sits in
   (left padding is masked); a test checks it item by item.
5. **Merge**: part files are appended to ``items.jsonl`` in the canonical order (model,
   benchmark, item, sample), so the file is the same whatever the number of workers or
   the batching; a record whose key is already there is not appended twice.

An item whose image cannot be opened at render time is skipped (moved to the
benchmark's ``skipped`` list with the reason and the file), not a crash; the summary
counts it beside the loader's skips.
"""

from __future__ import annotations

import json
import math
import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from vlcohort import bounded_json
from vlcohort.answers.grading import get_grader
from vlcohort.data.problems import Problem

from .datasets import BenchmarkData, BenchmarkError, SkippedItem, read_jsonl
from .items import EvalSettings, prompt_view, record_key, score_record

DTYPES = ("auto", "bfloat16", "float16", "float32")
ENGINES = ("hf", "vllm")

# --------------------------------------------------------------------------- placement


@dataclass(frozen=True)
class Placement:
    """Where the workers run. ``device`` is what one in-process worker uses (``cpu``,
    ``cuda``, ``cuda:N``); with ``gpu_ids`` set, worker i is a spawned process that sees
    only GPU ``gpu_ids[i]`` (as its ``cuda:0``: vLLM picks its GPU that way, and a worker
    never opens a CUDA context on a GPU that is not its own)."""

    engine: str
    device: str
    dtype: str
    """The engine's dtype (vLLM's ``dtype``; hf: what ``from_pretrained`` gets)."""
    workers: int
    gpu_ids: tuple[str, ...] | None = None

    @property
    def spawn(self) -> bool:
        return self.workers > 1 or self.gpu_ids is not None


def visible_gpus() -> list[str]:
    """The GPUs this process may use, named as ``CUDA_VISIBLE_DEVICES`` names them (so a
    worker's own ``CUDA_VISIBLE_DEVICES`` is one entry of the parent's)."""
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [x.strip() for x in env.split(",") if x.strip()] if env else []
    return (names + [str(i) for i in range(len(names), n)])[:n]


def effective_dtype(dtype: str | None, vllm_dtype: str | None) -> str:
    """``--dtype``, or the deprecated ``--vllm-dtype`` when only it is given."""
    dtype = dtype or "auto"
    if vllm_dtype in (None, "auto"):
        return dtype
    if dtype not in ("auto", vllm_dtype):
        raise BenchmarkError(f"--dtype {dtype} and --vllm-dtype {vllm_dtype} disagree; "
                             "--vllm-dtype is a deprecated alias of --dtype: give --dtype only.")
    print("note: --vllm-dtype is deprecated; use --dtype (it applies to both engines)",
          file=sys.stderr)
    return vllm_dtype


def _parse_workers(data_parallel: int | str) -> int | None:
    """``--data-parallel``: a positive count, or None for ``auto``."""
    if str(data_parallel).strip().lower() == "auto":
        return None
    try:
        n = int(str(data_parallel))
    except ValueError:
        n = 0
    if n < 1:
        raise BenchmarkError(f"--data-parallel {data_parallel!r}: give a positive number of "
                             "workers, or auto (one per visible GPU).")
    return n


def _resolve_device(device: str, gpus: int) -> str:
    """``auto`` -> cuda when a GPU is visible, else cpu; anything asked that is not there
    is an error saying what is."""
    device = (device or "auto").strip().lower()
    if device == "auto":
        return "cuda" if gpus else "cpu"
    if device == "cpu":
        return device
    if device == "cuda" or device.startswith("cuda:"):
        index = device[5:]
        if gpus == 0:
            raise BenchmarkError(f"--device {device}: no CUDA GPU is visible here "
                                 "(torch.cuda.is_available() is False, or CUDA_VISIBLE_DEVICES "
                                 "hides them). Use --device cpu, or auto.")
        if index and (not index.isdigit() or int(index) >= gpus):
            raise BenchmarkError(f"--device {device}: this process sees {gpus} GPU(s), "
                                 f"cuda:0 to cuda:{gpus - 1}.")
        return device
    raise BenchmarkError(f"--device {device!r}: not one of auto, cpu, cuda, cuda:N.")


def _resolve_dtype(dtype: str, device: str, engine: str) -> str:
    if dtype not in DTYPES:
        raise BenchmarkError(f"--dtype {dtype!r}: not one of {', '.join(DTYPES)}.")
    if device == "cpu" and dtype == "float16":
        raise BenchmarkError("--dtype float16 on CPU: PyTorch's CPU kernels for float16 are "
                             "slow or missing; use bfloat16 or float32 (auto is float32 on "
                             "CPU), or a GPU (--device cuda).")
    if engine == "hf" and dtype == "auto":
        # the checkpoint's own dtype on a GPU (bfloat16 for the released VLMs); float32 on
        # CPU, where half-precision matmuls are slow
        return "float32" if device == "cpu" else "auto"
    return dtype


def plan_placement(engine: str, device: str, dtype: str, data_parallel: int | str,
                   gpus: Sequence[str]) -> Placement:
    """Check the device / dtype / workers combination and say where each worker runs.

    Pure (``gpus`` is :func:`visible_gpus`), so every wrong combination is a unit test.
    ``--data-parallel auto`` is one worker per visible GPU (one on CPU). Several workers
    on CPU share its cores (used by the tests; on a real run it rarely pays)."""
    if engine not in ENGINES:
        raise BenchmarkError(f"--engine {engine!r}: not one of {', '.join(ENGINES)}")
    dev = _resolve_device(device, len(gpus))
    dtype = _resolve_dtype(dtype, dev, engine)
    asked = _parse_workers(data_parallel)
    workers = asked if asked is not None else (len(gpus) if dev == "cuda" else 1)
    if workers == 1:
        if engine == "vllm" and dev.startswith("cuda:") and dev != "cuda:0":
            # vLLM takes its GPU from CUDA_VISIBLE_DEVICES: one spawned worker that sees it
            return Placement(engine, "cuda", dtype, 1, (gpus[int(dev[5:])],))
        return Placement(engine, dev, dtype, 1)
    if dev.startswith("cuda:"):
        raise BenchmarkError(f"--data-parallel {workers} with --device {dev}: the workers take "
                             f"cuda:0 to cuda:{workers - 1}, one each; give --device cuda (or "
                             "auto), or pick the GPUs with CUDA_VISIBLE_DEVICES.")
    if dev == "cuda":
        if workers > len(gpus):
            raise BenchmarkError(f"--data-parallel {workers}: only {len(gpus)} GPU(s) are "
                                 "visible and each worker needs its own; give at most "
                                 f"{len(gpus)}, or auto.")
        return Placement(engine, "cuda", dtype, workers, tuple(gpus[:workers]))
    return Placement(engine, "cpu", dtype, workers)


def placement_for(settings: EvalSettings) -> Placement:
    """The run's placement; every error here comes before any model loads."""
    return plan_placement(settings.engine, settings.device,
                          effective_dtype(settings.dtype, settings.vllm_dtype),
                          settings.data_parallel, visible_gpus())


# --------------------------------------------------------------------------- resumable files


def drop_truncated_tail(path: Path) -> int | None:
    """Repair a JSONL file a killed run was writing: a last line without its newline that
    does not parse is cut off (warned, naming the file and line: that item is generated
    again); one that parses gets its newline, so the next append starts a line of its own.
    Returns the dropped line's number, or None. A bad line *with* its newline is not a
    kill's trace: :func:`read_jsonl` reports it as an error."""
    path = Path(path)
    if not path.is_file():
        return None
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return None
    cut = data.rfind(b"\n") + 1
    tail = data[cut:]
    lineno = data.count(b"\n") + 1
    if not tail.strip():
        os.truncate(path, cut)
        return None
    try:
        ok = isinstance(bounded_json.loads(tail), dict)
    except bounded_json.BadJSON:
        ok = False
    if ok:
        with open(path, "ab") as f:
            f.write(b"\n")
        return None
    os.truncate(path, cut)
    shown = tail[:80].decode("utf-8", "replace")
    print(f"warning: {path}: line {lineno}: truncated final line dropped (a killed run's last "
          f"write; its item is generated again): {shown!r}", file=sys.stderr)
    return lineno


def read_resumable(path: Path) -> list[dict]:
    """The records of an ``items.jsonl`` (or part file) after :func:`drop_truncated_tail`;
    any other malformed line is an error naming the file and line."""
    path = Path(path)
    if not path.is_file():
        return []
    drop_truncated_tail(path)
    return [obj for _, obj in read_jsonl(path)]


def part_path(items_path: Path, index: int) -> Path:
    return Path(items_path).with_name(f"{Path(items_path).stem}.part{index}.jsonl")


def _status_path(items_path: Path, index: int) -> Path:
    return Path(items_path).with_name(f"{Path(items_path).stem}.part{index}.status.json")


def _part_files(items_path: Path) -> list[Path]:
    stem = Path(items_path).stem
    found = Path(items_path).parent.glob(f"{stem}.part*.jsonl")
    return sorted(found, key=lambda p: (len(p.name), p.name))


def merge_parts(items_path: Path, order: dict[tuple, int]) -> int:
    """Append the part files' records to ``items_path`` in canonical order (``order``:
    key -> rank; unknown keys after, in file order), skip any key already there, fsync,
    then delete the parts. Idempotent: a crash mid-merge leaves the parts, and the next
    merge appends only what is missing. Returns the records appended."""
    items_path = Path(items_path)
    parts = _part_files(items_path)
    for stale in items_path.parent.glob(f"{items_path.stem}.part*.status.json"):
        stale.unlink()
    if not parts:
        return 0
    seen = {record_key(r) for r in read_resumable(items_path)}
    new: list[tuple[tuple, dict]] = []
    for part_no, part in enumerate(parts):
        for line_no, rec in enumerate(read_resumable(part)):
            k = record_key(rec)
            if k in seen:
                continue
            seen.add(k)
            new.append(((order.get(k, math.inf), part_no, line_no), rec))
    new.sort(key=lambda x: x[0])
    if new:
        with open(items_path, "a", encoding="utf-8") as f:
            for _, rec in new:
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
    for part in parts:
        part.unlink()
    return len(new)


def canonical_order(models: Sequence[str], data: dict[str, BenchmarkData],
                    samples: int) -> dict[tuple, int]:
    """key -> rank in (model, benchmark, item, sample) order: the order ``items.jsonl``
    gets, whatever the workers and batches."""
    keys = ((name, str(p.id), spec, s) for spec in models for name, d in data.items()
            for p in d.problems for s in range(samples))
    return {k: i for i, k in enumerate(keys)}


# --------------------------------------------------------------------------- batching


def shard(todo: Sequence, index: int, workers: int) -> list:
    """Worker ``index``'s items: every ``workers``-th from ``index`` (deterministic, and
    each shard's prompt lengths spread like the whole list's)."""
    return list(todo[index::workers])


def length_order(lengths: Sequence[int]) -> list[int]:
    """Indices by prompt length, longest first; equal lengths keep their input order."""
    return sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))


def prompt_tokens(adapter, rendered) -> int:
    """Prompt tokens of a rendered prompt: its text's tokens plus each image's (the
    family's rule for the whole prompt's images,
    :meth:`~vlcohort.processors.base.Adapter.prompt_image_token_counts`), without running the image
    processor: a sort key, exact to the few placeholder tokens."""
    n = len(adapter.tokenizer(rendered.text, add_special_tokens=False)["input_ids"])
    try:
        n += sum(adapter.prompt_image_token_counts(rendered.images))
    except NotImplementedError:  # a family without the rule: sorted by text alone
        pass
    return n


# --------------------------------------------------------------------------- engines


def text_generator(settings: EvalSettings, adapter, model, worker: int = 0,
                   dtype: str | None = None):
    """``rendered prompts -> texts`` for one model: greedy unless settings ask for samples.

    ``hf``: one batched ``generate`` (``generate_texts``) on the model's device. ``vllm``:
    one vLLM engine per worker, serving the loaded weights; each call's requests are
    seeded from the run's seed, the worker and a call counter, so a rerun with the same
    workers samples the same texts. Returns the function and a ``close`` to free the
    engine."""
    temperature = settings.temperature if settings.samples > 1 else None
    if settings.engine == "hf":
        from vlcohort.monitoring.heldout import generate_texts

        return (lambda rendered: generate_texts(adapter, model, rendered,
                                                settings.max_new_tokens, temperature)), (lambda: None)
    if settings.engine != "vllm":
        raise BenchmarkError(f"--engine {settings.engine!r}: not one of hf, vllm")
    from vlcohort.config_schema import VLLMConfig
    from vlcohort.rollout.base import SamplingParams
    from vlcohort.rollout.engines import make_engine
    from vlcohort.rollout.vllm import EngineUnavailableError, check_available

    try:
        # On vLLM's CPU build enforce_eager skips torch.compile, which took ~90 s of every
        # engine start plus a warm-up over the whole context, and bought nothing here.
        eager = check_available() == "cpu"
        engine = make_engine("vllm", adapter, model, vllm=VLLMConfig(
            sleep_mode=False, dtype=dtype or effective_dtype(settings.dtype, settings.vllm_dtype),
            gpu_memory_utilization=0.8, max_num_seqs=max(settings.batch_size, 1),
            enforce_eager=eager), seed=settings.seed)
    except EngineUnavailableError as e:
        raise BenchmarkError(f"--engine vllm: {e}") from e
    # vLLM: temperature 0 is greedy (argmax), as transformers' do_sample=False
    sampling = SamplingParams(max_new_tokens=settings.max_new_tokens,
                              temperature=0.0 if temperature is None else temperature)
    calls = [0]

    def generate(rendered):
        calls[0] += 1
        seed = settings.seed + worker * 1_000_003 + calls[0] * len(rendered)
        return engine.generate(rendered, 1, sampling, seed=seed).texts

    return generate, engine.close


def _progress(total: int, desc: str, enabled: bool, position: int = 0):
    try:
        from tqdm import tqdm
    except ImportError:  # progress is a nicety, never a dependency
        return None
    return tqdm(total=total, desc=desc, disable=not enabled, file=sys.stderr, position=position)


# --------------------------------------------------------------------------- one worker


@dataclass
class ShardTask:
    """What one worker needs (pickled to a spawned worker)."""

    index: int
    workers: int
    spec: str
    placement: Placement
    settings: EvalSettings
    todo: list  # [(benchmark, Problem, sample)]
    items_path: Path
    sources: dict[str, str]  # benchmark -> its data file (named in skip reasons)


@dataclass
class ShardResult:
    written: int = 0
    skipped: list[tuple[str, str, str, str]] = field(default_factory=list)
    """(benchmark, problem id, reason, detail) of the items that could not be rendered."""
    error: str | None = None


def _view(problem: Problem, settings: EvalSettings) -> tuple[Problem, str | None]:
    view, instruction = prompt_view(problem, settings.prompt)
    return view, settings.instruction if settings.instruction is not None else instruction


def _render(adapter, name: str, problem: Problem, settings: EvalSettings, sources: dict,
            skipped: list):
    """The rendered prompt, or None with the reason added to ``skipped`` (an image that
    cannot be opened, an empty question, a prompt over ``settings.max_prompt_tokens``:
    the item is skipped, the run goes on). Images
    given to a text-only model are no bad item but the wrong model: an error at once."""
    from vlcohort.processors import ProblemInputError

    view, instruction = _view(problem, settings)
    try:
        return adapter.render(view, settings.system_prompt, instruction,
                              max_tokens=settings.max_prompt_tokens)
    except ProblemInputError as e:
        if e.reason == "images_for_text_model":
            raise BenchmarkError(f"{name} ({sources.get(name, name)}): {e}") from e
        skipped.append((name, problem.id, e.reason, f"{sources.get(name, name)}: {e}"))
        return None


def _record(settings: EvalSettings, spec: str, name: str, problem: Problem, sample: int,
            text: str, grader) -> dict[str, Any]:
    return {"benchmark": name, "id": problem.id, "model": spec, "sample": sample,
            "prompt": settings.prompt, "response": text,
            **({"instruction": settings.instruction} if settings.instruction is not None else {}),
            **({"answer_style": settings.answer_style} if settings.answer_style != "auto" else {}),
            **score_record(problem, text, grader, settings.answer_style, scorer=settings.scorer)}


def generate_shard(settings: EvalSettings, spec: str, todo: list, adapter,
                   generate_fn: Callable, out_path: Path, sources: dict | None = None,
                   length_sorted: bool = True, position: int = 0) -> ShardResult:
    """Generate and score ``todo`` (one worker's items), appending each batch to
    ``out_path`` as it is done. With ``length_sorted`` the items are batched by prompt
    length, longest first (each item rendered once more to measure it); without, in
    input order (plain batching, the peer ``bench/eval_generation.py`` measures)."""
    sources = sources or {}
    grader = get_grader()
    result = ShardResult()
    if length_sorted:
        lengths: dict[tuple[str, str], int | None] = {}
        for name, p, _ in todo:  # the samples of an item share its length
            if (name, p.id) not in lengths:
                r = _render(adapter, name, p, settings, sources, result.skipped)
                lengths[(name, p.id)] = None if r is None else prompt_tokens(adapter, r)
        todo = [t for t in todo if lengths[(t[0], t[1].id)] is not None]
        todo = [todo[i] for i in length_order([lengths[(n, p.id)] for n, p, _ in todo])]
    bad = {(n, pid) for n, pid, _, _ in result.skipped}
    bar = _progress(len(todo), f"eval {spec}" + (f" [{position}]" if position else ""),
                    settings.progress, position)
    with open(out_path, "a", encoding="utf-8") as f:
        for start in range(0, len(todo), settings.batch_size):
            chunk = [t for t in todo[start:start + settings.batch_size] if (t[0], t[1].id) not in bad]
            rendered = []
            for name, p, s in chunk:
                r = _render(adapter, name, p, settings, sources, result.skipped)
                if r is None:
                    bad.add((name, p.id))
                rendered.append(r)
            kept = [(t, r) for t, r in zip(chunk, rendered) if r is not None]
            texts = generate_fn([r for _, r in kept]) if kept else []
            for ((name, p, s), _), text in zip(kept, texts):
                f.write(json.dumps(_record(settings, spec, name, p, s, text, grader),
                                   ensure_ascii=False) + "\n")
                result.written += 1
            f.flush()
            if bar is not None:
                bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return result


def _load(spec: str, placement: Placement):
    """Adapter and model of ``spec`` in the placement's dtype (hf: on its device)."""
    from vlcohort.processors import AdapterOptions, adapter_for

    try:
        adapter = adapter_for(spec, AdapterOptions(dtype=placement.dtype))
        model = adapter.load_model()
    except Exception as e:  # missing folder, bad config, broken weights
        raise BenchmarkError(f"model {spec!r} could not be loaded: {type(e).__name__}: "
                             f"{e}. Give a checkpoint folder written by save_pretrained, "
                             "a hub id or a tiny:<name> spec (vlcohort tiny lists them).") from e
    if placement.engine == "hf" and placement.device != "cpu":
        model = model.to(placement.device)  # (a vLLM engine loads its own copy on its device)
    return adapter, model


def run_shard(task: ShardTask) -> ShardResult:
    """One worker: load the model on its device, generate its shard into its part file."""
    import torch

    if task.placement.gpu_ids is not None:  # before CUDA starts in this process
        os.environ["CUDA_VISIBLE_DEVICES"] = task.placement.gpu_ids[task.index]
    if task.placement.device == "cpu" and task.workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // task.workers))
    adapter, model = _load(task.spec, task.placement)
    torch.manual_seed(task.settings.seed)
    generate_fn, close = text_generator(task.settings, adapter, model, worker=task.index,
                                        dtype=task.placement.dtype)
    try:
        return generate_shard(task.settings, task.spec, task.todo, adapter, generate_fn,
                              part_path(task.items_path, task.index), task.sources,
                              task.settings.length_sorted, task.index)
    finally:
        close()


def _shard_main(task: ShardTask) -> None:
    """A spawned worker's entry: run the shard, leave the outcome in a status file (the
    part file holds the records; a worker killed outright leaves no status, and its exit
    code tells)."""
    try:
        result = run_shard(task)
    except BaseException as e:  # reported to the parent, which raises
        traceback.print_exc(file=sys.stderr)
        message = str(e) if isinstance(e, BenchmarkError) else f"{type(e).__name__}: {e}"
        result = ShardResult(error=message)
    status = _status_path(task.items_path, task.index)
    tmp = status.with_suffix(".tmp")
    tmp.write_text(json.dumps({"written": result.written, "skipped": result.skipped,
                               "error": result.error}))
    os.replace(tmp, status)
    if result.error is not None:
        sys.exit(1)


def _run_workers(tasks: list[ShardTask]) -> list[ShardResult]:
    """Run the tasks in spawned processes (each its own device); wait for all."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")  # CUDA cannot be forked; a clean interpreter per worker
    procs = [ctx.Process(target=_shard_main, args=(t,), name=f"vlcohort-eval-{t.index}")
             for t in tasks]
    started = []
    try:
        for p in procs:
            p.start()
            started.append(p)
        for p in started:
            p.join()
    except BaseException:
        for p in started:  # our own children only; their part files stay for the resume
            if p.is_alive():
                p.terminate()
            p.join()
        raise
    results = []
    for t, p in zip(tasks, procs):
        status = _status_path(t.items_path, t.index)
        if status.is_file():
            s = json.loads(status.read_text())
            status.unlink()
            results.append(ShardResult(s["written"], [tuple(x) for x in s["skipped"]], s["error"]))
        else:
            results.append(ShardResult(error=f"worker exited with code {p.exitcode} before "
                                             "reporting (killed? out of memory?)"))
    return results


# --------------------------------------------------------------------------- the run


def _record_skips(data: dict[str, BenchmarkData], skipped: Sequence[tuple]) -> None:
    """Move render-time skips from a benchmark's problems to its skipped list (once per
    item), and say so."""
    first: dict[str, dict[str, SkippedItem]] = {}
    for name, pid, reason, detail in skipped:
        first.setdefault(name, {}).setdefault(pid, SkippedItem(pid, reason, detail))
    moved: dict[str, list[SkippedItem]] = {}
    for name, by_id in first.items():
        d = data[name]
        present = {p.id for p in d.problems}
        moved[name] = [item for pid, item in by_id.items() if pid in present]
        d.problems = [p for p in d.problems if p.id not in by_id]
        d.skipped.extend(moved[name])
    for name, items in moved.items():
        if not items:
            continue
        print(f"{name}: skipped {len(items)} item(s) at render time; first: {items[0].id} "
              f"({items[0].reason}: {items[0].detail})", file=sys.stderr)


def run_generation(settings: EvalSettings, data: dict[str, BenchmarkData], items_path: Path) -> int:
    """Generate what ``items.jsonl`` lacks (merging a killed run's part files first);
    returns the responses this run generated. Items that cannot be rendered move from
    ``data[name].problems`` to ``data[name].skipped``.

    With several workers (``settings.data_parallel``) they are spawned processes: a script
    that calls this must keep its top level under ``if __name__ == "__main__":`` (the
    spawn start method imports the caller's main module in each worker)."""
    placement = placement_for(settings)
    items_path = Path(items_path)
    order = canonical_order(settings.models, data, settings.samples)
    recovered = merge_parts(items_path, order)
    if recovered:
        print(f"merged {recovered} responses from a previous run's part files into {items_path}",
              file=sys.stderr)
    done = {record_key(r) for r in read_resumable(items_path)}
    sources = {name: str(d.path) for name, d in data.items()}
    written = 0
    for spec in settings.models:
        todo = [(name, p, s) for name, d in data.items() for p in d.problems
                for s in range(settings.samples) if (name, str(p.id), spec, s) not in done]
        if not todo:
            continue
        n = min(placement.workers, len(todo))
        tasks = [ShardTask(i, n, spec, placement, settings, shard(todo, i, n), items_path, sources)
                 for i in range(n)]
        try:
            results = _run_workers(tasks) if placement.spawn else [run_shard(tasks[0])]
        finally:  # what the workers finished is kept, whatever stopped them
            written += merge_parts(items_path, order)
        _record_skips(data, [s for r in results for s in r.skipped])
        errors = [(t, r.error) for t, r in zip(tasks, results) if r.error]
        if errors:
            raise BenchmarkError("; ".join(f"worker {t.index} of {n} ({spec}): {e}"
                                           for t, e in errors)
                                 + f". What the workers finished is kept in {items_path}; "
                                 "rerun to resume.")
    return written
