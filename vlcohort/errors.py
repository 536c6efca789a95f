"""The one base class of errors that stop a run with a message for people.

``vlcohort`` commands print such an error's message (no traceback) and exit 1; its
subclasses say where it came from: :class:`~vlcohort.recipes.driver.TrainingError` (the
run), :class:`~vlcohort.training.distributed.DistributedError` (a collective),
:class:`~vlcohort.training.checkpoint.CheckpointError` (a checkpoint). Config mistakes are
:class:`~vlcohort.typed_yaml.ConfigError` (exit 2). This module imports nothing, so the
command line can catch these without importing torch. :func:`json_error_text` words a
malformed JSON line the same way in every loader's message.
"""


class RunError(RuntimeError):
    """A run that cannot go on; the message names what failed and what to do."""


def json_error_text(e) -> str:
    """A ``json.JSONDecodeError``'s problem and column as one phrase for a message that
    already names the file and line: ``Expecting value at column 1``, ``Unterminated
    string starting at column 9``. Some of json's own messages end in "at" (its ``str(e)``
    adds the position), so a plain ``f"{e.msg} at column ..."`` would read "at at"; and
    ``str(e)`` counts lines of the text parsed, always line 1 for one JSONL line."""
    joint = " " if e.msg.endswith(" at") else " at "
    return f"{e.msg}{joint}column {e.colno}"
