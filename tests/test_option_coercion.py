"""One coercion rule (``core.options.coerce_option``) for every ``from_dict``: training settings, method options
and knowledge options keep the values, and the types, they were stored with before the rule was shared."""

from pathlib import Path
from typing import Literal

import pytest

from knowledge_lm.core.options import coerce_option
from knowledge_lm.core.registry import METHODS
from knowledge_lm.knowledge.prepare import KnowledgeConfig
from knowledge_lm.run.config import TrainConfig


@pytest.mark.parametrize(
    "value, expected, ints_as_floats, coerced",
    [
        (3, float, False, 3),
        (3, float, True, 3.0),
        ("3e-5", float, False, 3e-5),
        ("16", int, False, 16),
        ("yes", bool, False, True),
        (16, str, False, "16"),
        (Path("kg"), str, False, "kg"),
        ("entity", tuple[str, ...], False, ("entity",)),
        (["a", "b"], tuple[str, ...], False, ("a", "b")),
        ({"alpha": 1}, dict, False, {"alpha": 1}),
        (None, float | None, False, None),
        ("auto", bool | Literal["auto"], False, "auto"),
        ("off", bool | Literal["auto"], False, False),
    ],
)
def test_values_take_their_declared_types(value, expected, ints_as_floats, coerced):
    result = coerce_option(value, expected, ints_as_floats=ints_as_floats)
    assert result == coerced and type(result) is type(coerced)


@pytest.mark.parametrize(
    "value, expected",
    [(2.5, int), (True, int), (True, float), ("high", float), ([1, 2], dict), (None, str), ("sometimes", bool)],
)
def test_values_that_do_not_fit_are_refused(value, expected):
    with pytest.raises(ValueError):
        coerce_option(value, expected)


def test_training_settings_store_floats_for_float_fields():
    config = TrainConfig.from_dict(
        {
            "lr": 3,
            "checkpoint_minutes": 1,
            "batch_size": "16",
            "precision": 16,
            "compile": "auto",
            "class_balance": "yes",
            "method_options": {"alpha": 1},
        }
    )
    assert config.lr == 3.0 and type(config.lr) is float
    assert config.checkpoint_minutes == 1.0 and type(config.checkpoint_minutes) is float
    assert config.batch_size == 16 and type(config.batch_size) is int
    assert config.precision == "16" and config.compile == "auto" and config.class_balance is True
    assert config.method_options == {"alpha": 1} and type(config.method_options["alpha"]) is int
    assert TrainConfig.from_dict({"compile": "false"}).compile is False


def test_method_options_keep_ints_as_given():
    options = METHODS.get("kam").options_class.from_dict({"alpha": 1, "expansion_k": "2", "new_module_lr": 1}, "t")
    assert options.alpha == 1 and type(options.alpha) is int
    assert options.expansion_k == 2 and type(options.new_module_lr) is int
    assert type(METHODS.get("kam").options_class.from_dict({"alpha": 0.5}, "t").alpha) is float


def test_knowledge_options_keep_ints_as_given():
    config = KnowledgeConfig.from_dict({"link_noise": 0, "max_candidates": "20", "shuffle_links": 1.0})
    assert config.link_noise == 0 and type(config.link_noise) is int
    assert config.max_candidates == 20 and type(config.shuffle_links) is float
    assert KnowledgeConfig.from_dict({"shuffle_links": 1, "shuffle_splits": ["test"]}).shuffle_splits == ("test",)
