"""Train checkpoints: naming and listing, their lineage (which run wrote them), resuming a run (`resume_or_init`),
which files a run may delete (`Lineage.owns`), and the checks that keep a run from losing work (space for a
checkpoint before the first step, ranks that would resume from different steps).

A run killed at any point resumes to the uninterrupted run's trajectory: `resume_or_init` restores weights,
optimizer state, loss scale and progress from the newest intact checkpoint of the save folder's lineage, or the
checkpoint the run starts from. A file of another run, one whose stored step differs from its name's, or a damaged
one (its digest does not match, see src/utils.read_checkpoint) is named in a warning and never resumed from or
deleted.
"""
import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn

from model_utils.errors import UserError
from src.common.atomic_files import save_json_atomic
from src.common.checkpoint_io import DROPOUT_CALLS, contents_digest, load_weights, read_checkpoint
from src.data.tokenization import checkpoint_tokenizer, same_ids, tokenizer_record
from src.devices.device_setup import Device, all_ranks_sum
from src.training.settings import TrainSettings
from src.training.step_plan import PLAN_KEYS, Progress, StepPlan

# Progress stored beside the weights in every checkpoint (never under the name `global_step`, the optimizer's).
PROGRESS_KEYS = ("micro_step", "overflow_count")
RUN_ID_KEY = "run_id"  # the lineage a train checkpoint belongs to (see Lineage)
LINEAGE_FILE = "run_lineage.json"  # in the save folder
# What a train checkpoint records of the run that wrote it (RunIdentity), beside its progress: strings.
IDENTITY_KEYS = ("run_network", "run_optimizer", "run_data", "run_kind", "run_settings", "run_tokenizer", "run_task")
# Network settings a resumed run may change: the weights come from the checkpoint (initializer_range), or the change
# is one of how to train, said in a warning (precision, dropout).
NETWORK_MAY_CHANGE = ("initializer_range",)
NETWORK_CHANGE_WARNED = ("compute_type", "hidden_dropout_prob", "attention_probs_dropout_prob")


CHECKPOINT_NAME = re.compile(r"^(?P<prefix>[\w.]+)-(?P<step>\d+)\.ckpt$")


def list_checkpoints(directory: str, prefix: str) -> List[Tuple[int, str]]:
    """(optimizer step, path) of the finished checkpoints `<prefix>-<step>.ckpt` in `directory`, oldest first.

    Files still being written carry a temporary name (`.tmp-*`, see save_checkpoint_atomic) and never match.
    """
    if not os.path.isdir(directory):
        return []
    found = []
    for name in os.listdir(directory):
        match = CHECKPOINT_NAME.match(name)
        if match and match["prefix"] == prefix:
            found.append((int(match["step"]), os.path.join(directory, name)))
    return sorted(found)


def checkpoint_step(path: str) -> int:
    """The optimizer step a train checkpoint's name carries (0 for other checkpoints: converted, renamed)."""
    match = CHECKPOINT_NAME.match(os.path.basename(path))
    return int(match["step"]) if match else 0


