"""Tiny, randomly initialised models of each family, built offline from the real classes.

Nothing here downloads anything. A spec such as ``tiny:qwen2_5_vl`` is turned into a
folder holding a real checkpoint (``config.json``, safetensors weights, tokenizer files,
processor / image-processor configs, chat template) written by ``save_pretrained``. The
adapters then load it through the same ``from_pretrained`` path a user's checkpoint takes,
so the tiny models exercise the real loading, chat-template, image-processing and
forward code of each family.

Why tiny models are shaped as they are:

- The tokenizer is a real byte-level BPE (``Qwen2Tokenizer``) or a real
  byte-fallback BPE (``GemmaTokenizer``) *trained in-process* on a small corpus of the
  phrases the tests and the demo use, plus each family's real special tokens. Training
  takes milliseconds; vocabularies stay around 1,000 entries so embeddings are small.
- Vision towers keep each family's patch size (14 px) and merge rules; only the tile /
  canvas size of InternVL (448 px) and Gemma-3 (896 px) is shrunk to 56 px so that an
  image costs 4 tokens per tile instead of 256. The rules (tiling, pooling, thumbnails,
  pan-and-scan) are unchanged; only their constants are smaller, and they are read back
  from the saved processor config, never hard-coded in the adapters.
- Chat templates are the families' published templates (Jinja), written into the
  tokenizer / processor so that ``apply_chat_template`` renders the real turn structure.

Each family's builder lives in its own module (``processors/<family>.py``, decorated with
``vlcohort.processors.family.tiny_builder``); this module holds what they share: the tokenizer
trainers, the corpus, chat templates and special tokens used by several families or by
``bench/``, the cache and :func:`sharpen`.

Built folders are cached under ``$VLCOHORT_CACHE`` (default ``~/.cache/vlcohort``) keyed
by the spec, the seed, :data:`BUILDER_VERSION`, the transformers version and the text of
the builder's module and of this module, so a second build is a directory lookup and an
edited builder never silently reuses an old folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from .family import TINY_BUILDERS, TinySpec

TINY_PREFIX = "tiny:"
# Bump to invalidate every cached folder at once (e.g. a dependency change the source
# hash cannot see); an edited builder module is caught by the source hash already.
BUILDER_VERSION = "5"

# The corpus the tiny tokenizers are trained on: the words the demo, tests and answer
# formats use, so that common words are single tokens and sequences stay short.
_CORPUS = [
    "You are a helpful assistant. Answer the question.",
    "Please reason step by step, and put your final answer within \\boxed{}.",
    "Think first, then give the final answer inside <answer></answer> tags.",
    "The answer is A. The answer is B. The answer is C. The answer is D. The answer is E.",
    "Answer: A B C D E F G H. Choices: (A) (B) (C) (D) (E) option choice",
    "What colour is the shape? red green blue yellow purple orange black white",
    "What kind of shape is shown? circle square triangle star cross diamond",
    "What is the background colour? Which quadrant? top left right bottom",
    "Find x. Solve for y. How many degrees? area perimeter length angle radius",
    "<think> Let me think. </think> <answer> 42 </answer> \\frac{1}{2} \\sqrt{3} 45^\\circ",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 100 1000 3.14 0.5 -1 = + - * / ( ) [ ] { } , . ; : ? !",
    "the a an of to in is are and or with for on at by from this that which what how",
    "triangle ABC, line segment, the midpoint of AC, parallel, perpendicular, circle O",
]


def qwen_chat_template() -> str:
    """Qwen2.5-VL's published chat template (ChatML with vision placeholders).

    Public: ``bench/gpu_step.py`` builds its full-size Qwen2.5-VL processor with it."""
    return (
        "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
        "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
        "<|im_start|>{{ message['role'] }}\n"
        "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
        "{% else %}{% for content in message['content'] %}"
        "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
        "{% set image_count.value = image_count.value + 1 %}"
        "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
        "<|vision_start|><|image_pad|><|vision_end|>"
        "{% elif content['type'] == 'video' or 'video' in content %}"
        "{% set video_count.value = video_count.value + 1 %}"
        "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
        "<|vision_start|><|video_pad|><|vision_end|>"
        "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
        "{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )


def internvl_chat_template() -> str:
    """InternVL3.5-HF's template: ChatML, each image an ``<IMG_CONTEXT>`` line before text.

    Public: ``bench/gpu_step.py`` builds its full-size InternVL processor with it."""
    return (
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
        "{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for content in message['content'] %}"
        "{% if content['type'] == 'image' %}<IMG_CONTEXT>\n"
        "{% elif content['type'] == 'video' %}<video>\n"
        "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}{% endif %}"
        "<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )


# --------------------------------------------------------------------------- tokenizers


def train_byte_level_bpe(special_tokens: list[str], named: dict | None = None, vocab_size: int = 1024,
                          pad_to: int | None = None):
    """A real Qwen2Tokenizer (byte-level BPE) trained on the corpus, with family specials.

    ``pad_to``: fill the vocabulary with plain word tokens (``" A151"``, ``" B152"``... never
    produced by encoding, decoded as written) so that ``len(tokenizer) == pad_to``: a model
    with a full-size vocabulary then decodes every id it samples (``bench/gpu_step.py``).

    Public: ``bench/gpu_step.py`` trains its full-size-vocabulary tokenizers with it.
    """
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    state = json.loads(tok.to_str())["model"]
    vocab = dict(state["vocab"])
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["merges"]]
    if pad_to is not None:
        room = pad_to - len(special_tokens) - len(vocab)
        if room < 0:
            raise ValueError(f"pad_to={pad_to} is smaller than the trained vocabulary")
        # "\u0120" is byte-level BPE's space; the letters A-D make each token read as an option
        first = len(vocab)
        vocab.update({f"\u0120{'ABCD'[i % 4]}{i}": i for i in range(first, first + room)})
    # Specials go after the learned vocabulary, as in the real checkpoints.
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=merges, **_named_kwargs(named))
    tokenizer.add_special_tokens({"additional_special_tokens": special_tokens})
    return tokenizer


def _named_kwargs(named: dict | None) -> dict:
    """Named family tokens (``boi_token``, ``context_image_token``...) the processors read
    off the tokenizer; transformers stores them as model-specific special tokens."""
    return {"extra_special_tokens": dict(named)} if named else {}


def train_gemma_bpe(special_tokens: list[str], named: dict | None = None, vocab_size: int = 1024):
    """A real GemmaTokenizer (sentencepiece-style BPE with byte fallback), trained here."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import GemmaTokenizer

    base_specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    byte_tokens = [f"<0x{i:02X}>" for i in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="\u2581", behavior="merged_with_previous")
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=base_specials + byte_tokens,
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    state = json.loads(tok.to_str())["model"]
    vocab = dict(state["vocab"])
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["merges"]]
    _add_newline_runs(vocab, merges)
    tokenizer = GemmaTokenizer(vocab=vocab, merges=merges, **_named_kwargs(named))
    tokenizer.add_special_tokens({"additional_special_tokens": special_tokens})
    return tokenizer


