"""We-Math's official protocol (``--scorer official``): the string-match extraction, the
four-dimensional metrics and the S1/S2/S3 accuracies of We-Math/We-Math ``evaluation/``
(four_dimensional_metrics.py, accuracy.py), checked against a reference written here from
the official scripts' rules (row selections and formulas), not against our own code."""

from __future__ import annotations

import json
import random

import pytest

from vlcohort.eval.datasets import load_benchmark
from vlcohort.eval.official import official_verdict
from vlcohort.eval.official.wemath import report, wemath_extract, wemath_metrics
from vlcohort.eval.runner import markdown_table, score_responses


def _template(letter: str) -> str:
    """A response in the template the official prompt (our ``--prompt official``) asks for."""
    return f"<Thought process>: <<the sides are 3 and 4>> <Answer>: <<{letter}>>"


@pytest.mark.parametrize("response,letter", [
    (_template("B"), "B"),
    ("<Answer>: <<C. 45°>>", "C"),                  # the option text after the letter
    ("Answer: D.", "D"),
    ("Answer: A ... no wait. Answer: <<E>>", "E"),  # the last 'Answer' counts
    ("A", "A"),                                      # no 'Answer': the whole response
    ("Because the area doubles. <Answer>: <<B>>", "B"),
    ("Because the area doubles", "B"),              # no 'Answer': its first letter, a quirk kept
    ("The answer is B", None),                       # 'answer' is case-sensitive: 'T'
    ("<Answer>: <<b>>", None),                       # lower case is no option letter
    ("<Answer>: <<I>>", None),                       # A-H only
    ("<Answer>: ", None),
    ("", None),
    ("Answer: ..:.<>F", "F"),                       # <>:. removed anywhere in the tail
    ("Answer: (B)", None),                           # '(' is not removed
])
def test_official_extraction(response, letter):
    assert wemath_extract(response) == letter


# --------------------------------------------------------------------------- reference


def _ref_extract(response: str):
    """four_dimensional_metrics.py's ``processed_answer``, written out step by step."""
    tail = response.split("Answer")[-1].strip()
    tail = "".join(ch for ch in tail if ch not in "<>:.").strip()
    return tail[0] if tail and tail[0] in "ABCDEFGH" else None


def _ref_tables(rows: list[dict]) -> dict[int, list[dict]]:
    """process_steps_data: per step count, one merged row per problem (left merge on the
    ``_1`` row; a missing row's verdict is None, which equals neither True nor False)."""
    by = {}
    for r in rows:
        by[(r["ID"], r["key"])] = r["joker"]
    merged = {2: [], 3: []}
    for n in (2, 3):
        for r in rows:
            if r["key"] != f"{n}steps_1":
                continue
            m = {f"joker_{i}": by.get((r["ID"], f"{n}steps_{i}")) for i in range(1, n + 1)}
            m["joker_multi"] = by.get((r["ID"], f"{n}steps_multi"))
            merged[n].append(m)
    return merged