@dataclass
class Lineage:
    """The run a save folder's checkpoints belong to: a random id written once into `LINEAGE_FILE` in the folder
    and into every checkpoint the run saves, kept across restarts (ranks other than 0 only read it). Checkpoints of
    an older version of this package carry no id: the first run to resume from them adopts them, recording each
    file's contents digest, so that later copies of other runs' old files stay strangers."""

    run_id: str
    adopted: Dict[str, str] = field(default_factory=dict)  # file name -> contents digest
    start: Optional[str] = None  # the initial checkpoint the run started from (absolute; "": none; None: unknown)

    @classmethod
    def new(cls) -> "Lineage":
        return cls(uuid.uuid4().hex)

    @classmethod
    def read(cls, directory: str) -> Optional["Lineage"]:
        """The folder's lineage, None when it has none yet; a damaged file is one line naming it."""
        path = os.path.join(directory, LINEAGE_FILE)
        if not os.path.isfile(path):
            return None
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
            return cls(str(data["run_id"]), {str(k): str(v) for k, v in data.get("adopted", {}).items()},
                       data.get("start"))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise UserError(f"cannot read {path} (which run the checkpoints there belong to): {err}; restore it, "
                            f"or start a new run in another folder") from err

    def write(self, directory: str) -> None:
        save_json_atomic({"run_id": self.run_id, "adopted": self.adopted, "start": self.start},
                         os.path.join(directory, LINEAGE_FILE))

    def stranger(self, path: str, values: Dict) -> str:
        """Why the checkpoint `values` read from `path` is not of this lineage ("" when it is)."""
        stored = values.get(RUN_ID_KEY)
        if stored is not None:
            return "" if stored == self.run_id else f"it belongs to another run (run id {stored}, this run's {self.run_id})"
        digest = self.adopted.get(os.path.basename(path))
        if digest is None:
            return "it carries no run id and is not one of the checkpoints this run adopted"
        return "" if digest == contents_digest(values) else "its contents changed since this run adopted it"

    def owns(self, path: str, plan: StepPlan) -> bool:
        """Whether `path` is a checkpoint of this lineage, numbered with its stored step, for the same data plan:
        the only files a run may delete. Reads the small values only, except for adopted files."""
        wanted = set(PROGRESS_KEYS + PLAN_KEYS + (RUN_ID_KEY,))
        try:
            if os.path.basename(path) in self.adopted:
                values = read_checkpoint(path)
            else:
                values = ms.load_checkpoint(path, choice_func=wanted.__contains__)
        except Exception:  # MindSpore raises ValueError/RuntimeError for damaged or foreign files
            return False
        same_plan = all(int(_scalar(values[key])) == value for key, value in plan.signature().items()
                        if key in values)
        return same_plan and not self.stranger(path, values) and not _step_mismatch(path, values)


def _step_mismatch(path: str, values: Dict) -> str:
    """Why the checkpoint's stored step is not its name's ("" when it is, or when the name carries none)."""
    match = CHECKPOINT_NAME.match(os.path.basename(path))
    if not match or not all(key in values for key in PROGRESS_KEYS):
        return ""
    accumulation = int(_scalar(values["accumulation_steps"])) if "accumulation_steps" in values else 1
    stored = int(_scalar(values["micro_step"])) // max(accumulation, 1)
    return "" if stored == int(match["step"]) else f"its name says step {match['step']} but it holds step {stored}"


def _scalar(value) -> float:
    return float(value.asnumpy()) if hasattr(value, "asnumpy") else float(value)


@dataclass(frozen=True)
class RunIdentity:
    """What a run trains: its network (AlbertConfig's fields), optimizer and data (`rows_fingerprint`), recorded in
    each of its train checkpoints with the kind of run (its checkpoint prefix: albert_pretrain, albert_race, ...,
    which tells serving a RACE head from a regression's) and every setting of the run (what an HF export's model
    card tells of its training). A resumed run must train the same: the data plan's numbers alone let another
    network whose parameters have the same shapes (more layers sharing one set, pre-LN), another optimizer or other
    data of the same size continue silently."""

    network: Dict[str, object]
    optimizer: str
    data: str
    kind: str
    settings: Dict[str, object] = field(default_factory=dict)  # the run's settings (run_settings), for its model card
    tokenizer: Dict[str, object] = field(default_factory=dict)  # the data's (trained_tokenizer), for serving's check
    task: Dict[str, object] = field(default_factory=dict)  # the data's (trained_data_task), for evaluation and serving

    def entries(self) -> Dict[str, str]:
        return dict(zip(IDENTITY_KEYS, (json.dumps(self.network, sort_keys=True), self.optimizer, self.data,
                                        self.kind, json.dumps(self.settings, sort_keys=True),
                                        json.dumps(self.tokenizer, sort_keys=True),
                                        json.dumps(self.task, sort_keys=True))))

    def check(self, values: Dict, path: str, settings: TrainSettings, log: Callable[[str], None],
              from_init: bool = False) -> None:
        """Refuse to resume from `values` (read from `path`) when they were trained as another run, naming each
        difference; warn of a changed precision, dropout or learning setting (_changed_learning). Checkpoints
        written before runs recorded this pass. `from_init`: `path` is the initial checkpoint, not the save
        folder's own (other_start)."""
        network, optimizer, data = IDENTITY_KEYS[:3]
        refused, warned = [], []
        if network in values:
            stored = json.loads(str(values[network]))
            for key in sorted(set(stored) | set(self.network)):
                before, now = stored.get(key), self.network.get(key)
                if before != now and key not in NETWORK_MAY_CHANGE:
                    (warned if key in NETWORK_CHANGE_WARNED else refused).append(
                        f"net_cfg.{key}: checkpoint {before}, now {now}")
        if optimizer in values and str(values[optimizer]) != self.optimizer:
            refused.append(f"optimizer: checkpoint {values[optimizer]}, now {self.optimizer}")
        if data in values and str(values[data]) != self.data:
            refused.append(f"{settings.flag('data')}: {settings.data} holds other rows than the data the checkpoint "
                           f"was trained on")
        warned += _changed_learning(values, self.settings)
        if refused:
            raise UserError(f"{path} was written by a run that trained something else ({'; '.join(refused)}); "
                            f"{other_start(settings, from_init)}")
        if warned:
            log(f"warning: resuming {path} with other settings ({'; '.join(warned)}): the steps up to it ran with "
                f"the checkpoint's, the rest run with these")


