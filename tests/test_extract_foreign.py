"""Extraction on replies nobody here wrote: other languages, direct multiple-choice forms,
bare LaTeX, answers inside a sentence, and the ``last_expression`` style for evaluating
foreign outputs.

Each class has cases that must extract and cases that must not: the policy being trained
is an adversary, so a reply that lists options, hedges ("A or B") or names no answer
must stay ``None`` (or a span the grader cannot read as one option).
"""

from __future__ import annotations

import time

import pytest

from vlcohort.answers.extract import STYLES, extract_answer
from vlcohort.answers.grading import is_equivalent

OTHER_LANGUAGES = [
    ("所以答案是 C。", "C"),
    ("故选：D", "D"),
    ("故选D.", "D"),
    ("答案：12", "12"),
    ("解：由勾股定理得 AB = 5。\n答案是 12", "12"),
    ("因此，答案为 $\\frac{1}{2}$。", "$\\frac{1}{2}$"),
    ("因此，答案为 \\boxed{5}。", "5"),
    ("最终答案：B", "B"),
    ("正确选项为 (A)。", "(A)"),
    ("Answer：B", "B"),
    ("La réponse est 42.", "42"),
    ("Donc la réponse finale est 3,5.", "3,5"),
    ("Die Antwort ist 7", "7"),
    ("Die richtige Antwort lautet B.", "B"),
    ("La respuesta es 5", "5"),
    ("La respuesta correcta es (C).", "(C)"),
    ("Ответ: 24", "24"),
    ("（C）", "（C）"),
    ("答案是 12，因为两边相等。", "12"),
    ("解：设共有 x 个，则 x = 12。\n答：共有 12 个。", "12"),  # 答： the school form of 答案：
    ("答：面积为12平方厘米。", "12"),
    ("答：增长了 12%。", "12%"),
    ("答：大约 12 个。", "大约 12 个"),  # "about 12": the sentence stays whole
    ("答：12 或 13 个。", "12 或 13 个"),
    ("答案不是 C，而是 D。", "D"),  # "the answer is not C but D"
    ("答案不是 C。", None),
    # no marker, or a marker with nothing committed after it
    ("我们先求出三角形的面积，再比较两个选项。", None),
    ("选择题：下列哪个是正确的？", None),
    ("答案：\n首先我们计算三角形的面积，然后比较。", None),
    ("La réponse dépend de x.", None),
]


@pytest.mark.parametrize("text, expected", OTHER_LANGUAGES)
def test_markers_in_other_languages(text, expected):
    assert extract_answer(text) == expected


DIRECT_CHOICE = [
    ("(C) 24", "(C) 24"),
    ("B. circle.", "B. circle"),
    ("The answer is D because the angles are equal.", "D"),
    ("The answer is D, since the angles are equal.", "D"),
    ("The answer is B as the triangle is isosceles.", "B"),
    ("The answer is 12; this follows from the area.", "12"),
    ("The answer is D, not C.", "D"),
    ("The answer is 7, not 8.", "7"),
    ("Final answer: 7. (An earlier guess of 8 was wrong.)", "7"),
    ("The answer is not C.", "not C"),
    ("The answer is not C but D.", "D"),
    ("The answer is not C, but rather D.", "D"),
    ("The answer is not C but maybe D or E.", "maybe D or E"),
    ("Answer: C, because AB = CD.", "C"),
    ("Comparing them, so the correct option is:\n\nA. 3 cm", "A. 3 cm"),
    ("The angle is 45°, i.e. option (B).", "option (B)"),
    ("The answer is 45°, i.e. option (B).", "option (B)"),
    ("So i.e. 3 is the side.", None),  # "i.e." marks only an option or choice
    ("Correct answer: (B)", "(B)"),
    ("**Answer:** C", "C"),
    ("the correct choice is (D)", "(D)"),
    ("The answer is (B) No.\n\nSo the correct answer is therefore choice (B).", "choice (B)"),
    ("Therefore, the answer to the question is 2.", "2"),
    # after a phrase, an option's own text may say "or"; another letter still ends it
    ("So the correct option is:\n\nD. either $R$ or $S$, but no others", "D. either $R$ or $S$, but no others"),
    ("The correct option is:\nA. 3 B. 4", None),
    ("The answer is:\nA. or B", None),
    # a listed set stays a set: "1; 2" is not cut at the semicolon
    ("The answer is 1; 2", "1; 2"),
    # listing or hedging between options commits to none
    ("A. 3 B. 4 C. 5 D. 6", None),
    ("(A) or (B)", None),
    ("A. 3 or B", None),
    ("B. circle?", None),
    ("C. I don't know", None),
    ("(B) maybe", None),
    ("D is the midpoint of AC", None),
    ("so the correct option is:\n\nA. 3 cm B. 4 cm", None),
    # a span that starts with one option and names another is a list, wherever it comes from
    ("The answer is A. 3 or B. 4", None),
    ("The answer is (A) 3 or (B) 4", None),
    ("The answer is A. 3 B. 4 C. 5 D. 6", None),
    ("<answer>A. 3 B. 4</answer>", None),
]


