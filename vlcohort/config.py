"""Typed run configuration: dataclass defaults <- YAML file <- ``key.sub=value`` overrides.

Every field has a docstring (the string literal under it), which ``vlcohort config
--help-fields`` prints. An unknown key, a value of the wrong type or an impossible
combination is a :class:`ConfigError` naming the key and what is allowed. The resolved
config is printed with its derived totals and saved with every run.

Batch knobs carry their unit in the name (DESIGN.md rule 5): ``prompts_per_step`` (B),
``rollouts_per_prompt`` (G); sequences per step = A x B x G.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A configuration that cannot run; the message names the key and what is allowed."""


# ----------------------------------------------------------------------------- sections


@dataclass
class WarmupConfig:
    """Supervised warm-up of one agent before RL (see ``vlcohort/warmup.py``)."""

    steps: int = 0
    """Supervised steps on ``tasks`` (0: no warm-up)."""
    uniform_steps: int = 0
    """Further steps adding the uniform-over-options term on ``uniform_tasks``."""
    lr: float = 1e-3
    """AdamW learning rate of the warm-up."""
    batch_size: int = 32
    """Problems per warm-up step (per term)."""
    tasks: list[str] = field(default_factory=list)
    """Synthetic task families learned with their gold answers (the agent's own skill)."""
    uniform_tasks: list[str] = field(default_factory=list)
    """Families whose choice among the options is pulled towards uniform (no gold used)."""
    uniform_weight: float = 1.0
    """Weight of the uniform term."""
    keep_supervised: bool = True
    """Keep the supervised term during the uniform steps."""
    answer_template: str = "<answer>{}</answer>"
    """The completion taught, ``{}`` being the option letter."""


@dataclass
class ViewConfig:
    """One agent's view of the data: its own wording of each question (the paper's
    "Different family+" setting gives one agent the original and another a rewrite).
    Images, options and gold stay the dataset's, so votes still compare like with like."""

    column: str = ""
    """Read this agent's question from this column of the data file ("": the question column)."""
    rewrite_file: str = ""
    """JSON ({id: question}) or JSONL ({"id": ..., "question": ...} per line) of rewritten
    questions keyed by problem id; a problem without a rewrite is skipped and counted."""


@dataclass
class ModelConfig:
    """One agent: its model and how its inputs are prepared."""

    name: str = "A"
    """Agent name, used in metric names (``agent/<name>/...``) and checkpoint folders."""
    path: str = ""
    """Checkpoint folder, hub id, or ``tiny:<family>`` (a tiny model built offline from the
    family's real classes; ``vlcohort tiny`` lists them)."""
    dtype: str = "float32"
    """Weights dtype: float32 | bfloat16 | float16 | auto."""
    attn_implementation: str = "sdpa"
    """eager | sdpa | flash_attention_2."""
    trust_remote_code: bool = False
    """Run code shipped inside the checkpoint. Every supported family is native: leave off."""
    min_pixels: int | None = None
    """Per-image lower pixel budget (families with native-resolution images); None: checkpoint's."""
    max_pixels: int | None = None
    """Per-image upper pixel budget (families with native-resolution images); None: checkpoint's."""
    max_tiles: int | None = None
    """Most tiles per image (families with dynamic tiling); None: checkpoint's."""
    pan_and_scan: bool = False
    """Extra crops for elongated images (families with a fixed canvas)."""
    max_source_pixels: int = 64_000_000
    """Decompression-bomb guard: refuse an image whose header declares more pixels."""
    min_image_side: int = 2
    """Refuse an image with a side shorter than this (a 1x1 image is a broken export)."""
    logprob_chunk_tokens: int = 256
    """Completion positions per chunk when computing log-probs ([B, chunk, V] at a time)."""
    lr: float | None = None
    """This agent's peak learning rate; None: ``optim.lr``."""
    lora_rank: int = 0
    """LoRA rank through PEFT; 0 trains all weights. With LoRA the KL reference is the base
    model with adapters disabled (no second copy)."""
    lora_alpha: int = 16
    """LoRA scaling numerator (scale = alpha / rank)."""
    lora_targets: str = "all-linear"
    """Modules LoRA wraps: ``all-linear`` or a comma-separated list of module names."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30% slower)."""
    autocast_bf16: bool = False
    """Run forward passes under bf16 autocast (weights stay in ``dtype``)."""
    device: str = "cpu"
    """Where this agent's model lives, generates and trains: cpu | cuda (the current GPU) |
    cuda:N (agents of one process may sit on different GPUs). Rollouts, votes and rewards
    stay on the CPU."""
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    """Supervised warm-up before RL (none by default)."""
    view: ViewConfig = field(default_factory=ViewConfig)
    """This agent's own wording of each question (default: the dataset's question)."""
    reward_source: str | None = None
    """This agent's reward source, overriding ``reward.source`` for it alone (e.g. one agent
    of a cohort on self_certainty while another learns from peer votes); None: reward.source."""


@dataclass
class DataColumns:
    """Column names of a data file; "" means the preset's (generic: id, question, images,
    options, answer)."""

    id: str = ""
    """Unique record id (missing: ``<file stem>:<row>``)."""
    question: str = ""
    """The question text (options in it, e.g. "Choices:\nA: ...", are parsed out)."""
    images: str = ""
    """One image or a list: paths (relative to the data file's folder), bytes, or HF Image."""
    options: str = ""
    """Option texts (a list, or "A. x;B. y"); overrides options found in the question."""
    answer: str = ""
    """Gold answer (metrics and the ground_truth reward only; never shown)."""