def _changed_learning(values: Dict, settings: Dict[str, object]) -> List[str]:
    """The settings that change how the rest of a resumed run learns (its optimizer's, e.g. the learning rate, and
    gradient clipping) where they differ from the checkpoint's: allowed, said in a warning (was: unsaid). A key
    the checkpoint's version did not record has nothing to compare with."""
    if "run_settings" not in values:
        return []
    stored, prefix = json.loads(str(values["run_settings"])), f"optimizer_cfg.{settings.get('optimizer')}."
    return [f"{key}: checkpoint {stored[key]}, now {settings[key]}" for key in sorted(set(stored) & set(settings))
            if (key == "clip_norm" or key.startswith(prefix)) and stored[key] != settings[key]]


def trained_tokenizer(data_meta: Dict[str, object]) -> Dict[str, object]:
    """What a checkpoint records of the tokenizer its data was made with (the data's .meta.json says): enough to
    tell another vocabulary (its file's digest) or casing, without a path of this machine."""
    tokenizer = data_meta.get("tokenizer") or {}
    kept = {key: tokenizer[key] for key in ("kind", "model_sha256", "file_sha256", "do_lower_case", "vocab_size")
            if key in tokenizer}
    if tokenizer.get("model_file"):
        kept["model_file"] = os.path.basename(str(tokenizer["model_file"]))
    return kept


# What a fine-tuning checkpoint records of its data's task (run_task), from the data's .meta.json.
TASK_RECORD_KEYS = ("task_name", "label_list", "max_seq_length")
FINETUNING_KINDS = ("classifier", "race", "squad")  # the .meta.json `kind`s of fine-tuning data


def trained_data_task(data_meta: Dict[str, object]) -> Dict[str, object]:
    """What a checkpoint records of the task its fine-tuning data was made for (the data's .meta.json says): the
    GLUE task, so that evaluating or predicting another task's data with it is refused (src.tasks.registry's
    check_same_task); its label names and sequence length, which src.predict would otherwise have to be told.
    {} for pretraining data."""
    if data_meta.get("kind") not in FINETUNING_KINDS:
        return {}
    return {key: data_meta[key] for key in TASK_RECORD_KEYS if data_meta.get(key) is not None}


def check_data_tokenizer(trained: Dict[str, object], data_meta: Dict[str, object], trained_by: str, data: str) -> None:
    """Data made with another vocabulary or casing than the weights were trained on (`trained`: a checkpoint's
    run_tokenizer, or the training data's tokenizer record; `trained_by` says which, ending in "made with") feeds
    them ids that mean other words: fine-tuning, evaluation and pretrain_eval ran on it without a word, scoring
    near chance."""
    given = data_meta.get("tokenizer") or {}
    if not same_ids(trained, given):
        raise UserError(f"{data} was made with {tokenizer_record(given)}, but {trained_by} "
                        f"{tokenizer_record(trained)}: its ids would mean other words to the network; make the data "
                        f"with that vocabulary and casing")


