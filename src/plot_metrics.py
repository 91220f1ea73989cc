"""Draw the loss and learning-rate curves of a run's metrics.jsonl into a PNG.

    python -m src.plot_metrics output/pretrain/metrics.jsonl [--output curves.png]

A resumed run appends to the same file and may repeat steps logged after its last checkpoint; the newest row of
each step wins, so the curves show the trajectory the checkpoints continued.
"""
import json
import os
import sys
from typing import Dict, List

if not __package__:  # run as a file (python src/TOOL.py): import from the project root, as `python -m` does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from model_utils.config import ArgumentParser
from model_utils.errors import UserError, run_cli
from src.common.atomic_files import atomic_path, check_file_output
from src.common.run_log import log_to

LOSS_KEYS = ("loss", "mlm_loss", "sop_loss")


def read_metrics(path: str) -> List[Dict[str, float]]:
    """Rows of a metrics.jsonl, one per step (the last one written wins), sorted by step."""
    rows: Dict[int, Dict[str, float]] = {}
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    rows[int(row["step"])] = row
                except (ValueError, KeyError, TypeError):
                    raise UserError(f"{path} line {number}: not a metrics row with a 'step'") from None
    except FileNotFoundError:
        raise UserError(f"metrics file not found: {path}") from None
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not a metrics.jsonl (not UTF-8 text: {err.reason} at byte {err.start})") from None
    if not rows:
        raise UserError(f"{path} has no rows yet")
    return [rows[step] for step in sorted(rows)]


def plot(rows: List[Dict[str, float]], output: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [row["step"] for row in rows]
    figure, (loss_axis, lr_axis) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for key in LOSS_KEYS:
        if all(key in row for row in rows):
            loss_axis.plot(steps, [row[key] for row in rows], label=key)
    loss_axis.set_ylabel("loss")
    loss_axis.legend()
    loss_axis.grid(alpha=0.3)
    loss_axis.set_title(title)
    lr_rows = [row for row in rows if "lr" in row]  # rows of other tools may lack it
    lr_axis.plot([row["step"] for row in lr_rows], [row["lr"] for row in lr_rows], color="tab:green")
    lr_axis.set_ylabel("learning rate")
    lr_axis.set_xlabel("optimizer step")
    lr_axis.grid(alpha=0.3)
    figure.tight_layout()
    with atomic_path(output, ".png") as tmp:
        figure.savefig(tmp, dpi=100)
    plt.close(figure)


def main(argv: List[str]) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics_file", help="metrics.jsonl written by run_pretrain.py (or a fine-tuning run)")
    parser.add_argument("--output", default="", help="PNG to write (default: beside the metrics file)")
    args = parser.parse_args(argv)
    output = args.output or os.path.join(os.path.dirname(os.path.abspath(args.metrics_file)), "curves.png")
    check_file_output(output, {"the metrics file": args.metrics_file})
    rows = read_metrics(args.metrics_file)
    plot(rows, output, os.path.abspath(args.metrics_file))
    log_to(os.path.dirname(os.path.abspath(output)))
    print(f"wrote {output} ({len(rows)} points, steps {rows[0]['step']}..{rows[-1]['step']})")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