@dataclass
class DataConfig:
    """Training problems."""

    source: str = "synthetic"
    """synthetic: the built-in drawn dataset (no files) | file: data.path is a local
    parquet / JSON / JSONL file or dataset folder | hub: data.path is a hub dataset id."""
    path: str = ""
    """file or hub: where the data is."""
    preset: str = "generic"
    """file or hub: column layout. mmr1 (images, problem, answer) | open_r1 (image, problem,
    solution with <answer>X</answer>) | math (problem, solution whose last \\boxed{} is the
    gold; text only) | generic (data.columns)."""
    columns: DataColumns = field(default_factory=DataColumns)
    """file or hub: column names, overriding the preset's."""
    split: str = "train"
    """file (dataset folder) or hub: which split."""
    limit: int = 0
    """file or hub: read at most this many rows (0: all)."""
    where: dict[str, list[str]] = field(default_factory=dict)
    """file or hub: keep only rows whose column holds one of the listed values, e.g.
    {level: [Level 3, Level 4, Level 5]} (values compared as text; several columns: all
    must match). Applied before data.limit; {}: every row."""
    decouple: bool = False
    """Give each agent a disjoint shard of the data (problems a, a+A, a+2A...): each step
    agent a trains on B prompts of its own shard only. Every agent still answers all A x B
    prompts (a peer vote needs the peer's answers), so generation costs A times more."""
    tasks: list[str] = field(default_factory=lambda: ["shape_colour", "count_shapes",
                                                      "compare_bars", "read_chart"])
    """synthetic: task families to mix (round-robin)."""
    num_problems: int = 256
    """synthetic: how many problems to draw (the stream cycles through them in epochs)."""
    image_size: int = 56
    """synthetic: image side in pixels."""
    shuffle_options: bool = True
    """synthetic: shuffle option order per problem (false: a fixed order, so a letter
    always names the same colour / kind)."""
    shuffle: bool = True
    """Shuffle the order each epoch (seeded by run.seed and the epoch)."""


@dataclass
class PromptConfig:
    """How a problem becomes a prompt (the same for every agent)."""

    system_prompt: str = "You are a helpful assistant."
    """System message; families without a system role fold it into the first user turn."""
    instruction: str = ("Think briefly, then give the final answer as <answer>X</answer>.")
    """Answer-format instruction appended to every question."""


@dataclass
class VLLMConfig:
    """The vLLM rollout engine (``rollout.engine=vllm``, GPU only; ``vlcohort/rollout/vllm.py``)."""

    tensor_parallel_size: int = 1
    """GPUs one agent's engine spans (within the agent's rank group; must divide
    ``distributed.ranks_per_agent`` when > 1)."""
    gpu_memory_utilization: float = 0.3
    """Share of each GPU's memory vLLM may take (weights + KV cache); the rest is training's."""
    sleep_mode: bool = True
    """Free vLLM's KV cache and weights during the policy update (``LLM.sleep``/``wake_up``)."""
    enforce_eager: bool = False
    """Skip CUDA graph capture (faster start, slower decoding)."""
    max_model_len: int = 0
    """Prompt + completion tokens per sequence the engine reserves (0: the model's own)."""
    max_num_seqs: int = 256
    """Sequences vLLM decodes at once."""
    dtype: str = "auto"
    """Engine weights dtype: auto (the checkpoint's) | bfloat16 | float16 | float32."""
    max_images_per_prompt: int = 4
    """Most images one prompt may carry (vLLM's ``limit_mm_per_prompt``; its memory
    profile reserves room for this many). A problem with more is an error."""


@dataclass
class DistributedConfig:
    """One launch over W ranks (``torchrun`` / ``accelerate launch``): A agent groups of
    ``ranks_per_agent`` ranks, each group training its agent data-parallel with DeepSpeed
    ZeRO over its own process group (``vlcohort/distributed.py``). Without a launcher
    (W = 1) every agent lives in the one process and DeepSpeed is not used."""

    ranks_per_agent: int = 0
    """Ranks per agent group; 0: W / A. W must equal A x ranks_per_agent."""
    zero_stage: int = 2
    """DeepSpeed ZeRO stage 0 | 1 | 2 | 3 within an agent group."""
    offload_optimizer: bool = False
    """ZeRO CPU offload of the optimizer state (stage >= 1)."""
    offload_params: bool = False
    """ZeRO-3 CPU offload of the parameters (stage 3 only)."""
    deepspeed_config: str = ""
    """A DeepSpeed JSON whose keys override the ones built from this section (batch sizes
    and the optimizer stay ours)."""
    backend: str = "auto"
    """auto (nccl with CUDA, else gloo) | nccl | gloo."""
    timeout_s: int = 300
    """Collective timeout: a rank that dies makes the others fail within this many seconds
    instead of hanging."""


@dataclass
class RolloutConfig:
    """Generation of rollouts."""

    engine: str = "hf"
    """hf (transformers generate, CPU or GPU) | vllm (GPU only)."""
    prompts_per_step: int = 4
    """B: prompts sampled per step (all agents see the same prompts)."""
    rollouts_per_prompt: int = 4
    """G: completions per prompt per agent (the group of the group-normalised advantage)."""
    max_new_tokens: int = 32
    """Longest completion, in tokens."""
    temperature: float = 1.0
    """Sampling temperature (log-probs for the IS correction use the same temperature)."""
    top_p: float = 1.0
    """Nucleus sampling mass; 1.0 samples from the whole distribution."""
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    """vLLM engine settings (used when ``engine=vllm``)."""


@dataclass
class RewardConfig:
    """Where rewards come from."""

    source: str | None = None
    """peer_vote (Co-RL) | self_vote (TTRL) | ground_truth (GT-Reward) | self_certainty
    (INTUITOR) | entropy (RENT); None: the one ``method`` implies. Per agent:
    ``agents.N.reward_source``."""
    topology: str = "ring"
    """peer_vote teachers: ring (agent a taught by a-1) | all_peers."""
    grader: str = "corrected"
    """corrected (multiple-choice aware, the default) | legacy (plain math grader)."""
    tie: str = "abstain"
    """Vote tie rule: abstain | first | canonical (smallest canonical key)."""
    min_share: float = 0.0
    """A vote counts only when its winner holds at least this share of the G samples."""
    format_weight: float = 0.0
    """Weight of an added format term: +weight when an answer can be extracted."""
    intrinsic_temperature_scaled: bool = False
    """self_certainty / entropy: measure softmax(logits / rollout.temperature) (true) or the
    model's own softmax(logits) (false). False matches INTUITOR's published code, which
    computes self-certainty from the raw logits while its log-probs use the temperature."""
    answer_style: str = "auto"
    """How answers are extracted: auto (answer tag, then \\boxed{}, then "the answer is") |
    answer_tag | boxed | phrase | last_letter | last_number (the last two only by name:
    they read a guess into any text)."""


