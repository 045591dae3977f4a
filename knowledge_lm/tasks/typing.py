"""Entity typing: any number of types for one marked mention of a sentence (Open Entity, FIGER).

Representation and decoding: ``TypingTask``; the scores: ``typing_scores``.
"""

import torch
from torch import nn
from torch.nn import functional as F

from knowledge_lm.knowledge.annotate import align_char_spans
from knowledge_lm.tasks import statistics
from knowledge_lm.tasks.base import ENCODER_INPUTS, TaskKind, tokenize_with_offsets
from knowledge_lm.tasks.heads import ClassifierHead, mean_pool_spans
from knowledge_lm.tasks.padding import as_columns, pad_encoder_inputs


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


def f1(precision: float, recall: float) -> float:
    return ratio(2 * precision * recall, precision + recall)


def strict_accuracy(predictions, gold) -> float:
    return ratio(sum(set(p) == set(t) for p, t in zip(predictions, gold)), len(gold))


def loose_macro(predictions, gold) -> tuple[float, float, float]:
    """(precision, recall, F1): per-mention overlap ratios averaged over all N mentions (ERNIE's code)."""
    precision = sum(ratio(len(set(p) & set(t)), len(set(p))) for p, t in zip(predictions, gold))
    recall = sum(ratio(len(set(p) & set(t)), len(set(t))) for p, t in zip(predictions, gold))
    precision, recall = ratio(precision, len(gold)), ratio(recall, len(gold))
    return precision, recall, f1(precision, recall)


def ling_weld_loose_macro(predictions, gold) -> tuple[float, float, float]:
    """(precision, recall, F1): per-mention overlap ratios, precision averaged over the mentions with a
    prediction and recall over the mentions with a gold type (Ling & Weld 2012)."""
    precision = sum(ratio(len(set(p) & set(t)), len(set(p))) for p, t in zip(predictions, gold))
    recall = sum(ratio(len(set(p) & set(t)), len(set(t))) for p, t in zip(predictions, gold))
    precision = ratio(precision, sum(bool(set(p)) for p in predictions))
    recall = ratio(recall, sum(bool(set(t)) for t in gold))
    return precision, recall, f1(precision, recall)


def loose_micro(predictions, gold) -> tuple[float, float, float]:
    """(precision, recall, F1) over (mention, type) pairs pooled across mentions."""
    correct = sum(len(set(p) & set(t)) for p, t in zip(predictions, gold))
    precision = ratio(correct, sum(len(set(p)) for p in predictions))
    recall = ratio(correct, sum(len(set(t)) for t in gold))
    return precision, recall, f1(precision, recall)


def typing_scores(predictions, gold) -> dict[str, float]:
    """Every typing score, in % (as the papers print them), for type sets given as iterables of type ids.

    Scores (Ling & Weld 2012, "Fine-Grained Entity Recognition", §4), for N mentions with gold types T_i and
    predicted types P_i, in %:
    - strict_accuracy = (1/N) Σ_i 1[P_i = T_i]
    - loose_macro_precision = (1/N) Σ_{i: P_i ≠ ∅} |P_i ∩ T_i| / |P_i|
    - loose_macro_recall    = (1/N) Σ_{i: T_i ≠ ∅} |P_i ∩ T_i| / |T_i|
    - ling_weld_loose_macro_precision = (1/|{i: P_i ≠ ∅}|) Σ_{i: P_i ≠ ∅} |P_i ∩ T_i| / |P_i|
    - ling_weld_loose_macro_recall    = (1/|{i: T_i ≠ ∅}|) Σ_{i: T_i ≠ ∅} |P_i ∩ T_i| / |T_i|
    - loose_micro_precision = Σ_i |P_i ∩ T_i| / Σ_i |P_i|,  loose_micro_recall = Σ_i |P_i ∩ T_i| / Σ_i |T_i|
    - every *_f1 = 2PR / (P + R) of its precision and recall (not a mean of per-mention F1s).
    The two loose macro scores differ only in their denominators. ``loose_macro_*`` is ERNIE's code's form
    (``loose_macro`` of its evaluation scripts): both averages divide by all N mentions. ``ling_weld_loose_macro_*``
    is Ling & Weld's definition: precision averages over the mentions with a prediction, recall over the
    mentions with a non-empty gold set. They agree when no set is empty (FIGER with ``typing_at_least_one``);
    on Open Entity, where about a fifth of the gold sets are empty, they differ, and the papers do not say
    which they report (ERNIE's numbers come from its code's form, ``loose_macro_*``).
    ``micro_precision``/``micro_recall``/``micro_f1`` are the loose micro scores under the names ERNIE and
    KnowBERT report for Open Entity ("P, R, F1"). A ratio whose denominator is 0 is 0, never NaN.
    """
    if len(predictions) != len(gold):
        raise ValueError(f"{len(predictions)} predictions for {len(gold)} gold answers")
    micro = loose_micro(predictions, gold)
    scores = {"strict_accuracy": strict_accuracy(predictions, gold)}
    averages = (
        ("loose_macro", loose_macro(predictions, gold)),
        ("ling_weld_loose_macro", ling_weld_loose_macro(predictions, gold)),
        ("loose_micro", micro),
        ("micro", micro),
    )
    for average, values in averages:
        scores.update(zip((f"{average}_precision", f"{average}_recall", f"{average}_f1"), values))
    return {name: 100.0 * value for name, value in scores.items()}


