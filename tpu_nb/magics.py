"""IPython glue for every magic: `%%tpu_train`, `%%tpu_prepare`, `%tpu_info`, `%tpu_checkpoints`, `%tpu_runs`, `%tpu_release`,
`%tpu_picker`, `%tpu_selftest`.

The top floor of tpu_nb, above every room it calls: the kernel's, the
picker and the selftest (which both launch runs through the kernel, so glue
for their magics inside `kernel/` made the rooms import each other). Only
`load_ipython_extension` imports it, when `%load_ext tpu_nb` asks. Logic
lives in the modules it calls; `%%tpu_train`'s arguments are built from the
options' one declaration (`kernel.planning.declared_options`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from tpu_nb.kernel.endings.notebook_errors import magic_refused, refused
from tpu_nb.kernel.endings.run_ending import Ending
from tpu_nb.kernel.history.log import LOG_FILE, log_directory, read_log, records_named
from tpu_nb.kernel.history.view import passed_over_text, runs_chart, runs_html, runs_text
from tpu_nb.kernel.notebook.cell_output import write_to_sys
from tpu_nb.kernel.notebook.cell_source import cache_as_written, running_cell_number
from tpu_nb.kernel.notebook.returns import hand_back, hand_back_later
from tpu_nb.kernel.planning.checkpoint_plans import describe_checkpoints
from tpu_nb.kernel.planning.declared_options import Option, Surface, given, options_of
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.pod.cell_checks import PREPARE_MAGIC, check_names_recorded, not_plain_python, pod_program
from tpu_nb.kernel.pod.recording import RECORDED
from tpu_nb.kernel.pod.slice_checks import PodTarget
from tpu_nb.kernel.pod.starting import launch_pod, start_pod_in_background
from tpu_nb.kernel.run import warm_imports
from tpu_nb.kernel.run.background import BackgroundRun, start_in_background
from tpu_nb.kernel.run.followed_run import run_in_foreground
from tpu_nb.kernel.run.local_run import Run
from tpu_nb.kernel.tpu.release import TERM_GRACE, describe_release, release_tpu
from tpu_nb.kernel.tpu.torch_tpu_guard import keep_torch_tpu_out, let_torch_tpu_back
from tpu_nb.kernel.trials.sweep_result import SweepResult, hand_back_sweep
from tpu_nb.kernel.trials.sweep_start import check_sweep_options, plan_sweep, run_sweep
from tpu_nb.runtime import RuntimePanel, SystemView, detect
from tpu_nb.runtime.system import installed_version
from tpu_nb.wire.run_directory import Cell
from tpu_nb.workers.processes.programs import CellProgram, compile_cell

RUNS_MAGIC = "%tpu_runs"


def declared_arguments(surface: Surface) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The magic's arguments, one per option `surface` takes, from the options' declaration (`declared_options`)."""

    def add(magic: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options_of(surface)):  # the last decorator applied is the first argument
            magic = argument(option.flag, dest=option.name, **_parser_settings(option, surface))(magic)
        return magic

    return add


def _parser_settings(option: Option, surface: Surface) -> dict[str, Any]:
    """How argparse reads an option: a switch, a list, an optional value, or a typed value; its help as the magic spells it."""
    help_text = option.help_for(surface)
    if not (option.default is None or isinstance(option.default, bool) or option.default == ()):  # `in` takes 1 for True
        help_text += f" Default: {option.default}."
    settings: dict[str, Any] = {"help": help_text.replace("%", "%%")}  # argparse formats its help with %
    if option.kind is bool:
        settings["action"] = "store_false" if option.default else "store_true"
        if option.default:
            settings["help"] = "Turn off " + settings["help"][0].lower() + settings["help"][1:]
        return settings
    settings.update(default=option.default, metavar=option.metavar, choices=option.choices)
    if option.kind is list:
        settings.update(nargs="+", default=list(option.default))
    elif option.optional_value is not None:
        settings.update(nargs="?", const=option.optional_value)
    elif option.kind is not str:
        settings["type"] = option.kind
    if option.choices is not None:
        settings.pop("metavar")
    return settings