@dataclass
class GRPOConfig:
    """The policy update."""

    adv_scale: str = "group"
    """group: (r - mean) / (std + eps) over the G rollouts; none: r - mean (Dr.GRPO)."""
    clip_low: float = 0.2
    """Lower clip of the probability ratio: 1 - clip_low."""
    clip_high: float = 0.2
    """Upper clip of the probability ratio: 1 + clip_high (clip-higher: set it larger)."""
    kl_coef: float = 0.0
    """KL-to-reference coefficient; 0 (Co-RL's default) loads no reference model."""
    kl_kind: str = "k3"
    """KL estimator: k1 | k3."""
    loss_agg: str = "token_mean"
    """token_mean | seq_mean_token_mean | seq_mean_token_sum_norm."""
    ppo_epochs: int = 1
    """Passes over each step's rollouts."""
    micro_batch_seqs: int = 16
    """Sequences per forward/backward; gradients accumulate to one full-batch step. Must
    divide B x G; a value >= B x G means one micro-batch."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip; 0 disables."""
    is_level: str = "token"
    """Importance-sampling correction level: token | sequence (geometric mean)."""
    is_mode: str = "truncate"
    """truncate: w = min(w, is_cap) | mask: w outside [is_low, is_high] -> 0 | off."""
    is_cap: float = 2.0
    """Truncation cap of the IS weight."""
    is_low: float = 0.5
    """mask mode: lower bound of kept weights."""
    is_high: float = 2.0
    """mask mode: upper bound of kept weights."""


@dataclass
class OptimConfig:
    """AdamW with warm-up and cosine decay (Co-RL's defaults)."""

    lr: float = 1e-6
    """Peak learning rate (per agent: agents.N.lr)."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    """AdamW betas."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    warmup_ratio: float = 0.03
    """Share of run.steps spent warming up linearly from 0."""
    min_lr_ratio: float = 0.1
    """Cosine decays to this fraction of the peak."""
    schedule: str = "cosine"
    """cosine | constant (after warm-up)."""


@dataclass
class LogConfig:
    """Logging."""

    tensorboard: bool = True
    """Mirror metrics to TensorBoard when it is installed."""
    plot: bool = True
    """Write plots/dynamics.png at the end of the run."""
    progress: bool = True
    """Print a one-line summary per step."""


@dataclass
class EvalConfig:
    """Held-out accuracy during training (gold used to measure only, never to reward)."""

    every: int = 0
    """Evaluate every this many steps, and before the first and after the last (0: never)."""
    problems_per_task: int = 64
    """Held-out problems per task family (drawn with a seed apart from the training data)."""
    max_new_tokens: int = 16
    """Greedy answer length."""


#: Signals of the collapse / divergence monitor (``vlcohort/dynamics.py``).
MONITOR_SIGNALS = ("reward_collapse", "degeneration", "divergence")


@dataclass
class MonitorConfig:
    """Collapse / divergence detection (``vlcohort/dynamics.py``): per-agent warnings in
    ``metrics.jsonl`` (``monitor/warnings``, ``monitor/<a>/<signal>``) and on stderr."""

    enable: bool = True
    """Watch every agent's reward std, completion length, loss and KL."""
    collapse_threshold: float = 0.1
    """reward_collapse: group reward std / its step-1 value (the first non-zero one) below
    this counts towards the streak."""
    collapse_patience: int = 5
    """reward_collapse: steps in a row below the threshold before warning."""
    length_factor: float = 3.0
    """degeneration: mean completion length below start / factor or above start x factor."""
    length_patience: int = 3
    """degeneration: steps in a row outside that range before warning."""
    spike_factor: float = 10.0
    """divergence: |loss| or |KL| above this many times the median of the last
    spike_window steps (a non-finite value always counts)."""
    spike_window: int = 10
    """divergence: steps in the running baseline; checked once it is full."""
    loss_floor: float = 1.0
    """divergence: a loss spike also needs |loss| above this (the loss wanders around 0)."""
    kl_floor: float = 0.1
    """divergence: a KL spike also needs |KL| above this (the KL grows from 0 at step 1)."""
    stop_on: list[str] = field(default_factory=list)
    """Signals that stop the run (checkpoint saved first): reward_collapse | degeneration |
    divergence. Empty: warn only."""


@dataclass
class CheckpointConfig:
    """Checkpoints."""

    every: int = 0
    """Save every this many steps (0: only at the end)."""
    keep_last: int = 2
    """Keep only the newest this many checkpoints (0 keeps all)."""
    at_end: bool = True
    """Save after the last step."""


