"""IPython glue: `%tpu_info` and `%%tpu_train`. Logic lives in the modules it calls."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from tpu_nb.runtime import RuntimePanel, detect
from tpu_nb.wire.mesh import MeshError, MeshShape
from tpu_nb.workers.host import Cell
from tpu_nb.workers.programs import CellProgram, compile_cell

from .background import BackgroundRun, Finish, Handback, start_in_background
from .cell_names import cache_as_written, running_cell_number
from .cells import AppliedReturns, apply_returns, bindings
from .endings import Ending
from .options import LaunchOptions
from .output import Write, write_to_sys
from .pod.cells import PREPARE_MAGIC, check_names_recorded, check_plain_python, pod_program
from .pod.launching import BACKENDS, DEFAULT_RUNS_DIR, PodTarget, launch_pod, start_pod_in_background
from .pod.recording import PreparedCells
from .runs import Run, run_in_foreground


@magics_class
class TpuMagics(Magics):
    def __init__(self, shell: InteractiveShell) -> None:
        super().__init__(shell)
        self.prepared = PreparedCells()
        """The %%tpu_prepare cells run so far: the start of every pod run's program."""

    @magic_arguments()
    @line_magic
    def tpu_info(self, line: str) -> None:
        """Show this runtime: platform, TPU, devices, workers, versions, and problems with their fixes."""
        parse_argstring(self.tpu_info, line)
        display(RuntimePanel(detect()))

    @magic_arguments()
    @line_magic
    def tpu_picker(self, line: str) -> Any:
        """Pick a task, model, dataset and hyperparameters; check them, preview the data, then insert a training cell or train now."""
        parse_argstring(self.tpu_picker, line)
        from tpu_nb.picking import picker

        return picker(self.shell)

    @magic_arguments()
    @argument("--cores", type=int, metavar="N", help="Use N XLA devices instead of all of them.")
    @argument("--timeout", type=float, metavar="SECONDS", help="Stop every worker after SECONDS, like an interrupt.")
    @argument(
        "--return",
        dest="return_names",
        nargs="+",
        default=[],
        metavar="NAME",
        help="Copy these variables from rank 0 into the notebook afterwards; "
        "a torch module already in the notebook is updated in place with the trained weights.",
    )
    @argument("--all-ranks-output", action="store_true", help="Show what every rank prints, prefixed with its rank.")
    @argument("--no-progress", action="store_true", help="Do not show the live progress display.")
    @argument(
        "--stop-grace",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="After an interrupt (or .stop()), wait this long for the workers to reach a step boundary "
        "before terminating them (default 5).",
    )
    @argument(
        "--spmd",
        action="store_true",
        help="One worker drives every device and the compiler shards the program (FSDPv2): for models too big for one core. "
        "The cell also gets `mesh`; an unchanged Trainer shards its parameters along the mesh's fsdp axis.",
    )
    @argument("--mesh", metavar="AXES", help="With --spmd: the device mesh, e.g. fsdp=4,tensor=2 (default: every device on fsdp).")
    @argument(
        "--no-doctor",
        action="store_true",
        help="Turn the XLA doctor off (compilation causes and places, host syncs, CPU fallbacks, input waits).",
    )
    @argument(
        "--compile-cache",
        metavar="DIR",
        help="Keep XLA's compiled programs in DIR (one subdirectory per rank), so a rerun skips compiling; "
        "'off' for none (default: a working directory on Colab's and Kaggle's TPUs).",
    )
    @argument(
        "--pod",
        metavar="NAME",
        help="Run on a TPU pod slice instead: the %%%%tpu_prepare cells and this one become train.py, started on every host. "
        "NAME is the TPU VM (gcloud) or the JobSet's name (GKE).",
    )
    @argument(
        "--backend", choices=BACKENDS, default="auto", help="With --pod: gcloud, gke or export (default: gke with --image, else gcloud)."
    )
    @argument("--zone", help="With --pod: the TPU VM's zone (default: gcloud's configured zone).")
    @argument("--project", help="With --pod: the Google Cloud project (default: gcloud's configured project).")
    @argument("--accelerator", metavar="TYPE", help="With --pod on GKE or export: the slice, e.g. v5litepod-16.")
    @argument("--image", help="With --pod on GKE: the container image with torch, torch_xla and your cells' libraries.")
    @argument(
        "--run-dir",
        default=DEFAULT_RUNS_DIR,
        metavar="DIR",
        help=f"With --pod: where each run's directory is written: a local directory (default {DEFAULT_RUNS_DIR}) or gs://BUCKET/PATH.",
    )
    @argument("--namespace", default="default", help="With --pod on GKE: the Kubernetes namespace.")
    @argument(
        "--pod-kill-stale",
        action="store_true",
        help="With --pod: end a tpu_nb run still running on the slice (left by a kernel that died) instead of refusing to start.",
    )
    @argument("--background", action="store_true", help="Return at once with a run handle; the notebook stays free while it trains.")
    @argument("--name", default="run", metavar="NAME", help="With --background: bind the run's handle to NAME (default: run).")
    @cell_magic
    def tpu_train(self, line: str, cell: str) -> Any:
        """Run this cell on every TPU core (one XLA:CPU worker off-TPU), through xmp.spawn with fork.

        The workers see everything the notebook defined, plus `device`,
        `rank`, `world_size` and `report(step=..., loss=...)`. The value of
        the last line on rank 0 is the cell's result. The first interrupt
        stops the workers at the next step boundary (`report(...)` raises
        `StopTraining`; a Trainer stops and saves a checkpoint) and the
        trained model still comes back; a second interrupt stops at once.
        """
        args = parse_argstring(self.tpu_train, line)
        if not args.name.isidentifier():
            raise UsageError(f"--name {args.name}: give a Python identifier to bind the run's handle to.")
        try:
            mesh = None if args.mesh is None else MeshShape.parse(args.mesh)
        except MeshError as error:
            raise UsageError(str(error)) from None
        options = LaunchOptions(
            cores=args.cores,
            timeout=args.timeout,
            all_ranks_output=args.all_ranks_output,
            progress=not args.no_progress,
            stop_grace=args.stop_grace,
            spmd=args.spmd,
            mesh=mesh,
            doctor=not args.no_doctor,
            compile_cache=args.compile_cache,
        )
        if args.pod is not None:
            return self._train_on_pod(args, line, cell, options)
        program = self._compile(line, cell, tuple(args.return_names))
        if args.background:
            return self._start_in_background(program, options, args.name)
        ending = run_in_foreground(Run(program, options, "%%tpu_train"))
        if ending.error is not None:
            raise ending.error
        result = ending.results[0]
        problem = report_returns(apply_returns(result, self._shell.user_ns), write_to_sys)
        if problem is not None:
            raise problem
        return result.value if result.has_value else None

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
        """
        args = parse_argstring(self.tpu_prepare, line)
        if cell is None:
            if args.clear:
                self.prepared.clear()
            write_to_sys("stdout", self.prepared.describe() + "\n")
            return
        shell = self._shell
        check_plain_python(PREPARE_MAGIC, cell, shell.transform_cell(cell))
        name = f"In [{running_cell_number(shell)}]"
        result = shell.run_cell(cell, store_history=False)
        if not result.success:
            raise UsageError(f"{PREPARE_MAGIC}: the cell failed (above), so it was not recorded for pod runs.")
        cell_id = getattr(shell, "parent_header", {}).get("metadata", {}).get("cellId")
        self.prepared.record(Cell(name, f"{PREPARE_MAGIC} {line}".rstrip(), cell), cell_id)

    def _train_on_pod(self, args: Any, line: str, cell: str, options: LaunchOptions) -> Any:
        shell = self._shell
        check_plain_python("%%tpu_train --pod", cell, shell.transform_cell(cell))
        self._compile(line, cell, ())  # a syntax error is shown as in any cell, and nothing starts
        name = f"In [{running_cell_number(shell)}]"
        check_names_recorded(self.prepared.cells(), Cell(name, "", cell), shell.user_ns)
        program = pod_program(
            self.prepared, name, line, cell, tuple(args.return_names), options.spmd, options.mesh, options.doctor, options.compile_cache
        )
        target = PodTarget(
            args.pod, args.backend, args.zone, args.project, args.accelerator, args.image, args.run_dir, args.namespace, args.pod_kill_stale
        )
        if args.background:
            handle = start_pod_in_background(
                program, target, options, args.name, self._finish_in_background(program.return_names, args.name)
            )
            if isinstance(handle, BackgroundRun):
                shell.user_ns[args.name] = handle
                return handle
            return None  # exported
        ending = launch_pod(program, target, options, f"%%tpu_train --pod {args.pod}")
        if not isinstance(ending, Ending):
            return None  # exported: the run directory and its commands were printed
        if ending.error is not None:
            raise ending.error
        result = ending.results[0]
        problem = report_returns(apply_returns(result, shell.user_ns), write_to_sys)
        if problem is not None:
            raise problem
        return result.value if result.has_value else None

    def _start_in_background(self, program: CellProgram, options: LaunchOptions, name: str) -> BackgroundRun:
        handle = start_in_background(program, options, name, self._finish_in_background(program.return_names, name))
        self._shell.user_ns[name] = handle
        return handle

    def _finish_in_background(self, return_names: tuple[str, ...], name: str) -> Finish:
        """How a background run's `--return` values reach the notebook: not over a name the user rebound meanwhile."""
        namespace = self._shell.user_ns
        launched_with = bindings(namespace, return_names)

        def finish(ending: Ending, write: Write) -> Handback:
            result = ending.results[0]
            applied = apply_returns(result, namespace, unless_rebound=launched_with)
            for kept in applied.kept:
                write(
                    "stderr",
                    f"tpu_nb: kept your `{kept}`: it was rebound while `{name}` ran. The trained value is in {name}.returned[{kept!r}].\n",
                )
            problem = report_returns(applied, write)
            return Handback(result.value if result.has_value else None, applied.returned, problem)

        return finish

    @property
    def _shell(self) -> InteractiveShell:
        assert self.shell is not None, "tpu_nb's magics run only in a shell"
        return self.shell

    def _compile(self, line: str, cell: str, return_names: tuple[str, ...]) -> CellProgram:
        shell = self._shell
        source = shell.transform_cell(cell)
        filename = cache_as_written(shell, line, cell)
        try:
            return compile_cell(source, filename, shell.user_ns, return_names, first_line=2)
        except SyntaxError as error:
            # Shown like a normal cell's syntax error, and nothing is started.
            shell.showsyntaxerror(filename)
            raise UsageError(f"the cell has a syntax error (line {error.lineno}); nothing was started.") from None