@pytest.mark.parametrize("text, expected", DIRECT_CHOICE)
def test_direct_multiple_choice_forms(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text, gold, options",
    [
        ("(C) 24", "C", ["12", "18", "24", "30"]),
        ("B. circle.", "B", ["square", "circle", "line"]),
        ("so the correct option is:\n\nA. 3 cm", "A", ["3 cm", "4 cm"]),
        ("The angle is 45°, i.e. option (B).", "B", ["30°", "45°"]),
        ("The answer is D because the angles are equal.", "D", ["1", "2", "3", "4"]),
        ("所以答案是 C。", "C", ["1", "2", "3", "4"]),
    ],
)
def test_direct_choice_spans_grade_as_their_letter(text, gold, options):
    assert is_equivalent(extract_answer(text), gold, options)


@pytest.mark.parametrize("text", ["A. 3 B. 4 C. 5 D. 6", "(A) or (B)", "A or B", "A, B, C or D"])
def test_option_lists_never_grade_as_an_option(text):
    for letter in "ABCD":
        assert not is_equivalent(extract_answer(text), letter, ["3", "4", "5", "6"])


BARE_LATEX = [
    ("\\frac{5}{12}", "\\frac{5}{12}"),
    ("2\\sqrt{3}", "2\\sqrt{3}"),
    ("\\dfrac{\\pi}{4}", "\\dfrac{\\pi}{4}"),
    ("  \\frac{\\sqrt{3}}{2}.\n", "\\frac{\\sqrt{3}}{2}"),
    ("x = \\frac{1}{2}", "x = \\frac{1}{2}"),
    ("\\{1, 2\\}", "\\{1, 2\\}"),
    ("2^{16}", "2^{16}"),
    ("$$\\frac{\\pi}{6}$$", "\\frac{\\pi}{6}"),
    ("\\[ 4\\pi \\]", "4\\pi"),
    ("$$\n2\\sqrt{3}\n$$", "2\\sqrt{3}"),
    ("$$x \\text{ or } y$$", None),
    ("A^2", None),
    # not one short math expression
    ("\\frac{1}{2} or \\frac{1}{3}", None),
    ("\\text{A or B}", None),
    ("\\textbf{Step 1}: compute \\frac{1}{2}", None),
    ("We use \\sqrt{3} here", None),
    ("\\frac{1}{2}\n\\frac{1}{3}", None),
    ("\\frac{" + "1" * 80 + "}{2}", None),
    ("\\sqrt{2} \\sqrt{3} \\sqrt{5} \\sqrt{7} \\sqrt{11} \\sqrt{13} \\sqrt{17}", None),
]


@pytest.mark.parametrize("text, expected", BARE_LATEX)
def test_a_reply_of_bare_latex(text, expected):
    assert extract_answer(text) == expected


IN_A_SENTENCE = [
    ("The answer is: Hence $y \\leq 7$ holds.", "y \\leq 7"),
    # "The ... is X" after a phrase: X (a math-only X keeps its delimiters, as always)
    ("Answer: The inverse is $\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}$.",
     "$\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}$"),
    ("Final Answer: The largest $n$ is 34.", "34"),
    ("Final Answer: The number of points in the domain of $f(x)$ is 19. <|im_start|>user", "19"),
    ("Answer: The result is 3 or 4.", "The result is 3 or 4"),
    ("Answer: The value is not 5.", "The value is not 5"),
    ("<answer>The area is \\(12\\) square units.</answer>", "12"),
    ("Final answer: the maximum is \\[ 2\\sqrt{2} \\] here.", "2\\sqrt{2}"),
    ("答案：面积为 $12$。", "12"),
    # only math (and punctuation) already is the span: kept with its delimiters
    ("The answer is $\\frac{1}{2}$.", "$\\frac{1}{2}$"),
    # two math segments: the span as is, never one of them picked
    ("The answer is $x = 2$ and $y = 3$.", "$x = 2$ and $y = 3$"),
    # prose that negates, hedges or adds a number or a letter: the span as is
    ("The answer is not $3$.", "not $3$"),
    ("The answer is either $3$ or something else.", "either $3$ or something else"),
    ("The answer is B, not $3$.", "B"),  # ", not X" ends the answer
    ("The answer is 2 times $\\pi$.", "2 times $\\pi$"),
    ("The answer is maybe $4$", "maybe $4$"),
    ("The answer is at least $3$.", "at least $3$"),
    ("The answer is the inverse of $M$.", "the inverse of $M$"),
    ("The answer is twice $x$.", "twice $x$"),
    ("The answer is $3$ squared.", "$3$ squared"),
    ("The answer is the square root of $9$.", "the square root of $9$"),
    ("答案可能是 $4$ 或 $5$", None),  # "the answer may be": no marker
]


