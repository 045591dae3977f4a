"""Task sanity of the generated task: what oracles that read the graph, and no text, score on each family.

The oracles: ``oracle_scores``.
"""

import hashlib
import json
import random
from dataclasses import asdict
from pathlib import Path

from knowledge_lm.core.caches import read_cached_json
from knowledge_lm.core.io import default_cache_dir
from knowledge_lm.core.registry import DATASETS
from knowledge_lm.core.results import write_json_atomic
from knowledge_lm.knowledge.noise import permute_relations

ORACLES = ("rule", "adjacency", "distance", "transe_permuted", "kg_text_order")
RELATION_BLIND = ("adjacency", "distance", "transe_permuted", "kg_text_order")
FAMILIES = ("type", "one_hop", "two_hop", "text")
TEMPLATE_FAMILIES = ("one_hop", "two_hop")  # the families a relation-blind oracle scores: a claimed object
ORACLE_NAMES = {
    "rule": "rule (the template's path in the graph)",
    "adjacency": "adjacency (any edge)",
    "distance": "graph distance, threshold on dev",
    "transe_permuted": "TransE, relation labels permuted",
    "kg_text_order": "kg-text's input order (where its facts are, not what they say)",
}
# The worlds of the page's results: benchmarks/knowledge_generated.yaml's dataset options, and the confirmation
# world of benchmarks/knowledge_generated_confirm.yaml (a generator seed nothing was tuned on).
CONFIRM_SEED = 20261127
PAGE_WORLDS = ({"dev_size": 300, "negatives": "hard"}, {"dev_size": 300, "negatives": "hard", "seed": CONFIRM_SEED})
TRANSE_HPARAMS = dict(dim=32, epochs=40, margin=1.0, lr=0.01, batch_size=256, seed=0)
SANITY_VERSION = 2  # part of the cache key: a change to an oracle must not read older numbers


def oracle_scores(data, transe_hparams: dict | None = None) -> dict[str, dict[str, float]]:
    """Oracle → family → accuracy (%) on test; relation-blind oracles on one_hop and two_hop only.

    No language model is trained. Each oracle reads a statement's gold links (the subject first, the claimed object
    last) and its template, scores the test split, and takes any threshold or direction it needs from dev:

    * ``rule``: follows the template's relation path from the subject in the graph (the type and text families: the
      subject's type, whether the two mentioned places are one); 100 by construction;
    * ``adjacency``: true iff subject and object share an edge, of any relation, in either direction;
    * ``distance``: the undirected shortest-path length between subject and object, against a threshold;
    * ``transe_permuted``: TransE trained on the graph with its relation labels permuted over the edges; the better on
      test of the claim's score ``‖e_s + Σ w_r − e_o‖`` and the relation-free ``‖e_s − e_o‖`` (an upper bound);
    * ``kg_text_order``: kg-text's input with its words hidden: a decision stump over where its facts are and how many
      (``kg_text.input_order_oracle``, fit on train).

    The last three are blind to relations: on the hard negatives of ``knowledge_lm.data.generated`` they should stay
    near chance (50) on one_hop and two_hop, while the easy negatives let them through (a leak they must catch).
    """
    splits = {split: data.splits[split] for split in ("dev", "test")}
    scores = {"rule": rule_accuracy(data, splits["test"])}
    facts = {
        split: [record for record in records if record["kind"] in TEMPLATE_FAMILIES]
        for split, records in splits.items()
    }
    graph = undirected_graph(data.kg)
    adjacency = {
        split: [float(graph.has_edge(*pair(record))) for record in records] for split, records in facts.items()
    }
    scores["adjacency"] = by_family(facts["test"], [value > 0.5 for value in adjacency["test"]])
    distances = {
        split: [graph_distance(graph, *pair(record)) for record in records] for split, records in facts.items()
    }
    scores["distance"] = thresholded(facts, distances)
    transe = permuted_transe(data.kg, {**TRANSE_HPARAMS, **(transe_hparams or {})})
    claim = {split: [transe_claim_distance(transe, record) for record in records] for split, records in facts.items()}
    plain = {split: [transe_pair_distance(transe, record) for record in records] for split, records in facts.items()}
    with_claim, relation_free = thresholded(facts, claim), thresholded(facts, plain)
    scores["transe_permuted"] = {family: max(with_claim[family], relation_free[family]) for family in with_claim}
    scores["kg_text_order"] = input_order_scores(data)
    return scores


