"""Answer extraction: explicit markers only, linear time on adversarial text."""

from __future__ import annotations

import time

import pytest

from vlcohort.answers.extract import STYLES, extract_answer

AUTO_CASES = [
    # (completion, expected span)
    ("<answer>C</answer>", "C"),
    ("<answer> (C) 45° </answer>", "(C) 45°"),
    ("<ANSWER>7</ANSWER>", "7"),
    # We-Math's official template: the <<slot>> after "<Answer>:", not the thought's slot
    ("<Thought process>: <<the angle is 30, so B>> <Answer>: <<B>>", "B"),
    ("<Answer>: <<C. 120°>>", "C. 120°"),
    ("<Answer>: <<>> the answer is 4", "4"),
    ("<answer>1</answer> changed my mind <answer>2</answer>", "2"),
    ("<answer>\\boxed{\\frac{1}{2}}</answer>", "\\frac{1}{2}"),
    ("<answer>B</answer> and later \\boxed{C}", "B"),  # the tag outranks a box
    ("<answer></answer> so \\boxed{9}", "9"),  # an empty tag is no answer
    ("<answer>3", None),  # an unclosed tag is no answer
    ("so \\boxed{42}.", "42"),
    ("\\boxed{1} first, then \\boxed{2}", "2"),
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}"),
    ("\\boxed{\\boxed{3}}", "3"),
    ("\\fbox{7}", "7"),
    ("$\\boxed 5$", "5"),
    ("\\boxed{a} then \\boxed{b", "a"),  # the unclosed box is ignored
    ("The answer is C.", "C"),
    ("the answer is (B)", "(B)"),
    ("Answer: 12 cm", "12 cm"),
    ("**Answer:** C. 45°", "C. 45°"),
    ("**Answer**: 3.5", "3.5"),
    ("Final Answer: The final answer is $\\frac{1}{2}$. I hope it is correct.", "$\\frac{1}{2}$"),
    ("The answer is 3.5. Because the sides...", "3.5"),
    ("Answer: C. Pythagorean theorem", "C"),
    ("The correct option is D", "D"),
    ("Answer: 1\nAnswer: 2", "2"),
    # never a heuristic guess without a marker
    ("D is the midpoint of AC", None),
    ("so it must be 42", None),
    ("A, B or C? Hard to say.", None),
    # several boxes: the final run of boxes joined by connectors is one answer
    ("\\boxed{(1, 2)}, \\boxed{(2, 1)}", "(1, 2), (2, 1)"),
    ("The roots are \\boxed{3} and \\boxed{7}.", "3, 7"),
    ("$\\boxed{3}$ \\text{ or } $\\boxed{-3}$", "3, -3"),
    ("\\boxed{2}\n\\boxed{5}", "2, 5"),
    ("\\boxed{4}, \\boxed{4}", "4"),  # a repeated box is one answer
    ("so $x = \\boxed{3}$ and $y = \\boxed{4}$", "x = 3, y = 4"),  # names kept, in order
    ("\\boxed{k = 45}, \\boxed{n = 2}", "k = 45, n = 2"),
    ("AB = \\boxed{5}, CD = \\boxed{6}", "AB = 5, CD = 6"),
    ("$x_1 = \\boxed{3}$ and $x_2 = \\boxed{4}$", "x_1 = 3, x_2 = 4"),
    ("x = \\boxed{3}", "3"),  # one box: the name is not added
    ("we get \\boxed{1}; since the area is then larger, \\boxed{2}", "2"),  # prose ends a run
    ("\\boxed{1} and \\boxed{2} \\boxed{", "1, 2"),  # a trailing unclosed box is ignored
    # an unclosed box is no answer (a truncated completion), never the raw "\\boxed{12"
    ("the answer is \\boxed{12", None),
    ("Answer: $\\boxed{\\frac{1}{2}$", None),
    ("<answer>\\boxed{12</answer>", None),
    # a bare final answer: the whole completion when it is one answer-shaped token
    ("A", "A"),
    ("(C)", "(C)"),
    ("60", "60"),
    ("  12 cm.\n", "12 cm"),
    ("**B**", "B"),
    ("$\\frac{1}{2}$", "$\\frac{1}{2}$"),
    ("The answer is:\nA", "A"),  # the phrase ends its line: the next line is the answer
    ("Answer:\n\n(D)", "(D)"),
    ("Answer:\nFirst we find the area of the triangle.", None),  # reasoning, not an answer
    ("Yes", None),  # a word is not answer-shaped: style direct takes it
    ("We compare both.\n60", None),  # last_line takes it
]


