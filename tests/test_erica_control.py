"""ERICA's control is the MLM-only checkpoint of its own pretraining run (same corpus, steps, batch size and commit),
never another run's: on the generated page's knowledge-used test and in the claims."""

from test_report_stats import result

from knowledge_lm.report.claims import Comparison, side_cells
from knowledge_lm.report.comparisons import control_cells
from knowledge_lm.report.frame import results_frame
from knowledge_lm.report.pretraining import run_identity, runs_by_checksum


def record(checksum: str, commit: str, corpus: str = "c" * 64) -> dict:
    """A pretraining record of ``klm pretrain``'s shape, but for the fields that pair runs."""
    return {
        "checkpoint_checksum": checksum,
        "corpus_hash": corpus,
        "steps": 800,
        "batch_size": 8,
        "git": {"commit": commit},
    }


# Two pretraining runs, each an ERICA and an MLM-only checkpoint; the first run's MLM-only one is named first.
RECORDS = [
    record("e1" * 32, "b7df013"),
    record("m1" * 32, "b7df0134c2d0"),  # the same commit, written whole
    record("e2" * 32, "0fdc734"),
    record("m2" * 32, "0fdc734"),
    record("m2" * 32, "d06194a"),  # the same weights again at a later commit
]


def checkpoint_result(method: str, checksum: str, seed: int, value: float, variant: str = "") -> dict:
    name = f"{method}-minilm-{checksum[:8]}"
    return result(
        name, seed, value, variant=variant, backbone={"checksum": checksum, "path": None, "pretrained_from": "minilm"}
    ) | {"cell": {**result(method, seed, value, variant=variant)["cell"], "backbone": name}}


def two_runs_frame():
    runs = {"erica": ("e1" * 32, "e2" * 32), "erica-mlm-only": ("m2" * 32, "m1" * 32)}
    results = [
        checkpoint_result(method, checksum, seed, 60.0 + 10 * index + seed, variant)
        for method, checksums in runs.items()
        for index, checksum in enumerate(checksums)
        for seed in range(1, 6)
        for variant in ("", "t20k")
        if not (variant and checksum == "m2" * 32)  # the other run's control has no 20k cells
    ]
    return results_frame(results, runs=runs_by_checksum(RECORDS))


def test_a_run_is_its_corpus_steps_batch_and_commit():
    assert run_identity(RECORDS[1]) == run_identity(RECORDS[0])
    assert run_identity(record("x", "b7df013", corpus="d" * 64)) != run_identity(RECORDS[0])
    assert runs_by_checksum(RECORDS)["m2" * 32] == (run_identity(RECORDS[3]), run_identity(RECORDS[4]))


def test_erica_pairs_with_the_mlm_only_checkpoint_of_its_own_run():
    frame = two_runs_frame()
    labels = {checksum: label for label, checksum in zip(frame["method"], frame["checksum"])}
    for erica, control in (("e1" * 32, "m1" * 32), ("e2" * 32, "m2" * 32)):
        for variant in ("", "t20k"):
            found = dict(control_cells(frame, labels[erica], 1.0, "accuracy", variant))
            if variant and control == "m2" * 32:
                assert found == {}  # its own control has no 20k cells: none, never the other run's
                continue
            assert list(found) == ["mlm-only"] and set(found["mlm-only"]["method"]) == {labels[control]}


def test_without_a_record_erica_has_no_control():
    results = [checkpoint_result(m, c, 1, 60.0) for m, c in (("erica", "e1" * 32), ("erica-mlm-only", "m1" * 32))]
    frame = results_frame(results)
    assert control_cells(frame, frame["method"].iloc[0], 1.0, "accuracy") == []


def test_a_claim_pairs_erica_with_its_own_runs_control():
    frame = two_runs_frame()
    comparison = Comparison(
        "erica", "erica-mlm-only", "glue", ("rte",), 1.0, backbone="minilm", a_variant="t20k", b_variant="t20k"
    )
    ours = side_cells(frame, comparison, "a", "rte")
    assert set(ours["checksum"]) == {"e1" * 32}  # the checkpoint with the most cells (a tie: the first by name)
    assert set(side_cells(frame, comparison, "b", "rte", paired=ours)["checksum"]) == {"m1" * 32}
