"""Symbolic tier of math equivalence: math-verify behind an input screen and a time limit.

:mod:`vlcohort.answers.grading` tries the cheap tiers first (normalised keys, then numeric values
and probing in :mod:`vlcohort.answers.latex_eval`); what they cannot read or decide (``\\int``,
matrices, equations equal up to a factor) comes here. Symbolic comparison is slow (a
millisecond to a second) and some inputs make sympy run for minutes, so it is kept apart:
one guarded entry point, :func:`symbolic_equal`, whose results are cached
(``functools.lru_cache`` on the pair; :func:`clear_caches` forgets them). It imports
nothing from the rest of the package.

Time limit and threads
----------------------
math-verify's own timeouts use ``signal.alarm``, which works only in the main thread
(elsewhere it raises). We call it with its timeouts off and impose our own limit: in the
main thread a CPU-time timer (``setitimer(ITIMER_PROF)``, sub-second, restored
afterwards; CPU time so that a verdict does not depend on machine load) aborts the call; in
any other thread no signal can be used, so the limit there rests on an input screen that
refuses what is known to make sympy slow (long inputs, deep nesting, power towers, huge
exponents or factorials). Where the limit works the screen is looser: a slow
but bounded input (``\\frac{3^{1008}-1}{3^{1009}}``) is decided within the limit instead
of refused, and only what one uninterruptible C call could spend minutes on (towers,
exponents that multiply, 6-digit exponents) is still refused. A refused or timed-out
comparison counts as not equivalent.

>>> symbolic_equal("(x-1)(x+1)", "x^2-1", 1.0)
True
>>> symbolic_equal("1", "\\\\frac{1}{x}^{10^{10}}", 1.0)  # refused by the screen
False
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import signal
import sys
import threading
import time
from collections import OrderedDict
from typing import Callable, Iterator

__all__ = ["SYMBOLIC_MAX_CHARS", "budget_cut", "clear_caches", "close_budget", "open_budget", "run_with_time_limit",
           "shared_time_limit", "symbolic_equal"]

logger = logging.getLogger(__name__)

#: Inputs longer than this never reach sympy.
SYMBOLIC_MAX_CHARS = 200
_SYMBOLIC_MAX_DEPTH = 12

# Without a time limit (outside the main thread) the screen is all there is, so it refuses
# whatever may be slow: power towers, 4-digit exponents, 3-digit factorials.
_POWER_TOWER = re.compile(r"\^\s*\{[^{}]*\^|\^\s*\{?\s*-?\d{4,}|\^\s*\{?[^{}]*\d{3,}\s*!|\d{3,}\s*!|!\s*!")
# Under the CPU-time limit only what one C call may spend seconds on is refused (the
# limit's signal handler runs between bytecodes, not inside a big-integer power): power
# towers, exponents of 6+ digits, factorials of 5+ digits or inside an exponent, a large
# exponent that is not a plain literal (``2^{9999 \cdot 9999}``), and a large power
# raised again (``(2^{9999})^{9999}``): exponents that multiply. ``3^{1008}`` is
# milliseconds, so refusing it would turn a decidable pair into a silent "not equivalent".
_UNBOUNDED = re.compile(
    r"\^\s*\{[^{}]*\^|\^\s*\{?\s*-?\d{6,}|\d{5,}\s*!|!\s*!|\^\s*\{[^{}]*!"
    r"|\^\s*\{(?!\s*-?\d+\s*\})[^{}]*\d{3}"
)
_LARGE_EXPONENT = re.compile(r"\^\s*\{?\s*-?\d{3,}")
_POWER_OF_GROUP = re.compile(r"[)\]}]\s*\^")


class _SymbolicTimeout(BaseException):
    """Raised by our alarm; BaseException so math-verify's ``except Exception`` lets it out."""


def _symbolic_safe(key: str, limited: bool = False) -> bool:
    """Refuse inputs known to make sympy slow; the only guard outside the main thread.

    ``limited``: a CPU-time limit guards the call, so only inputs that can block inside
    one C call are refused (``_UNBOUNDED``), not those that are merely slow.

    >>> _symbolic_safe("\\\\frac{1}{x}^{10^{10}}"), _symbolic_safe("x^2+1")
    (False, True)
    >>> _symbolic_safe("3^{1009}"), _symbolic_safe("3^{1009}", limited=True)
    (False, True)
    """
    if len(key) > SYMBOLIC_MAX_CHARS:
        return False
    if limited:
        if _UNBOUNDED.search(key):
            return False
        if _LARGE_EXPONENT.search(key) and _POWER_OF_GROUP.search(key) and key.count("^") > 1:
            return False  # (2^{999})^{999}: the exponents multiply
    elif _POWER_TOWER.search(key):
        return False
    depth = deepest = 0
    for c in key:
        if c in "{([":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "})]":
            depth -= 1
    return deepest <= _SYMBOLIC_MAX_DEPTH


