"""Task heads and their losses, shared by every method."""

import torch
from torch import nn
from torch.nn import functional as F


class TaskHead(nn.Module):
    """BERT's classification head (dense → tanh → linear) over the features a method encodes."""

    def __init__(self, hidden_size: int, num_outputs: int, dropout: float = 0.1):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_size, num_outputs)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.dense(self.dropout(features)))
        return self.out(self.dropout(hidden))


def task_loss(kind: str, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    if kind == "regression":
        return F.mse_loss(logits.squeeze(-1).float(), labels.float())
    return F.cross_entropy(logits.float(), labels)


def predictions(kind: str, logits: torch.Tensor) -> torch.Tensor:
    return logits.squeeze(-1).float() if kind == "regression" else logits.argmax(-1)