@dataclass
class SelfPlayConfig:
    """Guided challenger/solver self-play (``method: self_play``; R-Zero arXiv 2508.05004,
    R-Few arXiv 2512.02472; ``vlcohort/selfplay.py``). Each step the challenger writes
    ``rollout.prompts_per_step`` x ``rollout.rollouts_per_prompt`` questions (B prompts, a
    GRPO group of G per prompt) and the solver answers each ``solver_samples`` times;
    phases alternate, and only the phase's role trains."""

    challenger: str = "A"
    """The agent that writes questions: an agent name or index (``agents.N``)."""
    solver: str = "B"
    """The agent that answers them: an agent name or index, not the challenger."""
    anchors_per_prompt: int = 0
    """k (0..5): labelled pool examples, drawn at random, shown in each challenger prompt.
    0 is R-Zero's unguided setting; R-Few grounds the challenger with a few."""
    anchor_pool_size: int = 32
    """Size of the small labelled pool, drawn (seeded) from the problems of ``data.*``;
    problems without gold are left out of it."""
    solver_samples: int = 10
    """m: solver answers per generated question (R-Zero: 10). p_hat is the share of the
    largest equivalence class among the m; the m answers are also the solver's GRPO group."""
    repetition_weight: float = 1.0
    """lambda: weight of the repetition penalty, the share of the step's questions in the
    question's near-duplicate cluster. R-Zero's code subtracts the share from min(p_hat,
    1 - p_hat), half our 1 - 2|p_hat - 1/2|: lambda = 2 weighs it as that code does."""
    bleu_threshold: float = 0.5
    """Near-duplicate clusters: average-linkage clustering of the step's questions by BLEU
    distance (1 - BLEU) stops merging at this distance (R-Zero: 0.5)."""
    band: list[float] = field(default_factory=lambda: [0.3, 0.7])
    """[low, high]: the solver trains on generated questions whose p_hat lies in this band
    (ends included), with their majority answer as label."""
    band_rule: str = "value"
    """value: p_hat itself in ``band`` (R-Zero's filter) | quantile: p_hat between the
    step's low- and high-quantile of p_hat (a rank-based reading of R-Few's curriculum)."""
    anchors_per_step: int = 4
    """Pool questions the solver answers per solver step, graded against their gold (R-Few's
    mixed training); they also give ``selfplay/solver/anchor_acc``."""
    anchor_weight: float = 1.0
    """Weight of the anchor questions' advantages in the solver's loss (0: answered for the
    metric only, as in R-Zero, which trains on generated questions alone)."""
    format_weight: float = 0.1
    """Solver reward = (1 - format_weight) x accuracy + format_weight x format, format being
    1 when an answer can be extracted (R-Zero: 0.9 / 0.1)."""
    challenger_steps: int = 5
    """Steps of each challenger phase: only the challenger trains (R-Zero: 5 per iteration)."""
    solver_steps: int = 15
    """Steps of each solver phase: only the solver trains (R-Zero: 15 per iteration).
    Phases alternate, challenger first."""
    question_max_new_tokens: int = 256
    """Longest challenger completion, in tokens (the solver's answers use
    ``rollout.max_new_tokens``)."""
    images: str = "auto"
    """on: each challenger prompt shows the picture of a pool item (the first anchor's, or a
    random item's when k = 0) and the question written from it carries that picture |
    off: text-only questions | auto: on when both roles take images and the pool has them."""
    challenger_system: str = (
        "You are an expert problem setter. FIRST, in your private scratch-pad, think "
        "step-by-step to design a brand-new, non-trivial question with one short, "
        "checkable final answer. THEN, without revealing your private thoughts, output "
        "exactly the following two blocks:\n\n<question>\n{the full question}\n"
        "</question>\n\n\\boxed{final answer}\n\nDo NOT output anything else.")
    """System message of the challenger (R-Zero's problem-setter prompt, not tied to math);
    only the text between the last <question> and </question> is used."""
    challenger_request: str = ("Generate one new, challenging reasoning question now. "
                               "Remember to format the output exactly as instructed.")
    """The challenger's user turn, after the k anchor examples (R-Zero's wording)."""
    hist_bins: int = 5
    """Equal-width bins over [0, 1] of the logged p_hat histogram (``selfplay/p_hat_hist/<bin>``)."""


@dataclass
class RunConfig:
    """Bookkeeping of a run."""

    name: str = "demo"
    """Run name; the run folder defaults to runs/<name>."""
    steps: int = 20
    """RL steps."""
    seed: int = 0
    """Seed of data order, sampling and initialisation."""
    output_dir: str | None = None
    """Run folder (config.yaml, metrics.jsonl, plots/, checkpoints/); None: runs/<name>."""
    max_bad_steps: int = 3
    """Stop with an error after this many consecutive steps with a NaN / inf loss."""
    threads: int = 0
    """torch CPU threads (0: torch's default)."""


def _default_agents() -> list[ModelConfig]:
    """Two tiny models of different families. Which families is the adapters' knowledge
    (DESIGN.md rule 1), so the specs come from ``processors.tiny``."""
    from processors.tiny import DEFAULT_TINY_COHORT

    return [ModelConfig(name=n, path=spec) for n, spec in zip("AB", DEFAULT_TINY_COHORT)]


@dataclass
class Config:
    """A whole run. The embedded default is what ``vlcohort train`` runs with no arguments."""

    method: str = "co_rl"
    """co_rl | ttrl | gt_reward | intuitor | rent: a preset for ``reward.source`` (co_rl:
    peer_vote, ttrl: self_vote, gt_reward: ground_truth, intuitor: self_certainty, rent:
    entropy); or self_play: R-Zero / R-Few challenger-solver phases (``self_play.*``, no
    ``reward.source``)."""
    agents: list[ModelConfig] = field(default_factory=_default_agents)
    """The cohort, A >= 1 agents; each trains its own model."""
    data: DataConfig = field(default_factory=DataConfig)
    """Training problems."""
    prompt: PromptConfig = field(default_factory=PromptConfig)
    """Prompt rendering."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Rollout generation."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """Reward source."""
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    """Policy update."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimizer and schedule."""
    log: LogConfig = field(default_factory=LogConfig)
    """Logging."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpoints."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Held-out accuracy during training."""
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    """Collapse / divergence detection: warnings, optional stop."""
    self_play: SelfPlayConfig = field(default_factory=SelfPlayConfig)
    """Challenger / solver self-play settings (``method: self_play`` only)."""
    arms: list[str] = field(default_factory=list)
    """Methods to compare from the same warm-up and budget (e.g. [co_rl, ttrl]): each arm is
    a full run in <output_dir>/<method>/, then summary.json and comparison.png. Empty: one
    run of ``method``."""
    parallel_arms: bool = True
    """Run the arms as parallel processes (one torch thread each)."""
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    """Multi-process launch: agent groups and DeepSpeed ZeRO."""
    run: RunConfig = field(default_factory=RunConfig)
    """Run bookkeeping."""


METHOD_SOURCES = {"co_rl": "peer_vote", "ttrl": "self_vote", "gt_reward": "ground_truth"}
METHOD_SOURCES.update(intuitor="self_certainty", rent="entropy")  # intrinsic rewards
CHOICES: dict[str, tuple[str, ...]] = {
    "method": tuple(METHOD_SOURCES),
    "agents.*.dtype": ("float32", "bfloat16", "float16", "auto"),
    "agents.*.attn_implementation": ("eager", "sdpa", "flash_attention_2"),
    "rollout.engine": ("hf", "vllm"),
    "reward.source": tuple(METHOD_SOURCES.values()),
    "agents.*.reward_source": tuple(METHOD_SOURCES.values()),
    "reward.topology": ("ring", "all_peers"),
    "reward.grader": ("corrected", "legacy"),
    "reward.tie": ("abstain", "first", "canonical"),
    "reward.answer_style": ("auto", "answer_tag", "boxed", "phrase", "last_letter", "last_number"),
    "data.source": ("synthetic", "file", "hub"),
    "data.preset": ("mmr1", "open_r1", "math", "generic"),
    "grpo.adv_scale": ("group", "none"),
    "grpo.kl_kind": ("k1", "k3"),
    "grpo.loss_agg": ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"),
    "grpo.is_level": ("token", "sequence"),
    "grpo.is_mode": ("truncate", "mask", "off"),
    "optim.schedule": ("cosine", "constant"),
    "rollout.vllm.dtype": ("auto", "bfloat16", "float16", "float32"),
    "distributed.backend": ("auto", "nccl", "gloo"),
}

