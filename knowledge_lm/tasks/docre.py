"""Document-level relation extraction (DocRED, Re-DocRED): every ordered entity pair of a document, multi-label.

Records, encoding, head and loss: ``DocumentRelationTask``; DocRED's Ign F1: ``ign_f1``.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F

from knowledge_lm.tasks import statistics
from knowledge_lm.tasks.base import ENCODER_INPUTS, TaskKind, tokenize_with_offsets
from knowledge_lm.tasks.heads import mean_pool_spans
from knowledge_lm.tasks.padding import as_columns, pad_encoder_inputs

NA = 0  # the "no relation" class: the adaptive threshold
BLOCK_SIZE = 64  # ATLOP's group bilinear block size (shrunk to divide small hidden sizes)


# -- scores -----------------------------------------------------------------------------------
def fact_counts(predictions: list[list], gold: list[dict]) -> dict[str, int]:
    """Counts over a split: predicted facts (deduplicated per document), gold facts, correct, correct in train."""
    counts = {"predicted": 0, "gold": 0, "correct": 0, "correct_in_train": 0}
    for predicted_facts, answer in zip(predictions, gold, strict=True):
        gold_in_train = {
            tuple(fact): bool(flag) for fact, flag in zip(answer["facts"], answer["in_train"], strict=True)
        }
        counts["gold"] += len(gold_in_train)
        for fact in {tuple(fact) for fact in predicted_facts}:
            counts["predicted"] += 1
            if fact in gold_in_train:
                counts["correct"] += 1
                counts["correct_in_train"] += gold_in_train[fact]
    return counts


def harmonic_mean(precision: float, recall: float) -> float:
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def f1(predictions: list[list], gold: list[dict]) -> float:
    counts = fact_counts(predictions, gold)
    precision = counts["correct"] / counts["predicted"] if counts["predicted"] else 0.0
    recall = counts["correct"] / counts["gold"] if counts["gold"] else 0.0
    return 100.0 * harmonic_mean(precision, recall)


def ign_f1(predictions: list[list], gold: list[dict]) -> float:
    """DocRED's Ign F1 of ``predictions`` against ``gold``, ×100.

    Scores (×100). ``f1``: micro-F1 over (document, head, tail, relation) facts. ``ign_f1``: DocRED's
    official "Ign F1" (thunlp/DocRED ``evaluation.py``): a *correct* prediction whose fact also appears in
    the training data — some mention name of the head, some mention name of the tail and the relation
    form a (name, name, relation) key of a training fact, keys taken over all mention-name pairs — is
    removed from both the correct count and the number of predictions; recall is left as in F1. A correct
    prediction is a gold fact, so the dataset marks each gold fact ``in_train`` at read time and ``gold``
    carries the flags: the kind never needs the training set itself.
    """
    counts = fact_counts(predictions, gold)
    ignored = counts["correct_in_train"]
    counted = counts["predicted"] - ignored
    precision = (counts["correct"] - ignored) / counted if counted else 0.0
    recall = counts["correct"] / counts["gold"] if counts["gold"] else 0.0
    return 100.0 * harmonic_mean(precision, recall)


SCORES = {"f1": f1, "ign_f1": ign_f1}


# -- the head ---------------------------------------------------------------------------------
class EntityPairHead(nn.Module):
    def __init__(self, hidden_size: int, num_classes: int, dropout: float, block_size: int = BLOCK_SIZE):
        super().__init__()
        self.block_size = math.gcd(hidden_size, block_size)
        self.dropout = nn.Dropout(dropout)
        self.head_projection = nn.Linear(hidden_size, hidden_size)
        self.tail_projection = nn.Linear(hidden_size, hidden_size)
        self.bilinear = nn.Linear(hidden_size * self.block_size, num_classes)

    def entities(self, hidden_states: torch.Tensor, batch) -> torch.Tensor:
        """b × entities × d: mean over each mention's tokens, then over the entity's mentions (zero if none)."""
        mentions = mean_pool_spans(hidden_states, batch["mention_mask"])
        return mean_pool_spans(mentions, batch["entity_mentions"])

    def forward(self, hidden_states: torch.Tensor, batch):
        entities = self.dropout(self.entities(hidden_states, batch))
        heads = torch.tanh(self.head_projection(entities[batch["pair_document"], batch["pair_head"]]))
        tails = torch.tanh(self.tail_projection(entities[batch["pair_document"], batch["pair_tail"]]))
        pairs, size = heads.shape
        head_blocks = heads.view(pairs, size // self.block_size, self.block_size, 1)
        tail_blocks = tails.view(pairs, size // self.block_size, 1, self.block_size)
        logits = self.bilinear((head_blocks * tail_blocks).reshape(pairs, size * self.block_size))
        return logits, torch.cat([heads, tails], dim=-1)


# -- the kind ---------------------------------------------------------------------------------
def token_span(offsets: list[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
    """[first, last + 1) of the tokens overlapping characters [start, end), or None if all were cut off."""
    inside = [
        index
        for index, (token_start, token_end) in enumerate(offsets)
        if token_end > token_start and token_start < end and token_end > start
    ]
    return (inside[0], inside[-1] + 1) if inside else None


class DocumentRelationTask(TaskKind):
    """Task kind ``docre``: every ordered entity pair of a document, multi-label.

    Records. One record is one document: ``text_a`` its tokens joined with single spaces; ``entities`` one
    dict per entity whose ``mentions`` are character spans into ``text_a`` (``start``, ``end``, ``name``);
    ``label`` the gold facts as ``[head entity, tail entity, relation index]`` (an index into the spec's
    labels, whose 0 is ``NA``); ``in_train`` one flag per fact (see ``ign_f1``).

    Encoding. The document is tokenized up to the data module's ``max_length``; longer documents are cut,
    and a mention wholly beyond the cut is dropped. An entity left without a mention gets a zero vector:
    its pairs are still scored, so its facts count as missed, never silently removed from recall.

    Head. An entity is the mean over each mention's tokens, then the mean over its mentions (ERICA's
    encoding). Every ordered pair (h ≠ t) of a document's entities becomes a head and a tail vector
    (a linear projection + tanh each) read by ATLOP's group bilinear layer (ATLOP without its localized
    context pooling): the vectors are cut into blocks of ``BLOCK_SIZE``, the outer products of matching
    blocks feed one linear layer to ``NA`` + one logit per relation. Pairs are flattened over the batch
    (``pair_document``, ``pair_head``, ``pair_tail``), not padded to the largest document.
    ``features`` (what spectral regularisation reads) are the pair vectors ``[head; tail]``, one row per
    pair of the batch (pairs × 2·hidden), not one per document.

    Loss. ATLOP's adaptive-threshold loss: class 0 (``NA``) is a learned per-pair threshold; the loss
    raises every gold relation above it and keeps every other relation below it. A pair's prediction is
    every relation whose logit exceeds its ``NA`` logit (none: no fact). Unlike BCE with a global 0.5 it
    needs no threshold tuned on dev, which matters with ~97% of pairs unrelated and few training documents.
    """

    @property
    def num_classes(self) -> int:
        return len(self.spec.labels)  # NA + the relations

    def encode(self, records, tokenizer, max_length):
        texts, _ = self.texts(records)
        encoded = tokenize_with_offsets(tokenizer, texts, max_length=max_length, kind="document-level RE")
        columns = {name: list(encoded[name]) for name in ENCODER_INPUTS if name in encoded}
        columns.update(
            {
                name: []
                for name in (
                    "num_entities",
                    "mention_entity",
                    "mention_start",
                    "mention_end",
                    "fact_head",
                    "fact_tail",
                    "fact_relation",
                    "fact_in_train",
                )
            }
        )
        for record, offsets in zip(records, encoded["offset_mapping"]):
            spans = [
                (entity_index, token_span(offsets, mention["start"], mention["end"]))
                for entity_index, entity in enumerate(record["entities"])
                for mention in entity["mentions"]
            ]
            kept = [(entity_index, span) for entity_index, span in spans if span is not None]
            columns["num_entities"].append(len(record["entities"]))
            columns["mention_entity"].append([entity_index for entity_index, _ in kept])
            columns["mention_start"].append([span[0] for _, span in kept])
            columns["mention_end"].append([span[1] for _, span in kept])
            columns["fact_head"].append([head for head, _, _ in record["label"]])
            columns["fact_tail"].append([tail for _, tail, _ in record["label"]])
            columns["fact_relation"].append([relation for _, _, relation in record["label"]])
            columns["fact_in_train"].append([bool(flag) for flag in record["in_train"]])
        return columns

    def collate(self, features, tokenizer):
        columns = as_columns(features)
        batch = pad_encoder_inputs(columns, tokenizer)
        features = [dict(zip(columns, values)) for values in zip(*columns.values())]  # the per-document loops read rows
        size, length = batch["input_ids"].shape
        most_mentions = max(1, max(len(feature["mention_entity"]) for feature in features))
        most_entities = max(1, max(feature["num_entities"] for feature in features))
        mention_mask = torch.zeros(size, most_mentions, length)
        entity_mentions = torch.zeros(size, most_entities, most_mentions)
        pair_document, pair_head, pair_tail, pair_classes = [], [], [], []
        for document, feature in enumerate(features):
            for mention, (entity, start, end) in enumerate(
                zip(feature["mention_entity"], feature["mention_start"], feature["mention_end"])
            ):
                mention_mask[document, mention, start:end] = 1
                entity_mentions[document, entity, mention] = 1
            relations = {}
            for head, tail, relation in zip(feature["fact_head"], feature["fact_tail"], feature["fact_relation"]):
                relations.setdefault((head, tail), []).append(relation)
            entities = range(feature["num_entities"])
            for head, tail in ((head, tail) for head in entities for tail in entities if head != tail):
                pair_document.append(document)
                pair_head.append(head)
                pair_tail.append(tail)
                pair_classes.append(relations.get((head, tail), [NA]))
        pair_labels = torch.zeros(len(pair_classes), self.num_classes)
        for pair, classes in enumerate(pair_classes):
            pair_labels[pair, classes] = 1
        batch.update(
            {
                "mention_mask": mention_mask,
                "entity_mentions": entity_mentions,
                "pair_document": torch.tensor(pair_document, dtype=torch.long),
                "pair_head": torch.tensor(pair_head, dtype=torch.long),
                "pair_tail": torch.tensor(pair_tail, dtype=torch.long),
                "pair_labels": pair_labels,
                # Per document, its gold facts; also what the training step counts examples by.
                "labels": [
                    [list(fact) for fact in zip(feature["fact_head"], feature["fact_tail"], feature["fact_relation"])]
                    for feature in features
                ],
                "facts_in_train": [list(feature["fact_in_train"]) for feature in features],
            }
        )
        return batch

    def build_head(self, hidden_size, dropout):
        return EntityPairHead(hidden_size, self.num_classes, dropout)

    def loss(self, logits, batch):
        """ATLOP's adaptive-threshold loss, averaged over the batch's pairs."""
        logits, labels = logits.float(), batch["pair_labels"].float()
        if logits.shape[0] == 0:
            return logits.sum()
        threshold = torch.zeros_like(labels)
        threshold[:, NA] = 1
        labels = labels.clone()
        labels[:, NA] = 0
        # Masked classes get a huge negative logit rather than -inf: 0 · -inf would be NaN.
        above = logits.masked_fill((labels + threshold) == 0, -1e30)
        below = logits.masked_fill(labels == 1, -1e30)
        positives_above_threshold = -(F.log_softmax(above, dim=-1) * labels).sum(-1)
        threshold_above_negatives = -(F.log_softmax(below, dim=-1) * threshold).sum(-1)
        return (positives_above_threshold + threshold_above_negatives).mean()

    def decode(self, logits, batch):
        """Per document, its predicted facts ``[head, tail, relation]``: relations scoring above the pair's NA."""
        facts = [[] for _ in batch["labels"]]
        predicted = logits.float() > logits[:, NA : NA + 1].float()
        predicted[:, NA] = False
        documents, heads, tails = (batch[name].tolist() for name in ("pair_document", "pair_head", "pair_tail"))
        for pair, relation in predicted.nonzero().tolist():
            facts[documents[pair]].append([heads[pair], tails[pair], relation])
        return facts

    def gold(self, batch):
        return [{"facts": facts, "in_train": flags} for facts, flags in zip(batch["labels"], batch["facts_in_train"])]

    def score(self, predictions, gold):
        return {name: SCORES[name](predictions, gold) for name in self.spec.metrics}

    def additive_statistics(self, metric, predicted, gold):
        if metric not in ("f1", "ign_f1"):
            return None
        counts = [fact_counts([facts], [answer]) for facts, answer in zip(predicted, gold)]
        return statistics.document_relation_statistics(metric, counts)

    def strata(self, records):
        """Documents have no single label: train fractions are a plain seeded draw of documents."""
        return [0] * len(records)
