"""Head modules shared by the task kinds and the pretraining stages: BERT's classifier, pooling of token
states over spans, and masked language modelling (BERT's LM head and masking)."""

import torch
from torch import nn
from torch.nn import functional as F

IGNORE = -100  # label of a token the MLM loss skips (cross_entropy's default ignore_index)


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


class MLMHead(nn.Module):
    """BERT's LM head (dense → GELU → LayerNorm → decoder); the decoder is tied to the word embeddings."""

    def __init__(self, embeddings: nn.Embedding, hidden_size: int, eps: float = 1e-12):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=eps)
        self.embeddings = embeddings  # shared module: the decoder weight *is* the embedding matrix
        self.bias = nn.Parameter(torch.zeros(embeddings.num_embeddings))

    def forward(self, hidden_states):
        return F.linear(self.norm(F.gelu(self.dense(hidden_states))), self.embeddings.weight, self.bias)


def mask_tokens(
    input_ids: torch.Tensor,
    protected: torch.Tensor,
    mask_token_id: int,
    vocab_size: int,
    probability: float = 0.15,
    generator: torch.Generator | None = None,
):
    """BERT masking that never touches ``protected`` tokens (entity mentions, special tokens, padding).

    Each unprotected token is chosen with ``probability``; of the chosen, 80 % become ``mask_token_id``,
    10 % a random token, 10 % stay. Returns ``(masked input_ids, labels)``; labels are -100 where not chosen.
    """

    def uniform():
        return torch.rand(input_ids.shape, generator=generator, device=input_ids.device)

    chosen = (uniform() < probability) & ~protected.bool()
    labels = input_ids.masked_fill(~chosen, IGNORE)
    masked = input_ids.clone()
    replace = chosen & (uniform() < 0.8)
    masked[replace] = mask_token_id
    randomise = chosen & ~replace & (uniform() < 0.5)
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator, device=input_ids.device)
    masked[randomise] = random_ids[randomise]
    return masked, labels
