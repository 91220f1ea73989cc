"""Run an entry point with MindSpore's GPU/Ascend data-sink loop emulated on CPU (where MindSpore ignores sink mode),
so that the training driver's sink path - sink size, epoch count, callbacks once per sink - runs for real:

    python -m tests.sink_emulation run_pretrain.py [flags...]

`src.devices.device_setup.setup_device` reports the device as GPU (MindSpore itself stays on CPU; the network is built
as for GPU: model_runtime("GPU", ...)), and `Model.train` with
`dataset_sink_mode=True` does what MindSpore documents for a sink: `epoch` sinks of `sink_size` steps, the callbacks'
`on_train_step_end` once per sink with the last step's outputs. Every Model.train call is printed
(`sink emulation: Model.train ...`) so that tests can count them.
"""
import runpy
import sys
from dataclasses import replace

from mindspore.train import Callback, Model

import src.devices.device_setup as device_setup
import src.training.train_loop as train_loop


class OncePerSink(Callback):
    """Passes every `size`-th step end on to `callbacks`, as MindSpore calls them in sink mode."""

    def __init__(self, callbacks, size: int):
        super().__init__()
        self.callbacks, self.size, self.steps = list(callbacks), size, 0

    def on_train_step_end(self, run_context) -> None:
        self.steps += 1
        if self.steps % self.size == 0:
            for callback in self.callbacks:
                callback.on_train_step_end(run_context)


class SinkModel(Model):
    """Model whose sink mode runs step by step on CPU but calls back once per sink."""

    def train(self, epoch, train_dataset, callbacks=None, dataset_sink_mode=False, sink_size=-1, **kwargs):
        batches = train_dataset.get_dataset_size()
        print(f"sink emulation: Model.train epoch={epoch} sink_size={sink_size} batches={batches} "
              f"sink={dataset_sink_mode}", flush=True)
        if not dataset_sink_mode:
            return super().train(epoch, train_dataset, callbacks=callbacks, dataset_sink_mode=False, **kwargs)
        if epoch * sink_size != batches:  # MindSpore would then repeat or cut the data: never exact
            raise AssertionError(f"{epoch} sinks of {sink_size} steps over a dataset of {batches} batches")
        return super().train(1, train_dataset, callbacks=[OncePerSink(callbacks, sink_size)],
                             dataset_sink_mode=False, **kwargs)


def main() -> None:
    setup_device = device_setup.setup_device
    device_setup.setup_device = lambda *args, **kwargs: replace(setup_device(*args, **kwargs), target="GPU")
    train_loop.Model = SinkModel
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