def input_order_scores(data) -> dict[str, float]:
    """kg-text's input-order oracle (a decision stump over its facts' positions, fit on train) on one_hop and
    two_hop, with the default backbone's tokenizer: facts are counted in its sub-word tokens."""
    from knowledge_lm.core.backbones import load_tokenizer
    from knowledge_lm.methods.kg_text import input_order_oracle

    accuracies = input_order_oracle(data, load_tokenizer("minilm"))
    return {family: 100 * accuracies[family] for family in TEMPLATE_FAMILIES if family in accuracies}


def pair(record: dict) -> tuple[str, str]:
    """The statement's subject and claimed object (gold links: the subject first, the claim's object last)."""
    return record["entities"][0]["gold_qid"], record["entities"][-1]["gold_qid"]


def rule_answer(data, record: dict) -> int:
    links = [link["gold_qid"] for link in record["entities"]]
    if record["kind"] == "text":  # "{s} ... {x}. {s} ... {y}."
        return int(links[1] == links[3])
    if record["kind"] == "type":
        return int(data.kg.entities[links[0]].type == record["text_a"].rstrip(".").split()[-1])
    return int(links[-1] in data.kg.follow(links[0], template_path(record["template"]))[-1])


def rule_accuracy(data, records: list[dict]) -> dict[str, float]:
    return by_family(records, [rule_answer(data, record) for record in records])


def by_family(records: list[dict], predictions: list) -> dict[str, float]:
    """Accuracy (%) of ``predictions`` (truthy: true) per statement family present in ``records``."""
    correct, total = {}, {}
    for record, prediction in zip(records, predictions):
        family = record["kind"]
        total[family] = total.get(family, 0) + 1
        correct[family] = correct.get(family, 0) + int(int(bool(prediction)) == record["label"])
    return {family: 100 * correct[family] / total[family] for family in FAMILIES if family in total}


def thresholded(facts: dict[str, list[dict]], values: dict[str, list[float]]) -> dict[str, float]:
    """Per family, the test accuracy of "true iff value (or its negation) exceeds a threshold", the threshold and
    direction being the best on dev (ties: the first tried)."""
    accuracies = {}
    for family in TEMPLATE_FAMILIES:
        dev = [
            (value, record["label"]) for value, record in zip(values["dev"], facts["dev"]) if record["kind"] == family
        ]
        test = [
            (value, record["label"]) for value, record in zip(values["test"], facts["test"]) if record["kind"] == family
        ]
        if not test:
            continue
        best = (-1.0, 1, float("-inf"))
        for direction in (1, -1):
            points = sorted({direction * value for value, _ in dev})
            for threshold in [float("-inf")] + [(low + high) / 2 for low, high in zip(points, points[1:])]:
                accuracy = sum(int(direction * value > threshold) == label for value, label in dev) / max(len(dev), 1)
                if accuracy > best[0]:
                    best = (accuracy, direction, threshold)
        _, direction, threshold = best
        accuracies[family] = 100 * sum(int(direction * value > threshold) == label for value, label in test) / len(test)
    return accuracies


def undirected_graph(kg):
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(kg.entities)
    graph.add_edges_from((head, tail) for head, _, tail in kg.triples)
    return graph


def graph_distance(graph, source: str, target: str) -> float:
    import networkx as nx

    try:
        return float(nx.shortest_path_length(graph, source, target))
    except nx.NetworkXNoPath:
        return float(graph.number_of_nodes())


