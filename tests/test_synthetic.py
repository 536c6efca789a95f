"""The built-in synthetic dataset: deterministic, well-formed, and its gold matches the picture.

Gold is checked against the *pixels* wherever that is cheap (blob counts, dominant colour,
silhouette, bar heights, grid rows), not only against the generator's own record, so a
drawing bug cannot hide behind a consistent-looking meta.
"""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
from PIL import Image

from vlcohort.data.problems import LETTERS, Problem
from vlcohort.data.synthetic import (
    BACKGROUND,
    COLOURS,
    DEFAULT_TASKS,
    SHAPES,
    TASKS,
    make_dataset,
    make_problem,
)

MULTIPLE_CHOICE = ("compare_bars", "shape_colour", "shape_kind", "fg_colour", "bg_colour",
                   "top_colour", "bottom_colour")
FREE_FORM = ("count_shapes", "read_chart")


def pixels(problem: Problem) -> np.ndarray:
    (image,) = problem.images
    assert isinstance(image, Image.Image) and image.mode == "RGB"
    return np.asarray(image)  # [H, W, 3] uint8


def colour_mask(arr: np.ndarray, rgb) -> np.ndarray:
    return np.all(arr == np.array(rgb, dtype=np.uint8), axis=-1)  # [H, W] bool


def count_blobs(mask: np.ndarray) -> int:
    """Connected components (8-neighbour) of a boolean mask, by flood fill."""
    seen = np.zeros_like(mask)
    h, w = mask.shape
    blobs = 0
    for y0, x0 in zip(*np.nonzero(mask)):
        if seen[y0, x0]:
            continue
        blobs += 1
        stack = [(y0, x0)]
        seen[y0, x0] = True
        while stack:
            y, x = stack.pop()
            for dy in (-1, 0, 1):
                for dx in (-1, 0, 1):
                    v, u = y + dy, x + dx
                    if 0 <= v < h and 0 <= u < w and mask[v, u] and not seen[v, u]:
                        seen[v, u] = True
                        stack.append((v, u))
    return blobs


def silhouette(mask: np.ndarray) -> str:
    """Name the kind of the single shape in ``mask`` from a few probe points of its box."""
    ys, xs = np.nonzero(mask)
    y0, y1, x0, x1 = ys.min(), ys.max(), xs.min(), xs.max()

    def at(fx: float, fy: float) -> bool:
        return bool(mask[round(y0 + fy * (y1 - y0)), round(x0 + fx * (x1 - x0))])

    top_corners = at(0, 0) or at(1, 0)
    bottom_corners = at(0, 1) and at(1, 1)
    if top_corners and bottom_corners:
        return "square"
    if bottom_corners:
        return "triangle"
    return "circle" if at(0.2, 0.2) else "cross"


def gold_text(problem: Problem) -> str:
    return problem.options[LETTERS.index(problem.gold)]


# ---------------------------------------------------------------------------------------
# Determinism and shape of the dataset


def test_same_seed_same_problems_and_image_bytes():
    a = make_dataset(tuple(TASKS), n=25, seed=3)
    b = make_dataset(tuple(TASKS), n=25, seed=3)
    for p, q in zip(a, b):
        assert (p.id, p.text, p.options, p.gold, p.meta) == (q.id, q.text, q.options, q.gold,
                                                             q.meta)
        assert p.images[0].tobytes() == q.images[0].tobytes()


def test_different_seeds_differ():
    a = make_dataset(tuple(TASKS), n=25, seed=0)
    b = make_dataset(tuple(TASKS), n=25, seed=1)
    differing = sum(p.images[0].tobytes() != q.images[0].tobytes() for p, q in zip(a, b))
    assert differing >= 20


def test_a_problem_does_not_depend_on_the_rest_of_the_dataset():
    """Problem i is rebuilt alone from (task, i, seed): resume and sharding can rely on it."""
    data = make_dataset(n=9, seed=5)
    again = make_problem(data[7].meta["task"], 7, seed=5)
    assert again.images[0].tobytes() == data[7].images[0].tobytes()
    assert (again.id, again.gold, again.text) == (data[7].id, data[7].gold, data[7].text)


