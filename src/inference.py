"""Helpers for running a network over a whole data set in fixed-shape batches, on one rank or many."""
from typing import List

import numpy as np
from mindspore import Tensor, nn, ops

def pad_batch(columns: List[np.ndarray], batch_size: int) -> List[np.ndarray]:
    """Append zero rows up to `batch_size` plus the example-weight column (1 real, 0 padding), so the last batch
    of an evaluation has the compiled shape and its padding can be told apart."""
    real = len(columns[0])
    padded = [np.concatenate([c, np.zeros((batch_size - real,) + c.shape[1:], c.dtype)]) for c in columns]
    weights = np.zeros(batch_size, np.float32)
    weights[:real] = 1.0
    return padded + [weights]


class _SumOverRanks(nn.Cell):
    def __init__(self):
        super().__init__()
        self.all_reduce = ops.AllReduce(ops.ReduceOp.SUM)

    def construct(self, x):
        return self.all_reduce(x)


def all_ranks_sum(values: np.ndarray) -> np.ndarray:
    """Element-wise sum over the ranks of a data-parallel group (float32 on the wire; CPU AllReduce only sums)."""
    return _SumOverRanks()(Tensor(values.astype(np.float32))).asnumpy()
