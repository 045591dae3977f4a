"""Speed of the knowledge-graph queries SI needs, and of TransE, on the shared Wikidata KG.

    .venv/bin/python benchmarks/kg_speed.py [--kg-dir DIR] [--queries 1000] [--sets 200] [--seed 0]

Times are wall-clock on whatever else the machine runs: rerun on an idle machine to compare.
"""

import argparse
import random
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from knowledge_lm.knowledge.kg import SI_K_HOP, KnowledgeGraph
from knowledge_lm.knowledge.kg_embeddings import DEFAULT_HPARAMS, train_transe

REPO_ROOT = Path(__file__).resolve().parents[1]


def linked_sets(kg: KnowledgeGraph, size: int, count: int, rng: random.Random) -> list[list[str]]:
    """``count`` entity sets of ``size``, each drawn from one random entity's 2-hop neighbourhood (itself included),
    like the linked entities of one text about one topic."""
    sets = []
    for _ in range(1000 * count):
        if len(sets) == count:
            break
        centre = rng.choice(kg.qids)
        pool = sorted(kg.k_hop(centre, 2) | {centre})
        if len(pool) >= size:
            sets.append(rng.sample(pool, size))
    return sets


def milliseconds(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kg-dir", type=Path, default=REPO_ROOT.parent / "shared" / "data" / "wikidata_kg")
    parser.add_argument("--queries", type=int, default=1000, help="random entities per k-hop measurement")
    parser.add_argument("--sets", type=int, default=200, help="linked-entity sets per close_counts measurement")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rows = []

    start = time.perf_counter()
    kg = KnowledgeGraph.load(args.kg_dir)
    rows.append(("load", f"{len(kg):,} entities, {len(kg.triples):,} triples", f"{time.perf_counter() - start:.2f} s"))

    rng = random.Random(args.seed)
    sample = rng.sample(kg.qids, min(args.queries, len(kg)))
    for k in (1, 2, 3):
        start = time.perf_counter()
        sizes = [len(kg.k_hop(qid, k)) for qid in sample]
        elapsed = time.perf_counter() - start
        rows.append(
            (
                f"k_hop, k={k}",
                f"mean of {len(sample)} entities; mean set size {sum(sizes) / len(sizes):,.0f}",
                milliseconds(elapsed / len(sample)),
            )
        )

    for size in (5, 20):
        sets = linked_sets(kg, size, args.sets, rng)
        start = time.perf_counter()
        close = [sum(kg.close_counts(linked, k_hop=SI_K_HOP).values()) / size for linked in sets]
        elapsed = time.perf_counter() - start
        rows.append(
            (
                f"close_counts, |E|={size}",
                f"K_hop={SI_K_HOP}, mean of {len(sets)} sets from 2-hop neighbourhoods; "
                f"mean |S(e)| {sum(close) / len(close):.1f}",
                milliseconds(elapsed / len(sets)),
            )
        )

    for epochs in (1, DEFAULT_HPARAMS["epochs"]):
        start = time.perf_counter()
        train_transe(kg, progress=False, **{**DEFAULT_HPARAMS, "epochs": epochs})
        rows.append(
            (
                f"TransE, {epochs} epoch{'s' if epochs != 1 else ''}",
                f"dim {DEFAULT_HPARAMS['dim']}, batch {DEFAULT_HPARAMS['batch_size']}, one torch thread",
                f"{time.perf_counter() - start:.2f} s",
            )
        )

    table = Table(title=f"knowledge graph speed ({args.kg_dir})")
    for column in ("operation", "setting", "time"):
        table.add_column(column, justify="right" if column == "time" else "left")
    for row in rows:
        table.add_row(*row)
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
