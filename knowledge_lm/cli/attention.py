"""``klm attention``: draw a sentence's attention maps, baseline beside KAM."""

from pathlib import Path

from knowledge_lm.cli.arguments import (
    add_backbone_argument,
    parse_overrides,
)
from knowledge_lm.core.errors import KlmError


def command_attention(args):
    from knowledge_lm.tools.attention_maps import (
        render_attention,  # torch, transformers: loaded only when this command runs
    )

    if args.head != "mean" and not args.head.isdigit():
        raise KlmError(f"--head {args.head!r}: expected a head index or mean")
    head = None if args.head == "mean" else int(args.head)
    path = render_attention(
        args.text,
        args.out,
        backbone=args.backbone,
        method=args.method,
        options=parse_overrides(args.option),
        layer=args.layer,
        head=head,
        baseline_checkpoint=args.baseline_checkpoint,
        kam_checkpoint=args.kam_checkpoint,
        kg_dir=args.kg_dir,
        pmi_corpus=args.pmi_corpus,
        max_length=args.max_length,
    )
    print(f"wrote {path}")
    return 0


def add_parser(commands):
    attention = commands.add_parser(
        "attention", help="draw a sentence's attention maps, baseline beside KAM (paper Fig. 3)"
    )
    attention.add_argument("--text", required=True, help="the sentence")
    attention.add_argument("--out", required=True, type=Path, help="the PNG to write")
    add_backbone_argument(attention, default="minilm")
    attention.add_argument("--method", default="kam", help="kam (default), one of its ablations or kam+si")
    attention.add_argument("--option", action="append", metavar="KEY=VALUE", help="a method option, e.g. alpha=0.2")
    attention.add_argument("--layer", type=int, default=-1, help="0-based layer (default -1: the last)")
    attention.add_argument("--head", default="mean", help="a head index, or mean (default)")
    attention.add_argument("--baseline-checkpoint", help="a baseline cell's checkpoint (.ckpt) for the left map")
    attention.add_argument("--kam-checkpoint", help="a KAM cell's checkpoint (.ckpt) for the right map")
    attention.add_argument("--kg-dir", help="knowledge graph folder for entity links (default: no links)")
    attention.add_argument("--pmi-corpus", help="text file (one text per line) for PMI (default: no PMI)")
    attention.add_argument("--max-length", type=int, default=128)
    attention.set_defaults(handler=command_attention)
