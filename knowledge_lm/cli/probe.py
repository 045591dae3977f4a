"""``klm probe``: LAMA precision@1 of a masked-LM backbone."""

import time

from knowledge_lm.cli.arguments import (
    add_backbone_argument,
    add_data_dir_argument,
    add_results_dir_argument,
)
from knowledge_lm.core.results import Cell, write_json_atomic
from knowledge_lm.run.config import (
    check_data_dir,
)


def command_probe(args):
    from knowledge_lm.tools.probe import probe  # torch, transformers: loaded only when this command runs

    started = time.time()
    result = probe(args.backbone, check_data_dir(args.data_dir), args.relations.split(",") if args.relations else None)
    result["wall_time_s"] = round(time.time() - started, 2)
    path = (
        args.results_dir / "probes" / f"lama-{Cell('probe', 'lama', 'all', 1.0, 0, args.backbone).backbone_label}.json"
    )
    write_json_atomic(path, result)
    print(
        f"LAMA precision@1, mean over {len(result['relations'])} relations: {result['mean_precision_at_1']} "
        f"({result['kept']} of {result['facts']} facts kept); wrote {path}"
    )
    return 0


def add_parser(commands):
    probe = commands.add_parser("probe", help="LAMA precision@1 of a masked-LM backbone (zero-shot)")
    add_backbone_argument(probe, required=True, help="a local masked-LM checkpoint directory or a hub name")
    add_data_dir_argument(probe, help="data directory holding lama/")
    probe.add_argument("--relations", help="comma-separated relation ids (default: all)")
    add_results_dir_argument(probe)
    probe.set_defaults(handler=command_probe)
