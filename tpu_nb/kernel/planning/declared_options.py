"""Every option of a launch, declared once: name, type, default, help, and where it is taken.

`%%tpu_train`'s arguments, `tpu_nb.launch()`'s and `tpu_nb.pod.launch()`'s
signatures, `LaunchOptions.from_user` and the reference in docs/ are built
from `OPTIONS`, so an option cannot exist in one of them and not the others.
One name everywhere: the keyword is the name, the flag is the name with
dashes (`stop_grace`, `--stop-grace`); a boolean that is on by default is
turned off by `--no-NAME`; `returns` is `--return` in the magic, because
`return` cannot be a Python keyword argument.

Stdlib only: `import tpu_nb` builds `tpu_nb.launch`'s signature from it.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Surface = Literal["cell", "launch", "pod_launch"]
"""Where an option is taken: `%%tpu_train`, `tpu_nb.launch()`, `tpu_nb.pod.launch()`."""
Part = Literal["run", "pod", "sweep", "call"]
"""What reads it: `LaunchOptions` (every run), the pod target (`--pod` runs), a sweep of trials (`--trials`), or the
surface itself (what comes back, how)."""

EVERYWHERE: frozenset[Surface] = frozenset({"cell", "launch", "pod_launch"})
ON_THIS_MACHINE: frozenset[Surface] = frozenset({"cell", "launch"})
ON_A_POD: frozenset[Surface] = frozenset({"cell", "pod_launch"})

DEFAULT_RUNS_DIR = "tpu_nb_pod_runs"
POD_BACKENDS = ("auto", "gcloud", "gke", "export")
STACKS = ("auto", "torch_xla", "torch_tpu")
MODES = ("eager", "fused", "compile")


@dataclass(frozen=True, slots=True)
class Option:
    """One option. `help` names other options as {name}: `--name` in the magic's help, the name in backquotes in Python's."""

    name: str
    kind: type
    default: Any
    help: str
    part: Part = "run"
    surfaces: frozenset[Surface] = EVERYWHERE
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    flag_name: str | None = None
    """The magic's flag where the name cannot be a Python keyword (`--return`)."""
    optional_value: Any = None
    """What the flag means given without a value (`--resume` alone: True)."""
    python_kind: str | None = None
    """How Python's signature shows the option where it takes more than the magic's text (`trials`: a list or a study)."""

    @property
    def flag(self) -> str:
        if self.kind is bool and self.default is True:
            return f"--no-{_dashed(self.name)}"
        return f"--{self.flag_name or _dashed(self.name)}"

    def help_for(self, surface: Surface) -> str:
        """The help text with the other options named as that surface spells them."""
        return self.help.format_map(_Spelled(surface))

    def annotation(self) -> _Shown:
        kind = self.python_kind or ("Sequence[str]" if self.kind is list else self.kind.__name__)
        if self.optional_value is not None:
            kind = f"{kind} | bool"
        return _Shown(kind if self.default is not None else f"{kind} | None")


class _Shown:
    """An annotation shown as written (`inspect` quotes one given as a string)."""

    def __init__(self, text: str) -> None:
        self._text = text

    def __repr__(self) -> str:
        return self._text


def _dashed(name: str) -> str:
    return name.replace("_", "-")


class _Spelled(dict[str, str]):
    """{name} in a help text: `--name` for the magic, `name` in backquotes for Python."""

    def __init__(self, surface: Surface) -> None:
        super().__init__()
        self._surface = surface

    def __missing__(self, name: str) -> str:
        option = OPTION_NAMED[name]
        if self._surface == "cell":
            return f"--{option.flag_name or _dashed(option.name)}"
        return f"`{option.name}`"


