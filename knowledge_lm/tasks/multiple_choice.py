"""Multiple choice (CosmosQA): one score per (context, question + choice) pair, softmax over the choices.

Each example becomes ``c`` token sequences, the pairs (context, question + " " + choice), with the
context truncated ("only_first") to ``max_length``; a pair whose question and choice alone overflow
``max_length`` is truncated "longest_first" instead (only_first cannot fit it). Batches hold the
``b·c`` sequences flattened, padded to the longest, with ``num_choices`` = c; the head scores each
sequence's [CLS] state and reshapes the scores to b×c. Every example of a dataset has the same
number of choices.

Knowledge features are not aligned to this kind: ``klm prepare`` aligns spans to one token sequence
per example, while a multiple-choice example is ``c`` sequences, so ``texts`` refuses.
"""

import torch
from torch import nn

from knowledge_lm.core.catalog import NO_KNOWLEDGE_MULTIPLE_CHOICE
from knowledge_lm.core.errors import KlmError
from knowledge_lm.tasks import metrics
from knowledge_lm.tasks.base import TaskKind
from knowledge_lm.tasks.heads import ClassifierHead
from knowledge_lm.tasks.padding import as_columns, pad_encoder_inputs

TOKEN_COLUMNS = ("input_ids", "token_type_ids", "attention_mask")


class ChoiceHead(nn.Module):
    """BERT's multiple-choice head: a score per sequence from its [CLS] state (through the dense → tanh
    layer BERT's pooler applies, which our encoders are loaded without), reshaped to b×c."""

    def __init__(self, hidden_size: int, dropout: float):
        super().__init__()
        self.scorer = ClassifierHead(hidden_size, 1, dropout)

    def forward(self, hidden_states: torch.Tensor, batch):
        features = hidden_states[:, 0]
        return self.scorer(features).view(-1, batch["num_choices"]), features


def encode_pairs(tokenizer, contexts: list[str], endings: list[str], max_length: int) -> dict[str, list]:
    """Tokenized pairs, contexts truncated first; pairs whose ending alone overflows fall back to longest_first."""
    ending_lengths = [len(ids) for ids in tokenizer(endings, add_special_tokens=False)["input_ids"]]
    room = max_length - tokenizer.num_special_tokens_to_add(pair=True)
    fits = [length < room for length in ending_lengths]
    encoded = {}
    for strategy, fitting in (("only_first", True), ("longest_first", False)):
        indices = [index for index, fit in enumerate(fits) if fit == fitting]
        if not indices:
            continue
        part = tokenizer(
            [contexts[i] for i in indices], [endings[i] for i in indices], truncation=strategy, max_length=max_length
        )
        for name, values in part.items():
            column = encoded.setdefault(name, [None] * len(contexts))
            for index, value in zip(indices, values):
                column[index] = list(value)
    return encoded


class MultipleChoiceTask(TaskKind):
    def texts(self, records):
        raise KlmError(NO_KNOWLEDGE_MULTIPLE_CHOICE)

    def encode(self, records, tokenizer, max_length):
        num_choices = {len(record["choices"]) for record in records}
        if len(num_choices) != 1:
            raise KlmError(f"{self.spec.name}: examples have different numbers of choices ({sorted(num_choices)})")
        (count,) = num_choices
        contexts = [record["text_a"] for record in records for _ in record["choices"]]
        endings = [f"{record['text_b']} {choice}" for record in records for choice in record["choices"]]
        flat = encode_pairs(tokenizer, contexts, endings, max_length)
        columns = {
            name: [values[start : start + count] for start in range(0, len(values), count)]
            for name, values in flat.items()
        }
        return {**columns, "labels": [record["label"] for record in records]}

    def collate(self, features, tokenizer):
        columns = as_columns(features)
        num_choices = len(columns["input_ids"][0])
        flat = {
            name: [sequence for choices in columns[name] for sequence in choices]
            for name in TOKEN_COLUMNS
            if name in columns
        }
        batch = pad_encoder_inputs(flat, tokenizer)
        batch["labels"] = torch.tensor(columns["labels"], dtype=torch.long)
        batch["num_choices"] = num_choices
        return batch

    def build_head(self, hidden_size, dropout):
        return ChoiceHead(hidden_size, dropout)

    def score(self, predictions, gold):
        return metrics.compute(self.spec, torch.tensor(predictions), torch.tensor(gold))
