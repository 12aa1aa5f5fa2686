"""IPython glue: `%tpu_info` and `%%tpu_train`. Logic lives in the modules it calls."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from tpu_nb.cell import CellProgram, apply_results
from tpu_nb.launcher.api import result_of
from tpu_nb.launcher.controller import run_in_foreground
from tpu_nb.launcher.options import LaunchOptions
from tpu_nb.runtime import RuntimePanel, detect


@magics_class
class TpuMagics(Magics):
    @magic_arguments()
    @line_magic
    def tpu_info(self, line: str) -> None:
        """Show this runtime: platform, TPU, devices, workers, versions, and problems with their fixes."""
        parse_argstring(self.tpu_info, line)
        display(RuntimePanel(detect()))

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
    @cell_magic
    def tpu_train(self, line: str, cell: str) -> Any:
        """Run this cell on every TPU core (one XLA:CPU worker off-TPU), through xmp.spawn with fork.

        The workers see everything the notebook defined, plus `device`,
        `rank`, `world_size` and `report(step=..., loss=...)`. The value of
        the last line on rank 0 is the cell's result.
        """
        args = parse_argstring(self.tpu_train, line)
        options = LaunchOptions(cores=args.cores, timeout=args.timeout, all_ranks_output=args.all_ranks_output, progress=not args.no_progress)
        program = self._compile(line, cell, tuple(args.return_names))
        outcome = run_in_foreground(program, options, observers=[], title="%%tpu_train")
        result = apply_results(result_of(outcome)[0], self.shell.user_ns)
        for name in result.updated_in_place:
            print(f"tpu_nb: updated `{name}` in place with rank 0's trained weights.")
        problems = [f"--return {name}: the cell did not define `{name}` on rank 0." for name in result.missing]
        problems += [f"--return {detail}" for detail in result.not_transferable]
        if problems:
            raise UsageError("\n".join(problems) + "\nEverything else was returned.")
        return result.value if result.has_value else None

    def _compile(self, line: str, cell: str, return_names: tuple[str, ...]) -> CellProgram:
        shell = self.shell
        source = shell.transform_cell(cell)
        # Cache the cell as written, magic line included, so tracebacks from
        # the workers point at the lines the user sees.
        as_written = f"%%tpu_train {line}".rstrip() + "\n" + cell
        filename = shell.compile.cache(as_written, shell.execution_count, raw_code=as_written)
        try:
            return CellProgram.compile(source, filename, shell.user_ns, return_names, first_line=2)
        except SyntaxError as error:
            # Shown like a normal cell's syntax error, and nothing is started.
            shell.showsyntaxerror(filename)
            raise UsageError(f"the cell has a syntax error (line {error.lineno}); nothing was started.") from None


def load(ipython: InteractiveShell) -> None:
    ipython.register_magics(TpuMagics)


def unload(ipython: InteractiveShell) -> None:
    manager = ipython.magics_manager
    manager.magics["line"].pop("tpu_info", None)
    manager.magics["cell"].pop("tpu_train", None)
    manager.registry.pop(TpuMagics.__name__, None)