#: Methods that are a recipe of their own rather than one reward source for every agent.
#: ``self_play`` (R-Zero / R-Few, ``vlcohort/selfplay.py``) rewards its challenger by the
#: solver's uncertainty and its solver by majority labels and gold anchors, so it has no
#: single ``reward.source``: validation requires that key unset (null) for it.
RECIPE_METHODS = ("self_play",)
CHOICES["method"] = (*CHOICES["method"], *RECIPE_METHODS)
CHOICES["self_play.band_rule"] = ("value", "quantile")
CHOICES["self_play.images"] = ("auto", "on", "off")


def agent_reward_source(cfg: Config, i: int) -> str:
    """Agent ``i``'s reward source: ``agents.i.reward_source``, else ``reward.source``."""
    return cfg.agents[i].reward_source or cfg.reward.source


# ----------------------------------------------------------------------------- loading


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Defaults <- YAML file (if any) <- ``key.sub=value`` overrides, then validated."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            loaded = yaml.safe_load(p.read_text())
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML ({e})") from e
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{p}: the top level must be a mapping of sections, got "
                              f"{type(loaded).__name__}")
        data = loaded or {}
    for item in overrides:
        key, value = _split_override(item)
        _set_dotted(data, key, value)
    cfg = _build(Config, data, prefix="")
    validate(cfg)
    return cfg


#: The packaged demo recipe: what ``vlcohort train`` runs with no arguments
#: (``configs/demo.yaml`` is a link to it).
DEMO_RECIPE = Path(__file__).resolve().parent / "recipes" / "demo.yaml"


def default_config(overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """The embedded default (the demo recipe), resolved and validated."""
    return load_config(DEMO_RECIPE, overrides)


def _split_override(item: str) -> tuple[str, Any]:
    if "=" not in item:
        raise ConfigError(f"override {item!r}: write it as key.sub=value (e.g. run.steps=5)")
    key, raw = item.split("=", 1)
    return key.strip(), yaml.safe_load(raw) if raw.strip() else ""


def _set_dotted(data: dict, key: str, value: Any) -> None:
    """Set ``a.b.0.c`` in nested dicts/lists; list indices are numbers."""
    parts = key.split(".")
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        if isinstance(node, list):
            idx = _index(part, key)
            while len(node) <= idx:
                node.append({})
            node = node[idx]
            continue
        if part not in node or node[part] is None:
            node[part] = [] if nxt.isdigit() else {}
        node = node[part]
    last = parts[-1]
    if isinstance(node, list):
        idx = _index(last, key)
        while len(node) <= idx:
            node.append({})
        node[idx] = value
    else:
        node[last] = value


def _index(part: str, key: str) -> int:
    if not part.isdigit():
        raise ConfigError(f"override {key!r}: {part!r} must be a list index (0, 1, ...)")
    return int(part)


def _build(cls, data: Any, prefix: str):
    """Build dataclass ``cls`` from a mapping, checking keys and types."""
    where = prefix.rstrip(".") or "config"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of fields, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{prefix}{unknown[0]}: unknown key. Allowed under {where}: "
                          + ", ".join(fields))
    hints = typing.get_type_hints(cls)
    defaults = cls()
    kwargs = {}
    for name, f in fields.items():
        key = prefix + name
        if name not in data:
            continue
        kwargs[name] = _coerce(hints[name], data[name], key, getattr(defaults, name))
    return cls(**kwargs)


def _coerce(tp, value, key: str, default):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(args[0], value, key, default)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key + ".")
    if origin is dict:
        key_tp, value_tp = typing.get_args(tp)
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return {_coerce(key_tp, k, f"{key}.{k}", None): _coerce(value_tp, v, f"{key}.{k}", None)
                for k, v in value.items()}
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        out = []
        for i, v in enumerate(value):
            base = default[i] if isinstance(default, list) and i < len(default) else None
            if dataclasses.is_dataclass(item_tp):
                merged = dataclasses.asdict(base) if base is not None else {}
                if not isinstance(v, dict):
                    raise ConfigError(f"{key}.{i}: expected a mapping, got {v!r}")
                merged.update(v)
                out.append(_build(item_tp, merged, f"{key}.{i}."))
            else:
                out.append(_coerce(item_tp, v, f"{key}.{i}", None))
        return out
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return str(value)
    return value


# ----------------------------------------------------------------------------- validation


