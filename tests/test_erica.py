import json
import math
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

from knowledge_lm.methods.erica.model import (
    NO_RELATION,
    TERMS,
    EricaCollator,
    build_corpus,
    entity_discrimination_loss,
    mask_tokens,
    negative_mask,
    read_corpus,
    relation_discrimination_loss,
    relation_vocabulary,
    term_positives,
    write_corpus,
)
from knowledge_lm.methods.erica.pretraining import pretrain_erica
from knowledge_lm.methods.trainer import resolve_precision


def cos(a, b):
    return float(F.cosine_similarity(a, b, dim=0))


# -- ED -----------------------------------------------------------------------------------------
def test_ed_matches_direct_computation():
    torch.manual_seed(0)
    entities = torch.randn(2, 5, 4)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]], dtype=torch.bool)
    head, tail = torch.tensor([0, 2]), torch.tensor([3, 1])
    ignore = torch.zeros(2, 5, dtype=torch.bool)
    ignore[0, 4] = True
    tau = 0.05
    expected = []
    for b in range(2):
        denominator = sum(
            math.exp(cos(entities[b, head[b]], entities[b, other]) / tau)
            for other in range(5)
            if mask[b, other] and other != head[b] and not ignore[b, other]
        )
        numerator = math.exp(cos(entities[b, head[b]], entities[b, tail[b]]) / tau)
        expected.append(-math.log(numerator / denominator))
    got = entity_discrimination_loss(entities, mask, head, tail, ignore=ignore, tau=tau)
    assert got.item() == pytest.approx(sum(expected) / 2, rel=1e-4)


# -- RD -----------------------------------------------------------------------------------------
def toy_pairs(seed=0):
    torch.manual_seed(seed)
    #            doc  head tail relation intra
    rows = [
        (0, 0, 1, 1, True),
        (0, 2, 3, 1, False),
        (0, 0, 3, 2, True),
        (0, 1, 2, 0, False),
        (0, 3, 1, 0, True),
        (1, 0, 1, 1, False),
        (1, 1, 2, 2, True),
        (1, 2, 0, 0, True),
        (1, 3, 0, 2, False),
    ]
    document, head, tail, relation, intra = (torch.tensor(column) for column in zip(*rows))
    return torch.randn(len(rows), 6, dtype=torch.float64), relation, document, head, tail, intra.bool()


def direct_rd(pairs, relation, document, head, tail, intra, terms, max_negatives, tau=0.05):
    n = len(relation)
    sets = {"intra": lambda i: bool(intra[i]), "cross": lambda i: not bool(intra[i])}
    total = 0.0
    for first, second in terms:
        losses = []
        for a in range(n):
            if relation[a] == NO_RELATION or not sets[first](a):
                continue
            negatives, per_document = [], {}
            for c in range(n):
                if relation[c] == relation[a]:
                    continue
                if document[c] == document[a] and (head[c] == head[a] or tail[c] == tail[a]):
                    continue
                per_document[int(document[c])] = per_document.get(int(document[c]), 0) + 1
                if per_document[int(document[c])] <= max_negatives:
                    negatives.append(c)
            for b in range(n):
                if b == a or relation[b] != relation[a] or not sets[second](b):
                    continue
                s_ab = math.exp(cos(pairs[a], pairs[b]) / tau)
                z = s_ab + sum(math.exp(cos(pairs[a], pairs[c]) / tau) for c in negatives)
                losses.append(-math.log(s_ab / z))
        if losses:
            total += sum(losses) / len(losses)
    return total


@pytest.mark.parametrize(
    "terms", [TERMS, [("intra", "intra")], [("cross", "cross")], [("intra", "cross"), ("cross", "intra")]]
)
@pytest.mark.parametrize("max_negatives", [64, 1])
def test_rd_matches_direct_computation(terms, max_negatives):
    args = toy_pairs()
    got = relation_discrimination_loss(*args, terms=terms, max_negatives=max_negatives, tau=0.05)
    assert got.item() == pytest.approx(direct_rd(*args, terms, max_negatives), rel=1e-4)


def test_rd_term_toggles_differ():
    args = toy_pairs()
    full = relation_discrimination_loss(*args)
    parts = sum(relation_discrimination_loss(*args, terms=[term]) for term in TERMS)
    assert full.item() == pytest.approx(parts.item(), rel=1e-5)
    assert relation_discrimination_loss(*args, terms=[("intra", "intra")]).item() != pytest.approx(full.item())
    assert relation_discrimination_loss(*args, terms=[]).item() == 0.0