@pytest.mark.parametrize("text, expected", AUTO_CASES)
def test_auto_extraction(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text, style, expected",
    [
        ("<answer>B</answer> \\boxed{C}", "boxed", "C"),
        ("\\boxed{C} <answer>B</answer>", "answer_tag", "B"),
        ("\\boxed{C}", "answer_tag", None),
        ("The answer is 4. \\boxed{5}", "phrase", "4"),
        ("A, B or C? I pick C", "last_letter", "C"),
        ("I pick C now", "last_letter", "C"),
        ("AB and CD", "last_letter", None),
        ("it costs 3, then 1,250.5 in total", "last_number", "1,250.5"),
        ("no digits", "last_number", None),
        ("\\boxed{3} and \\boxed{7}", "boxed", "3, 7"),
        ("the answer is \\boxed{12", "phrase", None),
        # direct: markers first, else a short one-line reply of any shape
        ("Yes", "direct", "Yes"),
        ("9:30 am.", "direct", "9:30 am"),
        ("obtuse \\boxed{acute}", "direct", "acute"),
        ("We compare both.\n60", "direct", None),  # two lines: not a direct reply
        ("x" * 65, "direct", None),
        # last_line: markers first, else a short last line after reasoning
        ("We compare both sides.\nSo the answer must be\n60\n\n", "last_line", "60"),
        ("We compare both.\n**Yes.**", "last_line", "Yes"),
        ("We compare both.\n" + "y" * 65, "last_line", None),
        ("reasoning\n\\boxed{12", "last_line", None),  # a cut-off box is still no answer
    ],
)
def test_named_styles(text, style, expected):
    assert extract_answer(text, style=style) == expected


def test_unknown_style_names_the_choices():
    with pytest.raises(ValueError, match="boxed"):
        extract_answer("x", style="last_capital")
    assert "auto" in STYLES


@pytest.mark.parametrize("bad", [None, "", "   ", "<answer>   </answer>", "\\boxed{}"])
def test_nothing_to_extract(bad):
    assert extract_answer(bad) is None


ADVERSARIAL = {
    "1 MB of prose": "x" * 1_000_000,
    "1 MB ending in a box": "y " * 500_000 + "\\boxed{7}",
    "10,000 nested braces in a box": "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}",
    "200,000 unclosed boxes": "\\boxed{" * 200_000,
    "100,000 unclosed tags": "<answer>" * 100_000,
    "100,000 closing tags": "</answer>" * 100_000,
    "100,000 answer phrases": "the answer is " * 100_000,
    "100,000 closed boxes in a run": "\\boxed{1}, " * 100_000,
    "100,000 boxes apart": "\\boxed{1} then " * 100_000,
    "100,000 phrases ending lines": "Answer:\n" * 100_000,
}


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial_text_is_linear(name, style):
    text = ADVERSARIAL[name]
    started = time.perf_counter()
    result = extract_answer(text, style=style)
    assert time.perf_counter() - started < 2.0, name
    assert result is None or isinstance(result, str)


def test_adversarial_results():
    assert extract_answer(ADVERSARIAL["1 MB ending in a box"]) == "7"
    nested = extract_answer(ADVERSARIAL["10,000 nested braces in a box"])
    assert nested is not None and nested.count("{") == 10_000
    assert extract_answer(ADVERSARIAL["200,000 unclosed boxes"]) is None
    assert extract_answer(ADVERSARIAL["100,000 closed boxes in a run"]) == "1"
    assert extract_answer(ADVERSARIAL["100,000 boxes apart"]) == "1"


def test_non_ascii_is_kept_for_the_grader():
    assert extract_answer("答案是 <answer>４５°</answer>") == "４５°"


@pytest.mark.parametrize("text, expected", [
    (" 7 + 8 = 15\nAnswer: 11\nAnswer:", "15"),  # a base model going on past its answer
    (" 77\nQuestion: Which number is larger, 3 or 4?", "77"),
    ("\n\n18 is the larger number.\n19", "18"),
    ("\nAnswer:\nAnswer: 4", None),  # the first line commits to nothing
    ("To solve this problem, we need\n= 12", None),
    ("<answer>9</answer> then\n10", "9"),
])
def test_first_line_reads_the_first_line_only(text, expected):
    assert extract_answer(text, style="first_line") == expected
