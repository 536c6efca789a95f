"""MATH-Vision's official rule-based scorer (mathllm/MATH-V ``evaluation/evaluate.py`` and
``evaluation/utils.py``), rewritten rule for rule.

The same answer-phrase / ``\\boxed{}`` extraction, the same string clean-up, and equality
by exact string, then element-wise tuples, then the value of the LaTeX
(``round(eval(str(latex2sympy(x))), 2)``). A response is right when it equals the gold
letter or the gold option's text. Rules are kept as published, quirks included (e.g.
``\\frac`` fix-ups run only when the answer contains ``sqrt``; ``0.5`` becomes ``\\frac{1}{2}``).

Two ways to get the LaTeX value, named in each record's ``official_rule``:

- ``official``: the official parser itself (``latex2sympy2==1.9.1`` on the 4.7.2 ANTLR
  runtime) in its own environment, through a persistent worker
  (:mod:`vlcohort.eval.official.mathvision_env`; build it with
  ``python -m vlcohort.eval.official.mathvision_env --build``). Replayed on all 48,640 stored
  verdicts of the MATH-V outputs under 4 MB (``bench/mathvision_replay.py``);
- ``official_approx``: when that environment is not built, ``latex2sympy2_extended`` (the
  maintained fork, installed with math-verify) in-process, evaluated over ``math``'s names
  only, with text holding ``__``/``lambda``, two powers or a huge power/factorial refused
  instead of evaluated, and a CPU-time limit per comparison. The fork accepts text the
  official parser rejects (``40^{\\circ}``) and the reverse, so about 1 verdict in 500
  differs.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import threading
from typing import Sequence

__all__ = [
    "PROTOCOL",  # noqa: F822 - defined by the module __getattr__ below: it names the parser in use
    "RULES", "backend", "gold_pairs", "mathvision_correct", "mathvision_extract",
    "mathvision_is_equal", "prefetch", "report", "reset_backend", "verdict",
]

_MV_FLAGS = ("the final answer is", "the answer is", "the correct answer is", "the answer should be")
_MV_NAMESPACE = {"__builtins__": {"abs": abs, "round": round, "pow": pow, "min": min, "max": max,
                                  "int": int, "float": float, "complex": complex},
                 **{k: getattr(__import__("math"), k) for k in dir(__import__("math"))
                    if not k.startswith("_")}}
_MV_UNSAFE = re.compile(r"__|lambda|\*\*\s*\(?\s*-?\d{4,}|\*\*[^*]*\*\*|factorial\(\s*\d{4,}")
#: ``official_rule`` of each way to compute the LaTeX value.
RULES = {"official": "official", "approx": "official_approx"}


def _is_float(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


# --------------------------------------------------------------------------- backends

_LOCK = threading.RLock()
_STATE: dict = {"worker": None, "backend": None, "warned": False}


def worker():
    """The process-wide official worker (started on first use, closed at exit)."""
    from .mathvision_env import OfficialWorker

    if _STATE["worker"] is None:
        import atexit

        w = OfficialWorker()
        w.start()
        _STATE["worker"] = w
        atexit.register(w.close)
    return _STATE["worker"]


def backend() -> str:
    """``"official"`` when the official parser environment is built (and its worker
    starts), else ``"approx"``. ``$VLCOHORT_MATHV_BACKEND``: ``official`` requires the
    environment (an error naming the build command when missing), ``approx`` forces the
    in-process path, ``auto`` (default) picks."""
    from .mathvision_env import WorkerError, env_status

    with _LOCK:
        if _STATE["backend"] is not None:
            return _STATE["backend"]
        want = os.environ.get("VLCOHORT_MATHV_BACKEND", "auto")
        if want not in ("auto", "official", "approx"):
            raise ValueError(f"$VLCOHORT_MATHV_BACKEND={want!r}: use auto, official or approx")
        chosen, why = "approx", "VLCOHORT_MATHV_BACKEND=approx"
        if want != "approx":
            ok, why = env_status()
            if ok:
                try:
                    worker()
                    chosen = "official"
                except WorkerError as e:
                    why = str(e)
            if chosen != "official" and want == "official":
                raise RuntimeError(f"MATH-Vision official scorer: {why}")
        if chosen == "approx" and want == "auto" and not _STATE["warned"]:
            _STATE["warned"] = True
            print(f"MATH-Vision --scorer official: {why}. Scoring with the in-process "
                  f"approximation instead (official_rule 'official_approx').", file=sys.stderr)
        _STATE["backend"] = chosen
        return chosen


def reset_backend() -> None:
    """Close the worker and forget the chosen backend (the next call picks again; for
    tests and for a process that builds the environment mid-run)."""
    with _LOCK:
        if _STATE["worker"] is not None:
            _STATE["worker"].close()
        _STATE.update(worker=None, backend=None, warned=False)


def _resolve(which: str | None) -> str:
    return backend() if which in (None, "auto") else which


# --------------------------------------------------------------------------- approx path


@functools.lru_cache(maxsize=65536)
def _mv_value(latex: str) -> float:
    """``round(eval(str(latex2sympy(latex))), 2)`` with the guards above; raises on failure
    (cached: a scoring run parses the same gold strings again and again)."""
    from latex2sympy2_extended import latex2sympy

    text = str(latex2sympy(latex))
    if _MV_UNSAFE.search(text):
        raise ValueError(f"refused to evaluate {text!r}")
    return round(eval(text, dict(_MV_NAMESPACE)), 2)  # guarded, no builtins


def _mv_tuple(s: str) -> str:
    """Official ``eval_tuple``: ``"(2*3, 5+2)"`` -> ``"(6,7)"``; unchanged when not a
    tuple/list of 2+ elements or when an element does not evaluate."""
    parts = s[1:-1].split(",")
    try:
        for open_, close in (("(", ")"), ("[", "]")):
            if s[0] == open_ and s[-1] == close and len(parts) > 1:
                vals = [str(_mv_value(p)) if "infty" not in p and p not in ("a", "-a") else p
                        for p in parts]
                return open_ + ",".join(vals) + close
    except Exception:  # as the official code: any failure keeps the text
        return s
    return s


def _approx_is_equal(a: str, b: str, timeout_s: float = 5.0) -> bool:
    """The official ``is_equal`` over the in-process fork (``official_approx``)."""
    a, b = str(a).lower(), str(b).lower()
    if not a.replace(" ", "") or not b.replace(" ", ""):
        return False
    if a.strip() == b.strip():
        return True
    from vlcohort.answers.symbolic import run_with_time_limit

    def compare() -> bool:
        ta, tb = _mv_tuple(a), _mv_tuple(b)
        if ta == tb:
            return True
        try:
            return _mv_value(tb) == _mv_value(ta)
        except Exception:  # the official code answers False on any error
            return False

    try:
        return bool(run_with_time_limit(compare, timeout_s))
    except Exception:
        return False


# --------------------------------------------------------------------------- official path


def _tuple_parts(s: str) -> list[str] | None:
    """The elements official ``eval_tuple`` evaluates (None: ``s`` is not a tuple/list of
    2+ elements, so it stays as it is)."""
    parts = s[1:-1].split(",")
    if s and len(parts) > 1 and (s[0], s[-1]) in (("(", ")"), ("[", "]")):
        return [p for p in parts if "infty" not in p and p not in ("a", "-a")]
    return None


def _official_tuple(s: str, value) -> str:
    """Official ``eval_tuple`` with ``value(str) -> worker result``: each element's
    ``str(round(value, 2))``; the text unchanged when any element fails."""
    if _tuple_parts(s) is None:
        return s
    out = []
    for p in s[1:-1].split(","):
        if "infty" in p or p in ("a", "-a"):
            out.append(p)
            continue
        r = value(p)
        if not r.get("ok"):
            return s
        out.append(r["str"])
    return s[0] + ",".join(out) + s[-1]


def _official_is_equal(a: str, b: str, value) -> bool:
    """Official ``is_equal(a, b)`` (``b`` is the answer, ``a`` the gold) over ``value``."""
    a, b = str(a).lower(), str(b).lower()
    if not a.replace(" ", "") or not b.replace(" ", ""):
        return False
    if a.strip() == b.strip():
        return True
    ta, tb = _official_tuple(a, value), _official_tuple(b, value)
    if ta == tb:
        return True
    ra = value(ta)
    if not ra.get("ok"):
        return False
    rb = value(tb)
    return bool(rb.get("ok")) and ra["key"] is not None and ra["key"] == rb["key"]


def prefetch(pairs, which: str | None = None) -> None:
    """Ask the official worker, in two batches, for every value the comparisons of
    ``pairs`` (``(gold, answer)``) will need: the tuple elements, then the (tuple-
    evaluated) texts. Afterwards :func:`mathvision_is_equal` answers from the cache.
    A no-op on the approx path."""
    if _resolve(which) != "official":
        return
    pairs = [(str(a).lower(), str(b).lower()) for a, b in pairs]
    pairs = [(a, b) for a, b in pairs
             if a.replace(" ", "") and b.replace(" ", "") and a.strip() != b.strip()]
    with _LOCK:
        w = worker()
        w.values([p for a, b in pairs for s in (a, b) for p in (_tuple_parts(s) or [])])
        texts = []
        for a, b in pairs:
            ta, tb = _official_tuple(a, w.value), _official_tuple(b, w.value)
            if ta != tb:
                texts += [ta, tb]
        w.values(texts)


def mathvision_is_equal(a: str, b: str, timeout_s: float = 5.0, which: str | None = None) -> bool:
    """Official ``is_equal``: case-insensitive exact match, then tuples element-wise, then
    LaTeX values equal after rounding to 2 decimals. ``which``: ``official`` (the official
    parser's worker), ``approx`` (in-process fork) or None (:func:`backend`)."""
    if _resolve(which) == "official":
        with _LOCK:
            return _official_is_equal(a, b, worker().value)
    return _approx_is_equal(a, b, timeout_s)


def _mv_fix_fracs(s: str) -> str:
    parts = s.split("\\frac")
    out = parts[0]
    for sub in parts[1:]:
        out += "\\frac"
        if sub[:1] == "{":
            out += sub
            continue
        if len(sub) < 2:
            return s
        a, b, rest = sub[0], sub[1], sub[2:]
        out += ("{" + a + "}{" + b + "}" + rest) if b != "{" else ("{" + a + "}" + b + rest)
    return out


def _mv_fix_slash(s: str) -> str:
    if len(s.split("/")) != 2:
        return s
    a, b = s.split("/")
    try:
        ia, ib = int(a), int(b)
    except ValueError:
        return s
    return f"\\frac{{{ia}}}{{{ib}}}" if s == f"{ia}/{ib}" else s


def _mv_fix_sqrt(s: str) -> str:
    parts = s.split("\\sqrt")
    out = parts[0]
    for sub in parts[1:]:
        out += ("\\sqrt{" + sub[0] + "}" + sub[1:]) if sub and sub[0] != "{" else ("\\sqrt" + sub)
    return out


def _mv_strip(s: str) -> str:
    """Official ``_strip_string`` (the MATH dataset's normaliser, as MATH-V ships it)."""
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "").replace("$", "")
    s = s.split("\\text{ ")[0]
    s = s.replace("\\%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    if len(s.split("=")) == 2:
        s = s.split("=")[-1]
    if len(s.split("\\approx")) == 2:
        s = s.split("\\approx")[-1]
    if "sqrt" in s:
        s = _mv_fix_sqrt(s)
    s = s.replace(" ", "")
    if "sqrt" in s:
        s = _mv_fix_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _mv_fix_slash(s)


def _mv_find_math_answer(s: str) -> str:
    """Official ``find_math_answer``: the last ``\\boxed{...}`` (greedy), else the text."""
    s = s.lower().replace("{}", "")
    found = re.findall(r"oxed{(.*)}", s, flags=re.S)
    ans = found[-1] if found else s
    if ans.find("}") != -1 and (ans.find("{") == -1 or ans.find("}") < ans.find("{")):
        ans = ans.split("}")[0]
    ans = ans.split("=")[-1].split("\\approx")[-1]
    for old, new in ((" ", ""), ("\\,", ""), ("∞", "\\infty"), ("+\\infty", "\\infty"),
                     ("\\\\", "\\"), ("\n", ""), ("\\text", ""), ("\\mbox", ""),
                     ("bmatrix", "pmatrix"), ("\\left", ""), ("\\right", ""), ("^{\\circ}", ""),
                     ("^\\circ", ""), ("{m}^3", ""), ("m^3", ""), ("{units}", ""), ("units", ""),
                     ("{km}", ""), ("km", "")):
        ans = ans.replace(old, new)
    return _mv_strip(ans)


def mathvision_extract(response: str) -> str:
    """The official answer extraction of a raw response (``evaluate.py``), rule for rule."""
    ans = (response or "").strip()
    for c in "ABCDE":
        if (ans.endswith(f" {c}.") or ans.endswith(f" ({c}).") or ans.startswith(f"{c}\n")
                or ans.startswith(f"({c})\n") or ans.startswith(f"({c}) {c}\n")):
            ans = c
    if _is_float(ans.split("is ")[-1].rstrip(".")):
        ans = ans.split("is ")[-1].rstrip(".")
    if "oxed{" not in ans:
        for flag in _MV_FLAGS:
            for f in (flag, flag.replace("the", "The")):
                raw = ans
                ans = ans.split(f)[-1].strip()
                if f in raw:
                    ans = ans.split("\n")[0].split(". ")[0]
    elif ans.count("oxed{") > 1:
        ans = "\\boxed{" + ans.split("oxed{")[-1]
    ans = _mv_find_math_answer(ans)
    for c in "abcde":
        ans = ans.replace(f"({c})", c).replace(f"{{{c}}}", c)
    return ans.rstrip(".").lstrip(":").strip()


def mathvision_correct(extracted: str, gold: str, options: Sequence[str] | None,
                       which: str | None = None) -> bool:
    """Right when the extracted answer equals the gold (a letter for multiple choice) or
    the gold option's text, as the official ``evaluate`` decides."""
    gold = str(gold)
    value = ""
    if options and len(gold) == 1 and 0 <= ord(gold) - ord("A") < len(options):
        value = str(options[ord(gold) - ord("A")])
    return (mathvision_is_equal(gold, extracted, which=which)
            or mathvision_is_equal(value, extracted, which=which))


def gold_pairs(extracted: str, gold: str, options: Sequence[str] | None) -> list[tuple[str, str]]:
    """The (gold side, answer) comparisons :func:`mathvision_correct` makes (for
    :func:`prefetch`)."""
    gold = str(gold)
    value = ""
    if options and len(gold) == 1 and 0 <= ord(gold) - ord("A") < len(options):
        value = str(options[ord(gold) - ord("A")])
    return [(gold, extracted), (value, extracted)]


_PROTOCOL = ("MATH-Vision: the official rule-based scorer (mathllm/MATH-V evaluation/evaluate.py): "
             "answer phrase / last \\boxed{} extraction, exact text, tuples, LaTeX value at 2 "
             "decimals; right when equal to the gold letter or the gold option's text")
_PROTOCOL_BY = {
    "official": " (LaTeX values by the official parser latex2sympy2 1.9.1 / antlr 4.7.2 in its "
                "own environment; replayed against 48,640 published verdicts)",
    "approx": " (APPROXIMATE: LaTeX values by the in-process latex2sympy2_extended, not the "
              "official parser: build it with python -m vlcohort.eval.official.mathvision_env --build; "
              "rule official_approx)"}


def __getattr__(name: str):
    """``PROTOCOL`` says which LaTeX parser decides, so a summary never claims the
    official parser when it was not used."""
    if name == "PROTOCOL":
        return _PROTOCOL + _PROTOCOL_BY[backend()]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def verdict(problem, response: str, extracted, judged, use_judge) -> dict:
    """The official extraction of the raw response, compared with gold letter / option."""
    which = backend()
    prediction = mathvision_extract(response)
    return {"official_prediction": prediction,
            "official_correct": mathvision_correct(prediction, problem.gold, problem.options, which),
            "official_rule": RULES[which]}


def _acc_table(rows, key: str) -> dict[str, dict]:
    table: dict[str, list[int]] = {}
    for p, v in rows:
        cell = table.setdefault(str(p.meta.get(key)), [0, 0])
        cell[0] += v["maj"] >= 0.5
        cell[1] += 1
    return {k: {"n": n, "correct": c, "acc": c / n}
            for k, (c, n) in sorted(table.items(), key=lambda kv: _natural(kv[0]))}


def _natural(k: str):
    return (0, int(k), "") if k.isdigit() else (1, 0, k)


def report(rows) -> dict:
    """MATH-Vision's headline (the overall accuracy, as the official ``-all``) and its
    per-subject and per-level tables (``math_level_subject_acc``), from
    ``[(problem, {"maj", "mean"})]``."""
    n = len(rows)
    return {"headline": sum(v["maj"] >= 0.5 for _, v in rows) / n if n else 0.0,
            "headline_name": "accuracy",
            "mathvision": {"subject": _acc_table(rows, "subject"),
                           "level": _acc_table(rows, "level")}}
