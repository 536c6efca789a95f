"""Command line: ``vlcohort train | config | simulate | eval | diversity | plot | export | tiny | plan``.

Configs are YAML files plus ``key.sub=value`` overrides, given as ``--set key=value`` or
as bare ``key=value`` arguments::

    vlcohort train                                   # the embedded default
    vlcohort train configs/demo.yaml run.steps=5 --set grpo.clip_high=0.28
    vlcohort train --resume runs/demo run.steps=40    # continue (and extend) a run
    vlcohort config --set agents.1.max_tiles=6      # print the resolved config
    vlcohort plot runs/demo/co_rl runs/demo/ttrl --out dynamics.png
    vlcohort export runs/demo/co_rl --agent A --out exported/A   # merged, for vllm serve
"""

from __future__ import annotations

import argparse
import sys

from vlcohort.config import Config, field_docs, load_config, resolved_text, train_base
from vlcohort.errors import RunError
from vlcohort.run_folder import RunFolderError
from vlcohort.typed_yaml import ConfigError


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", help="YAML config file (default: the embedded default)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set run.steps=5 (repeatable)")
    p.add_argument("overrides", nargs="*", metavar="[CONFIG] KEY=VALUE",
                   help="a YAML config file (first, optional) and more overrides")


def _split_positional(config: str | None, positional: list[str]) -> tuple[str | None, list[str]]:
    """``vlcohort train CONFIG k=v ...``: a first positional without '=' is the config file."""
    if positional and "=" not in positional[0]:
        if config is not None:
            raise ConfigError(f"two config files given: --config {config} and {positional[0]}")
        return positional[0], positional[1:]
    return config, positional


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vlcohort", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="train a cohort (no arguments: the embedded default)")
    _add_config_args(p)
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue the run in RUN_DIR from its newest checkpoint (its saved "
                        "config, with any overrides given here)")
    p.add_argument("--overwrite", action="store_true",
                   help="start a new run in a folder that holds an earlier one, deleting "
                        "that run's files first (its config, metrics, checkpoints, plots; "
                        "nothing else there)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="keep third-party progress bars and known-harmless library warnings "
                        "(hidden by default; also VLCOHORT_VERBOSE=1)")
    p = sub.add_parser("config", help="print the resolved config and its derived totals")
    _add_config_args(p)
    p.add_argument("--fields", action="store_true", help="list every key with its meaning")
    p = sub.add_parser("simulate", help="the paper's theory through the real vote / reward / "
                       "advantage / loss code, with tabular softmax policies")
    from vlcohort.analysis.simulate import add_arguments

    add_arguments(p)
    p = sub.add_parser("eval", help="evaluate models on MathVista / MathVerse / MATH-Vision / "
                       "We-Math (or score saved responses: vlcohort eval score ...)")
    from vlcohort.eval.cli import add_arguments as add_eval_arguments

    add_eval_arguments(p)
    p = sub.add_parser("diversity", help="how correlated are models' errors? kappa / c / w / u "
                       "for every pair on problems with gold, and the best partner pair")
    from vlcohort.analysis.diversity import add_arguments as add_diversity_arguments

    add_diversity_arguments(p)
    p = sub.add_parser("plot", help="training-dynamics panels of one or more runs, one line "
                       "per run and agent")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR",
                   help="run folder (holding metrics.jsonl) or a metrics.jsonl file")
    p.add_argument("--out", required=True, metavar="FILE.png", help="where to write the plot")
    p = sub.add_parser("export", help="one trained agent of a run as a merged (LoRA folded "
                       "in) folder for from_pretrained / vllm serve / the hub")
    from vlcohort.export import add_arguments as add_export_arguments

    add_export_arguments(p)
    p = sub.add_parser("plan", help="will the cohort fit? GPU memory per agent and rank (weights, "
                       "ZeRO states, vLLM, activations), from the checkpoints' config.json alone")
    from vlcohort.plan import add_arguments as add_plan_arguments

    add_plan_arguments(p)
    p = sub.add_parser("tiny", help="build tiny offline models and print their folders")
    p.add_argument("names", nargs="*", help="tiny model names (default: all)")
    return parser


