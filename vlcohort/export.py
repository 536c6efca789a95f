"""``vlcohort export``: one trained agent of a run -> a folder that ``from_pretrained``,
``vllm serve`` and the Hugging Face hub take as it is.

A run's checkpoint is for resuming: ``<run>/checkpoints/step-N/<agent>/`` holds the
agent's ``save_pretrained`` folder next to its optimizer state, and a LoRA agent's folder
holds only its adapter (``adapter_config.json`` + ``adapter_model.safetensors``, which
``PeftModel.save_pretrained`` writes), so serving it needs peft and the base weights. The
export writes what a user serves::

    <out>/config.json, model*.safetensors   the weights, LoRA folded in (merge_and_unload)
    <out>/generation_config.json            the family's stop tokens as eos, its image
                                            placeholders suppressed: plain ``generate``
                                            stops and answers as the policy did in training
    <out>/tokenizer*, processor / chat template files
    <out>/README.md                         model card: base model, family, method, steps,
                                            data, the agent's latest metrics, and how it
                                            was prompted in training
    <out>/prompt_recipe.json                that prompt recipe, machine-readable: format,
                                            system prompt, instruction, option layout and
                                            order, answer style and kind, and one example
                                            prompt rendered by the agent's own adapter
    <out>/prompt_format.jinja               only when the agent was prompted through a
                                            Jinja file of the run's (``prompt.format``)

An agent answers near chance when prompted otherwise than it was trained (another option
layout, no answer instruction, a chat template where it learnt a plain format), so the
recipe travels with the weights; :func:`recipe_adapter` and :func:`render_with_recipe`
prompt an exported folder exactly as training did.

The folder is built in a hidden sibling and renamed into place when complete, so a failed
export leaves no half-written ``<out>``. Errors that a person fixes (no checkpoint, an
unknown agent, a non-empty ``--out``, a checkpoint that fails its manifest check, a hub
push that cannot reach the hub) are :class:`ExportError`: one message, exit 2.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlcohort import run_folder
from vlcohort.errors import RunError

#: The file peft writes beside a LoRA adapter's weights: its presence marks an adapter folder.
ADAPTER_CONFIG = "adapter_config.json"
#: Substrings of parameter names that only a PEFT-wrapped (unmerged) model has.
PEFT_MARKERS = ("lora_A", "lora_B", "lora_embedding", "base_layer", "modules_to_save")
#: The exported folder's machine-readable prompt recipe (:func:`prompt_recipe`).
PROMPT_RECIPE = "prompt_recipe.json"
#: A Jinja prompt format of the run's own, copied into the exported folder under this name.
PROMPT_FORMAT_FILE = "prompt_format.jinja"
#: Version of the :data:`PROMPT_RECIPE` layout (raised when a field changes meaning).
RECIPE_VERSION = 1


class ExportError(RunError):
    """An export that cannot be done as asked; the message says which file or option and
    what to do (the command prints it and exits 2)."""


@dataclass
class Exported:
    """What :func:`export_agent` wrote."""

    out: Path
    checkpoint: Path  # <run>/checkpoints/step-N
    agent: str
    step: int
    merged_lora: bool  # the checkpoint held a LoRA adapter, folded into the weights


# ------------------------------------------------------------------ finding the checkpoint


def checkpoint_folder(run_dir: Path, step: str | int = "latest") -> Path:
    """``<run>/checkpoints/step-N`` for ``step`` (an int, a digit string or ``latest``),
    complete (its ``state.json`` written last by the save), or an :class:`ExportError`
    listing the steps the run has."""
    from vlcohort.training import checkpoint as ckpt

    root = run_dir / ckpt.CHECKPOINTS
    if not run_dir.is_dir():
        raise ExportError(f"{run_dir}: no such folder; give a run folder (a run's "
                          "run.output_dir, holding config.yaml and checkpoints/)")
    steps = sorted(ckpt.complete_steps(root)) if root.is_dir() else []
    if not steps:
        arms = sorted(p.name for p in run_dir.iterdir()
                      if p.is_dir() and (p / ckpt.CHECKPOINTS).is_dir())
        hint = (f"; it is a comparison run: export one arm's folder, e.g. {run_dir / arms[0]} "
                f"(arms here: {', '.join(arms)})" if arms else
                "; train with checkpoint.every > 0 or let the run finish (the last step "
                "is always saved)")
        raise ExportError(f"{root}: no complete checkpoint in this run folder{hint}")
    if str(step) == "latest":
        try:
            latest = ckpt.latest_checkpoint(run_dir)
        except ckpt.CheckpointError as e:  # a `latest` naming something outside the run
            raise ExportError(f"{e} (or export a step: --step N)") from None
        assert latest is not None  # steps is not empty
        return latest
    try:
        n = int(step)
    except ValueError:
        raise ExportError(f"--step {step!r}: expected a step number or 'latest'") from None
    if n not in steps:
        raise ExportError(f"--step {n}: {root} has no complete step-{n}; steps saved: "
                          f"{', '.join(map(str, steps))} (or --step latest)")
    return root / f"step-{n}"


def saved_agents(folder: Path) -> list[str]:
    """The agent folders of a checkpoint (each holds a config or an adapter config)."""
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and (
        (p / "config.json").is_file() or (p / ADAPTER_CONFIG).is_file()))


def checkpoint_problems(folder: Path, agent: str) -> list[str]:
    """:func:`~vlcohort.training.checkpoint.verify_checkpoint`'s findings that concern the
    files exported: this agent's weights and processor (a damaged peer, or a damaged ZeRO
    optimizer partition, which only a resume reads, does not stop it) or the manifest."""
    from vlcohort.training.checkpoint import MANIFEST, ZERO, verify_checkpoint

    mine, zero = str(folder / agent) + os.sep, str(folder / agent / ZERO) + os.sep
    return [p for p in verify_checkpoint(folder)
            if (mine in p and zero not in p) or MANIFEST in p]


def run_config(run_dir: Path):
    """The run's saved ``config.yaml`` as a Config, or None when the folder has none (a
    checkpoint copied out of its run: a full model still exports, a LoRA adapter falls
    back to the base named in its adapter config)."""
    from vlcohort.config import load_config

    path = run_dir / "config.yaml"
    return load_config(path) if path.is_file() else None


def agent_config(cfg, name: str):
    """``agents.N`` of the run named ``name`` (None without a config or such an agent)."""
    if cfg is None:
        return None
    return next((mc for mc in cfg.agents if mc.name == name), None)


# ------------------------------------------------------------------------- the weights


def is_adapter_folder(folder: Path) -> bool:
    """A LoRA agent's checkpoint: peft's adapter files, not a full model."""
    return (folder / ADAPTER_CONFIG).is_file()


def lora_base(folder: Path, mc) -> str:
    """The base model a LoRA adapter was trained on: the run's ``agents.N.path`` (what the
    trainer loaded it onto), else the ``base_model_name_or_path`` peft recorded."""
    if mc is not None and mc.path:
        return mc.path
    try:
        base = json.loads((folder / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    except ValueError as e:
        raise ExportError(f"{folder / ADAPTER_CONFIG}: unreadable ({e})") from None
    if not base:
        raise ExportError(f"{folder}: a LoRA adapter, but neither the run's config.yaml nor "
                          f"its {ADAPTER_CONFIG} names the base model it was trained on")
    return str(base)


def load_for_export(folder: Path, mc, cfg=None) -> tuple[Any, Any, bool]:
    """(adapter, plain transformers model, merged) for an agent's checkpoint folder.

    A full model loads from the folder itself (its processor too) with the agent's
    options (dtype, attention; the prompt format as the run resolved it, ``cfg``'s
    ``prompt.format`` for an agent without its own); a LoRA adapter is put on its base the
    way the trainer resumes it (``agent._wrap_lora``: ``PeftModel.from_pretrained``) and
    folded in with ``merge_and_unload``, which returns the base class with the updated
    weights."""
    from vlcohort.processors import adapter_for
    from vlcohort.training.agent import adapter_options

    options = adapter_options(mc, cfg) if mc is not None else None
    if not is_adapter_folder(folder):
        adapter = adapter_for(folder, options)
        return adapter, adapter.load_model(), False
    from peft import PeftModel

    base = lora_base(folder, mc)
    try:
        adapter = adapter_for(base, options)
        model = adapter.load_model()
    except (OSError, ValueError) as e:
        raise ExportError(f"{folder}: a LoRA adapter on base {base!r}, which did not load "
                          f"({type(e).__name__}: {str(e).splitlines()[0][:300]}); the base "
                          "weights are needed to merge: make that path or hub id reachable") from e
    merged = PeftModel.from_pretrained(model, str(folder)).merge_and_unload()
    left = [n for n, _ in merged.named_parameters() if any(m in n for m in PEFT_MARKERS)]
    if left:  # merge_and_unload folds every LoRA layer; anything left would not serve
        raise ExportError(f"{folder}: after merging, LoRA parameters remain ({left[0]} ...); "
                          "this adapter type cannot be folded into the weights")
    return adapter, merged.eval(), True


def serving_generation_config(model, adapter):
    """The model's generation config with the family's stop tokens as ``eos_token_id``,
    its pad id and its image placeholders in ``suppress_tokens``: what the trainer passes
    to every ``generate`` call, so the exported folder stops and answers the same way
    without those arguments (vLLM reads ``eos_token_id`` from this file too)."""
    from transformers import GenerationConfig

    gen = getattr(model, "generation_config", None)
    gen = GenerationConfig.from_dict(gen.to_dict()) if gen is not None else \
        GenerationConfig.from_model_config(model.config)
    stops = adapter.stop_token_ids()
    gen.eos_token_id = stops if len(stops) != 1 else stops[0]
    gen.pad_token_id = adapter.pad_token_id()
    suppressed = adapter.suppressed_token_ids()
    gen.suppress_tokens = suppressed or None
    return gen


# -------------------------------------------------------------------------- model card


def latest_metrics(run_dir: Path, agent: str, step: int) -> dict[str, tuple[int, float]]:
    """The agent's newest value of each card metric at or before ``step``, with the step
    it was logged at: reward, rollout accuracy against gold, cohort agreement, held-out
    accuracy per task family. Empty without a ``metrics.jsonl``."""
    from vlcohort.monitoring.metrics import read_metrics

    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return {}
    wanted = (f"agent/{agent}/reward/mean", f"agent/{agent}/acc",
              f"agent/{agent}/pseudo_label/acc", "cohort/agreement")
    out: dict[str, tuple[int, float]] = {}
    for rec in read_metrics(path):
        s = int(rec.get("step", 0))
        if s > step:
            continue
        for k, v in rec.items():
            if (k in wanted or (k.startswith(f"eval/{agent}/") and k.endswith("/acc"))) \
                    and isinstance(v, (int, float)) and v == v:  # not NaN
                out[k] = (s, float(v))
    return out


def _hub_id(path: str) -> str | None:
    """``path`` when it reads as a hub id (``org/name``, not a local folder or tiny spec)."""
    if path.startswith("tiny:") or Path(path).exists() or path.count("/") != 1:
        return None
    return path


def data_line(cfg) -> str:
    d = cfg.data
    if d.source == "synthetic":
        return (f"synthetic (built-in drawn problems): {d.num_problems} problems, tasks "
                f"{', '.join(d.tasks)}")
    return f"{d.source}: {d.path} (preset {d.preset}, split {d.split})"


def model_card(*, agent: str, run_dir: Path, step: int, family: str, base: str,
               model_class: str, multimodal: bool, mc, cfg, merged: bool,
               metrics: dict[str, tuple[int, float]], recipe: dict[str, Any] | None = None) -> str:
    """A short hub model card (YAML front matter + markdown) for an exported agent, with
    how to prompt it (``recipe``: :func:`prompt_recipe`)."""
    method = cfg.method if cfg is not None else "unknown (no config.yaml in the run)"
    reward = getattr(getattr(cfg, "reward", None), "source", None)
    hub_base = _hub_id(base)
    front = ["---", "library_name: transformers",
             f"pipeline_tag: {'image-text-to-text' if multimodal else 'text-generation'}",
             "tags: [vlcohort, reinforcement-learning, grpo" + (f", {method}" if cfg else "")
             + (", lora" if merged else "") + "]"]
    if hub_base:
        front.append(f"base_model: {hub_base}")
    front.append("---")
    if merged and mc is not None:
        tuning = (f"LoRA r={mc.lora_rank}, alpha={mc.lora_alpha}, targets {mc.lora_targets}; "
                  "merged into the weights")
    else:
        tuning = "LoRA, merged into the weights" if merged else "full fine-tune"
    total = f" of {cfg.run.steps}" if cfg is not None else ""
    rows = [("base model", f"`{base}`"), ("family", family),
            ("method", method + (f" (reward: {reward})" if reward else "")),
            ("steps trained", f"{step}{total} (checkpoint step-{step})"),
            ("fine-tuning", tuning)]
    if cfg is not None:
        rows.append(("data", data_line(cfg)))
        peers = [f"{m.name} (`{m.path}`)" for m in cfg.agents if m.name != agent]
        if peers:
            rows.append(("cohort peers", ", ".join(peers)))
    lines = [*front, "", f"# {run_dir.name}: agent {agent}", "",
             "Trained with vlcohort (label-free reinforcement learning of a model cohort); "
             "exported with `vlcohort export`.", "",
             "| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), ""]
    names = {f"agent/{agent}/reward/mean": "reward (mean over rollouts)",
             f"agent/{agent}/acc": "rollout accuracy vs gold",
             f"agent/{agent}/pseudo_label/acc": "pseudo-label accuracy vs gold",
             "cohort/agreement": "cohort agreement"}
    from vlcohort.training.reward_sources import registry

    source = registry().get(reward)
    if source is not None and source.needs_gold:  # its label is gold: pseudo-label acc 1
        metrics = {k: v for k, v in metrics.items() if not k.endswith("/pseudo_label/acc")}
    if metrics:
        lines += ["## Metrics (metrics.jsonl, latest at or before the exported step)", "",
                  "| metric | value | step |", "|---|---|---|"]
        for key in sorted(metrics, key=lambda k: (k.startswith("eval/"), k)):
            s, v = metrics[key]
            label = names.get(key) or "held-out accuracy, " + key.split("/")[2]
            lines.append(f"| {label} | {v:.4f} | {s} |")
        lines.append("")
    else:
        lines += ["No metrics.jsonl in the run folder: no metrics recorded here.", ""]
    if recipe is not None:
        lines += recipe_card_lines(recipe)
    lines += ["## Use", "", "```python",
              f"from transformers import AutoProcessor, {model_class}",
              f'model = {model_class}.from_pretrained("<this folder or repo>")',
              'processor = AutoProcessor.from_pretrained("<this folder or repo>")', "```", "",
              "or serve it: `vllm serve <this folder or repo>`. `generation_config.json` "
              "carries the stop tokens the policy was trained with.", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------- prompt recipe


def training_prompt(cfg, agent: str) -> tuple[str | None, str | None, str]:
    """(system prompt, instruction, role) the agent's training prompts were rendered with:
    the run's ``prompt.system_prompt`` and ``prompt.instruction``, except for self-play's
    challenger (``self_play.challenger_system``, no instruction: it writes questions) and
    CoMAS (no instruction: each turn's own text says what to write)."""
    pr = cfg.prompt
    if cfg.method == "self_play":
        from vlcohort.config_checks import self_play_roles

        challenger, _ = self_play_roles(cfg)
        if cfg.agents[challenger].name == agent:
            return (cfg.self_play.challenger_system, None,
                    "self-play challenger: it was prompted to write questions")
        return pr.system_prompt, pr.instruction, "self-play solver: it answered questions"
    if cfg.method == "comas":
        return (pr.system_prompt, None, "CoMAS: solve, critique and judge turns, each turn's "
                "text saying what to write (vlcohort/recipes/comas.py); no instruction added")
    return pr.system_prompt, pr.instruction, "solver: it answered the run's problems"


def option_order(cfg) -> str:
    """How the options of the agent's training problems were ordered, from ``data.*``."""
    d = cfg.data
    if d.source != "synthetic":
        return ("as each record lists them (its options column, or the options parsed out "
                "of the question), not reordered")
    if d.shuffle_options:
        return ("shuffled per problem (data.shuffle_options=true): a letter names no fixed "
                "option; the model must read the options")
    from vlcohort.data.synthetic import COLOURS, SHAPES

    return (f"a fixed order (data.shuffle_options=false): colours {', '.join(COLOURS)}, "
            f"shape kinds {', '.join(SHAPES)}, so a letter always names the same option")


def example_problem(multimodal: bool):
    """The problem the recipe's example prompt is rendered for: multiple choice, with one
    drawn image for a vision-language model (to show where images go). Not from the data."""
    from vlcohort.data.problems import Problem

    if not multimodal:
        return Problem(id="example", text="Which of these numbers is the largest?",
                       options=["12", "47", "30", "8"])
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (56, 56), "white")
    ImageDraw.Draw(image).rectangle([14, 14, 42, 42], fill="red")
    return Problem(id="example", text="What colour is the square in the image?",
                   images=[image], options=["blue", "red", "green", "yellow"])


