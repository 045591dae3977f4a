"""How a run is built, the one way: a method's model with its set-up data module (cells and ``klm speed``), and a
cell's checkpoint callback; the Lightning ``Trainer`` itself is ``knowledge_lm.methods.trainer``'s."""

import pytorch_lightning as pl
import torch

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import DATASETS, METHODS
from knowledge_lm.data.base import StaticPadding
from knowledge_lm.run.config import TRAIN_WORKER_MIN_BATCHES, TrainConfig


class CellCheckpoint(pl.callbacks.ModelCheckpoint):
    """A cell's ``last.ckpt`` (``ModelCheckpoint(save_last=True, save_top_k=0)``'s), saved on its schedule and also
    when the cell is interrupted (Ctrl-C: Lightning's ``KeyboardInterrupt``), so that it resumes from there; not when
    training ends, since the result is written next and the run directory emptied."""

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning's saves weights and optimiser state (~0.3 GB for MiniLM) that clear_run_dir deletes a second later.
        pass

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, KeyboardInterrupt) and 0 < trainer.global_step != self._last_global_step_saved:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))


def method_dataset_options(method: str, dataset_options: dict | None, dataset: str | None = None) -> dict:
    """The data module's options for ``method``: a knowledge method's data joins the prepared features (those of
    the default knowledge options unless ``dataset_options`` names others); a method that reads no knowledge gets
    no knowledge options (a variant's are for its knowledge methods, as a cell's identity counts them). On a
    dataset whose labels are KG facts the knowledge options name ``keep_answers`` (False by default), so a result
    records whether its KG held the answers (results from before the answers were removed record no such option)."""
    options = dict(dataset_options or {})
    if not METHODS.entry(method).needs_knowledge:
        options.pop("knowledge", None)
    else:
        options["knowledge"] = dict(options.get("knowledge") or {})
        if dataset is not None and DATASETS.entry(dataset).labels_are_kg_facts:
            options["knowledge"].setdefault("keep_answers", False)
    return options


def balanced_class_weights(labels: list[int], num_labels: int) -> torch.Tensor:
    """One weight per label, ``len(labels) / (num_labels × count)`` (scikit-learn's "balanced"): the weighted
    cross-entropy of a constant predictor is the same whichever class it predicts. A label absent from ``labels``
    gets weight 0 (no example of it is ever weighted)."""
    counts = torch.bincount(torch.tensor(labels, dtype=torch.long), minlength=num_labels).double()
    weights = torch.where(counts > 0, len(labels) / (num_labels * counts.clamp(min=1)), torch.zeros_like(counts))
    return weights.float()


def wire_knowledge(model, data) -> None:
    """Join ``model``'s knowledge hooks to the set-up data module ``data``: the fields the method derives for
    each knowledge features row (``knowledge_fields``) written into the rows, and its collate function
    (``knowledge_collate``) handed to the loaders. The one place a data module is changed for a method."""
    for name, values in model.knowledge_fields(data).items():
        for row, value in zip(data.knowledge_features, values, strict=True):
            row[name] = value
    data.knowledge_batch = model.knowledge_collate(data)


def build_model_and_data(
    method: str,
    encoder,
    tokenizer,
    dataset: str,
    train: TrainConfig,
    *,
    task: str | None = None,
    fraction: float = 1.0,
    data_dir=None,
    dataset_options: dict | None = None,
    total_steps: int | None = None,
):
    """``(model, data, budget, train)``: ``dataset``'s data module for ``task`` at ``fraction``, set up (a
    knowledge method's joined to its prepared features and wired to the model: ``wire_knowledge``), the step
    budget ``train`` gives its train split, ``method``'s model over ``encoder``, trained for ``total_steps``
    (default: the budget's) and compiled where ``train`` says, and ``train`` as resolved for this cell
    (``compile="auto"`` made concrete)."""
    method_class = METHODS.get(method)
    options = method_dataset_options(method, dataset_options, dataset)
    data = DATASETS.get(dataset)(
        task=task,
        tokenizer=tokenizer,
        data_dir=data_dir,
        fraction=fraction,
        subset_seed=train.subset_seed,
        batch_size=train.per_device_batch_size,  # DDP's sampler gives each process its share
        eval_batch_size=train.eval_batch_size,
        max_length=train.max_length,
        **options,
    )
    if train.class_balance and data.task_spec.kind != "classification":
        raise KlmError(
            f"training setting class_balance applies to single-label classification; {dataset} task {data.task} "
            f"is {data.task_spec.kind}"
        )
    data.setup()
    budget = train.budget(data.train_size)
    on_gpu, steps = torch.cuda.is_available(), total_steps or budget["max_steps"]
    train = train.resolved(method_class, on_gpu, steps, model_type=encoder.config.model_type)
    if train.padding_multiple:  # after set-up: the encodings and prepared features keep their cache keys
        data.tokenizer = StaticPadding(data.tokenizer, multiple=train.padding_multiple)
    captured = train.compile is True and train.compile_mode == "cuda-graphs"
    if captured and data.train_size >= TRAIN_WORKER_MIN_BATCHES * train.per_device_batch_size:
        data.train_workers = 1  # the captured step leaves the host's time to collating: one worker does it beside
    model = method_class(
        encoder,
        data.task_spec,
        eval_splits=data.eval_split_names,
        lr=train.lr,
        weight_decay=train.weight_decay,
        warmup_ratio=train.warmup_ratio,
        dropout=train.dropout,
        total_steps=total_steps or budget["max_steps"],
        **train.method_options,
    )
    if train.class_balance:
        model.kind.class_weights = balanced_class_weights(data.encoded["train"]["labels"], len(data.task_spec.labels))
    if train.compile:
        # As in a fresh process: a compiled model built before in this process would leave its compiled code
        # and CUDA graphs under guards on objects since freed, counting against dynamo's recompile limit.
        torch._dynamo.reset()
        model.compile_modules(train.compile_mode)
    wire_knowledge(model, data)
    data.evaluation_gate = model.evaluates_every_split
    return model, data, budget, train