def run_settings(values: Dict[str, object]) -> Dict[str, object]:
    """A run's settings as a checkpoint records them: every dotted key but the paths (files and folders of this
    machine have no place in a file that is shared)."""
    from model_utils.config import flatten

    return {key: value for key, value in flatten(values).items()
            if not re.search(r"(path|dir|file)$", key.rsplit(".", 1)[-1])}


def resume_or_init(train_cell: nn.Cell, network: nn.Cell, plan: StepPlan, settings: TrainSettings,
                   identity: RunIdentity, log: Callable[[str], None] = print) -> Tuple[Progress, Lineage]:
    """Restore the run's state, or start fresh; returns the progress and the lineage the run's checkpoints carry.

    - the newest intact train checkpoint of the save folder's lineage in `settings.save_dir` (see
      newest_train_checkpoint): weights, optimizer state, loss scale and progress are restored, whatever
      `settings.init_checkpoint` says, so a restarted run continues instead of starting over; its data plan and
      `identity` (network, optimizer, data) must match.
    - else a train checkpoint in `init_checkpoint` (not when `init_only`) is resumed the same way, and the run
      continues its lineage unless the save folder has one;
    - else `init_checkpoint` holding weights only (a converted public checkpoint or a network checkpoint), or any
      checkpoint when `init_only` (fine-tuning from a pretraining run): the network's weights are loaded (names
      starting with `allow_missing`, a new task head, may be absent) and training starts at step 0.
    """
    save_dir, start = settings.save_dir, settings.init_checkpoint
    own = newest_train_checkpoint(save_dir, settings.checkpoint_prefix, log) if save_dir else None
    if own:
        if start:
            log(_continuing(save_dir, start, own.lineage.start, settings))
        return _resume(train_cell, own.values, plan, own.path, settings, identity, log), own.lineage
    lineage = (Lineage.read(save_dir) if save_dir else None) or Lineage.new()
    lineage.start = os.path.abspath(start) if start else ""
    if not start:
        if settings.init_only:  # fine-tuning without pretrained weights: rarely meant
            log(f"no {settings.flag('init_checkpoint')}: the whole network starts from random weights")
        return Progress(), lineage
    values = read_checkpoint(start)
    if not settings.init_only and all(key in values for key in PROGRESS_KEYS):
        if save_dir and not Lineage.read(save_dir) and RUN_ID_KEY in values:
            lineage = Lineage(values[RUN_ID_KEY], start=lineage.start)
        return _resume(train_cell, values, plan, start, settings, identity, log, from_init=True), lineage
    from src.training.network_config import network_note

    check_data_tokenizer(checkpoint_tokenizer(values, start), {"tokenizer": identity.tokenizer},
                         f"{start} was trained on data made with", settings.data)
    report = load_weights(network, values, allow_missing=settings.allow_missing, name=start,
                          network_note=network_note(settings.config, start))
    new = f"; new head: {', '.join(report.missing)}" if report.missing else \
        "; the task head too: it holds one (fine-tuned already)" if settings.allow_missing else ""
    log(f"initialised the network from {start} (weights only: training starts at step 0{new})")
    return Progress(), lineage


def _continuing(save_dir: str, start: str, started_from: Optional[str], settings: TrainSettings) -> str:
    """The line of a run that continues the save folder's checkpoints though given an initial one: a warning when
    the folder's run started from another checkpoint (a fine-tuning rerun from other pretrained weights trained
    nothing and reported the old model's scores as the new one's)."""
    if started_from is not None and os.path.abspath(start) != started_from:
        return (f"warning: {save_dir} holds the checkpoints of a run that started from "
                f"{started_from or 'random weights'}: continuing that run, not starting from {start}; to start from "
                f"it, use a new {settings.flag('save_dir')} (or output_dir)")
    return f"{save_dir} already holds this run's checkpoints: continuing from them, not from {start}"


