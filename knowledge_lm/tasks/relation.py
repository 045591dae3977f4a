"""Sentence-level relation classification between a head and a tail entity (SemEval-2010 Task 8, TACRED, FewRel).

Records carry ``entities``: character spans into ``text_a`` with a role, ``e1``/``head``/``subj`` for the
head and ``e2``/``tail``/``obj`` for the tail (``type``, when present, names the entity type). Two kinds
differ only in how the pair is represented; both classify the concatenation ``[head; tail]`` of two
entity vectors with BERT's classification head.
"""

from collections import Counter
from dataclasses import dataclass, replace

import torch
from torch import nn

from knowledge_lm.core.errors import KlmError
from knowledge_lm.knowledge.annotate import align_char_spans
from knowledge_lm.tasks import statistics
from knowledge_lm.tasks.base import TaskKind, tokenize_with_offsets
from knowledge_lm.tasks.heads import ClassifierHead, mean_pool_spans
from knowledge_lm.tasks.padding import as_columns, pad_encoder_inputs

HEAD_ROLES = ("e1", "head", "subj")
TAIL_ROLES = ("e2", "tail", "obj")
# The label meaning "none of the relations": SemEval's and TACRED's scorers leave it out of P/R/F1.
NEGATIVE_LABELS = ("Other", "no_relation")
HEAD_MARKER, HEAD_TYPE_MARKER = "@", "*"
TAIL_MARKER, TAIL_TYPE_MARKER = "#", "^"
# A relation dataset's tasks: the same examples, the pair represented by markers or by mean pooling.
RELATION_TASKS = {"main": "relation", "mean_pool": "relation_mean"}


class RelationTasks:
    """Mixed into a relation dataset: its two entity representations as tasks (markers: ``main``;
    mean-pooled entities: ``mean_pool``), both on the dataset's ``relation_spec``."""

    tasks = tuple(RELATION_TASKS)

    @classmethod
    def spec(cls, task: str):
        return replace(cls.relation_spec, name=task, kind=RELATION_TASKS[task])


# -- scorers ----------------------------------------------------------------------------------
def accuracy(predicted: list, gold: list) -> float:
    return sum(p == g for p, g in zip(predicted, gold)) / len(gold) if gold else 0.0


def macro_f1(predicted: list, gold: list, negative=None) -> float:
    """F1 per label averaged over the labels seen in gold or predictions, ``negative`` excluded
    (sklearn's ``f1_score(average="macro", zero_division=0)`` with its default label set)."""
    true_positives, predicted_counts, gold_counts = Counter(), Counter(predicted), Counter(gold)
    for p, g in zip(predicted, gold):
        if p == g:
            true_positives[g] += 1
    labels = (set(predicted_counts) | set(gold_counts)) - {negative}
    if not labels:
        return 0.0
    f1s = []
    for label in labels:
        precision = true_positives[label] / predicted_counts[label] if predicted_counts[label] else 0.0
        recall = true_positives[label] / gold_counts[label] if gold_counts[label] else 0.0
        f1s.append(2 * precision * recall / (precision + recall) if precision + recall else 0.0)
    return sum(f1s) / len(f1s)


def tacred_micro_scores(predicted: list, gold: list, negative="no_relation") -> dict[str, float]:
    """Micro precision, recall and F1 as TACRED's official ``score.py`` computes them.

    ``negative`` (no_relation) is left out of both sides: a guess counts when it is not no_relation, a
    gold answer when it is not, a hit when both agree on a relation. With no guesses precision is 1.0
    (as the scorer sets it), with no gold relation recall is 0.0, and F1 is 0.0 when P + R is 0, so
    predicting no_relation everywhere scores P 1, R 0, F1 0.
    """
    guessed = sum(p != negative for p in predicted)
    relations = sum(g != negative for g in gold)
    correct = sum(p == g != negative for p, g in zip(predicted, gold))
    precision = correct / guessed if guessed else 1.0
    recall = correct / relations if relations else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"micro_precision": precision, "micro_recall": recall, "micro_f1": f1}


def undirected(label: str) -> str:
    """``Cause-Effect(e2,e1)`` → ``Cause-Effect``; labels without a direction are returned as they are."""
    return label.split("(", 1)[0]


