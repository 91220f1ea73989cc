"""The fine-tuning scripts (scripts/run_{classifier,race,squad_v1,squad_v2}_{single,distribute}.sh) as documented,
on CPU: usage, argument errors, the launch commands, and real data-parallel fine-tuning with two msrun workers.

Data parallel is checked the way tests/test_pretrain_scripts.py checks pretraining: with dropout 0, 2 workers of
train_batch_size 4 must end where one process on train_batch_size 8 ends, up to float rounding. That holds only if
each step's two worker batches are exactly the two halves of the single run's batch (the driver deals every epoch's
permutation round-robin to the ranks), so it proves the ranks read disjoint rows that together cover the
single run's data. Distributed evaluation must give byte-identical prediction files to a one-process evaluation of
the same checkpoint, with every row counted once. SQuAD v1.1's distributed evaluation is checked across machines in
tests/test_multi_machine.py; here v2.0's (beam search, null odds) stands for the question-answering heads.
"""
import json
import os
import re
import sys
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np
import pytest

from tests.finetune_helpers import TINY_FINETUNE, make_glue, make_race, make_squad
from tests.pretrain_helpers import ENV, ROOT, SCRIPTS, bash, distributed_digests, free_port, ok, weights

TASKS = ("classifier", "race", "squad_v1", "squad_v2")
TASK_FLAG = {"classifier": "--train_data_file_path", "race": "--train_data_file_path",
             "squad_v1": "--eval_json_path", "squad_v2": "--null_score_diff_threshold"}


def script(task: str, mode: str) -> Path:
    return SCRIPTS / f"run_{task}_{mode}.sh"


@pytest.mark.parametrize("mode", ["single", "distribute"])
@pytest.mark.parametrize("task", TASKS)
def test_help_names_the_main_flags_and_a_complete_example(task, mode):
    for flag in ("-h", "--help"):
        result = ok(bash([script(task, mode), flag]))
        assert result.stdout.startswith(f"usage: bash scripts/run_{task}_{mode}.sh "), result.stdout[:200]
    text = result.stdout
    for needed in ("--train_data_file_path", "--eval_data_file_path", "--load_pretrain_checkpoint_path",
                   "--load_finetune_checkpoint_path", "--do_train", "--do_eval", "--do_predict", TASK_FLAG[task],
                   f"run_{task}.py", "Example", f"bash scripts/run_{task}_{mode}.sh ", "DEVICE_TARGET"):
        assert needed in text, needed
    example = text[text.index("Example"):]
    assert "src.create_" in example and "src.convert_checkpoint" in example
    if mode == "distribute":
        for needed in ("LAUNCHER", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "HOSTFILE", "DRY_RUN"):
            assert needed in text, needed
    else:
        assert f"OUTPUT_DIR/logs/{task}.log" in text and "DEVICE_ID" in text


def test_usage_says_how_each_launcher_is_started_on_several_machines():
    for path in (script("classifier", "distribute"), SCRIPTS / "run_pretrain_distribute.sh"):
        text = " ".join(ok(bash([path, "-h"])).stdout.split())
        assert "With msrun, start this script once on each machine" in text
        assert "With mpirun, start it once, on one machine, with HOSTFILE" in text
        assert "start this script once on each machine (default" not in text


@pytest.mark.parametrize("task", TASKS)
def test_missing_arguments_exit_2_with_the_usage(task, tmp_path):
    for args in ([script(task, "single")], [script(task, "distribute")], [script(task, "distribute"), 2]):
        result = bash(args, cwd=tmp_path)
        assert result.returncode == 2 and result.stderr.startswith("usage:"), (args, result.stderr[:200])
    bad = bash([script(task, "distribute"), "two", "out"], cwd=tmp_path)
    assert bad.returncode == 2 and "DEVICE_NUM must be a positive integer, got 'two'" in bad.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("task", TASKS)
def test_dry_run_prints_the_msrun_command(task, tmp_path):
    result = ok(bash([script(task, "distribute"), 2, "out", "--train_data_file_path", "data/train.mindrecord"],
                     {"DRY_RUN": "1", "DEVICE_TARGET": "CPU", "MASTER_PORT": "9123"}, cwd=tmp_path))
    out = tmp_path / "out"
    assert result.stdout.startswith("MS_NODE_TIMEOUT=30 msrun --worker_num=2 --local_worker_num=2 "
                                    f"--master_addr=127.0.0.1 --master_port=9123 --node_rank=0 "
                                    f"--log_dir={out}/logs/msrun_node0 --join=True --cluster_time_out=300 "
                                    f"--tail_worker_log=-2 {ROOT}/run_{task}.py --distribute true --device_num 2 "
                                    f"--device_target CPU --output_dir {out} "
                                    f"--train_data_file_path data/train.mindrecord"), result.stdout
    assert not out.exists()  # a dry run creates nothing
    multi = ok(bash([script(task, "distribute"), 4, out], {"DRY_RUN": "1", "NNODES": "2", "NODE_RANK": "1",
                                                           "MASTER_ADDR": "10.0.0.1"}))
    assert multi.stdout.startswith("MS_NODE_TIMEOUT=30 msrun --worker_num=8 --local_worker_num=4 "
                                   "--master_addr=10.0.0.1 --master_port=8118 --node_rank=1 ")
    assert "--distribute true --device_num 8 --device_target auto" in multi.stdout


# The variables scripts/common.sh forwards to mpirun's other machines, in its order, when they are set
# (ALBERT_LOG_TEED always: the launcher's logs hold the workers' output, which then write no log of their own).
MPIRUN_FORWARDS = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "CUDA_HOME", "NCCL_SOCKET_IFNAME", "NCCL_DEBUG", "GLOG_v",
                   "ALBERT_LOG_TEED")


def test_mpirun_commands_and_refusals(tmp_path):
    launch = script("squad_v1", "distribute")
    default = ok(bash([launch, 8, tmp_path], {"DEVICE_TARGET": "GPU", "DRY_RUN": "1"}))
    assert default.stdout.startswith("MS_NODE_TIMEOUT=30 msrun --worker_num=8 ")  # msrun on every target
    root = ["--allow-run-as-root"] if os.getuid() == 0 else []
    gpu = ok(bash([launch, 8, tmp_path, "--epoch_num", "2"], {"DEVICE_TARGET": "GPU", "DRY_RUN": "1",
                                                              "LAUNCHER": "mpirun", "CUDA_HOME": "/usr/local/cuda"}))
    assert gpu.stdout.startswith(" ".join(["mpirun -n 8", *root, "-x PATH"]))
    given = dict(ENV, PATH="set", CUDA_HOME="set", ALBERT_LOG_TEED="1")  # what bash() passes, what the script sets
    assert re.findall(r" -x (\S+)", gpu.stdout) == [name for name in MPIRUN_FORWARDS if name in given]
    assert f" --bind-to none --output-filename {tmp_path}/logs/mpirun --merge-stderr-to-stdout " in gpu.stdout
    fenced = ok(bash([launch, 8, tmp_path], {"DEVICE_TARGET": "GPU", "DRY_RUN": "1", "LAUNCHER": "mpirun",
                                             "MPI_IF_INCLUDE": "10.0.0.0/24", "NCCL_SOCKET_IFNAME": "eth1"}))
    assert " -x NCCL_SOCKET_IFNAME " in fenced.stdout  # NCCL's sockets and Open MPI's own on the cluster network
    assert (" --bind-to none --mca oob_tcp_if_include 10.0.0.0/24 --mca btl_tcp_if_include 10.0.0.0/24 "
            "--output-filename ") in fenced.stdout
    assert f"run_squad_v1.py --distribute true --device_num 8 --device_target GPU --output_dir {tmp_path} " \
           f"--epoch_num 2" in gpu.stdout
    hosts = ok(bash([launch, 8, tmp_path], {"DEVICE_TARGET": "GPU", "DRY_RUN": "1", "NNODES": "2",
                                            "HOSTFILE": "hosts.txt", "LAUNCHER": "mpirun"}))
    assert hosts.stdout.startswith("mpirun -n 16 ")
    assert "--bind-to none --hostfile hosts.txt --map-by ppr:8:node " in hosts.stdout
    no_hosts = bash([launch, 8, tmp_path], {"DEVICE_TARGET": "GPU", "DRY_RUN": "1", "NNODES": "2",
                                            "LAUNCHER": "mpirun"})
    assert no_hosts.returncode == 2 and "needs HOSTFILE" in no_hosts.stderr
    for task in TASKS:
        refused = bash([script(task, "distribute"), 2, tmp_path], {"LAUNCHER": "mpirun", "DEVICE_TARGET": "CPU",
                                                                   "DRY_RUN": "1"})
        assert refused.returncode == 2 and "use LAUNCHER=msrun on CPU" in refused.stderr
        assert refused.stdout == ""
    unknown = bash([launch, 2, tmp_path], {"LAUNCHER": "srun"})
    assert unknown.returncode == 2 and "LAUNCHER must be msrun or mpirun, got 'srun'" in unknown.stderr


@pytest.mark.parametrize("version, accepted", [("mpirun (Open MPI) 4.1.2", True), ("mpirun (Open MPI) 5.0.3", False),
                                               ("HYDRA build details:", False), (None, False)])
def test_mpirun_must_be_open_mpi_4(version, accepted, tmp_path):
    """A fake mpirun on PATH: Open MPI 4.x is started with the documented command, anything else refused."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if version is not None:
        fake = bin_dir / "mpirun"
        fake.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "{version}"; exit 0; fi\n'
                        f'printf "%s " "$@" > {tmp_path}/started\n')
        fake.chmod(0o755)
    python_dir = Path(sys.executable).parent
    path = f"{bin_dir}:{python_dir}:/usr/bin:/bin"
    result = bash([script("classifier", "distribute"), 2, tmp_path / "out"],
                  {"LAUNCHER": "mpirun", "DEVICE_TARGET": "GPU", "PATH": path})
    if accepted:
        ok(result)
        started = (tmp_path / "started").read_text()
        assert started.startswith("-n 2 ") and "--bind-to none" in started and "run_classifier.py" in started
    else:
        assert result.returncode == 2 and not (tmp_path / "started").exists()
        wanted = "no mpirun on PATH" if version is None else f"needs Open MPI 4.x, found '{version}'"
        assert wanted in result.stderr


@pytest.mark.parametrize("task", TASKS)
def test_single_script_logs_and_returns_the_job_exit_code(task, tmp_path):
    failed = bash([script(task, "single"), "out", "--no_such_key", "1"], {"DEVICE_TARGET": "CPU"}, cwd=tmp_path)
    log = tmp_path / "out" / "logs" / f"{task}.log"
    assert failed.returncode == 2, failed.stdout + failed.stderr
    assert failed.stdout.startswith(f"logs: {log}\n+ ")
    assert f"run_{task}.py --output_dir {tmp_path / 'out'} --device_target CPU --device_id 0 --no_such_key 1" \
        in failed.stdout
    assert "unknown option '--no_such_key'" in failed.stdout and "unknown option" in log.read_text()


def test_a_failing_distributed_job_fails_the_script(tmp_path):
    """msrun reports any worker's failure as its own exit code 1 (the worker's code 2 is not passed on)."""
    result = bash([script("classifier", "distribute"), 2, "out", "--no_such_key", "1"],
                  {"DEVICE_TARGET": "CPU", "MASTER_PORT": str(free_port())}, cwd=tmp_path, timeout=120)
    assert result.returncode != 0
    assert f"logs: {tmp_path}/out/logs (this node's launcher output: {tmp_path}/out/logs/launcher_node0.log)" \
        in result.stdout
    workers = sorted((tmp_path / "out" / "logs" / "msrun_node0").glob("worker_*.log"))
    assert len(workers) == 2 and all("unknown option '--no_such_key'" in log.read_text() for log in workers)
    # The script ends with one line naming the worker, its error and its log (msrun's traceback stays in its log).
    assert result.stderr.startswith("error: the distributed job failed: rank 0 on node 0 stopped with: unknown "
                                    "option '--no_such_key'"), result.stderr
    assert f"log: {workers[0]}. Correct that" in result.stderr and len(result.stderr.splitlines()) == 1
    assert "Traceback" not in result.stdout + result.stderr


# ---------------------------------------------------------------------------------------------------------------
# Real data-parallel fine-tuning: 2 msrun workers on CPU against one process.

NO_DROPOUT = ["--net_cfg.hidden_dropout_prob", "0", "--net_cfg.attention_probs_dropout_prob", "0"]
# 6 AdamWeightDecay steps of lr 1e-3 move the weights by ~1e-3..1e-2 (a single run on batch 4 instead of 8 ends
# 7.7e-3 away); two workers vs one process differ by float rounding only (measured <= 1.3e-6).
DP_TRAIN = ["--train_steps", "6", "--log_steps", "1", "--optimizer_cfg.AdamWeightDecay.learning_rate", "1e-3",
            "--optimizer_cfg.AdamWeightDecay.warmup_steps", "0", *NO_DROPOUT]


def check_data_parallel(task: str, work: Path, flags: List[str], head: Sequence[str], prediction_files: Sequence[str],
                        eval_rows: int, train_rows: int) -> Dict[str, dict]:
    """Fine-tune with 2 msrun workers (batch 4 each) and with one process (batch 8), both through the scripts and
    with data paths relative to `work` (the current directory); check the weights, the evaluation and the
    predictions; returns the distributed and the single eval_results.json."""
    checkpoint = f"checkpoints/albert_{task}-6.ckpt"
    single = ok(bash([script(task, "single"), "single", *flags, "--train_batch_size", "8", "--do_eval", "false"],
                     cwd=work))
    assert "device: CPU (1 worker(s))" in single.stdout
    assert (work / "single" / "logs" / f"{task}.log").read_text().count("device: ") == 1  # the script's log alone
    launched = bash([script(task, "distribute"), 2, "dp", *flags, "--train_batch_size", "4"],
                    {"DEVICE_TARGET": "CPU", "MASTER_PORT": str(free_port())}, cwd=work, timeout=300)
    logs = work / "dp" / "logs"
    assert launched.returncode == 0, launched.stdout[-3000:] + "".join(
        log.read_text()[-3000:] for log in sorted(logs.glob("**/worker_*.log")))
    rank0 = (logs / "msrun_node0" / "worker_0.log").read_text()
    assert "device: CPU (2 worker(s))" in rank0
    # Each rank reads its own batches of 4: half of every step's 8 rows of the single run.
    assert f"plan: {train_rows} rows; per rank {train_rows // 2 // 4} batches of 4 per epoch; 6 optimizer steps x 1 " \
           f"micro-batch(es) x 2 rank(s)" in rank0

    digests = distributed_digests(logs)
    assert [line.split(":")[0].split()[-1] for line in digests] == ["0", "1"], digests
    assert len({line.split()[-1] for line in digests}) == 1, digests  # both ranks hold the same weights
    ours = weights(work / "dp" / checkpoint, head)
    reference = weights(work / "single" / checkpoint, head)
    assert set(ours) == set(reference) and any(name.startswith(tuple(head[1:])) for name in ours)
    for name in reference:
        np.testing.assert_allclose(ours[name], reference[name], rtol=1e-4, atol=2e-5, err_msg=name)

    # Distributed evaluation: every row once, the same files as one process evaluating the saved checkpoint.
    assert f"eval: {eval_rows} rows of " in rank0
    dp_results = json.loads((work / "dp" / "eval" / "eval_results.json").read_text())
    assert dp_results["rows"] == eval_rows and dp_results["devices"] == 2
    alone = ok(bash([script(task, "single"), "alone", *flags, "--do_train", "false",
                     "--load_finetune_checkpoint_path", f"dp/{checkpoint}"], {"DEVICE_TARGET": "CPU"}, cwd=work))
    assert (work / "alone" / "logs" / f"{task}.log").read_text().count("wrote ") >= 2
    assert f"with {work / 'dp' / checkpoint}" in alone.stdout  # the path as eval_results.json records it
    alone_results = json.loads((work / "alone" / "eval" / "eval_results.json").read_text())
    assert alone_results["rows"] == eval_rows and alone_results["devices"] == 1
    for name in prediction_files:
        assert (work / "dp" / "eval" / name).read_bytes() == (work / "alone" / "eval" / name).read_bytes(), name
    for key in set(dp_results) - {"devices", "checkpoint"}:
        assert dp_results[key] == alone_results[key], key
    return {"dp": dp_results, "alone": alone_results}


@pytest.mark.slow
def test_classifier_two_msrun_workers_match_one_process(assets, tmp_path):
    make_glue(tmp_path, "mrpc", train_rows=64, dev_rows=30, seq=32)
    flags = [*TINY_FINETUNE, "--train_data_file_path", "mrpc_train.mindrecord", "--eval_data_file_path",
             "mrpc_dev.mindrecord", "--classifier_dropout_prob", "0", "--assessment_method", "f1",
             "--eval_batch_size", "8", *DP_TRAIN]
    results = check_data_parallel("classifier", tmp_path, flags, ("albert.", "classifier."), ["predictions.tsv"],
                                  eval_rows=30, train_rows=64)
    assert results["dp"]["examples"] == 30 and results["dp"]["task"] == "mrpc"
    assert len((tmp_path / "dp" / "eval" / "predictions.tsv").read_text().splitlines()) == 1 + 30


@pytest.mark.slow
def test_race_two_msrun_workers_match_one_process(assets, tmp_path):
    """Multiple choice ([B, 4, S] rows): 22 training questions (per rank 2 batches of 4 per epoch), 17 evaluated,
    an odd count split 9 / 8."""
    make_race(tmp_path, seq=64)
    flags = [*TINY_FINETUNE, "--train_data_file_path", "race_train.mindrecord", "--eval_data_file_path",
             "race_dev.mindrecord", "--eval_batch_size", "4", "--net_cfg.max_position_embeddings", "64",
             "--classifier_dropout_prob", "0", *DP_TRAIN]
    results = check_data_parallel("race", tmp_path, flags, ("albert.", "classifier."), ["predictions.tsv"],
                                  eval_rows=17, train_rows=22)
    assert results["dp"]["task"] == "race" and results["dp"]["examples"] == 17


@pytest.mark.slow
def test_squad_v2_two_msrun_workers_match_one_process(assets, tmp_path):
    """Google's v2 head (beam search, answer class): the same weights, answers, n-best lists and null odds."""
    data = make_squad(tmp_path, "2.0", paragraphs=2, seq=64)
    from src.data.pipelines import count_rows

    train_rows, eval_rows = count_rows(str(data["train"])), count_rows(str(data["dev"]))
    flags = [*TINY_FINETUNE, "--train_data_file_path", data["train"].name, "--eval_data_file_path",
             data["dev"].name, "--eval_json_path", data["dev_json"].name, "--eval_batch_size", "8",
             "--classifier_dropout_prob", "0", *DP_TRAIN]  # the answer-class head's dropout
    results = check_data_parallel("squad_v2", tmp_path, flags, ("albert.", "start_logits.", "end_logits.",
                                                                 "answer_class."),
                                  ["predictions.json", "nbest_predictions.json", "null_odds.json"], eval_rows,
                                  train_rows)
    questions = sum(len(p["qas"]) for article in json.loads(data["dev_json"].read_text())["data"]
                    for p in article["paragraphs"])
    assert results["dp"]["questions"] == questions and results["dp"]["version"] == "2.0"
    assert {"HasAns_total", "NoAns_total", "best_f1"} <= set(results["dp"])


@pytest.mark.parametrize("function, log", [("albert_run_single LOG true.py", "LOG"),
                                           ("albert_run_distributed 1 OUT true.py", "OUT/logs/launcher_node0.log")])
def test_a_log_file_is_never_written_through_a_link(function, log, tmp_path):
    """The scripts append the job's output to a log (single) or write the launcher's there (distribute): a link
    planted where the log goes stops the script with one line before anything runs, its target untouched."""
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file\n")
    path = tmp_path / log.replace("LOG", "run.log").replace("OUT", "out")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(victim)
    command = function.replace("LOG", str(path)).replace("OUT", str(tmp_path / "out"))
    result = bash(["-c", f"source {SCRIPTS / 'common.sh'}; {command}"], {"DEVICE_TARGET": "CPU"})
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (f"error: {path} is a symbolic link or not a regular file: a log "
                                                      f"file is never opened through one; remove it")
    assert victim.read_text() == "the user's file\n"