def prompt_recipe(adapter, cfg, mc, agent: str) -> dict[str, Any]:
    """How agent ``agent`` was prompted in training, as the run resolved it (``adapter``:
    its adapter, built with the run's options; ``cfg``: the run's config, None when the run
    folder has none), with one example prompt rendered by that adapter. Written to
    :data:`PROMPT_RECIPE`; :func:`recipe_adapter` / :func:`render_with_recipe` read it."""
    from vlcohort.data.problems import LETTERS
    from vlcohort.processors import prompt_formats
    from vlcohort.processors.base import format_options

    fmt = adapter.prompt_format
    named = fmt == prompt_formats.CHAT or fmt in prompt_formats.NAMED_FORMATS
    recipe: dict[str, Any] = {
        "version": RECIPE_VERSION, "agent": agent, "family": adapter.family,
        "prompt_format": fmt if named else PROMPT_FORMAT_FILE,
        "prompt_format_description": adapter.prompt_format_description(),
        "template": prompt_formats.template_text(fmt),  # None: this folder's chat template
        "plain_bos": "" if fmt == prompt_formats.CHAT else adapter._bos_the_tokenizer_adds(),
    }
    if cfg is None:
        recipe.update(complete=False, system_prompt=None, instruction=None, role=None,
                      note="the run folder has no config.yaml: the system prompt, "
                      "instruction, option order and answer style are unknown")
    else:
        system, instruction, role = training_prompt(cfg, agent)
        recipe.update(complete=True, system_prompt=system, instruction=instruction, role=role)
    recipe["user_turn"] = (("images at the question's <image> / <image1> placeholders (none: "
                            "before the text), " if adapter.is_multimodal else "")
                           + "the question, then on new lines the options block and the "
                           "instruction")
    recipe["options"] = {
        "block": format_options(["<first option>", "<second option>"]),
        "letters": LETTERS,
        "order": option_order(cfg) if cfg is not None else None,
    }
    if cfg is not None:
        recipe["answer_style"] = cfg.reward.answer_style
        recipe["answer_kind"] = cfg.reward.answer_kind
        recipe["answer_extraction"] = ("vlcohort.extract_answer(reply, "
                                       f"style={cfg.reward.answer_style!r})")
    if mc is not None and (mc.view.column or mc.view.rewrite_file):
        recipe["view"] = ("trained on its own wording of each question (agents.N.view: "
                          f"column {mc.view.column!r}, rewrite_file {mc.view.rewrite_file!r})")
    problem = example_problem(adapter.is_multimodal)
    rendered = adapter.render(problem, recipe["system_prompt"], recipe["instruction"])
    recipe["example"] = {"question": problem.text, "options": problem.options,
                         "images": len(problem.images), "prompt": rendered.text}
    return recipe


