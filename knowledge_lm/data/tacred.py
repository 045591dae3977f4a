"""TACRED: relation classification between a subject and an object in a sentence, 41 relations plus no_relation.

Files: the official JSON of the LDC release (LDC2018T24), ``train.json``, ``dev.json`` and ``test.json``
(plain or gzip-compressed), looked for in ``<data_dir>/tacred/``, ``<data_dir>/tacred/data/json/`` (the
release's layout), ``<data_dir>/data/json/`` and ``<data_dir>`` itself. TACRED needs an LDC licence, so
the shared data does not hold it. Each file is one JSON array of ``{id, token, subj_start, subj_end,
obj_start, obj_end, subj_type, obj_type, relation, ...}`` with inclusive token indices.

Records: ``text_a`` is the tokens joined by single spaces, PTB brackets (-LRB- ...) turned back into
brackets as Zhou & Chen (2021) do; ``entities`` the subject (role head) and the object (role tail) as
character offsets, with their NER types, which the marker kind writes as typed markers. Scored by
TACRED's official micro P/R/F1 over the relations other than no_relation (main: micro_f1).
"""

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import find_split_files, read_json
from knowledge_lm.data.base import TaskDataModule, TaskSpec
from knowledge_lm.tasks.relation import RelationTasks

RELATION_LABELS = (
    "no_relation",
    "org:alternate_names",
    "org:city_of_headquarters",
    "org:country_of_headquarters",
    "org:dissolved",
    "org:founded",
    "org:founded_by",
    "org:member_of",
    "org:members",
    "org:number_of_employees/members",
    "org:parents",
    "org:political/religious_affiliation",
    "org:shareholders",
    "org:stateorprovince_of_headquarters",
    "org:subsidiaries",
    "org:top_members/employees",
    "org:website",
    "per:age",
    "per:alternate_names",
    "per:cause_of_death",
    "per:charges",
    "per:children",
    "per:cities_of_residence",
    "per:city_of_birth",
    "per:city_of_death",
    "per:countries_of_residence",
    "per:country_of_birth",
    "per:country_of_death",
    "per:date_of_birth",
    "per:date_of_death",
    "per:employee_of",
    "per:origin",
    "per:other_family",
    "per:parents",
    "per:religion",
    "per:schools_attended",
    "per:siblings",
    "per:spouse",
    "per:stateorprovince_of_birth",
    "per:stateorprovince_of_death",
    "per:stateorprovinces_of_residence",
    "per:title",
)
SPEC = TaskSpec("main", "relation", RELATION_LABELS, ("micro_f1", "micro_precision", "micro_recall"), "micro_f1")

FOLDERS = ("tacred", "tacred/data/json", "data/json", ".")
SPLITS = ("train", "dev", "test")
REQUIRED_KEYS = ("id", "token", "subj_start", "subj_end", "obj_start", "obj_end", "subj_type", "obj_type", "relation")
PTB_BRACKETS = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}


class TacredDataModule(RelationTasks, TaskDataModule):
    name = "tacred"
    split_origins = {"dev": "TACRED dev", "test": "TACRED test"}
    relation_spec = SPEC

    def read_splits(self) -> dict[str, list[dict]]:
        return {split: self.read_file(path) for split, path in self.find_files().items()}

    def find_files(self) -> dict:
        return find_split_files(
            self.data_dir,
            FOLDERS,
            "TACRED",
            splits=SPLITS,
            note=", the official JSON of LDC2018T24 (TACRED needs an LDC licence and is not in the shared data)",
        )

    def read_file(self, path) -> list[dict]:
        data = read_json(path)
        if not isinstance(data, list) or not data:
            raise KlmError(f"{path}: expected a non-empty JSON array of examples")
        return [self.record(item, f"{path}: record {index}") for index, item in enumerate(data)]

    def record(self, item, where: str) -> dict:
        if not isinstance(item, dict):
            raise KlmError(f"{where}: expected an object, got a {type(item).__name__}")
        missing = [key for key in REQUIRED_KEYS if key not in item]
        if missing:
            raise KlmError(f"{where}: missing key(s) {', '.join(missing)}")
        tokens = item["token"]
        if not (isinstance(tokens, list) and tokens and all(isinstance(token, str) for token in tokens)):
            raise KlmError(f"{where}: 'token' must be a non-empty list of strings")
        tokens = [PTB_BRACKETS.get(token, token) for token in tokens]
        starts, position = [], 0
        for token in tokens:
            starts.append(position)
            position += len(token) + 1
        entities = []
        for prefix, role in (("subj", "head"), ("obj", "tail")):
            first, last = item[f"{prefix}_start"], item[f"{prefix}_end"]
            if not (isinstance(first, int) and isinstance(last, int) and 0 <= first <= last < len(tokens)):
                raise KlmError(
                    f"{where}: {prefix} tokens [{first!r}, {last!r}] are not a span of the {len(tokens)} tokens"
                )
            entities.append(
                {
                    "start": starts[first],
                    "end": starts[last] + len(tokens[last]),
                    "mention": " ".join(tokens[first : last + 1]),
                    "role": role,
                    "type": item[f"{prefix}_type"],
                }
            )
        return {
            "id": f"tacred-{item['id']}",
            "text_a": " ".join(tokens),
            "text_b": None,
            "label": SPEC.label_id(item["relation"], where),
            "entities": entities,
        }
