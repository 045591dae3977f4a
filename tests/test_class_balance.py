"""Training setting ``class_balance``: a class-weighted cross-entropy for single-label classification."""

import pytest
import torch

from knowledge_lm.core.backbones import load_backbone
from knowledge_lm.core.errors import KlmError
from knowledge_lm.run.config import TrainConfig
from knowledge_lm.run.trainer import balanced_class_weights, build_model_and_data
from knowledge_lm.tasks.base import TaskKind

HEADERS = {"rte": "index\tsentence1\tsentence2\tlabel\n", "stsb": "index\tsentence1\tsentence2\tscore\n"}


def glue_folder(root, task: str):
    """A tiny GLUE task whose train split is three quarters one class (RTE) or a regression (STS-B)."""
    folder = root / f"glue_{task}"
    folder.mkdir(parents=True)
    label = (lambda i: "not_entailment" if i % 4 == 0 else "entailment") if task == "rte" else (lambda i: f"{i % 5}.0")
    rows = [f"{i}\tA man number {i} sleeps here.\tSomeone {i % 5} sleeps.\t{label(i)}\n" for i in range(40)]
    (folder / "train.tsv").write_text(HEADERS[task] + "".join(rows))
    (folder / "dev.tsv").write_text(HEADERS[task] + "".join(rows[:12]))
    return root


def test_balanced_weights_are_inverse_class_shares():
    weights = balanced_class_weights([0, 0, 0, 1], 3)
    assert weights.tolist() == pytest.approx([4 / 9, 4 / 3, 0.0])


def test_a_constant_predictor_loses_the_same_whichever_class_it_predicts():
    kind = TaskKind(spec=None)
    labels = torch.tensor([1] * 68 + [0] * 32)
    kind.class_weights = balanced_class_weights(labels.tolist(), 2)
    batch = {"labels": labels}
    predicts_one = kind.loss(torch.tensor([[0.0, 2.0]]).expand(100, 2), batch)
    predicts_zero = kind.loss(torch.tensor([[2.0, 0.0]]).expand(100, 2), batch)
    assert predicts_one.item() == pytest.approx(predicts_zero.item(), abs=1e-6)
    kind.class_weights = None  # unweighted, the majority class's constant wins
    assert kind.loss(torch.tensor([[0.0, 2.0]]).expand(100, 2), batch) < kind.loss(
        torch.tensor([[2.0, 0.0]]).expand(100, 2), batch
    )


def test_class_balance_weights_the_cell_s_train_subset(tmp_path):
    encoder, tokenizer, _ = load_backbone("tiny", seed=0)
    data_dir = glue_folder(tmp_path / "data", "rte")
    model, data, _, _ = build_model_and_data(
        "baseline",
        encoder,
        tokenizer,
        "glue",
        TrainConfig(max_length=32, class_balance=True),
        task="rte",
        data_dir=data_dir,
    )
    labels = data.encoded["train"]["labels"]
    assert model.kind.class_weights.tolist() == pytest.approx(balanced_class_weights(labels, 2).tolist())
    assert len(set(labels)) == 2 and model.kind.class_weights[0] != pytest.approx(model.kind.class_weights[1])
    plain, *_ = build_model_and_data(
        "baseline", encoder, tokenizer, "glue", TrainConfig(max_length=32), task="rte", data_dir=data_dir
    )
    assert plain.kind.class_weights is None


def test_class_balance_is_refused_for_a_regression_task(tmp_path):
    encoder, tokenizer, _ = load_backbone("tiny", seed=0)
    with pytest.raises(KlmError, match="class_balance applies to single-label classification"):
        build_model_and_data(
            "baseline",
            encoder,
            tokenizer,
            "glue",
            TrainConfig(class_balance=True),
            task="stsb",
            data_dir=glue_folder(tmp_path / "data", "stsb"),
        )


def test_class_balance_is_a_boolean_setting():
    assert TrainConfig.from_dict({"class_balance": "true"}).class_balance is True
    with pytest.raises(KlmError, match="class_balance"):
        TrainConfig.from_dict({"class_balance": "sometimes"})