def semeval_macro_f1(predicted: list[str], gold: list[str], other: str | None = "Other") -> float:
    """SemEval-2010 Task 8's official score: the macro-averaged F1 of the "(9+1)-way evaluation with
    directionality taken into account" of ``semeval2010_task8_scorer-v1.2.pl``.

    For each relation R (labels without their direction), per that scorer:
    correct = examples whose directed prediction equals the directed gold label of relation R;
    P = correct / predictions of R in either direction (a right relation with the wrong direction is
    a wrong decision, its "xDIRx"), 0 without such predictions; R = correct / gold examples of R in
    either direction; F1 = 0 when P + R = 0. The macro average runs over the relations present in the
    gold labels, ``other`` excluded; so, as in the scorer, a relation absent from gold is not averaged
    (its wrong guesses lower nobody's precision) and Other is never a class. No gold relation: 0.
    """
    correct, guessed, answers = Counter(), Counter(), Counter()
    for guess, answer in zip(predicted, gold):
        guessed[undirected(guess)] += 1
        answers[undirected(answer)] += 1
        if guess == answer:
            correct[undirected(answer)] += 1
    relations = [relation for relation in answers if other is None or relation != undirected(other)]
    if not relations:
        return 0.0
    f1s = []
    for relation in relations:
        precision = correct[relation] / guessed[relation] if guessed[relation] else 0.0
        recall = correct[relation] / answers[relation]
        f1s.append(2 * precision * recall / (precision + recall) if precision + recall else 0.0)
    return sum(f1s) / len(relations)


SCORERS = {
    "accuracy": lambda predicted, gold, negative: accuracy(predicted, gold),
    "macro_f1": macro_f1,
    "micro_precision": lambda predicted, gold, negative: tacred_micro_scores(predicted, gold, negative)[
        "micro_precision"
    ],
    "micro_recall": lambda predicted, gold, negative: tacred_micro_scores(predicted, gold, negative)["micro_recall"],
    "micro_f1": lambda predicted, gold, negative: tacred_micro_scores(predicted, gold, negative)["micro_f1"],
    "semeval_macro_f1": semeval_macro_f1,
}


# -- entities and markers ----------------------------------------------------------------------
def head_and_tail(record: dict) -> tuple[dict, dict]:
    """The record's head and tail entities, whichever of the role names (e1/e2, head/tail, subj/obj) it uses."""
    found = {"head": [], "tail": []}
    for entity in record.get("entities") or []:
        if entity.get("role") in HEAD_ROLES:
            found["head"].append(entity)
        elif entity.get("role") in TAIL_ROLES:
            found["tail"].append(entity)
    for role, entities in found.items():
        if len(entities) != 1:
            raise KlmError(
                f"{record.get('id', 'a record')}: expected one {role} entity (role "
                f"{'/'.join(HEAD_ROLES if role == 'head' else TAIL_ROLES)}), found {len(entities)}"
            )
    return found["head"][0], found["tail"][0]


@dataclass(frozen=True)
class MarkedText:
    """A text with entity markers inserted: ``opening_markers`` are the char positions of the head's and the
    tail's opening marker; ``insertions`` the ``(original position, inserted length)`` pairs, in order."""

    text: str
    opening_markers: tuple[int, int]
    insertions: tuple[tuple[int, int], ...]

    def position(self, original: int) -> int:
        """Where the character at ``original`` in the unmarked text sits in the marked one."""
        return original + sum(length for at, length in self.insertions if at <= original)

    def span(self, start: int, end: int) -> tuple[int, int]:
        """An unmarked char span ``[start, end)`` in the marked text (markers at its edges stay outside)."""
        return self.position(start), self.position(end - 1) + 1


def entity_type(entity: dict) -> str:
    return str(entity["type"]).replace("_", " ").lower()


def insert_markers(text: str, head: dict, tail: dict) -> MarkedText:
    """``text`` with ``@ head @`` and ``# tail #`` (typed: ``@ * type * head @``, ``# ^ type ^ tail #``)."""
    insertions = []  # (position, sort keys at that position, marker, role of an opening marker)
    for order, (role, entity, marker, type_marker) in enumerate(
        (("head", head, HEAD_MARKER, HEAD_TYPE_MARKER), ("tail", tail, TAIL_MARKER, TAIL_TYPE_MARKER))
    ):
        typed = f" {type_marker} {entity_type(entity)} {type_marker}" if entity.get("type") else ""
        # At one position a closing marker goes first (adjacent entities), and an outer entity opens before
        # an inner one and closes after it (nested entities; of two equal spans the head is outer).
        insertions.append((entity["start"], (1, -entity["end"], order), f"{marker}{typed} ", role))
        insertions.append((entity["end"], (0, -entity["start"], -order), f" {marker}", None))
    insertions.sort(key=lambda insertion: insertion[:2])
    pieces, opening, position, length = [], {}, 0, 0
    for at, _, marker, role in insertions:
        pieces.append(text[position:at])
        length += at - position
        position = at
        if role is not None:
            opening[role] = length
        pieces.append(marker)
        length += len(marker)
    pieces.append(text[position:])
    return MarkedText(
        "".join(pieces), (opening["head"], opening["tail"]), tuple((at, len(marker)) for at, _, marker, _ in insertions)
    )


