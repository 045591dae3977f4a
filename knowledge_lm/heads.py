"""Head modules shared by the task kinds: BERT's classifier, and pooling of token states over spans."""

import torch
from torch import nn


class ClassifierHead(nn.Module):
    """BERT's classification head (dense → tanh → linear) over pooled features."""

    def __init__(self, hidden_size: int, num_outputs: int, dropout: float = 0.1, input_size: int | None = None):
        super().__init__()
        self.dense = nn.Linear(input_size or hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_size, num_outputs)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.dense(self.dropout(features)))
        return self.out(self.dropout(hidden))


def mean_pool_spans(hidden_states: torch.Tensor, span_mask: torch.Tensor) -> torch.Tensor:
    """Mean of token states under each span: ``hidden_states`` b×n×d, ``span_mask`` b×s×n (0/1) → b×s×d.

    An empty span gives a zero vector; callers mask such spans out."""
    weights = span_mask.to(hidden_states.dtype)
    return torch.einsum("bsn,bnd->bsd", weights, hidden_states) / weights.sum(-1, keepdim=True).clamp(min=1)
