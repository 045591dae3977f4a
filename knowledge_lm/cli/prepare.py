"""``klm prepare``: compute and cache a sweep's knowledge features."""

from knowledge_lm.cli.arguments import (
    add_cache_dir_argument,
    add_data_dir_argument,
    add_sweep_arguments,
    check_cache_folder,
    parse_overrides,
    sweep_from_args,
)
from knowledge_lm.core.results import COVERAGE_DIR, write_json_atomic
from knowledge_lm.run.config import (
    check_data_dir,
)
from knowledge_lm.sweep.runner import prepare_knowledge


def command_prepare(args):
    sweep = sweep_from_args(args)
    if args.coverage:
        return command_coverage(args, sweep)
    options = {
        name: getattr(args, name)
        for name in (
            "kg_dir",
            "linking",
            "annotator",
            "phrases",
            "pmi_corpus",
            "pmi_unigrams",
            "pmi_top_k",
            "k_hop",
            "link_noise",
            "kg_embeddings",
        )
        if getattr(args, name) is not None
    }
    data_dir = check_data_dir(args.data_dir)
    cache_dir = check_cache_folder(args.cache_dir)
    prepare_knowledge(
        sweep,
        sweep.methods,
        parse_overrides(args.set),
        data_dir=data_dir,
        cache_dir=cache_dir,
        options=options,
        progress=not args.quiet,
    )
    return 0


def command_coverage(args, sweep):
    """``klm prepare --coverage``: what of the KG reaches the knowledge methods on each task of the sweep's dataset,
    measured on the links alone (``knowledge.coverage``), written to ``<results>/coverage/<dataset>.json``
    beside the tasks measured before."""
    from knowledge_lm.core.io import read_json
    from knowledge_lm.core.registry import DATASETS
    from knowledge_lm.knowledge.coverage import COVERAGE_SAMPLE, coverage_line
    from knowledge_lm.knowledge.measure import measure_coverage
    from knowledge_lm.knowledge.prepare import KnowledgeConfig

    data_dir = check_data_dir(args.data_dir)
    config = KnowledgeConfig.from_dict({"kg_dir": args.kg_dir} if args.kg_dir else {})
    path = args.results_dir / COVERAGE_DIR / f"{sweep.dataset}.json"
    stored = read_json(path) if path.is_file() else {}
    tasks = dict(stored.get("tasks") or {})
    variant = "" if "" in sweep.variants else next(iter(sweep.variants))  # the plain cells' dataset options
    options = {k: v for k, v in sweep.variant_options(variant).items() if k != "knowledge"}
    for task in sweep.tasks:
        data = DATASETS.get(sweep.dataset)(task=task, data_dir=data_dir, cache_dir=args.cache_dir, **options)
        tasks[task] = measure_coverage(data, config, data.cache_dir, COVERAGE_SAMPLE)
        print(f"{sweep.dataset}/{task}: {'gold' if tasks[task]['gold_links'] else 'alias-table'} links")
        for split, coverage in tasks[task]["splits"].items():
            sampled = f" (a sample of {coverage['measured']} of {coverage['examples']})" * (
                coverage["measured"] < coverage["examples"]
            )
            print(f"  {split}{sampled}: {coverage_line(coverage)}")
    write_json_atomic(
        path,
        {
            "dataset": sweep.dataset,
            "kg": args.kg_dir or "the dataset's own KG, else wikidata_kg (the shared small KG)",
            "answers": "removed (keep_answers: false)",
            "sample": f"at most {COVERAGE_SAMPLE} examples per split, a seeded sample (seed 0) of larger splits",
            "tasks": dict(sorted(tasks.items())),
        },
    )
    print(f"wrote {path}")
    return 0


def add_parser(commands):
    prepare = commands.add_parser(
        "prepare", help="compute and cache knowledge features (entity links, NER, phrases, PMI)"
    )
    add_sweep_arguments(prepare)
    add_data_dir_argument(prepare)
    add_cache_dir_argument(prepare)
    prepare.add_argument(
        "--kg",
        "--kg-dir",
        dest="kg_dir",
        help="knowledge graph: a name (wikidata_kg, wikidata5m: under --data-dir), a KG folder, a Wikidata5M folder "
        "as distributed, or a triples TSV with a labels file beside it (default: the dataset's own, else "
        "<data-dir>/wikidata_kg)",
    )
    prepare.add_argument(
        "--linking", choices=("auto", "gold", "alias"), help="gold links, alias-table candidates, or auto"
    )
    prepare.add_argument("--annotator", choices=("spacy", "stanza"))
    prepare.add_argument("--phrases", choices=("noun_chunks", "subtrees"))
    prepare.add_argument(
        "--pmi-corpus", help="text file (one text per line) for PMI; default: the dataset's train text"
    )
    prepare.add_argument("--pmi-unigrams", help="'word count' file for unigram probabilities, e.g. enwiki_word_freq")
    prepare.add_argument("--pmi-top-k", type=int, help="PMI neighbours kept per example (default 10)")
    prepare.add_argument(
        "--k-hop", type=int, help="KG distance below which linked entities count as close for SI (default 6)"
    )
    prepare.add_argument(
        "--link-noise", type=float, help="share of linked entities replaced by a random entity of another type"
    )
    prepare.add_argument(
        "--kg-embeddings", action="store_true", default=None, help="also train and cache TransE embeddings"
    )
    prepare.add_argument(
        "--coverage",
        action="store_true",
        help="only measure what of the KG reaches the methods (links, triples, asked pairs) into "
        "<results>/coverage/<dataset>.json",
    )
    prepare.add_argument("--quiet", action="store_true", help="no progress bars")
    prepare.set_defaults(handler=command_prepare)
