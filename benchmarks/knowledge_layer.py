"""Knowledge-layer benchmark: what `klm prepare` costs and finds, per dataset, on this machine.

Prints, for the generated task, RTE, SemEval-2010 and OpenEntity: the cold `prepare` time, annotation
throughput (texts/s through spaCy), the cost of a second `prepare` (a cache hit) as a ratio of the
cold run, and entity-linking coverage (share of examples with ≥ 1 linked entity) per split; then
benchmarks/kg_speed.py's k-hop query, SI close-count and TransE times on the shared Wikidata KG.

    .venv/bin/python benchmarks/knowledge_layer.py [--data-dir ../shared/data] [--backbone minilm]
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from knowledge_lm.core.backbones import load_tokenizer
from knowledge_lm.core.io import resolve_data_dir
from knowledge_lm.core.registry import DATASETS
from knowledge_lm.knowledge.prepare import KnowledgeConfig, prepare

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kg_speed  # noqa: E402  (the KG half of this benchmark: k-hop, SI close counts, TransE)

DATASETS_TO_PREPARE = [
    ("generated", "facts", {"dev_size": 300}),
    ("glue", "rte", {}),
    ("semeval2010", "main", {}),
    ("openentity", "main", {}),
]


def prepare_costs(data_dir: Path, backbone: str, console: Console) -> Table:
    tokenizer = load_tokenizer(backbone)
    table = Table(title="klm prepare (cold cache, then a second run)")
    for column in (
        "dataset",
        "examples",
        "cold s",
        "texts/s annotated",
        "second run s",
        "second/cold",
        "links",
        "coverage train / dev / test",
    ):
        table.add_column(column)
    with tempfile.TemporaryDirectory() as cache:
        for dataset, task, options in DATASETS_TO_PREPARE:
            data = DATASETS.get(dataset)(task=task, data_dir=data_dir, cache_dir=cache, **options)
            started = time.perf_counter()
            manifest = prepare(data, tokenizer, KnowledgeConfig(), Path(cache), progress=False)
            cold = time.perf_counter() - started
            started = time.perf_counter()
            data = DATASETS.get(dataset)(task=task, data_dir=data_dir, cache_dir=cache, **options)
            prepare(data, tokenizer, KnowledgeConfig(), Path(cache), progress=False)
            warm = time.perf_counter() - started
            timings, splits = manifest["timings"], manifest["splits"]
            table.add_row(
                f"{dataset}/{task}",
                str(sum(s["examples"] for s in splits.values())),
                f"{cold:.1f}",
                f"{timings['annotated_texts'] / timings['annotation_s']:.0f}",
                f"{warm:.2f}",
                f"{warm / cold:.3f}",
                "gold" if manifest["gold_links"] else "alias table",
                " / ".join(f"{s['linked_coverage']:.1%}" for s in splits.values()),
            )
            console.print(f"done {dataset}/{task}")
    return table


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--backbone", default="minilm")
    args = parser.parse_args()
    data_dir = resolve_data_dir(args.data_dir)
    console = Console(width=160)
    console.print(prepare_costs(data_dir, args.backbone, console))
    kg_speed.main(["--kg-dir", str(data_dir / "wikidata_kg")])


if __name__ == "__main__":
    main()
