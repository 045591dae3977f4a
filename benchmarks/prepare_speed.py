"""KAM's knowledge features for a GLUE task on CPU (issue 31, item 5): spaCy's rate in one process against one per
core, in the same run, then the whole ``klm prepare`` of the task into a fresh cache, with its stages' times.

    python benchmarks/prepare_speed.py --task sst2 --texts 20000       # target: SST-2 in <= 5 min on 2 cores
    python benchmarks/prepare_speed.py --task rte --skip-prepare        # the rates only
Set KLM_ANNOTATION_PROCESSES to force the process count ``klm prepare`` uses.
"""

import argparse
import os
import tempfile
import time

from knowledge_lm.core.backbones import load_tokenizer
from knowledge_lm.data.glue import GlueDataModule
from knowledge_lm.knowledge.annotate import Annotator
from knowledge_lm.knowledge.prepare import KnowledgeConfig, prepare, text_segments


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--max-length", type=int, default=66, help="as benchmarks/kam_glue.yaml trains SST-2")
    parser.add_argument("--texts", type=int, default=20000, help="texts the rates are measured on")
    parser.add_argument("--skip-prepare", action="store_true")
    args = parser.parse_args()

    cores = len(os.sched_getaffinity(0))
    data = GlueDataModule(task=args.task, data_dir=args.data_dir, max_length=args.max_length)
    records = [record for split in data.labelled_splits().values() for record in split]
    texts = [text for record in records for _, text in text_segments(record)][: args.texts]
    print(f"{args.task}: {len(records)} examples; rates over {len(texts)} texts on {cores} cores")
    for processes in sorted({1, cores}):
        annotator = Annotator(n_process=processes)
        began = time.perf_counter()
        annotator.annotate(texts)
        seconds = time.perf_counter() - began
        print(f"spaCy, {processes} process(es): {len(texts) / seconds:.0f} texts/s ({seconds:.1f} s)")
    if args.skip_prepare:
        return
    with tempfile.TemporaryDirectory() as cache:
        began = time.perf_counter()
        manifest = prepare(data, load_tokenizer("minilm"), KnowledgeConfig(), cache, progress=True)
        print(
            f"klm prepare {args.task} (kam features): {time.perf_counter() - began:.0f} s; stages {manifest['timings']}"
        )


if __name__ == "__main__":
    main()