def check_same_start(progress: Progress, device: Device, settings: TrainSettings) -> None:
    """Data parallel needs every rank to resume from the same step. A rank on a machine that cannot see rank 0's
    checkpoints (written on rank 0's machine) would start over from random weights, and the ranks would silently
    average gradients of different models: refuse on every rank at once. (float32 on the wire: exact up to 2^24.)"""
    if device.group_size < 2:
        return
    mine = np.zeros(device.group_size, np.float32)
    mine[device.rank] = progress.micro_step
    steps = all_ranks_sum(mine).astype(np.int64)
    if len(set(steps.tolist())) > 1:
        found = ", ".join(f"rank {rank}: micro-step {step}" for rank, step in enumerate(steps.tolist()))
        raise UserError(f"the ranks would resume from different steps ({found}): every node must see the same "
                        f"checkpoints in {settings.save_dir or settings.flag('init_checkpoint')}; put it on storage "
                        f"all nodes "
                        f"share, or copy the newest checkpoint to the same path on every node")


@dataclass
class Resumable:
    """A checkpoint to resume from, and the lineage of the folder (adopted from the file when it had none)."""

    path: str
    values: Dict
    lineage: Lineage


def newest_train_checkpoint(directory: str, prefix: str, log: Callable[[str], None] = print) -> Optional[Resumable]:
    """The newest checkpoint in `directory` that reads back intact, holds training progress, holds the step its
    name says and belongs to the folder's lineage. Every other file is named in a warning and left on disk for the
    user to inspect. Damaged files and no intact one in a folder a run has recorded its lineage in: one line
    (starting over would silently lose the run)."""
    lineage = Lineage.read(directory) if os.path.isdir(directory) else None
    damaged = []
    for _, path in reversed(list_checkpoints(directory, prefix)):
        try:
            values = read_checkpoint(path)
        except UserError as err:
            log(f"warning: skipping {path}: {err}")
            damaged.append(path)
            continue
        why = _not_resumable(path, values, lineage)
        if why:
            log(f"warning: not resuming from {path}: {why} (left in place, never deleted)")
            continue
        if damaged:
            log(f"warning: resuming from {path}, the newest intact checkpoint of this run")
        return Resumable(path, values, lineage or _adopt(directory, prefix, path, values, log))
    if damaged and lineage:
        raise UserError(f"no intact checkpoint of this run to resume from in {directory}: {', '.join(damaged)} "
                        f"{'is' if len(damaged) == 1 else 'are'} damaged; restore from a copy, or move "
                        f"{'it' if len(damaged) == 1 else 'them'} out of the folder to start over")
    return None


def _not_resumable(path: str, values: Dict, lineage: Optional[Lineage]) -> str:
    """Why a readable checkpoint may not be resumed from ("" when it may)."""
    if not all(key in values for key in PROGRESS_KEYS):
        return "it holds no training progress (not written by a training run)"
    return (lineage.stranger(path, values) if lineage else "") or _step_mismatch(path, values)


def _adopt(directory: str, prefix: str, path: str, values: Dict, log: Callable[[str], None]) -> Lineage:
    """The lineage of a folder that has none recorded: the run id `values` carry (checkpoints moved to a new
    folder continue their run), or, for checkpoints an older version wrote, a new id adopting this file and the
    older id-less train checkpoints beside it."""
    if RUN_ID_KEY in values:
        return Lineage(values[RUN_ID_KEY])
    lineage = Lineage.new()
    for _, older in list_checkpoints(directory, prefix):
        try:
            found = values if older == path else read_checkpoint(older)
        except UserError:
            continue
        if RUN_ID_KEY not in found and not _not_resumable(older, found, None):
            lineage.adopted[os.path.basename(older)] = contents_digest(found)
    log(f"{directory}: {len(lineage.adopted)} checkpoint(s) written before runs recorded their lineage adopted "
        f"as run {lineage.run_id}")
    return lineage