OPTIONS: tuple[Option, ...] = (
    Option("cores", int, None, "Use N XLA devices instead of all of them.", surfaces=ON_THIS_MACHINE, metavar="N"),
    Option("timeout", float, None, "Stop every worker after SECONDS, like an interrupt.", metavar="SECONDS"),
    Option(
        "returns",
        list,
        (),
        "Copy these variables from rank 0 into the notebook afterwards; a torch module already in the notebook is updated "
        "in place with the trained weights.",
        part="call",
        surfaces=ON_A_POD,
        metavar="NAME",
        flag_name="return",
    ),
    Option("all_ranks_output", bool, False, "Show what every rank prints, prefixed with its rank (default: rank 0's only)."),
    Option("progress", bool, True, "The live progress display (the dashboard)."),
    Option(
        "all_results",
        bool,
        False,
        "Return every rank's result, a list by rank, instead of rank 0's.",
        surfaces=frozenset({"launch"}),
    ),
    Option(
        "stop_grace",
        float,
        5.0,
        "After an interrupt (or .stop()), wait at least this long for the workers to reach a step boundary before ending "
        "them; a run whose steps take longer is waited for as long as they take, learned as it runs, and an evaluation, "
        "save or compilation in progress for twice the longest of its kind so far (15 minutes for the first, an hour at "
        "most, and at least this long).",
        metavar="SECONDS",
    ),
    Option(
        "background",
        bool,
        False,
        "Return at once with a run handle (status, wait(), stop(), kill(), metrics, result, stacks()); the notebook stays "
        "free while it trains, with Stop and Kill buttons under its dashboard.",
        part="call",
    ),
    Option(
        "name",
        str,
        "run",
        "With {background}: the notebook variable the run's handle is bound to.",
        part="call",
        surfaces=frozenset({"cell"}),
        metavar="NAME",
    ),
    Option(
        "spmd",
        bool,
        False,
        "One worker drives every device and the compiler shards the program (FSDPv2): for models too big for one core. "
        "The code also gets `mesh`; an unchanged Trainer shards its parameters along the mesh's fsdp axis.",
    ),
    Option("mesh", str, None, "With {spmd}: the device mesh, e.g. fsdp=4,tensor=2 (default: every device on fsdp).", metavar="AXES"),
    Option(
        "doctor",
        bool,
        True,
        "The XLA doctor: compilation causes and places, host syncs, CPU fallbacks, input waits, where a step's time goes.",
    ),
    Option(
        "flops_per_token",
        float,
        None,
        "The model's training FLOPs per token (forward and backward; about 6 x its parameters, plus attention), for MFU. "
        "Default: a Trainer's model's own estimate; a loop has none unless given.",
        metavar="N",
    ),
    Option(
        "compile_cache",
        str,
        None,
        "Keep XLA's compiled programs in DIR (one subdirectory per rank), so a rerun skips compiling; 'off' for none "
        "(default: a working directory on Colab's and Kaggle's TPUs).",
        metavar="DIR",
    ),
    Option(
        "checkpoint",
        str,
        None,
        "Save the run's state to DIR (a local path, a Drive mount, /kaggle/working or gs://...): a Trainer through its own "
        "checkpointing, a loop what tpu_nb.checkpoint.track() names; each checkpoint is reloaded and checked before it counts.",
        surfaces=ON_THIS_MACHINE,
        metavar="DIR",
    ),
    Option(
        "every",
        str,
        "15m",
        "With {checkpoint}: how often, e.g. 500steps or 15m; always when the run stops.",
        surfaces=ON_THIS_MACHINE,
        metavar="WHEN",
    ),
    Option(
        "keep",
        int,
        2,
        "With {checkpoint}: keep the N newest verified checkpoints.",
        surfaces=ON_THIS_MACHINE,
        metavar="N",
    ),
    Option(
        "budget",
        str,
        None,
        "With {checkpoint}: all checkpoints take at most SIZE (e.g. 15GB; the newest is always kept). "
        "Default under /kaggle/working: 15GB of the 20GB Kaggle keeps.",
        surfaces=ON_THIS_MACHINE,
        metavar="SIZE",
    ),
    Option(
        "resume",
        str,
        None,
        "Continue from the newest verified checkpoint in DIR; with no directory (True in Python), from {checkpoint}'s. "
        "A search continues its study: finished trials are not run again.",
        surfaces=ON_THIS_MACHINE,
        metavar="DIR",
        optional_value=True,
    ),
    Option(
        "deadline",
        str,
        None,
        "Stop gracefully before WHEN, with a checkpoint where {checkpoint} is given: a duration (8h30m) or a clock time "
        "(21:00). On Kaggle's TPU the default is the session's end.",
        metavar="WHEN",
    ),
    Option(
        "watchdog",
        str,
        None,
        "When a rank has not moved for SECONDS (default: 5x the median step, at least 60s), show where every rank is (the "
        "lines of your code, the call they wait in) and what to do; 'off' turns it off.",
        metavar="SECONDS|off",
    ),
    Option(
        "stack",
        str,
        "auto",
        "The TPU software stack: torch_xla (PyTorch/XLA) or torch_tpu (TorchTPU, a process per chip); auto: the one that "
        "works with the installed torch (%tpu_info says which and why).",
        surfaces=ON_THIS_MACHINE,
        choices=STACKS,
    ),
    Option(
        "mode",
        str,
        None,
        "On TorchTPU: eager (each op as called), fused (lazy: one program per step, like torch_xla) or compile "
        "(torch.compile(backend='tpu')). Default: fused for a loop, eager for a Trainer.",
        surfaces=ON_THIS_MACHINE,
        choices=MODES,
    ),
    Option(
        "run_log",
        str,
        None,
        "Where the run's record goes (options, trial, final and best metrics, curves, time, checkpoints; %tpu_runs shows "
        "them): DIR, or 'off' for none. Default: TPU_NB_RUN_LOG if set, else tpu_nb_runs in the kernel's working directory.",
        metavar="DIR",
    ),
    Option(
        "trials",
        str,
        None,
        "Run independent trials side by side, each on its own chip (a world of its own) and more queued until one frees: "
        "folds=5 (k-fold), a grid such as 'lr=1e-5,3e-5 seed=0,1', or a list of dicts (in the magic, the name of one); "
        "or an optuna.Study (in the magic, its name) with {n_trials} and {space}: a search, each next trial asked of the "
        "study as a chip frees and stopped at a step boundary when its pruner says. "
        "The code gets `trial` (the dict; k-fold adds fold and folds); the result compares the trials.",
        part="sweep",
        surfaces=ON_THIS_MACHINE,
        metavar="SPEC",
        python_kind="str | Sequence[Mapping[str, Any]] | optuna.Study",
    ),
    Option(
        "n_trials",
        int,
        None,
        "With {trials} a study: how many trials the search runs (with {resume}, how many the study holds in all: the "
        "trials it finished count, its unfinished ones run again first).",
        part="sweep",
        surfaces=ON_THIS_MACHINE,
        metavar="N",
    ),
    Option(
        "space",
        str,
        None,
        "With {trials} a study: a function of an optuna.Trial that returns the trial's values (in the magic, its name), "
        "e.g. def space(t): return {{'lr': t.suggest_float('lr', 1e-5, 1e-3, log=True)}}.",
        part="sweep",
        surfaces=ON_THIS_MACHINE,
        metavar="NAME",
        python_kind="str | Callable[[optuna.Trial], Mapping[str, Any]]",
    ),
    Option(
        "cores_per_trial",
        int,
        1,
        "With {trials}: the XLA cores each trial's world gets (TorchTPU: chips).",
        part="sweep",
        surfaces=ON_THIS_MACHINE,
        metavar="K",
    ),
    Option(
        "trials_metric",
        str,
        None,
        "With {trials}: the reported metric that ranks them, e.g. eval_accuracy (higher is better) or eval_loss (a loss or "
        "error: lower); NAME:max or NAME:min to say which. Default: eval_loss if reported, else loss; a search's study is "
        "told this metric's values (default loss), as they are reported and at the end.",
        part="sweep",
        surfaces=ON_THIS_MACHINE,
        metavar="NAME",
    ),
    Option(
        "return_best",
        list,
        (),
        "With {trials}: copy these variables from the best trial into the notebook, as {returns} does for one run "
        "({returns} with {trials} makes each name a list, a value per trial; a name goes to one of the two).",
        part="call",
        surfaces=frozenset({"cell"}),
        metavar="NAME",
    ),
    Option(
        "pod",
        str,
        None,
        "Run on a TPU pod slice instead: the %%tpu_prepare cells and this one become train.py, started on every host. "
        "NAME is the TPU VM (gcloud) or the JobSet's name (GKE).",
        part="pod",
        surfaces=frozenset({"cell"}),
        metavar="NAME",
    ),
    Option(
        "backend",
        str,
        "auto",
        "On a pod: gcloud (a TPU VM slice), gke (a JobSet), export (write the run directory and print the commands), or "
        "auto (gke with {image}, else gcloud).",
        part="pod",
        surfaces=ON_A_POD,
        choices=POD_BACKENDS,
    ),
    Option("zone", str, None, "On a pod: the TPU VM's zone (default: gcloud's configured zone).", part="pod", surfaces=ON_A_POD),
    Option("project", str, None, "On a pod: the Google Cloud project (default: gcloud's).", part="pod", surfaces=ON_A_POD),
    Option(
        "accelerator",
        str,
        None,
        "On a pod on GKE or export: the slice, e.g. v5litepod-16.",
        part="pod",
        surfaces=ON_A_POD,
        metavar="TYPE",
    ),
    Option(
        "image",
        str,
        None,
        "On a pod on GKE: the container image with torch, torch_xla and your code's libraries.",
        part="pod",
        surfaces=ON_A_POD,
    ),
    Option(
        "run_dir",
        str,
        DEFAULT_RUNS_DIR,
        "On a pod: where each run's directory is written: a local directory or gs://BUCKET/PATH.",
        part="pod",
        surfaces=ON_A_POD,
        metavar="DIR",
    ),
    Option("namespace", str, "default", "On a pod on GKE: the Kubernetes namespace.", part="pod", surfaces=ON_A_POD),
    Option(
        "kill_stale",
        bool,
        False,
        "On a pod: end a tpu_nb run still running on the slice (left by a kernel that died) instead of refusing to start.",
        part="pod",
        surfaces=ON_A_POD,
    ),
    Option(
        "prepared",
        bool,
        True,
        "Run the notebook's %%tpu_prepare cells first on every host (the magic always does).",
        part="call",
        surfaces=frozenset({"pod_launch"}),
    ),
)
OPTION_NAMED: Mapping[str, Option] = {option.name: option for option in OPTIONS}