class PermutedGraph:
    """The graph's triples with their relation labels permuted over the edges (seeded): what TransE trains on."""

    def __init__(self, kg, seed: int):
        self.triples = permute_relations(kg.triples, random.Random(f"knowledge-lm/sanity:{seed}"))
        self.pid_of = {name: pid for pid, name in kg.relations.items()}


def permuted_transe(kg, hparams: dict):
    from knowledge_lm.knowledge.kg_embeddings import train_transe

    permuted = PermutedGraph(kg, hparams["seed"])
    embeddings = train_transe(permuted, progress=False, **hparams)
    embeddings.pid_of = permuted.pid_of
    return embeddings


def transe_claim_distance(embeddings, record: dict) -> float:
    subject, claimed = pair(record)
    path = template_path(record["template"])
    relations = sum(embeddings.relation_matrix[embeddings.relation_index[embeddings.pid_of[name]]] for name in path)
    return float((embeddings.lookup(subject) + relations - embeddings.lookup(claimed)).norm())


def transe_pair_distance(embeddings, record: dict) -> float:
    subject, claimed = pair(record)
    return float((embeddings.lookup(subject) - embeddings.lookup(claimed)).norm())


def generated_world(**knobs):
    """The generated task's world for ``knobs`` (its graph and splits), in memory: through the dataset's class."""
    return DATASETS.get("generated").world(**knobs)


def template_path(name: str) -> tuple[str, ...]:
    """The relation path of the generated task's statement template ``name``."""
    return next(template.path for template in DATASETS.get("generated").fact_templates if template.name == name)


def cached_oracle_scores(data, cache_dir: Path | None = None) -> dict[str, dict[str, float]]:
    """``oracle_scores`` of the generated world ``data``, kept under ``cache_dir`` (default: the cache directory)
    keyed by the generated data itself, so that a change to the generator is never read from an older entry."""
    # The oracles' code is part of the key too: kg-text's order oracle lives in its method's file.
    code = [(Path(__file__).parent.parent / part).read_text() for part in ("report/sanity.py", "methods/kg_text.py")]
    key = hashlib.sha256(
        json.dumps(
            [SANITY_VERSION, TRANSE_HPARAMS, code, data.kg.triples, data.splits["dev"], data.splits["test"]],
            sort_keys=True,
        ).encode()
    ).hexdigest()[:24]
    path = Path(cache_dir or default_cache_dir()) / "sanity" / f"{key}.json"
    cached = read_cached_json(path, lambda value: isinstance(value, dict))
    if cached is not None:
        return cached
    scores = oracle_scores(data)
    write_json_atomic(path, scores)
    return scores


def world_name(data) -> str:
    full = asdict(data.knobs)
    return ", ".join(f"{name}={value}" for name, value in full.items())


def sanity_section(worlds=PAGE_WORLDS, cache_dir: Path | None = None) -> list[str]:
    """Markdown lines: the oracles' test accuracy per family in each generated world (knob dicts) of the page."""
    out = [
        "## Task sanity (no language model)",
        "",
        "Oracles that read the statement's gold links and the graph, never its text: accuracy (%) on test, "
        "thresholds on dev (`knowledge_lm.report.sanity`). The rule oracle follows the template's relations; the "
        "others are blind to relations (TransE: the better on test of the claim's and the relation-free distance), "
        "and should stay near 50 on one_hop and two_hop, whose false statements join the claimed object to the "
        "subject through another relation.",
        "",
    ]
    for knobs in worlds:
        data = generated_world(**knobs)
        scores = cached_oracle_scores(data, cache_dir)
        out += [
            f"World: {world_name(data)}.",
            "",
            "| oracle | " + " | ".join(FAMILIES) + " |",
            "|---|" + "---:|" * len(FAMILIES),
        ]
        for oracle in ORACLES:
            cells = [f"{scores[oracle][family]:.1f}" if family in scores[oracle] else "—" for family in FAMILIES]
            out.append(f"| {ORACLE_NAMES[oracle]} | " + " | ".join(cells) + " |")
        out.append("")
    return out
