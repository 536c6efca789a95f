"""A built-in synthetic multimodal dataset: questions about images drawn with PIL from a seed.

Why it exists: nothing can be downloaded here, yet the embedded demo of ``vlcohort train``
and the tests need image questions with known answers. Every image is drawn on the fly from
a seed, so the dataset ships as code (no files), is identical on every machine, and can be
as large as a run wants.

Why it looks the way it does: the demo trains tiny, randomly initialised vision-language
models on a CPU. At the default 56 x 56 px an image costs only a few tokens, so everything
is drawn large, flat and in saturated colours (no anti-aliasing, no gradients, a plain white
background) that a two-layer vision tower can tell apart. Digits on chart axes use a
built-in 3 x 5 pixel font, so the image bytes never depend on which fonts Pillow finds.

Task families (each a small pure function ``(rng, index, image_size) -> Problem``,
registered by name in :data:`TASKS`):

========================  ==============================================  ===============
name                      question                                        answer
========================  ==============================================  ===============
``count_shapes``          How many triangles are in the image?            free-form "4"
``compare_bars``          Which bar is the tallest?                       letter (2-4 op.)
``read_chart``            What is the value of the blue bar?              free-form "15"
``shape_colour``          What colour is the shape?                       letter (4 op.)
``shape_kind``            What kind of shape is shown?                    letter (4 op.)
========================  ==============================================  ===============

``shape_colour`` and ``shape_kind`` are the two skill families of the learning demo: one
big shape, so a tiny model can learn either in a few hundred supervised steps (colour
faster than kind), and the two are independent (colour and kind are drawn separately), so
an agent taught one has no head start on the other. ``read_chart`` is the hardest; its
axis digits are easier to read at ``image_size=112``.

Conventions every family keeps:

* Multiple choice: ``options`` are the option texts in letter order (A, B, ...), shuffled
  per problem from the rng so that the right letter is uniform over the letters (a model
  cannot score by always answering "A"); ``gold`` is the letter. The question text does not
  repeat the options: the adapters list them.
* Free-form: ``options`` is None and ``gold`` a plain integer string.
* ``meta`` holds ``task``, ``index`` and ``seed`` plus what was drawn (shapes and boxes,
  bar heights, axis geometry), so tests and metrics can check gold against the picture, and
  ``answer_text`` (the option text or the number). None of it is shown to a model.

>>> problems = make_dataset(n=3, seed=7)
>>> [p.meta["task"] for p in problems]
['count_shapes', 'compare_bars', 'read_chart']
>>> problems[0].id
'synthetic-count_shapes-7-0'
>>> problems[0].images[0].size
(56, 56)
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import replace

from PIL import Image, ImageDraw

from vlcohort.data.problems import LETTERS, Problem

__all__ = [
    "BACKGROUND",
    "COLOURS",
    "DEFAULT_IMAGE_SIZE",
    "DEFAULT_TASKS",
    "MIN_IMAGE_SIZE",
    "SHAPES",
    "TASKS",
    "compare_bars",
    "count_shapes",
    "make_dataset",
    "make_problem",
    "read_chart",
    "shape_colour",
    "shape_kind",
]

#: Default image side in pixels: 4 image tokens in the tiny models (14 px patches, 2x2 merge).
DEFAULT_IMAGE_SIZE = 56
#: Below this the 3x3 counting grid and the axis digits no longer fit.
MIN_IMAGE_SIZE = 32
#: The families ``make_dataset`` draws when none are named (the trainer demo's mix).
DEFAULT_TASKS = ("count_shapes", "compare_bars", "read_chart")

#: Colour names and their RGB values: saturated and far apart in every channel pair, so a
#: tiny vision tower separates them easily. Names are the answer texts.
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (230, 30, 30),
    "green": (30, 170, 50),
    "blue": (30, 70, 230),
    "yellow": (245, 205, 20),
}
#: Shape kinds. Their silhouettes differ a lot at low resolution (a star would look like a
#: circle at 14 px patches; a cross does not).
SHAPES = ("circle", "square", "triangle", "cross")
_PLURAL = {"circle": "circles", "square": "squares", "triangle": "triangles", "cross": "crosses"}

BACKGROUND = (255, 255, 255)
_GRID = (210, 210, 210)
_INK = (60, 60, 60)

Generator = Callable[..., Problem]


# ---------------------------------------------------------------------------------------
# Drawing helpers


def _canvas(size: int) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    image = Image.new("RGB", (size, size), BACKGROUND)
    return image, ImageDraw.Draw(image)


def _draw_shape(draw: ImageDraw.ImageDraw, kind: str, box: Sequence[int], fill) -> None:
    """Draw one filled shape inside ``box`` = (x0, y0, x1, y1), both corners inclusive.

    PIL fills polygons and ellipses without anti-aliasing, so every shape pixel has exactly
    ``fill``: the colour a question asks about is the only colour drawn.
    """
    x0, y0, x1, y1 = box
    if kind == "circle":
        draw.ellipse((x0, y0, x1, y1), fill=fill)
    elif kind == "square":
        draw.rectangle((x0, y0, x1, y1), fill=fill)
    elif kind == "triangle":
        draw.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=fill)
    elif kind == "cross":
        # Arms one third of the side wide, centred: a plus sign.
        w, h = x1 - x0 + 1, y1 - y0 + 1
        ax0, ax1 = x0 + round(w / 3), x0 + round(2 * w / 3) - 1
        ay0, ay1 = y0 + round(h / 3), y0 + round(2 * h / 3) - 1
        draw.rectangle((ax0, y0, ax1, y1), fill=fill)
        draw.rectangle((x0, ay0, x1, ay1), fill=fill)
    else:  # pragma: no cover - callers pick from SHAPES
        raise ValueError(f"unknown shape kind {kind!r}; known: {', '.join(SHAPES)}")


# A 3x5 pixel font for axis digits: drawn with rectangles, so it looks the same with every
# Pillow build (no FreeType, no font files) and stays crisp at 56 px.
_DIGITS = {
    "0": ("111", "101", "101", "101", "111"),
    "1": ("010", "110", "010", "010", "111"),
    "2": ("111", "001", "111", "100", "111"),
    "3": ("111", "001", "111", "001", "111"),
    "4": ("101", "101", "111", "001", "001"),
    "5": ("111", "100", "111", "001", "111"),
    "6": ("111", "100", "111", "101", "111"),
    "7": ("111", "001", "010", "010", "010"),
    "8": ("111", "101", "111", "101", "111"),
    "9": ("111", "101", "111", "001", "111"),
}


def _text_width(text: str, scale: int) -> int:
    return len(text) * 4 * scale - scale


def _draw_digits(draw: ImageDraw.ImageDraw, text: str, right: int, y_mid: int,
                 scale: int, fill) -> None:
    """Draw ``text`` (digits only) right-aligned at x=``right``, centred on row ``y_mid``."""
    x = right - _text_width(text, scale) + 1
    y = y_mid - (5 * scale) // 2
    for ch in text:
        for r, row in enumerate(_DIGITS[ch]):
            for c, bit in enumerate(row):
                if bit == "1":
                    px, py = x + c * scale, y + r * scale
                    draw.rectangle((px, py, px + scale - 1, py + scale - 1), fill=fill)
        x += 4 * scale


def _multiple_choice(rng: random.Random, right: str, others: Sequence[str]
                     ) -> tuple[list[str], str]:
    """Shuffle the right option among ``others``; return (options, gold letter).

    A uniform shuffle makes the gold letter uniform over the letters.
    """
    options = [right, *others]
    rng.shuffle(options)
    return options, LETTERS[options.index(right)]


def _check_size(image_size: int) -> None:
    if not isinstance(image_size, int) or isinstance(image_size, bool) \
            or image_size < MIN_IMAGE_SIZE:
        raise ValueError(
            f"image_size must be an integer >= {MIN_IMAGE_SIZE} (pixels per side), "
            f"got {image_size!r}"
        )


def _problem(task: str, index: int, text: str, image: Image.Image, gold: str,
             options: list[str] | None, **meta) -> Problem:
    answer_text = options[LETTERS.index(gold)] if options is not None else gold
    return Problem(
        id=f"synthetic-{task}-{index}",
        text=text,
        images=[image],
        options=options,
        gold=gold,
        source="synthetic",
        meta={"task": task, "index": index, "answer_text": answer_text, **meta},
    )


# ---------------------------------------------------------------------------------------
# Task families


def count_shapes(rng: random.Random, index: int,
                 image_size: int = DEFAULT_IMAGE_SIZE) -> Problem:
    """'How many <shape>s are in the image?': 1-6 target shapes, 0-2 of another kind.

    Shapes sit in distinct cells of a 3x3 grid with a margin, so they never touch: the
    answer is well defined and a test can count connected blobs. The distractors make the
    question about the *kind*, not just the number of blobs.
    """
    _check_size(image_size)
    size = image_size
    target = rng.choice(SHAPES)
    count = rng.randint(1, 6)
    n_distractors = rng.randint(0, min(2, 9 - count))
    kinds = [target] * count + [rng.choice([k for k in SHAPES if k != target])
                                for _ in range(n_distractors)]
    cells = rng.sample(range(9), len(kinds))
    edges = [round(i * size / 3) for i in range(4)]
    image, draw = _canvas(size)
    shapes = []
    for kind, cell in zip(kinds, cells):
        cx0, cx1 = edges[cell % 3], edges[cell % 3 + 1] - 1  # cell pixels, inclusive
        cy0, cy1 = edges[cell // 3], edges[cell // 3 + 1] - 1
        room = min(cx1 - cx0, cy1 - cy0) + 1 - 4  # keep 2 px clear on each side
        side = rng.randint(max(5, round(0.6 * room)), room)
        x0 = cx0 + 2 + rng.randint(0, cx1 - cx0 + 1 - 4 - side)
        y0 = cy0 + 2 + rng.randint(0, cy1 - cy0 + 1 - 4 - side)
        colour = rng.choice(list(COLOURS))
        box = [x0, y0, x0 + side - 1, y0 + side - 1]
        _draw_shape(draw, kind, box, COLOURS[colour])
        shapes.append({"kind": kind, "colour": colour, "box": box})
    return _problem(
        "count_shapes", index, f"How many {_PLURAL[target]} are in the image?", image,
        str(count), None, target=target, count=count, shapes=shapes,
    )


def compare_bars(rng: random.Random, index: int,
                 image_size: int = DEFAULT_IMAGE_SIZE) -> Problem:
    """'Which bar is the tallest?': 2-4 bars named by their colour; options are the names.

    The tallest bar beats the next by at least 15% of the plot height, so the answer is
    visible at 56 px.
    """
    _check_size(image_size)
    size = image_size
    n = rng.randint(2, 4)
    names = rng.sample(list(COLOURS), n)  # left to right
    margin = max(2, round(0.08 * size))
    baseline = size - margin  # the axis row; bars stand on it
    plot_h = baseline - margin
    gap = max(3, round(0.15 * plot_h))
    tallest = rng.randrange(n)
    h_max = rng.randint(round(0.6 * plot_h), plot_h)
    heights = [h_max if i == tallest else rng.randint(round(0.15 * plot_h), h_max - gap)
               for i in range(n)]
    image, draw = _canvas(size)
    slot = (size - 2 * margin) / n
    bars = []
    for i, (name, h) in enumerate(zip(names, heights)):
        x0 = round(margin + (i + 0.2) * slot)
        x1 = round(margin + (i + 0.8) * slot) - 1
        draw.rectangle((x0, baseline - h, x1, baseline - 1), fill=COLOURS[name])
        bars.append({"name": name, "height_px": h, "x": [x0, x1]})
    draw.line((margin, baseline, size - margin, baseline), fill=_INK, width=1)
    options, gold = _multiple_choice(rng, names[tallest], [m for m in names
                                                           if m != names[tallest]])
    return _problem("compare_bars", index, "Which bar is the tallest?", image, gold,
                    options, bars=bars)


def read_chart(rng: random.Random, index: int,
               image_size: int = DEFAULT_IMAGE_SIZE) -> Problem:
    """'What is the value of the <colour> bar/point?': a bar or line chart with a y-axis.

    The axis has 4-6 labelled ticks with a step of 1, 2, 5 or 10 and a light grid line at
    each tick; every value is a whole number of steps, so each bar top (or point centre)
    lies exactly on a grid line and the answer is read off the grid, never guessed.
    """
    _check_size(image_size)
    size = image_size
    scale = max(1, size // 56)  # font pixel size
    step = rng.choice((1, 2, 5, 10))
    n_ticks = rng.randint(4, 6)
    kind = rng.choice(("bar", "line"))
    n = rng.randint(2, 4)
    names = rng.sample(list(COLOURS), n)  # left to right
    values = [step * rng.randint(1, n_ticks) for _ in range(n)]
    target = rng.randrange(n)

    label_w = _text_width(str(step * n_ticks), scale)
    axis_x = label_w + 3 * scale + 1
    top = max(3 * scale, round(0.08 * size))
    bottom = size - top
    right = size - max(2, round(0.05 * size))
    tick_y = [bottom - round(j * (bottom - top) / n_ticks) for j in range(n_ticks + 1)]

    image, draw = _canvas(size)
    for j, y in enumerate(tick_y):
        if j:
            draw.line((axis_x + 1, y, right, y), fill=_GRID)
        draw.line((axis_x - scale, y, axis_x, y), fill=_INK)
        _draw_digits(draw, str(j * step), axis_x - 2 * scale - 1, y, scale, _INK)
    slot = (right - axis_x) / n
    centres = [round(axis_x + (i + 0.5) * slot) for i in range(n)]
    value_y = [tick_y[v // step] for v in values]
    series = []
    if kind == "bar":
        for i, (name, y) in enumerate(zip(names, value_y)):
            x0 = round(axis_x + (i + 0.2) * slot)
            x1 = round(axis_x + (i + 0.8) * slot) - 1
            draw.rectangle((x0, y, x1, bottom - 1), fill=COLOURS[name])
    else:
        r = max(2, round(0.04 * size))
        draw.line(list(zip(centres, value_y)), fill=_INK, width=scale)
        for name, x, y in zip(names, centres, value_y):
            draw.ellipse((x - r, y - r, x + r, y + r), fill=COLOURS[name])
    for name, value, x, y in zip(names, values, centres, value_y):
        series.append({"name": name, "value": value, "x": x, "y": y})
    draw.line((axis_x, top - scale, axis_x, bottom), fill=_INK)  # y-axis
    draw.line((axis_x, bottom, right, bottom), fill=_INK)  # x-axis
    noun = "bar" if kind == "bar" else "point"
    return _problem(
        "read_chart", index, f"What is the value of the {names[target]} {noun}?", image,
        str(values[target]), None, chart=kind, target=names[target], series=series,
        tick_step=step, tick_y=tick_y,
    )


def _one_big_shape(rng: random.Random, size: int, kind: str,
                   colour: str) -> tuple[Image.Image, list[int]]:
    """One shape filling 60-80% of the side, at a random position, on plain white."""
    side = rng.randint(round(0.6 * size), round(0.8 * size))
    x0 = rng.randint(2, size - 2 - side)
    y0 = rng.randint(2, size - 2 - side)
    box = [x0, y0, x0 + side - 1, y0 + side - 1]
    image, draw = _canvas(size)
    _draw_shape(draw, kind, box, COLOURS[colour])
    return image, box


def _white_shape(rng: random.Random, size: int) -> tuple[Image.Image, dict]:
    """A colour and a kind drawn independently, as one large shape on white: the picture
    both ``shape_colour`` and ``shape_kind`` ask about."""
    colour, kind = rng.choice(list(COLOURS)), rng.choice(SHAPES)
    image, box = _one_big_shape(rng, size, kind, colour)
    return image, {"colour": colour, "kind": kind, "box": box}


def _ask(task: str, question: str, picture: Callable, field: str, choices: Sequence[str],
         rng: random.Random, index: int, image_size: int) -> Problem:
    """A multiple-choice question about one attribute of a drawn picture: draw it, offer
    ``choices``, gold = the value ``picture`` recorded under ``field``."""
    _check_size(image_size)
    image, drawn = picture(rng, image_size)
    options, gold = _multiple_choice(rng, drawn[field], [c for c in choices if c != drawn[field]])
    return _problem(task, index, question, image, gold, options, **drawn)


def shape_colour(rng: random.Random, index: int,
                 image_size: int = DEFAULT_IMAGE_SIZE) -> Problem:
    """'What colour is the shape?': one large shape; options are the four colour names.

    The kind is drawn independently of the colour, so knowing kinds does not help here.
    """
    return _ask("shape_colour", "What colour is the shape?", _white_shape, "colour", COLOURS,
                rng, index, image_size)


def shape_kind(rng: random.Random, index: int,
               image_size: int = DEFAULT_IMAGE_SIZE) -> Problem:
    """'What kind of shape is shown?': one large shape; options are the four kinds.

    The colour is drawn independently of the kind, so knowing colours does not help here.
    """
    return _ask("shape_kind", "What kind of shape is shown?", _white_shape, "kind", SHAPES,
                rng, index, image_size)


def _shape_on_colour(rng: random.Random, size: int) -> tuple[Image.Image, dict]:
    """A shape of one colour, 40-60% of the side, near the centre, on a background of
    another colour: the one picture both ``fg_colour`` and ``bg_colour`` ask about."""
    ground, figure = rng.sample(list(COLOURS), 2)
    kind = rng.choice(SHAPES)
    side = rng.randint(round(0.4 * size), round(0.6 * size))
    jitter = max(1, size // 14)
    x0 = (size - side) // 2 + rng.randint(-jitter, jitter)
    y0 = (size - side) // 2 + rng.randint(-jitter, jitter)
    box = [x0, y0, x0 + side - 1, y0 + side - 1]
    image = Image.new("RGB", (size, size), COLOURS[ground])
    _draw_shape(ImageDraw.Draw(image), kind, box, COLOURS[figure])
    return image, {"colour": figure, "background": ground, "kind": kind, "box": box}


def fg_colour(rng: random.Random, index: int,
              image_size: int = DEFAULT_IMAGE_SIZE) -> Problem:
    """'What colour is the shape?' about a shape on a *coloured* background.

    With ``bg_colour`` it forms the learning demo's two complementary skill families:
    the same pictures, two questions, so one skill does not give away the other (on
    white backgrounds "the dominant colour" would answer both).
    """
    return _ask("fg_colour", "What colour is the shape?", _shape_on_colour, "colour", COLOURS,
                rng, index, image_size)


def bg_colour(rng: random.Random, index: int,
              image_size: int = DEFAULT_IMAGE_SIZE) -> Problem:
    """'What is the background colour?' on the pictures of ``fg_colour``."""
    return _ask("bg_colour", "What is the background colour?", _shape_on_colour, "background",
                COLOURS, rng, index, image_size)


def _two_bands(rng: random.Random, size: int) -> tuple[Image.Image, dict]:
    """Top band one colour, bottom band another (split near the middle): the one picture
    both ``top_colour`` and ``bottom_colour`` ask about."""
    top, bottom = rng.sample(list(COLOURS), 2)
    split = size // 2 + rng.randint(-(size // 14), size // 14)
    image = Image.new("RGB", (size, size), COLOURS[top])
    ImageDraw.Draw(image).rectangle((0, split, size - 1, size - 1), fill=COLOURS[bottom])
    return image, {"top": top, "bottom": bottom, "split": split}


def top_colour(rng: random.Random, index: int,
               image_size: int = DEFAULT_IMAGE_SIZE) -> Problem:
    """'What colour is the top half?' of a two-band picture.

    With ``bottom_colour`` it is the learning demo's pair of complementary skill families:
    the same pictures, two questions, equally easy for a tiny vision tower, and knowing
    one gives nothing about the other (the two colours are drawn independently).
    """
    return _ask("top_colour", "What colour is the top half?", _two_bands, "top", COLOURS,
                rng, index, image_size)


def bottom_colour(rng: random.Random, index: int,
                  image_size: int = DEFAULT_IMAGE_SIZE) -> Problem:
    """'What colour is the bottom half?' of the pictures of ``top_colour``."""
    return _ask("bottom_colour", "What colour is the bottom half?", _two_bands, "bottom", COLOURS,
                rng, index, image_size)


#: Task families by name. Each maps ``(rng, index, image_size)`` to a :class:`Problem`.
TASKS: dict[str, Generator] = {
    "count_shapes": count_shapes,
    "compare_bars": compare_bars,
    "read_chart": read_chart,
    "shape_colour": shape_colour,
    "shape_kind": shape_kind,
    "fg_colour": fg_colour,
    "bg_colour": bg_colour,
    "top_colour": top_colour,
    "bottom_colour": bottom_colour,
}


# ---------------------------------------------------------------------------------------
# Datasets


def _check_tasks(tasks: Sequence[str] | str) -> tuple[str, ...]:
    # A bare string is one task name, not a sequence of one-letter names.
    names = (tasks,) if isinstance(tasks, str) else tuple(tasks)
    if not names:
        raise ValueError(f"no synthetic task named; available: {', '.join(TASKS)}")
    unknown = [t for t in names if t not in TASKS]
    if unknown:
        raise ValueError(
            f"unknown synthetic task(s) {', '.join(map(repr, unknown))}; "
            f"available: {', '.join(TASKS)}"
        )
    return names


def _canonical_order(problem: Problem) -> Problem:
    """Options in a fixed order (colours as in :data:`COLOURS`, kinds as in :data:`SHAPES`),
    gold letter recomputed. With fixed options a letter always means the same colour /
    kind, so answering is plain classification; with shuffled options a model must also
    match the option texts in the prompt, which tiny models learn far more slowly."""
    if not problem.options:
        return problem
    rank = {name: i for i, name in enumerate([*COLOURS, *SHAPES])}
    options = sorted(problem.options, key=lambda o: rank.get(o, len(rank)))
    gold = LETTERS[options.index(problem.meta["answer_text"])]
    return replace(problem, options=options, gold=gold)


def make_problem(task: str, index: int, seed: int = 0,
                 image_size: int = DEFAULT_IMAGE_SIZE, shuffle_options: bool = True) -> Problem:
    """Problem ``index`` of family ``task`` for ``seed``; id ``synthetic-<task>-<seed>-<index>``.

    Each problem gets its own rng, seeded from (seed, task, index) as a string (hashed with
    SHA-512 by :mod:`random`, so independent of ``PYTHONHASHSEED``): a problem is the same
    whatever else is in the dataset, and any one can be rebuilt alone from its meta.
    """
    (task,) = _check_tasks((task,))
    rng = random.Random(f"vlcohort.synthetic/{seed}/{task}/{index}")
    problem = TASKS[task](rng, index, image_size=image_size)
    if not shuffle_options:
        problem = _canonical_order(problem)
    return replace(problem, id=f"synthetic-{task}-{seed}-{index}",
                   meta={**problem.meta, "seed": seed})


def make_dataset(tasks: Sequence[str] | str = DEFAULT_TASKS, n: int = 64, seed: int = 0,
                 image_size: int = DEFAULT_IMAGE_SIZE, shuffle_options: bool = True) -> list[Problem]:
    """``n`` problems cycling through ``tasks`` round-robin (problem i is ``tasks[i % k]``).

    Deterministic: the same arguments give identical problems and identical image bytes;
    another seed gives other problems. Round-robin interleaving keeps every family equally
    represented in any prefix, so a short run or a small batch still sees all of them.

    Raises:
        ValueError: an unknown task name (the message lists the available ones), an empty
            ``tasks``, a negative ``n`` or an ``image_size`` below :data:`MIN_IMAGE_SIZE`.
    """
    names = _check_tasks(tasks)
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n must be a non-negative integer (number of problems), got {n!r}")
    _check_size(image_size)
    return [make_problem(names[i % len(names)], i, seed=seed, image_size=image_size,
                         shuffle_options=shuffle_options) for i in range(n)]
