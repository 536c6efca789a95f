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

Built folders are cached under ``$VLCOHORT_CACHE`` (default ``~/.cache/vlcohort``) keyed
by the spec, the builder version and the transformers version, so a second build is a
directory lookup.
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
# Bump when a builder changes, so that cached folders from an older builder are not reused.
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


def _chatml_text_template() -> str:
    """Qwen2.5-Instruct's ChatML template, without tools (string contents only)."""
    return (
        "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
        "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
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


def _gemma3_chat_template() -> str:
    """Gemma-3's published template: system text folded into the first user turn."""
    return (
        "{{ bos_token }}"
        "{%- if messages[0]['role'] == 'system' -%}"
        "{%- if messages[0]['content'] is string -%}"
        "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
        "{%- else -%}{%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}"
        "{%- endif -%}{%- set loop_messages = messages[1:] -%}"
        "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
        "{%- for message in loop_messages -%}"
        "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
        "{%- endif -%}"
        "{%- if (message['role'] == 'assistant') -%}{%- set role = 'model' -%}"
        "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
        "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
        "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
        "{%- elif message['content'] is iterable -%}"
        "{%- for item in message['content'] -%}"
        "{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}"
        "{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}"
        "{%- endfor -%}"
        "{%- else -%}{{ raise_exception('Invalid content type') }}{%- endif -%}"
        "{{ '<end_of_turn>\n' }}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
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
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX
    from tokenizers import Regex

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


def _train_gemma_bpe(special_tokens: list[str], named: dict | None = None, vocab_size: int = 1024):
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


# ------------------------------------------------------------------------------ builders

QWEN_VL_SPECIALS = [
    "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]


def _build_qwen2_5_vl(out: Path, seed: int) -> None:
    import torch
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
    )

    tokenizer = train_byte_level_bpe(["<|endoftext|>"] + QWEN_VL_SPECIALS)
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in QWEN_VL_SPECIALS}
    config = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,  # head_dim 32
            max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                             "mrope_section": [4, 6, 6]},  # sums to head_dim / 2 (real: 16, 24, 24)
            bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
            eos_token_id=ids["<|im_end|>"], pad_token_id=tokenizer.pad_token_id,
        ),
        vision_config=dict(
            depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
            patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=56,
            fullatt_block_indexes=[1],
        ),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config)
    image_processor = Qwen2VLImageProcessor(
        patch_size=14, merge_size=2, temporal_patch_size=2,
        min_pixels=4 * 28 * 28, max_pixels=64 * 28 * 28,
    )
    processor = Qwen2_5_VLProcessor(
        image_processor=image_processor, tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(), chat_template=qwen_chat_template(),
    )
    model.generation_config.eos_token_id = [ids["<|im_end|>"]]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    processor.save_pretrained(out)


def _build_qwen2(out: Path, seed: int) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = train_byte_level_bpe(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    tokenizer.chat_template = _chatml_text_template()
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,  # head_dim 32
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = [tokenizer.eos_token_id]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


INTERNVL_SPECIALS = ["<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>", "<video>"]


def _build_internvl3_5(out: Path, seed: int) -> None:
    import torch
    from transformers import (
        GotOcr2ImageProcessor,
        InternVLConfig,
        InternVLForConditionalGeneration,
        InternVLProcessor,
        InternVLVideoProcessor,
    )

    tile = 56  # real checkpoints: 448 (see module docstring)
    # The names InternVLProcessor reads off the tokenizer (as in the -HF checkpoints).
    named = {
        "start_image_token": "<img>", "end_image_token": "</img>",
        "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>",
    }
    tokenizer = train_byte_level_bpe(["<|endoftext|>"] + INTERNVL_SPECIALS, named)
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in INTERNVL_SPECIALS}
    image_seq_length = (tile // 14) ** 2 // 4  # patches per tile, pixel-shuffled by 0.5
    config = InternVLConfig(
        vision_config=dict(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            image_size=[tile, tile], patch_size=[14, 14], use_mean_pooling=True,
        ),
        text_config=dict(
            model_type="qwen3", vocab_size=len(tokenizer), hidden_size=64,
            intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=32, max_position_embeddings=4096,
            bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
            eos_token_id=ids["<|im_end|>"], pad_token_id=tokenizer.pad_token_id,
        ),
        image_token_id=ids["<IMG_CONTEXT>"], image_seq_length=image_seq_length,
        downsample_ratio=0.5, tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = InternVLForConditionalGeneration(config)
    image_processor = GotOcr2ImageProcessor(
        size={"height": tile, "width": tile}, crop_to_patches=True, min_patches=1,
        max_patches=12, image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225],
    )
    processor = InternVLProcessor(
        image_processor=image_processor, tokenizer=tokenizer,
        video_processor=InternVLVideoProcessor(), image_seq_length=image_seq_length,
        chat_template=internvl_chat_template(),
    )
    model.generation_config.eos_token_id = [ids["<|im_end|>"]]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    processor.save_pretrained(out)


GEMMA3_SPECIALS = ["<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>",
                   "<image_soft_token>"]


def _build_gemma3(out: Path, seed: int) -> None:
    import torch
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3ImageProcessor,
        Gemma3Processor,
    )

    canvas = 56  # real checkpoints: 896 (see module docstring)
    tokenizer = _train_gemma_bpe(GEMMA3_SPECIALS, {
        "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
        "image_token": "<image_soft_token>",
    })
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in GEMMA3_SPECIALS}
    mm_tokens = 4  # real: 256 = 16 x 16 pooled from 64 x 64 patches
    config = Gemma3Config(
        text_config=dict(
            vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
            max_position_embeddings=4096, sliding_window=512,
            bos_token_id=tokenizer.bos_token_id, eos_token_id=[tokenizer.eos_token_id, ids["<end_of_turn>"]],
            pad_token_id=tokenizer.pad_token_id,
        ),
        vision_config=dict(
            model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
            num_hidden_layers=2, num_attention_heads=2, image_size=canvas, patch_size=14,
        ),
        mm_tokens_per_image=mm_tokens,
        boi_token_index=ids["<start_of_image>"], eoi_token_index=ids["<end_of_image>"],
        image_token_index=ids["<image_soft_token>"],
    )
    torch.manual_seed(seed)
    model = Gemma3ForConditionalGeneration(config)
    image_processor = Gemma3ImageProcessor(
        size={"height": canvas, "width": canvas}, image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5], pan_and_scan_min_crop_size=28,
    )
    processor = Gemma3Processor(
        image_processor=image_processor, tokenizer=tokenizer,
        chat_template=_gemma3_chat_template(), image_seq_length=mm_tokens,
    )
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, ids["<end_of_turn>"]]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    _publish_siglip_layout(out)
    processor.save_pretrained(out)


