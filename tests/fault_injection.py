"""Run an entry point exactly as `python ENTRY ARGS` (or `python -m MODULE ARGS`) would, but SIGKILL the process at
one precise moment of its work (moments a timer outside would rarely hit, because they last milliseconds), or
damage its state there.

    python tests/fault_injection.py POINT N ENTRY [ARGS...]      # ENTRY: run_pretrain.py or -m src.module

The process kills itself with SIGKILL (no cleanup, no `finally`, as `kill -9` or a power cut) at the N-th time
(1-based) it reaches POINT:

- checkpoint_write:  a checkpoint's temporary file holds only its first half (the write was cut short)
- checkpoint_rename: a checkpoint is completely written under its temporary name, just before the rename
- checkpoint_prune:  a new checkpoint is in place, just before the oldest one beyond save_checkpoint_num is deleted
- mindrecord_write:  a MindRecord writer has just written a batch of records (its shard is incomplete)
- mindrecord_publish: a data set's first file was moved into place, the others and the meta file not yet
- weights_nan:       not a kill: after the N-th training batch, one weight of the network becomes nan (as a
                     diverging update or failing memory would leave it), and the run goes on
"""
import os
import runpy
import signal
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def on_nth(count: int, matches: Callable[..., bool] = lambda *args: True) -> Callable[..., bool]:
    """A predicate that is true at the `count`-th call whose arguments `matches`."""
    seen = [0]

    def reached(*args) -> bool:
        if matches(*args):
            seen[0] += 1
        return seen[0] == count and matches(*args)
    return reached


def _temporary(path) -> bool:
    return os.path.basename(str(path)).startswith(".tmp-")


def install(point: str, count: int) -> None:
    import mindspore
    from mindspore.mindrecord import FileWriter

    if point == "checkpoint_write":
        save, reached = mindspore.save_checkpoint, on_nth(count)

        def cut_short(items, path, *args, **kwargs):
            save(items, path, *args, **kwargs)
            if reached():
                os.truncate(path, os.path.getsize(path) // 2)
                die()
        mindspore.save_checkpoint = cut_short
    elif point in ("checkpoint_rename", "checkpoint_prune", "mindrecord_publish"):
        replace, remove, link = os.replace, os.remove, os.link
        if point == "checkpoint_rename":
            reached = on_nth(count, lambda src, dst: _temporary(src) and str(dst).endswith(".ckpt"))
            os.replace = lambda src, dst: die() if reached(src, dst) else replace(src, dst)
        elif point == "checkpoint_prune":
            reached = on_nth(count, lambda path: str(path).endswith(".ckpt") and not _temporary(path))
            os.remove = lambda path: die() if reached(path) else remove(path)
        else:
            reached = on_nth(count, lambda src, dst: ".mindrecord" in str(dst) and not str(dst).endswith(".json"))

            def publishing(move):  # os.replace with --overwrite, else os.link (atomic_files.place_new)
                def publish(src, dst):
                    move(src, dst)
                    if reached(src, dst):
                        die()
                return publish
            os.replace, os.link = publishing(replace), publishing(link)
    elif point == "weights_nan":
        import numpy as np
        from src.training import train_loop

        step_end, reached = train_loop.StepCounter.on_train_step_end, on_nth(count)

        def poison_after(self, run_context):
            step_end(self, run_context)
            if reached():
                weight = self.network.train_cell.trainable_params()[0]
                weight.set_data(mindspore.Tensor(np.full(weight.shape, np.nan, np.float32)))
        train_loop.StepCounter.on_train_step_end = poison_after
    elif point == "mindrecord_write":
        write, reached = FileWriter.write_raw_data, on_nth(count)

        def write_then_die(self, *args, **kwargs):
            result = write(self, *args, **kwargs)
            if reached():
                die()
            return result
        FileWriter.write_raw_data = write_then_die
    else:
        raise SystemExit(f"unknown fault point {point!r}")


def main() -> None:
    point, count, entry, *args = sys.argv[1:]
    sys.path.insert(0, str(ROOT))
    install(point, int(count))
    if entry == "-m":
        module, *args = args
        sys.argv = [module] + args
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [entry] + args
        runpy.run_path(str(ROOT / entry), run_name="__main__")


if __name__ == "__main__":
    main()
