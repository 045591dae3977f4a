"""Task sanity of the generated task: what oracles that read the graph, and no text, score on each family.

The oracles: ``oracle_scores``.
"""

import functools
import hashlib
import json
import math
import random
from collections import Counter
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING

from knowledge_lm.core.caches import read_cached_json
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import default_cache_dir
from knowledge_lm.core.registry import DATASETS
from knowledge_lm.core.results import write_json_atomic
from knowledge_lm.knowledge.noise import permute_relations
from knowledge_lm.report.preregistration import load_declarations

if TYPE_CHECKING:
    import torch

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
# The first world at 20,000 training statements (benchmarks/knowledge_generated_20k.yaml, variant t20k): its own
# verdicts read its own ceilings, whose thresholds come from its train split.
T20K_WORLD = {**PAGE_WORLDS[0], "train_size": 20000}
TRANSE_HPARAMS = dict(dim=32, epochs=40, margin=1.0, lr=0.01, batch_size=256, seed=0)
# A world whose relation-blind regression scores above this (%) on one_hop or two_hop has a relation-blind cue: its
# hop families' scores do not show relational facts; no relational verdict is drawn from it (``relation_blind_cue``).
RELATION_BLIND_LIMIT = 55.0
SANITY_VERSION = 2  # part of the cache key: a change to an oracle must not read older numbers


DATASET = "generated"  # the task whose worlds these oracles score


def generated_dataset():
    """The generated task's data module class (its world generator, templates and knobs), through the registry."""
    return DATASETS.get(DATASET)


def template_path(name: str) -> tuple[str, ...]:
    """The relation path of the generated task's statement template ``name``."""
    return template_paths()[name]


@functools.cache
def template_paths() -> dict[str, tuple[str, ...]]:
    """Each statement template of the generated task by name → its relation path (looked up once per statement)."""
    return {template.name: template.path for template in generated_dataset().fact_templates}


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


def relation_blind_features(kg, graph, record: dict) -> list[float]:
    """What a relation-blind reader sees of a statement's pair: the subject's and the object's out- and in-degree,
    their undirected distance (at most 10) and their number of common neighbours."""
    subject, claimed = pair(record)
    return [
        kg.out_degree(subject),
        kg.in_degree(subject),
        kg.out_degree(claimed),
        kg.in_degree(claimed),
        min(graph_distance(graph, subject, claimed), 10.0),
        kg.relation_blind_signature(subject, claimed)[1],
    ]


def per_template(records: list[dict], features: list[list[float]]) -> "torch.Tensor":
    """Each record's ``features`` (and a constant) in the block of its template, zeros elsewhere: a linear model on
    these has its own weights per template (features × template)."""
    import torch

    names = list(template_paths())
    width = len(features[0]) + 1
    rows = torch.zeros(len(records), len(names) * width, dtype=torch.float64)
    for row, (record, values) in enumerate(zip(records, features)):
        start = names.index(record["template"]) * width
        rows[row, start : start + width] = torch.tensor([1.0, *values], dtype=torch.float64)
    return rows


