"""Weight conversion (TF path against HF's own TF loader), the loading helper, and the converter CLI's errors."""
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.hf_reference import TINY_CONFIGS, hf_outputs, make_hf_pretraining, random_batch, save_hf
from model_utils.errors import UserError
from src.common.checkpoint_io import load_weights
from src.conversion.convert_checkpoint import convert, hf_name
from src.model.albert import AlbertConfig
from src.model.pretraining_heads import AlbertPreTraining
from tests.test_model_parity import assert_close, our_outputs

ROOT = Path(__file__).resolve().parents[1]
TF_FIXTURE = ROOT / "tests" / "fixtures" / "tf_albert_tiny"


def hf_model_from_tf_fixture(monkeypatch):
    """HF AlbertForPreTraining loaded by HF's own `load_tf_weights_in_albert` from the values TensorFlow read.

    HF's loader imports tensorflow only for `train.list_variables` / `train.load_variable`; a stand-in module
    serves TensorFlow's own readings (reference.npz), so HF's name mapping is the independent reference.
    """
    from transformers import AlbertConfig as HFConfig, AlbertForPreTraining
    from transformers.models.albert.modeling_albert import load_tf_weights_in_albert
    reference = np.load(TF_FIXTURE / "reference.npz")
    config = HFConfig.from_json_file(str(TF_FIXTURE / "albert_config.json"))
    config.hidden_act = "gelu_new"  # Google's "gelu" is the tanh form, HF's "gelu_new"
    config._attn_implementation = "eager"
    model = AlbertForPreTraining(config).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fake_tf = types.ModuleType("tensorflow")
    fake_tf.train = types.SimpleNamespace(
        list_variables=lambda _: [(n, list(reference[n].shape)) for n in reference.files],
        load_variable=lambda _, name: reference[name])
    monkeypatch.setitem(sys.modules, "tensorflow", fake_tf)
    load_tf_weights_in_albert(model, config, "unused")
    unchanged = [k for k, v in model.state_dict().items() if torch.equal(before[k], v)]
    assert unchanged == [], f"HF's loader left {unchanged} untouched"
    return model


def test_tf_checkpoint_converts_and_matches_hf(tmp_path, monkeypatch):
    summary = convert("tf", str(TF_FIXTURE / "model.ckpt"), str(tmp_path / "tf.ckpt"),
                      str(TF_FIXTURE / "albert_config.json"))
    assert summary["missing_heads"] == [] and summary["skipped"] == []  # adam slots and global_step are skipped
    config = AlbertConfig.from_json_file(str(tmp_path / "tf.ckpt.json"))
    assert config.hidden_act == "gelu"
    net = AlbertPreTraining(config)
    net.set_train(False)
    report = load_weights(net, str(tmp_path / "tf.ckpt"))
    assert report.missing == [] and report.unused == []
    hf = hf_model_from_tf_fixture(monkeypatch)
    batch = random_batch(config.vocab_size, config.type_vocab_size, seq=16)
    assert_close(our_outputs(net, *batch), hf_outputs(hf, *batch))


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """A converted checkpoint of a tiny HF model and its config."""
    folder = tmp_path_factory.mktemp("conv")
    save_hf(make_hf_pretraining(TINY_CONFIGS["groups2_inner2_gelu_new"]), folder / "hf", safetensors=True)
    convert("hf", str(folder / "hf"), str(folder / "out.ckpt"))
    return folder


def test_loading_refuses_missing_backbone_weights(converted):
    import mindspore as ms
    values = {k: v for k, v in ms.load_checkpoint(str(converted / "out.ckpt")).items() if "albert_layers.1." not in k}
    net = AlbertPreTraining(AlbertConfig.from_json_file(str(converted / "out.ckpt.json")))
    with pytest.raises(UserError, match=r"randomly initialised: albert\.encoder\.albert_layer_groups\.0\.albert_layers\.1"):
        load_weights(net, values)


def test_loading_allows_only_named_heads_to_be_missing(converted):
    import mindspore as ms
    values = {k: v for k, v in ms.load_checkpoint(str(converted / "out.ckpt")).items()
              if not k.startswith("sop_classifier.")}
    net = AlbertPreTraining(AlbertConfig.from_json_file(str(converted / "out.ckpt.json")))
    with pytest.raises(UserError, match="sop_classifier.classifier.weight"):
        load_weights(net, values)
    report = load_weights(net, values, allow_missing=("sop_classifier.",))
    assert sorted(report.missing) == ["sop_classifier.classifier.bias", "sop_classifier.classifier.weight"]


def test_loading_reports_shape_mismatch_by_name(converted):
    config = AlbertConfig.from_json_file(str(converted / "out.ckpt.json")).replace(intermediate_size=40)
    with pytest.raises(UserError, match=r"albert_layers\.0\.ffn\.weight: checkpoint \(37, 32\) vs network \(40, 32\)"):
        load_weights(AlbertPreTraining(config), str(converted / "out.ckpt"))


