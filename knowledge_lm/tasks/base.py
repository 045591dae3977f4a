"""The interface of a task kind, shared by the data module (encode, collate) and the model (head, loss, decode,
score)."""

from typing import ClassVar

import torch
from torch import nn
from torch.nn import functional as F

from knowledge_lm.core.errors import KlmError

ENCODER_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def tokenize_with_offsets(
    tokenizer, first, second=None, max_length: int = 512, truncation=True, kind: str = "this task"
):
    """The tokenizer's encoding with character offsets per token (which only fast tokenizers give)."""
    if not getattr(tokenizer, "is_fast", False):
        raise KlmError(f"{kind} needs a fast tokenizer (it reads the tokens' character offsets)")
    return tokenizer(first, second, truncation=truncation, max_length=max_length, return_offsets_mapping=True)


class TaskKind:
    """Everything that differs between kinds of task; methods never see it.

    Data side: ``encode`` turns records into columns (token ids, labels, any positions the head needs);
    ``collate`` pads a list of examples into a batch. Model side: ``build_head`` makes a module called as
    ``head(hidden_states, batch) -> (logits, features)`` (``features``: the pooled vectors the head
    classifies, which spectral regularisation reads); ``loss``; ``decode`` turns logits into one
    prediction per example and ``gold`` gives the matching answers, both plain Python, gathered over
    devices and handed to ``score`` for the whole split. ``class_weights``: a tensor of one weight per label that
    the default (single-label) loss weights each example's cross-entropy by (training setting ``class_balance``),
    or None.
    """

    name: ClassVar[str]
    # Whether a training step of this kind's head and loss can be captured whole as a CUDA graph: every tensor of
    # its batch is an input, and the head and loss neither wait for the device nor take shapes from values.
    captures_step: ClassVar[bool] = False

    def __init__(self, spec):
        self.spec = spec
        self.class_weights: torch.Tensor | None = None

    def texts(self, records: list[dict]) -> tuple[list[str], list[str] | None]:
        """The text (pairs) the tokenizer reads; ``klm prepare`` aligns knowledge spans to the same tokens."""
        first = [record["text_a"] for record in records]
        second = [record["text_b"] for record in records] if records[0].get("text_b") is not None else None
        return first, second

    def map_char_spans(self, record: dict, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Char spans of ``text_a`` as spans of the text ``texts`` gives the tokenizer (which may add markers)."""
        return list(spans)

    def encode(self, records: list[dict], tokenizer, max_length: int) -> dict[str, list]:
        raise NotImplementedError

    def collate(self, features: list[dict], tokenizer) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def build_head(self, hidden_size: int, dropout: float) -> nn.Module:
        raise NotImplementedError

    # Single-label classification by default; kinds that predict something else override these.
    def loss(self, logits: torch.Tensor, batch) -> torch.Tensor:
        weight = None if self.class_weights is None else self.class_weights.to(logits.device)
        return F.cross_entropy(logits.float(), batch["labels"], weight=weight)

    def decode(self, logits: torch.Tensor, batch) -> list:
        return logits.argmax(-1).tolist()

    def gold(self, batch) -> list:
        return batch["labels"].tolist()

    def score(self, predictions: list, gold: list) -> dict[str, float]:
        raise NotImplementedError

    def additive_statistics(self, metric: str, predicted: list, gold: list):
        """``(columns, value)`` of ``knowledge_lm.tasks.statistics`` whose column sums over any resample of the
        examples give ``score``'s ``metric`` (what the paired bootstrap resamples); None where it is no such
        function of sums (the bootstrap then calls ``score``)."""
        return None

    def strata(self, records: list[dict]) -> list:
        """What train-fraction subsets are stratified by (the label, by default)."""
        return [record["label"] for record in records]