def validate(cfg: Config) -> None:
    """Checks that need more than one field, and choice fields; fills derived fields
    (``reward.source`` from ``method``)."""
    _check_choice("method", cfg.method)
    if cfg.method in RECIPE_METHODS:
        return _validate_self_play(cfg)
    for i, a in enumerate(cfg.agents):
        _check_choice("agents.*.dtype", a.dtype, f"agents.{i}.dtype")
        _check_choice("agents.*.attn_implementation", a.attn_implementation,
                      f"agents.{i}.attn_implementation")
        if a.min_pixels and a.max_pixels and a.min_pixels > a.max_pixels:
            raise ConfigError(f"agents.{i}: min_pixels={a.min_pixels} > max_pixels={a.max_pixels}")
        if not a.path:
            raise ConfigError(f"agents.{i}.path: empty; give a checkpoint folder, hub id or "
                              "tiny:<family> spec")
        if not re.fullmatch(r"cpu|cuda(:\d+)?", a.device):
            raise ConfigError(f"agents.{i}.device: {a.device!r}; use cpu, cuda or cuda:N")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", a.name):
            raise ConfigError(f"agents.{i}.name: {a.name!r}; use letters, digits, _ . - "
                              "(it names metric keys and checkpoint folders)")
    _check_choice("rollout.engine", cfg.rollout.engine)
    expected = METHOD_SOURCES[cfg.method]
    if cfg.reward.source is None:
        cfg.reward.source = expected  # method is a preset for the reward source
    _check_choice("reward.source", cfg.reward.source)
    if cfg.reward.source != expected:
        raise ConfigError(f"reward.source={cfg.reward.source!r} contradicts method="
                          f"{cfg.method!r} (which means {expected!r}); set one of them only")
    _check_choice("reward.topology", cfg.reward.topology)
    _check_choice("reward.grader", cfg.reward.grader)
    if not cfg.agents:
        raise ConfigError("agents: at least one agent is needed")
    names = [a.name for a in cfg.agents]
    if len(set(names)) != len(names):
        raise ConfigError(f"agents: names must be unique, got {names}")
    if cfg.reward.source == "peer_vote" and len(cfg.agents) < 2:
        raise ConfigError("reward.source=peer_vote needs at least 2 agents (a ring of one "
                          "agent would be self-vote); add an agent or use method=ttrl")
    for i, a in enumerate(cfg.agents):
        if a.reward_source is None:
            continue
        _check_choice("agents.*.reward_source", a.reward_source, f"agents.{i}.reward_source")
        if a.reward_source == "peer_vote" and len(cfg.agents) < 2:
            raise ConfigError(f"agents.{i}.reward_source=peer_vote needs at least 2 agents")
    for key in ("prompts_per_step", "rollouts_per_prompt", "max_new_tokens"):
        if getattr(cfg.rollout, key) < 1:
            raise ConfigError(f"rollout.{key}: must be >= 1, got {getattr(cfg.rollout, key)}")
    if cfg.rollout.temperature <= 0:
        raise ConfigError("rollout.temperature: must be > 0 (sampling is needed for groups)")
    if not 0 < cfg.rollout.top_p <= 1:
        raise ConfigError(f"rollout.top_p: must be in (0, 1], got {cfg.rollout.top_p}")
    if cfg.run.steps < 0:
        raise ConfigError(f"run.steps: must be >= 0, got {cfg.run.steps}")
    if cfg.run.output_dir is None:
        cfg.run.output_dir = f"runs/{cfg.run.name}"
    for key in ("reward.tie", "reward.answer_style", "data.source", "grpo.adv_scale",
                "grpo.kl_kind", "grpo.loss_agg", "grpo.is_level", "grpo.is_mode",
                "optim.schedule"):
        section, name = key.split(".")
        _check_choice(key, getattr(getattr(cfg, section), name))
    g = cfg.grpo
    if g.adv_scale == "group" and cfg.rollout.rollouts_per_prompt < 2:
        raise ConfigError("rollout.rollouts_per_prompt=1 with grpo.adv_scale=group: group "
                          "normalisation needs G >= 2 rollouts per prompt")
    seqs = cfg.rollout.prompts_per_step * cfg.rollout.rollouts_per_prompt
    if g.micro_batch_seqs < 1 or (g.micro_batch_seqs < seqs and seqs % g.micro_batch_seqs):
        raise ConfigError(f"grpo.micro_batch_seqs={g.micro_batch_seqs} must divide the "
                          f"sequences per agent per step (B x G = {seqs})")
    if g.ppo_epochs < 1:
        raise ConfigError(f"grpo.ppo_epochs: must be >= 1, got {g.ppo_epochs}")
    if g.clip_low < 0 or g.clip_high < 0 or g.clip_low >= 1:
        raise ConfigError("grpo.clip_low must be in [0, 1) and grpo.clip_high >= 0")
    if g.kl_coef < 0:
        raise ConfigError(f"grpo.kl_coef: must be >= 0, got {g.kl_coef}")
    if g.is_mode == "mask" and not 0 <= g.is_low < 1 < g.is_high:
        raise ConfigError("grpo.is_low must be in [0, 1) and grpo.is_high > 1 for is_mode=mask")
    if g.is_mode == "truncate" and g.is_cap < 1:
        raise ConfigError(f"grpo.is_cap: must be >= 1, got {g.is_cap}")
    if not 0 <= cfg.reward.min_share <= 1:
        raise ConfigError(f"reward.min_share: must be in [0, 1], got {cfg.reward.min_share}")
    o = cfg.optim
    if len(o.betas) != 2 or not all(0 <= b < 1 for b in o.betas):
        raise ConfigError(f"optim.betas: two numbers in [0, 1), got {o.betas}")
    if not 0 <= o.warmup_ratio < 1 or not 0 <= o.min_lr_ratio <= 1:
        raise ConfigError("optim.warmup_ratio must be in [0, 1) and optim.min_lr_ratio in [0, 1]")
    for i, a in enumerate(cfg.agents):
        if a.lora_rank < 0:
            raise ConfigError(f"agents.{i}.lora_rank: must be >= 0")
    for arm in cfg.arms:
        if arm not in METHOD_SOURCES:
            raise ConfigError(f"arms: {arm!r} is not one of: {', '.join(METHOD_SOURCES)}")
        if METHOD_SOURCES[arm] == "peer_vote" and len(cfg.agents) < 2:
            raise ConfigError(f"arms: {arm} needs at least 2 agents")
    if len(set(cfg.arms)) != len(cfg.arms):
        raise ConfigError(f"arms: each method once, got {cfg.arms}")
    for i, a in enumerate(cfg.agents):
        w = a.warmup
        if w.steps < 0 or w.uniform_steps < 0 or w.batch_size < 1:
            raise ConfigError(f"agents.{i}.warmup: steps and uniform_steps >= 0, batch_size >= 1")
        if w.steps and not w.tasks:
            raise ConfigError(f"agents.{i}.warmup.tasks: which task families to learn "
                              "(warmup.steps > 0)")
        if w.uniform_steps and not w.uniform_tasks:
            raise ConfigError(f"agents.{i}.warmup.uniform_tasks: needed when uniform_steps > 0")
        if "{}" not in w.answer_template:
            raise ConfigError(f"agents.{i}.warmup.answer_template: must hold {{}} for the letter")
    d = cfg.data
    _check_choice("data.preset", d.preset)
    if d.source != "synthetic" and not d.path:
        raise ConfigError(f"data.path: empty; data.source={d.source} needs a "
                          + ("file or dataset folder" if d.source == "file" else "hub dataset id"))
    if d.limit < 0:
        raise ConfigError(f"data.limit: must be >= 0 (0: all rows), got {d.limit}")
    if d.where and d.source == "synthetic":
        raise ConfigError("data.where: filters rows of a data file; it needs data.source=file "
                          "or hub")
    for column, values in d.where.items():
        if not str(column).strip() or not values:
            raise ConfigError(f"data.where.{column}: give a column name and a non-empty list "
                              "of the values to keep, e.g. {level: [Level 3, Level 4]}")
    for i, a in enumerate(cfg.agents):
        if a.view.column and a.view.rewrite_file:
            raise ConfigError(f"agents.{i}.view: set column or rewrite_file, not both")
        if (a.view.column or a.view.rewrite_file) and d.source == "synthetic":
            raise ConfigError(f"agents.{i}.view: per-agent views need data.source=file or hub")
        if a.view.rewrite_file and not Path(a.view.rewrite_file).is_file():
            raise ConfigError(f"agents.{i}.view.rewrite_file: {a.view.rewrite_file} not found")
    if cfg.data.num_problems < 1:
        raise ConfigError("data.num_problems: must be >= 1")
    _validate_scale_out(cfg)
    _validate_monitor(cfg.monitor)
    if not cfg.data.tasks:
        raise ConfigError("data.tasks: at least one task family")


