"""``klm speed``: step time, throughput and memory of methods against the baseline and a bare loop."""

from knowledge_lm.cli.arguments import (
    add_backbone_argument,
    add_leaderboard_arguments,
    add_results_dir_argument,
    check_writable_folder,
    print_written_leaderboards,
)
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import METHODS
from knowledge_lm.core.results import write_json_atomic
from knowledge_lm.run.config import (
    COMPILE_MODES,
)


def command_speed(args):
    for name in ("batch_size", "max_length", "steps", "repeats"):
        if getattr(args, name) <= 0:
            raise KlmError(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    for method in args.methods.split(","):  # before the baseline is measured
        METHODS.check(method)
    check_writable_folder(args.results_dir)
    from knowledge_lm.report.speed import render_speed, speed_record_path
    from knowledge_lm.tools.speed import run_speed  # torch: loaded only when this command runs

    record = run_speed(
        args.methods.split(","),
        backbone=args.backbone,
        batch_size=args.batch_size,
        max_length=args.max_length,
        warmup=args.warmup,
        steps=args.steps,
        repeats=args.repeats,
        tokenizer=args.tokenizer,
        bare_loop=not args.no_bare_loop,
        compile=args.compile,
        padded=args.padded,
    )
    path = speed_record_path(args.results_dir, record)
    write_json_atomic(path, record)
    print(render_speed([record]))
    print(f"wrote {path}")
    if not args.no_leaderboard:
        print_written_leaderboards(args.results_dir, args.leaderboards_dir)
    return 0


def add_parser(commands):
    speed = commands.add_parser(
        "speed", help="step time, samples/s, memory, TFLOP/s of methods vs the baseline and a bare loop"
    )
    speed.add_argument(
        "--methods",
        default="baseline,knowbert,knowbert+si+sr,bert+sr,kam",
        help="comma-separated; the baseline is always measured first",
    )
    add_backbone_argument(
        speed,
        default="minilm",
        help="a backbone, or bert-base-shaped (random weights: hidden 768, 12 layers, 12 heads)",
    )
    speed.add_argument("--tokenizer", default="minilm", help="the backbone whose tokenizer bert-base-shaped uses")
    speed.add_argument("--batch-size", type=int, default=32)
    speed.add_argument(
        "--max-length", type=int, default=48, help="as benchmarks/generated.yaml, so the prepared features match"
    )
    speed.add_argument(
        "--padded",
        action="store_true",
        help="pad every batch to --max-length (one shape, e.g. 128 as GLUE's cells), not to its longest text",
    )
    speed.add_argument("--warmup", type=int, default=20)
    speed.add_argument("--steps", type=int, default=100)
    speed.add_argument(
        "--repeats", type=int, default=2, help="interleaved runs of the method list; each method's best median counts"
    )
    speed.add_argument("--no-bare-loop", action="store_true", help="skip the plain PyTorch loop")
    speed.add_argument(
        "--compile",
        nargs="?",
        const="default",
        choices=COMPILE_MODES,
        metavar="MODE",
        help="torch.compile every method's layers, as the training setting compile, in torch.compile's "
        f"MODE ({', '.join(COMPILE_MODES)}; default: default); the bare loop stays eager",
    )
    add_results_dir_argument(speed)
    add_leaderboard_arguments(speed)
    speed.set_defaults(handler=command_speed)