@functools.lru_cache(maxsize=1)
def _math_verify():
    """Import math-verify once; None (symbolic tier off) when it is not installed."""
    try:
        import math_verify
    except ImportError:  # pragma: no cover - math-verify is a dependency
        logger.warning("math-verify is not installed: symbolic equivalence is disabled")
        return None
    # We turn its timeouts off and impose ours, so its one-time "Timeout is disabled"
    # warning is noise; drop that message only, leaving the rest of its logging alone.
    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(_drop_timeout_disabled_warning)
    return math_verify


def _drop_timeout_disabled_warning(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Timeout is disabled")


def _as_latex(key: str) -> str:
    """A key as math-verify reads it best: inside ``$...$`` (bare LaTeX loses its LaTeX)."""
    key = re.sub(r"(?<!\\)%", r"\\%", key)
    return key if "$" in key or "\\boxed" in key else f"${key}$"


#: CPU seconds between repeated limit signals once a limit has passed.
_RETRY_TICK_S = 0.05


def run_with_time_limit(fn: Callable[[], bool], seconds: float) -> bool:
    """Run ``fn`` under a limit of ``seconds`` of this process's CPU time (SIGPROF), in the
    main thread; elsewhere run it unguarded. Past the limit: False.

    CPU time, not wall time: a verdict must not depend on how loaded the machine is (under
    load a 1 s wall-clock limit turned true equivalences into "not equivalent"), and
    sympy's slow cases are CPU-bound. SIGPROF also leaves SIGALRM timers (pytest-timeout)
    alone; an outer ITIMER_PROF timer is restored with its remaining time.

    Public: ``eval/scoring.py`` runs MathVision's official ``is_equal`` under the same limit.
    """
    return bool(_run_limited(fn, seconds))


_in_unraisable_hook = [False]


def _drop_own_timeouts(previous_hook, unraisable) -> None:
    """``sys.unraisablehook`` while a limit runs: our own timeout, raised where Python
    cannot propagate it (a ``__del__``, a gc callback), is expected and dropped silently;
    anything else goes to the hook that was there before. No tick may raise in here: a
    hook that formats the object (pytest's calls ``repr`` on a sympy expression, itself
    slow) would be cut short and report its own failure instead."""
    _in_unraisable_hook[0] = True
    try:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, _SymbolicTimeout):
            return
        previous_hook(unraisable)
    finally:
        _in_unraisable_hook[0] = False


