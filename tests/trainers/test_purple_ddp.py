"""PURPLE data-parallel on two CPU processes: it completes, the replicas stay equal, resume counts on."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from personamem.profile.purple.checkpoint import load_checkpoint

pytestmark = pytest.mark.enable_socket
ROOT = Path(__file__).resolve().parents[2]


def _launch(out: Path, steps: int, mode: str) -> None:
    with socket.socket() as probe:  # a free port for the processes' rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--multi_gpu",
        "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(port), "-m", "tests.trainers.ddp_purple", str(out), str(steps), mode,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def _replicas(out: Path) -> list[dict[str, torch.Tensor]]:
    return [load_file(str(out / f"rank{rank}.safetensors")) for rank in (0, 1)]


@pytest.mark.slow
def test_two_processes_end_with_identical_weights_and_resume_continues(tmp_path: Path) -> None:
    _launch(tmp_path, 2, "fresh")
    first, second = _replicas(tmp_path)
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
    scorer, training = load_checkpoint(tmp_path / "last")
    assert training["step"] == 2 and training["processes"] == 2
    assert len(set(training["replica_digests"])) == 1 and len(training["replica_digests"]) == 2
    assert all(torch.equal(first[k], v) for k, v in scorer.state_dict().items())  # what the main one saved

    _launch(tmp_path, 3, "resume")
    _, training = load_checkpoint(tmp_path / "last")
    assert [row["step"] for row in training["history"] if "loss" in row] == [1, 2, 3]
    resumed, again = _replicas(tmp_path)
    assert all(torch.equal(resumed[k], again[k]) for k in resumed)
    assert not all(torch.equal(resumed[k], first[k]) for k in resumed)  # the third step moved them
