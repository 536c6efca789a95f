"""Tiny models whose processor is a published one: the real tokenizer, image processor and
chat template of a released checkpoint, on a random tiny body of the real model class.

The tiny models of ``processors/tiny.py`` train their own small tokenizers, so they test
the adapters against the project's own approximation of each family. A folder of a
publisher's processor files (``config.json``, ``tokenizer_config.json``, ``vocab.json`` /
``merges.txt`` or ``tokenizer.json``, ``preprocessor_config.json``, the chat template,
``generation_config.json``; no weights) is the real thing. :func:`published_model_path`
turns such a folder into a checkpoint that loads like the published one:

- every file of the folder except ``config.json`` and weights is copied byte for byte, so
  ``AutoProcessor.from_pretrained`` on the checkpoint gives the published processor, and
  ``generation_config.json`` keeps the published stop ids;
- when the folder has no ``tokenizer.json`` (publishers' mirrors often drop it for size),
  the one transformers builds from ``vocab.json`` + ``merges.txt`` is written beside them:
  the same tokenizer, and later loads skip the slow conversion;
- ``config.json`` is the published config shrunk by :func:`shrink_config` (few layers,
  small widths) and the weights are a random body of the published ``architectures[0]``
  class: the vocabulary size, the special token ids and the vision tower's patch / merge
  rules stay as published, so ids and image grids mean what they mean in the real model.

The shrinking rules are keyed by config names, not by family, so any checkpoint whose
config uses the common names shrinks; Qwen2.5-VL-7B-Instruct is the one the tests run.
With hidden size 64 a 152,064-token vocabulary costs 39 MB per embedding matrix in fp32.

Built folders are cached like the tiny models (``vlcohort.processors.tiny.cache_root()``, written
atomically), keyed by the published files' bytes, the seed, the transformers version and
the text of this module and of ``processors/tiny.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .tiny import BUILDER_VERSION, build_atomically, cache_root

#: Widths of the shrunk language model: head_dim 32 (2 query heads, 1 key/value head:
#: grouped-query attention stays grouped). vLLM's CPU attention takes head sizes 32, 64, ...
TEXT_DIMS = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
             "num_key_value_heads": 1, "num_hidden_layers": 2}
#: Widths of a shrunk vision (or other non-text) tower: head_dim 16. Patch size, merge
#: size, window size and image size are *not* shrunk: they are the image rules.
TOWER_DIMS = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2,
              "num_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 2, "depth": 2}
#: Lists of layer indexes (a layer kind at some depths): the shrunk stack keeps one such
#: layer, its last one, so both kinds of layer still run (e.g. windowed and full attention).
LAYER_INDEX_LISTS = ("fullatt_block_indexes", "deepstack_visual_indexes")
#: Files that belong to the published model body, not to its processor: never copied.
BODY_FILES = ("config.json",)
BODY_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".index.json")


# --------------------------------------------------------------------------- config


def _is_tower(key: str) -> bool:
    """A sub-config that is not the language model (``vision_config``, ``audio_config``)."""
    return key.endswith("_config") and not key.startswith(("text", "language", "llm"))


def _scaled_sections(sections: list[int], new_total: int) -> list[int]:
    """``sections`` rescaled to sum to ``new_total``, each at least 1, rounding remainders
    onto the largest: M-RoPE's [16, 24, 24] of a 128-wide head -> [4, 6, 6] of 32."""
    total = sum(sections)
    out = [max(1, s * new_total // total) for s in sections]
    for i in sorted(range(len(out)), key=lambda i: -sections[i]):
        if sum(out) == new_total:
            break
        out[i] += 1 if sum(out) < new_total else -1
    return out


def shrink_section(section: dict[str, Any], dims: dict[str, int]) -> dict[str, Any]:
    """One level of a config (the top level, ``text_config`` or a tower's config) with its
    widths and depths replaced by ``dims``; every other key, vocabulary size and token ids
    included, kept. Pure: returns a new dict."""
    out = dict(section)
    old_heads = section.get("num_attention_heads") or section.get("num_heads")
    old_head_dim = section.get("head_dim") or (
        section["hidden_size"] // old_heads if old_heads and "hidden_size" in section else None)
    old_layers = section.get("num_hidden_layers") or section.get("depth")
    for key, value in dims.items():
        if key in section:
            out[key] = value
    heads = out.get("num_attention_heads") or out.get("num_heads")
    new_head_dim = out["hidden_size"] // heads if heads and "hidden_size" in out else None
    if "head_dim" in section and new_head_dim:
        out["head_dim"] = new_head_dim
    new_layers = out.get("num_hidden_layers") or out.get("depth")
    if old_layers and new_layers:
        if isinstance(section.get("max_window_layers"), int):
            out["max_window_layers"] = min(section["max_window_layers"], new_layers)
        if isinstance(section.get("layer_types"), list):
            out["layer_types"] = section["layer_types"][-new_layers:]
        for key in LAYER_INDEX_LISTS:
            if section.get(key):
                out[key] = [new_layers - 1]
    if old_head_dim and new_head_dim:
        for key in ("rope_scaling", "rope_parameters"):
            rope = section.get(key)
            if isinstance(rope, dict) and rope.get("mrope_section"):
                ratio = new_head_dim / old_head_dim
                new = round(sum(rope["mrope_section"]) * ratio)
                out[key] = {**rope, "mrope_section": _scaled_sections(rope["mrope_section"], new)}
    return out


def shrink_config(config: dict[str, Any]) -> dict[str, Any]:
    """A published ``config.json`` (as a dict) shrunk to a tiny model of the same class.

    The language model takes :data:`TEXT_DIMS` (at the top level when the config is flat,
    as Qwen2.5-VL's is, and in ``text_config`` when it has one); every other sub-config
    (``vision_config``...) takes :data:`TOWER_DIMS`, and its ``out_hidden_size`` (the
    projector's output) becomes the language model's width. Kept as published: vocabulary
    size, token ids, patch / merge / window sizes, rope bases, tied or untied embeddings.
    The saved dtype is the one the tiny model is built in (float32), not the published one.
    """
    out = shrink_section(config, TEXT_DIMS)
    text_width = TEXT_DIMS["hidden_size"]
    for key, value in config.items():
        if not isinstance(value, dict) or not key.endswith("_config"):
            continue
        if _is_tower(key):
            section = shrink_section(value, TOWER_DIMS)
            if "out_hidden_size" in section:
                section["out_hidden_size"] = text_width
        else:
            section = shrink_section(value, TEXT_DIMS)
        out[key] = section
    for key in ("torch_dtype", "dtype"):
        out.pop(key, None)
    return out


# --------------------------------------------------------------------------- building


def processor_files(published: Path) -> list[Path]:
    """The published folder's processor files (everything but the body: config, weights)."""
    return sorted(p for p in published.iterdir() if p.is_file() and p.name not in BODY_FILES
                  and not p.name.endswith(BODY_SUFFIXES) and not p.name.startswith("."))


def build_published(published: str | os.PathLike, out: str | os.PathLike, seed: int = 0) -> None:
    """Write into ``out`` a checkpoint with ``published``'s processor files and a random
    tiny body of its model class (see the module docstring). ``out`` must exist."""
    import torch
    import transformers
    from transformers import AutoProcessor
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    published, out = Path(published), Path(out)
    raw = json.loads((published / "config.json").read_text())
    config = CONFIG_MAPPING[raw["model_type"]].from_dict(shrink_config(raw))
    model_class = getattr(transformers, raw["architectures"][0])
    torch.manual_seed(seed)
    model = model_class(config).to(torch.float32)
    model.save_pretrained(out)
    for f in processor_files(published):  # generation_config.json included: published ids
        shutil.copyfile(f, out / f.name)
    if not (published / "tokenizer.json").exists():
        processor = AutoProcessor.from_pretrained(published)
        tokenizer = getattr(processor, "tokenizer", processor)
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is not None:  # a fast tokenizer: its tokenizers-library form
            backend.save(str(out / "tokenizer.json"))


def _published_key(published: Path, seed: int) -> str:
    import transformers

    digest = hashlib.sha1(f"{seed}|{BUILDER_VERSION}|{transformers.__version__}".encode())
    for f in sorted(p for p in published.iterdir() if p.is_file()):
        digest.update(f.name.encode() + b"\0" + f.read_bytes())
    for module in (__file__, str(Path(__file__).with_name("tiny.py"))):
        digest.update(Path(module).read_bytes())
    return digest.hexdigest()[:10]


def published_model_path(published: str | os.PathLike, seed: int = 0,
                         cache_dir: str | os.PathLike | None = None) -> Path:
    """Build (or reuse) the tiny checkpoint with ``published``'s processor and return its
    folder, ``<cache>/published/<folder name>-s<seed>-<key>``. Written atomically (built in
    a temporary sibling, then renamed), as :func:`vlcohort.processors.tiny.tiny_model_path` does."""
    published = Path(published)
    if not (published / "config.json").is_file():
        raise FileNotFoundError(f"{published}: no config.json; give the folder of a published "
                                "checkpoint's processor files (config.json, tokenizer files, "
                                "preprocessor_config.json, chat template)")
    root = Path(cache_dir) if cache_dir is not None else cache_root() / "published"
    final = root / f"{published.name}-s{seed}-{_published_key(published, seed)}"
    return build_atomically(final, lambda tmp: build_published(published, tmp, seed))
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{published.name}-", dir=root))
    try:
        build_published(published, tmp, seed)
        try:
            os.replace(tmp, final)
        except OSError:  # another process won the race: keep its folder, if whole
            if not (final / "config.json").exists():
                aside = Path(tempfile.mkdtemp(prefix=f".{published.name}-broken-", dir=root))
                os.replace(final, aside / "old")
                shutil.rmtree(aside, ignore_errors=True)
                os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
