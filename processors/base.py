"""The adapter interface: everything family-specific, behind one set of methods.

The trainer, the rollout engines and the evaluator talk to a model only through an
:class:`Adapter`. An adapter is bound to one checkpoint folder (or ``tiny:`` spec) and
owns, for that family:

- ``load_model()``          model (+ processor, loaded at construction) via ``from_pretrained``
- ``render(problem)``       problem -> chat messages -> prompt text (the family's template)
- ``prepare_images(...)``   path / bytes / PIL in any mode -> RGB, family resize rules
- ``encode_prompts(...)``   left-padded generation batch with the family's tensors
- ``encode_training(...)``  prompt + completion batch with masks, for a batched forward
- ``completion_logprobs``   per-token log-probs of completion tokens, fp32, chunked over T
- ``completion_token_stats`` the same log-probs + per-token self-certainty and entropy
- ``stop_token_ids()``      the end-of-turn ids generation must stop at
- ``vllm_request(...)``     the prompt + ``multi_modal_data`` form of ``vllm.LLM.generate``
- ``image_token_count``     how many prompt tokens an image of a given size costs

Most of the work is the same for every family (transformers' processors are uniform
enough); a family module overrides only what differs. Adding a family = one module with a
subclass and one ``register`` line (see README, "Adding a model family").

Dimension letters: B sequences, P prompt tokens, C completion tokens, V vocabulary.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Sequence

import torch

from vlcohort.data.problems import LETTERS, Problem

from .images import ImageLimits, ProblemInputError, open_image

# ``<image>``, ``<image1>``, ``<image 2>`` mark where an image goes in a question.
IMAGE_PLACEHOLDER = re.compile(r"<image\s*(\d*)>")

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."


@dataclass(frozen=True)
class AdapterOptions:
    """Loading and preprocessing settings a user may set per model (config: ``model.*``).

    Family-specific limits are here too, named by what they mean; an adapter reads the
    ones that apply to its family and ignores the rest.
    """

    dtype: str = "float32"
    """Weights dtype: float32 | bfloat16 | float16 | auto (the checkpoint's own)."""
    attn_implementation: str = "sdpa"
    """eager | sdpa | flash_attention_2 (the latter needs a GPU and the flash-attn package)."""
    trust_remote_code: bool = False
    """Run code shipped inside a checkpoint. Off: every supported family is native."""
    min_pixels: int | None = None
    """Qwen2.5-VL: lower pixel budget per image (qwen-vl-utils default 4 x 28 x 28)."""
    max_pixels: int | None = None
    """Qwen2.5-VL: upper pixel budget per image (None: the checkpoint's processor value)."""
    max_tiles: int | None = None
    """InternVL3.5: most tiles per image in dynamic tiling (None: the checkpoint's, 12)."""
    pan_and_scan: bool = False
    """Gemma-3: add pan-and-scan crops for large non-square images."""
    image_limits: ImageLimits = field(default_factory=ImageLimits)
    """Decompression-bomb and minimum-size guards, applied before family preprocessing."""
    logprob_chunk_tokens: int = 256
    """Completion positions per chunk when computing log-probs ([B, chunk, V] at a time)."""


@dataclass
class RenderedPrompt:
    """A problem after the chat template: prompt text and its images, in placeholder order."""

    problem_id: str
    text: str
    images: list  # list[PIL.Image.Image], RGB, family-resized


@dataclass
class PromptBatch:
    """A left-padded generation batch.

    ``inputs`` holds exactly what ``model.generate`` / ``model.forward`` take:
    ``input_ids`` [B, P], ``attention_mask`` [B, P] and the family tensors
    (``pixel_values``, ``image_grid_thw``, ``token_type_ids``...).
    """

    inputs: dict[str, torch.Tensor]
    problem_ids: list[str]
    image_token_counts: list[list[int]]  # per sequence, per image: prompt tokens it costs

    @property
    def prompt_len(self) -> int:
        return int(self.inputs["input_ids"].shape[1])

    def to(self, device) -> "PromptBatch":
        """The same batch with its tensors on ``device`` (the model's)."""
        return PromptBatch(inputs=_tensors_to(self.inputs, device), problem_ids=self.problem_ids,
                           image_token_counts=self.image_token_counts)


@dataclass
class TrainingBatch:
    """Prompt + completion sequences for one batched forward pass.

    ``inputs``: ``input_ids`` [B, P + C] (prompt left-padded, completion right-padded),
    ``attention_mask`` [B, P + C], family tensors extended over the completion.
    ``completion_ids`` [B, C] and ``completion_mask`` [B, C] (1 on real completion tokens).
    """

    inputs: dict[str, torch.Tensor]
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    prompt_len: int

    def to(self, device) -> "TrainingBatch":
        """The same batch with its tensors on ``device`` (the model's)."""
        return TrainingBatch(inputs=_tensors_to(self.inputs, device),
                             completion_ids=self.completion_ids.to(device),
                             completion_mask=self.completion_mask.to(device),
                             prompt_len=self.prompt_len)


def _tensors_to(inputs: dict, device) -> dict:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


@dataclass
class CompletionStats:
    """Per completion token, from one pass (:meth:`Adapter.completion_token_stats`); each
    [B, C], 0 on padding."""

    logprobs: torch.Tensor  # [B, C] log-prob of the sampled token under logits / temperature
    self_certainty: torch.Tensor  # [B, C] KL(U || p) of the next-token distribution
    entropy: torch.Tensor  # [B, C] H(p) of the next-token distribution


class Adapter:
    """Base class of the family adapters. Subclasses set the class attributes and override
    the few hooks marked *family hook*; the rest is shared."""

    family: ClassVar[str] = ""
    """Human-readable family name (README table, messages)."""
    model_types: ClassVar[tuple[str, ...]] = ()
    """``config.model_type`` values this adapter serves (the registry key)."""
    is_multimodal: ClassVar[bool] = True
    stop_tokens: ClassVar[tuple[str, ...]] = ()
    """Token strings that end a turn, besides the tokenizer's and generation config's eos."""
    placeholder_tokens: ClassVar[tuple[str, ...]] = ()
    """Multimodal placeholder / delimiter tokens. A completion must never contain one (the
    model would read it as an image slot), so generation suppresses them and
    ``completion_logprobs`` excludes them from the distribution the same way."""
    per_token_keys: ClassVar[tuple[str, ...]] = ()
    """Family per-token inputs ([B, P]) that a training batch extends over the completion
    with zeros (``attention_mask`` is always extended, with the completion mask)."""
    takes_video: ClassVar[bool] = False
    """The family's model also takes videos (vLLM then reserves memory for them unless
    told that prompts carry none)."""

    def __init__(self, path: str | Path, options: AdapterOptions | None = None,
                 processor: Any | None = None):
        self.path = str(path)
        self.options = options or AdapterOptions()
        self.processor = processor if processor is not None else self._load_processor()

    # ----------------------------------------------------------------------- loading

    def _load_processor(self):
        from transformers import AutoProcessor

        return AutoProcessor.from_pretrained(
            self.path, trust_remote_code=self.options.trust_remote_code
        )

    @property
    def tokenizer(self):
        return getattr(self.processor, "tokenizer", self.processor)

    def _model_class(self):
        from transformers import AutoModelForImageTextToText

        return AutoModelForImageTextToText

    def load_model(self, **overrides):
        """The policy model, loaded through ``from_pretrained`` with the options' dtype and
        attention implementation. Returned in eval mode; the trainer switches modes."""
        dtype = self.options.dtype
        kwargs = dict(
            dtype=dtype if dtype == "auto" else getattr(torch, dtype),
            attn_implementation=self.options.attn_implementation,
            trust_remote_code=self.options.trust_remote_code,
        )
        kwargs.update(overrides)
        model = self._model_class().from_pretrained(self.path, **kwargs)
        return model.eval()

    # ----------------------------------------------------------------------- rendering

    def messages(self, problem: Problem, system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
                 instruction: str | None = None) -> list[dict]:
        """Problem -> chat messages in the HF content-list form.

        Images are placed where the question's placeholders are (``<image>``, ``<image1>``);
        with no placeholder they go before the text. Options are listed after the question
        unless the question already lists them. The answer-format ``instruction`` (e.g.
        "put your final answer within \\boxed{}") ends the user turn.
        """
        if problem.images and not self.is_multimodal:
            raise ProblemInputError.of("images_for_text_model", 
                f"problem {problem.id!r}: has {len(problem.images)} image(s) but {self.family} "
                "is a text-only model. Use a vision-language model, or drop the images."
            )
        text = problem.text if problem.text is not None else ""
        if not text.strip():
            raise ProblemInputError.of("empty_question", f"problem {problem.id!r}: field 'text' is empty; every "
                                    "problem needs a question. Fix or drop the record.")
        pieces = _interleave(problem, text, self.is_multimodal)
        if problem.options:
            pieces.append({"type": "text", "text": "\n" + format_options(problem.options)})
        if instruction:
            pieces.append({"type": "text", "text": "\n" + instruction})
        pieces = _merge_adjacent_text(pieces)
        msgs: list[dict] = []
        if system_prompt:
            msgs.append({"role": "system", "content": [{"type": "text", "text": system_prompt}]})
        msgs.append({"role": "user", "content": pieces})
        return msgs

    def render(self, problem: Problem, system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
               instruction: str | None = None) -> RenderedPrompt:
        """Problem -> prompt text through the family's own chat template, plus its images
        opened, checked and preprocessed by the family's rules."""
        msgs = self.messages(problem, system_prompt, instruction)
        text = self.processor.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        images = self.prepare_images(problem.images, problem_id=problem.id,
                                     base_dir=problem.meta.get("base_dir"))
        return RenderedPrompt(problem_id=problem.id, text=text, images=images)

    # ----------------------------------------------------------------------- images

    def prepare_images(self, images: Sequence[Any], *, problem_id: str,
                       base_dir: str | None = None) -> list:
        """Open, check and convert every image, then apply the family's resize rule."""
        out = []
        for i, src in enumerate(images):
            image = open_image(src, problem_id=problem_id, index=i,
                               limits=self.options.image_limits, base_dir=base_dir)
            out.append(self.resize_image(image, problem_id=problem_id, index=i))
        return out

    def resize_image(self, image, *, problem_id: str, index: int):
        """*Family hook*: resize one RGB image before the processor sees it."""
        return image

    def image_token_count(self, width: int, height: int) -> int:
        """*Family hook*: prompt tokens one image of this (already prepared) size costs,
        delimiters included. Derived from the family's rules and the processor config."""
        raise NotImplementedError

    def processor_image_kwargs(self) -> dict:
        """*Family hook*: extra keyword arguments for the processor's image preprocessing."""
        return {}

    # ----------------------------------------------------------------------- encoding

    def encode_prompts(self, rendered: Sequence[RenderedPrompt]) -> PromptBatch:
        """Rendered prompts -> one left-padded batch with the family's tensors."""
        texts = [r.text for r in rendered]
        kwargs: dict[str, Any] = dict(padding=True, padding_side="left", return_tensors="pt",
                                      add_special_tokens=False)  # templates add BOS themselves
        if self.is_multimodal:
            if any(r.images for r in rendered):
                kwargs["images"] = [list(r.images) for r in rendered]
                kwargs.update(self.processor_image_kwargs())
            inputs = self.processor(text=texts, **kwargs)
        else:
            inputs = self.tokenizer(texts, **kwargs)
        inputs = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        counts = [[self.image_token_count(*im.size) for im in r.images] for r in rendered]
        return PromptBatch(inputs=inputs, problem_ids=[r.problem_id for r in rendered],
                           image_token_counts=counts)

    def encode_training(self, prompts: PromptBatch,
                        completions: Sequence[Sequence[int]]) -> TrainingBatch:
        """Append completions (token ids, stop token included, no padding) to a prompt batch.

        Row i of ``prompts`` pairs with ``completions[i]``; for G rollouts per prompt,
        encode each rendered prompt G times (``encode_prompts([r for r in rs for _ in
        range(G)])``), which keeps every family's per-image tensors in step. Completions are right-padded to
        the longest; per-token family tensors are extended with zeros.
        """
        ids = prompts.inputs["input_ids"]  # [B, P]
        B = ids.shape[0]
        if len(completions) != B:
            raise ValueError(f"{len(completions)} completions for {B} prompt rows")
        C = max(1, max((len(c) for c in completions), default=1))
        pad_id = self.pad_token_id()
        comp = torch.full((B, C), pad_id, dtype=ids.dtype)  # [B, C]
        comp_mask = torch.zeros((B, C), dtype=prompts.inputs["attention_mask"].dtype)
        for i, c in enumerate(completions):
            if len(c):
                comp[i, : len(c)] = torch.as_tensor(list(c), dtype=ids.dtype)
                comp_mask[i, : len(c)] = 1
        inputs = dict(prompts.inputs)
        inputs["input_ids"] = torch.cat([ids, comp], dim=1)  # [B, P + C]
        inputs["attention_mask"] = torch.cat([prompts.inputs["attention_mask"], comp_mask], 1)
        for key in self.per_token_keys:
            if key in inputs:
                t = inputs[key]  # [B, P]
                inputs[key] = torch.cat([t, torch.zeros((B, C), dtype=t.dtype)], dim=1)
        return TrainingBatch(inputs=inputs, completion_ids=comp, completion_mask=comp_mask,
                             prompt_len=prompts.prompt_len)

    def pad_token_id(self) -> int:
        tok = self.tokenizer
        return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    # ----------------------------------------------------------------------- log-probs

    def completion_logprobs(self, model, batch: TrainingBatch, temperature: float = 1.0,
                            chunk_tokens: int | None = None) -> torch.Tensor:
        """Per-token log-probabilities of the completion tokens under ``model``.

        One forward pass through the decoder to hidden states; the LM head and
        ``log_softmax`` then run over chunks of completion positions, in float32, so that
        [B, C, V] logits never exist whole. ``temperature`` divides the logits first (the
        distribution the sampler drew from). Returns [B, C]; padded positions hold 0.
        Differentiable: the trainer calls it with grad enabled for the policy loss.
        """
        return self._completion_pass(model, batch, temperature, chunk_tokens, stats=None)[0]

    def completion_token_stats(self, model, batch: TrainingBatch, temperature: float = 1.0,
                               chunk_tokens: int | None = None,
                               stats_temperature_scaled: bool = False) -> "CompletionStats":
        """Log-probs of the completion tokens *and* statistics of the distribution each was
        drawn from, from one chunked pass (the LM head runs once per chunk for both).

        ``logprobs`` [B, C] are exactly :meth:`completion_logprobs`' (under logits /
        ``temperature``). ``self_certainty`` and ``entropy`` [B, C] are
        :func:`distribution_stats` of the next-token distribution at each completion
        position: of softmax(logits / temperature) when ``stats_temperature_scaled``, else
        of softmax(logits) (the model's own distribution, whatever the sampler's
        temperature). The family's suppressed placeholder ids are outside the distribution
        (probability 0) in both. Padded positions hold 0. A no-grad pass (rewards are data):
        nothing it returns carries a gradient. A chunk holds one or two [B, chunk, V] float32
        buffers more than the log-prob pass.
        """
        with torch.no_grad():
            lp, sc, ent = self._completion_pass(model, batch, temperature, chunk_tokens,
                                                stats=stats_temperature_scaled)
        return CompletionStats(logprobs=lp, self_certainty=sc, entropy=ent)

    def _completion_pass(self, model, batch: TrainingBatch, temperature: float,
                         chunk_tokens: int | None, stats: bool | None):
        """The one chunk loop behind :meth:`completion_logprobs` and
        :meth:`completion_token_stats`. ``stats``: None = log-probs only; True / False =
        also per-token statistics, of the temperature-scaled / unscaled distribution.
        Returns (logprobs, self_certainty or None, entropy or None), each [B, C]."""
        model = unwrap(model)
        hidden = self.decoder_hidden_states(model, batch.inputs)  # [B, P + C, H]
        P, C = batch.prompt_len, batch.completion_ids.shape[1]
        h = hidden[:, P - 1: P + C - 1]  # [B, C, H]: position t predicts completion token t
        head = model.get_output_embeddings()
        softcap = getattr(model.config.get_text_config(), "final_logit_softcapping", None)
        suppressed = self.suppressed_token_ids()
        chunk = chunk_tokens or self.options.logprob_chunk_tokens
        out, out_sc, out_ent = [], [], []
        for s in range(0, C, chunk):
            logits = head(h[:, s: s + chunk]).float()  # [B, c, V]
            if softcap:
                logits = torch.tanh(logits / softcap) * softcap
            if stats is not None:  # on the finite logits, before the in-place -inf below
                z = logits / temperature if stats and temperature != 1.0 else logits
                sc, ent = distribution_stats(z, suppressed)  # [B, c] each
                out_sc.append(sc)
                out_ent.append(ent)
            if suppressed:
                logits[..., suppressed] = float("-inf")
            if temperature != 1.0:
                logits = logits / temperature
            logp = torch.log_softmax(logits, dim=-1)
            out.append(logp.gather(-1, batch.completion_ids[:, s: s + chunk, None]).squeeze(-1))
        mask = batch.completion_mask
        logprobs = torch.cat(out, dim=1) * mask  # [B, C]
        if stats is None:
            return logprobs, None, None
        return logprobs, torch.cat(out_sc, 1) * mask, torch.cat(out_ent, 1) * mask

    def decoder_hidden_states(self, model, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Final hidden states [B, T, H] of the language model (vision features merged in),
        without the LM head. Every supported family exposes its base as ``model.model``."""
        base = model.model
        out = base(**inputs, use_cache=False)
        return out.last_hidden_state

    # ----------------------------------------------------------------------- generation

    def suppressed_token_ids(self) -> list[int]:
        """Ids generation must never sample (the family's multimodal placeholders)."""
        vocab = self.tokenizer.get_vocab()
        return sorted({int(vocab[t]) for t in self.placeholder_tokens if t in vocab})

    def stop_token_ids(self) -> list[int]:
        """Token ids that end a completion: the family's end-of-turn tokens, the tokenizer's
        eos and the checkpoint's generation-config eos, deduplicated, in that order."""
        tok = self.tokenizer
        vocab = tok.get_vocab()
        ids: list[int] = [int(vocab[t]) for t in self.stop_tokens if t in vocab]
        if tok.eos_token_id is not None:
            ids.append(int(tok.eos_token_id))
        gen_eos = _generation_eos(self.path)
        ids.extend(gen_eos)
        return list(dict.fromkeys(ids))

    def vllm_request(self, rendered: RenderedPrompt) -> dict:
        """The request form ``vllm.LLM.generate`` takes (vLLM's documented multimodal API):
        ``{"prompt": text, "multi_modal_data": {"image": PIL | [PIL, ...]},
        "mm_processor_kwargs": {...}}``.

        The prompt text carries one unexpanded image placeholder per image (the chat
        template's); vLLM's own processor for the family expands it. Images are the
        adapter-prepared ones, so the family resize rule applies exactly once.

        vLLM tokenizes a text prompt with the tokenizer's special tokens (its default,
        like ``tokenizer(text)``), while the chat template has already written the BOS
        (Gemma's ``<bos>``, Llama's ``<|begin_of_text|>``): the leading BOS text is
        dropped here when the tokenizer adds one itself, so vLLM's prompt ids equal
        ``encode_prompts``' ids (``add_special_tokens=False``) instead of starting with two
        BOS. Written against vLLM's API; it cannot be run without a GPU.
        """
        request: dict[str, Any] = {"prompt": self._text_without_template_bos(rendered.text)}
        if rendered.images:
            request["multi_modal_data"] = {
                "image": rendered.images[0] if len(rendered.images) == 1 else list(rendered.images)
            }
        mm_kwargs = self.vllm_processor_kwargs()
        if mm_kwargs and rendered.images:
            request["mm_processor_kwargs"] = mm_kwargs
        return request

    def _text_without_template_bos(self, text: str) -> str:
        """``text`` minus a leading BOS token text that tokenizing with special tokens
        would add again."""
        tok = self.tokenizer
        bos, bos_id = tok.bos_token, tok.bos_token_id
        if not bos or bos_id is None or not text.startswith(bos):
            return text
        adds_bos = bos_id in tok("", add_special_tokens=True)["input_ids"]
        return text[len(bos):] if adds_bos else text

    def vllm_processor_kwargs(self) -> dict:
        """*Family hook*: per-request ``mm_processor_kwargs`` for vLLM."""
        return {}

    def vllm_mm_limits(self, max_images: int) -> dict[str, int]:
        """vLLM's ``limit_mm_per_prompt``: up to ``max_images`` images, and no videos (so
        vLLM's memory profile does not reserve room for a video nobody sends)."""
        limits = {"image": max_images}
        if self.takes_video:
            limits["video"] = 0
        return limits


# --------------------------------------------------------------------------- helpers


def distribution_stats(logits: torch.Tensor, excluded: Sequence[int] = ()
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Self-certainty and entropy of the next-token distributions p = softmax(logits) over
    the V' = V - len(excluded) ids that are not ``excluded`` (suppressed placeholders).

    logits: [..., V] finite floats (exclusion is by index, not by -inf). Returns
    (self_certainty, entropy), each [...]:

    - self_certainty = KL(U || p) = -log V' - (1/V') sum_v log p_v
      = logsumexp(z) - mean(z) - log V', U uniform over the V' ids (INTUITOR, arXiv
      2505.19590): 0 for the uniform distribution, larger when confident. INTUITOR's code
      drops the constant -log V' (it cancels in group-normalised advantages); it is kept
      here so the value reads as a KL.
    - entropy = -sum_v p_v log p_v = logsumexp(z) - sum_v p_v z_v (RENT): 0 when certain,
      log V' at most.

    One [..., V] buffer besides the input (the softmax, built in place).
    """
    excluded = sorted(set(excluded))
    p = logits.clone()  # [..., V] becomes the softmax, in place
    if excluded:
        p[..., excluded] = float("-inf")
    m = p.amax(-1, keepdim=True)  # [..., 1] largest allowed logit: a stable exp
    p.sub_(m).exp_()  # unnormalised, 0 on excluded ids
    total = p.sum(-1, keepdim=True)  # [..., 1]
    lse = (m + total.log()).squeeze(-1)  # [...] logsumexp over the allowed ids
    p.div_(total)  # [..., V] softmax
    n = logits.shape[-1] - len(excluded)
    z_sum = logits.sum(-1)  # [...]
    if excluded:
        z_sum = z_sum - logits[..., excluded].sum(-1)
    self_certainty = lse - z_sum / n - math.log(n)
    entropy = lse - torch.linalg.vecdot(p, logits)
    return self_certainty, entropy


def unwrap(model):
    """The transformers model inside a PEFT wrapper (LoRA layers stay injected in it)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def format_options(options: Sequence[str]) -> str:
    """``["3", "4"]`` -> ``"Choices:\\nA. 3\\nB. 4"`` (the form the grader maps back)."""
    return "Choices:\n" + "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))


def _interleave(problem: Problem, text: str, multimodal: bool) -> list[dict]:
    """Split the question at its image placeholders into image / text content pieces."""
    n_images = len(problem.images or [])
    marks = list(IMAGE_PLACEHOLDER.finditer(text))
    if marks and len(marks) != n_images:
        raise ProblemInputError.of("placeholder_mismatch", 
            f"problem {problem.id!r}: field 'text' has {len(marks)} image placeholder(s) "
            f"({', '.join(m.group(0) for m in marks)}) but 'images' holds {n_images}. "
            "Make them match, or remove the placeholders to put all images before the text."
        )
    if not marks:
        return [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": text}]
    numbered = [m.group(1) for m in marks]
    if all(numbered) and sorted(int(n) for n in numbered) != list(range(1, n_images + 1)):
        raise ProblemInputError.of("placeholder_mismatch", 
            f"problem {problem.id!r}: numbered placeholders {numbered} do not cover "
            f"<image1>..<image{n_images}> exactly once each."
        )
    pieces: list[dict] = []
    pos = 0
    for m in marks:
        if text[pos: m.start()]:
            pieces.append({"type": "text", "text": text[pos: m.start()]})
        pieces.append({"type": "image"})
        pos = m.end()
    if text[pos:]:
        pieces.append({"type": "text", "text": text[pos:]})
    return pieces


def _merge_adjacent_text(pieces: list[dict]) -> list[dict]:
    out: list[dict] = []
    for p in pieces:
        if p["type"] == "text" and out and out[-1]["type"] == "text":
            out[-1] = {"type": "text", "text": out[-1]["text"] + p["text"]}
        else:
            out.append(p)
    return out


def cut_at_stop(token_ids: Sequence[int], stop_ids: Sequence[int], pad_id: int | None = None) -> list[int]:
    """A generated row -> its completion: up to and including the first stop token, with
    trailing padding dropped when generation never stopped."""
    stops = set(stop_ids)
    out: list[int] = []
    for t in token_ids:
        t = int(t)
        out.append(t)
        if t in stops:
            return out
    if pad_id is not None:
        while out and out[-1] == pad_id:
            out.pop()
    return out


def _generation_eos(path: str) -> list[int]:
    cfg = Path(path) / "generation_config.json"
    if not cfg.is_file():
        return []
    import json

    eos = json.loads(cfg.read_text()).get("eos_token_id")
    if eos is None:
        return []
    return [int(e) for e in (eos if isinstance(eos, list) else [eos])]
