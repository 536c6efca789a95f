"""MATH-Vision's official rule-based scorer (mathllm/MATH-V ``evaluation/evaluate.py`` and
``evaluation/utils.py``), rewritten rule for rule."""

from __future__ import annotations

import re
from typing import Sequence

# A reproduction of MATH-Vision's rule-based scorer (mathllm/MATH-V, evaluation/evaluate.py
# and evaluation/utils.py): the same answer-phrase / \boxed{} extraction, the same string
# clean-up, and equality by exact string, then element-wise tuples, then the value of the
# LaTeX (latex2sympy) rounded to 2 decimals. A response is right when it equals the gold
# letter or the gold option's text. Rules are kept as published, quirks included (e.g.
# ``\frac`` fix-ups run only when the answer contains ``sqrt``; ``0.5`` becomes ``\frac{1}{2}``).
#
# Differences, all on edge cases: LaTeX is parsed by ``latex2sympy2_extended`` (the
# maintained fork, installed with math-verify) rather than ``latex2sympy2``; the parsed
# expression's text is evaluated over Python's ``math`` names only (the official ``eval``
# sees its module's globals too), and text with ``__``/``lambda`` or a huge power or
# factorial is refused instead of evaluated; each comparison has a CPU-time limit.

_MV_FLAGS = ("the final answer is", "the answer is", "the correct answer is", "the answer should be")
_MV_NAMESPACE = {"__builtins__": {"abs": abs, "round": round, "pow": pow, "min": min, "max": max,
                                  "int": int, "float": float, "complex": complex},
                 **{k: getattr(__import__("math"), k) for k in dir(__import__("math"))
                    if not k.startswith("_")}}
_MV_UNSAFE = re.compile(r"__|lambda|\*\*\s*\(?\s*-?\d{4,}|\*\*[^*]*\*\*|factorial\(\s*\d{4,}")


def _is_float(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def _mv_value(latex: str) -> float:
    """``round(eval(str(latex2sympy(latex))), 2)`` with the guards above; raises on failure."""
    from latex2sympy2_extended import latex2sympy

    text = str(latex2sympy(latex))
    if _MV_UNSAFE.search(text):
        raise ValueError(f"refused to evaluate {text!r}")
    return round(eval(text, dict(_MV_NAMESPACE)), 2)  # noqa: S307 - guarded, no builtins


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
    except Exception:  # noqa: BLE001 - as the official code: any failure keeps the text
        return s
    return s


def mathvision_is_equal(a: str, b: str, timeout_s: float = 5.0) -> bool:
    """Official ``is_equal``: case-insensitive exact match, then tuples element-wise, then
    LaTeX values equal after rounding to 2 decimals."""
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
        except Exception:  # noqa: BLE001 - the official code answers False on any error
            return False

    try:
        return bool(run_with_time_limit(compare, timeout_s))
    except Exception:  # noqa: BLE001
        return False


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


def mathvision_correct(extracted: str, gold: str, options: Sequence[str] | None) -> bool:
    """Right when the extracted answer equals the gold (a letter for multiple choice) or
    the gold option's text, as the official ``evaluate`` decides."""
    gold = str(gold)
    value = ""
    if options and len(gold) == 1 and 0 <= ord(gold) - ord("A") < len(options):
        value = str(options[ord(gold) - ord("A")])
    return mathvision_is_equal(gold, extracted) or mathvision_is_equal(value, extracted)


PROTOCOL = ("MATH-Vision: the official rule-based scorer (mathllm/MATH-V evaluation/evaluate.py): "
            "answer phrase / last \\boxed{} extraction, exact text, tuples, LaTeX value at 2 "
            "decimals; right when equal to the gold letter or the gold option's text")


def verdict(problem, response: str, extracted, judged, use_judge) -> dict:
    """The official extraction of the raw response, compared with gold letter / option."""
    prediction = mathvision_extract(response)
    return {"official_prediction": prediction,
            "official_correct": mathvision_correct(prediction, problem.gold, problem.options),
            "official_rule": "official"}
