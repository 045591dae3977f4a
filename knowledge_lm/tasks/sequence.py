"""Sentence (pair) classification and regression: GLUE, the generated task, anything read as text → label.

The head reads the [CLS] state through BERT's classification head (dense → tanh → linear).
"""

import torch
from torch import nn
from torch.nn import functional as F

from knowledge_lm.core.subsets import quantile_bins
from knowledge_lm.tasks import metrics, statistics
from knowledge_lm.tasks.base import TaskKind
from knowledge_lm.tasks.heads import ClassifierHead
from knowledge_lm.tasks.padding import as_columns, pad_encoder_inputs


class ClsHead(nn.Module):
    def __init__(self, hidden_size: int, num_outputs: int, dropout: float):
        super().__init__()
        self.classifier = ClassifierHead(hidden_size, num_outputs, dropout)

    def forward(self, hidden_states: torch.Tensor, batch):
        features = hidden_states[:, 0]
        return self.classifier(features), features


class SequenceTask(TaskKind):
    captures_step = True  # [CLS] → classifier → cross-entropy or MSE, over a batch of encoder inputs and labels

    def encode(self, records, tokenizer, max_length):
        first, second = self.texts(records)
        encoded = tokenizer(first, second, truncation=True, max_length=max_length)
        return {**{name: list(values) for name, values in encoded.items()}, "labels": [r["label"] for r in records]}

    def collate(self, features, tokenizer):
        columns = as_columns(features)
        batch = pad_encoder_inputs(columns, tokenizer)
        batch["labels"] = torch.tensor(columns["labels"], dtype=torch.float32 if self.regression else torch.long)
        return batch

    @property
    def regression(self) -> bool:
        return self.spec.kind == "regression"

    def build_head(self, hidden_size, dropout):
        return ClsHead(hidden_size, 1 if self.regression else len(self.spec.labels), dropout)

    def loss(self, logits, batch):
        if self.regression:
            return F.mse_loss(logits.squeeze(-1).float(), batch["labels"].float())
        return super().loss(logits, batch)

    def decode(self, logits, batch):
        return logits.squeeze(-1).float().tolist() if self.regression else super().decode(logits, batch)

    def score(self, predictions, gold):
        return metrics.compute(self.spec, torch.tensor(predictions), torch.tensor(gold))

    def additive_statistics(self, metric, predicted, gold):
        if self.regression:
            return statistics.pearson_statistics(predicted, gold) if metric == "pearson" else None
        if metric == "accuracy":
            return statistics.accuracy_statistics(predicted, gold)
        if metric in ("f1", "matthews") and set(gold) | set(predicted) <= {0, 1}:
            return statistics.binary_statistics(metric, predicted, gold)
        return None

    def strata(self, records):
        labels = [record["label"] for record in records]
        return quantile_bins(labels) if self.regression else labels
