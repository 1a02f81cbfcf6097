"""Data-parallel training of one trial on several processes, with torch.distributed.

Three strategies from the papers Sweepstack descends from (`execution.parallel.strategy`):

- ``allreduce`` (PCL-DNN): synchronous SGD. Every rank takes 1/world_size of each global
  batch and the gradients are summed with one all-reduce per step, so the trial trains as
  one process would on the same global batch, with the same hyperparameters.
- ``local_sgd`` (SparkNet): every rank takes ``tau`` local steps on its slices, then the
  ranks' parameters are averaged with an all-reduce.
- ``easgd`` (DeepSpark): elastic averaging. Every ``tau`` steps each rank moves toward a
  centre variable and the centre toward the ranks, through collectives; with
  ``asynchronous: true`` rank 0 holds the centre and the other ranks exchange with it over
  torch RPC, each at its own pace, without a global barrier.

`launch.train_parallel` is what the worker calls: it starts `world_size` rank processes on
its host (`rank.py`), relays rank 0's epochs, and ends every rank when one fails or the
trial stops. Ranks on several hosts rendezvous at a c10d TCP store; see `rank.py`. With
`execution.parallel.hosts` the worker runs the first share and gathers a worker for each
other host's share through the queue (`workers.gang`), which runs it with `run_share`.
"""

from __future__ import annotations

from workers.training.parallel.launch import Hosts, run_share, train_parallel

__all__ = ["Hosts", "run_share", "train_parallel"]
