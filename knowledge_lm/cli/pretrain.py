"""``klm pretrain``: the pretraining stages (ERICA; KnowBERT's MLM and linking) that save a checkpoint."""

import sys
from pathlib import Path

from knowledge_lm.cli.arguments import (
    add_backbone_argument,
    add_cache_dir_argument,
    add_data_dir_argument,
    add_results_dir_argument,
)
from knowledge_lm.core.errors import KlmError

# `klm pretrain`'s exit code when a run stopped early (--stop-after-steps, --time-budget-s) with its state saved:
# EX_TEMPFAIL, "try again" (the same command resumes).
PRETRAINING_UNFINISHED = 75


def command_pretrain(args):
    # The pretraining modules (torch, transformers) load only when this command runs.
    from knowledge_lm.methods.erica.pretraining import erica_checkpoint, erica_state_dir
    from knowledge_lm.run.knowbert_pretraining import knowbert_checkpoint
    from knowledge_lm.run.provenance import record_pretraining

    if args.method == "knowbert":
        out = knowbert_checkpoint(
            args.corpus,
            args.out,
            backbone=args.backbone,
            steps=args.steps,
            batch_size=args.batch_size or 32,
            max_length=args.max_length,
            data_dir=args.data_dir,
            cache_dir=args.cache_dir,
            seed=args.seed,
            lr=args.lr,
            progress=not args.quiet,
        )
        print(
            f"wrote {out} (use it as --backbone {out} with --method knowbert, knowbert+si or knowbert+si+sr); "
            f"its record: {record_pretraining(out, args.results_dir)}"
        )
        return 0
    exclude = (
        None
        if args.exclude_test is None
        else [name for name in args.exclude_test.split(",") if name not in ("", "none")]
    )
    options = {"lr": args.lr} if args.lr is not None else {}
    for option in ("stop_after_steps", "time_budget_s", "save_every_steps"):
        if getattr(args, option) is not None:
            if getattr(args, option) <= 0:
                raise KlmError(f"--{option.replace('_', '-')} must be > 0, got {getattr(args, option)}")
            options[option] = getattr(args, option)
    options["save_every_s"] = args.save_every_s if args.save_every_s > 0 else None
    state_dir = args.state_dir or erica_state_dir(args.out)
    out = erica_checkpoint(
        args.corpus,
        args.out,
        method=args.method,
        objectives=args.objectives,
        backbone=args.backbone,
        steps=args.steps,
        batch_size=args.batch_size,
        data_dir=args.data_dir,
        kg_dir=args.kg_dir,
        exclude_test=exclude,
        min_entities=args.min_entities,
        min_relations=args.min_relations,
        max_length=args.max_length,
        seed=args.seed,
        cache_dir=args.cache_dir,
        progress=not args.quiet,
        micro_batch_size=args.micro_batch_size,
        state_dir=state_dir,
        resumable=not args.no_resume,
        deterministic=not args.nondeterministic,
        **options,
    )
    if out is None:
        print(
            f"stopped before step {args.steps}; the state is in {state_dir}: run the same command again to resume",
            file=sys.stderr,
        )
        return PRETRAINING_UNFINISHED
    print(
        f"wrote {out} (use it as --backbone {out} with --method {args.method}); "
        f"its record: {record_pretraining(out, args.results_dir)}"
    )
    return 0


def add_parser(commands):
    pretrain = commands.add_parser(
        "pretrain", help="pretraining stages (ERICA; KnowBERT's MLM + linking): save a checkpoint DIR"
    )
    pretrain.add_argument(
        "--method",
        default="erica",
        help="erica or an ablation: erica-mlm-only, erica-ed, erica-rd, erica-rd-intra, erica-rd-cross; or knowbert",
    )
    pretrain.add_argument(
        "--corpus",
        required=True,
        help="ERICA: comma-separated redocred, fewrel, lama, generated, or .jsonl "
        "paths; knowbert: one prepared dataset (its train split)",
    )
    add_backbone_argument(pretrain, default="minilm", help="minilm (default), mpnet-base, tiny, or a local directory")
    pretrain.add_argument("--steps", type=int, required=True, help="optimiser steps")
    pretrain.add_argument("--batch-size", type=int, help="documents per step (ERICA: 64) or texts (knowbert: 32)")
    pretrain.add_argument(
        "--micro-batch-size",
        type=int,
        help="ERICA: documents per forward pass (divides --batch-size; gradients accumulate, and RD contrasts within "
        "each micro-batch, as the official code's 16 per GPU); default: the batch size",
    )
    pretrain.add_argument("--out", required=True, type=Path, help="checkpoint directory to create")
    add_results_dir_argument(
        pretrain, help="where the run's record goes (<results-dir>/pretraining/<checkpoint name>.json)"
    )
    add_data_dir_argument(pretrain)
    pretrain.add_argument(
        "--objectives", help="mlm,ed,rd (or rd-intra, rd-cross) or an ablation name; must agree with --method"
    )
    pretrain.add_argument("--kg-dir", help="Wikidata KG folder (default <data-dir>/wikidata_kg)")
    pretrain.add_argument(
        "--exclude-test", help="test sets whose entity pairs are removed (default: the corpus sources' own; none)"
    )
    pretrain.add_argument("--min-entities", type=int, default=4)
    pretrain.add_argument("--min-relations", type=int, default=4)
    pretrain.add_argument("--max-length", type=int, help="ERICA: 512; knowbert: the dataset config's, as prepared")
    pretrain.add_argument("--lr", type=float, help="default 3e-5 (the paper's)")
    pretrain.add_argument("--seed", type=int, default=0)
    add_cache_dir_argument(pretrain, help="corpus cache (default: $KLM_CACHE_DIR or .cache/knowledge-lm)")
    pretrain.add_argument("--quiet", action="store_true", help="no progress bar")
    pretrain.add_argument(
        "--state-dir",
        type=Path,
        help="ERICA: where the resumable state goes (default: <out>.resume beside --out); the same command resumes "
        "from it, and it is removed once the checkpoint is written",
    )
    pretrain.add_argument(
        "--save-every-s", type=float, default=300, help="ERICA: save the state every that many seconds (0: never)"
    )
    pretrain.add_argument("--save-every-steps", type=int, help="ERICA: also save the state every that many steps")
    pretrain.add_argument(
        "--stop-after-steps",
        type=int,
        help=f"ERICA: stop (state saved, exit code {PRETRAINING_UNFINISHED}) after that many steps of this run",
    )
    pretrain.add_argument(
        "--time-budget-s",
        type=float,
        help=f"ERICA: stop (state saved, exit code {PRETRAINING_UNFINISHED}) before a step would end past that many "
        "seconds of training in this run (model loading and the final save not counted: leave a margin)",
    )
    pretrain.add_argument("--no-resume", action="store_true", help="ERICA: keep no resumable state")
    pretrain.add_argument(
        "--nondeterministic", action="store_true", help="ERICA: allow nondeterministic (faster) kernels"
    )
    pretrain.set_defaults(handler=command_pretrain)