# -- the kinds ---------------------------------------------------------------------------------
class EntityPairHead(nn.Module):
    """Mean of the hidden states over each entity's token span (one token for a marker), concatenated."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float):
        super().__init__()
        self.classifier = ClassifierHead(hidden_size, num_labels, dropout, input_size=2 * hidden_size)

    def forward(self, hidden_states: torch.Tensor, batch):
        spans = batch["entity_spans"]  # b × 2 × 2: [first token, end token) of head and tail
        positions = torch.arange(hidden_states.shape[1], device=hidden_states.device)
        span_mask = (positions >= spans[..., :1]) & (positions < spans[..., 1:])
        features = mean_pool_spans(hidden_states, span_mask).flatten(1)
        return self.classifier(features), features


class RelationTask(TaskKind):
    """What both representations share; subclasses say where the entities are in the text they produce.

    - ``relation``: entity markers, Zhou & Chen (2021)'s "entity marker (punct)": the text the tokenizer reads
      is ``@ head @ ... # tail #``, or with entity types their typed marker ``@ * person * head @ ... # ^ city ^
      tail #``. The entity vectors are the states at the two opening markers. Punctuation rather than
      ``[E1]``-style tokens because WordPiece keeps ``@``, ``#``, ``*`` and ``^`` as single tokens of the
      existing vocabulary: no token is added, so no embedding starts untrained and the backbone is unchanged.
    - ``relation_mean``: the text unchanged; each entity's vector is the mean of the states over its
      sub-word tokens (ERICA's entity representation).

    Token positions come from the fast tokenizer's offset mapping. Truncation: an entity that is cut in the
    middle keeps the sub-words that survive (its opening marker, being first, always survives then); an
    entity wholly cut off is represented by position 0 ([CLS]).

    Knowledge spans (char offsets into ``text_a``) align to the marked text through ``map_char_spans``.
    """

    def __init__(self, spec):
        super().__init__(spec)
        unknown = [metric for metric in spec.metrics if metric not in SCORERS]
        if unknown:
            raise KlmError(
                f"task {spec.name!r}: unknown relation metric(s) {', '.join(unknown)}; known: {', '.join(SCORERS)}"
            )
        self.negative_label = next((label for label in spec.labels if label in NEGATIVE_LABELS), None)

    def layout(self, record: dict) -> tuple[str, list[tuple[int, int]]]:
        """The text the tokenizer reads and the char spans whose tokens represent the head and the tail."""
        raise NotImplementedError

    def texts(self, records):
        return [self.layout(record)[0] for record in records], None

    def encode(self, records, tokenizer, max_length):
        layouts = [self.layout(record) for record in records]
        encoded = tokenize_with_offsets(
            tokenizer, [text for text, _ in layouts], max_length=max_length, kind="relation classification"
        )
        entity_spans = []
        for index, (_, char_spans) in enumerate(layouts):
            tokens = align_char_spans(encoded["offset_mapping"][index], char_spans, encoded.sequence_ids(index))
            entity_spans.append([[found[0], found[-1] + 1] if found else [0, 1] for found in tokens])
        columns = {name: list(values) for name, values in encoded.items() if name != "offset_mapping"}
        return {**columns, "entity_spans": entity_spans, "labels": [record["label"] for record in records]}

    def collate(self, features, tokenizer):
        columns = as_columns(features)
        batch = pad_encoder_inputs(columns, tokenizer)
        batch["entity_spans"] = torch.tensor(columns["entity_spans"], dtype=torch.long)
        batch["labels"] = torch.tensor(columns["labels"], dtype=torch.long)
        return batch

    def build_head(self, hidden_size, dropout):
        return EntityPairHead(hidden_size, len(self.spec.labels), dropout)

    def score(self, predictions, gold):
        predicted = [self.spec.labels[index] for index in predictions]
        expected = [self.spec.labels[index] for index in gold]
        return {
            metric: 100.0 * SCORERS[metric](predicted, expected, self.negative_label) for metric in self.spec.metrics
        }

    def additive_statistics(self, metric, predicted, gold):
        if metric == "accuracy":
            return statistics.accuracy_statistics(predicted, gold)
        if metric == "semeval_macro_f1":
            labels = [undirected(label) for label in self.spec.labels]
            return statistics.semeval_statistics(labels, undirected(self.negative_label or "Other"), predicted, gold)
        return None


class MarkerRelationTask(RelationTask):
    def layout(self, record):
        marked = insert_markers(record["text_a"], *head_and_tail(record))
        return marked.text, [(position, position + 1) for position in marked.opening_markers]

    def map_char_spans(self, record, spans):
        marked = insert_markers(record["text_a"], *head_and_tail(record))
        return [marked.span(start, end) for start, end in spans]


class MeanPoolRelationTask(RelationTask):
    def layout(self, record):
        head, tail = head_and_tail(record)
        return record["text_a"], [(head["start"], head["end"]), (tail["start"], tail["end"])]