def test_term_positives_count_the_pairs_each_term_averages():
    _, relation, _, _, _, intra = toy_pairs()
    counts = term_positives(relation.tolist(), intra.tolist())
    for (first, second), count in zip(TERMS, counts):
        sets = {"intra": intra, "cross": ~intra}
        expected = sum(
            1
            for a in range(len(relation))
            for b in range(len(relation))
            if a != b and relation[a] == relation[b] != NO_RELATION and sets[first][a] and sets[second][b]
        )
        assert count == expected
    assert sum(counts) > 0


def test_pairs_sharing_head_or_tail_never_negatives():
    _, relation, document, head, tail, _ = toy_pairs()
    mask = negative_mask(relation, document, head, tail)
    for a in range(len(relation)):
        for c in range(len(relation)):
            if document[a] == document[c] and (head[a] == head[c] or tail[a] == tail[c]):
                assert not mask[a, c]
            if relation[a] == relation[c]:
                assert not mask[a, c]
    # no_relation pairs of other documents / not sharing entities are negatives
    assert mask[0, 3] and mask[0, 7]


def test_excluded_pair_does_not_affect_rd():
    # A = (h0, t1, r1), B = (h2, t3, r1), C = (h0, t3, no_relation) shares A's head and B's tail: never a negative;
    # D = (h4, t5, no_relation) is a negative of both. Moving C leaves L_RD unchanged, moving D does not.
    relation, document = torch.tensor([1, 1, 0, 0]), torch.zeros(4, dtype=torch.long)
    head, tail, intra = torch.tensor([0, 2, 0, 4]), torch.tensor([1, 3, 3, 5]), torch.ones(4, dtype=torch.bool)
    pairs = torch.randn(4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    base = relation_discrimination_loss(pairs, relation, document, head, tail, intra)
    moved_c, moved_d = pairs.clone(), pairs.clone()
    moved_c[2], moved_d[3] = pairs[0], pairs[0]
    assert relation_discrimination_loss(moved_c, relation, document, head, tail, intra).item() == pytest.approx(
        base.item()
    )
    assert relation_discrimination_loss(moved_d, relation, document, head, tail, intra).item() > base.item() + 1e-3
    # The same four pairs in two documents: C (doc 1) is then a negative of A and B (doc 0).
    assert negative_mask(relation, torch.tensor([0, 0, 1, 0]), head, tail)[:2, 2].all()


def test_negative_cap_per_document():
    relation = torch.tensor([1, 1] + [0] * 10)
    document = torch.tensor([0, 1] + [2] * 10)
    head, tail = torch.arange(12), torch.arange(12) + 100
    mask = negative_mask(relation, document, head, tail, max_negatives=3)
    assert mask[0].sum() == 3 and mask[0, 2:5].all()


# -- MLM masking --------------------------------------------------------------------------------
def test_mask_tokens_never_masks_entities():
    input_ids = torch.randint(10, 1000, (4, 200))
    protected = torch.zeros(4, 200, dtype=torch.bool)
    protected[:, 20:80] = True
    masked, labels = mask_tokens(
        input_ids,
        protected,
        mask_token_id=3,
        vocab_size=1000,
        probability=0.5,
        generator=torch.Generator().manual_seed(0),
    )
    assert torch.equal(masked[protected], input_ids[protected])
    assert (labels[protected] == -100).all()
    chosen = labels != -100
    assert chosen.sum() > 100
    assert torch.equal(labels[chosen], input_ids[chosen])
    assert (masked[chosen] == 3).float().mean() > 0.6
    assert torch.equal(masked[~chosen], input_ids[~chosen])


# -- corpus -------------------------------------------------------------------------------------
TEXT = "Paris is in France. Berlin is in Germany. France borders Germany. Paris and Berlin are capitals."


def span(word, occurrence=0):
    start = -1
    for _ in range(occurrence + 1):
        start = TEXT.index(word, start + 1)
    return start, start + len(word)


def mention(word, sentence, occurrence=0):
    start, end = span(word, occurrence)
    return {"start": start, "end": end, "sent_id": sentence}


def toy_document(identifier="d0"):
    return {
        "id": identifier,
        "text": TEXT,
        "entities": [
            {"qid": "Q90", "mentions": [mention("Paris", 0), mention("Paris", 3, 1)]},
            {"qid": "Q142", "mentions": [mention("France", 0), mention("France", 2, 1)]},
            {"qid": "Q64", "mentions": [mention("Berlin", 1), mention("Berlin", 3, 1)]},
            {"qid": "Q183", "mentions": [mention("Germany", 1), mention("Germany", 2, 1)]},
        ],
    }


TRIPLES = [
    ("Q90", "P17", "Q142"),
    ("Q64", "P17", "Q183"),
    ("Q142", "P47", "Q183"),
    ("Q183", "P47", "Q142"),
    ("Q142", "P36", "Q90"),
    ("Q183", "P36", "Q64"),
    ("Q90", "P17", "Q183"),
]


def test_build_corpus_relations_and_format(tmp_path):
    records = build_corpus([toy_document()], TRIPLES, relation_names={"P17": "country"})
    assert len(records) == 1
    record = records[0]
    facts = {(r["head"], r["tail"], r["relation"]) for r in record["relations"]}
    assert facts == {
        (0, 1, "P17"),
        (2, 3, "P17"),
        (1, 3, "P47"),
        (3, 1, "P47"),
        (1, 0, "P36"),
        (3, 2, "P36"),
        (0, 3, "P17"),
    }
    assert (
        len(record["relations"]) + len(record["no_relation"]) == 12
    )  # each of the 12 ordered pairs once (one relation each here)
    by_pair = {(r["head"], r["tail"]): r for r in record["relations"]}
    assert by_pair[(0, 1)]["intra"] and by_pair[(0, 1)]["name"] == "country"
    assert not by_pair[(0, 3)]["intra"]  # Paris: sentences 0, 3; Germany: 1, 2
    no_relation = {(p["head"], p["tail"]): p["intra"] for p in record["no_relation"]}
    assert no_relation[(0, 2)] is True  # Paris and Berlin share sentence 3
    path = tmp_path / "corpus.jsonl"
    digest = write_corpus(records, path)
    assert read_corpus(path) == records and len(digest) == 64
    assert json.loads(path.read_text().splitlines()[0])["id"] == "d0"


def test_build_corpus_filters_and_test_pairs():
    assert build_corpus([toy_document()], TRIPLES, min_relations=8) == []
    assert build_corpus([toy_document()], TRIPLES, min_entities=5) == []
    removed = build_corpus([toy_document()], TRIPLES, test_pairs={("Q90", "Q142"), ("Q142", "Q183")})[0]
    pairs = {(r["head"], r["tail"]) for r in removed["relations"]} | {
        (p["head"], p["tail"]) for p in removed["no_relation"]
    }
    assert (0, 1) not in pairs and (1, 3) not in pairs and (3, 1) in pairs
    # 7 → 5 relations; with min 6 the document goes
    assert (
        build_corpus([toy_document()], TRIPLES, test_pairs={("Q90", "Q142"), ("Q142", "Q183")}, min_relations=6) == []
    )


# -- pretraining --------------------------------------------------------------------------------
def test_collator_views():
    from knowledge_lm.core.backbones import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    corpus = build_corpus([toy_document("a"), toy_document("b")], TRIPLES, relation_names={"P17": "country"})
    batch = EricaCollator(tokenizer, relation_vocabulary(corpus))(corpus)
    rd, ed = batch["rd"], batch["ed"]
    assert rd["entity_mask"].all() and ed["entity_mask"].all()
    entity_tokens = rd["mention_mask"].sum(1) > 0
    assert (rd["mlm_labels"][entity_tokens] == -100).all()
    # ED view: the prepended head mention is not pooled — every mention span lies after the first [SEP].
    sep = (ed["input_ids"] == tokenizer.sep_token_id).float().argmax(1)
    for row in range(2):
        positions = ed["mention_mask"][row].sum(0).nonzero().flatten()
        assert positions.min() > sep[row]
    assert len(rd["pair_relation"]) == 2 * 12


def test_pretraining_lowers_ed_and_rd(tmp_path):
    from knowledge_lm.core.backbones import load_backbone
    from knowledge_lm.methods.erica.model import EricaCollator

    model, tokenizer, _ = load_backbone("tiny", seed=0)
    corpus = build_corpus([toy_document(f"d{i}") for i in range(4)], TRIPLES, relation_names={"P17": "country"})
    batch = EricaCollator(tokenizer, relation_vocabulary(corpus), seed=1)(corpus)

    def ed_rd(module):
        module.eval()
        with torch.no_grad():
            losses = module.losses(batch)
        module.train()
        return losses["ed"].item(), losses["rd"].item()

    from knowledge_lm.methods.erica.model import EricaPretraining

    before = ed_rd(EricaPretraining(model, tokenizer, total_steps=20))
    module = pretrain_erica(
        corpus, model, tokenizer, steps=20, output_dir=tmp_path / "ckpt", batch_size=4, lr=1e-3, warmup_ratio=0.2
    )
    after = ed_rd(module)
    assert after[0] < before[0] and after[1] < before[1]
    manifest = json.loads((tmp_path / "ckpt" / "manifest.json").read_text())
    assert manifest["steps"] == 20 and set(manifest["final_losses"]) == {"ed", "rd", "mlm"}
    assert manifest["precision"] == resolve_precision()  # the cells' precision: bf16-mixed on a GPU
    assert len(manifest["corpus_hash"]) == 64
    reloaded, _, info = load_backbone(str(tmp_path / "ckpt"))
    assert torch.equal(reloaded.get_input_embeddings().weight, model.get_input_embeddings().weight)
    assert info.checksum is not None
    assert (Path(reloaded.config._name_or_path) / "manifest.json").is_file()  # what method 'erica' checks


def test_views_encoded_together_equal_views_encoded_alone():
    """One encoder call over the RD and ED views (padded to the longer) gives each view its own states."""
    from knowledge_lm.core.backbones import load_backbone
    from knowledge_lm.methods.erica.model import EricaCollator, EricaPretraining

    model, tokenizer, _ = load_backbone("tiny", seed=0)
    corpus = build_corpus([toy_document("a"), toy_document("b")], TRIPLES)
    batch = EricaCollator(tokenizer, relation_vocabulary(corpus))(corpus)
    module = EricaPretraining(model, tokenizer, total_steps=1).eval()
    assert batch["ed"]["input_ids"].shape[1] > batch["rd"]["input_ids"].shape[1]
    with torch.no_grad():
        together = module.encode(batch["rd"], batch["ed"])
        alone = [module.encode(batch[name])[0] for name in ("rd", "ed")]
    for (hidden, entities), (hidden_alone, entities_alone) in zip(together, alone):
        assert hidden.shape == hidden_alone.shape
        torch.testing.assert_close(hidden, hidden_alone, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(entities, entities_alone, atol=1e-5, rtol=1e-4)


def test_erica_method_refuses_a_non_erica_backbone():
    from knowledge_lm.core.backbones import load_backbone
    from knowledge_lm.core.errors import KlmError
    from knowledge_lm.methods.erica.model import EricaFineTuning

    model, _, _ = load_backbone("tiny")
    with pytest.raises(KlmError, match="ERICA checkpoint"):
        EricaFineTuning(model, spec=None)


# -- objective sets (ablations) -----------------------------------------------------------------
@pytest.mark.parametrize(
    "name", ["erica", "erica-mlm-only", "erica-ed", "erica-rd", "erica-rd-intra", "erica-rd-cross"]
)
def test_objective_set_yields_only_its_losses(name, tmp_path):
    from knowledge_lm.core.backbones import load_backbone
    from knowledge_lm.methods.erica.model import OBJECTIVES, EricaPretraining, objective_options

    model, tokenizer, _ = load_backbone("tiny", seed=0)
    corpus = build_corpus([toy_document("a"), toy_document("b")], TRIPLES)
    batch = EricaCollator(tokenizer, relation_vocabulary(corpus))(corpus)
    module = EricaPretraining(model, tokenizer, total_steps=1, **objective_options(name))
    losses = module.losses(batch)
    assert set(losses) == set(OBJECTIVES[name][0])
    if name in ("erica-rd-intra", "erica-rd-cross"):
        full = EricaPretraining(model, tokenizer, total_steps=1, **objective_options("erica-rd")).losses(batch)["rd"]
        assert losses["rd"].item() != pytest.approx(full.item())
    module.save_checkpoint(tmp_path)
    assert json.loads((tmp_path / "manifest.json").read_text())["method"] == name


def test_objective_words():
    from knowledge_lm.core.errors import KlmError
    from knowledge_lm.methods.erica.model import objective_set

    assert objective_set("mlm,ed,rd") == "erica" and objective_set("rd-intra, mlm") == "erica-rd-intra"
    assert objective_set("mlm") == "erica-mlm-only" and objective_set("erica-ed") == "erica-ed"
    for bad in ("ed,rd", "mlm,xx", ""):
        with pytest.raises(KlmError, match="objectives"):
            objective_set(bad)


def test_ablation_method_accepts_only_its_checkpoint(tmp_path):
    from knowledge_lm.core.backbones import load_backbone
    from knowledge_lm.core.errors import KlmError
    from knowledge_lm.core.registry import METHODS
    from knowledge_lm.data.generated import GeneratedDataModule
    from knowledge_lm.methods.erica.model import (
        EricaFineTuning,
        EricaPretraining,
        EricaRDIntraFineTuning,
        objective_options,
    )

    model, tokenizer, _ = load_backbone("tiny", seed=0)
    EricaPretraining(model, tokenizer, total_steps=1, **objective_options("erica-rd-intra")).save_checkpoint(tmp_path)
    encoder, _, _ = load_backbone(str(tmp_path))
    spec = GeneratedDataModule.spec("facts")
    assert isinstance(EricaRDIntraFineTuning(encoder, spec), EricaRDIntraFineTuning)
    assert METHODS.get("erica-rd-intra") is EricaRDIntraFineTuning
    with pytest.raises(KlmError, match="pretrained as 'erica-rd-intra'"):
        EricaFineTuning(encoder, spec)
    with pytest.raises(KlmError, match="erica-rd-cross"):
        METHODS.get("erica-rd-cross")(encoder, spec)


# -- corpus sources -----------------------------------------------------------------------------
def test_annotated_relations_and_name_keyed_test_pairs():
    document = toy_document()
    for entity in document["entities"]:
        entity["qid"] = None
    document["relations"] = [
        {"head": 0, "tail": 1, "relation": "P17"},
        {"head": 2, "tail": 3, "relation": "P17"},
        {"head": 1, "tail": 3, "relation": "P47"},
        {"head": 3, "tail": 1, "relation": "P47"},
    ]
    record = build_corpus([document], [], relation_names={"P17": "country"})[0]
    assert {(r["head"], r["tail"], r["relation"]) for r in record["relations"]} == {
        (0, 1, "P17"),
        (2, 3, "P17"),
        (1, 3, "P47"),
        (3, 1, "P47"),
    }
    assert build_corpus([document], [], test_pairs={("name:paris", "name:france")}) == []  # 3 relations left


def test_pack_sentences_follows_shared_entities():
    from knowledge_lm.methods.erica.corpus import pack_sentences

    def sentence(text, *qids):
        words = text.split()
        entities, position = [], 0
        for word in words:
            if word in qids:
                entities.append({"qid": word, "start": position, "end": position + len(word)})
            position += len(word) + 1
        return {"text": text, "entities": entities}

    sentences = [
        sentence("A knows B .", "A", "B"),
        sentence("C likes D .", "C", "D"),
        sentence("B met C .", "B", "C"),
        sentence("A saw E .", "A", "E"),
    ]
    documents = pack_sentences(sentences, per_document=3)
    assert [d["text"] for d in documents] == ["A knows B . A saw E . B met C .", "C likes D ."]
    a = documents[0]["entities"][0]
    assert a["qid"] == "A" and [(m["sent_id"], documents[0]["text"][m["start"] : m["end"]]) for m in a["mentions"]] == [
        (0, "A"),
        (1, "A"),
    ]


def fake_redocred(data_dir: Path, documents: int = 10):
    from helpers import write

    def document(number):
        names = [f"Alpha{number}", f"Beta{number}", f"Gamma{number}", "Berlin", "Paris"]
        sents = [[names[0], "is", "near", names[1], "."], [names[2], "and", names[3], "and", names[4], "."]]
        vertex = [
            [{"name": names[0], "sent_id": 0, "pos": [0, 1], "type": "LOC"}],
            [{"name": names[1], "sent_id": 0, "pos": [3, 4], "type": "LOC"}],
            [{"name": names[2], "sent_id": 1, "pos": [0, 1], "type": "LOC"}],
            [{"name": names[3], "sent_id": 1, "pos": [2, 3], "type": "LOC"}],
            [{"name": names[4], "sent_id": 1, "pos": [4, 5], "type": "LOC"}],
        ]
        labels = [
            {"h": 0, "t": 1, "r": "P17", "evidence": []},
            {"h": 2, "t": 3, "r": "P131", "evidence": []},
            {"h": 0, "t": 4, "r": "P17", "evidence": []},
            {"h": 3, "t": 4, "r": "P17", "evidence": []},
        ]
        return {"title": f"t{number}", "sents": sents, "vertexSet": vertex, "labels": labels}

    half = documents // 2
    write(data_dir / "redocred" / "dev_revised.json", json.dumps([document(i) for i in range(half)]))
    write(data_dir / "redocred" / "test_revised.json", json.dumps([document(i) for i in range(half, documents)]))
    write(data_dir / "wikidata_kg" / "triples.tsv", "head_qid\trelation_pid\ttail_qid\nQ1\tP31\tQ2\n")
    write(
        data_dir / "wikidata_kg" / "entities.jsonl",
        json.dumps({"qid": "Q90", "label": "Paris", "surface_forms": []}) + "\n",
    )


def test_redocred_corpus_uses_train_documents_links_names_and_drops_test_pairs(tmp_path):
    from knowledge_lm.methods.erica.corpus import build_erica_corpus

    fake_redocred(tmp_path)
    records = build_erica_corpus("redocred", tmp_path, min_relations=3)
    assert len(records) == 7  # the 700/100/200 split of 10 documents: 7 train
    paris = [e for r in records for e in r["entities"] if e["name"] == "Paris"]
    assert paris and all(e["qid"] == "Q90" for e in paris)
    # (Berlin, Paris) is a fact of the test documents too: removed (by name) from the train documents
    for record in records:
        names = [entity["name"] for entity in record["entities"]]
        pairs = {(names[p["head"]], names[p["tail"]]) for p in record["relations"] + record["no_relation"]}
        assert ("Berlin", "Paris") not in pairs and ("Paris", "Berlin") not in pairs and ("Berlin", names[2]) in pairs
    assert all(len(r["relations"]) == 3 for r in records)
    assert all(len(r["relations"]) == 4 for r in build_erica_corpus("redocred", tmp_path, exclude_test=[]))


def test_user_jsonl_corpus_links_raw_text(tmp_path):
    from helpers import write

    from knowledge_lm.methods.erica.corpus import build_erica_corpus

    kg = tmp_path / "kg"
    write(kg / "triples.tsv", "".join(f"{h}\t{p}\t{t}\n" for h, p, t in TRIPLES))
    write(
        kg / "entities.jsonl",
        "".join(
            json.dumps({"qid": q, "label": label}) + "\n"
            for q, label in [("Q90", "Paris"), ("Q142", "France"), ("Q64", "Berlin"), ("Q183", "Germany")]
        ),
    )
    corpus = write(tmp_path / "mine.jsonl", json.dumps({"id": "x", "text": TEXT}) + "\n")
    (record,) = build_erica_corpus(str(corpus), kg_dir=kg, exclude_test=[])
    assert {e["qid"] for e in record["entities"]} == {"Q90", "Q142", "Q64", "Q183"}
    paris = next(e for e in record["entities"] if e["qid"] == "Q90")
    assert [m["sent_id"] for m in paris["mentions"]] == [0, 3]
    assert len(record["relations"]) == 7


def test_generated_corpus_excludes_its_test_pairs():
    from knowledge_lm.methods.erica.corpus import build_erica_corpus, generated_data, test_pairs

    records = build_erica_corpus("generated", min_relations=2)
    pairs = test_pairs("generated", None, None, generated_data(None))
    assert records and pairs
    for record in records:
        for pair in record["relations"] + record["no_relation"]:
            assert (record["entities"][pair["head"]]["qid"], record["entities"][pair["tail"]]["qid"]) not in pairs


# -- klm pretrain -------------------------------------------------------------------------------
def klm_pretrain(tmp_path, out, *extra, **options) -> int:
    """``klm pretrain`` of ERICA on the generated corpus with the tiny backbone into ``out``, its cache and results
    under ``tmp_path``: its exit code. ``options`` replace the defaults (``micro_batch_size=None`` leaves it out);
    ``extra`` arguments follow."""
    from knowledge_lm.cli import main

    settings = {
        "method": "erica",
        "corpus": "generated",
        "backbone": "tiny",
        "steps": 4,
        "batch_size": 4,
        "micro_batch_size": 2,
        "max_length": 64,
        "min_relations": 2,
        **options,
    }
    arguments = [
        part
        for name, value in settings.items()
        if value is not None
        for part in (f"--{name.replace('_', '-')}", str(value))
    ]
    out_args = ["--out", str(out), "--quiet", "--cache-dir", str(tmp_path / "cache")]
    return main(["pretrain", *arguments, *out_args, "--results-dir", str(tmp_path / "results"), *extra])


def test_klm_pretrain_writes_a_checkpoint_bench_accepts(tmp_path, capsys):
    from knowledge_lm.core.backbones import load_backbone
    from knowledge_lm.core.registry import METHODS
    from knowledge_lm.data.generated import GeneratedDataModule

    out = tmp_path / "ckpt"
    code = klm_pretrain(tmp_path, out, method="erica-rd-cross", steps=2, batch_size=2, micro_batch_size=None)
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    record = json.loads((tmp_path / "results" / "pretraining" / "ckpt.json").read_text())  # the store keeps the run
    assert record["corpus_hash"] == manifest["corpus_hash"] and {"git", "device", "checkpoint"} <= set(record)
    assert manifest["method"] == "erica-rd-cross" and manifest["steps"] == 2 and manifest["corpus"] == ["generated"]
    assert len(manifest["corpus_hash"]) == 64 and set(manifest["final_losses"]) == {"rd", "mlm"}
    assert len(list((tmp_path / "cache" / "erica").glob("*.jsonl"))) == 1
    assert not list(tmp_path.glob(".*partial*")) and not (tmp_path / "ckpt.resume").exists()
    assert set(manifest["rd_positives"]) == {"micro_batches", *("/".join(term) for term in TERMS)}
    encoder, _, _ = load_backbone(str(out))
    METHODS.get("erica-rd-cross")(encoder, GeneratedDataModule.spec("facts"))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--corpus", "nope"], "unknown ERICA corpus source 'nope'"),
        (["--corpus", "/does/not/exist.jsonl"], "does not exist"),
        (["--corpus", "generated", "--steps", "0"], "steps > 0"),
        (["--corpus", "generated", "--method", "erica-xx"], "unknown ERICA objectives"),
        (["--corpus", "generated", "--objectives", "mlm"], "contradicts --method erica"),
        (["--corpus", "generated", "--exclude-test", "squad"], "unknown test set 'squad'"),
    ],
)
def test_klm_pretrain_bad_input(tmp_path, capsys, args, message):
    from knowledge_lm.cli import main

    base = {"--steps": "2", "--backbone": "tiny"}
    for index in range(0, len(args), 2):
        base[args[index]] = args[index + 1]
    code = main(
        [
            "pretrain",
            "--out",
            str(tmp_path / "ckpt"),
            "--quiet",
            "--cache-dir",
            str(tmp_path / "cache"),
            *[part for pair in base.items() for part in pair],
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0] and err[0].startswith("error: ")
    assert not (tmp_path / "ckpt").exists() and not list(tmp_path.glob(".*partial*"))


def test_rd_cross_pretraining_has_positives_and_a_loss(tmp_path):
    """erica-rd-cross at a batch holding cross-sentence pairs of one relation: positives > 0, RD loss > 0."""
    from knowledge_lm.core.backbones import load_backbone

    model, tokenizer, _ = load_backbone("tiny", seed=0)
    corpus = build_corpus([toy_document(f"d{i}") for i in range(4)], TRIPLES, relation_names={"P17": "country"})
    pretrain_erica(
        corpus, model, tokenizer, 2, tmp_path / "ckpt", batch_size=4, max_length=64, objectives="erica-rd-cross"
    )
    manifest = json.loads((tmp_path / "ckpt" / "manifest.json").read_text())
    cross = manifest["rd_positives"]["cross/cross"]
    assert manifest["rd_positives"]["micro_batches"] == 2
    assert cross["mean_per_batch"] > 0 and cross["zero_batches_share"] == 0.0
    assert manifest["final_losses"]["rd"] > 0 and manifest["mean_losses"]["rd"] > 0
    assert manifest["deterministic"] is True and manifest["wall_time_s"] >= 0 and manifest["sessions"] == 1


def test_micro_batches_are_a_function_of_seed_and_index():
    from knowledge_lm.core.backbones import tiny_tokenizer
    from knowledge_lm.methods.erica.model import EricaBatches

    corpus = build_corpus([toy_document(f"d{i}") for i in range(5)], TRIPLES)
    collator = EricaCollator(tiny_tokenizer(), relation_vocabulary(corpus))
    stream = list(EricaBatches(corpus, collator, 2, 6, seed=3))
    resumed = list(EricaBatches(corpus, collator, 2, 6, seed=3, start=4))
    assert len(stream) == 6 and len(resumed) == 2
    for batch, again in zip(stream[4:], resumed):
        for view in ("rd", "ed"):
            for name, value in batch[view].items():
                assert torch.equal(value, again[view][name]) if torch.is_tensor(value) else value == again[view][name]
    # Loader workers make every other batch; the loader yields them in order.
    loaded = list(torch.utils.data.DataLoader(EricaBatches(corpus, collator, 2, 6, seed=3), None, num_workers=2))
    assert [list(batch["rd"]["term_positives"]) for batch in loaded] == [
        list(b["rd"]["term_positives"]) for b in stream
    ]
    assert all(torch.equal(a["rd"]["input_ids"], b["rd"]["input_ids"]) for a, b in zip(loaded, stream))
    # Every epoch (2 batches of 2 of 5 documents) drops its last incomplete batch.
    assert all(len(batch["ed"]["head"]) == 2 for batch in stream)


def test_klm_pretrain_is_deterministic_and_resumes_to_the_same_checkpoint(tmp_path, capsys):
    """4 steps in one run, again, and as 2 + 2 steps (stopped, then the same command resumed): one checksum."""
    from knowledge_lm.cli import PRETRAINING_UNFINISHED
    from knowledge_lm.core.backbones import weights_checksum

    assert klm_pretrain(tmp_path, tmp_path / "once") == 0
    assert klm_pretrain(tmp_path, tmp_path / "again") == 0
    assert klm_pretrain(tmp_path, tmp_path / "resumed", "--stop-after-steps", "2") == PRETRAINING_UNFINISHED
    assert not (tmp_path / "resumed").exists() and (tmp_path / "resumed.resume" / "last.ckpt").is_file()
    assert "run the same command again to resume" in capsys.readouterr().err
    assert klm_pretrain(tmp_path, tmp_path / "resumed") == 0
    checksums = {weights_checksum(tmp_path / name) for name in ("once", "again", "resumed")}
    assert len(checksums) == 1 and None not in checksums
    assert not (tmp_path / "resumed.resume").exists()
    once, resumed = (json.loads((tmp_path / name / "manifest.json").read_text()) for name in ("once", "resumed"))
    assert resumed["sessions"] == 2 and resumed["steps"] == once["steps"] == 4
    assert resumed["rd_positives"] == once["rd_positives"] and resumed["rd_positives"]["micro_batches"] == 8
    for name, value in once["mean_losses"].items():
        assert resumed["mean_losses"][name] == pytest.approx(value, rel=1e-5)
    record = json.loads((tmp_path / "results" / "pretraining" / "resumed.json").read_text())
    assert record["checkpoint_checksum"] in checksums and record["wall_time_s"] > 0


def test_klm_pretrain_refuses_the_state_of_another_run(tmp_path, capsys):
    from knowledge_lm.cli import PRETRAINING_UNFINISHED

    out = tmp_path / "ckpt"
    # A budget the first step already overruns: stopped after it, its state saved.
    assert klm_pretrain(tmp_path, out, "--time-budget-s", "0.001") == PRETRAINING_UNFINISHED
    assert torch.load(tmp_path / "ckpt.resume" / "last.ckpt", weights_only=True)["global_step"] == 1
    capsys.readouterr()
    assert klm_pretrain(tmp_path, out, "--seed", "1") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "is of another run (differs in " in err[-1] and "seed" in err[-1]


def test_pages_name_the_pretraining_run_of_each_erica_row():
    import pandas as pd

    from knowledge_lm.report.pages import pretraining_runs

    rows = [
        ("baseline", "built in", "b0"),
        ("erica", "checkpoints/erica-minilm", "e1" * 32),
        ("erica", "checkpoints/erica-minilm", "e1" * 32),
        ("erica-rd", "checkpoints/erica-rd-minilm", "r1" * 32),
        ("erica-rd", "checkpoints/erica-rd-minilm-2", "r2" * 32),
    ]
    frame = pd.DataFrame(rows, columns=["cell_method", "weights", "checksum"])
    line = pretraining_runs(frame)[0]
    assert "erica ← `checkpoints/erica-minilm` (e1e1e1e1e1e1)" in line
    assert "erica-rd ← `checkpoints/erica-rd-minilm` (r1r1r1r1r1r1) and `checkpoints/erica-rd-minilm-2`" in line
    assert "Mixed: the cells of erica-rd come from more than one" in line and "baseline" not in line
    assert pretraining_runs(frame.iloc[:1]) == []
