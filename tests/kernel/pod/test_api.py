"""`tpu_nb.pod` from Python: reading a run's results, refusing what cannot be sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpu_nb.kernel.endings.notebook_errors import LaunchRefused


def test_results_of_a_run_that_saved_none_say_what_to_check(tmp_path: Path) -> None:
    import tpu_nb

    with pytest.raises(tpu_nb.NotReturned, match="holds no results of rank 0 .results/result-0.json.: has the run ended"):
        tpu_nb.pod.results(tmp_path)


def test_a_function_without_source_is_refused() -> None:
    import tpu_nb

    with pytest.raises(LaunchRefused, match="its source cannot be read .* pass the code as a string"):
        tpu_nb.pod.launch(print, "my-slice", backend="export")


def test_results_from_a_place_others_can_write_load_their_weights_only(tmp_path: Path) -> None:
    import torch

    import tpu_nb
    from tpu_nb.wire.results import ModuleWeights, NotTransferable, RankResult, ResultPlaces, save_result

    (tmp_path / "results").mkdir()
    model = torch.nn.Linear(2, 2)
    save_result(RankResult("a pickled value", True, {"model": ModuleWeights(model.state_dict())}), ResultPlaces(tmp_path / "results"), 0)
    trusted = tpu_nb.pod.results(tmp_path)
    assert trusted.value == "a pickled value" and torch.equal(trusted.returned["model"]["weight"], model.weight)
    careful = tpu_nb.pod.results(tmp_path, weights_only=True)
    assert isinstance(careful.value, NotTransferable) and torch.equal(careful.returned["model"]["weight"], model.weight)
