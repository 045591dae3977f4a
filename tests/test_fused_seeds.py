"""benchmarks/fused_seeds.py: seeds fused under vmap train as the same seeds trained one after another."""

import importlib.util
from pathlib import Path

import pytest
import torch

from knowledge_lm.core.backbones import load_backbone

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "fused_seeds.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("fused_seeds", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.filterwarnings("ignore:There is a performance drop")  # vmap's loop over CPU flash attention
def test_fused_seeds_equal_separate_seeds(script):
    encoder, tokenizer, _ = load_backbone("tiny")
    examples = script.synthetic_pairs(32, 16, tokenizer)
    check = script.check_equal(encoder, [1, 2], examples, 4, 3, torch.device("cpu"), tokenizer.pad_token_id)
    assert check["fused_losses"].shape == (2, 3)
    assert torch.allclose(check["fused_losses"], check["separate_losses"], rtol=1e-4, atol=1e-5)
    assert check["update_difference"] <= 1e-3 and check["equal"]
    # The seeds differ (head initialisation, data order): equality is not two copies of one run.
    assert not torch.allclose(check["separate_losses"][0], check["separate_losses"][1])


def test_per_seed_clipping_is_clip_grad_norm_per_seed(script):
    encoder, _, _ = load_backbone("tiny")
    models = script.seed_models(encoder, [1, 2], 10, torch.device("cpu"))
    fused = script.FusedSeeds(models)
    scales = (100.0, 0.01)  # one seed clipped, the other under the norm
    for model, scale in zip(models, scales):
        for parameter in model.parameters():
            parameter.grad = torch.full_like(parameter, scale)
    for name, parameter in fused.params.items():
        parameter.grad = torch.stack([dict(model.named_parameters())[name].grad for model in models])
    fused.clip_per_seed(1.0)
    for index, model in enumerate(models):
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for name, parameter in model.named_parameters():
            torch.testing.assert_close(fused.params[name].grad[index], parameter.grad)
