"""What PURPLE's and PG-Ret's loops share on ``accelerate``: the engine, and means over processes.

Both loops are data-parallel the same way (each process takes a share of a batch or of the
validation set), so the engine is built one way and a share's sum becomes a global mean one way.
"""

from __future__ import annotations

import torch
from accelerate import Accelerator

__all__ = ["accelerator_for", "on_cpu", "process_mean"]


def on_cpu(device: str) -> bool:
    """Whether to train on the CPU: ``device`` says so (``cpu``, ``cpu:0``), or there is no GPU.

    Told explicitly, accelerate joins the launcher's processes over gloo; left to guess on a machine
    without a GPU, it runs each process on its own. Pass the same answer to ``PartialState(cpu=...)``
    when the state is needed before the trainer builds its engine.
    """
    return device.split(":")[0] == "cpu" or not torch.cuda.is_available()


def accelerator_for(device: str) -> Accelerator:
    """The engine: CPU processes over gloo where :func:`on_cpu`, else GPUs, in bf16 where supported."""
    cpu = on_cpu(device)
    bf16 = not cpu and torch.cuda.is_bf16_supported()  # CPU bf16 is slow and lossy
    return Accelerator(cpu=cpu, mixed_precision="bf16" if bf16 else "no")


def process_mean(total: float, count: int, accelerator: Accelerator | None) -> float:
    """``total / count`` summed over every process first (each passes its share's sum and size)."""
    pair = torch.tensor([total, float(count)])
    if accelerator is not None and accelerator.num_processes > 1:
        pair = accelerator.reduce(pair.to(accelerator.device), reduction="sum").cpu()
    return float(pair[0] / pair[1])