def run_converter(*args):
    return subprocess.run([sys.executable, "-m", "src.convert_checkpoint", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def assert_one_line_error(result, *fragments):
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip() and "WARNING" not in line]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_cli_converts_and_refuses_to_overwrite(converted, tmp_path):
    out = tmp_path / "cli.ckpt"
    ok = run_converter("--src", "hf", "--input", str(converted / "hf"), "--output", str(out))
    assert ok.returncode == 0, ok.stderr
    assert out.is_file() and (tmp_path / "cli.ckpt.json").is_file()
    again = run_converter("--src", "hf", "--input", str(converted / "hf"), "--output", str(out))
    assert_one_line_error(again, str(out), "--overwrite")
    out.unlink()  # the config beside it is an output too: never replaced without --overwrite
    (tmp_path / "cli.ckpt.json").write_text("{}")
    again = run_converter("--src", "hf", "--input", str(converted / "hf"), "--output", str(out))
    assert_one_line_error(again, f"output already exists: {out}.json", "--overwrite")
    assert (tmp_path / "cli.ckpt.json").read_text() == "{}" and not out.exists()
    log = (tmp_path / "logs" / "convert_checkpoint.log").read_text()  # the conversion's; refused runs add nothing
    assert log.count("--- ") == 1 and f"wrote {out} (" in log


def test_cli_config_that_does_not_match_the_weights(converted, tmp_path):
    config = (converted / "hf" / "config.json").read_text().replace('"intermediate_size": 37', '"intermediate_size": 38')
    (tmp_path / "config.json").write_text(config)
    result = run_converter("--src", "hf", "--input", str(converted / "hf" / "model.safetensors"),
                           "--config", str(tmp_path / "config.json"), "--output", str(tmp_path / "x.ckpt"))
    assert_one_line_error(result, "does not match", "ffn")
    assert not (tmp_path / "x.ckpt").exists()


def test_cli_fewer_groups_in_config_than_in_weights(tmp_path):
    config = TF_FIXTURE / "albert_config.json"
    (tmp_path / "one_group.json").write_text(config.read_text().replace('"num_hidden_groups": 2',
                                                                        '"num_hidden_groups": 1'))
    result = run_converter("--src", "tf", "--input", str(TF_FIXTURE / "model.ckpt"),
                           "--config", str(tmp_path / "one_group.json"), "--output", str(tmp_path / "x.ckpt"))
    assert_one_line_error(result, "albert_layer_groups.1")
    assert os.listdir(tmp_path) == ["one_group.json"]


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_cli_truncated_weights(tmp_path, weights):
    save_hf(make_hf_pretraining(TINY_CONFIGS["exact_gelu_3layers"]), tmp_path / "hf",
            safetensors=weights.endswith("safetensors"))
    path = tmp_path / "hf" / weights
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    result = run_converter("--src", "hf", "--input", str(tmp_path / "hf"), "--output", str(tmp_path / "x.ckpt"))
    assert_one_line_error(result, weights)
    assert not (tmp_path / "x.ckpt").exists()


def test_cli_truncated_tf_data(tmp_path):
    for item in TF_FIXTURE.iterdir():
        (tmp_path / item.name).write_bytes(item.read_bytes())
    data = tmp_path / "model.ckpt.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:1000])
    result = run_converter("--src", "tf", "--input", str(tmp_path / "model.ckpt"),
                           "--config", str(tmp_path / "albert_config.json"), "--output", str(tmp_path / "x.ckpt"))
    assert_one_line_error(result, "model.ckpt.data-00000-of-00001")


@pytest.mark.parametrize("args, fragment", [
    (["--src", "hf", "--input", "no/such/dir"], "no/such/dir"),
    (["--src", "tf", "--input", "no/such/model.ckpt", "--config", str(TF_FIXTURE / "albert_config.json")],
     "no/such/model.ckpt"),
    (["--src", "tf", "--input", str(TF_FIXTURE / "model.ckpt"), "--config", "missing.json"], "missing.json"),
])
def test_cli_missing_files(tmp_path, args, fragment):
    assert_one_line_error(run_converter(*args, "--output", str(tmp_path / "x.ckpt")), fragment)


def test_cli_verbose_shows_traceback(tmp_path):
    result = run_converter("--src", "hf", "--input", "no/such/dir", "--output", str(tmp_path / "x.ckpt"),
                           "--verbose")
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_model_summary_counts(capsys):
    from src.model_summary import main
    from tests.test_albert_model import hf_parameter_count
    assert main(["--markdown"]) == 0
    rows = {line.split("|")[1].strip(): line for line in capsys.readouterr().out.splitlines() if "|" in line}
    expected = hf_parameter_count(AlbertConfig.from_preset("albert_base")) / 1e6
    assert f"| {expected:.1f}M |" in rows["albert_base"]


@pytest.mark.parametrize("version", ["2.5.1", "2.5.1+cpu", "2.4.0", "1.13.1", "2.6.0a0", "2.6.0rc1",
                                     "2.6.0.dev20241112", "2.6.0a0+git1234abc", "not-a-version"])
def test_a_pickled_bin_is_refused_through_a_torch_with_the_weights_only_escape(tmp_path, monkeypatch, version):
    """CVE-2025-32434: torch.load(weights_only=True) up to 2.5.1 can run code from a crafted file; such a torch
    never opens the file, and the message points to the model's safetensors."""
    save_hf(make_hf_pretraining(TINY_CONFIGS["exact_gelu_3layers"]), tmp_path / "hf", safetensors=False)
    monkeypatch.setattr(torch, "__version__", version)
    monkeypatch.setattr(torch, "load", lambda *args, **kwargs: pytest.fail("torch.load was reached"))
    with pytest.raises(UserError, match=rf"needs torch >= 2.6: torch {re.escape(version)} can run code .*"
                                        r"CVE-2025-32434.*model.safetensors"):
        convert("hf", str(tmp_path / "hf"), str(tmp_path / "x.ckpt"))
    assert not (tmp_path / "x.ckpt").exists()


@pytest.mark.parametrize("version", ["2.6.0", "2.6.0+cpu", "2.6.1", "2.13.0+cu128", "3.0.0a0"])
def test_torch_versions_with_the_fix_read_the_bin(version):
    """2.6.0a0 passed the old check (its release (2, 6) compared, not the version): pre-releases of 2.6 are refused
    above; 2.6 itself, its local builds and later versions (pre-releases of later versions too) are let through."""
    from src.conversion.convert_checkpoint import check_torch_version
    check_torch_version(version, "pytorch_model.bin")


def test_an_hf_masked_lm_converts_with_the_pooler_and_sop_head_transformers_would_initialise(tmp_path, capsys):
    """An HF AlbertForMaskedLM (no pooler, no sentence-order head: what an MLM training of one's own saves) was
    refused ("lacks 2 backbone weights"). It converts: every weight it has comes over unchanged and our masked-LM
    logits equal transformers' within 1e-5; the weights it lacks are exactly those transformers reports missing
    when it loads the folder as AlbertForPreTraining, initialised as transformers does (normal(0,
    initializer_range) weights, zero biases), and the summary line names them."""
    from safetensors.numpy import load_file
    from transformers import AlbertConfig as HfConfig, AlbertForMaskedLM, AlbertForPreTraining

    kwargs = dict(TINY_CONFIGS["groups2_inner2_gelu_new"], initializer_range=0.3)
    torch.manual_seed(2)
    hf = AlbertForMaskedLM(HfConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                    attn_implementation="eager", **kwargs)).eval()
    with torch.no_grad():
        for param in hf.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    save_hf(hf, tmp_path / "mlm", safetensors=True)
    from model_utils.errors import run_cli
    from src.conversion.convert_checkpoint import main
    assert run_cli(main, ["--src", "hf", "--input", str(tmp_path / "mlm"), "--output", str(tmp_path / "out.ckpt")]) == 0
    printed = capsys.readouterr().out
    _, info = AlbertForPreTraining.from_pretrained(str(tmp_path / "mlm"), output_loading_info=True)
    added = sorted(info["missing_keys"])
    assert added == ["albert.pooler.bias", "albert.pooler.weight", "sop_classifier.classifier.bias",
                     "sop_classifier.classifier.weight"]
    assert f"note: {', '.join(added)} not in the input" in printed
    assert "initialised as transformers does (weights normal(0, 0.3), biases 0)" in printed

    from src.common.checkpoint_io import read_checkpoint
    ours = {name: value.asnumpy() for name, value in read_checkpoint(str(tmp_path / "out.ckpt")).items()}
    for name, value in load_file(str(tmp_path / "mlm" / "model.safetensors")).items():
        mine = hf_name(name)
        if mine is not None:
            assert np.array_equal(ours[mine], value), name
    for name in added:  # zero biases; weights of std 0.3 (4 standard errors: 1024 and 64 draws)
        value = ours[name]
        error = 4 * 0.3 / np.sqrt(value.size)
        assert not value.any() if name.endswith(".bias") else \
            abs(value.std() - 0.3) < error / np.sqrt(2) and abs(value.mean()) < error, name
    net = AlbertPreTraining(AlbertConfig.from_json_file(str(tmp_path / "out.ckpt.json")), is_training=False)
    net.set_train(False)
    assert load_weights(net, str(tmp_path / "out.ckpt")).missing == []
    batch = random_batch(kwargs["vocab_size"], 2)
    with torch.no_grad():
        theirs = hf(input_ids=torch.tensor(batch[0], dtype=torch.long),
                    token_type_ids=torch.tensor(batch[1], dtype=torch.long),
                    attention_mask=torch.tensor(batch[2], dtype=torch.long)).logits.numpy()
    mlm = our_outputs(net, *batch)[2]
    expected = np.take_along_axis(theirs, batch[3][:, :, None].astype(np.int64), axis=1)
    assert np.abs(expected).max() > 1e-2 and np.abs(mlm - expected).max() <= 1e-5