def _publish_siglip_layout(folder: Path) -> None:
    """Rewrite a Gemma-3 checkpoint built from scratch into the published file layout.

    transformers 5 saves a model it built itself with SigLIP directly under
    ``vision_tower.`` but published Gemma-3 files (and vLLM's Gemma-3 loader) have
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


#: tiny name -> spec: the builders above, and every family module's ``@tiny_builder``
#: (registered when :mod:`processors.registry` imports the family modules).
TINY_MODELS: dict[str, TinySpec] = TINY_BUILDERS
for _spec in (
    TinySpec("qwen2_5_vl", "qwen2_5_vl", _build_qwen2_5_vl, module=__name__),
    TinySpec("internvl3_5", "internvl", _build_internvl3_5, module=__name__),
    TinySpec("gemma3", "gemma3", _build_gemma3, module=__name__),
    TinySpec("qwen2", "qwen2", _build_qwen2, module=__name__),
):
    TINY_BUILDERS.setdefault(_spec.name, _spec)


def is_tiny_spec(spec: str | os.PathLike) -> bool:
    return isinstance(spec, str) and spec.startswith(TINY_PREFIX)


def cache_root() -> Path:
    return Path(os.environ.get("VLCOHORT_CACHE", Path.home() / ".cache" / "vlcohort"))


def tiny_model_path(spec: str, seed: int = 0, cache_dir: str | os.PathLike | None = None) -> Path:
    """Build (or reuse) the tiny checkpoint named by ``spec`` and return its folder.

    ``spec`` is ``tiny:<name>`` with ``<name>`` one of :data:`TINY_MODELS`. The folder is
    written atomically (built in a temporary sibling, then renamed), so a crash mid-build
    never leaves a half-written checkpoint that a later run would trust.
    """
    import transformers

    # (the family modules' builders are registered: importing processors.tiny first runs
    # the package's __init__, whose registry import discovers the family modules)
    name = spec[len(TINY_PREFIX):] if is_tiny_spec(spec) else spec
    if name not in TINY_MODELS:
        raise ValueError(
            f"Unknown tiny model {spec!r}. Available: "
            + ", ".join(TINY_PREFIX + n for n in TINY_MODELS)
        )
    key = hashlib.sha1(
        f"{name}|{seed}|{BUILDER_VERSION}|{transformers.__version__}".encode()
    ).hexdigest()[:10]
    root = Path(cache_dir) if cache_dir is not None else cache_root() / "tiny"
    final = root / f"{name}-s{seed}-{key}"
    if (final / "config.json").exists():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        TINY_MODELS[name].build(tmp, seed)
        try:
            os.replace(tmp, final)
        except OSError:  # another process won the race (keep its folder), or a broken one
            if not (final / "config.json").exists():
                # a folder without config.json is not a checkpoint (e.g. files deleted by
                # hand): move it aside atomically and put the fresh build in its place
                aside = Path(tempfile.mkdtemp(prefix=f".{name}-broken-", dir=root))
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