def _add_newline_runs(vocab: dict[str, int], merges: list[tuple[str, str]]) -> None:
    """Give a Gemma vocabulary the tokens "\\n" .. "\\n\\n\\n\\n", in place, as the real one
    has: vLLM's Gemma-3 code looks them up by text (``vocab["\\n\\n"]``, to re-tokenise the
    newlines around an image). Without them "\\n" is the byte-fallback ``<0x0A>``; with
    them, runs of newlines encode as single tokens, as in the published tokenizer."""
    runs = ["\n" * k for k in range(1, 5)]
    for run in runs:
        if run not in vocab:
            vocab[run] = len(vocab)
    for left, right in (("\n", "\n"), ("\n\n", "\n"), ("\n\n", "\n\n")):
        if (left, right) not in merges:
            merges.append((left, right))


# ------------------------------------------------------- special tokens shared with bench/

QWEN_VL_SPECIALS = [
    "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]


INTERNVL_SPECIALS = ["<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>", "<video>"]


#: tiny name -> spec: every family module's ``@tiny_builder`` (registered when
#: :mod:`vlcohort.processors.registry` imports the family modules).
TINY_MODELS: dict[str, TinySpec] = TINY_BUILDERS


def is_tiny_spec(spec: str | os.PathLike) -> bool:
    return isinstance(spec, str) and spec.startswith(TINY_PREFIX)


def cache_root() -> Path:
    return Path(os.environ.get("VLCOHORT_CACHE", Path.home() / ".cache" / "vlcohort"))


def builder_source_hash(spec: TinySpec) -> str:
    """sha1 of the text of the module defining ``spec``'s builder and of this module (the
    shared helpers it calls): part of the cache key, so editing either rebuilds."""
    import sys

    module = sys.modules.get(spec.module)
    files = [getattr(module, "__file__", None), __file__]
    digest = hashlib.sha1()
    for f in dict.fromkeys(f for f in files if f):
        digest.update(Path(f).read_bytes())
    return digest.hexdigest()[:12]


def tiny_model_path(spec: str, seed: int = 0, cache_dir: str | os.PathLike | None = None) -> Path:
    """Build (or reuse) the tiny checkpoint named by ``spec`` and return its folder.

    ``spec`` is ``tiny:<name>`` with ``<name>`` one of :data:`TINY_MODELS`. The folder is
    written atomically (built in a temporary sibling, then renamed), so a crash mid-build
    never leaves a half-written checkpoint that a later run would trust.
    """
    import transformers

    # (the family modules' builders are registered: importing vlcohort.processors.tiny first runs
    # the package's __init__, whose registry import discovers the family modules)
    name = spec[len(TINY_PREFIX):] if is_tiny_spec(spec) else spec
    if name not in TINY_MODELS:
        raise ValueError(
            f"Unknown tiny model {spec!r}. Available: "
            + ", ".join(TINY_PREFIX + n for n in TINY_MODELS)
        )
    source = builder_source_hash(TINY_MODELS[name])
    key = hashlib.sha1(
        f"{name}|{seed}|{BUILDER_VERSION}|{transformers.__version__}|{source}".encode()
    ).hexdigest()[:10]
    root = Path(cache_dir) if cache_dir is not None else cache_root() / "tiny"
    return build_atomically(root / f"{name}-s{seed}-{key}",
                            lambda tmp: TINY_MODELS[name].build(tmp, seed))


def build_atomically(final: Path, build) -> Path:
    """``final``, a checkpoint folder, made by ``build(folder)`` unless it already holds a
    ``config.json``: built in a temporary sibling, then renamed, so a crash mid-build never
    leaves a half-written checkpoint that a later run would trust. Shared by every cache
    of built checkpoints (tiny, published-processor and converted GGUF models)."""
    if (final / "config.json").exists():
        return final
    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=root))
    try:
        build(tmp)
        try:
            os.replace(tmp, final)
        except OSError:  # another process won the race (keep its folder), or a broken one
            if not (final / "config.json").exists():
                # a folder without config.json is not a checkpoint (e.g. files deleted by
                # hand): move it aside atomically and put the fresh build in its place
                aside = Path(tempfile.mkdtemp(prefix=f".{final.name}-broken-", dir=root))
                os.replace(final, aside / "old")
                shutil.rmtree(aside, ignore_errors=True)
                try:
                    os.replace(tmp, final)
                except OSError:
                    if not (final / "config.json").exists():
                        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def sharpen(model, seed: int, scale: float = 0.2):
    """Re-draw a tiny model's matrices (dim >= 2) from N(0, scale^2), in place, and return
    it. A freshly initialised tiny model's next-token distribution is nearly uniform, which
    makes log-prob / entropy comparisons too easy to pass; tests sharpen it first."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * scale)
    return model


def publish_siglip_layout(folder: Path) -> None:
    """Rewrite a checkpoint with a SigLIP tower built from scratch into the published file
    layout (Gemma-3, LLaVA-OneVision).

    transformers 5 saves a model it built itself with SigLIP directly under
    ``vision_tower.`` but published Gemma-3 / LLaVA-OneVision files (and vLLM's loaders) have
    ``vision_tower.vision_model.``. transformers loads both; a model it loaded from the
    published layout is saved back in that layout (the rename is recorded at load and
    reverted on save), so warm-up and training checkpoints of the tiny model keep it too."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), "pt") as h:
            metadata = h.metadata() or {"format": "pt"}
            tensors = {(k.replace("vision_tower.", "vision_tower.vision_model.", 1)
                        if k.startswith("vision_tower.") and "vision_model." not in k else k):
                       h.get_tensor(k) for k in h.keys()}
        save_file(tensors, str(f), metadata=metadata)
    index = folder / "model.safetensors.index.json"
    if index.exists():
        data = json.loads(index.read_text())
        data["weight_map"] = {(k.replace("vision_tower.", "vision_tower.vision_model.", 1)
                               if k.startswith("vision_tower.") and "vision_model." not in k
                               else k): v for k, v in data["weight_map"].items()}
        index.write_text(json.dumps(data, indent=2))