def recipe_card_lines(recipe: dict[str, Any]) -> list[str]:
    """The model card's section on prompting the agent as it was trained."""
    def shown(value) -> str:  # one table cell: newlines as \n, pipes escaped
        if value is None:
            return "none"
        return "`" + json.dumps(value, ensure_ascii=False)[1:-1].replace("|", "\\|") + "`"

    rows = [("prompt format", recipe["prompt_format_description"]
             + ("" if recipe["template"] is None else f" (template in `{PROMPT_RECIPE}`)")),
            ("system prompt", shown(recipe["system_prompt"])),
            ("instruction (ends the user turn)", shown(recipe["instruction"])),
            ("options", f"after the question: `{recipe['options']['block'].splitlines()[0]}`, "
                        f"then one `A. <option>` line each; order: {recipe['options']['order']}")]
    if recipe.get("answer_style") is not None:
        rows.append(("answer", f"kind {recipe['answer_kind']}, read with answer style "
                               f"{recipe['answer_style']} ({recipe['answer_extraction']})"))
    if recipe.get("role"):
        rows.append(("role in training", recipe["role"]))
    if recipe.get("view"):
        rows.append(("questions", recipe["view"]))
    lines = ["## Prompt it as it was trained", "",
             "Prompted any other way (another option layout, no answer instruction, another "
             "format) the agent may answer near chance. The recipe, machine-readable, is "
             f"`{PROMPT_RECIPE}`.", ""]
    if not recipe["complete"]:
        lines += [f"Incomplete: {recipe['note']}.", ""]
    lines += ["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), "",
              "An example question (not from the data)"
              + (f" with {recipe['example']['images']} image(s)" if recipe["example"]["images"]
                 else "") + ", rendered as training rendered its problems:", "", "````text",
              recipe["example"]["prompt"], "````", "",
              "With vlcohort: `vlcohort.export.render_with_recipe(\"<this folder>\", problem)` "
              "renders any `vlcohort.data.problems.Problem` the same way.", ""]
    return lines