def _ref_official(rows: list[dict], total: int = 525) -> dict:
    """calculate_metrics + compute_final_scores + update_main_results_df, and accuracy.py's
    S1/S2/S3, from rows ``{"ID", "key", "joker"}``."""
    merged = _ref_tables(rows)
    cnt = {k: 0 for k in ("IG", "IK", "CM_loose", "CM_strict", "RM_loose", "RM_strict")}
    for n, table in merged.items():
        for m in table:
            subs = [m[f"joker_{i}"] for i in range(1, n + 1)]
            multi = m["joker_multi"]
            all_false = all(s is False for s in subs)
            any_false = any(s is False for s in subs)
            all_true = all(s is True for s in subs)
            any_true = any(s is True for s in subs)
            cnt["RM_loose"] += all_false and multi is True
            cnt["RM_strict"] += any_false and multi is True
            cnt["IG"] += all_true and multi is False
            cnt["IK"] += any_false and multi is False
            cnt["CM_loose"] += any_true and multi is True
            cnt["CM_strict"] += all_true and multi is True
    sub = [m[f"joker_{i}"] for n, t in merged.items() for m in t for i in range(1, n + 1)]
    sub = [s for s in sub if s is not None]
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731 - pandas' mean
    return {
        "counts": cnt,
        "IG": cnt["IG"] / total, "IK": cnt["IK"] / total,
        "CM_loose": cnt["CM_loose"] / total, "CM_strict": cnt["CM_strict"] / total,
        "RM_loose_rate": cnt["RM_loose"] / (cnt["CM_loose"] + cnt["RM_loose"]),
        "RM_strict_rate": cnt["RM_strict"] / (cnt["CM_strict"] + cnt["RM_strict"]),
        "score_loose": (total - 0.5 * cnt["IG"] - cnt["RM_loose"] - cnt["IK"]) / total,
        "score_strict": (total - 0.5 * cnt["IG"] - cnt["RM_strict"] - cnt["IK"]) / total,
        "S1": mean(sub),
        "S2": mean([m["joker_multi"] for m in merged[2] if m["joker_multi"] is not None]),
        "S3": mean([m["joker_multi"] for m in merged[3] if m["joker_multi"] is not None]),
    }


def _assert_same(ours: dict, ref: dict) -> None:
    assert ours["counts"] == ref["counts"]
    for k, v in ref.items():
        if k != "counts":
            assert ours[k] == pytest.approx(v), k


@pytest.fixture(scope="module")
def wemath(benchmark_file):
    data = load_benchmark("wemath", benchmark_file("wemath_testmini.json"), need_images=False)
    assert len(data.problems) == 1740
    return data.problems


def _rows(problems, responses):
    out = []
    for p, resp in zip(problems, responses):
        v = official_verdict(p, resp, None)
        assert v["official_rule"] == "wemath_string_match"
        out.append((p, {"maj": float(v["official_correct"]), "mean": float(v["official_correct"])}))
    return out


def test_perfect_responses_in_the_official_template_score_one(wemath):
    rep = report(_rows(wemath, [_template(p.gold) for p in wemath]))
    assert rep["headline_name"] == "score_strict" and rep["headline"] == 1.0
    m = rep["wemath"]
    assert m["n_problems"] == 525 and m["incomplete"] == 0
    assert (m["S1"], m["S2"], m["S3"]) == (1.0, 1.0, 1.0)
    assert (m["n_S1"], m["n_S2"], m["n_S3"]) == (360 * 2 + 165 * 3, 360, 165)
    assert m["counts"]["CM_strict"] == 525 and m["RM_strict_rate"] == 0.0
    assert rep["wemath_official"]["Score (Strict)"] == "100.00%"
    assert rep["wemath_official"]["CompleteMastery (Strict)"] == "100.00% (525)"


def test_lower_case_answer_phrase_scores_zero(wemath):
    """The official match is literal: a model that writes 'answer: B' gets nothing."""
    rep = report(_rows(wemath, [f"The answer: {p.gold}" for p in wemath]))
    assert rep["headline"] == pytest.approx(0.0) and rep["wemath"]["S1"] == 0.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_metrics_equal_the_official_rules_on_random_verdicts(wemath, seed):
    """Random per-problem skill so every category occurs; our verdict + report against the
    reference pipeline (extraction and formulas) on the same raw responses."""
    rng = random.Random(seed)
    skill = {p.meta["ID"]: rng.random() for p in wemath}
    responses = []
    for p in wemath:
        right = rng.random() < skill[p.meta["ID"]]
        letter = p.gold if right else rng.choice([c for c in "ABCDEFGH" if c != p.gold])
        style = rng.randrange(4)
        responses.append([_template(letter), f"Answer: {letter}.", f"answer {letter}",
                          f"{letter}"][style])
    ref_rows = [{"ID": p.meta["ID"], "key": p.meta["key"],
                 "joker": _ref_extract(r) == p.gold} for p, r in zip(wemath, responses)]
    rep = report(_rows(wemath, responses))
    ref = _ref_official(ref_rows)
    _assert_same(rep["wemath"], ref)
    assert rep["headline"] == pytest.approx(ref["score_strict"])
    assert min(ref["counts"].values()) > 0  # every category was exercised


