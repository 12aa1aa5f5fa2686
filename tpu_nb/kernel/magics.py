"""IPython glue: `%tpu_info` and `%%tpu_train`. Logic lives in the modules it calls."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from tpu_nb.runtime import RuntimePanel, detect
from tpu_nb.wire.mesh import MeshError, MeshShape
from tpu_nb.workers.programs import CellProgram

from .background import BackgroundRun, Handback, start_in_background
from .cell_names import cache_as_written
from .cells import AppliedReturns, apply_returns, bindings, compile_cell
from .endings import Ending
from .options import LaunchOptions
from .output import Write, write_to_sys
from .runs import Run, run_in_foreground


@magics_class
class TpuMagics(Magics):
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

    def _start_in_background(self, program: CellProgram, options: LaunchOptions, name: str) -> BackgroundRun:
        namespace = self._shell.user_ns
        launched_with = bindings(namespace, program.return_names)

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

        handle = start_in_background(program, options, name, finish)
        namespace[name] = handle
        return handle

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
    if problems:
        return UsageError("\n".join(problems) + "\nEverything else was returned.")
    return None


def load(ipython: InteractiveShell) -> None:
    ipython.register_magics(TpuMagics)


def unload(ipython: InteractiveShell) -> None:
    manager = ipython.magics_manager
    manager.magics["line"].pop("tpu_info", None)
    manager.magics["line"].pop("tpu_picker", None)
    manager.magics["cell"].pop("tpu_train", None)
    manager.registry.pop(TpuMagics.__name__, None)
