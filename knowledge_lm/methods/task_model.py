"""The LightningModule every method is: ``encode`` → hidden states, the task kind's head, its loss plus extra losses.

A method subclasses :class:`TaskModel`, overrides ``encode`` (and ``extra_losses`` where it adds one),
declares its options as a dataclass extending :class:`MethodOptions` (its ``options_class``) and registers
itself. The head, loss, decoding and scoring come from the task's kind
(``knowledge_lm/tasks``), so every method runs on every task. Training, evaluation on every labelled
split, model selection on dev and the optimiser are the same for all methods, so they live here once.
"""

import warnings
from collections import defaultdict
from dataclasses import dataclass, fields

import pytorch_lightning as pl
import torch
from lightning_utilities.core.apply_func import apply_to_collection

from knowledge_lm.core.backbones import CAPTURED_MODEL_TYPES, encoder_layers
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.options import coerce_fields, option_kinds
from knowledge_lm.core.registry import TASK_KINDS
from knowledge_lm.data.base import SELECTION_SPLIT
from knowledge_lm.methods.optim import adamw_with_warmup
from knowledge_lm.tasks.base import ENCODER_INPUTS


def to_host(data):
    """``data`` (tensors, possibly nested in lists, dicts or dataclasses) with every tensor on the CPU, copied from a
    GPU without waiting for it: read them only after synchronising the device."""
    return apply_to_collection(data, torch.Tensor, lambda tensor: tensor.to("cpu", non_blocking=True))


def compiled(function, mode: str = "default"):
    """``function`` under ``torch.compile`` in ``mode`` (a training setting ``compile_mode``), shapes dynamic: each
    batch is padded to its own longest text and span count."""
    return torch.compile(function, dynamic=True, mode=None if mode == "default" else mode)


class EncoderCall(torch.nn.Module):
    """The encoder's last hidden states from its inputs given in the order ``names``: what one pair of CUDA graphs
    (forward and backward) captures, one per padded batch shape (``TaskModel.encoder_states``)."""

    def __init__(self, encoder, names: tuple[str, ...]):
        super().__init__()
        self.encoder, self.names = encoder, names

    def forward(self, *tensors):
        return self.encoder(**dict(zip(self.names, tensors))).last_hidden_state


def capture_autocast() -> torch.autocast:
    """The training step's autocast as it stands, for a forward captured as a CUDA graph: without its weight cache,
    since each replay must cast the weights it reads as they are after the last optimiser step."""
    return torch.autocast(
        "cuda",
        dtype=torch.get_autocast_dtype("cuda"),
        enabled=torch.is_autocast_enabled("cuda"),
        cache_enabled=False,
    )


def captured_encoder(encoder, inputs: dict) -> EncoderCall:
    """An ``EncoderCall`` of ``encoder`` whose forward and backward replay as CUDA graphs captured for the shapes of
    ``inputs`` (``torch.cuda.make_graphed_callables``: a few warm-up steps, no compilation)."""
    call = EncoderCall(encoder, tuple(inputs))
    with capture_autocast():
        # allow_unused_input: a backbone's pooler is loaded but never read. One warm-up step: a cell captures a pair
        # of graphs for every padded length it meets, and each warm-up step is a step's time.
        torch.cuda.make_graphed_callables(
            call, tuple(t.clone() for t in inputs.values()), num_warmup_iters=1, allow_unused_input=True
        )
    return call