def read_recipe(folder: str | Path) -> dict[str, Any]:
    """The :data:`PROMPT_RECIPE` of an exported folder (an :class:`ExportError` naming the
    file when it is missing or unreadable)."""
    path = Path(folder) / PROMPT_RECIPE
    try:
        recipe = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExportError(f"{path}: missing; export the agent again with this version of "
                          "vlcohort (vlcohort export RUN --agent NAME --out DIR)") from None
    except (OSError, ValueError) as e:
        raise ExportError(f"{path}: unreadable ({e}); export the agent again") from None
    if recipe.get("version") != RECIPE_VERSION:
        raise ExportError(f"{path}: recipe version {recipe.get('version')!r}, this vlcohort "
                          f"reads {RECIPE_VERSION}; export the agent again")
    return recipe


def recipe_adapter(folder: str | Path):
    """The adapter of an exported folder with the prompt format the agent was trained with
    (the folder's own Jinja file for a run's format file)."""
    from vlcohort.processors import adapter_for
    from vlcohort.processors.base import AdapterOptions

    recipe = read_recipe(folder)
    fmt = recipe["prompt_format"]
    if fmt == PROMPT_FORMAT_FILE:
        fmt = str(Path(folder) / PROMPT_FORMAT_FILE)
    return adapter_for(Path(folder), AdapterOptions(prompt_format=fmt))