def test_metrics_on_random_synthetic_verdicts_with_three_step_problems_only():
    rng = random.Random(7)
    verdicts, rows = {}, []
    for i in range(40):
        keys = ["3steps_1", "3steps_2", "3steps_3", "3steps_multi"]
        verdicts[f"3steps_{i}"] = {k: rng.random() < 0.6 for k in keys}
        rows += [{"ID": f"3steps_{i}", "key": k, "joker": ok} for k, ok in verdicts[f"3steps_{i}"].items()]
    ours = wemath_metrics(verdicts)
    ref = _ref_official(rows, total=40)
    ref.pop("S2")  # no 2-step problems: the official mean would be NaN
    _assert_same(ours, ref)
    assert ours["n_S2"] == 0


def test_summary_headline_and_table(wemath, tmp_path, benchmark_file):
    """Through ``vlcohort eval score``: the headline and the average are the strict score,
    not the per-row accuracy, and the table prints the official figures."""
    rng = random.Random(3)
    path = tmp_path / "responses.jsonl"
    with path.open("w") as f:
        for p in wemath:
            letter = p.gold if rng.random() < 0.7 else "H"
            f.write(json.dumps({"id": p.id, "response": _template(letter)}) + "\n")
    summary = score_responses("wemath", benchmark_file("wemath_testmini.json"), path,
                              scorer="official")
    res = summary["benchmarks"]["wemath"]["models"]["responses"]
    assert res["headline_name"] == "score_strict"
    assert res["headline"] == pytest.approx(res["wemath"]["score_strict"])
    assert res["headline"] != pytest.approx(res["maj"])
    assert summary["average"]["responses"] == pytest.approx(res["headline"])
    table = markdown_table(summary)
    assert f"wemath score_strict | {100 * res['wemath']['score_strict']:.1f}" in table
    assert f"wemath S1 | {100 * res['wemath']['S1']:.1f}" in table
    assert f"wemath headline: score_strict | {100 * res['headline']:.1f} |" in table


def test_items_correct_is_the_verdict_the_summary_counts(wemath, tmp_path, benchmark_file):
    """``items.jsonl``'s ``correct`` is the verdict the summary counted: under ``--scorer
    official`` the official one, where it disagrees with our grader's (kept in
    ``grader_correct``); re-scored under ``vlcohort``, our grader's."""
    from vlcohort.eval.runner import read_items

    problems = wemath[:12]
    # "The answer is X": our grader reads X, the official match (case-sensitive) nothing
    responses = {p.id: (f"The answer is {p.gold}" if i % 3 == 0 else
                        _template(p.gold) if i % 3 == 1 else _template("H"))
                 for i, p in enumerate(problems)}
    path = tmp_path / "responses.jsonl"
    path.write_text("".join(json.dumps({"id": k, "response": v}) + "\n" for k, v in responses.items()))
    data, out = benchmark_file("wemath_testmini.json"), tmp_path / "out"
    for scorer in ("official", "vlcohort", "official"):
        summary = score_responses("wemath", data, path if scorer == "official" else None,
                                  scorer=scorer, out=out)
        items = read_items(out / "items.jsonl")
        assert len(items) == len(problems)
        disagree = [r for r in items if r["official_correct"] != r["grader_correct"]]
        assert [r["id"] for r in disagree] == [p.id for p in problems[::3]]
        assert all(r["grader_correct"] and not r["official_correct"] for r in disagree)
        field = "official_correct" if scorer == "official" else "grader_correct"
        assert all(r["correct"] == r[field] for r in items)
        counted = summary["benchmarks"]["wemath"]["models"]["responses"]["mean"]
        assert counted == pytest.approx(sum(r["correct"] for r in items) / len(items))
        assert counted == pytest.approx((1 / 3) if scorer == "official" else (2 / 3))