def _validate_scale_out(cfg: Config) -> None:
    """``rollout.vllm.*`` and ``distributed.*`` (the launch's world size is checked at
    start-up, in ``distributed.py``, where it is known)."""
    v, dist = cfg.rollout.vllm, cfg.distributed
    _check_choice("rollout.vllm.dtype", v.dtype)
    if v.tensor_parallel_size < 1:
        raise ConfigError(f"rollout.vllm.tensor_parallel_size: must be >= 1, got "
                          f"{v.tensor_parallel_size}")
    if not 0 < v.gpu_memory_utilization <= 1:
        raise ConfigError(f"rollout.vllm.gpu_memory_utilization: must be in (0, 1], got "
                          f"{v.gpu_memory_utilization}")
    if v.max_model_len < 0 or v.max_num_seqs < 1:
        raise ConfigError("rollout.vllm.max_model_len must be >= 0 (0: the model's) and "
                          "rollout.vllm.max_num_seqs >= 1")
    if v.max_images_per_prompt < 1:
        raise ConfigError(f"rollout.vllm.max_images_per_prompt: must be >= 1, got "
                          f"{v.max_images_per_prompt}")
    _check_choice("distributed.backend", dist.backend)
    if dist.ranks_per_agent < 0:
        raise ConfigError(f"distributed.ranks_per_agent: must be >= 0 (0: world size / "
                          f"agents), got {dist.ranks_per_agent}")
    if dist.ranks_per_agent and v.tensor_parallel_size > 1 \
            and dist.ranks_per_agent % v.tensor_parallel_size:
        raise ConfigError(f"rollout.vllm.tensor_parallel_size={v.tensor_parallel_size} must "
                          f"divide distributed.ranks_per_agent={dist.ranks_per_agent}")
    if dist.zero_stage not in (0, 1, 2, 3):
        raise ConfigError(f"distributed.zero_stage: {dist.zero_stage} is not one of 0, 1, 2, 3")
    if dist.offload_params and dist.zero_stage != 3:
        raise ConfigError("distributed.offload_params needs distributed.zero_stage=3")
    if dist.offload_optimizer and dist.zero_stage == 0:
        raise ConfigError("distributed.offload_optimizer needs distributed.zero_stage >= 1")
    if dist.deepspeed_config and not Path(dist.deepspeed_config).is_file():
        raise ConfigError(f"distributed.deepspeed_config: {dist.deepspeed_config} not found")
    if dist.timeout_s < 1:
        raise ConfigError(f"distributed.timeout_s: must be >= 1, got {dist.timeout_s}")


def _validate_monitor(m: MonitorConfig) -> None:
    """``monitor.*``: positive thresholds, factors above 1, known signal names."""
    if m.collapse_threshold <= 0:
        raise ConfigError(f"monitor.collapse_threshold: must be > 0, got {m.collapse_threshold}")
    for key in ("collapse_patience", "length_patience", "spike_window"):
        if getattr(m, key) < 1:
            raise ConfigError(f"monitor.{key}: must be >= 1, got {getattr(m, key)}")
    for key in ("length_factor", "spike_factor"):
        if getattr(m, key) <= 1:
            raise ConfigError(f"monitor.{key}: must be > 1, got {getattr(m, key)}")
    for key in ("loss_floor", "kl_floor"):
        if getattr(m, key) < 0:
            raise ConfigError(f"monitor.{key}: must be >= 0, got {getattr(m, key)}")
    for i, name in enumerate(m.stop_on):
        if name not in MONITOR_SIGNALS:
            raise ConfigError(f"monitor.stop_on.{i}: {name!r} is not one of: "
                              + ", ".join(MONITOR_SIGNALS))
    if m.stop_on and not m.enable:
        raise ConfigError("monitor.stop_on needs monitor.enable=true (a disabled monitor "
                          "cannot stop the run)")
def self_play_roles(cfg: Config) -> tuple[int, int]:
    """(challenger index, solver index) from ``self_play.challenger`` / ``self_play.solver``,
    each an agent name or an index into ``agents``."""
    names = [a.name for a in cfg.agents]
    out = []
    for key in ("challenger", "solver"):
        value = str(getattr(cfg.self_play, key))
        if value in names:
            out.append(names.index(value))
        elif value.isdigit() and int(value) < len(names):
            out.append(int(value))
        else:
            raise ConfigError(f"self_play.{key}: {value!r} names no agent; give an agent name "
                              f"({', '.join(names)}) or an index 0..{len(names) - 1}")
    if out[0] == out[1]:
        raise ConfigError(f"self_play.challenger and self_play.solver are both agent "
                          f"{names[out[0]]!r}; the two roles need two agents (two copies of one "
                          "model are fine: give both agents the same path)")
    return out[0], out[1]


