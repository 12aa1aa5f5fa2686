"""What a worker runs: the kernel builds a program, every worker runs it and hands back a `RankResult`."""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import CodeType, MappingProxyType
from typing import Any, Protocol

from tpu_nb.wire.results import ModuleWeights, RankResult
from tpu_nb.workers.cell_api.reporting import StopTraining, report
from tpu_nb.workers.readings.read_back import materialise_pending, unwrapped_key


@dataclass(frozen=True, slots=True)
class WorkerContext:
    """Who this worker is; given to the program in every worker."""

    rank: int
    world_size: int
    device: Any  # torch.device("xla:N")
    devices_in_process: int
    mesh: Any = None  # an SPMD run's torch_xla.distributed.spmd.Mesh (also the global mesh)


class Program(Protocol):
    """Runs in each worker; what it returns goes back to the kernel."""

    def run(self, context: WorkerContext) -> RankResult: ...


@dataclass(frozen=True, slots=True)
class FunctionProgram:
    """`tpu_nb.launch(fn, *args)`: call `fn(*args)` and send back its return value."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    keywords: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """A sweep's trial: `trial=` its values."""

    def run(self, context: WorkerContext) -> RankResult:
        try:
            return RankResult(self.fn(*self.args, **self.keywords), has_value=True)
        except StopTraining:
            return RankResult(None, has_value=True)  # stopped gracefully inside `report(...)`


@dataclass(frozen=True, slots=True)
class CellProgram:
    """A `%%tpu_train` cell, compiled in the kernel (`compile_cell`, from `tpu_nb.magics`), run in every worker.

    It runs in (a fork of) the notebook's namespace, so everything earlier
    cells defined is there; a trailing expression is kept apart so that its
    value is the cell's result, as in a normal cell.
    """

    body: CodeType
    last_expression: CodeType | None
    namespace: dict[str, Any]
    return_names: tuple[str, ...]
    notebook_modules: frozenset[str]  # --return names bound to a torch module in the notebook
    given: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Names the cell gets besides `device` and `rank`: a sweep's `trial`."""

    def run(self, context: WorkerContext) -> RankResult:
        # Several devices in one process (TPU v2/v3) run as threads: give each
        # its own top-level names. Otherwise use the fork's namespace itself,
        # so functions from earlier cells see `device` and `rank` too.
        namespace = self.namespace if context.devices_in_process == 1 else dict(self.namespace)
        namespace.update(self.given)
        namespace.update(device=context.device, rank=context.rank, world_size=context.world_size, report=report)
        if context.mesh is not None:
            namespace["mesh"] = context.mesh
        value, has_value = None, False
        try:
            exec(self.body, namespace)
        except StopTraining:
            pass  # a graceful stop: what was trained so far still comes back
        else:
            if self.last_expression is not None:
                value, has_value = eval(self.last_expression, namespace), True
        if context.rank != 0:
            return RankResult(value, has_value)
        returned = {name: self._returned(name, namespace[name]) for name in self.return_names if name in namespace}
        missing = tuple(name for name in self.return_names if name not in namespace)
        return RankResult(value, has_value, MappingProxyType(returned), missing)

    def _returned(self, name: str, value: Any) -> Any:
        if name in self.notebook_modules and is_module(value):
            return module_weights(value)  # loaded into the notebook's own module, in place
        return value


def compile_cell(source: str, filename: str, namespace: dict[str, Any], return_names: tuple[str, ...], first_line: int = 1) -> CellProgram:
    """Compile `source` whose first line is line `first_line` of `filename`.

    A trailing expression is kept apart so its value can be the cell's
    result, as in a normal cell (unless the source ends with ';').
    """
    # Blank lines in front make every line number, syntax errors' too, count from `first_line`.
    tree = ast.parse("\n" * (first_line - 1) + source, filename)
    last_expression = None
    last = tree.body[-1] if tree.body else None
    if isinstance(last, ast.Expr) and not source.rstrip().endswith(";"):
        tree.body.pop()
        last_expression = compile(ast.Expression(last.value), filename, "eval")
    body = compile(tree, filename, "exec")
    modules = frozenset(name for name in return_names if is_module(namespace.get(name)))
    return CellProgram(body, last_expression, namespace, return_names, modules)


def is_module(value: Any) -> bool:
    # Only ask torch if this process imported it: a cell that never did has no modules.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.nn.Module)


def module_weights(module: Any) -> ModuleWeights:
    """The module's weights where they are, each tied tensor one object under all its names, and the PEFT adapters
    added to it in place, if any (a TRL trainer given `peft_config` adds them to the model it was handed).

    Nothing is copied here: `save_result` copies them to the host a tensor at a time as it writes them (a sharded
    tensor's shards gathered), so the worker never holds a second whole copy of the model in host memory.
    """
    materialise_pending()
    weights = {unwrapped_key(key): tensor for key, tensor in module.state_dict(keep_vars=True).items()}
    return ModuleWeights(weights, MappingProxyType(peft_adapters(module)))


def peft_adapters(module: Any) -> dict[str, dict[str, Any]]:
    """The configs of the PEFT adapters in `module`, by adapter name, as JSON-able dicts (none for a plain module)."""
    configs = getattr(module, "peft_config", None)
    if not isinstance(configs, dict):
        return {}
    return {name: json.loads(json.dumps(config.to_dict(), default=_json_value)) for name, config in configs.items()}


def _json_value(value: Any) -> Any:
    """What JSON cannot hold in a PEFT config: sets (target_modules) as sorted lists, anything else as text."""
    return sorted(value) if isinstance(value, set | frozenset) else str(value)


def uses_trainer(program: Program) -> bool:
    """Whether the program's own code names a Hugging Face Trainer (Trainer, Seq2SeqTrainer, SFTTrainer, ...)."""
    if isinstance(program, CellProgram):
        codes = [program.body] + ([program.last_expression] if program.last_expression is not None else [])
    elif isinstance(program, FunctionProgram) and hasattr(program.fn, "__code__"):
        codes = [program.fn.__code__]
    else:
        return False
    return any(name.endswith("Trainer") for code in codes for name in _names(code))


def _names(code: CodeType) -> set[str]:
    """The global and attribute names a code object and the functions and classes inside it use."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            names |= _names(constant)
    return names
