"""A Hugging Face `Trainer`'s checkpoints under --checkpoint: saved where tpu_nb checks them, as often as asked, kept
as `--keep` and `save_total_limit` say, resumed (also from a URL, its best one fetched back), and XLA's random seed
kept through each save. `hook` applies these to the Trainer class in a worker.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpu_nb.basics.locations import is_remote
from tpu_nb.wire.checkpoints import Every
from tpu_nb.workers.cell_api import reporting
from tpu_nb.workers.checkpoints import xla_seed
from tpu_nb.workers.checkpoints.files import TRAINER_STATE, local_copy, remove_copy, trainer_directory


def checkpointing(training_args: Any) -> tuple[Any, TrainerCheckpoints | None]:
    """With --checkpoint: the Trainer's own checkpoints, where and as often as asked; tpu_nb checks and prunes them."""
    reporter = reporting.current()
    if reporter is None or reporter.checkpointer is None:
        return training_args, None
    plan = reporter.checkpointer.plan
    keeping = kept_count(plan.keep, training_args.save_total_limit)
    schedule = save_schedule(
        plan.every,
        option_value(training_args.save_strategy),
        training_args.save_steps,
        option_value(training_args.eval_strategy),
        training_args.eval_steps,
        training_args.load_best_model_at_end,
    )
    reporting.notice(
        f"Trainer: checkpoints in {plan.directory} {schedule.when} and when the run stops (--checkpoint), each checked by "
        f"tpu_nb; save_model() still writes to output_dir ({training_args.output_dir})"
    )
    for said in (schedule.notice, keeping.notice):
        if said is not None:
            reporting.notice(said)
    arguments = dataclasses.replace(
        training_args,
        save_strategy=schedule.strategy,
        save_steps=schedule.steps,
        save_total_limit=None,  # tpu_nb removes old ones (the best kept), once a newer one is verified
    )
    return arguments, TrainerCheckpoints(plan.directory, keeping.count)


@dataclass(frozen=True, slots=True)
class SaveSchedule:
    """When a Trainer saves under --checkpoint: its `save_strategy` and `save_steps`, said in words."""

    strategy: str
    steps: float
    when: str
    notice: str | None = None


def save_schedule(
    every: Every, save_strategy: str, save_steps: float, eval_strategy: str, eval_steps: float | None, load_best: bool
) -> SaveSchedule:
    """`--every N steps` as the Trainer's save_steps; by time, no save of its own (tpu_nb's callback asks for each).
    With `load_best_model_at_end`, a save must fall on each evaluation it compares (transformers refuses otherwise):
    when --every does not, the Trainer keeps its own schedule, and the user is told."""
    if every.steps is not None:
        schedule = SaveSchedule("steps", every.steps, f"every {every}")
        fits = eval_strategy == "steps" and eval_steps is not None and every.steps % eval_steps == 0
    else:
        schedule = SaveSchedule("no", save_steps, f"every {every}")
        fits = False
    if not load_best or fits or save_strategy == "no":
        return schedule  # save_strategy="no" with load_best_model_at_end: transformers itself refuses the arguments
    own = {"steps": f"every {save_steps:g} steps", "epoch": "at each epoch's end"}.get(save_strategy, "at each new best")
    choose = f"; give --every a multiple of eval_steps ({eval_steps:g} steps) to choose" if eval_strategy == "steps" and eval_steps else ""
    return SaveSchedule(
        save_strategy,
        save_steps,
        own,
        f"Trainer: load_best_model_at_end compares checkpoints saved at its evaluations: it saves as its arguments say "
        f"({own}), not every {every}{choose}",
    )


