"""An evaluation decodes its batches once it ends (no host wait per batch): the same scores and predictions as
decoding every batch as it comes."""

from collections import defaultdict

import pytest
import torch

from knowledge_lm.core.backbones import load_backbone
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import METHODS
from knowledge_lm.methods.task_model import TaskModel
from knowledge_lm.methods.trainer import build_trainer
from knowledge_lm.run.config import CUDA_GRAPH_MIN_STEPS, TrainConfig
from knowledge_lm.run.trainer import build_model_and_data

FILES = {
    "rte": ("index\tsentence1\tsentence2\tlabel\n", lambda i: ("entailment", "not_entailment")[i % 2]),
    "stsb": ("index\tsentence1\tsentence2\tscore\n", lambda i: f"{(i * 7) % 50 / 10:.1f}"),
}


def glue_folder(root, task: str):
    header, label = FILES[task]
    folder = root / f"glue_{task}"
    folder.mkdir(parents=True)
    rows = [f"{i}\tA man number {i} sleeps here.\tSomeone {i % 5} sleeps.\t{label(i)}\n" for i in range(50)]
    (folder / "train.tsv").write_text(header + "".join(rows))
    (folder / "dev.tsv").write_text(header + "".join(rows[:21]))
    return root


@pytest.mark.parametrize("task", sorted(FILES))
def test_deferred_decoding_equals_decoding_every_batch(tmp_path, task):
    encoder, tokenizer, _ = load_backbone("tiny", seed=0)
    train = TrainConfig(eval_batch_size=4, max_length=32)
    model, data, _, _ = build_model_and_data(
        "baseline", encoder, tokenizer, "glue", train, task=task, data_dir=glue_folder(tmp_path / "data", task)
    )
    build_trainer(1, eval_every_steps=1).validate(model, datamodule=data)
    [evaluation] = model.evaluations

    model.eval()
    with torch.no_grad():
        for split in data.eval_split_names:
            predicted, gold = [], []
            for batch in data.evaluation_loader(split):  # several batches: 4 rows each
                logits, _ = model(batch)
                predicted += model.kind.decode(logits, batch)
                gold += model.kind.gold(batch)
            assert model.best_outputs[split]["gold"] == gold
            assert model.best_outputs[split]["predicted"] == pytest.approx(predicted, abs=1e-6)
            expected = model.kind.score(predicted, gold)
            assert evaluation["metrics"][split] == pytest.approx(expected, abs=1e-6, nan_ok=True)


def test_evaluation_keeps_copies_of_the_features_not_views_of_the_model_s_output():
    """Under CUDA graphs a layer's output buffer is overwritten by the next replay: what an evaluation keeps until
    its end must not share memory with the forward's output (GLUE cells failed at their first evaluation)."""
    output = torch.randn(4, 8)
    features = output[:, :3]  # pooled as a view, like a [CLS] slice of the last layer's output

    class Evaluated:
        _outputs, _features = defaultdict(list), defaultdict(list)

        def __call__(self, batch):
            return torch.randn(4, 2), features

    model = Evaluated()
    TaskModel.validation_step(model, {"labels": torch.zeros(4, dtype=torch.long)}, 0)
    [kept] = model._features[0]
    assert torch.equal(kept, features)
    assert kept.untyped_storage().data_ptr() != output.untyped_storage().data_ptr()


def test_batches_padded_to_a_multiple_give_the_same_logits(tmp_path):
    """``pad_to_multiple_of`` (few shapes under CUDA graphs) pads with masked tokens only: every eval batch is a
    multiple of 16 long and the model's logits equal those of batches padded to their longest text."""
    data_dir = glue_folder(tmp_path / "data", "rte")
    logits = {}
    for multiple in (0, 16):
        encoder, tokenizer, _ = load_backbone("tiny", seed=0)
        train = TrainConfig(eval_batch_size=4, max_length=32, pad_to_multiple_of=multiple)
        torch.manual_seed(0)  # the same task head
        built = build_model_and_data("baseline", encoder, tokenizer, "glue", train, task="rte", data_dir=data_dir)
        model, data = built[:2]
        model.eval()
        batches = list(data.evaluation_loader("test"))
        if multiple:
            assert all(batch["input_ids"].shape[-1] % multiple == 0 for batch in batches)
        with torch.no_grad():
            logits[multiple] = torch.cat([model(batch)[0] for batch in batches])
    assert torch.allclose(logits[0], logits[16], atol=1e-5)


