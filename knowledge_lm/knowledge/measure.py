"""The knowledge coverage of a dataset's task, measured: the links and KG its knowledge methods would receive
(``knowledge.prepare``'s), scored per split by ``knowledge.coverage``; what ``klm prepare --coverage`` stores."""

from dataclasses import replace

from knowledge_lm.knowledge.annotate import Annotator
from knowledge_lm.knowledge.coverage import COVERAGE_SAMPLE, link_agreement, sample_indices, split_coverage
from knowledge_lm.knowledge.kg import KnowledgeGraph
from knowledge_lm.knowledge.prepare import (
    MENTION_SOURCES,
    entity_linker,
    has_gold_links,
    knowledge_graph_dir,
    link_segments,
    text_segments,
)


def measure_coverage(data_module, config, cache_dir, sample: int | None = COVERAGE_SAMPLE) -> dict:
    """The coverage of every split of ``data_module``'s task with the knowledge ``config`` (a ``KnowledgeConfig``),
    ``sample`` examples per split at most; with the alias linker's agreement with the gold links where the
    dataset has some. Links only: no spaCy, no features."""
    splits = data_module.read_labelled()
    kg = KnowledgeGraph.load(knowledge_graph_dir(data_module, config, cache_dir))
    gold, linker = entity_linker(data_module, splits, kg, config)
    alias_linkers = {
        source: entity_linker(data_module, splits, kg, replace(config, linking="alias", mentions=source))[1]
        for source in MENTION_SOURCES
    }
    annotator = None
    measured = {}
    for split, records in splits.items():
        chosen = [records[index] for index in sample_indices(len(records), sample)]
        agree = has_gold_links(records)
        annotations = None
        if agree or getattr(linker, "needs_annotations", False):  # spaCy only where a span linker reads it
            annotator = annotator or Annotator(backend=config.annotator, phrases=config.phrases)
            flat = iter(annotator.annotate([text for record in chosen for _, text in text_segments(record)]))
            annotations = [[next(flat) for _ in text_segments(record)] for record in chosen]
        entry = split_coverage(chosen, link_segments(chosen, gold, linker, annotations=annotations), kg)
        entry.update(examples=len(records), measured=len(chosen))
        if agree:
            entry["links"] = {
                source: link_agreement(chosen, link_segments(chosen, False, alias, annotations=annotations))
                for source, alias in alias_linkers.items()
            }
        measured[split] = entry
    return {"gold_links": gold, "mentions": config.mentions, "splits": measured}