def fit_logistic(inputs: "torch.Tensor", labels: list[int], l2: float = 1e-3) -> "torch.Tensor":
    """Weights of an L2-regularised logistic regression of ``labels`` on ``inputs`` (float64, full-batch L-BFGS: the
    same numbers on every run)."""
    import torch

    targets = torch.tensor(labels, dtype=torch.float64)
    weights = torch.zeros(inputs.shape[1], dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([weights], max_iter=500, tolerance_grad=1e-9, line_search_fn="strong_wolfe")

    def loss():
        optimizer.zero_grad()
        value = torch.nn.functional.binary_cross_entropy_with_logits(inputs @ weights, targets)
        value = value + l2 * (weights**2).sum()
        value.backward()
        return value

    optimizer.step(loss)
    return weights.detach()


def relation_blind_regression(data) -> dict[str, float]:
    """Family → test accuracy (%) of a logistic regression on ``relation_blind_features`` × template, fit on train:
    the cue hard negatives leave per template (a subject with more edges is more often true), which the per-family
    oracles cannot see."""
    kg, graph = DegreeGraph(data.kg), undirected_graph(data.kg)
    facts = {
        split: [record for record in data.splits[split] if record["kind"] in TEMPLATE_FAMILIES]
        for split in ("train", "test")
    }
    inputs = {
        split: per_template(records, [relation_blind_features(kg, graph, record) for record in records])
        for split, records in facts.items()
    }
    weights = fit_logistic(inputs["train"], [record["label"] for record in facts["train"]])
    return by_family(facts["test"], (inputs["test"] @ weights > 0).tolist())


class DegreeGraph:
    """The graph with each entity's out- and in-degree counted once."""

    def __init__(self, kg):
        self.kg = kg
        self.outgoing, self.incoming = Counter(head for head, _, _ in kg.triples), Counter(t for _, _, t in kg.triples)

    def out_degree(self, qid: str) -> int:
        return self.outgoing[qid]

    def in_degree(self, qid: str) -> int:
        return self.incoming[qid]

    def relation_blind_signature(self, subject: str, claimed: str) -> tuple[bool, int]:
        return self.kg.relation_blind_signature(subject, claimed)


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
        direction, threshold = best_threshold(dev)
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


def cached_oracle_scores(knobs: dict, cache_dir: Path | None = None) -> dict[str, dict[str, float]]:
    """``oracle_scores`` of the generated world of ``knobs``, kept under ``cache_dir`` (default: the cache directory)
    keyed by the generated data itself, so that a change to the generator is never read from an older entry."""
    data = generated_dataset().world(**knobs)
    # The oracles' code is part of the key too: kg-text's order oracle lives in its method's file. Every split is:
    # that oracle is fit on train (a world of 20,000 training statements shares the 2,000's dev and test).
    code = [(Path(__file__).parent.parent / part).read_text() for part in ("report/sanity.py", "methods/kg_text.py")]
    splits = [data.splits[split] for split in ("train", "dev", "test")]
    key = hashlib.sha256(
        json.dumps([SANITY_VERSION, TRANSE_HPARAMS, code, data.kg.triples, *splits], sort_keys=True).encode()
    ).hexdigest()[:24]
    path = Path(cache_dir or default_cache_dir()) / "sanity" / f"{key}.json"
    cached = read_cached_json(path, lambda value: isinstance(value, dict))
    if cached is not None:
        return cached
    scores = oracle_scores(data)
    write_json_atomic(path, scores)
    return scores


def world_knobs(dataset_options: dict) -> dict:
    """The generated world's knobs among a cell's or a declaration's dataset options (the others, the methods'
    knowledge options among them, change no statement of the world)."""
    names = {knob.name for knob in fields(generated_dataset().knobs_class)}
    return {name: value for name, value in dataset_options.items() if name in names}


def sanity_worlds() -> tuple[dict, ...]:
    """The worlds the sanity table shows and stores: the page's (v2, and its 20k-statement world), v3's, and the
    world of each pre-registered declaration of the generated task (read from its dataset options; declarations
    that differ only in their knowledge options share one world)."""
    worlds = {world_name(knobs): knobs for knobs in (*PAGE_WORLDS, T20K_WORLD, *V3_WORLDS)}
    for declaration in load_declarations():
        if declaration.dataset == DATASET:
            knobs = world_knobs(declaration.dataset_options)
            worlds.setdefault(world_name(knobs), knobs)
    return tuple(worlds.values())


def world_name(knobs: dict) -> str:
    full = asdict(generated_dataset().knobs_class(**knobs))
    return ", ".join(f"{name}={value}" for name, value in full.items())


def sanity_section(worlds=None, results_dir: Path | None = None) -> list[str]:
    """Markdown lines: for each generated world (knob dicts; default: ``sanity_worlds``) the oracles' test
    accuracy per family, the relation-blind regression and the feature ceilings, as ``write_sanity_numbers`` stored
    them under ``results_dir`` (default: the project's results/): the page build trains nothing. The worlds the
    relational verdicts are drawn from first; those with a relation-blind cue (``relation_blind_cue``) after them,
    under a heading of their own."""
    from knowledge_lm.core.paths import project_path

    worlds = [dict(knobs) for knobs in (sanity_worlds() if worlds is None else worlds)]
    stored = read_sanity_numbers(results_dir or project_path("results"))
    cued = [knobs for knobs in worlds if relation_blind_cue(current_regression(stored, knobs))]
    out = [
        "## Task sanity (no language model)",
        "",
        "Oracles that read the statement's gold links and the graph, never its text: accuracy (%) on test, "
        "thresholds on dev (`knowledge_lm.report.sanity`). The rule oracle follows the template's relations; the "
        "others are blind to relations (TransE: the better on test of the claim's and the relation-free distance), "
        "and should stay near 50 on one_hop and two_hop, whose false statements join the claimed object to the "
        "subject through another relation. Below them, on a sanity test split of at least "
        f"{family_test_size()} statements a family (a standard error ≤ {MAX_STANDARD_ERROR} points): a logistic "
        "regression on relation-blind features × template (degrees, distance, common neighbours; fit on train), "
        f"which should stay ≤ {RELATION_BLIND_LIMIT:.0f}, and each knowledge input's ceiling (an oracle reading only "
        "that input, with the true relations): below 90, a method reading only it cannot carry the family's "
        "relations. On one_hop and two_hop a method is above chance only above its world's relation-blind "
        "regression.",
        "",
        f"### Worlds the relational verdicts are drawn from (relation-blind regression ≤ {RELATION_BLIND_LIMIT:.0f} "
        "on one_hop and two_hop)",
        "",
    ]
    for knobs in worlds:
        if knobs not in cued:
            out += world_lines(knobs, stored)
    if cued:
        negatives = ", ".join(sorted({f"negatives={world_negatives(knobs)}" for knobs in cued}))
        out += [
            f"### Worlds with a relation-blind cue ({negatives}): no relational verdict is drawn from them; their "
            "type and text columns stand",
            "",
            f"Their relation-blind regression scores above {RELATION_BLIND_LIMIT:.0f} on one_hop or two_hop: the "
            "graph's shape alone (degrees, distance, common neighbours, per template) tells their true claims from "
            "false ones that often, so a score there does not show relational facts. Their rows on this page say "
            '"no verdict" in the column "uses relational facts", and mark one_hop and two_hop above chance only '
            "above that regression's score.",
            "",
        ]
        for knobs in cued:
            out += world_lines(knobs, stored)
    return out


def world_negatives(knobs: dict) -> str:
    """How the world ``knobs`` draws its false claims (its knob ``negatives``, the generator's default where unset)."""
    return asdict(generated_dataset().knobs_class(**knobs))["negatives"]


def world_lines(knobs: dict, stored: dict[str, dict]) -> list[str]:
    """One world's table of the sanity section, from its ``stored`` numbers (``read_sanity_numbers``); a line that
    says how to compute them where none are stored for its current code."""
    out = [f"World: {world_name(knobs)}.", ""]
    numbers = current_numbers(stored, knobs)
    if numbers is None:
        return out + ["Not computed for this world's code: `python -m knowledge_lm.report.sanity`.", ""]
    out += ["| oracle | " + " | ".join(FAMILIES) + " |", "|---|" + "---:|" * len(FAMILIES)]
    out += [table_row(ORACLE_NAMES[oracle], numbers["oracles"][oracle]) for oracle in ORACLES]
    counts = "/".join(str(numbers["statements"][family]) for family in TEMPLATE_FAMILIES)
    out.append(
        table_row(f"relation-blind regression × template ({counts} statements)", numbers["relation_blind_regression"])
    )
    out += [table_row(f"ceiling: {CEILING_NAMES[name]}", numbers["ceilings"][name]) for name in CEILING_NAMES]
    return out + [""]


def table_row(name: str, scores: dict[str, float]) -> str:
    cells = [f"{scores[family]:.1f}" if family in scores else "—" for family in FAMILIES]
    return f"| {name} | " + " | ".join(cells) + " |"


# -- the relation-blind regression and the feature ceilings, on a large sanity test split ------------------------

# A family's accuracy near 50 has a standard error ≤ 1.5 points from 1,112 statements on: a test split of this size
# holds that many of each knowledge family (a third of knowledge_share = 0.8 each).
MAX_STANDARD_ERROR = 1.5
# The third generator's world (benchmarks/*_generated_v3.yaml): matched negatives, more entities (a matched false
# claim needs a subject of its split in its true claim's cell) and a test split of family_test_size().
V3_WORLD = {"dev_size": 300, "negatives": "matched", "num_entities": 3000, "test_size": 4170}
V3_WORLDS = (V3_WORLD, {**V3_WORLD, "seed": CONFIRM_SEED})
SANITY_NUMBERS = Path("derived") / "sanity" / "generated.json"  # under the results store; written by ``main``
# The knowledge each method reads, by name of a ceiling (``feature_ceilings``); "kg_embedding" stands for the KG
# embedding kind of the cell (knowledge option kg_embedding). SI only filters the links its host reads.
METHOD_INPUTS = {
    "knowbert": ("kg_embedding",),
    "knowbert+si": ("kg_embedding", "si_selection"),
    "knowbert+si+sr": ("kg_embedding", "si_selection"),
    "kam": ("kam_kg_map",),
    "kam+kg": ("kam_kg_map",),
}
CEILING_NAMES = {
    "transe": "TransE (the method's, true relations): the claim's path, threshold per template on train",
    "rotate": "RotatE (the method's, true relations): the claim's rotations, threshold per template on train",
    "kam_kg_map": "KAM's KG map (an edge between the two entities' tokens), per template",
    "si_selection": "SI's selection (the object within K_hop of the subject), per template",
}


def family_test_size(max_standard_error: float = MAX_STANDARD_ERROR, knowledge_share: float = 0.8) -> int:
    """The smallest test split whose knowledge families (a third of ``knowledge_share`` each) have enough
    statements that an accuracy near 50 % has a standard error of at most ``max_standard_error`` points."""
    per_family = math.ceil(0.25 / (max_standard_error / 100) ** 2)
    size = math.ceil(per_family * 3 / knowledge_share)
    while round(knowledge_share * size / 2) // 3 * 2 < per_family:  # the generator rounds pairs per family
        size += 1
    return size


def sanity_split(knobs: dict):
    """The world of ``knobs`` with a test split of at least ``family_test_size()`` statements (its own random
    stream: train and dev are the world's own)."""
    full = asdict(generated_dataset().knobs_class(**knobs))
    return generated_dataset().world(
        **{**full, "test_size": max(full["test_size"], family_test_size(knowledge_share=full["knowledge_share"]))}
    )


def per_template_thresholded(facts: dict[str, list[dict]], values: dict[str, list[float]]) -> dict[str, float]:
    """Family → test accuracy (%) of "true iff value (or its negation) exceeds a threshold", threshold and direction
    the best on train for each template (a method reads the template's words, and learns from train: it may learn
    one per template; dev has too few statements a template)."""
    predictions = [0] * len(facts["test"])
    for template in template_paths():
        train = [(v, r["label"]) for v, r in zip(values["train"], facts["train"]) if r["template"] == template]
        direction, threshold = best_threshold(train)
        for index, record in enumerate(facts["test"]):
            if record["template"] == template:
                predictions[index] = int(direction * values["test"][index] > threshold)
    return by_family(facts["test"], predictions)


def best_threshold(points: list[tuple[float, int]]) -> tuple[int, float]:
    """The direction and threshold of the best accuracy of "direction × value > threshold" on ``points``
    ((value, label); ties: the first tried)."""
    best = (-1.0, 1, float("-inf"))
    for direction in (1, -1):
        values = sorted({direction * value for value, _ in points})
        for threshold in [float("-inf")] + [(low + high) / 2 for low, high in zip(values, values[1:])]:
            accuracy = sum(int(direction * value > threshold) == label for value, label in points)
            if accuracy > best[0]:
                best = (accuracy, direction, threshold)
    return best[1], best[2]


def feature_ceilings(
    data, cache_dir: Path, kinds=("transe", "rotate"), hparams: dict | None = None
) -> dict[str, dict[str, float]]:
    """Input → family → test accuracy (%) of an oracle that reads only that knowledge input, with the true
    relations, on one_hop and two_hop (thresholds per template, from train): each KG embedding kind (the method's
    own hyper-parameters, trained on the world's graph, cached under ``cache_dir/kg_embeddings`` as the method
    caches them: ``path_score`` of the claim's relations), KAM's KG map (whether subject and object share an
    edge) and SI's selection (whether the object lies within K_hop of the subject, what SI's ``close`` counts).
    Below 90 on a family: that input cannot carry its relations there. ``hparams``: kind → hyper-parameters other
    than the method's defaults (tests)."""
    from knowledge_lm.knowledge.kg_embeddings import cached_embeddings
    from knowledge_lm.knowledge.prepare import KnowledgeConfig

    facts = {
        split: [record for record in data.splits[split] if record["kind"] in TEMPLATE_FAMILIES]
        for split in ("train", "test")
    }
    pid_of = {name: pid for pid, name in data.kg.relations.items()}
    ceilings = {}
    for kind in kinds:
        embeddings = cached_embeddings(
            kind, data.kg, Path(cache_dir) / "kg_embeddings", progress=False, **(hparams or {}).get(kind, {})
        )
        values = {
            split: [
                embeddings.path_score(*pair(r)[:1], [pid_of[name] for name in template_path(r["template"])], pair(r)[1])
                for r in records
            ]
            for split, records in facts.items()
        }
        ceilings[kind] = per_template_thresholded(facts, values)
    graph = undirected_graph(data.kg)
    adjacent = {split: [float(graph.has_edge(*pair(r))) for r in records] for split, records in facts.items()}
    ceilings["kam_kg_map"] = per_template_thresholded(facts, adjacent)
    k_hop = KnowledgeConfig().k_hop
    close = {
        split: [float(graph_distance(graph, *pair(r)) <= k_hop) for r in records] for split, records in facts.items()
    }
    ceilings["si_selection"] = per_template_thresholded(facts, close)
    return ceilings


def world_key(knobs: dict) -> str:
    """What the sanity numbers of a world are computed from: its knobs and the code that generates and scores it."""
    code = [
        (Path(__file__).parent.parent / part).read_text()
        for part in ("report/sanity.py", "data/generated.py", "knowledge/kg_embeddings.py", "methods/kg_text.py")
    ]
    knobs = asdict(generated_dataset().knobs_class(**knobs))
    return hashlib.sha256(json.dumps([knobs, code]).encode()).hexdigest()[:16]


def sanity_numbers(knobs: dict, cache_dir: Path | None = None, hparams: dict | None = None) -> dict:
    """The oracles' scores of the world ``knobs`` (on its own test split), and the relation-blind regression and
    the feature ceilings (``hparams``: as ``feature_ceilings``) on its sanity split, with the statements of each
    family they are scored on."""
    data = sanity_split(knobs)
    test = [record for record in data.splits["test"] if record["kind"] in TEMPLATE_FAMILIES]
    return {
        "key": world_key(knobs),
        "oracles": cached_oracle_scores(knobs, cache_dir),
        "statements": {family: sum(r["kind"] == family for r in test) for family in TEMPLATE_FAMILIES},
        "relation_blind_regression": relation_blind_regression(data),
        "ceilings": feature_ceilings(data, Path(cache_dir or default_cache_dir()), hparams=hparams),
    }


def read_sanity_numbers(results_dir: Path) -> dict[str, dict]:
    """World name → its stored ``sanity_numbers`` (``results/derived/sanity/generated.json``); {} where none."""
    path = Path(results_dir) / SANITY_NUMBERS
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        why = f"does not parse ({type(error).__name__})"
        raise KlmError(f"{path}: {why}; write it again: python -m knowledge_lm.report.sanity") from None
    return stored if isinstance(stored, dict) else {}


def current_numbers(stored: dict[str, dict], knobs: dict) -> dict | None:
    """The world ``knobs``' numbers among ``stored`` (``read_sanity_numbers``), None where none are stored for its
    current code."""
    numbers = stored.get(world_name(knobs))
    return numbers if numbers and numbers.get("key") == world_key(knobs) else None


def current_regression(stored: dict[str, dict], knobs: dict) -> dict[str, float] | None:
    """Family → the relation-blind regression among ``stored`` for the world ``knobs`` (``current_numbers``); None
    where none is stored for its current code."""
    return (current_numbers(stored, knobs) or {}).get("relation_blind_regression")


def stored_ceilings(knobs: dict, results_dir: Path) -> dict[str, dict[str, float]] | None:
    """For the verdicts: input (``METHOD_INPUTS``' names, "transe"/"rotate" for "kg_embedding") → family → the
    ceiling stored for the world ``knobs``, None where none is stored for its current code."""
    numbers = current_numbers(read_sanity_numbers(results_dir), knobs)
    return numbers["ceilings"] if numbers else None


def stored_relation_blind(dataset_options: dict, results_dir: Path) -> dict[str, float] | None:
    """Family (one_hop, two_hop) → the relation-blind regression stored under ``results_dir`` for the world of a
    cell's ``dataset_options`` (``world_knobs``): how far the graph's shape alone reaches there; None where none is
    stored for its current code."""
    return current_regression(read_sanity_numbers(results_dir), world_knobs(dataset_options))


def relation_blind_cue(regression: dict[str, float] | None) -> dict[str, float]:
    """The hop families on which a world's relation-blind regression (``stored_relation_blind``) scores above
    ``RELATION_BLIND_LIMIT``, with their scores: the world has a relation-blind cue there, and no relational verdict
    is drawn from it. {} where it passes, or has none stored."""
    return {
        family: score
        for family, score in (regression or {}).items()
        if family in TEMPLATE_FAMILIES and score > RELATION_BLIND_LIMIT
    }


def method_ceiling(method: str, ceilings: dict[str, dict[str, float]], kg_embedding: str = "transe") -> dict:
    """Family → the highest ceiling among the inputs ``method`` reads (``METHOD_INPUTS``); {} for a method not
    listed (kg-text reads the facts' words: the rule oracle's)."""
    inputs = [kg_embedding if name == "kg_embedding" else name for name in METHOD_INPUTS.get(method, ())]
    families = {family for name in inputs for family in ceilings.get(name, {})}
    return {
        family: max(ceilings[name][family] for name in inputs if family in ceilings.get(name, {}))
        for family in families
    }


def stored_method_ceiling(method: str, dataset_options: dict, results_dir: Path) -> dict[str, float] | None:
    """Family → the ceiling stored under ``results_dir`` (``method_ceiling``) of the inputs ``method`` reads, in the
    world of a cell's ``dataset_options`` (``world_knobs``) with its KG embedding kind (knowledge option
    kg_embedding); {} for a method that reads no input with a ceiling (``METHOD_INPUTS``), None where the world has
    none stored for its current code."""
    from knowledge_lm.knowledge.prepare import KnowledgeConfig

    if method not in METHOD_INPUTS:
        return {}
    ceilings = stored_ceilings(world_knobs(dataset_options), results_dir)
    if ceilings is None:
        return None
    kind = (dataset_options.get("knowledge") or {}).get("kg_embedding", KnowledgeConfig().kg_embedding)
    return method_ceiling(method, ceilings, kind)


def write_sanity_numbers(
    results_dir: Path, worlds=None, cache_dir: Path | None = None, hparams: dict | None = None
) -> Path:
    """Compute ``sanity_numbers`` of each world (default: ``sanity_worlds``) and store them, by world name, in
    ``results/derived/sanity/generated.json`` (what the page reads: it trains nothing). Deterministic: the same
    code gives the same bytes. On 2 CPU cores: about a minute for the default worlds once their embeddings are
    cached under ``cache_dir``; training them first (RotatE on the 3,000-entity worlds the most) about 20."""
    worlds = sanity_worlds() if worlds is None else worlds
    numbers = {world_name(dict(knobs)): sanity_numbers(dict(knobs), cache_dir, hparams) for knobs in worlds}
    path = Path(results_dir) / SANITY_NUMBERS
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, numbers)
    return path


if __name__ == "__main__":  # python -m knowledge_lm.report.sanity [results_dir]: the derived numbers of the page
    import sys

    print(write_sanity_numbers(Path(sys.argv[1] if len(sys.argv) > 1 else "results")))
