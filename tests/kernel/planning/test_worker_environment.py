from __future__ import annotations

import os

import pytest
from support.platforms import MakeSystem

from tpu_nb.kernel.planning.worker_environment import CoresUnavailable, plan_environment
from tpu_nb.runtime import detect


def test_cpu_runtime_gets_xla_cpu_and_quiet_tokenizers(make_system: MakeSystem) -> None:
    plan = plan_environment(detect(make_system("cpu_laptop")), cores=None, environ={})
    assert plan.set == {"PJRT_DEVICE": "CPU", "TOKENIZERS_PARALLELISM": "false"}
    assert plan.remove == ()
    assert plan.notes == ()
    assert plan.devices == 1


def test_users_own_tokenizers_setting_is_kept(make_system: MakeSystem) -> None:
    plan = plan_environment(detect(make_system("cpu_laptop")), cores=None, environ={"TOKENIZERS_PARALLELISM": "true"})
    assert "TOKENIZERS_PARALLELISM" not in plan.set


def test_cores_on_cpu_become_cpu_num_devices(make_system: MakeSystem) -> None:
    plan = plan_environment(detect(make_system("cpu_laptop")), cores=3, environ={})
    assert plan.set["CPU_NUM_DEVICES"] == "3"
    assert plan.devices == 3


def test_kaggle_topology_variables_are_removed_with_a_note(make_system: MakeSystem) -> None:
    plan = plan_environment(detect(make_system("kaggle_v5e_8", environ={"CLOUD_TPU_TASK_ID": "0"})), cores=None, environ={})
    assert set(plan.remove) == {"TPU_PROCESS_ADDRESSES", "CLOUD_TPU_TASK_ID"}
    [note] = plan.notes
    assert "TPU_PROCESS_ADDRESSES" in note and "CLOUD_TPU_TASK_ID" in note and "removed" in note
    assert plan.set["PJRT_DEVICE"] == "TPU"
    assert plan.devices == 8


def test_cores_on_a_tpu_host_become_process_bounds(make_system: MakeSystem) -> None:
    plan = plan_environment(detect(make_system("kaggle_v5e_8")), cores=4, environ={})
    assert plan.set["TPU_PROCESS_BOUNDS"] == "2,2,1"
    assert plan.set["TPU_CHIPS_PER_PROCESS_BOUNDS"] == "1,1,1"
    assert plan.devices == 4


def test_more_cores_than_the_host_has_is_refused(make_system: MakeSystem) -> None:
    with pytest.raises(CoresUnavailable, match="has 8 TPU cores. Use at most 8"):
        plan_environment(detect(make_system("kaggle_v5e_8")), cores=16, environ={})


def test_cores_that_do_not_split_the_host_list_what_does(make_system: MakeSystem) -> None:
    with pytest.raises(CoresUnavailable, match=r"can be split into 2, 4, 8 cores \(2 per chip\)"):
        plan_environment(detect(make_system("colab_v2_8")), cores=3, environ={})


def test_apply_changes_only_the_listed_variables(monkeypatch: pytest.MonkeyPatch, make_system: MakeSystem) -> None:
    monkeypatch.setenv("TPU_PROCESS_ADDRESSES", "local:8476")
    monkeypatch.setenv("CLOUD_TPU_TASK_ID", "0")
    monkeypatch.setenv("KEEP_ME", "yes")
    monkeypatch.setenv("PJRT_DEVICE", "CPU")  # so monkeypatch restores it after apply()
    plan = plan_environment(detect(make_system("kaggle_v5e_8", environ={"CLOUD_TPU_TASK_ID": "0"})), cores=None, environ={})
    plan.apply()
    assert "TPU_PROCESS_ADDRESSES" not in os.environ and "CLOUD_TPU_TASK_ID" not in os.environ
    assert os.environ["KEEP_ME"] == "yes"
    assert os.environ["PJRT_DEVICE"] == "TPU"