class CapturedStep:
    """A whole training step (gradients zeroed, the forward, the loss, its backward, the clipping and the optimiser's
    update) captured as one CUDA graph for one padded batch shape; ``replay`` copies a batch of that shape into the
    graph's inputs and runs it, returning the graph's loss (overwritten by the next replay)."""

    def __init__(self, model: "TaskModel", optimizer: torch.optim.Optimizer, batch: dict, clip: float | None):
        self.inputs = {name: tensor.clone() for name, tensor in batch.items()}
        # The parameters the eager first step gave gradients (not a pooler the head never reads): the graph zeroes
        # those gradients, accumulates into them, clips and updates them, as that step did.
        parameters = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        # Held here: the graph writes and reads these very tensors, whatever later becomes of each ``p.grad``.
        self.gradients = [p.grad for p in parameters]
        device = parameters[0].device
        for group in optimizer.param_groups:  # a resumed optimiser's rates come back from its checkpoint on the host
            if not (isinstance(group["lr"], torch.Tensor) and group["lr"].device == device):
                group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
        # The forward under the step's autocast; the backward and the update outside it, as in PyTorch's
        # whole-network capture.
        forward_autocast = capture_autocast()
        # Warm-up (cuBLAS handles, autocast's kernels) on a side stream: a forward and backward, no update.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.autocast("cuda", enabled=False):
            with forward_autocast:
                loss = model.step_loss(self.inputs)
            loss.backward()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph), torch.autocast("cuda", enabled=False):
            optimizer.zero_grad(set_to_none=False)
            with forward_autocast:
                self.loss = model.step_loss(self.inputs)
            self.loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(parameters, clip, foreach=True)
            optimizer.step()

    def replay(self, batch: dict) -> torch.Tensor:
        for name, tensor in self.inputs.items():
            tensor.copy_(batch[name], non_blocking=True)
        self.graph.replay()
        return self.loss


def trainer_of(module: pl.LightningModule) -> pl.Trainer | None:
    """The trainer ``module`` is attached to, None where it is not (Lightning's ``trainer`` raises then)."""
    try:
        return module.trainer
    except RuntimeError:
        return None


def logs_this_step(module: pl.LightningModule) -> bool:
    """Whether a training step logs its losses: every ``log_every_n_steps`` steps, when a logger would write
    them. Each call costs host time on a launch-bound step, and a progress bar showing the value syncs the device."""
    trainer = trainer_of(module)
    return trainer is None or (module.global_step + 1) % trainer.log_every_n_steps == 0


@dataclass
class MethodOptions:
    """The options every method takes (a sweep's ``method_options``): a method's own options extend this dataclass,
    which is the one place saying what they are, their types and defaults.

    ``new_module_lr``: the learning rate of the modules a method's ``new_modules`` lists (None: ``lr``).
    ``zero_knowledge``: the zeroed-knowledge control (a sweep variant): a knowledge method runs as usual on all-zero
    knowledge (KnowBERT's entity vectors, KAM's maps, kg-text's facts); the baseline has none to zero."""

    new_module_lr: float | None = None
    zero_knowledge: bool = False

    @classmethod
    def from_dict(cls, values: dict, where: str) -> "MethodOptions":
        """The options ``values`` (name → value), each coerced to its declared type; an unknown name, a value of
        the wrong type or a value the method refuses is a one-line KlmError starting with ``where``."""
        known = [option.name for option in fields(cls) if option.init]
        unknown = [name for name in values if name not in known]
        if unknown:
            raise KlmError(
                f"{where}: unknown option{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(repr(name) for name in unknown)}; known: {', '.join(known)}"
            )

        def refused(name, value, expected) -> str:
            return f"{where}: option {name}={value!r} is not {option_kinds(expected)}"

        checked = coerce_fields(cls, values, refused)
        try:
            return cls(**checked)
        except KlmError as error:
            raise KlmError(f"{where}: {error}") from None


