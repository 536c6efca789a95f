"""The adapter interface: everything family-specific, behind one set of methods.

The trainer, the rollout engines and the evaluator talk to a model only through an
:class:`Adapter`. An adapter is bound to one checkpoint folder (or ``tiny:`` spec) and
owns, for that family:

- ``load_model()``          model (+ processor, loaded at construction) via ``from_pretrained``
- ``render(problem)``       problem -> chat messages -> prompt text (the family's template)
- ``prepare_images(...)``   path / bytes / PIL in any mode -> RGB, family resize rules
- ``encode_prompts(...)``   left-padded generation batch with the family's tensors
- ``encode_training(...)``  prompt + completion batch with masks, for a batched forward
- ``decoder_hidden_states``, ``lm_head``, ``logit_softcap``, ``suppressed_token_ids``
                            what the core's chunked log-prob pass needs of the model
                            (``vlcohort/training/logprobs.py``: the maths itself)
- ``stop_token_ids()``      the end-of-turn ids generation must stop at
- ``vllm_request(...)``     the prompt + ``multi_modal_data`` form of ``vllm.LLM.generate``
- ``image_token_count``     how many image pad tokens an image of a given size costs
                            (``prompt_image_token_counts``: for a whole prompt's images)
- ``extend_per_token``      how a family per-token tensor continues over the completion
- ``settings``              the family's own ``agents.N.processor: {...}`` settings

Most of the work is the same for every family (transformers' processors are uniform
enough); a family module overrides only what differs. Adding a family = one module with a
subclass decorated by ``vlcohort.processors.family.register_adapter`` and its tiny builder (see
README, "Adding a model family").

Dimension letters (docs/design.md, rule 5): N sequences (B prompts x G rollouts), L tokens per
sequence (L = P + T: P prompt tokens, T completion tokens), V vocabulary, H hidden size.
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Sequence

import torch

from vlcohort.data.problems import LETTERS, Problem

from .images import ImageLimits, ProblemInputError, open_image

# ``<image>``, ``<image1>``, ``<image 2>`` mark where an image goes in a question.
IMAGE_PLACEHOLDER = re.compile(r"<image\s*(\d*)>")

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."


@dataclass
class AdapterOptions:
    """Loading and preprocessing settings a user may set per model.

    Defined once, here: the run config's agent section (``vlcohort.config.ModelConfig``,
    YAML ``agents.N.*``) inherits these fields, with these docstrings (``vlcohort config
    --fields`` prints them), so a new option is one field here. The docstrings stay
    family-neutral (the core's help text names no family); which family reads which:
    ``min_pixels`` / ``max_pixels`` Qwen2.5-VL, ``max_tiles`` InternVL3.5,
    ``pan_and_scan`` Gemma-3; an adapter ignores the ones that do not apply to it.
    """

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
    max_source_pixels: int = ImageLimits.max_source_pixels
    """Decompression-bomb guard: refuse an image whose header declares more pixels."""
    min_image_side: int = ImageLimits.min_side
    """Refuse an image with a side shorter than this (a 1x1 image is a broken export)."""
    prompt_format: str = ""
    """How prompts are written: "" (prompt.format's value) | auto (the chat template, or
    r1_zero for a base model without one) | chat | r1_zero | plain | a .jinja file
    (``processors/prompt_formats.py``)."""
    logprob_chunk_tokens: int = 256
    """Completion positions per chunk when computing log-probs ([N, chunk, V] at a time)."""
    processor: dict[str, Any] = field(default_factory=dict)
    """Family settings, free-form: checked against the adapter's own declared settings
    (``Adapter.settings``); an unknown key is an error that lists what the family accepts."""

    @property
    def image_limits(self) -> ImageLimits:
        """The image guards, applied before family preprocessing."""
        return ImageLimits(max_source_pixels=self.max_source_pixels, min_side=self.min_image_side)

    @classmethod
    def of(cls, settings) -> "AdapterOptions":
        """The options part of anything that carries these fields (a ``ModelConfig``): a
        plain, separate copy, so the adapter does not see later edits of the config."""
        values = {f.name: getattr(settings, f.name) for f in fields(cls)}
        values["processor"] = dict(values["processor"] or {})
        return cls(**values)


class FamilySettingsError(ValueError):
    """A key or value of ``agents.N.processor`` the family does not accept."""


def family_settings(settings_cls: type | None, values: dict | None, family: str,
                    where: str = "processor"):
    """``values`` (the free-form ``processor`` mapping) checked against the family's
    settings dataclass and built into it; unknown keys and wrong types raise
    :class:`FamilySettingsError` naming the key (``<where>.<key>``) and, for an unknown
    key, every setting the family accepts with its type, default and docstring."""
    values = dict(values or {})
    if settings_cls is None:
        if values:
            raise FamilySettingsError(
                f"{where}.{sorted(values)[0]}: unknown setting; {family} takes no family "
                "settings (accepts: none).")
        return None
    known = {f.name: f for f in fields(settings_cls)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise FamilySettingsError(
            f"{where}.{unknown[0]}: unknown setting for {family}. {family} accepts: "
            + describe_settings(settings_cls))
    hints = typing.get_type_hints(settings_cls)
    return settings_cls(**{k: _checked(hints[k], v, f"{where}.{k}", family)
                           for k, v in values.items()})


def describe_settings(settings_cls: type | None) -> str:
    """``name (type, default ...): docstring; ...`` for each declared family setting."""
    if settings_cls is None:
        return "none"
    docs = _field_docstrings(settings_cls)
    hints = typing.get_type_hints(settings_cls)
    parts = []
    for f in fields(settings_cls):
        default = f.default if f.default is not MISSING else (
            f.default_factory() if f.default_factory is not MISSING else None)
        tp = getattr(hints[f.name], "__name__", None) or str(hints[f.name])
        doc = docs.get(f.name, "")
        parts.append(f"{f.name} ({tp}, default {default!r})" + (f": {doc}" if doc else ""))
    return "; ".join(parts)


def _field_docstrings(cls) -> dict[str, str]:
    """The string literal right under each field in the bodies of a dataclass and of its
    dataclass bases (a subclass's own wins; the convention of this project's settings;
    source unavailable: no docs)."""
    import ast
    import dataclasses
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        except (OSError, TypeError):
            continue
        docs.update({node.target.id: " ".join(nxt.value.value.split())
                     for node, nxt in zip(body, body[1:])
                     if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                     and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                     and isinstance(nxt.value.value, str)})
    return docs


def _checked(tp, value, key: str, family: str):
    """``value`` when it is of type ``tp`` (bool, int, float, str, Optional of one,
    or anything else unchecked); an int is accepted for a float."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        if value is None:
            return None
        tp = args[0]
    ok = {bool: lambda v: isinstance(v, bool),
          int: lambda v: isinstance(v, int) and not isinstance(v, bool),
          float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          str: lambda v: isinstance(v, str)}.get(tp)
    if ok is not None and not ok(value):
        raise FamilySettingsError(
            f"{key}: expected {tp.__name__} for {family}, got {value!r} "
            f"({type(value).__name__})")
    return float(value) if tp is float else value


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
    ``input_ids`` [N, P], ``attention_mask`` [N, P] and the family tensors
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

    ``inputs``: ``input_ids`` [N, P + T] (prompt left-padded, completion right-padded),
    ``attention_mask`` [N, P + T], family tensors extended over the completion.
    ``completion_ids`` [N, T] and ``completion_mask`` [N, T] (1 on real completion tokens).
    """

    inputs: dict[str, torch.Tensor]
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    prompt_len: int
    packed_index: torch.Tensor | None = None
    """Set on a packed batch (:meth:`Adapter.pack_training`): ``inputs`` then hold the N
    sequences' real tokens concatenated into rows [R, W] (per-sequence position ids, no
    attention mask), and ``packed_index`` [C] is, for each real completion token in
    row-major order of ``completion_mask`` (C of them), the index in the rows read
    row-major ([R x W]) of the token whose hidden state predicts it. ``completion_ids`` /
    ``completion_mask`` stay [N, T], so callers read a packed batch like a padded one."""

    @property
    def packed(self) -> bool:
        """Whether ``inputs`` are packed rows (see ``packed_index``)."""
        return self.packed_index is not None

    @property
    def shares_prefix(self) -> bool:
        """Whether this is a shared-prefix layout (:meth:`Adapter.encode_shared_prefix`):
        an explicit [R, 1, W, W] mask, or a dict of them per layer type."""
        mask = self.inputs.get("attention_mask")
        return isinstance(mask, dict) or (mask is not None and mask.dim() == 4)

    def to(self, device) -> "TrainingBatch":
        """The same batch with its tensors on ``device`` (the model's)."""
        return TrainingBatch(inputs=_tensors_to(self.inputs, device),
                             completion_ids=self.completion_ids.to(device),
                             completion_mask=self.completion_mask.to(device),
                             prompt_len=self.prompt_len,
                             packed_index=(None if self.packed_index is None
                                           else self.packed_index.to(device)))


def _tensors_to(inputs: dict, device) -> dict:
    """``inputs`` with every tensor on ``device``, the per-layer-type mask dict's too."""
    def move(v):
        if isinstance(v, dict):
            return {k: move(x) for k, x in v.items()}
        return v.to(device) if isinstance(v, torch.Tensor) else v
    return {k: move(v) for k, v in inputs.items()}


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
    model would read it as an image slot), so generation suppresses them and the core's
    log-prob pass excludes them from the distribution the same way
    (:meth:`suppressed_token_ids`)."""
    per_token_keys: ClassVar[tuple[str, ...]] = ()
    """Family per-token inputs ([N, P]) that a training batch extends over the completion
    with zeros (``attention_mask`` is always extended, with the completion mask)."""
    takes_video: ClassVar[bool] = False
    """The family's model also takes videos (vLLM then reserves memory for them unless
    told that prompts carry none)."""
    image_token: ClassVar[str] = ""
    """The image pad token's text, when the processor's ``image_token_id`` is not it (e.g.
    Gemma-3's processor names its begin-of-image placeholder so) or names nothing."""
    settings: ClassVar[type | None] = None
    """The family's own settings: a dataclass whose fields (defaults, docstrings) are the
    keys ``agents.N.processor: {...}`` accepts. A new family's settings need no core edit;
    the adapter reads them as ``self.family_settings``."""
    serves_any_causal_lm: ClassVar[bool] = False
    """Also serve every ``model_type`` that no adapter claims and that transformers'
    ``AutoModelForCausalLM`` maps to a model class (the text adapter: Gemma-3 text, Phi,
    OLMo, Granite, ...). Registered families keep priority."""
    packing: ClassVar[bool] = False
    """The family's training batches can be packed (:meth:`pack_training`: sequences
    concatenated into rows, sequences kept apart by position ids that restart at 0, which transformers'
    masks read as packed sequences). Set True only for a family whose packed log-probs and
    gradients are tested equal to the padded ones (``tests/test_packing.py``); a family
    that leaves it False keeps the padded path whatever ``grpo.packing`` says."""
    shared_prefix: ClassVar[bool] = False
    """The family's training batches can share a group's prompt
    (:meth:`encode_shared_prefix`: the prompt once, then each of its completions, kept
    apart by an explicit 4-D attention mask). Set True only for a family whose shared
    log-probs and gradients are tested equal to the unshared ones
    (``tests/test_shared_prefix.py``); a family that leaves it False keeps the unshared
    path whatever ``grpo.shared_prefix`` says."""
    vllm_tested: ClassVar[bool] = False
    """``vllm_request`` was checked against a real vLLM engine: ``tests/test_rollout_vllm.py``
    runs this family's tiny models. Read through :meth:`vllm_checked`, which takes it from
    the class's own body only: a new family subclassing a checked one starts unchecked."""

    @classmethod
    def vllm_checked(cls) -> bool:
        """This class itself declares ``vllm_tested = True`` (not inherited)."""
        return bool(vars(cls).get("vllm_tested", False))

    def __init__(self, path: str | Path, options: AdapterOptions | None = None,
                 processor: Any | None = None):
        self.path = str(path)
        self.options = options or AdapterOptions()
        self.family_settings = family_settings(self.settings, self.options.processor,
                                               self.family or type(self).__name__)
        self.processor = processor if processor is not None else self._load_processor()
        self.prompt_format = self._resolve_prompt_format()

    def _resolve_prompt_format(self) -> str:
        """The prompt format this checkpoint is rendered with (``auto`` resolved by whether
        it has a chat template); a plain format needs a text model (its content is text)."""
        from . import prompt_formats

        requested = self.options.prompt_format or prompt_formats.AUTO
        if self.is_multimodal and requested == prompt_formats.AUTO:
            return prompt_formats.CHAT  # a VLM is always prompted through its template
        has_template = bool(getattr(self.processor, "chat_template", None)
                            or getattr(self.tokenizer, "chat_template", None))
        fmt = prompt_formats.resolve(requested, has_template, where=self.path)
        if fmt != prompt_formats.CHAT and self.is_multimodal:
            raise prompt_formats.PromptFormatError(
                f"{self.path}: prompt format {fmt!r} writes text only, and {self.family} takes "
                "images; use prompt format chat (the checkpoint's template)")
        return fmt

    def prompt_format_description(self) -> str:
        """Which prompt format this adapter uses and why, for the run's first lines."""
        from . import prompt_formats

        return prompt_formats.describe(self.prompt_format,
                                       self.options.prompt_format or prompt_formats.AUTO)

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
        "put your final answer within \\boxed{}") ends the user turn, after a newline; one
        that begins with whitespace is appended as written, its own separator.
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
        for piece in pieces:
            if piece["type"] == "text":
                self.refuse_control_tokens(problem, "text", piece["text"])
        if problem.options:
            options = format_options(problem.options)
            self.refuse_control_tokens(problem, "options", options)
            pieces.append({"type": "text", "text": "\n" + options})
        if instruction:  # after a newline, unless it brings its own separator (MM-UPT's space)
            joint = "" if instruction[:1].isspace() else "\n"
            pieces.append({"type": "text", "text": joint + instruction})
        pieces = _merge_adjacent_text(pieces)
        msgs: list[dict] = []
        if system_prompt:
            msgs.append({"role": "system", "content": [{"type": "text", "text": system_prompt}]})
        msgs.append({"role": "user", "content": pieces})
        return msgs

    def control_token_pattern(self) -> re.Pattern | None:
        """The strings this tokenizer reads as one special token wherever they stand in
        text (its special added tokens, the family's image placeholders), longest first;
        None when it has none. Built once per adapter."""
        cached = self.__dict__.get("_control_tokens", False)
        if cached is not False:
            return cached
        tok = self.tokenizer
        strings = {t.content for t in getattr(tok, "added_tokens_decoder", {}).values()
                   if getattr(t, "special", False)}
        strings |= set(getattr(tok, "all_special_tokens", ()) or ())
        strings |= set(self.placeholder_tokens)
        ordered = sorted((x for x in strings if x), key=len, reverse=True)
        pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        self.__dict__["_control_tokens"] = pattern
        return pattern

    def refuse_control_tokens(self, problem: Problem, field_name: str, text: str) -> None:
        """Refuse a problem whose own text holds a special token's string: the tokenizer
        reads ``<|im_end|>`` or an image placeholder in a question as that token, so a
        record (or a generated question) could close its user turn, forge an assistant
        turn, or ask for an image that is not there (the processor then fails the whole
        batch). Raised as ``special_token_in_text``, skipped and counted like a broken
        image."""
        pattern = self.control_token_pattern()
        found = pattern.search(text) if pattern is not None else None
        if found:
            raise ProblemInputError.of("special_token_in_text",
                f"problem {problem.id!r}: field {field_name!r} holds {found.group(0)!r}, which "
                f"{self.family}'s tokenizer reads as a special token (a turn or image marker), "
                "not as text. Remove or rewrite it, or drop the record.")

    def render(self, problem: Problem, system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
               instruction: str | None = None, max_tokens: int = 0) -> RenderedPrompt:
        """Problem -> prompt text through the family's own chat template, plus its images
        opened, checked and preprocessed by the family's rules.

        ``max_tokens`` > 0: a prompt longer than that many of the model's tokens, image
        tokens included, is refused as ``prompt_too_long`` (a :class:`ProblemInputError`,
        skipped and counted like a broken image). Attention over one overlong prompt, padded
        into a batch of B x G rows, can ask for more memory than the machine has; the text
        alone is counted first, so an overlong question never has its images decoded."""
        msgs = self.messages(problem, system_prompt, instruction)
        text = self.apply_prompt_format(msgs)
        if max_tokens:
            _check_prompt_tokens(problem, self.text_token_count(text), max_tokens,
                                 partial=bool(problem.images))
        images = self.prepare_images(problem.images, problem_id=problem.id,
                                     base_dir=problem.meta.get("base_dir"))
        rendered = RenderedPrompt(problem_id=problem.id, text=text, images=images)
        if max_tokens and images:
            _check_prompt_tokens(problem, self.prompt_token_count(rendered), max_tokens)
        return rendered

    def text_token_count(self, text: str) -> int:
        """Tokens of prompt text as the tokenizer reads it (templates write BOS
        themselves). For a prompt with images a lower bound: each image placeholder
        counts once here and expands to the image's tokens in :meth:`prompt_token_count`."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_token_count(self, rendered: RenderedPrompt) -> int:
        """Tokens the model reads for one rendered prompt: the length of its encoded
        ``input_ids``, so image tokens and the family's markup around them count exactly
        as the processor expands them."""
        return int(self.encode_prompts([rendered]).inputs["input_ids"].shape[1])

    def apply_prompt_format(self, msgs: list[dict]) -> str:
        """Messages -> prompt text: the chat template, or the plain format's template
        (rendered by the same Jinja machinery, with ``plain_bos``)."""
        from . import prompt_formats

        template = prompt_formats.template_text(self.prompt_format)
        if template is None:
            return self.processor.apply_chat_template(msgs, tokenize=False,
                                                      add_generation_prompt=True)
        return self.tokenizer.apply_chat_template(
            msgs, chat_template=template, tokenize=False, add_generation_prompt=True,
            plain_bos=self._bos_the_tokenizer_adds())

    def _bos_the_tokenizer_adds(self) -> str:
        """The BOS text when tokenizing with special tokens would add it, else ""."""
        tok = self.tokenizer
        if not tok.bos_token or tok.bos_token_id is None:
            return ""
        return tok.bos_token if tok.bos_token_id in tok("", add_special_tokens=True)["input_ids"] else ""

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
        """*Family hook*: image pad tokens (``image_token_id``) one image of this (already
        prepared) size costs in the prompt; delimiters, row breaks and other markup are not
        counted. Derived from the family's rules and the processor config."""
        raise NotImplementedError

    def prompt_image_token_counts(self, images: Sequence[Any]) -> list[int]:
        """*Family hook*: image pad tokens of each image of one prompt, seeing all of them
        (a family whose cost depends on how many images share the prompt overrides it);
        by default :meth:`image_token_count` per image."""
        return [self.image_token_count(*im.size) for im in images]

    @property
    def image_token_id(self) -> int | None:
        """Id of the image pad token (the one :meth:`image_token_count` counts): the
        tokenizer's id of :attr:`image_token` when the family sets it, else the processor's
        ``image_token_id``, else the tokenizer's; None for a text model."""
        if not self.is_multimodal:
            return None
        if self.image_token:
            return int(self.tokenizer.convert_tokens_to_ids(self.image_token))
        for owner in (self.processor, self.tokenizer):
            value = getattr(owner, "image_token_id", None)
            if isinstance(value, int):
                return int(value)
        raise NotImplementedError(f"{self.family}: no image_token_id on the processor or "
                                  "tokenizer; set the adapter's image_token")

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
        counts = [self.prompt_image_token_counts(r.images) for r in rendered]
        return PromptBatch(inputs=inputs, problem_ids=[r.problem_id for r in rendered],
                           image_token_counts=counts)

    def padded_completions(self, completions, ids_dtype, mask_dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The completions right-padded with the pad token to the longest (at least 1):
        ids [N, T] and their 1/0 mask [N, T]."""
        N = len(completions)
        T = max(1, max((len(c) for c in completions), default=1))
        comp = torch.full((N, T), self.pad_token_id(), dtype=ids_dtype)  # [N, T]
        comp_mask = torch.zeros((N, T), dtype=mask_dtype)
        for i, c in enumerate(completions):
            if len(c):
                comp[i, : len(c)] = torch.as_tensor(list(c), dtype=ids_dtype)
                comp_mask[i, : len(c)] = 1
        return comp, comp_mask

    def encode_training(self, prompts: PromptBatch,
                        completions: Sequence[Sequence[int]]) -> TrainingBatch:
        """Append completions (token ids, stop token included, no padding) to a prompt batch.

        Row i of ``prompts`` pairs with ``completions[i]``; for G rollouts per prompt,
        encode each rendered prompt G times (``encode_prompts([r for r in rs for _ in
        range(G)])``), which keeps every family's per-image tensors in step. Completions are
        right-padded to the longest; per-token family tensors are extended over the
        completion by :meth:`extend_per_token` (zeros, unless the family says otherwise).
        """
        ids = prompts.inputs["input_ids"]  # [N, P]
        N = ids.shape[0]
        if len(completions) != N:
            raise ValueError(f"{len(completions)} completions for {N} prompt rows")
        comp, comp_mask = self.padded_completions(
            completions, ids.dtype, prompts.inputs["attention_mask"].dtype)  # [N, T] each
        inputs = dict(prompts.inputs)
        inputs["input_ids"] = torch.cat([ids, comp], dim=1)  # [N, P + T]
        inputs["attention_mask"] = torch.cat([prompts.inputs["attention_mask"], comp_mask], 1)
        for key in self.per_token_keys:
            if key in inputs:
                inputs[key] = self.extend_per_token(key, inputs[key], comp.shape[1])
        return TrainingBatch(inputs=inputs, completion_ids=comp, completion_mask=comp_mask,
                             prompt_len=prompts.prompt_len)

    def can_pack(self, model) -> bool:
        """Whether :meth:`pack_training` serves this ``model``: the family's
        :attr:`packing` (a family serving several model types may narrow it per model)."""
        return bool(self.packing)

    def pack_training(self, model, batch: TrainingBatch,
                      max_row_tokens: int | None = None) -> TrainingBatch:
        """A padded training batch packed into rows (``TrainingBatch.packed_index``).

        The real tokens (``attention_mask`` 1) of the N sequences are concatenated in
        sequence order, per-token family tensors alike; per-image tensors
        (``pixel_values``, ``image_grid_thw``, ...) are already concatenated in sequence
        order and stay as they are, so the i-th image still fills the i-th run of
        placeholders (rows are read row-major). Position ids come from
        :meth:`packed_position_ids` of the padded batch, so each sequence gets the
        positions it has alone. No attention mask: transformers
        (``masking_utils.find_packed_sequence_indices``) reads positions that restart as
        sequence starts and masks attention across sequences.

        ``max_row_tokens`` None: one row [1, S], no padding at all (what flash-attention's
        variable-length kernels need: transformers' ``_is_packed_sequence`` reads packing
        only from a batch of one row; its cost is the sum of each sequence's own). An int:
        consecutive sequences fill rows of at most max(``max_row_tokens``, the longest
        sequence) tokens (next fit, so the order is kept), each row padded at its end by a
        dummy sequence of pad tokens (positions from 0 again, outputs unused): with
        attention that materialises the [S, S] mask (sdpa, eager), a row no wider than
        the padded batch keeps attention's cost at most the padded batch's. ``model``
        only supplies the position rule."""
        if not bool(batch.completion_mask.any()):
            return batch  # no completion token to score: nothing to gain, nothing to index
        inputs = batch.inputs
        real = inputs["attention_mask"].bool()  # [N, L]
        N, L = real.shape
        P, T = batch.prompt_len, batch.completion_ids.shape[1]
        lengths = real.sum(1).tolist()  # [N] real tokens per sequence
        S = int(sum(lengths))
        width = S if max_row_tokens is None else max(int(max_row_tokens), max(lengths))
        rows = next_fit(lengths, width)  # sequences of each row, in order
        fill = [sum(lengths[n] for n in r) for r in rows]
        W = max(fill)  # [R, W]: the rows' width
        pos = self.packed_position_ids(model, batch)  # [N, L] or [D, N, L]
        flat_pos = pos[real] if pos.dim() == 2 else pos[:, real]  # [S] or [D, S]
        pad = torch.arange(W, dtype=flat_pos.dtype, device=flat_pos.device)

        def layout(flat: torch.Tensor, pad_value) -> torch.Tensor:
            """[..., S] real tokens (last dim) -> [..., R, W]: rows padded at their end."""
            out, start = [], 0
            for k in fill:
                piece = flat[..., start: start + k]
                start += k
                if k < W:
                    tail = (pad[: W - k].expand(*flat.shape[:-1], W - k) if pad_value is None
                            else flat.new_full((*flat.shape[:-1], W - k), pad_value))
                    piece = torch.cat([piece, tail], dim=-1)
                out.append(piece)
            return torch.stack(out, dim=-2)

        packed: dict[str, torch.Tensor] = {}
        for key, value in inputs.items():
            if key == "attention_mask":
                continue
            if key == "input_ids" or (key in self.per_token_keys and value.dim() == 2
                                      and tuple(value.shape) == (N, L)):
                packed[key] = layout(value[real], self.pad_token_id() if key == "input_ids" else 0)
            else:
                packed[key] = value
        packed["position_ids"] = layout(flat_pos, None)  # [R, W] or [D, R, W]
        # [S] flat index -> index in the [R, W] rows read row-major
        slot = torch.cat([r * W + torch.arange(k) for r, k in enumerate(fill)])
        flat_index = real.flatten().long().cumsum(0).view(N, L) - 1  # [N, L]
        index = slot[flat_index[:, P - 1: P + T - 1][batch.completion_mask.bool()]]  # [C]
        return TrainingBatch(inputs=packed, completion_ids=batch.completion_ids,
                             completion_mask=batch.completion_mask, prompt_len=P,
                             packed_index=index)

    @classmethod
    def shares_prefix_for(cls, model_type: str) -> bool:
        """Whether this family's shared-prefix layout is tested for ``model_type``: its
        :attr:`shared_prefix` (an adapter serving more model types than it tested, as the
        text adapter's causal-LM fallback, narrows it)."""
        return bool(cls.shared_prefix)

    def can_share_prefix(self, model) -> bool:
        """Whether :meth:`encode_shared_prefix` serves this ``model``: the family's
        :meth:`shares_prefix_for` its model type, and attention the layout's masks
        rebuild (:func:`prefix_masks_fit`)."""
        config = unwrap(model).config
        return (bool(self.shared_prefix) and self.shares_prefix_for(str(getattr(config, "model_type", "")))
                and prefix_masks_fit(config) == "")

    def encode_shared_prefix(self, model, prompts: PromptBatch,
                             completions: Sequence[Sequence[int]],
                             unit: Sequence[int]) -> TrainingBatch:
        """A shared-prefix training batch: each prompt once, followed by its completions.

        ``prompts``: U prompts (one row each, left-padded, :meth:`encode_prompts`, images
        included); ``completions[i]`` the i-th sequence's completion, ``unit[i]`` the
        prompt row it continues. A *unit* is prompt u's real tokens then the completions
        of the sequences with ``unit[i] == u``, in sequence order. Units fill rows of the
        widest unit's width by next fit (several short units share a row, order kept),
        each row padded at its end.

        ``inputs``: ``input_ids`` [R, W]; ``position_ids`` [R, W] or [D, R, W], the
        family's :meth:`packed_position_ids` of each prompt followed by its longest
        completion, so a prompt's tokens get the positions the model gives them
        (M-RoPE's temporal / height / width ids included) and every completion continues
        from its prompt as if it followed the prompt alone; per-token family tensors
        (:attr:`per_token_keys`) laid out the same way; per-image tensors
        (``pixel_values``, grids, ...) as :meth:`encode_prompts` gave them, one copy per
        prompt: units keep the prompts' order row-major, so the i-th image still fills
        the i-th run of placeholders and the vision tower runs once per prompt's image.
        ``attention_mask`` [R, 1, W, W], a 4-D mask transformers passes to attention as
        it is (``masking_utils``: "already prepared, or custom"): a prompt token sees its
        prompt's earlier tokens, a completion token its prompt and its own earlier
        tokens, never a sibling's nor another unit's; a pad token sees itself only.
        Boolean (True: attend) for sdpa, additive (0 / dtype min) for eager; a dict of
        one such mask per layer type where the model mixes full and sliding-window
        layers, and the family's two-way blocks added (:func:`shared_prefix_masks`,
        :meth:`bidirectional_blocks`).
        ``packed_index`` [C]: the flat [R x W] index of the hidden state that predicts
        each real completion token (row-major over ``completion_mask``): for a
        completion's first token, its prompt's last token, which all its siblings share,
        so the log-prob pass gathers that hidden state once per sibling and the backward
        adds every sibling's gradient into it. ``completion_ids`` / ``completion_mask``
        [N, T] as :meth:`encode_training`'s, so callers read it like a padded batch.

        The mask replaces the model's own: a family whose model adds a rule the layout
        does not rebuild keeps :attr:`shared_prefix` False."""
        ids, pmask = prompts.inputs["input_ids"], prompts.inputs["attention_mask"].bool()
        N, (U, P) = len(completions), ids.shape
        if len(unit) != N:
            raise ValueError(f"{len(unit)} unit indices for {N} completions")
        comp, comp_mask = self.padded_completions(
            completions, ids.dtype, prompts.inputs["attention_mask"].dtype)  # [N, T] each
        members: list[list[int]] = [[] for _ in range(U)]
        for i, u in enumerate(unit):
            members[int(u)].append(i)
        # the model's own positions: each prompt followed by its longest completion
        longest = [max((completions[i] for i in members[u]), key=len, default=[]) for u in range(U)]
        probe = self.encode_training(prompts, longest)  # [U, P + T'] per-token tensors
        pos = self.packed_position_ids(model, probe)  # [U, P + T'] or [D, U, P + T']
        prompt_cols = [pmask[u].nonzero().flatten() for u in range(U)]
        lengths = [len(prompt_cols[u]) + sum(len(completions[i]) for i in members[u])
                   for u in range(U)]
        rows = next_fit(lengths, max(lengths))
        W = max(sum(lengths[u] for u in r) for r in rows)
        R = len(rows)
        # where each laid-out token comes from: probe row, probe column; -1 on padding
        src_row = torch.full((R, W), -1, dtype=torch.long)
        src_col = torch.zeros((R, W), dtype=torch.long)
        input_ids = torch.full((R, W), self.pad_token_id(), dtype=ids.dtype)
        segment = torch.full((R, W), -1, dtype=torch.long)  # 0 prompt, i + 1 completion i
        predictor: list[list[int]] = [[] for _ in range(N)]  # flat index predicting each token
        for r, units in enumerate(rows):
            at = 0
            for u in units:
                k = len(prompt_cols[u])
                src_row[r, at: at + k] = u
                src_col[r, at: at + k] = prompt_cols[u]
                input_ids[r, at: at + k] = ids[u, prompt_cols[u]]
                segment[r, at: at + k] = 0
                last = r * W + at + k - 1  # the prompt's last token: every first prediction
                at += k
                for i in members[u]:
                    k = len(completions[i])
                    src_row[r, at: at + k] = u
                    src_col[r, at: at + k] = P + torch.arange(k)
                    input_ids[r, at: at + k] = comp[i, :k]
                    segment[r, at: at + k] = i + 1
                    predictor[i] = ([last] + [r * W + at + t for t in range(k - 1)])[:k]
                    at += k
        real = src_row >= 0  # [R, W]

        def layout(value: torch.Tensor) -> torch.Tensor:
            """[U, P + T', *rest] probe tensor -> [R, W, *rest]: each laid-out token's
            value, 0 on padding."""
            out = value.new_zeros((R, W, *value.shape[2:]))
            out[real] = value[src_row[real], src_col[real]]
            return out

        inputs: dict[str, torch.Tensor] = {}
        for key, value in probe.inputs.items():
            if key in ("input_ids", "attention_mask"):
                continue
            per_token = (key in self.per_token_keys and value.dim() >= 2
                         and tuple(value.shape[:2]) == tuple(probe.inputs["input_ids"].shape))
            inputs[key] = layout(value) if per_token else value
        inputs["input_ids"] = input_ids
        inputs["position_ids"] = (layout(pos) if pos.dim() == 2  # [R, W] or [D, R, W]
                                  else torch.stack([layout(p) for p in pos]))
        causal = torch.ones(W, W, dtype=torch.bool).tril()  # [W, W] key <= query
        same_unit = (src_row[:, :, None] == src_row[:, None, :]) & real[:, :, None]  # src_row: the unit
        visible = (segment[:, None, :] == 0) | (segment[:, :, None] == segment[:, None, :])
        allowed = causal & same_unit & visible  # [R, W, W]
        blocks = self.bidirectional_blocks(model, inputs)  # [R, W] or None
        if blocks is not None:  # blocks lie within one prompt, so within one unit
            allowed |= (blocks[:, :, None] == blocks[:, None, :]) & (blocks[:, :, None] >= 0)
        pos = inputs["position_ids"]
        text_pos = pos if pos.dim() == 2 else pos[0]  # [R, W]: M-RoPE's row 0 is the text's
        inputs["attention_mask"] = shared_prefix_masks(model, allowed, text_pos)
        index = torch.tensor([p for i in range(N) for p in predictor[i]], dtype=torch.long)
        return TrainingBatch(inputs=inputs, completion_ids=comp, completion_mask=comp_mask,
                             prompt_len=int(pmask.sum(1).max()), packed_index=index)

    def bidirectional_blocks(self, model, inputs: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """*Family hook*: for a shared-prefix layout's ``inputs`` (per-token tensors laid
        out [R, W]), a block id per token, [R, W], where tokens of one block attend to each
        other both ways (-1: ordinary causal token), as the family's model adds to its
        causal mask on its own (Gemma-3's image tokens). None: causal only."""
        return None

    def share_images(self, batch: TrainingBatch, copies: Sequence[int]) -> TrainingBatch:
        """*Family hook*: the batch with one vision-tower input per distinct image.

        ``copies[i]`` is, for the i-th image of the batch (in order), the index of the
        distinct image it repeats (distinct images numbered by first appearance): the G
        rollouts of a prompt carry its images G times. A family that can hand one image's
        features to every copy returns a batch whose forward runs the tower once per
        distinct image (gradients from every copy add up in the shared features); by
        default the batch as it is."""
        return batch

    def packed_position_ids(self, model, batch: TrainingBatch) -> torch.Tensor:
        """*Family hook*: the position ids each real token of the padded ``batch`` has in
        its own sequence, [N, L] (values on padding are unused): 0, 1, 2, ... from each
        sequence's first real token. A family with multi-dimensional RoPE returns
        [R, N, L] in the layout its language model takes (see
        :func:`mrope_packed_position_ids`)."""
        mask = batch.inputs["attention_mask"].long()
        return (mask.cumsum(-1) - 1).clamp(min=0)

    def extend_per_token(self, key: str, tensor: torch.Tensor, n_completion: int) -> torch.Tensor:
        """*Family hook*: per-token input ``key`` ([N, P, ...]) continued over
        ``n_completion`` completion positions (dim 1) -> [N, P + T, ...]. Default: zeros
        (a completion token is text, not image). A family whose tensor means something else
        overrides it (e.g. a cross-attention mask [N, P, images, tiles] repeats its last row:
        completion tokens see the images the last prompt token sees)."""
        shape = (tensor.shape[0], n_completion, *tensor.shape[2:])
        return torch.cat([tensor, tensor.new_zeros(shape)], dim=1)

    def pad_token_id(self) -> int:
        tok = self.tokenizer
        return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    # ----------------------------------------------------------------------- log-probs
    # The hooks the core's chunked log-prob pass (``vlcohort/training/logprobs.py``) needs
    # of the model; the maths itself is family-agnostic and lives there. ``model`` is the
    # transformers model (a PEFT wrapper already unwrapped by the caller).

    def decoder_hidden_states(self, model, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """*Family hook*: final hidden states [N, L, H] of the language model (vision
        features merged in), without the LM head, for a training batch's ``inputs``.
        Every supported family exposes its base as ``model.model``."""
        base = model.model
        out = base(**inputs, use_cache=False)
        return out.last_hidden_state

    def lm_head(self, model) -> torch.nn.Module:
        """*Family hook*: the module mapping hidden states [..., H] to logits [..., V] (the
        output embedding, tied or not)."""
        return model.get_output_embeddings()

    def logit_softcap(self, model) -> float | None:
        """*Family hook*: c when the model caps its logits as c * tanh(logits / c) after
        the LM head, else None; read from the text config's ``final_logit_softcapping``."""
        return getattr(model.config.get_text_config(), "final_logit_softcapping", None)

    # ----------------------------------------------------------------------- generation

    def suppressed_token_ids(self) -> list[int]:
        """Ids generation must never sample (the family's multimodal placeholders); the
        core's log-prob pass gives them probability 0 the same way."""
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


def prefix_masks_fit(config, attn_implementation: str | None = None) -> str:
    """Why a model of ``config`` cannot take a shared-prefix layout's masks, "" when it
    can. The attention must take an explicit 4-D mask (sdpa, eager; flash-attention
    takes none); its layers must be of full or sliding-window attention, which
    :func:`shared_prefix_masks` rebuilds per layer type (a linear-attention layer takes
    no mask; a chunked one, or a window applied without ``layer_types``, would be
    overridden); and no two-way (encoder) attention. ``attn_implementation``: the one the
    model will load with, else the config's. The one rule ``Adapter.can_share_prefix``
    and ``vlcohort plan`` read."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    impls = ({attn_implementation} if attn_implementation
             else {getattr(c, "_attn_implementation", None) or "sdpa" for c in (config, text)})
    if impls - {"sdpa", "eager"}:
        return f"attn_implementation={sorted(impls - {'sdpa', 'eager'})[0]} takes no 4-D attention mask"
    types = set(getattr(text, "layer_types", None) or ())
    window = getattr(text, "sliding_window", None)
    if types - {"full_attention", "sliding_attention"}:
        return f"layer types {sorted(types - {'full_attention', 'sliding_attention'})} take no rebuilt mask"
    if getattr(text, "use_bidirectional_attention", False):
        return "the model attends both ways"
    if "sliding_attention" in types and not window:
        return "sliding-window layers without a sliding_window"
    if not types and window and getattr(text, "use_sliding_window", True):
        return "a sliding window without layer_types"
    return ""


def shared_prefix_masks(model, allowed: torch.Tensor, text_pos: torch.Tensor):
    """The attention mask(s) a shared-prefix layout hands the model: ``allowed``
    [R, W, W] (query, key: may attend) as a [R, 1, W, W] mask, boolean for sdpa, additive
    (0 / dtype min) for eager; each token also sees itself (a pad token sees only itself,
    so no attention row is empty).

    A model whose layers mix full and sliding-window attention (``layer_types``) gets a
    dict ``{"full_attention": m, "sliding_attention": m'}``, which transformers' models
    take as the per-layer masks "already prepared"; ``m'`` also requires query position -
    key position < ``sliding_window``, measured on ``text_pos`` [R, W], the positions each
    token has in its own sequence, so a window spans what it spans unshared."""
    base = unwrap(model)
    config = base.config
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    R, W, _ = allowed.shape
    own = torch.eye(W, dtype=torch.bool)

    def finish(a: torch.Tensor) -> torch.Tensor:
        a = (a | own)[:, None]  # [R, 1, W, W]
        if getattr(config, "_attn_implementation", "sdpa") != "eager":
            return a
        dtype = next(base.parameters()).dtype
        return torch.zeros(a.shape, dtype=dtype).masked_fill_(~a, torch.finfo(dtype).min)

    types = set(getattr(text, "layer_types", None) or ())
    if "sliding_attention" not in types:
        return finish(allowed)
    near = (text_pos[:, :, None] - text_pos[:, None, :]) < int(text.sliding_window)  # [R, W, W]
    return {t: finish(allowed & near if t == "sliding_attention" else allowed) for t in types}


def mrope_packed_position_ids(model, batch: TrainingBatch) -> torch.Tensor:
    """[4, N, L] packed position ids of a family with M-RoPE / 3-D RoPE (Qwen2-VL,
    Qwen2.5-VL, Qwen3-VL, GLM-4.1V): row 0 the text positions 0, 1, 2, ... of each
    sequence, which transformers' language model reads to find the packed sequences
    (a [4, ...] tensor: "text-only position ids prepended"), rows 1-3 the temporal /
    height / width ids of the model's own ``get_rope_index`` on the padded batch, which
    skips padding, so each sequence's ids are the ones it has alone. Without images every
    row is the text positions (the rule the model applies to a text-only sequence)."""
    inputs = batch.inputs
    mask = inputs["attention_mask"]
    text = (mask.long().cumsum(-1) - 1).clamp(min=0)  # [N, L]
    if inputs.get("image_grid_thw") is None:
        return text[None].expand(4, -1, -1)
    base = unwrap(model).model
    rope, _ = base.get_rope_index(inputs["input_ids"], mm_token_type_ids=inputs["mm_token_type_ids"],
                                  image_grid_thw=inputs["image_grid_thw"], attention_mask=mask)
    return torch.cat([text[None], rope.to(text.device)], dim=0)


def unwrap(model):
    """The transformers model inside a PEFT wrapper (LoRA layers stay injected in it)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def format_options(options: Sequence[str]) -> str:
    """``["3", "4"]`` -> ``"Choices:\\nA. 3\\nB. 4"`` (the form the grader maps back)."""
    return "Choices:\n" + "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))


def _check_prompt_tokens(problem: Problem, n: int, limit: int, partial: bool = False) -> None:
    """Refuse a prompt of ``n`` tokens over ``limit`` (``partial``: ``n`` counts the text
    only, before the images add theirs)."""
    if n > limit:
        what = "the prompt's text alone is" if partial else "the prompt is"
        raise ProblemInputError.of("prompt_too_long",
            f"problem {problem.id!r}: {what} {n} tokens, over data.max_prompt_tokens="
            f"{limit}; shorten the question, or raise data.max_prompt_tokens (0: no limit)")


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


def next_fit(lengths: Sequence[int], width: int) -> list[list[int]]:
    """Sequences (indices into ``lengths``) in rows of at most ``width`` tokens, in order:
    each onto the current row while it fits, else onto a new one (a sequence longer than
    ``width`` fills a row alone). How :meth:`Adapter.pack_training` fills its rows."""
    rows: list[list[int]] = [[]]
    used = 0
    for n, k in enumerate(lengths):
        if rows[-1] and used + k > width:
            rows.append([])
            used = 0
        rows[-1].append(n)
        used += k
    return rows if rows[0] else []


def distinct_image_batch(batch: TrainingBatch, copies: Sequence[int],
                         rows_per_image: Sequence[int]) -> tuple[TrainingBatch, list[int]]:
    """``batch`` with ``pixel_values`` cut to the distinct images' rows, and
    ``image_copies`` [images] added: ``copies[i]`` is the distinct image the i-th batch
    image repeats (numbered by first appearance), ``rows_per_image[i]`` its rows of
    ``pixel_values``. Also returns, per distinct image, the batch image standing for it,
    for the family's own per-image keys (:meth:`Adapter.share_images`)."""
    first: dict[int, int] = {}
    for i, j in enumerate(copies):
        first.setdefault(int(j), i)
    keep = [first[j] for j in range(len(first))]
    pieces = torch.split(batch.inputs["pixel_values"], list(rows_per_image))
    shared = {k: v for k, v in batch.inputs.items() if k != "pixel_values"}
    shared["pixel_values"] = torch.cat([pieces[i] for i in keep])
    shared["image_copies"] = torch.as_tensor(list(copies), dtype=torch.long)
    return replace(batch, inputs=shared), keep


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
