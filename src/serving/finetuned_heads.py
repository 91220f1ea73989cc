"""A fine-tuned checkpoint's task head: checked against the task it is used as, then built with every weight
loaded. export.py writes it out as a file; `src.predict` also runs it in its own process from the .ckpt."""
from typing import Dict, Tuple

from model_utils.config import Config
from model_utils.errors import UserError, as_user_error
from src.tasks.registry import TASKS, trained_task

# Which head a checkpoint holds, by the parameter prefix only that head has (classifier and RACE share theirs and
# are told apart by its width).
HEAD_OWNERS = {task.head_prefix: task.head_title for task in TASKS.values()}


def check_head(values: Dict[str, object], task: str, config: Config, checkpoint: str, source: str,
               by_flag: bool = False) -> None:
    """The checkpoint must hold the head of the yaml's task, with the yaml's class count: load_weights would
    only say 'parameters missing', which hides that the wrong checkpoint or yaml was given. `by_flag`: the task
    came from --task (then the remedy is another --task, not another yaml)."""
    found = [prefix for prefix in HEAD_OWNERS if any(name.startswith(prefix) for name in values)]
    wanted = TASKS[task].head_prefix
    if not found:
        raise UserError(f"{checkpoint} has no task head (no {', '.join(p + '*' for p in HEAD_OWNERS)} weights): a "
                        f"pretraining checkpoint? Use the checkpoint of a run_{task}.py fine-tuning run")
    if wanted not in found:
        held = f"{checkpoint} holds a {HEAD_OWNERS[found[0]]} head ({found[0]}*)"
        if by_flag:
            raise UserError(f"{held} but --task {task} needs a {task} head: use {fitting_task(values, found[0])}")
        raise UserError(f"{held} but {source} is a {task} config: use the task yaml the checkpoint was trained with "
                        f"(or {fitting_task(values, found[0])}), or a {task} checkpoint")
    weight = values.get("classifier.weight")
    if wanted != "classifier." or weight is None:
        return
    outputs = int(weight.shape[0])
    if task == "race" and outputs != 1:
        raise UserError(f"{checkpoint}: its classifier has {outputs} outputs (a sequence classifier with {outputs} "
                        f"classes), but RACE scores each choice with one output: use it as --task classifier "
                        f"(num_class {outputs})")
    if task == "classifier" and outputs != config.num_class:
        hint = " (or it is a RACE checkpoint: --task race)" if outputs == 1 else ""
        raise UserError(f"{checkpoint}: the checkpoint's classifier has {outputs} class(es) but num_class is "
                        f"{config.num_class}: pass --num_class {outputs}{hint}")
    trained = trained_task(values, checkpoint)
    if trained and trained != task:  # a RACE head's one output looks like a regression's
        why = f"--task {task} needs a {task} head: use --task {trained}" if by_flag else \
            f"{source} is a {task} config: use the task yaml the checkpoint was trained with"
        raise UserError(f"{checkpoint} was fine-tuned by run_{trained}.py but {why}")


def fitting_task(values: Dict[str, object], prefix: str) -> str:
    """The --task a checkpoint's head fits (a one-output classifier is RACE's, or a regression's)."""
    if prefix != "classifier.":
        return "--task " + next(name for name, task in TASKS.items() if task.head_prefix == prefix)
    if int(values["classifier.weight"].shape[0]) == 1:
        return "--task race (or --task classifier --num_class 1 for a regression head)"
    return "--task classifier"


def detected_task(values: Dict[str, object], checkpoint: str) -> Tuple[str, str]:
    """(task, the weights that tell it) of a checkpoint given without a task yaml or --task: its head's prefix
    (HEAD_OWNERS), or the pretraining heads. A one-output classifier (RACE's, or a regression's) is told only by
    the task its run recorded (trained_task)."""
    from src.conversion.convert_checkpoint import HF_HEADS

    found = [prefix for prefix in HEAD_OWNERS if any(name.startswith(prefix) for name in values)]
    if not found:
        if any(name.startswith(HF_HEADS) for name in values):
            return "pretrain", f"the pretraining heads {', '.join(prefix + '*' for prefix in HF_HEADS)}"
        raise UserError(f"{checkpoint} holds no head (no {', '.join(p + '*' for p in HEAD_OWNERS)} or pretraining "
                        f"weights): pass --task")
    if found[0] != "classifier.":
        task = next(name for name, task in TASKS.items() if task.head_prefix == found[0])
        return task, f"{found[0]}* weights"
    outputs = int(values["classifier.weight"].shape[0])
    trained = trained_task(values, checkpoint)
    if outputs == 1 and trained:
        return trained, f"a one-output classifier.* head fine-tuned by run_{trained}.py"
    if outputs == 1:
        raise UserError(f"{checkpoint} holds a one-output classifier head (classifier.*), which is RACE's or a "
                        f"regression's: pass {fitting_task(values, found[0])}")
    return "classifier", f"classifier.* weights of {outputs} classes"


def head_network(values: Dict[str, object], task: str, task_config: Config, checkpoint: str, source: str,
                 by_flag: bool = False):
    """The AlbertConfig of the checkpoint's network (the yaml's albert_config_file, else the albert_config.json
    beside the checkpoint, else the yaml's albert_network; then net_cfg), once its head is known to fit (`by_flag`:
    the task came from --task)."""
    from src.common.checkpoint_io import config_beside
    from src.training.network_config import network_config

    check_head(values, task, task_config, checkpoint, source, by_flag)
    return network_config(task_config, None, config_beside(checkpoint))


def build_head(values: Dict[str, object], task: str, task_config: Config, net, runtime, checkpoint: str):
    """The task head of `net` built for `runtime`, in inference mode, with every parameter loaded from `values`
    (and, where runtime.serving_weights says so, the dense layers' serving weights made from them)."""
    from src.common.checkpoint_io import load_weights

    with as_user_error():
        model = TASKS[task].build_model(task_config, net, False, runtime)
    model.set_train(False)
    load_weights(model, values, name=checkpoint)
    if runtime.serving_weights:
        from src.model.cpu_kernels import convert_weights

        convert_weights(model)
    return model
