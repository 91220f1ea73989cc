"""Running a network over many rows in batches of one fixed (compiled or exported) shape: the one loop behind
fine-tuning evaluation, `src.predict` and `pretrain_eval.py`. numpy only, so that serving an ONNX file never imports
MindSpore."""
from typing import Callable, Iterable, Iterator, List, Sequence, Tuple

import numpy as np

# A batch of input arrays -> the network's outputs as arrays.
Runner = Callable[[List[np.ndarray]], Sequence[np.ndarray]]


def pad_batch(columns: List[np.ndarray], batch_size: int) -> List[np.ndarray]:
    """Append zero rows up to `batch_size` plus the example-weight column (1 real, 0 padding), so the last batch
    of an evaluation has the compiled shape and its padding can be told apart."""
    real = len(columns[0])
    padded = [np.concatenate([c, np.zeros((batch_size - real,) + c.shape[1:], c.dtype)]) for c in columns]
    weights = np.zeros(batch_size, np.float32)
    weights[:real] = 1.0
    return padded + [weights]


def run_padded(run: Runner, batches: Iterable[List[np.ndarray]], batch_size: int,
               weights: bool = False, bar=None) -> Iterator[Tuple[List[np.ndarray], int]]:
    """(outputs, real rows) of each batch of input columns, run padded with zero rows to `batch_size`; with
    `weights` the example-weight column of pad_batch is passed as the last input (networks that sum over rows).
    `bar` (src/common/progress.py) counts the real rows done."""
    for columns in batches:
        padded = pad_batch(columns, batch_size)
        outputs = [np.asarray(output) for output in run(padded if weights else padded[:-1])]
        if bar is not None:
            bar.update(len(columns[0]))
        yield outputs, len(columns[0])


def real_rows(results: Iterable[Tuple[List[np.ndarray], int]]) -> List[np.ndarray]:
    """The per-row outputs of run_padded without the padding rows, each concatenated over the batches."""
    parts = [[output[:real] for output in outputs] for outputs, real in results]
    return [np.concatenate(columns) for columns in zip(*parts)]


def cell_runner(cell) -> Runner:
    """A MindSpore cell (or loaded graph) as a Runner: numpy arrays in, numpy arrays out."""
    from mindspore import Tensor  # imported here: the ONNX serving path never runs a cell

    def run(arrays: List[np.ndarray]) -> List[np.ndarray]:
        outputs = cell(*[Tensor(array) for array in arrays])
        return [output.asnumpy() for output in (outputs if isinstance(outputs, (tuple, list)) else (outputs,))]
    return run
