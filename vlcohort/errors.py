"""The one base class of errors that stop a run with a message for people.

``vlcohort`` commands print such an error's message (no traceback) and exit 1; its
subclasses say where it came from: :class:`~vlcohort.recipes.driver.TrainingError` (the
run), :class:`~vlcohort.training.distributed.DistributedError` (a collective),
:class:`~vlcohort.training.checkpoint.CheckpointError` (a checkpoint). Config mistakes are
:class:`~vlcohort.typed_yaml.ConfigError` (exit 2). This module imports nothing, so the
command line can catch these without importing torch.
"""


class RunError(RuntimeError):
    """A run that cannot go on; the message names what failed and what to do."""