def test_reduce_overhead_pads_to_a_multiple_unless_told_otherwise():
    assert TrainConfig(compile=True, compile_mode="reduce-overhead").padding_multiple == 16
    assert TrainConfig(compile=True, compile_mode="reduce-overhead", pad_to_multiple_of=8).padding_multiple == 8
    assert TrainConfig(compile=True).padding_multiple == 0 and TrainConfig().padding_multiple == 0


def test_compile_auto_gives_cuda_graphs_only_to_long_cells_of_methods_measured_faster_on_one_gpu():
    auto = TrainConfig.from_dict({"compile": "auto"})
    assert auto == TrainConfig()
    baseline, knowbert = METHODS.get("baseline"), METHODS.get("knowbert+si+sr")
    captured, compiled = CUDA_GRAPH_MIN_STEPS["cuda-graphs"], CUDA_GRAPH_MIN_STEPS["reduce-overhead"]
    graphs = auto.resolved(baseline, on_gpu=True, steps=captured)
    assert (graphs.compile, graphs.compile_mode, graphs.padding_multiple) == (True, "cuda-graphs", 16)
    layers = auto.resolved(knowbert, on_gpu=True, steps=compiled)
    assert (layers.compile, layers.compile_mode, layers.padding_multiple) == (True, "reduce-overhead", 16)
    assert auto.resolved(knowbert, on_gpu=True, steps=compiled - 1).compile is False  # compiling costs more
    assert auto.resolved(baseline, on_gpu=True, steps=captured - 1).compile is False  # capture costs more than it saves
    assert auto.resolved(METHODS.get("kam"), on_gpu=True, steps=compiled).compile is False  # slower with graphs
    assert auto.resolved(baseline, on_gpu=False, steps=compiled).compile is False
    assert auto.resolved(baseline, on_gpu=True, steps=compiled, model_type="mpnet").compile is False  # no capture
    assert TrainConfig(devices=2).resolved(baseline, on_gpu=True, steps=compiled).compile is False
    explicit = TrainConfig.from_dict({"compile": "false"})
    assert explicit.resolved(baseline, on_gpu=True, steps=compiled) is explicit and explicit.compile is False
    with pytest.raises(KlmError, match="compile='sometimes' is not a boolean or auto"):
        TrainConfig.from_dict({"compile": "sometimes"})


def test_encoder_graphs_are_for_the_plain_encoder_and_leave_cpu_steps_eager():
    from knowledge_lm.data.glue import SPECS

    encoder, _, _ = load_backbone("tiny", seed=0)
    spec = SPECS["rte"]
    model = METHODS.get("bert+sr")(encoder, spec)
    model.compile_modules("cuda-graphs")
    assert model.encoder_graphs == {} and model.step_graphs is None  # its extra loss: the encoder alone
    batch = {"input_ids": torch.tensor([[101, 7, 102]]), "attention_mask": torch.ones(1, 3, dtype=torch.long)}
    assert model.encode(batch).shape == (1, 3, encoder.config.hidden_size)
    assert model.encoder_graphs == {}  # on the CPU: eager, nothing captured
    assert model.capture_record() == {"captured": "encoder", "shapes": 0}
    mpnet, _, _ = load_backbone("tiny-mpnet", seed=0)
    with pytest.raises(KlmError, match="captures bert encoders, not mpnet's"):  # its mask: a host tensor
        METHODS.get("baseline")(mpnet, spec).compile_modules("cuda-graphs")
    with pytest.raises(KlmError, match="captures the plain encoder, and .* runs its own modules inside it"):
        METHODS.get("kg-text")(encoder, spec).compile_modules("cuda-graphs")


def test_the_baselines_whole_step_is_captured_on_one_gpu_alone_and_its_cpu_steps_stay_eager(tmp_path):
    from knowledge_lm.data.glue import SPECS
    from knowledge_lm.methods.trainer import build_trainer

    encoder, tokenizer, _ = load_backbone("tiny", seed=0)
    model = METHODS.get("baseline")(encoder, SPECS["rte"], total_steps=3)
    model.compile_modules("cuda-graphs")
    assert model.step_graphs == {} and model.encoder_graphs is None
    balanced = METHODS.get("baseline")(encoder, SPECS["rte"])
    balanced.kind.class_weights = torch.ones(2)  # a host tensor the loss moves: the encoder alone
    balanced.compile_modules("cuda-graphs")
    assert balanced.step_graphs is None and balanced.encoder_graphs == {}
    batch = dict(tokenizer(["a cat", "rain today"], padding=True, return_tensors="pt"))
    batch["labels"] = torch.tensor([0, 1])
    loader = torch.utils.data.DataLoader([batch] * 3, batch_size=None, collate_fn=lambda b: b)
    trainer = build_trainer(3, root_dir=tmp_path)
    trainer.fit(model, train_dataloaders=loader)
    # On the CPU no step can be captured: the optimiser is AdamW's usual one, and every step ran through Lightning.
    assert model.step_graphs is None and model.encoder_graphs == {} and trainer.global_step == 3
    assert isinstance(trainer.optimizers[0].param_groups[0]["lr"], float)
    assert not trainer.optimizers[0].defaults["capturable"]


