"""FewRel 1.0 as supervised relation classification: the 16 Wikidata relations of its validation set.

File: ``val_wiki.json`` of github.com/thunlp/FewRel (plain or gzip-compressed), looked for in
``<data_dir>/fewrel/`` (the shared layout), then in ``<data_dir>`` itself. It maps each relation PID to
700 instances ``{tokens, h: [name, QID, [[token indices], ...]], t: [...]}``; an entity's first listed
occurrence is the one used. (The 64-relation train file is not in the shared data, and FewRel's test set
is unreleased, hence this split of the validation file.)

The splits and records: ``FewRelDataModule``.
"""

import random

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import find_file, read_json
from knowledge_lm.data.base import TaskDataModule, TaskSpec
from knowledge_lm.knowledge.answers import AnswerFact
from knowledge_lm.tasks.relation import RelationTasks

# The relations of val_wiki.json with their names in FewRel's pid2name.json.
RELATION_NAMES = {
    "P155": "follows",
    "P177": "crosses",
    "P206": "located in or next to body of water",
    "P2094": "competition class",
    "P25": "mother",
    "P26": "spouse",
    "P361": "part of",
    "P364": "original language of film or TV show",
    "P40": "child",
    "P410": "military rank",
    "P412": "voice type",
    "P413": "position played on team / speciality",
    "P463": "member of",
    "P59": "constellation",
    "P641": "sport",
    "P921": "main subject",
}
RELATIONS = tuple(sorted(RELATION_NAMES))
SPEC = TaskSpec("main", "relation", RELATIONS, ("accuracy", "macro_f1"), "accuracy")

FOLDERS = ("fewrel", ".")
FILE = "val_wiki.json"
SPLIT_SEED = 0
DEV_SHARE, TEST_SHARE = 0.1, 0.2


def split_instances(counts: dict[str, int], seed: int = SPLIT_SEED) -> dict[str, dict[str, list[int]]]:
    """Per relation, the instance indices of train, dev and test (each sorted), 70/10/20 of its instances."""
    rng = random.Random(seed)
    splits = {}
    for relation in sorted(counts):
        order = rng.sample(range(counts[relation]), counts[relation])
        dev_size, test_size = round(DEV_SHARE * len(order)), round(TEST_SHARE * len(order))
        splits[relation] = {
            "test": sorted(order[:test_size]),
            "dev": sorted(order[test_size : test_size + dev_size]),
            "train": sorted(order[test_size + dev_size :]),
        }
    return splits


def token_span(entity, tokens: list[str], starts: list[int], role: str, where: str) -> dict:
    """The entity ``[name, QID, [[token indices], ...]]`` as a char span of the space-joined tokens."""
    if not (
        isinstance(entity, list)
        and len(entity) == 3
        and isinstance(entity[2], list)
        and entity[2]
        and isinstance(entity[2][0], list)
        and entity[2][0]
    ):
        raise KlmError(f"{where}: the {role} entity is not [name, QID, [[token indices], ...]]")
    indices = entity[2][0]
    if not all(isinstance(index, int) and 0 <= index < len(tokens) for index in indices):
        raise KlmError(f"{where}: the {role} entity's token indices {indices} are outside the {len(tokens)} tokens")
    first, last = min(indices), max(indices)
    start, end = starts[first], starts[last] + len(tokens[last])
    return {"start": start, "end": end, "mention": " ".join(tokens[first : last + 1]), "role": role, "qid": entity[1]}


class FewRelDataModule(RelationTasks, TaskDataModule):
    """FewRel's validation file as train/dev/test of one relation-classification dataset.

    Splits. Per relation, the instances are shuffled once and cut 70/10/20 into train/dev/test: 490/70/140
    per relation, 7,840/1,120/2,240 in all. One ``random.Random(SPLIT_SEED)`` (seed 0) draws the relations'
    permutations in sorted-PID order, so the split is a pure function of the file and the seed.

    Records: ``text_a`` is the tokens joined by single spaces; ``entities`` the head and the tail as
    character offsets into it, with their Wikidata QIDs (gold links for the knowledge methods); ``label``
    the relation's index in ``RELATIONS``. Kind "relation" (``mean_pool``: "relation_mean"); scored by
    accuracy (main) and macro-F1 over the 16 relations (no negative class).
    """

    name = "fewrel"
    split_origins = {
        "dev": "10 % of each relation's val_wiki instances (seed 0)",
        "test": "20 % of each relation's val_wiki instances (seed 0)",
    }
    relation_spec = SPEC

    def read_splits(self) -> dict[str, list[dict]]:
        path = self.find_file()
        data = read_json(path)
        if not isinstance(data, dict) or set(data) != set(RELATIONS):
            found = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise KlmError(
                f"{path}: expected FewRel 1.0 val_wiki, an object of the 16 relations "
                f"{', '.join(RELATIONS)}; found {found}"
            )
        splits = {"train": [], "dev": [], "test": []}
        for relation, chosen in split_instances({relation: len(data[relation]) for relation in RELATIONS}).items():
            for split, indices in chosen.items():
                splits[split] += [
                    self.record(relation, index, data[relation][index], f"{path}: {relation} instance {index}")
                    for index in indices
                ]
        return splits

    def answer_facts(self, splits: dict[str, list[dict]]) -> list[AnswerFact]:
        """Each example's relation between its head and tail QIDs: the label, a Wikidata fact."""
        return [
            AnswerFact((head["qid"],), RELATIONS[record["label"]], (tail["qid"],))
            for records in splits.values()
            for record in records
            for head, tail in [record["entities"]]
        ]

    def find_file(self):
        if self.data_dir is not None:
            for folder in FOLDERS:
                path = find_file(self.data_dir / folder, FILE)
                if path is not None:
                    return path
        raise KlmError(
            f"no FewRel data under {self.data_dir or 'any data directory'}: expected fewrel/{FILE} "
            f"(plain or .gz; set --data-dir or DATA_DIR)"
        )

    def record(self, relation: str, index: int, item, where: str) -> dict:
        if not isinstance(item, dict) or not {"tokens", "h", "t"} <= set(item):
            raise KlmError(f"{where}: expected an object with tokens, h and t")
        tokens = item["tokens"]
        if not (isinstance(tokens, list) and tokens and all(isinstance(token, str) for token in tokens)):
            raise KlmError(f"{where}: 'tokens' must be a non-empty list of strings")
        starts, position = [], 0
        for token in tokens:
            starts.append(position)
            position += len(token) + 1
        entities = [
            token_span(item["h"], tokens, starts, "head", where),
            token_span(item["t"], tokens, starts, "tail", where),
        ]
        return {
            "id": f"fewrel-{relation}-{index}",
            "text_a": " ".join(tokens),
            "text_b": None,
            "label": RELATIONS.index(relation),
            "entities": entities,
        }