def test_round_robin_ids_meta_and_defaults():
    data = make_dataset(n=64, seed=2)
    assert len(data) == 64
    assert [p.meta["task"] for p in data[:6]] == list(DEFAULT_TASKS) * 2
    ids = [p.id for p in data]
    assert len(set(ids)) == len(ids)
    for i, p in enumerate(data):
        task = DEFAULT_TASKS[i % 3]
        assert p.id == f"synthetic-{task}-2-{i}"
        assert p.meta["task"] == task and p.meta["seed"] == 2 and p.meta["index"] == i
        assert p.source == "synthetic"
        assert len(p.images) == 1 and p.images[0].size == (56, 56)


def test_image_size_and_single_task_string():
    data = make_dataset("shape_colour", n=3, image_size=112)
    assert [p.meta["task"] for p in data] == ["shape_colour"] * 3
    assert all(p.images[0].size == (112, 112) for p in data)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"tasks": ("count_shapes", "nope")}, r"unknown synthetic task.*'nope'.*available: "
                                              r"count_shapes, compare_bars, read_chart"),
        ({"tasks": ()}, "available"),
        ({"n": -1}, "non-negative"),
        ({"image_size": 8}, "image_size"),
    ],
)
def test_bad_arguments_are_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_dataset(**kwargs)


# ---------------------------------------------------------------------------------------
# Form of questions and answers


def test_multiple_choice_and_free_form_gold_forms():
    data = make_dataset(tuple(TASKS), n=100, seed=4)
    for p in data:
        if p.meta["task"] in MULTIPLE_CHOICE:
            assert p.options and 2 <= len(p.options) <= 4
            assert len(set(p.options)) == len(p.options)
            assert p.gold in LETTERS[: len(p.options)]
            assert gold_text(p) == p.meta["answer_text"]
            for option in p.options:  # the adapters list options; the question must not
                assert option not in p.text.lower()
        else:
            assert p.options is None
            assert p.gold == str(int(p.gold)) and int(p.gold) > 0
        assert p.text.endswith("?")


@pytest.mark.parametrize("task", ["shape_colour", "shape_kind", "compare_bars", "fg_colour", "bg_colour"])
def test_gold_letter_is_balanced(task):
    data = make_dataset(task, n=400, seed=11)
    four = [p for p in data if len(p.options) == 4]
    assert len(four) >= 100
    shares = {k: v / len(four) for k, v in Counter(p.gold for p in four).items()}
    assert set(shares) == set("ABCD")
    assert all(0.15 <= s <= 0.35 for s in shares.values()), shares


# ---------------------------------------------------------------------------------------
# Gold matches the picture


def test_count_shapes_gold_matches_the_blobs_drawn():
    for p in make_dataset("count_shapes", n=12, seed=6):
        arr = pixels(p)
        shapes = p.meta["shapes"]
        assert count_blobs(~colour_mask(arr, BACKGROUND)) == len(shapes)
        assert int(p.gold) == sum(s["kind"] == p.meta["target"] for s in shapes)
        assert 1 <= int(p.gold) <= 6
        assert p.meta["target"] + ("es" if p.meta["target"] == "cross" else "s") in p.text
        for s in shapes:  # each recorded shape has its recorded kind and colour
            x0, y0, x1, y1 = s["box"]
            crop = colour_mask(arr, COLOURS[s["colour"]])[y0: y1 + 1, x0: x1 + 1]
            assert silhouette(crop) == s["kind"]


def test_count_shapes_covers_the_whole_range():
    golds = {p.gold for p in make_dataset("count_shapes", n=120, seed=0)}
    assert golds == {str(k) for k in range(1, 7)}


@pytest.mark.parametrize("size", [56, 112])
def test_shape_colour_gold_is_the_dominant_colour(size):
    for p in make_dataset("shape_colour", n=30, seed=8, image_size=size):
        arr = pixels(p).reshape(-1, 3)
        fg = arr[np.any(arr != np.array(BACKGROUND, dtype=np.uint8), axis=1)]
        dominant, n = Counter(map(tuple, fg)).most_common(1)[0]
        assert n == len(fg)  # one flat colour, no anti-aliased fringe
        assert COLOURS[gold_text(p)] == dominant
        assert n >= 0.15 * size * size  # a large shape (a triangle of side 0.6: 0.18)


