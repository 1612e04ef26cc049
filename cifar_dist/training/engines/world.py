"""Who this process is in the job: what every engine's start returns as ``engine.world``."""

from __future__ import annotations

from dataclasses import dataclass

from cifar_dist.training.process.threads import ThreadPlan


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int
    local_size: int
    threads: ThreadPlan
    gpu: str  # the GPU this rank uses, or "" on CPU
    onednn: bool  # TensorFlow's CPU ops run on oneDNN (else Eigen)

    @property
    def is_chief(self) -> bool:
        return self.rank == 0
