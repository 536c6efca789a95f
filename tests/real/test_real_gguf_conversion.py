"""The GGUF conversion says what it is doing: a real SmolLM2 file converted into a fresh
cache folder announces itself (file, size, cache, once) and its end (time, size written)
on stderr; the second call, served from the cache, says nothing. (About a minute on CPU:
the conversion is the thing under test, so it cannot come from the shared cache.)"""

from __future__ import annotations

import re

from tests.real.conftest import SMOLLM2, _missing


def test_a_conversion_is_announced_once_and_a_cached_folder_is_silent(tmp_path, capsys):
    from vlcohort.processors.gguf import GGUFError, gguf_checkpoint, gguf_file

    try:
        source = gguf_file(SMOLLM2)
    except GGUFError as e:
        _missing(str(e))
    cache = tmp_path / "gguf-cache"
    capsys.readouterr()

    folder = gguf_checkpoint(SMOLLM2, cache_dir=cache)
    out, err = capsys.readouterr()
    said = [line for line in err.splitlines() if line.startswith("gguf: ")]
    assert len(said) == 2 and "gguf: " not in out, err
    assert said[0].startswith(f"gguf: converting {source} (")
    assert re.search(r"\(\d+ MB\)", said[0])  # the file's size (SmolLM2 Q4_1: ~100 MB)
    assert f"in {cache}, once" in said[0]
    written = re.fullmatch(rf"gguf: converted {re.escape(source.name)} in \d+s: (\d+) MB in (.+)", said[1])
    assert written and written.group(2) == str(folder), said[1]
    on_disk = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    assert abs(int(written.group(1)) - on_disk / 1e6) <= 1  # fp32 weights: ~540 MB

    assert gguf_checkpoint(SMOLLM2, cache_dir=cache) == folder
    out, err = capsys.readouterr()
    assert "gguf: " not in out + err