@pytest.mark.parametrize("size", [56, 112])
def test_shape_kind_gold_is_the_silhouette_drawn(size):
    kinds = Counter()
    for p in make_dataset("shape_kind", n=40, seed=9, image_size=size):
        mask = ~colour_mask(pixels(p), BACKGROUND)
        assert silhouette(mask) == gold_text(p)
        assert sorted(p.options) == sorted(SHAPES)
        kinds[gold_text(p)] += 1
    assert set(kinds) == set(SHAPES)


def test_compare_bars_gold_is_the_tallest_bar_drawn():
    for p in make_dataset("compare_bars", n=30, seed=10):
        arr = pixels(p)
        heights = {name: int(colour_mask(arr, COLOURS[name]).any(axis=1).sum())
                   for name in p.options}
        assert all(h > 0 for h in heights.values())
        tallest = max(heights, key=heights.get)
        assert tallest == gold_text(p)
        runner_up = max(h for name, h in heights.items() if name != tallest)
        assert heights[tallest] - runner_up >= 3


def test_read_chart_gold_sits_on_its_grid_line():
    charts = Counter()
    for p in make_dataset("read_chart", n=40, seed=12):
        arr = pixels(p)
        step, tick_y = p.meta["tick_step"], p.meta["tick_y"]
        value = int(p.gold)
        assert value % step == 0 and step <= value <= step * (len(tick_y) - 1)
        assert p.meta["target"] in p.text
        mask = colour_mask(arr, COLOURS[p.meta["target"]])
        rows = np.nonzero(mask.any(axis=1))[0]
        if p.meta["chart"] == "bar":
            top = rows.min()  # bar top row is the grid row of its value
            assert "bar" in p.text
        else:
            top = round((rows.min() + rows.max()) / 2)  # the point is centred on the row
            assert "point" in p.text
        assert top == tick_y[value // step]
        charts[p.meta["chart"]] += 1
    assert set(charts) == {"bar", "line"}


def test_generators_are_pure_functions_of_their_rng():
    for name, generate in TASKS.items():
        a = generate(random.Random(1), 0)
        b = generate(random.Random(1), 0)
        assert a.images[0].tobytes() == b.images[0].tobytes() and a.gold == b.gold, name


def test_fg_and_bg_colour_gold_match_the_pixels():
    from vlcohort.data.synthetic import COLOURS, make_dataset

    for task in ("fg_colour", "bg_colour"):
        for p in make_dataset((task,), n=20, seed=5):
            image = p.images[0]
            x0, y0, x1, y1 = p.meta["box"]
            centre = image.getpixel(((x0 + x1) // 2, (y0 + y1) // 2 + (y1 - y0) // 4))
            corner = image.getpixel((0, 0))
            gold_name = p.options["ABCD".index(p.gold)]
            expected = centre if task == "fg_colour" else corner
            assert COLOURS[gold_name] == expected, (task, p.id)
            assert p.meta["colour"] != p.meta["background"]


def test_fixed_option_order():
    from vlcohort.data.synthetic import COLOURS, make_dataset

    data = make_dataset(("fg_colour", "shape_kind"), n=40, seed=2, shuffle_options=False)
    for p in data:
        if p.meta["task"] == "fg_colour":
            assert p.options == list(COLOURS)
        assert p.options[LETTERS.index(p.gold)] == p.meta["answer_text"]
    assert len({p.gold for p in data}) == 4  # letters still vary with the answer


def test_top_and_bottom_colour_gold_match_the_pixels():
    from vlcohort.data.synthetic import COLOURS, make_dataset

    for task, y in (("top_colour", 0), ("bottom_colour", -1)):
        for p in make_dataset((task,), n=20, seed=6):
            image = p.images[0]
            pixel = image.getpixel((image.width // 2, y % image.height))
            assert COLOURS[p.options[LETTERS.index(p.gold)]] == pixel, (task, p.id)
            assert p.meta["top"] != p.meta["bottom"]
