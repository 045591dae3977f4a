"""One GLUE cell through Hugging Face's ``Trainer``, as a user of transformers would run it: the peer that
``benchmarks/peer_speed.py`` times ``klm`` against, one process per cell.

    python benchmarks/peer_hf_cell.py SPEC.json OUT.json

``SPEC.json`` (written by ``peer_speed.py``) names the backbone directory, the cell's splits as JSON-lines
files of ``{text_a, text_b, label}`` (the rows the suite's data module gives the same cell: its train
fraction, its held-out dev, GLUE dev as test), the task's metrics and the suite's training settings and
step budget. The model is ``AutoModelForSequenceClassification`` over the backbone; the trainer evaluates dev
and test every ``eval_every_steps`` steps and the evaluation with the best dev main metric (the earliest on
ties) is the cell's, as the suite selects (``peer_speed.py`` checks first that the Trainer has what it
needs: ``accelerate``). ``OUT.json``: that evaluation's metrics, the time from loading the backbone to
the end of training (the span of a ``klm`` result's ``wall_time_s``) and the dtype the weights trained in.
Imports only torch, transformers and the suite's metric definitions, so that its process pays what a Trainer
user's would.
"""

import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from datasets import Dataset
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
    set_seed,
)
from transformers.utils import logging as transformers_logging

from knowledge_lm.tasks.metrics import compute

SPLITS = ("train", "dev", "test")


def read_split(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line]


def tokenized(tokenizer, records: list[dict], max_length: int) -> Dataset:
    second = [record["text_b"] for record in records] if records[0].get("text_b") is not None else None
    encoded = tokenizer([record["text_a"] for record in records], second, truncation=True, max_length=max_length)
    return Dataset.from_dict({**encoded, "labels": [record["label"] for record in records]})


def best_evaluation(history: list[dict], metrics: tuple[str, ...], main_metric: str) -> dict:
    """The logged evaluation (dev and test metrics of one step) with the best dev main metric, the earliest on
    ties, as ``{"step", "dev": {...}, "test": {...}}``."""
    evaluations: dict[int, dict] = {}
    for entry in history:
        for split in ("dev", "test"):
            scores = {name: entry[f"eval_{split}_{name}"] for name in metrics if f"eval_{split}_{name}" in entry}
            if scores:
                evaluations.setdefault(entry["step"], {"step": entry["step"], "dev": {}, "test": {}})[split] = scores
    return max(evaluations.values(), key=lambda e: (e["dev"][main_metric], -e["step"]))


def load_model(backbone: str, num_labels: int, regression: bool, dropout: float):
    """``AutoModelForSequenceClassification`` over ``backbone`` with float32 weights, as the suite trains
    (``load_backbone``): transformers loads a checkpoint in its stored dtype, and the GPU runs' backbone is
    pack.sh's float16 copy, whose weights would otherwise train in half precision (bf16 autocast computes in
    bf16 either way; the weights and the optimiser's updates stay float32)."""
    model = AutoModelForSequenceClassification.from_pretrained(
        backbone,
        num_labels=num_labels,
        problem_type="regression" if regression else "single_label_classification",
        hidden_dropout_prob=dropout,
    )
    return model.float()


def main(argv=None, callbacks=()):
    """Train the cell ``SPEC.json`` names and write ``OUT.json``; ``callbacks``: the Trainer's extra callbacks
    (``cell_phases.py``'s clock)."""
    spec_path, out_path = argv or sys.argv[1:]
    spec = json.loads(Path(spec_path).read_text())
    transformers_logging.set_verbosity_error()
    train, budget = spec["train"], spec["budget"]
    task = SimpleNamespace(kind=spec["kind"], metrics=tuple(spec["metrics"]))
    regression = spec["kind"] == "regression"

    started = time.time()
    set_seed(spec["seed"])
    tokenizer = AutoTokenizer.from_pretrained(spec["backbone"])
    model = load_model(spec["backbone"], spec["num_labels"], regression, train["dropout"])
    data = {split: tokenized(tokenizer, read_split(spec["splits"][split]), train["max_length"]) for split in SPLITS}

    def metrics(prediction):
        logits, labels = prediction
        predicted = logits.squeeze(-1) if regression else np.argmax(logits, axis=-1)
        return compute(task, predicted, labels)

    with tempfile.TemporaryDirectory() as output_dir:
        arguments = TrainingArguments(
            output_dir=output_dir,
            max_steps=budget["max_steps"],
            per_device_train_batch_size=train["batch_size"],
            per_device_eval_batch_size=train["eval_batch_size"],
            learning_rate=train["lr"],
            weight_decay=train["weight_decay"],
            warmup_steps=int(train["warmup_ratio"] * budget["max_steps"]),  # the suite's schedule rounds down too
            lr_scheduler_type="linear",
            max_grad_norm=1.0,
            eval_strategy="steps",
            eval_steps=budget["eval_every_steps"],
            save_strategy="no",
            logging_strategy="no",
            report_to="none",
            disable_tqdm=True,
            bf16=torch.cuda.is_available(),  # the suite's precision: bf16-mixed on a GPU, 32-bit on the CPU
            seed=spec["seed"],
        )
        trainer = Trainer(
            model=model,
            args=arguments,
            train_dataset=data["train"],
            eval_dataset={"dev": data["dev"], "test": data["test"]},
            data_collator=DataCollatorWithPadding(tokenizer),
            compute_metrics=metrics,
            callbacks=list(callbacks),
        )
        trainer.train()
        cell_seconds = time.time() - started
        best = best_evaluation(trainer.state.log_history, task.metrics, spec["main_metric"])
    Path(out_path).write_text(
        json.dumps(
            {
                "cell_s": round(cell_seconds, 2),
                "step": best["step"],
                "metrics": {split: best[split] for split in ("dev", "test")},
                "train_size": len(data["train"]),
                "weights_dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
            }
        )
    )


if __name__ == "__main__":
    main()
