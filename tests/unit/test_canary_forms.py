"""The canary's copy of a one-step model: its config and entry point
(tritonrepo_client.control.canary_forms) and the version folder the copy runs as
(tritonrepo.step.served_copy), read from a real process's command line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.step import served_copy
from tritonrepo.step.parameters import NON_STEP_KEYS
from tritonrepo_client.control import canary_forms
from tritonrepo_client.control.canary_forms import OneStepCopy, entry_point, is_one_step
from tritonrepo_format.configs import read_config


def test_the_parameter_has_one_name_on_both_sides_and_the_step_exempts_it():
    assert canary_forms.AS_VERSION_PARAMETER == served_copy.AS_VERSION_PARAMETER
    assert served_copy.AS_VERSION_PARAMETER in NON_STEP_KEYS
    assert "tritonrepo_canary" in NON_STEP_KEYS


def test_the_entry_point_is_the_generated_one_step_model_py_in_substance():
    generated = (MODEL_REPOSITORY / "breast_cancer" / "1" / "model.py").read_text()
    mine = entry_point()
    for line in ("from tritonrepo.pipelines.one_step import OneStep",
                 "class TritonPythonModel(OneStep):"):  # fmt: skip
        assert line in generated and line in mine
    compile(mine, "model.py", "exec")


class _Repo:
    """What OneStepCopy reads before it stages: the serving versions."""

    def versions(self, model: str) -> list[int]:
        return [1]


def test_the_copy_is_renamed_runs_as_the_new_version_and_counts_no_drift():
    from google.protobuf import json_format

    config = json_format.MessageToDict(
        read_config(MODEL_REPOSITORY, "breast_cancer", "cpu"), preserving_proto_field_name=True
    )
    assert is_one_step(config)
    repo: Any = _Repo()
    form = OneStepCopy(repo, "breast_cancer", "breast_cancer_model", 2, config)
    copy = form.copy_config()
    assert copy["name"] == "breast_cancer__canary" and form.old == 1
    assert form.model == "breast_cancer"
    assert copy["version_policy"] == {"specific": {"versions": [1]}}
    assert json.loads(copy["parameters"]["tritonrepo_as_version"]["string_value"]) == {
        "model": "breast_cancer",
        "version": 2,
    }
    assert "tritonrepo_drift" in config["parameters"]
    assert "tritonrepo_drift" not in copy["parameters"]
    assert config["name"] == "breast_cancer"  # the serving config is left as it was


def test_repository_flags_in_either_spelling():
    args = ["tritonserver", "--model-repository=/a", "--model-store", "/b", "--http-port=1"]
    assert served_copy.repository_paths(args) == [Path("/a"), Path("/b")]


def test_the_copy_runs_as_the_version_folder_in_the_servers_repository(tmp_path):
    (tmp_path / "m" / "2").mkdir(parents=True)
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", f"--model-repository={tmp_path}"]
    )
    try:
        cmdline = Path(f"/proc/{sleeper.pid}/cmdline")
        deadline = time.monotonic() + 30
        while b"--model-repository" not in cmdline.read_bytes():  # until the child has exec'd
            assert time.monotonic() < deadline, "the child did not start within 30 s"
            time.sleep(0.01)
        value = json.dumps({"model": "m", "version": 2})
        assert served_copy.served_version_dir(value, sleeper.pid) == tmp_path / "m" / "2"
        with pytest.raises(ValueError, match="no folder m/3"):
            served_copy.served_version_dir(json.dumps({"model": "m", "version": 3}), sleeper.pid)
        with pytest.raises(ValueError, match="JSON object"):
            served_copy.served_version_dir("m:2", sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
