"""Method options: each method's options dataclass, and a sweep's ``method_options`` checked before any cell starts."""

import dataclasses

import pytest

from knowledge_lm.cli import main
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import METHODS
from knowledge_lm.methods.task_model import MethodOptions

SWEEP = """\
dataset: generated
tasks: [facts]
methods: [kam]
fractions: [1.0]
seeds: [1]
backbone: tiny
train:
  method_options: {new_module_lr: 1.0e-3%s}
variants:
  a0: {method_options: {alpha: 0.0}}
  a1: {method_options: {%s}}
"""


def write_sweep(tmp_path, top: str = "", variant: str = "alpha: 0.1"):
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP % (top, variant))
    return path


def klm(capsys, tmp_path, command: str, config, *args) -> tuple[int, list[str]]:
    code = main(
        [
            command,
            "--config",
            str(config),
            "--results-dir",
            str(tmp_path / "results"),
            "--runs-dir",
            str(tmp_path / "runs"),
            *args,
        ]
        + (["--no-leaderboard"] if command == "bench" else [])
    )
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("name", METHODS.names())
def test_every_method_s_options_build_with_defaults(name):
    options_class = METHODS.get(name).options_class
    assert dataclasses.is_dataclass(options_class) and issubclass(options_class, MethodOptions)
    assert options_class.from_dict({}, "test") == options_class()
    assert {"new_module_lr", "zero_knowledge"} <= {option.name for option in dataclasses.fields(options_class)}


def test_variants_take_their_own_defaults():
    assert METHODS.get("kam-no-pmi").options_class().maps == ("entity", "phrase")
    assert METHODS.get("kam-no-conv").options_class().use_conv is False
    assert METHODS.get("kam+si").options_class().entity_source == "links"
    assert {"si_lambda", "sr_weight", "kar_layer"} <= set(vars(METHODS.get("knowbert+si+sr").options_class()))


def test_values_are_coerced_to_their_declared_types():
    options = METHODS.get("kam+si").options_class.from_dict(
        {"alpha": "0.1", "skip": "false", "maps": "entity", "si_k_thresh": "100", "si_seed": None}, "test"
    )
    assert options.alpha == pytest.approx(0.1) and options.skip is False and options.maps == ("entity",)
    assert options.si_k_thresh == pytest.approx(100) and options.si_seed is None
    assert METHODS.get("kam+si").options_class.from_dict({"si_k_thresh": "auto"}, "test").si_k_thresh == "auto"


@pytest.mark.parametrize(
    "method, options, message",
    [
        ("kam", {"alpha": "high"}, "test: option alpha='high' is not a number"),
        ("kam", {"expansion_k": 1.5}, "test: option expansion_k=1.5 is not a whole number"),
        ("kam", {"skip": "maybe"}, "test: option skip='maybe' is not a boolean"),
        ("kam", {"entity_source": "spans"}, "test: option entity_source='spans' is not ner or links"),
        ("kam", {"maps": ["entity", "dependency"]}, "test: unknown map 'dependency'"),
        ("knowbert+si", {"si_k_thresh": "high"}, "test: option si_k_thresh='high' is not a number or auto"),
        ("kg-text", {"fact_tokens": True}, "test: option fact_tokens=True is not a whole number"),
        (
            "baseline",
            {"alpha": 0.1, "skip": True},
            "test: unknown options 'alpha', 'skip'; known: new_module_lr, zero_knowledge",
        ),
    ],
)
def test_a_bad_option_is_one_line(method, options, message):
    with pytest.raises(KlmError) as raised:
        METHODS.get(method).options_class.from_dict(options, "test")
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


def test_a_method_built_with_an_unknown_option_refuses_it():
    from knowledge_lm.core.backbones import load_backbone
    from knowledge_lm.data.generated import GeneratedDataModule

    encoder = load_backbone("tiny", seed=0)[0]
    with pytest.raises(KlmError, match="Baseline options: unknown option 'alpah'"):
        METHODS.get("baseline")(encoder, GeneratedDataModule.spec("facts"), alpah=0.1)


@pytest.mark.parametrize(
    "top, variant, message",
    [
        (
            ", alpah: 0.1",
            "alpha: 0.1",
            "method kam, variant a0: unknown option 'alpah'; known: new_module_lr, zero_knowledge, alpha, skip",
        ),
        ("", "alpah: 0.1", "method kam, variant a1: unknown option 'alpah'; known: new_module_lr"),
        ("", "alpha: high", "method kam, variant a1: option alpha='high' is not a number"),
    ],
)
@pytest.mark.parametrize("command", ["bench", "cell"])
def test_a_bad_option_in_a_sweep_fails_before_any_cell_starts(capsys, tmp_path, command, top, variant, message):
    config = write_sweep(tmp_path, top, variant)
    code, err = klm(capsys, tmp_path, command, config, *(["--variant", "a1"] if command == "cell" else []))
    assert code == 2
    assert len(err) == 1 and err[0].startswith(f"error: {config}: {message}")
    assert not (tmp_path / "results").exists() and not (tmp_path / "runs").exists()


def test_a_bad_option_set_on_the_command_line_fails_before_any_cell_starts(capsys, tmp_path):
    code, err = klm(capsys, tmp_path, "bench", write_sweep(tmp_path), "--set", "method_options={alpah: 1}")
    assert code == 2 and len(err) == 1 and "method kam, variant a0" in err[0] and "option 'alpah'" in err[0]
    assert not (tmp_path / "results").exists() and not (tmp_path / "runs").exists()


def test_a_sweep_without_options_is_checked_without_importing_its_methods(monkeypatch):
    """No options are every method's defaults (built above): the runner then starts cells without loading torch."""
    from knowledge_lm.run import config

    def refuse(name):
        raise AssertionError(f"imported {name}")

    sweep = config.load_sweep(config.benchmarks_dir() / "glue.yaml")  # validation may read a loaded class's flags
    monkeypatch.setattr(config.METHODS, "get", refuse)
    sweep.methods = ["baseline", "knowbert", "kam"]
    config.check_method_options(sweep, "glue.yaml")
    with pytest.raises(AssertionError, match="imported baseline"):
        config.check_method_options(sweep, "glue.yaml", {"method_options": {"zero_knowledge": True}})