def test_keys_an_hf_config_leaves_out_take_transformers_defaults():
    """An HF config.json leaves out what equals transformers' defaults: hidden_act then means its gelu_new, not the
    exact GELU of Google's default (the converted logits were off by ~1e-3); every default is transformers' own."""
    from transformers import AlbertConfig as HfConfig

    from src.model.albert import HF_ACTIVATIONS

    reference = HfConfig()
    ours = AlbertConfig.from_dict({"model_type": "albert"})
    for key, value in ours.to_dict().items():
        if hasattr(reference, key):
            theirs = getattr(reference, key)
            assert value == (HF_ACTIVATIONS[theirs] if key == "hidden_act" else theirs), key


@pytest.mark.parametrize("config", [{"model_type": "bert", "architectures": ["BertForPreTraining"]},
                                    {"model_type": "albert", "architectures": ["BertForPreTraining"]}])
def test_an_hf_config_of_another_model_is_refused(config):
    with pytest.raises(ValueError, match=r"^config: model_type .* not an ALBERT model"):
        AlbertConfig.from_dict(config)


def test_an_hf_classifier_converts_its_backbone_and_names_the_head_it_skips(tmp_path, capsys):
    """A fine-tuned HF AlbertForSequenceClassification was refused with a name it does not hold
    ("albert.classifier.bias has no place in the network (e.g. more layer groups ...)")."""
    from transformers import AlbertConfig as HfConfig, AlbertForSequenceClassification

    from model_utils.errors import run_cli
    from src.conversion.convert_checkpoint import main

    torch.manual_seed(3)
    hf = AlbertForSequenceClassification(HfConfig(num_labels=3, **TINY_CONFIGS["groups2_inner2_gelu_new"])).eval()
    save_hf(hf, tmp_path / "cls", safetensors=True)
    assert run_cli(main, ["--src", "hf", "--input", str(tmp_path / "cls"), "--output", str(tmp_path / "o.ckpt")]) == 0
    printed = capsys.readouterr().out
    assert "note: skipped 2 tensors that are not part of ALBERT pretraining: classifier." in printed
    from src.common.checkpoint_io import read_checkpoint
    ours = read_checkpoint(str(tmp_path / "o.ckpt"))
    for name, value in hf.state_dict().items():
        mine = hf_name(name)
        if mine is not None and mine.startswith("albert."):
            assert np.array_equal(ours[mine].asnumpy(), value.numpy()), name


