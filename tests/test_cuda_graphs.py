"""Training setting compile_mode "cuda-graphs" against eager steps, on a GPU: the captured encoder gives the same
losses and gradients step after step (the weights updated between), and the captured whole step (the baseline's)
the same weights after training, over padded shapes met before and after evaluations."""

import copy

import pytest
import torch

from knowledge_lm.core.backbones import load_backbone
from knowledge_lm.core.registry import METHODS
from knowledge_lm.data.glue import SPECS
from knowledge_lm.methods.trainer import build_trainer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")


def without_dropout(model):
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model


def test_captured_encoder_steps_equal_eager_steps():
    encoder, tokenizer, _ = load_backbone("tiny", seed=0)
    eager, captured = (
        # bert+sr: its extra loss keeps the step outside the graphs, so the encoder alone is captured.
        without_dropout(METHODS.get("bert+sr")(copy.deepcopy(encoder), SPECS["rte"], dropout=0.0)).cuda().train()
        for _ in range(2)
    )
    captured.load_state_dict(eager.state_dict())
    captured.compile_modules("cuda-graphs")
    # A step between replays: each replay must read the weights as the optimiser left them.
    optimisers = {id(model): torch.optim.SGD(model.parameters(), lr=0.1) for model in (eager, captured)}
    texts = ["a man sleeps on the sofa", "someone is running in the park today", "rain", "the cat sat on the mat"]
    for step, length in enumerate((16, 32, 16, 32)):
        batch = dict(tokenizer(texts, padding="max_length", truncation=True, max_length=length, return_tensors="pt"))
        batch["labels"] = torch.tensor([step % 2, 1, 0, 1])
        batch = {name: tensor.cuda() for name, tensor in batch.items()}
        outcomes = []
        for model in (eager, captured):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = sum(model.losses(batch).values())
            loss.backward()
            outcomes.append((loss.item(), [p.grad.clone() for p in model.encoder.parameters() if p.grad is not None]))
            optimisers[id(model)].step()
            model.zero_grad(set_to_none=True)
        (eager_loss, eager_grads), (captured_loss, captured_grads) = outcomes
        assert captured_loss == pytest.approx(eager_loss, rel=1e-3)
        assert len(captured_grads) == len(eager_grads)
        for mine, theirs in zip(captured_grads, eager_grads):
            torch.testing.assert_close(mine, theirs, rtol=2e-2, atol=1e-3)
    assert len(captured.encoder_graphs) == 2  # one capture per padded shape, replayed after


def trained_parameters(model, batches, precision: str) -> dict[str, torch.Tensor]:
    """``model``'s parameters after training one step on each of ``batches`` under the suite's trainer (clipping,
    the scheduler, ``precision``), evaluated on two of them every three steps, its loss logged every two."""
    # Evaluations between the steps, as in a cell: Lightning releases the gradients before each.
    trainer = build_trainer(len(batches), precision=precision, eval_every_steps=3, log_every_n_steps=2)
    loaders = [
        torch.utils.data.DataLoader(some, batch_size=None, collate_fn=lambda batch: batch)
        for some in (batches, batches[:2])
    ]
    trainer.fit(model, train_dataloaders=loaders[0], val_dataloaders=loaders[1])
    return {name: parameter.detach().float().cpu() for name, parameter in model.named_parameters()}


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_captured_training_steps_equal_eager_steps(precision):
    encoder, tokenizer, _ = load_backbone("tiny", seed=0)
    eager, captured = (
        without_dropout(
            METHODS.get("baseline")(
                copy.deepcopy(encoder), SPECS["rte"], eval_splits=["dev"], dropout=0.0, total_steps=8
            )
        )
        for _ in range(2)
    )
    captured.load_state_dict(eager.state_dict())
    captured.compile_modules("cuda-graphs")
    texts = ["a man sleeps on the sofa", "someone is running in the park today", "rain", "the cat sat on the mat"]
    batches = []
    # Three padded shapes, the third first met after an evaluation (at steps 3 and 6).
    for step, length in enumerate((16, 32, 16, 32, 48, 16, 48, 32)):
        batch = dict(tokenizer(texts, padding="max_length", truncation=True, max_length=length, return_tensors="pt"))
        batches.append({**batch, "labels": torch.tensor([step % 2, 1, 0, (step // 2) % 2])})
    eager_weights = trained_parameters(eager, batches, precision)
    captured_weights = trained_parameters(captured, batches, precision)
    assert captured.capture_record() == {"captured": "training step", "shapes": 3}  # the first step ran eagerly
    assert [e["step"] for e in captured.evaluations] == [e["step"] for e in eager.evaluations] == [3, 6]
    logged = {name: float(value) for name, value in captured.trainer.logged_metrics.items()}
    assert logged["train/task"] == pytest.approx(float(eager.trainer.logged_metrics["train/task"]), rel=2e-2)
    tolerance = {"rtol": 1e-4, "atol": 1e-5} if precision == "32-true" else {"rtol": 2e-2, "atol": 2e-3}
    for name, weight in eager_weights.items():
        torch.testing.assert_close(captured_weights[name], weight, **tolerance, msg=name)
    assert captured.trainer.global_step == len(batches)
