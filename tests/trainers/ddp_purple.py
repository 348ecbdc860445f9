"""A few PURPLE steps on the known-best-profile bandit, run by ``test_purple_ddp`` under a launcher.

Usage: ``accelerate launch ... -m tests.trainers.ddp_purple OUT STEPS fresh|resume``; each process then saves
the weights it ended with to ``OUT/rank<i>.safetensors``, so the test compares the replicas itself.
"""

from __future__ import annotations

import sys
from pathlib import Path

from accelerate import PartialState
from safetensors.torch import save_file

from personamem import default_encoder
from personamem.trainers.purple import train_purple
from tests.trainers.test_purple_train import _config, _examples, food_reward

out, steps, mode = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
result = train_purple(
    _examples(4),
    _examples(3, "v"),
    default_encoder(),
    food_reward,
    _config(steps=steps, validate_every=1, samples=4),
    out,
    resume=mode == "resume",
)
assert result.scorer is not None
weights = {name: value.detach().contiguous().cpu() for name, value in result.scorer.state_dict().items()}
save_file(weights, str(out / f"rank{PartialState(cpu=True).process_index}.safetensors"))