def _run_limited(fn: Callable[[], bool], seconds: float) -> bool | None:
    """:func:`run_with_time_limit`, but None when the limit cut the call short."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return fn()

    armed = [True]

    def on_limit(signum, frame):
        if armed[0] and not _in_unraisable_hook[0]:
            raise _SymbolicTimeout

    previous_handler = signal.signal(signal.SIGPROF, on_limit)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = functools.partial(_drop_own_timeouts, previous_hook)
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_PROF, 0)
    limit = min(seconds, previous_delay) if previous_delay > 0 else seconds
    started = time.process_time()
    # The timer repeats past the limit: an exception raised while Python runs a gc
    # callback or a __del__ cannot propagate (it is dropped, see _drop_own_timeouts) and
    # sympy would go on (seen growing past 10 GB); the next tick raises again until one
    # lands in the call itself.
    signal.setitimer(signal.ITIMER_PROF, limit, _RETRY_TICK_S)
    try:
        try:
            return fn()
        finally:
            armed[0] = False
            signal.setitimer(signal.ITIMER_PROF, 0)
    except _SymbolicTimeout:
        logger.debug("symbolic comparison hit its %.2fs CPU limit", seconds)
        return None
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous_handler)
        sys.unraisablehook = previous_hook
        if previous_delay > 0:
            remaining = max(previous_delay - (time.process_time() - started), 1e-3)
            signal.setitimer(signal.ITIMER_PROF, remaining, previous_interval)


# The shared limit of one grading decision. Only the main thread has a time limit at all
# (elsewhere the screen guards), so the state is plain module globals, set and read in
# the main thread only: a grader opens it around every call, so it must cost nothing
# when no symbolic call follows (the clock starts at the first symbolic call).
_MAIN_IDENT = threading.main_thread().ident
_budget_open = False
_budget_deadline: float | None = None
_budget_was_cut = False


def open_budget() -> bool:
    """Open a shared limit for the calls that follow, in the main thread, unless one is
    open; True when this call opened it (and must :func:`close_budget` it)."""
    global _budget_open, _budget_deadline, _budget_was_cut
    if _budget_open or threading.get_ident() != _MAIN_IDENT:
        return False
    _budget_open, _budget_deadline, _budget_was_cut = True, None, False
    return True


def close_budget() -> None:
    """Close the shared limit that :func:`open_budget` opened."""
    global _budget_open, _budget_deadline
    _budget_open, _budget_deadline = False, None


@contextlib.contextmanager
def shared_time_limit() -> Iterator[None]:
    """Make every :func:`symbolic_equal` call inside share one time limit (the
    ``timeout_s`` of the first call), so one grading decision (an interval whose two ends
    each need sympy, an answer matched against eight options) costs at most one limit,
    not one per call. Nested uses keep the outermost limit. A call cut short by the
    shared limit is not cached (alone, with its own full limit, it might have been
    decided); :func:`budget_cut` tells the caller, whose own caches must skip the result
    too. Graders use :func:`open_budget` / :func:`close_budget` directly (cheaper).
    """
    opened = open_budget()
    try:
        yield
    finally:
        if opened:
            close_budget()


def budget_cut() -> bool:
    """Whether a symbolic call in the open shared limit was cut short by it."""
    return _budget_open and _budget_was_cut and threading.get_ident() == _MAIN_IDENT


def _time_limit_available() -> bool:
    """Whether :func:`run_with_time_limit` can bound a call here (main thread, setitimer)."""
    return threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")


def symbolic_equal(a: str, b: str, timeout_s: float) -> bool:
    """math-verify's ``verify(parse(a), parse(b))`` on two keys, screened and time-limited.

    Where the time limit works (the main thread) the screen is loose and the limit decides;
    elsewhere the strict screen refuses. Cached per pair and per kind of guard, so a
    refusal in a worker thread is never reused where the limit could have decided. Inside
    :func:`shared_time_limit` the call gets at most what is left of the shared limit.
    """
    limited = _time_limit_available()
    key = (a, b, timeout_s, limited)
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
        if cached is not None:
            _CACHE.move_to_end(key)
            return cached
    global _budget_deadline, _budget_was_cut
    seconds = timeout_s
    shared = limited and _budget_open
    if shared:
        now = time.process_time()
        if _budget_deadline is None:
            _budget_deadline = now + timeout_s  # the decision's first symbolic call starts the clock
        seconds = min(timeout_s, _budget_deadline - now)
        if seconds < _MIN_CALL_S:
            _budget_was_cut = True
            return False
    verdict = _symbolic_verdict(a, b, seconds, limited)
    if verdict is None and seconds < timeout_s:
        _budget_was_cut = True  # cut short by the shared limit: decided by nobody, not cached
        return False
    with _CACHE_LOCK:
        _CACHE[key] = bool(verdict)
        if len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return bool(verdict)


#: A call with less time than this left in a shared limit is not started.
_MIN_CALL_S = 0.02
_CACHE_SIZE = 1 << 15
_CACHE: OrderedDict[tuple[str, str, float, bool], bool] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def _symbolic_verdict(a: str, b: str, seconds: float, limited: bool) -> bool | None:
    """The comparison itself: True / False, or None when the time limit cut it short."""
    mv = _math_verify()
    if mv is None or not a or not b or not (_symbolic_safe(a, limited) and _symbolic_safe(b, limited)):
        return False

    def compare() -> bool:
        gold = mv.parse(_as_latex(a), parsing_timeout=None)
        pred = mv.parse(_as_latex(b), parsing_timeout=None)
        return bool(gold and pred and mv.verify(gold, pred, timeout_seconds=None))

    try:
        return _run_limited(compare, seconds)
    except Exception:  # math-verify swallows most errors itself; be sure
        logger.debug("symbolic comparison failed for %r vs %r", a, b, exc_info=True)
        return False


def clear_caches() -> None:
    """Forget every cached comparison (for benchmarks and tests)."""
    with _CACHE_LOCK:
        _CACHE.clear()