def keep_the_seed_through_saves(trainer_class: Any) -> None:
    """A Trainer's save syncs several times, and each sync moves XLA's random seed: a run that saved (or stopped at
    a deadline and resumed) would draw other dropout masks than one that did not. Each save leaves the seed as
    `xla_seed.seed_kept` does, and its RNG file holds that seed, where the run goes on from.

    A resume loads that seed after the first batches of its epoch were fetched (each fetch syncs): those syncs
    are applied to it, so the next step draws what it drew in the run that saved. At an epoch's start it loads
    it before any fetch, and the run that saved had synced once more since its save: the `xm.mark_step()`
    that ends an epoch (tpu_nb's saves are all made at a step's end, before it). An evaluation at the
    epoch's end (eval_strategy="epoch") syncs further, and a resume there draws other masks.
    """
    original_save, original_save_rng = trainer_class._save_checkpoint, trainer_class._save_rng_state
    original_run_epoch, original_load_rng = trainer_class._run_epoch, trainer_class._load_rng_state

    def _save_checkpoint(self: Any, *args: Any, **kwargs: Any) -> Any:
        with xla_seed.seed_kept() as seed:
            self._tpu_nb_seed = seed
            try:
                return original_save(self, *args, **kwargs)
            finally:
                del self._tpu_nb_seed

    def _save_rng_state(self: Any, *args: Any, **kwargs: Any) -> Any:
        seed = getattr(self, "_tpu_nb_seed", None)
        if seed is not None:
            import torch_xla.core.xla_model as xm

            xm.set_rng_state(seed)
        return original_save_rng(self, *args, **kwargs)

    def _run_epoch(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._tpu_nb_epoch_seed = xla_seed.current_seed()
        return original_run_epoch(self, *args, **kwargs)

    def _load_rng_state(self: Any, *args: Any, **kwargs: Any) -> Any:
        before = xla_seed.current_seed()
        result = original_load_rng(self, *args, **kwargs)
        epoch_seed, loaded = getattr(self, "_tpu_nb_epoch_seed", None), xla_seed.current_seed()
        if epoch_seed is not None and before is not None and loaded is not None:
            syncs = xla_seed.syncs_between(epoch_seed, before)
            if syncs == 0:
                syncs = 1  # the epoch's end in the run that saved
            if syncs is not None:
                import torch_xla.core.xla_model as xm

                xm.set_rng_state(xla_seed.seed_after_syncs(loaded, syncs))
        return result

    trainer_class._save_checkpoint = _save_checkpoint
    trainer_class._save_rng_state = _save_rng_state
    trainer_class._run_epoch = _run_epoch
    trainer_class._load_rng_state = _load_rng_state


class TrainerCheckpoints:
    """Where one Trainer's checkpoints go under --checkpoint (its `output_dir` stays its own), and how many stay."""

    def __init__(self, directory: str, keep: int) -> None:
        self.directory = directory  # --checkpoint: a local path or a URL
        self.keep = keep
        self._local: str | None = None

    def local(self) -> str:
        """Where the Trainer writes them: the directory itself, or for a URL a local one (made at the first save),
        each checkpoint uploaded from it once checked."""
        if self._local is None:
            self._local = trainer_directory(self.directory)
        return self._local

    def url_of(self, checkpoint: str) -> str:
        """Where a checkpoint the Trainer wrote locally ends up, for a URL."""
        return f"{self.directory.rstrip('/')}/{Path(checkpoint).name}"

    def clean(self) -> None:
        """Once the checkpoints' checks and uploads are done: a URL's local directory goes (with what a failed upload left)."""
        if self._local is not None and is_remote(self.directory):
            shutil.rmtree(self._local, ignore_errors=True)
            self._local = None


@dataclass(frozen=True, slots=True)
class Keeping:
    """How many checkpoints a Trainer keeps under --checkpoint, and what to tell the user about it."""

    count: int
    notice: str | None


def kept_count(keep: int, save_total_limit: int | None) -> Keeping:
    """The stricter of `--keep` and the Trainer's own `save_total_limit` (a keep count too), said when they differ."""
    if save_total_limit is None or save_total_limit <= 0 or save_total_limit == keep:  # <= 0: transformers keeps all
        return Keeping(keep, None)
    if save_total_limit < keep:
        return Keeping(
            save_total_limit,
            f"Trainer: save_total_limit={save_total_limit}, stricter than --keep {keep}: tpu_nb keeps the "
            f"{save_total_limit} newest verified checkpoint{'s' if save_total_limit > 1 else ''} (and the best one, if the Trainer tracks one)",
        )
    return Keeping(
        keep,
        f"Trainer: save_total_limit={save_total_limit}, but --keep {keep} keeps {keep} (tpu_nb removes older checkpoints "
        f"once a newer one is verified): give --keep {save_total_limit} to keep {save_total_limit}",
    )


def checkpoints_where_asked(trainer_class: Any) -> None:
    """Under --checkpoint, everything transformers does with checkpoints follows them there: saving and rotating
    (`_get_output_dir`), resuming (tpu_nb's --resume, or `resume_from_checkpoint=True` with it), loading the best one
    (fetched back from a URL). `save_model()` and `push_to_hub()` keep `output_dir`.
    """
    original_get_output_dir, original_train, original_load_best = (
        trainer_class._get_output_dir,
        trainer_class.train,
        trainer_class._load_best_model,
    )

    def _get_output_dir(self: Any, trial: Any) -> str:
        checkpoints: TrainerCheckpoints | None = getattr(self, "_tpu_nb_checkpoints", None)
        return original_get_output_dir(self, trial) if checkpoints is None else checkpoints.local()

    def train(self: Any, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        reporter = reporting.current()
        checkpointer = None if reporter is None else reporter.checkpointer
        if reporter is None or checkpointer is None:
            return original_train(self, resume_from_checkpoint, *args, **kwargs)
        checkpoints: TrainerCheckpoints | None = getattr(self, "_tpu_nb_checkpoints", None)
        plan, copies = checkpointer.plan, []
        try:
            if resume_from_checkpoint in (None, True) and plan.resume_from:
                # --resume: the newest verified checkpoint (the kernel chose it), its files here, checked.
                path, local = checkpointer.resume_copy()
                copies.append((path, local))
                if is_remote(path):
                    copies += _best_fetched(local, path, reporter.world_size)
                checkpointer.resume_trainer(str(local), self.model, reporter.rank)
                resume_from_checkpoint = str(local)
            if checkpoints is not None:
                checkpointer.plan = dataclasses.replace(plan, keep=checkpoints.keep)
            result = original_train(self, resume_from_checkpoint, *args, **kwargs)
            best = self.state.best_model_checkpoint
            if checkpoints is not None and best is not None and is_remote(checkpoints.directory):
                self.state.best_model_checkpoint = checkpoints.url_of(best)  # its local copy is gone: where it is kept
            return result
        finally:  # however train() ends: returned, stopped, or raised
            checkpointer.wait()  # the last checkpoint's check (and upload) reads the local directory
            checkpointer.plan = plan
            if checkpoints is not None:
                checkpoints.clean()
            for path, local in copies:
                remove_copy(path, local)

    def _load_best_model(self: Any) -> None:
        checkpoints: TrainerCheckpoints | None = getattr(self, "_tpu_nb_checkpoints", None)
        reporter, best = reporting.current(), self.state.best_model_checkpoint
        if checkpoints is None or not is_remote(checkpoints.directory) or reporter is None or reporter.checkpointer is None:
            original_load_best(self)
            return
        # Each checked checkpoint leaves the local directory once uploaded: every rank fetches the best one back.
        reporter.checkpointer.wait()  # rank 0's last upload
        self.accelerator.wait_for_everyone()
        url = checkpoints.url_of(best)
        if not _exists(url):
            original_load_best(self)  # its upload failed (its local copy is gone too): transformers says it is not found
            return
        copy = local_copy(url, reporter.world_size)
        self.state.best_model_checkpoint = str(copy)
        try:
            original_load_best(self)
        finally:
            self.state.best_model_checkpoint = best
            remove_copy(url, copy)

    trainer_class._get_output_dir = _get_output_dir
    trainer_class.train = train
    trainer_class._load_best_model = _load_best_model


def _best_fetched(local: Path, url: str, ranks: int) -> list[tuple[str, Path]]:
    """A resume from a URL: the best checkpoint its trainer_state.json names (a local path in the run that saved it,
    gone since) fetched too and named there, so transformers keeps tracking it. The copies made."""
    state_file = local / TRAINER_STATE
    if not state_file.is_file():
        return []
    state = json.loads(state_file.read_text())
    best = state.get("best_model_checkpoint")
    if not best:
        return []
    name, copies = Path(best).name, []
    if name == local.name:
        state["best_model_checkpoint"] = str(local)
    else:
        best_url = f"{url.rstrip('/').rsplit('/', 1)[0]}/{name}"
        if not _exists(best_url):
            return []  # removed (by a run before tpu_nb kept it): transformers says it is gone
        copies.append((best_url, local_copy(best_url, ranks)))
        state["best_model_checkpoint"] = str(copies[-1][1])
    state_file.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")  # a copy of its own (local_copy)
    return copies


def _exists(url: str) -> bool:
    import fsspec

    filesystem, root = fsspec.core.url_to_fs(url)
    return bool(filesystem.exists(root))


def option_value(option: Any) -> str:
    """An option's string value, whether given as a str or an enum member."""
    return str(getattr(option, "value", option))