def options_of(surface: Surface, part: Part | None = None) -> tuple[Option, ...]:
    """The options `surface` takes (of one part), in their declared order."""
    return tuple(o for o in OPTIONS if surface in o.surfaces and (part is None or o.part == part))


def given(surface: Surface, part: Part, values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` of `part`'s options, with the declared default for each one not given."""
    return {option.name: values.get(option.name, option.default) for option in options_of(surface, part)}


def check_keywords(function: str, surface: Surface, keywords: Iterable[str]) -> None:
    """A keyword `surface` does not take: the TypeError Python raises for one, with the nearest option named."""
    import difflib  # only for a mistyped keyword

    known = [option.name for option in options_of(surface)]
    for keyword in keywords:
        if keyword not in known:
            near = difflib.get_close_matches(keyword, known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; it takes {', '.join(known)}"
            raise TypeError(f"{function}() got an unexpected keyword argument {keyword!r}{hint}")


_LEADING: Mapping[Surface, tuple[inspect.Parameter, ...]] = {
    "launch": (
        inspect.Parameter("fn", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=_Shown("Callable[..., Any]")),
        inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL, annotation=_Shown("Any")),
    ),
    "pod_launch": (
        inspect.Parameter("train", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=_Shown("str | Callable[[], Any]")),
        inspect.Parameter("pod", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=_Shown("str")),
    ),
}
_RETURNS: Mapping[Surface, _Shown] = {"launch": _Shown("Any"), "pod_launch": _Shown("PodResult | BackgroundRun | RunDirectory")}


def declare(surface: Literal["launch", "pod_launch"], function: Any) -> None:
    """Give a Python surface's function (which takes `**options`) its declared signature, and its options in its docstring.

    `help()`, Jupyter's Shift-Tab and `inspect.signature` then show every option with its default.
    """
    keywords = [
        inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default, annotation=o.annotation()) for o in options_of(surface)
    ]
    function.__signature__ = inspect.Signature([*_LEADING[surface], *keywords], return_annotation=_RETURNS[surface])
    function.__doc__ = f"{inspect.cleandoc(function.__doc__ or '')}\n\n{parameters_doc(surface)}"


def parameters_doc(surface: Surface) -> str:
    """The options as a docstring section, one paragraph each."""
    lines = ["Options (each a keyword; defaults in the signature):"]
    for option in options_of(surface):
        choices = f" One of {', '.join(option.choices)}." if option.choices else ""
        lines.append(f"    {option.name}: {option.help_for(surface)}{choices}")
    return "\n".join(lines)