def report_returns(applied: AppliedReturns, write: Write) -> UsageError | None:
    """Say what came back; a missing or unpicklable `--return` name is a usage error (returned, to raise)."""
    for name in applied.updated_in_place:
        write("stdout", f"tpu_nb: updated `{name}` in place with rank 0's trained weights.\n")
    problems = [f"--return {name}: the cell did not define `{name}` on rank 0." for name in applied.missing]
    problems += [f"--return {detail}" for detail in applied.not_transferable]
    problems += list(applied.lost)
    if problems:
        return UsageError("\n".join(problems) + "\nEverything else was returned.")
    return None


def recorded_cells() -> tuple[Cell, ...]:
    """The running shell's %%tpu_prepare cells (none outside IPython, or before `%load_ext tpu_nb`)."""
    if not InteractiveShell.initialized():
        return ()
    magics = InteractiveShell.instance().magics_manager.registry.get(TpuMagics.__name__)
    return magics.prepared.cells() if isinstance(magics, TpuMagics) else ()


def load(ipython: InteractiveShell) -> None:
    ipython.register_magics(TpuMagics)


def unload(ipython: InteractiveShell) -> None:
    manager = ipython.magics_manager
    manager.magics["line"].pop("tpu_info", None)
    manager.magics["line"].pop("tpu_picker", None)
    manager.magics["cell"].pop("tpu_train", None)
    manager.magics["line"].pop("tpu_prepare", None)
    manager.magics["cell"].pop("tpu_prepare", None)
    manager.registry.pop(TpuMagics.__name__, None)
