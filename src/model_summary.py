"""Parameter counts of the ALBERT presets and of the share_type x embedding_size variants.

    python -m src.model_summary [--markdown]

The share_type table uses BERT-base sizes with the albert_zh vocabulary (21128), as albert_zh_pytorch's table.
Counts cover the pretraining network (backbone + MLM and SOP heads); "backbone" excludes the heads.
"""
import os
import sys
from typing import Iterable, List, Sequence

from mindspore.nn.utils import no_init_parameters

if not __package__:  # run as a file (python src/TOOL.py): import from the project root, as `python -m` does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from model_utils.config import ArgumentParser
from model_utils.errors import run_cli
from src.model.albert import PRESETS, AlbertConfig
from src.model.pretraining_heads import AlbertPreTraining


def counts(config: AlbertConfig) -> tuple:
    """(backbone, total) parameter counts, from the real network built without initialising weights."""
    with no_init_parameters():
        net = AlbertPreTraining(config)
    sizes = [(p.name, int(p.size)) for p in net.trainable_params()]
    return sum(n for name, n in sizes if name.startswith("albert.")), sum(n for _, n in sizes)


def preset_rows() -> List[List[str]]:
    rows = []
    for name in sorted(PRESETS):
        c = AlbertConfig.from_preset(name)
        backbone, total = counts(c)
        rows.append([name, str(c.num_hidden_layers), str(c.hidden_size), str(c.embedding_size),
                     str(c.num_attention_heads), str(c.vocab_size), f"{backbone / 1e6:.1f}M", f"{total / 1e6:.1f}M"])
    return rows


def sharing_rows() -> List[List[str]]:
    base = AlbertConfig.from_preset("albert_zh_base")
    rows = []
    for embedding_size in (768, 128):
        for share_type in ("none", "attention", "ffn", "all"):
            backbone, total = counts(base.replace(embedding_size=embedding_size, share_type=share_type))
            rows.append([str(embedding_size), share_type, f"{total / 1e6:.1f}M", f"{total * 4 / 1e6:.1f} MB"])
    return rows


def render(header: Sequence[str], rows: Iterable[Sequence[str]], markdown: bool) -> str:
    rows = [list(header)] + [list(r) for r in rows]
    if markdown:
        lines = ["| " + " | ".join(r) + " |" for r in rows]
        lines.insert(1, "|" + "|".join("---" for _ in header) + "|")
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)) for r in rows)


def main(argv: List[str]) -> int:
    parser = ArgumentParser(prog="python -m src.model_summary", description=__doc__.split("\n")[0])
    parser.add_argument("--markdown", action="store_true", help="print markdown tables (as in the README)")
    args = parser.parse_args(argv)
    print(render(["preset", "layers", "hidden", "embedding", "heads", "vocab", "backbone", "with heads"],
                 preset_rows(), args.markdown))
    print()
    print(render(["embedding_size", "share_type", "parameters", "fp32 size"], sharing_rows(), args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