def render_with_recipe(folder: str | Path, problem, adapter=None):
    """``problem`` rendered as the exported agent's training prompts were: its format,
    system prompt and instruction from :data:`PROMPT_RECIPE` (``adapter``: one from
    :func:`recipe_adapter`, to render many without reloading the processor)."""
    recipe = read_recipe(folder)
    adapter = adapter or recipe_adapter(folder)
    return adapter.render(problem, recipe["system_prompt"], recipe["instruction"])


# ---------------------------------------------------------------------------- the export


def _check_out(out: Path, run_dir: Path, force: bool) -> None:
    """Refuse an ``--out`` that would overwrite something: an existing file, a non-empty
    folder (unless ``force``), or a folder holding (or inside) the run itself; and one
    that cannot be created: a symbolic link (``--force`` would empty the folder it points
    at, wherever that is), a path under a file."""
    if out.is_symlink():
        raise ExportError(f"--out {out}: is a symbolic link (to {os.readlink(out)}); give the "
                          "real folder's path, or a new folder")
    parent = out.parent
    while not (parent.exists() or parent.is_symlink()) and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ExportError(f"--out {out}: {parent} is a file, not a folder; give a path in a "
                          "folder")
    o, r = out.resolve(), run_dir.resolve()
    if o == r or o in r.parents or r in o.parents:
        raise ExportError(f"--out {out}: is {'inside ' if r in o.parents else ''}the run folder "
                          f"{run_dir}{'' if r in o.parents else ' or holds it'}; export "
                          "somewhere else (the run's checkpoints are not to be replaced)")
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out}: is a file; give a folder to create")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ExportError(f"--out {out}: exists and is not empty; give a new folder, or "
                          "--force to replace its contents")


