"""``klm prepare``: compute and cache a sweep's knowledge features."""

from knowledge_lm.cli.arguments import (
    add_cache_dir_argument,
    add_data_dir_argument,
    add_sweep_arguments,
    check_cache_folder,
    parse_overrides,
    sweep_from_args,
)
from knowledge_lm.run.config import (
    check_data_dir,
)
from knowledge_lm.run.runner import (
    prepare_knowledge,
)


def command_prepare(args):
    sweep = sweep_from_args(args)
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


def add_parser(commands):
    prepare = commands.add_parser(
        "prepare", help="compute and cache knowledge features (entity links, NER, phrases, PMI)"
    )
    add_sweep_arguments(prepare)
    add_data_dir_argument(prepare)
    add_cache_dir_argument(prepare)
    prepare.add_argument(
        "--kg-dir", help="knowledge graph folder (default: the dataset's own, else <data-dir>/wikidata_kg)"
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
    prepare.add_argument("--quiet", action="store_true", help="no progress bars")
    prepare.set_defaults(handler=command_prepare)