def decode_types(logits: torch.Tensor, at_least_one: bool) -> list[list[int]]:
    """Per row, the sorted ids of the types with a positive logit (sigmoid > 0.5); with ``at_least_one``,
    the highest-scoring type where none is positive."""
    chosen = logits > 0
    if at_least_one:
        chosen[torch.arange(len(logits)), logits.argmax(-1)] = True
    return [row.nonzero().flatten().tolist() for row in chosen]


class MentionHead(nn.Module):
    def __init__(self, hidden_size: int, num_types: int, dropout: float):
        super().__init__()
        self.classifier = ClassifierHead(hidden_size, num_types, dropout)

    def forward(self, hidden_states: torch.Tensor, batch):
        features = mean_pool_spans(hidden_states, batch["mention_mask"].unsqueeze(1)).squeeze(1)
        return self.classifier(features), features


class TypingTask(TaskKind):
    """Records: ``text_a``, ``mention`` ({"start", "end"}: character offsets, end exclusive) and
    ``label``, the list of type ids (possibly empty).

    Representation. The mention is the mean of the last layer's states over its sub-word tokens (ERICA's
    entity encoding), found through the fast tokenizer's offset mapping; the text is not changed, so
    ``texts()`` gives ``text_a`` as is and every character span of a record (the mention, linked
    entities, ``klm prepare``'s knowledge spans) stays aligned to the same tokens. Markers around the
    mention (ERNIE, KnowBERT) would shift the characters that knowledge features are aligned to. A mention
    cut off wholly by ``max_length`` (none is in Open Entity at 128 tokens) is represented by [CLS].
    The head is BERT's classifier (dense → tanh → linear) over that vector, one logit per type, trained
    with binary cross-entropy against multi-hot targets.

    Decoding: every type whose logit is above 0 (sigmoid > 0.5). The two kinds differ only when no type
    passes, following what ERNIE's evaluation scripts do on each dataset (thunlp/ERNIE, code/):
    - ``"typing"`` predicts the empty set: ERNIE's ``eval_typing.py`` on Open Entity (its fallback line
      is commented out in ``run_typing.py``) and KnowBERT's ``SimpleClassifier`` (``logits > 0``). About a
      fifth of Open Entity's mentions have no general type, so a forced type would always be wrong there.
    - ``"typing_at_least_one"`` adds the highest-scoring type: ERNIE's ``eval_figer.py``
      (``x > 0 or x == max``), for FIGER, where every mention has a type.
    Predictions and gold answers are sorted lists of type ids (sets, as lists so they pickle and serialise).
    """

    @property
    def at_least_one(self) -> bool:
        return self.spec.kind == "typing_at_least_one"

    def texts(self, records):
        return [record["text_a"] for record in records], None

    def encode(self, records, tokenizer, max_length):
        texts, _ = self.texts(records)
        encoded = tokenize_with_offsets(tokenizer, texts, max_length=max_length, kind="entity typing")
        columns = {name: list(encoded[name]) for name in ENCODER_INPUTS if name in encoded}
        columns["mention_span"] = [
            self.mention_span(offsets, record["mention"]) for offsets, record in zip(encoded["offset_mapping"], records)
        ]
        columns["labels"] = [self.multi_hot(record["label"]) for record in records]
        return columns

    @staticmethod
    def mention_span(offsets, mention: dict) -> list[int]:
        """[first, stop) token positions of the mention; [0, 1) ([CLS]) when truncation removed it."""
        tokens = align_char_spans(offsets, [(mention["start"], mention["end"])])[0]
        return [tokens[0], tokens[-1] + 1] if tokens else [0, 1]

    def multi_hot(self, type_ids) -> list[int]:
        targets = [0] * len(self.spec.labels)
        for type_id in type_ids:
            targets[type_id] = 1
        return targets

    def collate(self, features, tokenizer):
        columns = as_columns(features)
        spans = torch.tensor(columns["mention_span"])
        labels = torch.tensor(columns["labels"], dtype=torch.float32)
        batch = pad_encoder_inputs(columns, tokenizer)
        positions = torch.arange(batch["input_ids"].shape[1])
        batch["mention_mask"] = ((positions >= spans[:, :1]) & (positions < spans[:, 1:])).long()
        batch["labels"] = labels.reshape(len(spans), len(self.spec.labels))
        return batch

    def build_head(self, hidden_size, dropout):
        return MentionHead(hidden_size, len(self.spec.labels), dropout)

    def loss(self, logits, batch):
        return F.binary_cross_entropy_with_logits(logits.float(), batch["labels"].float())

    def decode(self, logits, batch):
        return decode_types(logits.detach().float(), self.at_least_one)

    def gold(self, batch):
        return [row.nonzero().flatten().tolist() for row in batch["labels"] > 0.5]

    def score(self, predictions, gold):
        scores = typing_scores(predictions, gold)
        return {name: scores[name] for name in self.spec.metrics}

    def additive_statistics(self, metric, predicted, gold):
        if metric in ("micro_f1", "loose_micro_f1", "loose_macro_f1", "strict_accuracy"):
            return statistics.typing_statistics(metric, predicted, gold)
        return None

    def strata(self, records):
        # The first type id: Open Entity's 34 type sets make the 1% subset 46 rows instead of ~20
        # (every set seen once still gives a row); its 9 first types plus "no type" give 22.
        return [record["label"][0] if record["label"] else None for record in records]
