"""What a run trains: the network config (preset, json file, overrides; the config saved beside a checkpoint) and
the checks that the data fits it."""
from typing import Optional, Sequence

from model_utils.config import Config
from model_utils.errors import UserError, as_user_error
from src.common.checkpoint_io import config_beside
from src.data.pipelines import check_data_meta, check_schema, load_data_meta
from src.model.albert import AlbertConfig


def network_config(config: Config, data_vocab_size: Optional[int], config_file: str = "") -> AlbertConfig:
    """The AlbertConfig of a run: `albert_config_file`, else `config_file` (e.g. the albert_config.json saved beside
    a checkpoint), else the preset; then net_cfg overrides. A preset's vocab_size defaults to the data's
    vocabulary unless net_cfg.vocab_size sets it."""
    overrides = {key: value for key, value in config.net_cfg.to_dict().items() if value is not None}
    config_file = config.albert_config_file or config_file
    with as_user_error():
        if config_file:
            base = AlbertConfig.from_json_file(config_file)
        else:
            base = AlbertConfig.from_preset(config.albert_network)
            if data_vocab_size is not None:
                overrides.setdefault("vocab_size", data_vocab_size)
        return base.replace(**overrides)


def check_data_fits(meta: dict, net: AlbertConfig, seq_shape: Sequence[int], data_dir: str) -> None:
    """Stop before building a model the data cannot feed (vocabulary, sequence length)."""
    if meta:
        try:
            check_data_meta(meta, vocab_size=net.vocab_size)
        except UserError as err:
            raise UserError(f"{data_dir}: {err}") from err
    if seq_shape and seq_shape[-1] > net.max_position_embeddings:
        raise UserError(f"{data_dir}: sequences of {seq_shape[-1]} tokens but the network's "
                        f"max_position_embeddings is {net.max_position_embeddings}")


def data_meta(data_dir: str) -> dict:
    """The creator's .meta.json when there is one (data from other tools may lack it)."""
    try:
        return load_data_meta(data_dir)
    except UserError:
        return {}


def checked_network(config: Config, data_file: str, columns: Sequence[str], checkpoint: str, schema_file: str = ""):
    """The AlbertConfig (yaml, else the albert_config.json beside `checkpoint`, else the preset) checked against the
    data (its columns, the ModelZoo-style `schema_file` if given, its tokenizer and sequence length); returns it with
    the data's meta and row shape. Pretraining and fine-tuning build their network this one way."""
    shape = check_schema(data_file, schema_file, columns)
    meta = data_meta(data_file)
    net = network_config(config, meta.get("tokenizer", {}).get("vocab_size"), config_beside(checkpoint))
    check_data_fits(meta, net, shape, data_file)
    return net, meta, shape


def network_note(config: Config, checkpoint: str) -> str:
    """For a checkpoint that does not fit the network: when the network is the yaml's preset because no config json
    lies beside the checkpoint (copied away from its run's albert_config.json), say so and how to give it."""
    if config.albert_config_file or config_beside(checkpoint):
        return ""
    return (f"; the network is the preset {config.albert_network}, as no albert_config.json or .ckpt.json is beside "
            f"the checkpoint: pass the run's albert_config.json with --albert_config_file")


def network_source(config: Config, checkpoint: str) -> str:
    """Where `network_config` takes the network from, for a run's log: the yaml's json file, the json beside
    `checkpoint`, else the preset's name."""
    return config.albert_config_file or config_beside(checkpoint) or config.albert_network