def test_a_closed_gated_loader_yields_nothing_and_draws_the_random_stream_as_a_loader_does():
    from torch.utils.data import DataLoader

    from knowledge_lm.data.base import GatedLoader

    draws = []
    for loader in (DataLoader(range(5)), GatedLoader(range(5), gate=lambda: False)):
        torch.manual_seed(0)
        batches = list(loader)
        draws.append(torch.rand(1).item())
    assert batches == [] and draws[0] == draws[1]  # training after a skipped split sees the same dropout masks
    assert [int(b) for b in GatedLoader(range(3), gate=lambda: True)] == [0, 1, 2]


def test_test_is_scored_only_at_a_new_best_evaluation_and_the_result_is_the_same(tmp_path, monkeypatch):
    """A result reports test at its best evaluation on dev alone: scoring test only where dev sets a new best gives
    the same result (scores, selected step, every dev score) as scoring it at every evaluation."""
    from knowledge_lm.core.results import Cell
    from knowledge_lm.run.cell import run_cell

    def run(folder):
        return run_cell(
            Cell("baseline", "generated", "facts", 1.0, 1, "tiny"),
            TrainConfig(batch_size=8, epochs=3, min_steps=1, evaluations=6, max_length=32),
            results_dir=tmp_path / folder / "results",
            runs_dir=tmp_path / folder / "runs",
            dataset_options={"train_size": 40, "dev_size": 10, "test_size": 30},
            progress=False,
        )

    gated = run("gated")
    with monkeypatch.context() as always:
        always.setattr(TaskModel, "evaluates_every_split", lambda self: True)
        every = run("every")
    assert all("test" in e["metrics"] for e in every["evaluations"])
    assert gated["metrics"].keys() == every["metrics"].keys() and gated["selection"] == every["selection"]
    for split, scores in every["metrics"].items():
        assert gated["metrics"][split] == pytest.approx(scores)
    assert [e["metrics"]["dev"] for e in gated["evaluations"]] == [e["metrics"]["dev"] for e in every["evaluations"]]
    best = None
    for evaluation in gated["evaluations"]:  # test where dev beat every earlier evaluation, nowhere else
        dev = evaluation["metrics"]["dev"]["accuracy"]
        assert ("test" in evaluation["metrics"]) == (best is None or dev > best)
        best = dev if best is None else max(best, dev)


def test_a_fused_optimizer_has_its_gradients_clipped_by_norm_as_lightning_would():
    from knowledge_lm.data.glue import SPECS

    encoder, _, _ = load_backbone("tiny", seed=0)
    model = METHODS.get("baseline")(encoder, SPECS["rte"])
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)
    for parameter in model.parameters():
        parameter.grad = torch.full_like(parameter, 3.0)
    model.configure_gradient_clipping(optimizer, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters()]))
    assert norm.item() == pytest.approx(1.0, rel=1e-3)


def test_a_train_worker_collates_the_same_batches_in_the_same_order(tmp_path):
    """Under CUDA graphs the train split is collated in a worker (``train_workers``): what it yields, and how the
    global random stream advances, are as without one."""
    from knowledge_lm.data.glue import GlueDataModule

    _, tokenizer, _ = load_backbone("tiny", seed=0)
    data = GlueDataModule(task="rte", tokenizer=tokenizer, data_dir=glue_folder(tmp_path, "rte"), batch_size=8)
    data.setup()
    epochs = {}
    for workers in (0, 1):
        data.train_workers = workers
        torch.manual_seed(0)
        loader = data.train_dataloader()
        epochs[workers] = [[batch["input_ids"] for batch in loader] for _ in range(2)] + [torch.rand(1)]
    assert len(epochs[0][0]) == len(epochs[1][0]) > 1
    for mine, theirs in zip(epochs[1][:2], epochs[0][:2]):
        assert all(torch.equal(a, b) for a, b in zip(mine, theirs))
    assert torch.equal(epochs[1][2], epochs[0][2])