#: Commands that load or save models: their console is quieted (``vlcohort/console.py``).
MODEL_COMMANDS = ("train", "eval", "diversity", "export", "tiny")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The parsed command line. ``key=value`` overrides may also follow an option
    (``vlcohort train demo.yaml run.steps=5 --overwrite run.seed=2``): argparse alone
    takes positionals only before the first option of a subcommand."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command in ("train", "config", "plan") and all(
            "=" in a and not a.startswith("-") for a in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


#: Exit code when the reader of stdout went away (``vlcohort config --fields | head``):
#: 128 + SIGPIPE (13), what the shell reports for a program a closed pipe killed, so that
#: ``set -o pipefail`` treats ``vlcohort ... | head`` as it treats ``seq 1 100000 | head``.
#: Not 0: the command did not write all it had to (``train | head`` stops a training run).
EXIT_PIPE_CLOSED = 141


def pipe_reader_gone(fd: int) -> bool:
    """Whether ``fd`` is the writing end of a pipe (or socket) whose reader has closed.

    Asked of the file descriptor itself (``poll`` reports an error on it), so that a
    ``BrokenPipeError`` from any other pipe of a run (a worker, a sandbox) still surfaces
    with its traceback instead of passing for a closed stdout. Where ``poll`` is missing
    (Windows) the answer is yes, as in the usual recipe that catches every broken pipe."""
    import select

    if not hasattr(select, "poll"):
        return True
    poller = select.poll()
    try:
        poller.register(fd, select.POLLOUT)
        events = poller.poll(0)
    except (OSError, ValueError):  # fd already closed or not pollable
        return False
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in events)