@pytest.mark.parametrize("edit, message", [
    ({"drop": "bert/pooler/dense/kernel"}, "the checkpoint has part of albert.pooler but not albert.pooler.weight"),
    ({"add": "bert/encoder/transformer/group_0/inner_group_0/attention_1/self/query/extra_kernel"},
     "bert/encoder/transformer/group_0/inner_group_0/attention_1/self/query/extra_kernel lies in ALBERT's own scopes"),
])
def test_a_tf_checkpoint_with_part_of_a_layer_or_a_stray_weight_is_refused(tmp_path, monkeypatch, edit, message):
    """Google's checkpoints hold every layer whole: a layer missing one tensor (a misspelt name, a damaged file) was
    converted with the rest initialised at random, and an unknown tensor inside ALBERT's scopes skipped."""
    import src.conversion.tf_checkpoint as tf_checkpoint

    tensors = dict(np.load(TF_FIXTURE / "reference.npz"))
    tensors.pop(edit.get("drop", ""), None)
    if "add" in edit:
        tensors[edit["add"]] = np.zeros((4, 4), np.float32)
    monkeypatch.setattr(tf_checkpoint, "read_tf_checkpoint", lambda *args, **kwargs: tensors)
    with pytest.raises(UserError, match=re.escape(message)):
        convert("tf", "unused", str(tmp_path / "x.ckpt"), str(TF_FIXTURE / "albert_config.json"))
    assert not (tmp_path / "x.ckpt").exists()


def test_a_folder_as_output_is_named_as_the_problem(tmp_path, capsys):
    from model_utils.errors import run_cli
    from src.conversion.convert_checkpoint import main

    assert run_cli(main, ["--src", "hf", "--input", "unused", "--output", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --output names the checkpoint file to write (.ckpt), not a "
                                               f"folder: {tmp_path}")
