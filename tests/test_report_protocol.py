"""What a page says of its cells: the metric definitions it uses, its degenerate cells, its protocol and commits."""

from knowledge_lm.report.pages import metric_definitions


def test_both_loose_macro_definitions_are_named():
    [_, line] = metric_definitions(["micro_f1", "loose_macro_f1", "ling_weld_loose_macro_f1"])
    assert "loose_macro_f1 = loose macro-F1 as ERNIE's code" in line and "ling_weld_loose_macro_f1 = " in line
    assert metric_definitions(["micro_f1"]) == []