class TaskModel(pl.LightningModule):
    """The encoder, the task kind's head and the shared training loop. ``eval_splits`` to ``total_steps`` are the
    training settings of the cell; every other keyword is a method option, read into ``options`` (an instance of
    the class's ``options_class``)."""

    options_class: type[MethodOptions] = MethodOptions
    # How training setting compile=auto replays this method's long cells as CUDA graphs on a GPU (a compile_mode:
    # "cuda-graphs" captures the training step or the plain encoder, "reduce-overhead" compiles each layer), None for
    # never: set only for methods measured equal in metrics and faster that way (leaderboards/speed.md).
    cuda_graphs: str | None = None
    # Options the method accepts (every method's) but has no use for: a cell's identity leaves them out
    # (``knowledge_lm.run.identity``), so a config that sets them for every method keeps this method's cells.
    inert_options: tuple[str, ...] = ()

    def __init__(
        self,
        encoder,
        spec,
        *,
        eval_splits=(SELECTION_SPLIT,),
        lr: float = 5e-5,
        weight_decay: float = 0.01,
        warmup_ratio: float = 0.1,
        dropout: float = 0.1,
        total_steps: int = 1000,
        **method_options,
    ):
        super().__init__()
        self.options = self.options_class.from_dict(method_options, where=f"{type(self).__name__} options")
        # from_pretrained returns the encoder in eval mode, and Lightning keeps submodules' modes: without
        # this, fine-tuning would run with dropout off.
        self.encoder = encoder.train()
        self.spec = spec
        self.kind = TASK_KINDS.get(spec.kind)(spec)
        self.eval_splits = list(eval_splits)
        self.lr, self.weight_decay, self.warmup_ratio, self.total_steps = lr, weight_decay, warmup_ratio, total_steps
        self.dropout = dropout
        self.head = self.kind.build_head(encoder.config.hidden_size, dropout)
        self.evaluations: list[dict] = []
        self.cuda_graph_steps = False  # compile_modules(mode="reduce-overhead")
        self.encoder_graphs: dict | None = None  # compile_modules(mode="cuda-graphs"): padded shape → EncoderCall
        self.step_graphs: dict | None = None  # compile_modules(mode="cuda-graphs"): padded shape → CapturedStep
        self.stepped_eagerly = False  # whether this process ran an optimiser step outside the captured ones
        self.best_outputs: dict[str, dict] = {}  # split → decoded predictions and gold of the best evaluation
        self._outputs: defaultdict[int, list[tuple]] = defaultdict(list)  # split index → (logits, batch) on the host
        self._features: defaultdict[int, list[torch.Tensor]] = defaultdict(list)
        self._scored: dict[int, tuple[dict, dict]] = {}  # split index → ``scored``, until the evaluation ends

    # -- what methods override -------------------------------------------------------------
    def encode(self, batch) -> torch.Tensor:
        """The last layer's hidden states (b × n × d) that the task head reads."""
        return self.encoder_states({k: batch[k] for k in ENCODER_INPUTS if k in batch})

    def extra_losses(self, batch, features: torch.Tensor) -> dict[str, torch.Tensor]:
        """Losses added to the task loss; ``features`` are the pooled vectors the head classifies."""
        return {}

    def new_modules(self) -> list[torch.nn.Module]:
        """The method's randomly initialised modules, trained at ``new_module_lr`` where that option is set
        (the task head is not among them: it trains at ``lr`` in every method, the baseline's too)."""
        return []

    def method_stats(self) -> dict:
        """What the method measured about its own run (e.g. the share of links SI kept), recorded with the result."""
        return {}

    def knowledge_fields(self, data) -> dict[str, list]:
        """Fields the method derives for every knowledge features row of the set-up data module ``data``
        (name → one value per row of ``data.knowledge_features``, in their order); ``wire_knowledge`` writes them
        into the rows before the loaders start. The method reads ``data`` and never changes it."""
        return {}

    def knowledge_collate(self, data):
        """The function the data loader turns a batch's knowledge features rows into the method's tensors with,
        ``(rows, sequence_length) → tensors`` (``TaskDataModule.knowledge_batch``), after reading what the method
        needs from the set-up data module ``data`` (a KG, an entity table); None: the batch keeps the rows.
        ``wire_knowledge`` hands it to the data module; the method reads ``data`` and never changes it."""
        return None

    def compiled_modules(self) -> list[torch.nn.Module]:
        """What ``compile_modules`` compiles: the backbone's transformer layers; methods add their own modules."""
        return list(encoder_layers(self.encoder))

    # -- shared training and evaluation ------------------------------------------------------
    def encoder_states(self, inputs: dict) -> torch.Tensor:
        """The encoder's last hidden states for ``inputs``; in a training step under compile_mode "cuda-graphs" on a
        GPU, from the CUDA graphs of the inputs' shapes, captured the first time the shapes come."""
        if self.encoder_graphs is None or self.device.type != "cuda" or not (self.training and torch.is_grad_enabled()):
            return self.encoder(**inputs).last_hidden_state
        shapes = tuple((name, tuple(tensor.shape)) for name, tensor in inputs.items())
        if shapes not in self.encoder_graphs:
            self.encoder_graphs[shapes] = captured_encoder(self.encoder, inputs)
        return self.encoder_graphs[shapes](*inputs.values())

    def compile_modules(self, mode: str = "default"):
        """``torch.compile`` the forward of each of ``compiled_modules`` (training settings ``compile`` and
        ``compile_mode``); in mode "cuda-graphs", compile nothing and replay as CUDA graphs either the whole training
        step, where the step is the task's loss alone (``step_captures``, ``CapturedStep``), or else the encoder's
        training forward and backward (``encoder_states``), for a method that runs the plain encoder (its
        ``encode`` is ``TaskModel``'s).

        Per module rather than the whole model: hooks (KnowBERT's KAR after layer L) and per-batch Python
        objects (KAM's shared map state) stay outside the compiled code, and every layer reuses one graph.
        Shapes are dynamic (each batch is padded to its own longest text and span count); under
        "reduce-overhead" each shape gets its own CUDA graph, and every step marks a new graph generation."""
        if mode == "cuda-graphs":
            if type(self).encode is not TaskModel.encode:
                raise KlmError(
                    f"compile_mode cuda-graphs captures the plain encoder, and {type(self).__name__} runs its own "
                    "modules inside it; use compile_mode reduce-overhead"
                )
            if self.encoder.config.model_type not in CAPTURED_MODEL_TYPES:
                raise KlmError(
                    f"compile_mode cuda-graphs captures {', '.join(CAPTURED_MODEL_TYPES)} encoders, not "
                    f"{self.encoder.config.model_type}'s; use compile_mode reduce-overhead or compile=false"
                )
            if self.step_captures():
                self.step_graphs = {}
                # A replayed step returns None to Lightning on purpose (``training_step``), each step.
                warnings.filterwarnings("ignore", message="`training_step` returned `None`")
            else:
                self.encoder_graphs = {}
            return
        self.cuda_graph_steps = mode == "reduce-overhead"
        for module in self.compiled_modules():
            module.forward = compiled(module.forward, mode)

    def step_captures(self) -> bool:
        """Whether compile_mode "cuda-graphs" captures this model's whole training step rather than its encoder: its
        step is the task's loss alone (no extra losses, no steps of its own), of a task kind whose step captures
        (``TaskKind.captures_step``), without class weights."""
        own = (type(self).losses, type(self).extra_losses, type(self).training_step)
        shared = (TaskModel.losses, TaskModel.extra_losses, TaskModel.training_step)
        return own == shared and self.kind.captures_step and self.kind.class_weights is None

    def capture_record(self) -> dict | None:
        """What this run replayed as CUDA graphs under compile_mode "cuda-graphs" (recorded with its result): the
        whole training step or the encoder, and how many padded batch shapes were captured; None for neither."""
        for what, graphs in (("training step", self.step_graphs), ("encoder", self.encoder_graphs)):
            if graphs is not None:
                return {"captured": what, "shapes": len(graphs)}
        return None

    def replays_steps(self) -> bool:
        """Whether this training step replays a captured whole step: under step capture, after this process's first
        step, which runs eagerly and makes what the captured steps reuse (the gradients, the optimiser's state)."""
        return self.step_graphs is not None and self.stepped_eagerly

    def step_loss(self, batch) -> torch.Tensor:
        """A training batch's loss, the sum of ``losses``: what a training step minimises."""
        return sum(self.losses(batch).values())

    def on_train_batch_start(self, batch, batch_idx):
        # CUDA-graph outputs of one step are overwritten by the next replay; tell the graph trees where steps begin.
        if self.cuda_graph_steps:
            torch.compiler.cudagraph_mark_step_begin()

    def on_validation_batch_start(self, batch, batch_idx, dataloader_idx=0):
        if self.cuda_graph_steps:
            torch.compiler.cudagraph_mark_step_begin()

    def forward(self, batch):
        return self.head(self.encode(batch), batch)

    def losses(self, batch) -> dict[str, torch.Tensor]:
        """A training batch's losses: the task's, then the method's extra ones; the step minimises their sum."""
        logits, features = self(batch)
        return {"task": self.kind.loss(logits, batch), **self.extra_losses(batch, features)}

    def training_step(self, batch, batch_idx):
        replayed = self.replays_steps()
        losses = {"task": self.replayed_step(batch)} if replayed else self.losses(batch)
        loss = sum(losses.values())
        if logs_this_step(self):
            size = len(batch["labels"])
            # A replayed step's loss is a copy: the next replay overwrites the graph's.
            logged = {name: value.detach().clone() if replayed else value for name, value in losses.items()}
            self.log_dict({f"train/{name}": value for name, value in logged.items()}, batch_size=size)
            self.log("loss", sum(logged.values()), prog_bar=True, batch_size=size, logger=False)
        return None if replayed else loss  # replayed: nothing for Lightning to back-propagate, clip or update

    def replayed_step(self, batch) -> torch.Tensor:
        """The loss of a training step on ``batch`` replayed from the captured step of its shapes (captured the first
        time they come): its update is done (``step_captures``: the step is the task's loss alone)."""
        shapes = tuple((name, tuple(tensor.shape)) for name, tensor in batch.items())
        if shapes not in self.step_graphs:
            optimizer, clip = self.trainer.optimizers[0], self.trainer.gradient_clip_val
            self.step_graphs[shapes] = CapturedStep(self, optimizer, batch, clip)
        return self.step_graphs[shapes].replay(batch)

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        logits, features = self(batch)
        # Copied to the host without waiting (into pinned memory) and decoded once the evaluation ends: decoding
        # here (``.tolist()``) would make the host wait for every batch before it could launch the next.
        self._outputs[dataloader_idx].append(to_host((logits.detach(), batch)))
        if features.dim() == 2:  # one vector per example: the split's feature matrix, for its spectrum
            # A copy: under CUDA graphs (compile_mode reduce-overhead) the features view a graph's output buffer,
            # which the next replay overwrites before the evaluation ends.
            self._features[dataloader_idx].append(features.detach().to(torch.float32, copy=True))

    def decoded(self, index: int) -> tuple[list, list]:
        """``(predictions, gold)`` of the evaluated split ``index``, from its batches copied to the host."""
        predicted, gold = [], []
        for logits, batch in self._outputs[index]:
            predicted.extend(self.kind.decode(logits, batch))
            gold.extend(self.kind.gold(batch))
        return predicted, gold

    def scored(self, index: int) -> tuple[dict, dict] | None:
        """``(outputs, scores)`` of the evaluated split ``index``: every device's decoded predictions and gold, and
        their scores; None where the split has no batches. Kept until the evaluation ends: dev is scored as the
        splits after it start (``evaluates_every_split``) and not again at the end."""
        if index not in self._scored:
            predicted, gold = self.decoded(index)
            if not predicted:
                return None
            outputs = {"predicted": self.gather(predicted), "gold": self.gather(gold)}
            self._scored[index] = (outputs, self.kind.score(outputs["predicted"], outputs["gold"]))
        return self._scored[index]

    def on_validation_epoch_end(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # the evaluation's last wait: its copies to the host are done
        scores, outputs = {}, {}
        for index, split in enumerate(self.eval_splits):
            found = self.scored(index)
            if found:
                outputs[split], scores[split] = found
                if self._features.get(index):
                    outputs[split]["singular_values"] = self.spectrum(torch.cat(self._features[index]))
        self._outputs.clear()
        self._features.clear()
        self._scored.clear()
        if self.trainer.sanity_checking or SELECTION_SPLIT not in scores:
            return
        self.evaluations.append({"step": self.global_step, "epoch": self.current_epoch, "metrics": scores})
        if self.best_evaluation() is self.evaluations[-1]:
            self.best_outputs = outputs
        # Every rank holds the gathered scores: nothing to synchronise.
        self.log("selection", scores[SELECTION_SPLIT][self.spec.main_metric], prog_bar=True, logger=False)
        dev = {f"{SELECTION_SPLIT}/{metric}": value for metric, value in scores[SELECTION_SPLIT].items()}
        self.log_dict(dev, sync_dist=False)

    def spectrum(self, features: torch.Tensor) -> list[float]:
        """The singular values (descending) of the split's N × d matrix of head features, every device's rows
        (the SI+SR paper's Fig. 3 and 5b draw them with and without SR)."""
        if self.trainer.world_size > 1:
            features = self.all_gather(features).flatten(0, 1)
        return [float(f"{value:.6g}") for value in torch.linalg.svdvals(features).tolist()]

    def gather(self, items: list) -> list:
        """Every device's predictions, in rank order (Lightning's distributed sampler pads shards equally)."""
        if self.trainer.world_size == 1:
            return items
        shards = [None] * self.trainer.world_size
        torch.distributed.all_gather_object(shards, items)
        return [item for shard in shards for item in shard]

    def best_evaluation(self, evaluations: list[dict] | None = None) -> dict | None:
        """The evaluation of ``evaluations`` (default: the model's) with the best dev main metric (the earliest on
        ties)."""
        evaluations = self.evaluations if evaluations is None else evaluations
        if not evaluations:
            return None
        return max(evaluations, key=lambda e: (e["metrics"][SELECTION_SPLIT][self.spec.main_metric], -e["step"]))

    def evaluates_every_split(self) -> bool:
        """Whether the evaluation under way scores the splits after dev: only where its dev score makes it the best
        evaluation so far. A result reports the other splits at its best evaluation alone, which is then the best
        so far, so the others skip them (for MNLI, 20k test examples against dev's 1k). Asked as the first split
        after dev starts (``GatedLoader``): dev's batches are scored now, one wait for their copies to the host."""
        index = self.eval_splits.index(SELECTION_SPLIT) if SELECTION_SPLIT in self.eval_splits else None
        if self.trainer.sanity_checking or index is None or not self._outputs.get(index):
            return True
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        found = self.scored(index)
        if found is None:
            return True
        candidate = {"step": self.global_step, "metrics": {SELECTION_SPLIT: found[1]}}
        return self.best_evaluation(self.evaluations + [candidate]) is candidate

    def on_save_checkpoint(self, checkpoint):
        checkpoint["evaluations"] = self.evaluations
        checkpoint["best_outputs"] = self.best_outputs

    def on_load_checkpoint(self, checkpoint):
        self.evaluations = checkpoint.get("evaluations", [])
        self.best_outputs = checkpoint.get("best_outputs", {})

    def configure_optimizers(self):
        trainer = trainer_of(self)
        # Fused under compile_mode cuda-graphs, whose step is bound by launches; not under a gradient scaler
        # (16-mixed), whose unscaling a fused optimizer does itself, after the clipping.
        scaled = trainer is not None and str(trainer.precision).startswith("16")
        one_step_a_batch = trainer is not None and trainer.world_size == 1 and trainer.accumulate_grad_batches == 1
        if self.step_graphs is not None and (scaled or not one_step_a_batch or self.device.type != "cuda"):
            # A gradient scaler, DDP's all-reduce or accumulation would act between the step's parts: capture the
            # encoder alone.
            self.step_graphs, self.encoder_graphs = None, {}
        captured = self.encoder_graphs is not None or self.step_graphs is not None
        return adamw_with_warmup(
            self,
            self.lr,
            self.weight_decay,
            self.warmup_ratio,
            self.total_steps,
            new_modules=self.new_modules(),
            new_module_lr=self.options.new_module_lr,
            fused=captured and self.device.type == "cuda" and not scaled,
            capturable=self.step_graphs is not None,
        )

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        if self.replays_steps():
            optimizer_closure()  # the training step replays the captured update; a second one must not follow
            return
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        self.stepped_eagerly = True

    def on_validation_model_zero_grad(self):
        # Lightning releases the gradients before an evaluation; captured steps write into those tensors.
        if self.step_graphs is None:
            super().on_validation_model_zero_grad()

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        if not self.replays_steps():  # a captured step zeroes the gradients it accumulates
            super().optimizer_zero_grad(epoch, batch_idx, optimizer)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        # Lightning refuses to clip for a fused optimizer (for fear of a gradient scaler, which this one has not:
        # ``configure_optimizers``); the gradients are clipped by their norm as Lightning would.
        if gradient_clip_val and optimizer.defaults.get("fused"):
            # The optimiser's own parameter list: walking the modules for it each step costs a launch-bound step
            # about a millisecond.
            parameters = [p for group in optimizer.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(parameters, gradient_clip_val, foreach=True)
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