def _silence_closed_streams() -> None:
    """Point stdout (and stderr, if its reader left too) at devnull, so that the flush of
    the buffered rest at interpreter exit writes nowhere instead of raising again."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        if fd == 1 or pipe_reader_gone(fd):
            os.dup2(devnull, fd)
    os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    """Every ``vlcohort`` command; a reader of stdout that closes early (``| head``) ends
    the command quietly with :data:`EXIT_PIPE_CLOSED`, no traceback."""
    try:
        code = _run_command(argv)
        sys.stdout.flush()  # a closed pipe shows here, inside the try, not at interpreter exit
        return code
    except BrokenPipeError:
        if not pipe_reader_gone(1):
            raise
        _silence_closed_streams()
        return EXIT_PIPE_CLOSED


def _run_command(argv: list[str] | None) -> int:
    args = parse_args(argv)
    if args.command in MODEL_COMMANDS:
        from vlcohort import console

        console.setup(getattr(args, "verbose", False))
    try:
        return COMMANDS[args.command](args)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    except RunFolderError as e:  # a run folder that cannot be used as asked: bad input
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RunError as e:  # a run that cannot go on: a message for people
        print(f"error: {e}", file=sys.stderr)
        return 1


def _train_or_config(args) -> int:
    """``vlcohort train`` and ``vlcohort config``: the resolved config from a recipe (or a
    run to resume) and overrides; ``config`` prints it (or the field docs), ``train`` runs it."""
    config_path, overrides = _split_positional(args.config, args.overrides)
    overrides = [*overrides, *args.sets]
    if getattr(args, "resume", None):
        from vlcohort.recipes.cohort import resume_config

        cfg = resume_config(args.resume, overrides)
    else:
        base, overrides, base_line = train_base(config_path, overrides)
        cfg = load_config(base, overrides)
        if not getattr(args, "fields", False):
            print(base_line)
    if args.command == "config":
        if args.fields:
            for key, default, doc in field_docs():
                print(f"{key} = {default}\n    {doc}")
        else:
            print(resolved_text(cfg))
        return 0
    return train(cfg, resume=args.resume, overwrite=args.overwrite, config_file=config_path)


def _simulate(args) -> int:
    from vlcohort.analysis.simulate import run

    return run(args)


def _eval(args) -> int:
    from vlcohort.eval.cli import run as eval_run

    return eval_run(args)


def _diversity(args) -> int:
    from vlcohort.analysis.diversity import run as diversity_run
    from vlcohort.run_folder import file_in_the_way

    if (blocker := file_in_the_way(args.out)) is not None:
        print(f"error: --out {args.out}: {blocker} is a file, not a folder; give a "
              "folder path for the report", file=sys.stderr)
        return 2
    return diversity_run(args)


def _plot(args) -> int:
    from vlcohort.analysis.plots import PlotError, PlotOutError, plot_runs

    try:
        print(f"plot: {plot_runs(args.runs, args.out)}")
    except PlotError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2 if isinstance(e, PlotOutError) else 1
    return 0


def _export(args) -> int:
    from vlcohort.export import run as export_run

    return export_run(args)


def _plan(args) -> int:
    from vlcohort.plan import run as plan_run

    return plan_run(args)


def _tiny(args) -> int:
    from vlcohort.processors.tiny import TINY_MODELS, tiny_model_path

    unknown = [n for n in args.names if n.removeprefix("tiny:") not in TINY_MODELS]
    if unknown:
        print(f"error: tiny model {unknown[0]!r}: no such name; known: "
              f"{', '.join(TINY_MODELS)} (or no name: all of them)", file=sys.stderr)
        return 2
    for name in [n.removeprefix("tiny:") for n in args.names] or list(TINY_MODELS):
        print(f"tiny:{name}\t{tiny_model_path('tiny:' + name)}")
    return 0


#: Each command's handler: parsed arguments -> exit code.
COMMANDS = {"train": _train_or_config, "config": _train_or_config, "simulate": _simulate,
            "eval": _eval, "diversity": _diversity, "plot": _plot, "export": _export,
            "tiny": _tiny, "plan": _plan}


def train(cfg: Config, resume: str | None = None, overwrite: bool = False,
          config_file: str | None = None) -> int:
    """``vlcohort train``: the method's recipe. ``method: self_play`` is a recipe of its own
    (challenger / solver phases); ``arms`` runs the cohort recipe once per method from
    shared warm-ups; every other method is the cohort recipe with its reward source.

    The run folder is locked before the recipe starts and, for a new run, checked under
    that lock: a folder holding an earlier run is refused unless ``overwrite``, which
    deletes only what a run marked as its own there (``.vlcohort-run``) and refuses an
    unmarked folder whole (``vlcohort/run_folder.py``). ``config_file``: the YAML
    file the config came from (its own run folder's ``config.yaml`` is no earlier run)."""
    from pathlib import Path

    from vlcohort.monitoring.trackers import check_trackers
    from vlcohort.preflight import preflight
    from vlcohort.run_header import config_summary
    from vlcohort.training.distributed import launched_rank, launched_world_size

    if resume is not None and overwrite:
        raise RunFolderError(f"--resume {resume} --overwrite: --resume continues that run, "
                             "--overwrite deletes it to start a new one; give one of them")
    logs = launched_world_size() == 1 or launched_rank() == 0  # the rank that logs and prints
    if logs:
        check_trackers(cfg.log)  # a tracker package missing: an error now, not after a build
    preflight(cfg)  # models and data findable, before anything is printed, built or trained

    if logs:  # the totals and the changed keys; the full resolved file is saved with the run
        print(config_summary(cfg, Path(resume or cfg.run.output_dir) / "config.yaml"))
    run_dir = Path(resume or cfg.run.output_dir)
    if not logs:
        return _recipe(cfg, resume)
    from vlcohort import run_folder, runlock

    runlock.acquire(run_folder.make_run_dir(run_dir))
    try:
        if resume is None:
            removed = run_folder.ready_for_new_run(run_dir, overwrite, config_file)
            if removed:
                print(f"--overwrite: removed the earlier run's {', '.join(removed)} from "
                      f"{run_dir}" + (f"; left in place, not the run's: {', '.join(removed.left)}"
                                      if removed.left else ""))
        return _recipe(cfg, resume)
    finally:
        runlock.release(run_dir)


def _recipe(cfg: Config, resume: str | None) -> int:
    """The recipe of ``cfg.method`` (see :func:`train`): a method that is a recipe of its
    own (``config_checks.RECIPES``), else the cohort recipe, once or per comparison arm."""
    import importlib

    from vlcohort.config_checks import RECIPES
    from vlcohort.recipes.driver import TrainingError

    if cfg.method in RECIPES:
        module, function = RECIPES[cfg.method].split(":")
        return getattr(importlib.import_module(module), function)(cfg, resume)
    if cfg.arms:
        if resume is not None:
            raise TrainingError("--resume takes one arm's folder (e.g. runs/demo/co_rl), not a "
                              "comparison run")
        from vlcohort.recipes.arms import run_arms

        return run_arms(cfg)
    from vlcohort.recipes.cohort import run_cohort

    return run_cohort(cfg, resume)


if __name__ == "__main__":
    sys.exit(main())
