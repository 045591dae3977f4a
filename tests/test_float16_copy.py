"""benchmarks/float16_copy.py: a backbone's float16 copy for the GPU machine, as pack.sh writes MiniLM's."""

import importlib.util

import pytest
import torch
from safetensors import safe_open
from transformers import BertConfig, BertModel

from knowledge_lm.core.backbones import TINY_CONFIG, file_sha256
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.paths import benchmarks_dir


def script():
    spec = importlib.util.spec_from_file_location("float16_copy", benchmarks_dir() / "float16_copy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_tiny_model_is_copied_in_float16_with_its_config(tmp_path, capsys):
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=50, **TINY_CONFIG)).save_pretrained(tmp_path / "tiny")
    copy = script()
    assert copy.main([str(tmp_path / "tiny"), str(tmp_path / "half")]) == 0
    weights = tmp_path / "half" / "model.safetensors"
    assert f"weights sha256 {file_sha256(weights)}" in capsys.readouterr().out
    assert (tmp_path / "half" / "config.json").read_text() == (tmp_path / "tiny" / "config.json").read_text()
    with safe_open(weights, "pt") as tensors, safe_open(tmp_path / "tiny" / "model.safetensors", "pt") as original:
        assert tensors.metadata() == {"format": "pt"}
        assert set(tensors.keys()) == set(original.keys())
        for key in tensors.keys():
            half, full = tensors.get_tensor(key), original.get_tensor(key)
            assert half.dtype == (torch.float16 if full.is_floating_point() else full.dtype)
            assert torch.equal(half, full.half() if full.is_floating_point() else full)
    assert not (tmp_path / "half.partial").exists()

    with pytest.raises(KlmError, match="exists"):
        copy.float16_copy(tmp_path / "tiny", tmp_path / "half")
    assert copy.main([str(tmp_path / "tiny"), str(tmp_path / "half")]) == 2