def _resume(train_cell: nn.Cell, values: Dict, plan: StepPlan, path: str, settings: TrainSettings,
            identity: RunIdentity, log: Callable[[str], None], from_init: bool = False) -> Progress:
    """Weights, optimizer state, loss scale and progress from a train checkpoint written for this plan and run."""
    _check_plan(values, plan, path, settings, from_init)
    identity.check(values, path, settings, log, from_init)
    load_weights(train_cell, {k: v for k, v in values.items() if k not in PROGRESS_KEYS + PLAN_KEYS}, name=path)
    progress = Progress(micro_step=int(_scalar(values["micro_step"])),
                        overflow_count=int(_scalar(values["overflow_count"])))
    set_dropout_clock(train_cell, progress.micro_step)
    log(f"resumed from {path}: optimizer step {progress.micro_step // plan.accumulation_steps} of "
        f"{plan.total_steps}")
    return progress


def set_dropout_clock(cell: nn.Cell, micro_steps: int) -> None:
    """Set the network's dropout clock (if it has one) to the micro-steps run: the train-step cell counts one per
    micro-step, so the resumed run draws the masks the uninterrupted one would have (checkpoints written before the
    clock existed resume the same way)."""
    for param in cell.get_parameters():
        if param.name == DROPOUT_CALLS:
            param.set_data(Tensor(np.array([micro_steps]).astype(np.int32)))


def _check_plan(values: Dict, plan: StepPlan, path: str, settings: TrainSettings, from_init: bool) -> None:
    mine = plan.signature()
    changed = [f"{key}: checkpoint {int(_scalar(values[key]))}, now {mine[key]}"
               for key in PLAN_KEYS if key in values and int(_scalar(values[key])) != mine[key]]
    if changed:
        raise UserError(f"{path} was written by a run that read its data differently ({'; '.join(changed)}); "
                        f"{other_start(settings, from_init)}")


def other_start(settings: TrainSettings, from_init: bool) -> str:
    """What a run refused to resume a checkpoint can do instead. Resuming its own save folder: start a new run
    elsewhere; the checkpoint given as the initial one (continued pretraining on other data, say), the save folder
    holding none of its own: take its weights only."""
    if from_init and "init_only" in settings.flags:
        return (f"resume with the same settings, or start from its weights only (step 0, fresh optimizer state) with "
                f"--{settings.flag('init_only')} true")
    return f"resume with the same settings, or start a new run in another {settings.flag('save_dir')}"


def check_checkpoint_space(directory: str, cell: nn.Cell, save_flag: str = "save_checkpoint_path",
                           files: int = 1) -> None:
    """Fail before any training time is spent when `files` more checkpoints of `cell` cannot be written to
    `directory` (unwritable, read-only, full): reserve their size in a temporary file there, then delete it."""
    one = sum(p.nbytes for p in cell.get_parameters()) + (1 << 20)  # tensors + names and framing
    size = one * files
    needs = f"{'one checkpoint needs' if files == 1 else f'{files} checkpoints of {one / 2 ** 20:.1f} MiB need'} " \
        f"{size / 2 ** 20:.1f} MiB"
    try:
        handle, probe = tempfile.mkstemp(prefix=".tmp-space-", dir=directory)
    except OSError as err:
        raise UserError(f"cannot write checkpoints to {directory}: {err.strerror or err}") from err
    try:
        try:
            os.posix_fallocate(handle, 0, size)
        except OSError as err:
            if err.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise UserError(f"cannot write checkpoints to {directory}: {err.strerror} ({needs}); free space or "
                                f"set {save_flag}") from err
            free = shutil.disk_usage(directory).free  # a file system without fallocate
            if free < size:
                raise UserError(f"cannot write checkpoints to {directory}: {needs}, {free / 2 ** 20:.1f} MiB free")
    finally:
        os.close(handle)
        os.remove(probe)


def weights_digest(cell: nn.Cell) -> str:
    """sha256 of every trainable parameter's bytes: equal on all ranks when data parallel kept them in sync."""
    digest = hashlib.sha256()
    for param in cell.trainable_params():
        digest.update(param.name.encode())
        digest.update(np.ascontiguousarray(param.asnumpy()).tobytes())
    return digest.hexdigest()