@magics_class
class TpuMagics(Magics):
    def __init__(self, shell: InteractiveShell) -> None:
        super().__init__(shell)
        self.last_checkpoints: str | None = None
        """The --checkpoint directory of the latest run: what `%tpu_checkpoints` lists by default."""

    @magic_arguments()
    @argument("directory", nargs="?", metavar="DIR", help="The checkpoint directory (default: the latest run's --checkpoint).")
    @line_magic
    def tpu_checkpoints(self, line: str) -> None:
        """List the checkpoints in DIR: step, time, loss, size, and whether each was verified.

        Guide: https://github.com/tpu-nb/tpu_nb/blob/main/docs/guides/checkpoints.md
        """
        args = parse_argstring(self.tpu_checkpoints, line)
        directory = args.directory or self.last_checkpoints
        if directory is None:
            raise magic_refused(
                "%tpu_checkpoints", "list any checkpoints", "name the checkpoint directory: no run in this kernel used --checkpoint yet."
            )
        text, markup = describe_checkpoints(directory)
        display({"text/plain": text, "text/html": markup}, raw=True)

    @magic_arguments()
    @argument("numbers", nargs="*", type=int, metavar="N", help="Overlay these runs' curves (numbers as the table shows them).")
    @argument("--last", type=int, default=20, metavar="K", help="List the K newest runs (default 20); the last 5 are overlaid.")
    @argument(
        "--metric",
        default="loss",
        metavar="NAME",
        help="Overlay this metric's curves beside the loss (e.g. eval_accuracy; tokens_per_second: each run's speed).",
    )
    @argument("--log", default=None, metavar="DIR", help="The run log's directory (default: TPU_NB_RUN_LOG, else tpu_nb_runs).")
    @line_magic
    def tpu_runs(self, line: str) -> None:
        """List the runs of this notebook's run log (each run's record, written when it ended) and overlay their curves.

        `%tpu_runs` lists the newest runs (with their tokens/s and MFU) and
        overlays the last five; `%tpu_runs 3 7 12` overlays those, so today's
        cells are compared without running them again; `--metric
        tokens_per_second` overlays their speed.

        Guide: https://github.com/tpu-nb/tpu_nb/blob/main/docs/guides/trials-and-run-log.md
        """
        args = parse_argstring(self.tpu_runs, line)
        if args.last < 1:
            raise magic_refused(RUNS_MAGIC, "list the runs", f"--last {args.last}: give how many of the newest runs to list, 1 or more.")
        directory = log_directory(args.log)
        if directory is None:
            raise magic_refused(RUNS_MAGIC, "list the runs", "the run log is off (TPU_NB_RUN_LOG=off): name its directory with --log DIR.")
        try:
            log = read_log(directory)
        except OSError as error:
            raise magic_refused(
                RUNS_MAGIC, "list the runs", f"{directory / LOG_FILE} cannot be read ({error}): name another log with --log DIR."
            ) from None
        records = log.records
        try:
            overlaid = records_named(records, args.numbers) if args.numbers else records[-5:]
        except KeyError as error:
            known = f"1 to {records[-1].number}" if records else "none yet"
            missing = ", ".join(map(str, error.args[0]))
            raise magic_refused(
                RUNS_MAGIC, "list the runs", f"{directory} has no run {missing} (its runs: {known}): name runs the table lists."
            ) from None
        listed = records[-args.last :]
        chart = runs_chart(overlaid, args.metric)
        display({"text/plain": runs_text(listed, args.metric), "text/html": runs_html(listed, args.metric, chart)}, raw=True)
        damage = passed_over_text(log, str(directory / LOG_FILE))
        if damage is not None:
            write_to_sys("stderr", damage + "\n")

    @magic_arguments()
    @line_magic
    def tpu_info(self, line: str) -> None:
        """Show this runtime: platform, TPU, devices, workers, versions, and problems with their fixes.

        Guide: https://github.com/tpu-nb/tpu_nb/blob/main/docs/guides/runtimes-and-versions.md
        """
        parse_argstring(self.tpu_info, line)
        display(RuntimePanel(detect()))

    @magic_arguments()
    @argument("pids", nargs="*", type=int, metavar="PID", help="Also end these holders, live ones included (as %%tpu_info lists them).")
    @argument("--all", action="store_true", help="End every holder this kernel may end, live ones included.")
    @argument("--dry-run", action="store_true", help="List the processes it would end, and end nothing.")
    @argument(
        "--grace",
        type=float,
        default=TERM_GRACE,
        metavar="SECONDS",
        help=f"How long each process gets to exit after SIGTERM before SIGKILL (default {TERM_GRACE:g}).",
    )
    @line_magic
    def tpu_release(self, line: str) -> None:
        """End the stale processes holding the TPU's device files (e.g. workers of an earlier kernel): SIGTERM, then SIGKILL.

        Stale: started from a notebook kernel that is gone (a fork of it, or
        anything a cell started). A live one (another notebook's kernel or
        run, a job started from a cell, one whose shell exited with nothing
        showing a notebook started it, such as `nohup python train.py &`
        over SSH) is listed with its parent, age and CPU use, and ended only
        when named (`%tpu_release PID`) or with --all. Never this kernel or a process it
        runs under, never another user's process, never this kernel's running
        run (stop it through its cell or handle). Says what it ended, and
        whether SIGKILL was needed.

        Guide: https://github.com/tpu-nb/tpu_nb/blob/main/docs/guides/watchdog-and-release.md
        """
        args = parse_argstring(self.tpu_release, line)
        if not args.grace >= 0:  # also refuses nan
            raise magic_refused(
                "%tpu_release",
                "end anything",
                f"--grace {args.grace:g}: give the seconds to wait after SIGTERM, 0 or more (default {TERM_GRACE:g}).",
            )
        if any(pid <= 0 for pid in args.pids):
            raise magic_refused("%tpu_release", "end anything", "PID ...: give the pids %tpu_info lists (positive numbers).")
        release = release_tpu(
            SystemView.current(), Run.alive(), named=tuple(args.pids), everything=args.all, dry_run=args.dry_run, grace=args.grace
        )
        text, markup = describe_release(release)
        display({"text/plain": text, "text/html": markup}, raw=True)

    @magic_arguments()
    @argument("--quick", action="store_true", help="Run the first few checks only: whether tpu_nb runs here at all.")
    @argument("--out", default=".", metavar="DIR", help="Where to write tpu_nb-selftest-<time>.json (default: the working directory).")
    @line_magic
    def tpu_selftest(self, line: str) -> None:
        """Check everything tpu_nb does on this machine's real device, each check a short run with its own time limit.

        Shows a table (check, result, figures, seconds) as it goes and writes
        tpu_nb-selftest-<time>.json (runtime, versions, every result, the
        failures' tracebacks, tpu_nb's log) to attach to a bug report. A check
        that cannot run here is skipped, saying why.

        Guide: https://github.com/tpu-nb/tpu_nb/blob/main/docs/guides/selftest.md
        """
        args = parse_argstring(self.tpu_selftest, line)
        from tpu_nb.selftest.report import report_problem

        problem = report_problem(args.out, f"--out {args.out}")
        if problem is not None:
            raise refused(problem, by="tpu_nb's selftest")  # now, not once the series ran: its report would be lost
        from tpu_nb.selftest import run  # the checks and their workloads load only when asked for
        from tpu_nb.selftest.series import CHECKS
        from tpu_nb.selftest.table import LiveTable

        titles = [f"{check.number}. {check.title}" for check in CHECKS if check.quick or not args.quick]
        table = LiveTable(titles, detect().label)
        report = run(quick=args.quick, out=None, observe=table.add)
        table.finish(report, str(report.write(args.out)))

    @magic_arguments()
    @line_magic
    def tpu_picker(self, line: str) -> Any:
        """Pick a task, model, dataset and hyperparameters; check them, preview the data, then insert a training cell or train now.

        Guide: https://github.com/tpu-nb/tpu_nb/blob/main/docs/guides/recipes-and-picker.md
        """
        parse_argstring(self.tpu_picker, line)
        from tpu_nb.picking import picker

        return picker(self.shell)

    @magic_arguments()
    @declared_arguments("cell")
    @cell_magic
    def tpu_train(self, line: str, cell: str) -> Any:
        """Run this cell on every TPU core (one XLA:CPU worker off-TPU), through xmp.spawn with fork.

        The workers see everything the notebook defined, plus `device`,
        `rank`, `world_size` and `report(step=..., loss=...)`. The value of
        the last line on rank 0 is the cell's result. The first interrupt
        stops the workers at the next step boundary (`report(...)` raises
        `StopTraining`; a Trainer stops and saves a checkpoint) and the
        trained model still comes back; a second interrupt stops at once.

        Guide: https://github.com/tpu-nb/tpu_nb/blob/main/docs/guides/train-cell.md
        Every option: https://github.com/tpu-nb/tpu_nb/blob/main/docs/reference/options.md
        """
        args = parse_argstring(self.tpu_train, line)
        if not args.name.isidentifier():
            raise refused(f"--name {args.name}: give a Python identifier to bind the run's handle to.")
        check_sweep_options(vars(args))
        if args.trials is not None:  # before the run's options: a sweep's checkpoints are planned per trial
            return self._sweep(args, line, cell)
        options = LaunchOptions.from_user(**given("cell", "run", vars(args)))
        if options.checkpoints is not None:
            self.last_checkpoints = options.checkpoints.directory
        if args.pod is not None:
            return self._train_on_pod(args, line, cell, options)
        program = self._compile(line, cell, tuple(args.returns))
        if args.background:
            finish = hand_back_later(self._shell.user_ns, program.return_names, args.name)
            return self._bound(args.name, start_in_background(program, options, args.name, finish))
        return hand_back(run_in_foreground(Run(program, options, "%%tpu_train")), self._shell.user_ns)

    @magic_arguments()
    @argument("--show", action="store_true", help="List the recorded cells.")
    @argument("--clear", action="store_true", help="Forget the recorded cells (a pod run then starts from its training cell).")
    @line_cell_magic
    def tpu_prepare(self, line: str, cell: str | None = None) -> None:
        """%%tpu_prepare: run this cell here as usual, and record it for pod runs (`%%tpu_train --pod`).

        Pod hosts cannot receive the notebook's state through fork: each runs
        the recorded cells (imports, data, model), in order, then the training
        cell. A cell run again replaces its earlier run. As a line magic:
        `%tpu_prepare --show` lists the recorded cells, `--clear` forgets them.

        Guide: https://github.com/tpu-nb/tpu_nb/blob/main/docs/guides/pod-slices.md
        """
        args = parse_argstring(self.tpu_prepare, line)
        if cell is None:
            if args.clear:
                RECORDED.clear()
            write_to_sys("stdout", RECORDED.describe() + "\n")
            return
        shell = self._shell
        problem = not_plain_python(PREPARE_MAGIC, cell, shell.transform_cell(cell))
        if problem is not None:
            raise magic_refused(PREPARE_MAGIC, "run the cell or record it", problem)
        name = f"In [{running_cell_number(shell)}]"
        result = shell.run_cell(cell, store_history=False)
        if not result.success:
            raise magic_refused(PREPARE_MAGIC, "record the cell for pod runs", "it failed (above): fix it and run it again.")
        cell_id = getattr(shell, "parent_header", {}).get("metadata", {}).get("cellId")
        RECORDED.record(Cell(name, f"{PREPARE_MAGIC} {line}".rstrip(), cell), cell_id)

    def _sweep(self, args: Any, line: str, cell: str) -> SweepResult:
        """`--trials`: the cell once per trial, side by side, a world of the host's chips each."""
        plan = plan_sweep(args.trials, args.cores_per_trial, args.trials_metric, self._shell.user_ns, args.n_trials, args.space)
        program = self._compile(line, cell, tuple(dict.fromkeys([*args.returns, *args.return_best])))
        result, held = run_sweep(
            plan,
            lambda trial: dataclasses.replace(program, given=MappingProxyType({"trial": dict(trial.values)})),
            given("cell", "run", vars(args)),
            "%%tpu_train --trials",
            returns=tuple(args.returns),
            return_best=tuple(args.return_best),
        )
        hand_back_sweep(result, held, self._shell.user_ns)
        return result

    def _train_on_pod(self, args: Any, line: str, cell: str, options: LaunchOptions) -> Any:
        shell = self._shell
        problem = not_plain_python("%%tpu_train --pod", cell, shell.transform_cell(cell))
        if problem is not None:
            raise refused(problem, pod=True)
        self._compile(line, cell, (), pod=True)  # a syntax error is shown as in any cell, and nothing starts
        name = f"In [{running_cell_number(shell)}]"
        check_names_recorded(RECORDED.cells(), Cell(name, "", cell), shell.user_ns)
        program = pod_program(RECORDED.cells(), name, line, cell, tuple(args.returns), options)
        pod_options = given("cell", "pod", vars(args))
        target = PodTarget(name=pod_options.pop("pod"), **pod_options)
        if args.background:
            finish = hand_back_later(shell.user_ns, program.return_names, args.name)
            handle = start_pod_in_background(program, target, options, args.name, finish)
            return self._bound(args.name, handle) if isinstance(handle, BackgroundRun) else None  # None: exported
        ending = launch_pod(program, target, options, f"%%tpu_train --pod {args.pod}")
        if not isinstance(ending, Ending):
            return None  # exported: the run directory and its commands were printed
        return hand_back(ending, shell.user_ns)

    def _bound(self, name: str, handle: BackgroundRun) -> BackgroundRun:
        """A background run's handle, bound to `name` in the notebook (and shown as the cell's result)."""
        self._shell.user_ns[name] = handle
        return handle

    @property
    def _shell(self) -> InteractiveShell:
        assert self.shell is not None, "tpu_nb's magics run only in a shell"
        return self.shell

    def _compile(self, line: str, cell: str, return_names: tuple[str, ...], *, pod: bool = False) -> CellProgram:
        shell = self._shell
        source = shell.transform_cell(cell)
        filename = cache_as_written(shell, line, cell)
        try:
            return compile_cell(source, filename, shell.user_ns, return_names, first_line=2)
        except SyntaxError as error:
            # Shown like a normal cell's syntax error, and nothing is started.
            shell.showsyntaxerror(filename)
            raise refused(f"the cell has a syntax error (line {error.lineno}), shown above: fix it.", pod=pod) from None


def load(ipython: InteractiveShell) -> None:
    note = keep_torch_tpu_out(os.environ, sys.modules, installed_version("torch-tpu") is not None)
    if note is not None:
        print(note, file=sys.stderr)
    ipython.register_magics(TpuMagics)


def unload(ipython: InteractiveShell) -> None:
    manager = ipython.magics_manager
    manager.magics["line"].pop("tpu_info", None)
    manager.magics["line"].pop("tpu_checkpoints", None)
    manager.magics["line"].pop("tpu_runs", None)
    manager.magics["line"].pop("tpu_release", None)
    manager.magics["line"].pop("tpu_picker", None)
    manager.magics["line"].pop("tpu_selftest", None)
    manager.magics["cell"].pop("tpu_train", None)
    manager.magics["line"].pop("tpu_prepare", None)
    manager.magics["cell"].pop("tpu_prepare", None)
    manager.registry.pop(TpuMagics.__name__, None)
    RECORDED.clear()  # the recorded cells go with the extension that recorded them
    warm_imports.cancel(ipython)  # its event handlers go with it too
    let_torch_tpu_back(os.environ)