def _validate_self_play(cfg: Config) -> None:
    """``method: self_play``: its own section and the roles, then every check that does not
    depend on a reward source, run as for a single-source run. There is no single reward
    source (challenger: the solver's uncertainty; solver: its majority label and gold
    anchors), so ``reward.source`` must stay unset; ``reward.grader``, ``tie`` and
    ``answer_style`` apply to the solver's answers."""
    if cfg.reward.source is not None:
        raise ConfigError(f"reward.source={cfg.reward.source!r}: method=self_play has no single "
                          "reward source (the challenger is rewarded by the solver's "
                          "uncertainty, the solver by its majority answers and gold anchors); "
                          "leave reward.source unset")
    if len(cfg.agents) != 2:
        raise ConfigError(f"agents: method=self_play needs exactly 2 agents (a challenger and a "
                          f"solver), got {len(cfg.agents)}")
    if cfg.arms:
        raise ConfigError("arms: method=self_play runs alone; set arms=[]")
    if cfg.data.decouple:
        raise ConfigError("data.decouple: not used by method=self_play; set it false")
    if cfg.eval.every:
        raise ConfigError("eval.every: held-out evaluation is not wired into method=self_play "
                          "(selfplay/solver/anchor_acc tracks the solver); set eval.every=0")
    sp = cfg.self_play
    _check_choice("self_play.band_rule", sp.band_rule)
    _check_choice("self_play.images", sp.images)
    if not 0 <= sp.anchors_per_prompt <= 5:
        raise ConfigError(f"self_play.anchors_per_prompt: k must be in 0..5, got "
                          f"{sp.anchors_per_prompt}")
    if sp.anchor_pool_size < max(1, sp.anchors_per_prompt):
        raise ConfigError(f"self_play.anchor_pool_size: must be >= 1 and >= "
                          f"self_play.anchors_per_prompt, got {sp.anchor_pool_size}")
    if sp.solver_samples < (2 if cfg.grpo.adv_scale == "group" else 1):
        raise ConfigError(f"self_play.solver_samples: m={sp.solver_samples}; the m answers are "
                          "the solver's GRPO group: m >= 2 with grpo.adv_scale=group")
    if len(sp.band) != 2 or not 0 <= sp.band[0] <= sp.band[1] <= 1:
        raise ConfigError(f"self_play.band: [low, high] with 0 <= low <= high <= 1, got {sp.band}")
    if sp.repetition_weight < 0 or sp.anchor_weight < 0:
        raise ConfigError("self_play.repetition_weight and self_play.anchor_weight must be >= 0")
    if not 0 < sp.bleu_threshold <= 1:
        raise ConfigError(f"self_play.bleu_threshold: must be in (0, 1], got {sp.bleu_threshold}")
    if not 0 <= sp.format_weight <= 1:
        raise ConfigError(f"self_play.format_weight: must be in [0, 1], got {sp.format_weight}")
    if sp.anchors_per_step < 0:
        raise ConfigError(f"self_play.anchors_per_step: must be >= 0, got {sp.anchors_per_step}")
    if sp.challenger_steps < 0 or sp.solver_steps < 0 or sp.challenger_steps + sp.solver_steps < 1:
        raise ConfigError("self_play.challenger_steps and self_play.solver_steps: >= 0, and at "
                          "least one phase must have steps")
    if sp.question_max_new_tokens < 1 or sp.hist_bins < 1:
        raise ConfigError("self_play.question_max_new_tokens and self_play.hist_bins: must be >= 1")
    if not sp.challenger_request.strip():
        raise ConfigError("self_play.challenger_request: empty; the challenger needs a request")
    # The rest (agents, rollout, grpo, optim, data...) as for a single-source run; the
    # stand-in method's reward source is set on a copy of the reward section only.
    validate(dataclasses.replace(cfg, method="ttrl", reward=dataclasses.replace(cfg.reward)))
    self_play_roles(cfg)


def _check_choice(pattern: str, value: str, key: str | None = None) -> None:
    allowed = CHOICES[pattern]
    if value not in allowed:
        raise ConfigError(f"{key or pattern}: {value!r} is not one of: {', '.join(allowed)}")


# ----------------------------------------------------------------------------- output


def derived_totals(cfg: Config) -> dict[str, int]:
    """Totals the config implies, printed with it (DESIGN.md rule 5)."""
    A, B, G = len(cfg.agents), cfg.rollout.prompts_per_step, cfg.rollout.rollouts_per_prompt
    return {"agents (A)": A, "prompts_per_step (B)": B, "rollouts_per_prompt (G)": G,
            "sequences_per_step (A x B x G)": A * B * G,
            "sequences_per_agent_per_step (B x G)": B * G}


def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)


def to_yaml(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False, allow_unicode=True, width=100)


def resolved_text(cfg: Config) -> str:
    totals = "\n".join(f"#   {k}: {v}" for k, v in derived_totals(cfg).items())
    return f"# resolved config\n{to_yaml(cfg)}# derived totals\n{totals}\n"


def save_resolved(cfg: Config, folder: str | Path) -> Path:
    """Write ``config.yaml`` (loadable with :func:`load_config`) into the run folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(to_yaml(cfg))
    tmp.replace(path)
    return path


def field_docs(cls=Config, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default, docstring) for every leaf field, read from the source docstrings."""
    docs = _attribute_docstrings(cls)
    out = []
    default = cls()
    for f in dataclasses.fields(cls):
        value = getattr(default, f.name)
        key = prefix + f.name
        if dataclasses.is_dataclass(value):
            out.extend(field_docs(type(value), key + "."))
        elif isinstance(value, list) and value and dataclasses.is_dataclass(value[0]):
            out.append((key, f"[{len(value)} entries]", docs.get(f.name, "")))
            out.extend(field_docs(type(value[0]), key + ".N."))
        else:
            out.append((key, repr(value), docs.get(f.name, "")))
    return out


def _attribute_docstrings(cls) -> dict[str, str]:
    """The string literal right under each field in the class body."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs
