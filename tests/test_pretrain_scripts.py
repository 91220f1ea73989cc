"""The pretraining scripts as documented, on CPU: the embedded quick start, a run on given data, the launch
commands, and distributed evaluation with msrun on loopback. Data-parallel training (one machine and several) is
tested in tests/test_multi_machine.py.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pretrain_helpers import ENV, ROOT, SCRIPTS, TINY, bash, free_port, metrics_by_step, ok, run


@pytest.mark.slow
def test_quick_start_runs_end_to_end_and_the_loss_falls(tmp_path):
    out = tmp_path / "quick"
    result = bash([SCRIPTS / "run_pretrain_single.sh"], {"OUTPUT_DIR": str(out), "TRAIN_STEPS": "60",
                                                        "SEQ_LENGTH": "64"})
    ok(result)
    assert f"quick start: writing into {out} (logs: {out / 'logs'})" in result.stdout
    for produced in ("data/corpus.txt", "data/spm.model", "data/train.mindrecord.meta.json",
                     "data/eval.mindrecord.meta.json",
                     "albert_config.json", "checkpoints/albert_pretrain-60.ckpt", "metrics.jsonl", "curves.png",
                     "pretrain_eval.json", "logs/pretrain.log", "logs/eval.log", "logs/data.log"):
        assert (out / produced).is_file(), produced
        assert str(out / produced) in result.stdout or produced.startswith(("logs/", "data/"))
    rows = metrics_by_step(out / "metrics.jsonl")
    assert rows[60]["mlm_loss"] < rows[20]["mlm_loss"] - 0.5  # visibly falls: measured 7.2 -> 6.2 in 60 steps
    metrics = json.loads((out / "pretrain_eval.json").read_text())
    assert set(metrics) >= {"masked_lm_accuracy", "masked_lm_loss", "sentence_order_accuracy", "sentence_order_loss"}


def test_quick_start_refuses_a_train_steps_that_is_not_a_positive_integer(tmp_path):
    """TRAIN_STEPS was shell arithmetic: 'abc' became 0 and an array index ran the command inside it."""
    planted = tmp_path / "planted"
    for value in ("abc", "0", "010", "1e3", "-5", f"a[$(touch {planted})]", "1000000000"):
        result = bash([SCRIPTS / "run_pretrain_single.sh"], {"OUTPUT_DIR": str(tmp_path / "out"), "TRAIN_STEPS": value})
        assert result.returncode == 2, (value, result.stdout, result.stderr)
        assert result.stderr == f"error: TRAIN_STEPS must be a positive integer below 10^9, got '{value}'\n"
    assert not planted.exists() and not (tmp_path / "out").exists()


def test_scripts_name_misplaced_arguments_before_anything_is_written(tmp_path):
    """Flags before OUTPUT_DIR were "realpath: unrecognized option '--train_steps'"; OUTPUT_DIR a file was mkdir's
    "Not a directory"; SEQ_LENGTH abc was refused as `max_seq_length` after the corpus and vocabulary were written."""
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    cases = [(["run_pretrain_single.sh", "--train_steps", "20"], {}, "DATA_DIR comes before the flags, got '--train_steps'"),
             (["run_pretrain_single.sh", "data", a_file], {}, f"OUTPUT_DIR {a_file} is a file, not a folder"),
             (["run_pretrain_single.sh"], {"OUTPUT_DIR": str(a_file)}, f"OUTPUT_DIR {a_file} is a file, not a folder"),
             (["run_pretrain_single.sh"], {"OUTPUT_DIR": str(tmp_path / "q"), "SEQ_LENGTH": "abc"},
              "SEQ_LENGTH must be an integer from 8 to 512 (albert_tiny's positions), got 'abc'"),
             (["run_pretrain_distribute.sh", "2", "--batch_size", "8", "out"], {},
              "DATA_DIR comes before the flags, got '--batch_size'"),
             (["run_classifier_single.sh", "--train_data_file_path", "x"], {},
              "OUTPUT_DIR comes before the flags, got '--train_data_file_path'"),
             (["run_squad_v2_distribute.sh", "2", a_file], {}, f"OUTPUT_DIR {a_file} is a file, not a folder"),
             # a flag the script sets from its arguments (was: logs in one folder, the run's outputs in another)
             (["run_classifier_single.sh", "out", "--output_dir", "other"], {},
              "--output_dir is OUTPUT_DIR, the script's argument: drop the flag"),
             (["run_pretrain_single.sh", "data", "out", "--data_dir=other"], {},
              "--data_dir is DATA_DIR, the script's argument: drop the flag"),
             (["run_race_distribute.sh", "2", "out", "--device_num", "4"], {},
              "--device_num is DEVICE_NUM, the script's argument: drop the flag"),
             # ModelZoo's order DEVICE_ID EPOCH_SIZE DATA_DIR SCHEMA_DIR (was: OUTPUT_DIR 1/logs made, then Python's
             # "unrecognized arguments")
             (["run_pretrain_single.sh", "0", "1", "data", "schema.json"], {},
              "'data' is no flag: after its arguments the script takes only flags")]
    for (script, *args), env, message in cases:
        result = bash([SCRIPTS / script, *args], env)
        hint = " (see --help)" if "comes before" in message or "flag" in message else ""
        assert (result.returncode, result.stderr) == (2, f"error: {message}{hint}\n"), (script, args)
    assert sorted(os.listdir(tmp_path)) == ["a_file"]


def test_single_script_on_given_data_returns_the_job_exit_code(data, tmp_path):
    out = tmp_path / "given"
    result = bash([SCRIPTS / "run_pretrain_single.sh", data["train"], out, *TINY, "--train_steps", "3",
                   "--log_steps", "1"], {"DEVICE_TARGET": "CPU"})
    ok(result)
    assert f"logs: {out / 'logs' / 'pretrain.log'}" in result.stdout
    log = (out / "logs" / "pretrain.log").read_text()  # the script's: run_pretrain.py writes none of its own there
    assert log.count("step 3/3") == 1 and log.count("device: ") == 1 and not log.startswith("--- ")
    failed = bash([SCRIPTS / "run_pretrain_single.sh", data["train"], out, "--no_such_key", "1"])
    assert failed.returncode == 2 and "unknown option '--no_such_key'" in failed.stdout
    assert bash([SCRIPTS / "run_pretrain_single.sh", "--help"]).stdout.startswith("usage:")
    assert bash([SCRIPTS / "run_pretrain_single.sh", "only_one_argument"]).returncode == 2


def test_distribute_script_builds_the_documented_launch_commands(tmp_path):
    gpu = bash([SCRIPTS / "run_pretrain_distribute.sh", 8, "/data/pretrain", tmp_path, "--train_steps", "10"],
               {"DEVICE_TARGET": "GPU", "DRY_RUN": "1"})
    ok(gpu)
    assert gpu.stdout.startswith("MS_NODE_TIMEOUT=30 msrun --worker_num=8 ")
    assert "--distribute true --device_num 8 --device_target GPU" in gpu.stdout
    multi = bash([SCRIPTS / "run_pretrain_distribute.sh", 4, "/data/pretrain", tmp_path],
                 {"DRY_RUN": "1", "NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "9000"})
    ok(multi)
    for part in ("msrun --worker_num=8 --local_worker_num=4 --master_addr=10.0.0.1 --master_port=9000 --node_rank=1",
                 "--join=True", "--device_num 8"):
        assert part in multi.stdout
    refused = bash([SCRIPTS / "run_pretrain_distribute.sh", 2, "/d", tmp_path], {"LAUNCHER": "mpirun",
                                                                                  "DEVICE_TARGET": "CPU"})
    assert refused.returncode == 2 and "use LAUNCHER=msrun on CPU" in refused.stderr
    assert bash([SCRIPTS / "run_pretrain_distribute.sh", "two", "/d", tmp_path]).returncode == 2


@pytest.mark.slow
def test_distributed_evaluation_counts_every_row_once(data, tmp_path):
    ok(run(["run_pretrain.py", "--data_dir", str(data["train"]), "--output_dir", str(tmp_path), *TINY,
            "--train_steps", "3"]))
    checkpoint = tmp_path / "checkpoints" / "albert_pretrain-3.ckpt"
    evaluate = ["--eval_data_dir", str(data["eval"]), "--eval_ckpt", str(checkpoint), "--eval_batch_size", "40",
                "--device_target", "CPU"]
    ok(run(["pretrain_eval.py", *evaluate, "--eval_output_file", str(tmp_path / "single.json")]))
    port = str(free_port())
    result = subprocess.run(["msrun", "--worker_num=2", "--local_worker_num=2", "--master_addr=127.0.0.1",
                             f"--master_port={port}", f"--log_dir={tmp_path / 'logs'}", "--join=True",
                             str(ROOT / "pretrain_eval.py"), *evaluate, "--distribute", "true",
                             "--eval_output_file", str(tmp_path / "two.json")],
                            cwd=ROOT, env=dict(ENV, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}"),
                            capture_output=True, text=True, timeout=300)
    ok(result)
    single = json.loads((tmp_path / "single.json").read_text())
    two = json.loads((tmp_path / "two.json").read_text())
    assert two["examples"] == single["examples"] and two["masked_tokens"] == single["masked_tokens"]
    for key in ("masked_lm_accuracy", "masked_lm_loss", "sentence_order_accuracy", "sentence_order_loss"):
        assert two[key] == pytest.approx(single[key], rel=1e-5), key


def test_ctrl_c_through_a_script_keeps_the_runs_last_words_in_its_log(tmp_path, stop_signals_as_started):
    """Ctrl-C reaches the whole foreground group: tee died first, so the run's `interrupted` line (and anything
    printed while stopping) reached neither the screen nor the log. tee now ignores the interrupt and ends at EOF."""
    import signal
    import time

    job = tmp_path / "job.py"
    # `ready` from inside the try: printed before it, an interrupt landing between the two would end the job with
    # a traceback (exit 1).
    job.write_text("import sys, time\ntry:\n    print('ready', flush=True)\n    time.sleep(60)\n"
                   "except KeyboardInterrupt:\n    time.sleep(0.5)\n    print('interrupted', flush=True)\n"
                   "    sys.exit(130)\n")
    log = tmp_path / "logs" / "job.log"
    script = os.path.relpath(job, ROOT)
    process = subprocess.Popen(["bash", "-c", f'source scripts/common.sh; albert_run_single "{log}" "{script}"'],
                               cwd=ROOT, env=dict(ENV, PYTHON=sys.executable), stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    deadline = time.time() + 30
    while not (log.is_file() and "ready" in log.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does to its foreground group
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 130
    assert "interrupted" in out and log.read_text().endswith("ready\ninterrupted\n")


def common_sh(snippet: str, **kwargs) -> subprocess.CompletedProcess:
    """`snippet` run by bash after `source scripts/common.sh`, as the scripts run their parts."""
    return subprocess.run(["bash", "-c", f"source scripts/common.sh; {snippet}"], cwd=ROOT,
                          env=dict(ENV, PYTHON=sys.executable), capture_output=True, text=True, timeout=60, **kwargs)


def test_the_console_shows_each_line_of_a_job_as_it_comes():
    """The console filter was awk, which (as mawk) reads a pipe in blocks: a job's lines showed up seconds late, in
    bursts, and what it still held was lost to a Ctrl-C. msrun's closing traceback is still left out."""
    import time

    job = ("echo first; sleep 9; echo 'Traceback (most recent call last):'; echo '  File x'; "
           "echo 'RuntimeError: Distributed job exited with exception'; echo last")
    process = subprocess.Popen(["bash", "-c", f"source scripts/common.sh; ({job}) | albert_console_filter"],
                               cwd=ROOT, stdout=subprocess.PIPE, text=True)
    started = time.time()
    assert process.stdout.readline() == "first\n" and time.time() - started < 7  # awk: after the 9 s
    assert process.stdout.read() == "last\n" and process.wait() == 0


def test_a_second_start_keeps_the_logs_of_the_first(tmp_path):
    """A second start on the OUTPUT_DIR of a running job truncated that job's launcher log and deleted its worker
    logs (and showed its lines), before the workers refused it; a rerun after a failure deleted the logs its error
    line named. Now the running job's folder is refused first, and an earlier start's logs are moved aside."""
    from src.common.atomic_files import RUN_LOCK

    out, logs = tmp_path / "out", tmp_path / "out" / "logs"
    (logs / "msrun_node0").mkdir(parents=True)
    (logs / "launcher_node0.log").write_text("the failed run's traceback\n")
    (logs / "msrun_node0" / "worker_1.log").write_text("rank 1's last words\n")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from src.common.atomic_files import "
                               "lock_output; lock_output(sys.argv[1], 'a run'); print('held', flush=True); "
                               "time.sleep(60)", str(out / RUN_LOCK)], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        refused = common_sh(f'DEVICE_TARGET=CPU albert_run_distributed 2 "{out}" run_pretrain.py')
        assert refused.returncode == 2 and f"OUTPUT_DIR {out} is in use by another run (pid {holder.pid}" in \
            refused.stderr
        assert sorted(p.name for p in logs.iterdir()) == ["launcher_node0.log", "msrun_node0"]
    finally:
        holder.kill()
        holder.wait()
    # Before the workers lock OUTPUT_DIR (once the cluster formed), the launching script holds a lock of its own.
    launching = subprocess.Popen(["bash", "-c", f'exec 9>>"{logs}/.launcher_node0.lock"; flock 9; echo held; '
                                  "sleep 60"], stdout=subprocess.PIPE, text=True)
    try:
        assert launching.stdout.readline() == "held\n"
        refused = common_sh(f'DEVICE_TARGET=CPU MASTER_PORT={free_port()} albert_run_distributed 2 "{out}" '
                            f'run_pretrain.py')
        assert refused.returncode == 2 and f"another start is launching into {out}" in refused.stderr
        assert sorted(p.name for p in logs.iterdir()) == [".launcher_node0.lock", "launcher_node0.log", "msrun_node0"]
    finally:
        launching.kill()
        launching.wait()
    fake_msrun = f'bash -c "mkdir -p {logs}/msrun_node0; echo new > {logs}/msrun_node0/worker_0.log; echo started"'
    done = common_sh(f'albert_follow_msrun "{logs}" 0 1 X=1 {fake_msrun}')
    assert done.returncode == 0 and "started" in done.stdout
    assert (logs / "launcher_node0.log.previous").read_text() == "the failed run's traceback\n"
    assert (logs / "msrun_node0.previous" / "worker_1.log").read_text() == "rank 1's last words\n"
    assert not (logs / "msrun_node0" / "worker_1.log").exists()  # no stale log of a worker count since changed
    assert (logs / "launcher_node0.log").read_text() == "started\n"


