"""Extractive QA (SQuAD format: SearchQA, Quasar-T): a start and an end score per token, the best span answers.

Records, decoding and scores: ``ExtractiveQATask``.
"""

import re
import string
from collections import Counter

import torch
from torch import nn
from torch.nn import functional as F

from knowledge_lm.tasks.base import TaskKind, tokenize_with_offsets
from knowledge_lm.tasks.padding import as_columns, pad, pad_encoder_inputs

MAX_ANSWER_TOKENS = 30
TOKEN_COLUMNS = ("input_ids", "token_type_ids", "attention_mask")
NOT_CONTEXT = (-1, -1)  # the offsets stored for question, special and padding tokens
PUNCTUATION = set(string.punctuation)


# -- SQuAD v1.1 scoring (the official evaluate-v1.1.py) ---------------------------------------
def normalize_answer(text: str) -> str:
    text = text.lower()
    text = "".join(character for character in text if character not in PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    predicted_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    shared = sum((Counter(predicted_tokens) & Counter(gold_tokens)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted_tokens), shared / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: list[str], golds: list[list[str]]) -> dict[str, float]:
    """Mean exact match and F1 (×100), each the best over an example's gold answers."""
    if not predictions:
        return {"exact_match": 0.0, "f1": 0.0}
    em = sum(max(exact_match(p, g) for g in answers) for p, answers in zip(predictions, golds))
    f1 = sum(max(token_f1(p, g) for g in answers) for p, answers in zip(predictions, golds))
    return {"exact_match": 100.0 * em / len(predictions), "f1": 100.0 * f1 / len(predictions)}


# -- encoding -------------------------------------------------------------------------------
def answer_token_span(answer: dict, offsets: list[tuple[int, int]]) -> tuple[int, int]:
    """(first, last) token of the answer among context tokens (``offsets``, NOT_CONTEXT elsewhere), or (0, 0)."""
    start = answer["start"]
    end = start + len(answer["text"])
    if start < 0:
        return 0, 0
    context_tokens = [index for index, (first, last) in enumerate(offsets) if (first, last) != NOT_CONTEXT]
    if not context_tokens or offsets[context_tokens[-1]][1] < end:  # cut off by truncation
        return 0, 0
    first = next((i for i in context_tokens if offsets[i][1] > start), None)
    last = next((i for i in reversed(context_tokens) if offsets[i][0] < end), None)
    if first is None or last is None or last < first:
        return 0, 0
    return first, last


def best_span(
    start_scores: torch.Tensor, end_scores: torch.Tensor, in_context: torch.Tensor, max_tokens: int = MAX_ANSWER_TOKENS
) -> tuple[int, int] | None:
    """The (start, end) token pair of the highest start + end score, start ≤ end < start + max_tokens,
    both inside the context; None when the window holds no context token."""
    if not in_context.any():
        return None
    n = start_scores.shape[0]
    scores = start_scores[:, None] + end_scores[None, :]
    positions = torch.arange(n)
    valid = (positions[None, :] >= positions[:, None]) & (positions[None, :] < positions[:, None] + max_tokens)
    valid &= in_context[:, None] & in_context[None, :]
    flat = scores.masked_fill(~valid, float("-inf")).argmax()
    return int(flat // n), int(flat % n)


class SpanHead(nn.Module):
    def __init__(self, hidden_size: int):
        super().__init__()
        self.qa_outputs = nn.Linear(hidden_size, 2)

    def forward(self, hidden_states: torch.Tensor, batch):
        return self.qa_outputs(hidden_states), hidden_states[:, 0]


class ExtractiveQATask(TaskKind):
    """Task kind of extractive QA: the best span of the context answers.

    Records hold ``text_a`` (the question), ``text_b`` (the context) and ``answers``, a list of
    ``{"text", "start"}`` (``start``: a character offset into the context, -1 where unknown). One window
    per example: the pair is truncated "only_second" to ``max_length``, so the end of a long context is
    never read, and an example whose first answer is not wholly inside the kept context trains towards
    the [CLS] token (start = end = 0), as SQuAD 2.0 models mark "no answer". Training reads the first
    answer; scoring takes the best over all of them.

    Decoding picks the span maximising start + end score with start ≤ end, at most ``MAX_ANSWER_TOKENS``
    tokens, both ends inside the context, and cuts the answer out of the context by the tokens' character
    offsets. Scores are SQuAD v1.1's: exact match and token F1 of normalised answers (lower case,
    punctuation and the articles a/an/the removed, whitespace collapsed), each the maximum over the gold
    answers, ×100.

    The head's ``features`` (what spectral regularisation reads) are the [CLS] states.
    """

    def encode(self, records, tokenizer, max_length):
        questions, contexts = self.texts(records)
        encoded = tokenize_with_offsets(
            tokenizer, questions, contexts, max_length=max_length, truncation="only_second", kind="extractive QA"
        )
        columns = {name: [list(values) for values in encoded[name]] for name in TOKEN_COLUMNS if name in encoded}
        columns.update(offsets=[], start_positions=[], end_positions=[])
        for index, record in enumerate(records):
            segments = encoded.sequence_ids(index)
            offsets = [
                tuple(pair) if segment == 1 else NOT_CONTEXT
                for pair, segment in zip(encoded["offset_mapping"][index], segments)
            ]
            first, last = answer_token_span(record["answers"][0], offsets)
            columns["offsets"].append([list(pair) for pair in offsets])
            columns["start_positions"].append(first)
            columns["end_positions"].append(last)
        columns["context"] = contexts
        columns["answers"] = [[answer["text"] for answer in record["answers"]] for record in records]
        return columns

    def collate(self, features, tokenizer):
        columns = as_columns(features)
        batch = pad_encoder_inputs({name: columns[name] for name in TOKEN_COLUMNS if name in columns}, tokenizer)
        batch["offsets"] = pad(columns["offsets"], NOT_CONTEXT[0], width=batch["input_ids"].shape[1])
        for name in ("start_positions", "end_positions"):
            batch[name] = torch.tensor(columns[name], dtype=torch.long)
        batch["context"] = list(columns["context"])
        batch["answers"] = list(columns["answers"])
        return batch

    def build_head(self, hidden_size, dropout):
        return SpanHead(hidden_size)

    def loss(self, logits, batch):
        start_logits, end_logits = logits.float().unbind(-1)
        return (
            F.cross_entropy(start_logits, batch["start_positions"])
            + F.cross_entropy(end_logits, batch["end_positions"])
        ) / 2

    def decode(self, logits, batch):
        logits, offsets = logits.detach().float().cpu(), batch["offsets"].cpu()
        answers = []
        for scores, token_offsets, context in zip(logits, offsets, batch["context"]):
            span = best_span(scores[:, 0], scores[:, 1], token_offsets[:, 0] >= 0)
            if span is None:
                answers.append("")
            else:
                answers.append(context[int(token_offsets[span[0], 0]) : int(token_offsets[span[1], 1])])
        return answers

    def gold(self, batch):
        return batch["answers"]

    def score(self, predictions, gold):
        return squad_scores(predictions, gold)
