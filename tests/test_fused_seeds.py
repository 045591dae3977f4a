"""benchmarks/fused_seeds.py: seeds fused under vmap train as the same seeds trained one after another."""

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest
import torch

from knowledge_lm.core.backbones import load_backbone
from knowledge_lm.core.errors import KlmError

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "fused_seeds.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("fused_seeds", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["fused_seeds"] = module  # what pickle finds its functions by (the packed path's processes)
    spec.loader.exec_module(module)
    yield module
    del sys.modules["fused_seeds"]


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_attention_mask_4d_masks_as_the_padding_mask_does(script, attention):
    encoder, tokenizer, _ = load_backbone("tiny", attention)
    batch = script.collate(script.synthetic_pairs(4, 16, tokenizer), pad_id=tokenizer.pad_token_id)
    assert not batch["attention_mask"].all()  # padding to mask
    mask_4d = script.attention_mask_4d(batch["attention_mask"], attention, encoder.dtype)
    with torch.no_grad():
        expected = encoder.eval()(**batch_inputs(batch)).last_hidden_state
        hidden = encoder(**{**batch_inputs(batch), "attention_mask": mask_4d}).last_hidden_state
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(hidden[real], expected[real])


def batch_inputs(batch: dict) -> dict:
    return {name: batch[name] for name in ("input_ids", "token_type_ids", "attention_mask")}


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_fused_seeds_equal_separate_seeds(script, attention):
    encoder, tokenizer, _ = load_backbone("tiny", attention)
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


def test_fused_seeds_refuse_an_attention_without_a_4d_mask(script):
    encoder, _, _ = load_backbone("tiny", "eager")
    encoder.config._attn_implementation = "flash_attention_2"
    with pytest.raises(KlmError, match="flash_attention_2"):
        script.FusedSeeds(script.seed_models(encoder, [1, 2], 10, torch.device("cpu")))


def test_fused_sdpa_step_runs_a_kernel_vmap_batches(script):
    encoder, tokenizer, _ = load_backbone("tiny", "sdpa")
    examples = script.synthetic_pairs(16, 16, tokenizer)
    # Dropout off, as in the equality check: with dropout, CPU SDPA takes its math kernel anyway.
    fused = script.FusedSeeds(script.seed_models(encoder, [1, 2], 10, torch.device("cpu"))).train(False)
    streams = [script.seed_batches(examples, seed, 4) for seed in (1, 2)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses = fused.step(script.stacked_batch([next(stream) for stream in streams], tokenizer.pad_token_id), "32")
    # vmap falls back to a loop over examples (with this warning) for a kernel it has no batching rule for.
    assert not [warning for warning in caught if "performance drop" in str(warning.message)]
    assert losses.shape == (2,) and torch.isfinite(losses).all()


@pytest.mark.slow  # about 25 s on 2 cores: two spawned processes import torch (the fused path is tested above)
def test_packed_seeds_run_as_processes_at_once(script, monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # a spawned process imports the script by its module name
    args = script.parse_args(["--tiny", "--seeds", "2", "--warmup", "1", "--steps", "1", "--packed", "--device", "cpu"])
    timing = script.time_packed([1, 2], args)
    assert timing["seed_steps"] == 2 and timing["seconds"] > 0
    with pytest.raises(KlmError, match="add --packed"):
        script.parse_args(["--tiny", "--mps"])


@pytest.mark.slow  # about 20 s on 2 cores: two spawned processes import torch, then fail
def test_a_crashed_packed_seed_fails_the_run_instead_of_hanging(script, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    args = script.parse_args(["--tiny", "--seeds", "2", "--warmup", "1", "--steps", "1", "--packed", "--device", "cpu"])
    args.backbone = str(tmp_path / "no-such-backbone")  # each seed process fails while loading it
    with pytest.raises(KlmError, match="packed seed's process failed"):
        script.time_packed([1, 2], args)