ONE_SENTENCE = [
    # a whole reply that is one sentence around one math segment states that result
    ("Hence $y \\leq 7$ holds.", "y \\leq 7"),
    ("The equation of the circle is $(x+3)^2 + (y+3)^2 = 9$.", "(x+3)^2 + (y+3)^2 = 9"),
    ("So the distance from A to B is $8$ units, which is the answer.", "8"),
    ("The inequality reduces to $2 < x$, which is our answer.", "2 < x"),
    ("The roots are $3, 1, 2$.", "3, 1, 2"),
    # setting up, asking, hedging, two segments, two sentences, no segment: no answer
    ("Let $x$ be the side.", None),
    ("Consider $f(x)$.", None),
    ("We use $\\pi$ here.", None),
    ("Is it $5$?", None),
    ("So it is $5$ or $6$.", None),
    ("So $x$:", None),
    ("Option B gives $3$.", None),
    ("Thus the value of $k$ is $5$ and we are done.", None),
    ("We compute $x$ first. Then it is done.", None),
    ("so it must be 42", None),
    ("Hence $y \\leq 7$ holds.\nBut we check it again.", None),
    ("Answer: $\\boxed{\\frac{1}{2}$", None),
]


@pytest.mark.parametrize("text, expected", ONE_SENTENCE)
def test_a_reply_of_one_sentence_around_one_math_segment(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("text, expected", IN_A_SENTENCE)
def test_one_math_span_inside_a_sentence(text, expected):
    assert extract_answer(text) == expected


def test_negated_or_hedged_sentences_grade_as_no_answer():
    assert not is_equivalent(extract_answer("The answer is not $3$."), "3")
    assert not is_equivalent(extract_answer("The answer is maybe $4$"), "4")
    assert is_equivalent(extract_answer("The answer is: Hence $y \\leq 7$ holds."), "y \\le 7")


LONG_REASONING = (
    "First, the triangle has sides 3 and 4, so by Pythagoras the hypotenuse is $5$.\n"
    "Its area is $\\frac{1}{2} \\cdot 3 \\cdot 4 = 6$.\n"
    "So the perimeter is 3 + 4 + 5 = 12"
)

LAST_EXPRESSION = [
    # markers first, as in auto
    ("We get \\boxed{7} at the end, so $x = 3$", "7"),
    ("The answer is 4. So $x = 3$ there", "4"),
    ("<answer>B</answer> then $5$", "B"),
    # else the last math segment of the reply
    ("Its area is $\\frac{1}{2}$ and then the height is $h = 6$ in total.", "h = 6"),
    ("So the result is \\(\\sqrt{2}\\).\nDone, nothing else.", "\\sqrt{2}"),
    ("We conclude\n$$\n\\frac{5}{12}\n$$\nwhich is the probability.", "\\frac{5}{12}"),
    ("The side is \\[ 2\\sqrt{3} \\] long, by symmetry.", "2\\sqrt{3}"),
    ("So $x = 3$ or $x = -3$", "x = 3, x = -3"),
    # else the last number / math token of the last line
    (LONG_REASONING, "12"),
    ("We compare both.\nThe total is 1,250.5 dollars", "1,250.5"),
    ("Soucis : 2,74 $ a..", "2,74"),  # a decimal comma
    ("the number is not 10 which is 1,000.99€", "1,000.99"),  # "not" qualifies the 10
    ("It is maybe 5", None),
    ("Thus the ratio is \\frac{3}{4} overall", "\\frac{3}{4}"),
    ("Hence it is 40%", "40%"),
    # nothing mathematical, or a hedge on the last line: no answer
    ("We compare the two shapes and find them alike.", None),
    ("It is 3 or 4, hard to say", None),
    ("Is it 5?", None),
    ("It is 12 or so.\nDone", None),
]


@pytest.mark.parametrize("text, expected", LAST_EXPRESSION)
def test_last_expression_style(text, expected):
    assert extract_answer(text, style="last_expression") == expected


def test_long_reasoning_without_a_marker_is_still_no_answer_in_auto():
    assert "last_expression" in STYLES
    assert extract_answer(LONG_REASONING) is None


ADVERSARIAL = {
    "100,000 Chinese markers": "答案是" * 100_000,
    "100,000 choose markers": "故选" * 100_000,
    "100,000 dollars": "$" * 100_000,
    "100,000 open parens": "\\(" * 100_000,
    "100,000 display brackets": "\\[ 1 " * 100_000,
    "1 MB of numbers": "12 " * 300_000,
    "100,000 reasons": "the answer is D because " * 50_000,
    "100,000 option letters": "A. " * 100_000,
    "1 MB line of braces": "\\frac{" * 100_000,
    "100,000 French markers": "la réponse est " * 50_000,
}


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial_foreign_text_is_linear(name, style):
    started = time.perf_counter()
    result = extract_answer(ADVERSARIAL[name], style=style)
    assert time.perf_counter() - started < 2.0, name
    assert result is None or isinstance(result, str)