def test_msrun_stops_when_the_script_that_started_it_is_killed(tmp_path):
    """`kill -9` of a *_distribute.sh script left msrun and its workers training on, detached (the workers die with
    msrun, msrun did not die with the script). msrun now gets SIGTERM when the script dies, even by SIGKILL."""
    import signal
    import time

    logs = tmp_path / "logs"
    logs.mkdir()
    fake_msrun = "bash -c 'echo msrun pid $$; exec sleep 120'"
    script = subprocess.Popen(["bash", "-c", f'source scripts/common.sh; albert_follow_msrun "{logs}" 0 1 X=1 '
                               f'{fake_msrun}'], cwd=ROOT, env=dict(ENV, PYTHON=sys.executable),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    launcher_log = logs / "launcher_node0.log"
    deadline = time.time() + 30
    while "msrun pid" not in (launcher_log.read_text() if launcher_log.exists() else "") and time.time() < deadline:
        time.sleep(0.1)
    msrun = int(launcher_log.read_text().split("msrun pid ")[1].split()[0])
    os.kill(script.pid, signal.SIGKILL)
    script.wait()
    deadline = time.time() + 10
    while time.time() < deadline and os.path.exists(f"/proc/{msrun}") and \
            Path(f"/proc/{msrun}/stat").read_text().split()[2] != "Z":
        time.sleep(0.1)
    gone = not os.path.exists(f"/proc/{msrun}") or Path(f"/proc/{msrun}/stat").read_text().split()[2] == "Z"
    for pid, kill in ((msrun, os.kill), (script.pid, os.killpg)):  # whatever is left (tail, the filter, a fake msrun)
        try:
            kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert gone, "msrun outlived the script that started it"


def in_use(folder: Path) -> bool:
    from model_utils.errors import UserError
    from src.common.atomic_files import check_not_in_use

    try:
        check_not_in_use(str(folder), "")
    except UserError:
        return True
    return False


@pytest.mark.slow
def test_a_script_stopped_by_a_scheduler_stops_its_run_which_the_same_command_resumes(data, tmp_path,
                                                                                      stop_signals_as_started):
    """SIGTERM to the script alone (a scheduler's stop) ended the script but left its training running on, detached,
    holding OUTPUT_DIR (running the script again was refused), and a run stopped by SIGTERM or Ctrl-C ended
    without a word. Now the run stops between steps with a line naming its newest checkpoint, exits 143, and the
    same command resumes from that checkpoint."""
    import signal
    import time

    out = tmp_path / "out"
    command = [SCRIPTS / "run_pretrain_single.sh", data["train"], out, *TINY, "--train_steps", "4000", "--log_steps",
               "1", "--save_checkpoint_steps", "20", "--save_checkpoint_num", "1"]
    script = subprocess.Popen(["bash", *map(str, command)], cwd=ROOT, env=dict(ENV, PYTHON=sys.executable),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    metrics, log = out / "metrics.jsonl", out / "logs" / "pretrain.log"
    deadline = time.time() + 240
    while time.time() < deadline and not (metrics.exists() and len(metrics.read_text().splitlines()) >= 25):
        time.sleep(0.05)
    script.send_signal(signal.SIGTERM)  # the script alone, not its process group
    assert script.wait(timeout=30) == -signal.SIGTERM
    deadline = time.time() + 120
    while time.time() < deadline and "stopped (SIGTERM" not in log.read_text():
        time.sleep(0.1)
    # on a line of its own (was: raised inside a print, it cut the last step's line in two)
    stopped = next(line for line in log.read_text().splitlines() if line.startswith("stopped by SIGTERM"))
    newest = max((out / "checkpoints").glob("albert_pretrain-*.ckpt"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    assert stopped.endswith(f"the newest checkpoint is {newest}: the same command resumes from it")
    while time.time() < deadline and in_use(out):  # the stopped run ends and releases OUTPUT_DIR
        time.sleep(0.1)
    resumed = ok(bash(command))
    assert f"resumed from {newest}" in resumed.stdout and "done: 4000 steps" in resumed.stdout


def test_a_quick_start_leaves_the_data_of_a_run_in_its_folder_alone(tmp_path):
    """A second quick start on the OUTPUT_DIR of a running one rewrote its corpus, vocabulary and data (the first
    run then evaluated its model on the other data) before its training refused the busy folder."""
    from src.common.atomic_files import RUN_LOCK

    out = tmp_path / "q"
    (out / "data").mkdir(parents=True)
    (out / "logs").mkdir()
    corpus = out / "data" / "corpus.txt"
    corpus.write_text("the first run's corpus\n")
    training = subprocess.Popen([sys.executable, "-c", "import sys, time; from src.common.atomic_files import "
                                 "lock_output; lock_output(sys.argv[1], 'a run'); print('held', flush=True); "
                                 "time.sleep(60)", str(out / RUN_LOCK)], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                                text=True)
    making_data = subprocess.Popen(["bash", "-c", f'exec 9>>"{out}/logs/.quickstart.lock"; flock 9; echo held; '
                                    "sleep 60"], stdout=subprocess.PIPE, text=True)
    try:
        assert training.stdout.readline() == "held\n"
        refused = bash([SCRIPTS / "run_pretrain_single.sh"], {"OUTPUT_DIR": str(out)})
        assert refused.returncode == 2 and f"OUTPUT_DIR {out} is in use by another run (pid {training.pid}" in \
            refused.stderr
        training.kill()
        training.wait()
        assert making_data.stdout.readline() == "held\n"
        refused = bash([SCRIPTS / "run_pretrain_single.sh"], {"OUTPUT_DIR": str(out)})
        assert refused.returncode == 2 and f"another start is launching into {out}" in refused.stderr
    finally:
        for process in (training, making_data):
            process.kill()
            process.wait()
    assert corpus.read_text() == "the first run's corpus\n" and sorted(p.name for p in (out / "data").iterdir()) == \
        ["corpus.txt"]
