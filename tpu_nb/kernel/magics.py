"""IPython glue: `%tpu_info`, `%tpu_release` and `%%tpu_train`. Logic lives in the modules it calls."""

from __future__ import annotations

import os
import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from tpu_nb.kernel.endings.run_ending import Ending
from tpu_nb.kernel.notebook.cell_output import write_to_sys
from tpu_nb.kernel.notebook.cell_source import cache_as_written, running_cell_number
from tpu_nb.kernel.notebook.returns import hand_back, hand_back_later
from tpu_nb.kernel.planning.checkpoint_plans import describe_checkpoints
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.pod.cell_checks import PREPARE_MAGIC, check_names_recorded, check_plain_python, pod_program
from tpu_nb.kernel.pod.recording import RECORDED
from tpu_nb.kernel.pod.slice_checks import BACKENDS, DEFAULT_RUNS_DIR, PodTarget
from tpu_nb.kernel.pod.starting import launch_pod, start_pod_in_background
from tpu_nb.kernel.run import warm_imports
from tpu_nb.kernel.run.background import BackgroundRun, start_in_background
from tpu_nb.kernel.run.followed_run import run_in_foreground
from tpu_nb.kernel.run.local_run import Run
from tpu_nb.kernel.tpu.release import TERM_GRACE, describe_release, release_tpu
from tpu_nb.kernel.tpu.torch_tpu_guard import keep_torch_tpu_out, let_torch_tpu_back
from tpu_nb.runtime import RuntimePanel, SystemView, detect
from tpu_nb.runtime.system import installed_version
from tpu_nb.wire.run_directory import Cell
from tpu_nb.workers.programs import CellProgram, compile_cell


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
        """List the checkpoints in DIR: step, time, loss, size, and whether each was verified."""
        args = parse_argstring(self.tpu_checkpoints, line)
        directory = args.directory or self.last_checkpoints
        if directory is None:
            raise UsageError("%tpu_checkpoints DIR: name the checkpoint directory (no run in this kernel used --checkpoint yet).")
        text, markup = describe_checkpoints(directory)
        display({"text/plain": text, "text/html": markup}, raw=True)

    @magic_arguments()
    @line_magic
    def tpu_info(self, line: str) -> None:
        """Show this runtime: platform, TPU, devices, workers, versions, and problems with their fixes."""
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

        Stale: the kernel or shell it was started from is gone. A live one
        (another notebook's kernel or run, a job started from a cell) is
        listed with its parent, age and CPU use, and ended only when named
        (`%tpu_release PID`) or with --all. Never this kernel or a process it
        runs under, never another user's process, never this kernel's running
        run (stop it through its cell or handle). Says what it ended, and
        whether SIGKILL was needed.
        """
        args = parse_argstring(self.tpu_release, line)
        if not args.grace >= 0:  # also refuses nan
            raise UsageError(f"--grace {args.grace:g}: give the seconds to wait after SIGTERM, 0 or more (default {TERM_GRACE:g}).")
        if any(pid <= 0 for pid in args.pids):
            raise UsageError("%tpu_release PID ...: give the pids %tpu_info lists (positive numbers).")
        release = release_tpu(
            SystemView.current(), Run.alive(), named=tuple(args.pids), everything=args.all, dry_run=args.dry_run, grace=args.grace
        )
        text, markup = describe_release(release)
        display({"text/plain": text, "text/html": markup}, raw=True)

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
        help="After an interrupt (or .stop()), wait at least this long for the workers to reach a step boundary "
        "before terminating them (default 5; a run whose steps, evaluations, saves or compilations take longer is waited for "
        "as long as they take, learned as it runs).",
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
    @argument(
        "--checkpoint",
        metavar="DIR",
        help="Save the run's state to DIR (a local path, a Drive mount, /kaggle/working or gs://...): a Trainer through its own "
        "checkpointing, a loop what tpu_nb.checkpoint.track() names; each checkpoint is reloaded and checked before it counts.",
    )
    @argument(
        "--every", metavar="WHEN", help="With --checkpoint: how often, e.g. 500steps or 15m (default 15m); always when the run stops."
    )
    @argument("--keep", type=int, default=2, metavar="N", help="With --checkpoint: keep the N newest verified checkpoints (default 2).")
    @argument(
        "--budget",
        metavar="SIZE",
        help="With --checkpoint: all checkpoints take at most SIZE (e.g. 15GB; the newest is always kept). "
        "Default under /kaggle/working: 15GB of the 20GB Kaggle keeps.",
    )
    @argument(
        "--resume",
        nargs="?",
        const=True,
        metavar="DIR",
        help="Continue from the newest verified checkpoint in DIR (default: --checkpoint's).",
    )
    @argument(
        "--deadline",
        metavar="WHEN",
        help="Stop gracefully, with a checkpoint, before WHEN: a duration (8h30m) or a clock time (21:00). "
        "On Kaggle's TPU the default is the session's end.",
    )
    @argument(
        "--watchdog",
        metavar="SECONDS|off",
        help="When a rank has not moved for SECONDS (default: 5x the median step, at least 60s), show where every rank is "
        "(the lines of your cells, the call they wait in) and what to do; 'off' turns it off.",
    )
    @argument(
        "--stack",
        choices=("auto", "torch_xla", "torch_tpu"),
        default="auto",
        help="The TPU stack: torch_xla (PyTorch/XLA) or torch_tpu (TorchTPU, a process per chip); default: the one that works "
        "with the installed torch (%%tpu_info says which and why).",
    )
    @argument(
        "--mode",
        choices=("eager", "fused", "compile"),
        help="On TorchTPU: eager (each op as called), fused (lazy: one program per step, like torch_xla) or compile "
        "(torch.compile(backend='tpu'): a Trainer's torch_compile, or your own call). Default: fused for a loop, eager for a Trainer.",
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
        options = LaunchOptions.from_user(
            cores=args.cores,
            timeout=args.timeout,
            all_ranks_output=args.all_ranks_output,
            progress=not args.no_progress,
            stop_grace=args.stop_grace,
            spmd=args.spmd,
            mesh=args.mesh,
            doctor=not args.no_doctor,
            compile_cache=args.compile_cache,
            checkpoint=args.checkpoint,
            every=args.every,
            keep=args.keep,
            budget=args.budget,
            resume=args.resume,
            deadline=args.deadline,
            watchdog=args.watchdog,
            stack=args.stack,
            mode=args.mode,
        )
        if options.checkpoints is not None:
            self.last_checkpoints = options.checkpoints.directory
        if args.pod is not None:
            return self._train_on_pod(args, line, cell, options)
        program = self._compile(line, cell, tuple(args.return_names))
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
        """
        args = parse_argstring(self.tpu_prepare, line)
        if cell is None:
            if args.clear:
                RECORDED.clear()
            write_to_sys("stdout", RECORDED.describe() + "\n")
            return
        shell = self._shell
        check_plain_python(PREPARE_MAGIC, cell, shell.transform_cell(cell))
        name = f"In [{running_cell_number(shell)}]"
        result = shell.run_cell(cell, store_history=False)
        if not result.success:
            raise UsageError(f"{PREPARE_MAGIC}: the cell failed (above), so it was not recorded for pod runs.")
        cell_id = getattr(shell, "parent_header", {}).get("metadata", {}).get("cellId")
        RECORDED.record(Cell(name, f"{PREPARE_MAGIC} {line}".rstrip(), cell), cell_id)

    def _train_on_pod(self, args: Any, line: str, cell: str, options: LaunchOptions) -> Any:
        shell = self._shell
        check_plain_python("%%tpu_train --pod", cell, shell.transform_cell(cell))
        self._compile(line, cell, ())  # a syntax error is shown as in any cell, and nothing starts
        name = f"In [{running_cell_number(shell)}]"
        check_names_recorded(RECORDED.cells(), Cell(name, "", cell), shell.user_ns)
        program = pod_program(RECORDED.cells(), name, line, cell, tuple(args.return_names), options)
        target = PodTarget(
            name=args.pod,
            backend=args.backend,
            zone=args.zone,
            project=args.project,
            accelerator=args.accelerator,
            image=args.image,
            run_dir=args.run_dir,
            namespace=args.namespace,
            kill_stale=args.pod_kill_stale,
        )
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


def load(ipython: InteractiveShell) -> None:
    note = keep_torch_tpu_out(os.environ, sys.modules, installed_version("torch-tpu") is not None)
    if note is not None:
        print(note, file=sys.stderr)
    ipython.register_magics(TpuMagics)


def unload(ipython: InteractiveShell) -> None:
    manager = ipython.magics_manager
    manager.magics["line"].pop("tpu_info", None)
    manager.magics["line"].pop("tpu_checkpoints", None)
    manager.magics["line"].pop("tpu_release", None)
    manager.magics["line"].pop("tpu_picker", None)
    manager.magics["cell"].pop("tpu_train", None)
    manager.magics["line"].pop("tpu_prepare", None)
    manager.magics["cell"].pop("tpu_prepare", None)
    manager.registry.pop(TpuMagics.__name__, None)
    RECORDED.clear()  # the recorded cells go with the extension that recorded them
    warm_imports.cancel(ipython)  # its event handlers go with it too
    let_torch_tpu_back(os.environ)