def _readable(folder: Path) -> None:
    """The folder and its files readable as the user's umask allows (``mkdtemp`` makes the
    folder 0700 and transformers writes safetensors 0600): a served folder is often read by
    another user (a vLLM container, a shared model store)."""
    mask = os.umask(0)
    os.umask(mask)
    folder.chmod(0o777 & ~mask)
    for p in folder.rglob("*"):
        p.chmod((0o777 if p.is_dir() else 0o666) & ~mask)


def export_agent(run_dir: str | Path, out: str | Path, agent: str | None = None,
                 step: str | int = "latest", force: bool = False) -> Exported:
    """Write agent ``agent`` of ``run_dir`` at checkpoint ``step`` as a merged,
    ``from_pretrained``-loadable folder ``out`` (see the module docstring); return what
    was written. All checks that need no weights run before any model is loaded."""
    run_dir, out = Path(run_dir), Path(out)
    folder = checkpoint_folder(run_dir, step)
    known = saved_agents(folder)
    if agent is None:
        if len(known) != 1:
            raise ExportError(f"{run_dir}: --agent is needed, the run has {len(known)} agents: "
                              f"{', '.join(known)}")
        agent = known[0]
    if agent not in known:
        raise ExportError(f"--agent {agent}: no such agent in {folder}; agents there: "
                          f"{', '.join(known) or 'none'}")
    problems = checkpoint_problems(folder, agent)
    if problems:
        raise ExportError(f"{folder}: fails its manifest check, not exported: "
                          + "; ".join(problems[:3])
                          + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
                          + ". Export an earlier checkpoint (--step N)")
    _check_out(out, run_dir, force)
    cfg = run_config(run_dir)
    mc = agent_config(cfg, agent)
    from vlcohort.training.checkpoint import load_state

    n = int(load_state(folder).get("step", folder.name.split("-", 1)[1]))
    adapter, model, merged = load_for_export(folder / agent, mc, cfg)

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.export-", dir=out.parent))
    except OSError as e:
        raise ExportError(f"--out {out}: cannot create a folder in {out.parent} "
                          f"({e.strerror or e}); give a path you can write") from None
    try:
        model.generation_config = serving_generation_config(model, adapter)
        model.save_pretrained(tmp, safe_serialization=True)
        adapter.processor.save_pretrained(tmp)
        if not (tmp / "generation_config.json").is_file():  # a model class without generate
            model.generation_config.save_pretrained(tmp)
        recipe = prompt_recipe(adapter, cfg, mc, agent)
        if recipe["prompt_format"] == PROMPT_FORMAT_FILE:
            (tmp / PROMPT_FORMAT_FILE).write_text(recipe["template"])
        (tmp / PROMPT_RECIPE).write_text(json.dumps(recipe, indent=1, ensure_ascii=False) + "\n")
        base = lora_base(folder / agent, mc) if merged else (mc.path if mc else str(folder / agent))
        card = model_card(agent=agent, run_dir=run_dir, step=n, family=adapter.family,
                          base=base, model_class=adapter._model_class().__name__,
                          multimodal=adapter.is_multimodal, mc=mc, cfg=cfg, merged=merged,
                          metrics=latest_metrics(run_dir, agent, n), recipe=recipe)
        (tmp / "README.md").write_text(card)
        _readable(tmp)
        if out.is_symlink() or out.exists():  # empty, or --force; a link: only the link
            run_folder.remove(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Exported(out=out, checkpoint=folder, agent=agent, step=n, merged_lora=merged)


def push_to_hub(out: Path, repo: str, private: bool = False) -> str:
    """Upload an exported folder to the hub model repo ``repo`` (created when missing);
    returns the repo's URL. Any failure (offline mode, no token, no network, refused) is
    an :class:`ExportError` naming the repo and the cause; the local export stays."""
    from huggingface_hub import HfApi

    # HF_ENDPOINT as set now, not only at huggingface_hub's import (a notebook, a test)
    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None)
    try:
        url = api.create_repo(repo, repo_type="model", private=private, exist_ok=True)
        api.upload_folder(folder_path=str(out), repo_id=repo, repo_type="model",
                          commit_message="vlcohort export")
    except Exception as e:  # hub, HTTP, auth and offline errors alike
        cause = " ".join(str(e).split())[:400] or type(e).__name__
        raise ExportError(
            f"--push-to-hub {repo}: the upload to {api.endpoint} failed ({type(e).__name__}: "
            f"{cause}). The "
            f"export itself is complete in {out}; upload it when the hub is reachable and "
            f"you are logged in (hf auth login, or HF_TOKEN): hf upload {repo} "
            f"{out}") from e
    return str(url)


# ------------------------------------------------------------------------- command line


def add_arguments(p) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (its run.output_dir; for "
                   "a comparison run, one arm's folder)")
    p.add_argument("--agent", metavar="NAME", help="which agent (optional when the run has one)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write (new or empty)")
    p.add_argument("--step", default="latest", metavar="N|latest",
                   help="which checkpoint (default: latest)")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out")
    p.add_argument("--push-to-hub", metavar="REPO", dest="push_to_hub",
                   help="also upload the folder to this hub model repo (org/name)")
    p.add_argument("--private", action="store_true", help="with --push-to-hub: a private repo")


def run(args) -> int:
    """``vlcohort export``: 0 when written (and pushed), 2 with one message otherwise."""
    import sys

    try:
        done = export_agent(args.run_dir, args.out, agent=args.agent, step=args.step,
                            force=args.force)
        print(f"export: agent {done.agent} of {done.checkpoint} -> {done.out}"
              + (" (LoRA merged)" if done.merged_lora else ""))
        if args.push_to_hub:
            print(f"export: pushed to {push_to_hub(done.out, args.push_to_hub, args.private)}")
    except ExportError as e:
        print(f"export error: {e}", file=sys.stderr)
        return 2
    return 0
