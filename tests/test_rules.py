"""The findings' rules as a registry (:mod:`sysmetrics.findings.registry`).

Each rule fires on its ``fires`` example run and stays quiet on its ``quiet`` one (the
files shipped with the package, as ``tests/rule_examples.py`` writes them); each finding
carries its typed subject; the thresholds a rule reads are its declaration's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sysmetrics import findings as fd
from sysmetrics.findings import Finding, findings, read_run
from sysmetrics.findings.registry import REGISTRY, Rule, Subject, example_path
from tests import rule_examples

CODES = [rule.code for rule in REGISTRY]


def test_the_registry_holds_every_rule_once_in_order() -> None:
    assert CODES == [
        "input-bound", "framework-overhead", "stall", "slow-steps", "cpu-bound", "contention",
        "single-core", "memory-limit", "gpu-memory-limit", "gpu-throttling", "disk-bound", "swap",
        "unused-gpu", "memory-creep", "straggler-node",
    ]  # fmt: skip
    assert len(set(CODES)) == len(CODES)
    for rule in REGISTRY:
        assert rule.scope in ("node", "run") and rule.summary and rule.why, rule.code
        assert "\n" not in rule.summary, rule.code
        assert dataclasses.is_dataclass(rule.thresholds), rule.code
        for f in dataclasses.fields(rule.thresholds):
            assert f.metadata.get("help"), (rule.code, f.name)
            assert "unit" in f.metadata, (rule.code, f.name)
    assert [r.code for r in REGISTRY if not r.live] == ["slow-steps", "unused-gpu", "memory-creep"]
    assert fd.CROSS_NODE_CODES == ("straggler-node",)


@pytest.mark.parametrize("rule", REGISTRY, ids=CODES)
def test_each_rule_fires_on_its_example_and_stays_quiet_on_the_other(rule: Rule) -> None:
    fires = findings(read_run(example_path(rule.code, "fires")))
    assert rule.code in [f.rule for f in fires], fires
    quiet = findings(read_run(example_path(rule.code, "quiet")))
    assert rule.code not in [f.rule for f in quiet], quiet
    # the rule's own check says the same as findings() on its example
    alone = rule.check(read_run(example_path(rule.code, "fires")), rule.thresholds)
    assert [f.sentence for f in alone] == [f.sentence for f in fires if f.rule == rule.code]


@pytest.mark.parametrize("code", CODES)
def test_the_shipped_examples_are_what_the_script_writes(code: str) -> None:
    for name, data in rule_examples.render(code).items():
        shipped = Path(rule_examples.EXAMPLES / code / name)
        assert shipped.read_bytes() == data, f"run python -m tests.rule_examples ({shipped})"


def by_code(found: list[Finding], code: str) -> list[Finding]:
    return [f for f in found if f.rule == code]


def test_findings_carry_their_subjects() -> None:
    def first(code: str) -> Finding:
        return by_code(findings(read_run(example_path(code, "fires"))), code)[0]

    assert first("stall").subject == Subject("step", "8")
    assert first("gpu-memory-limit").subject == Subject("gpu", "0")
    assert first("gpu-throttling").subject == Subject("gpu", "0", "thermal")
    assert first("unused-gpu").subject == Subject("gpu", "0")
    assert first("straggler-node").subject == Subject("node", "1")
    assert first("contention").subject == Subject("resource", "cpu")
    assert first("memory-creep").subject == Subject("resource", "memory")
    assert first("input-bound").subject is None  # about the run (the node's, on several)
    assert first("stall").subject == ("step", "8", "", None)  # a plain tuple too


def test_a_node_rule_on_one_of_several_nodes_names_the_node(tmp_path: Path) -> None:
    path = tmp_path / "two.jsonl"
    with open(path, "wb") as out:
        for node, memory in ((0, 50.0), (1, 97.0)):
            out.write(rule_examples.recording([{"proc.memory.percent": memory}] * 10, node=node))
    found = by_code(findings(read_run(path)), "memory-limit")
    assert len(found) == 1 and found[0].sentence.startswith("Node 1: ")
    assert found[0].subject == Subject("node", "1")


def test_a_rule_reads_its_declared_thresholds() -> None:
    rule = next(r for r in REGISTRY if r.code == "cpu-bound")
    run = read_run(example_path("cpu-bound", "fires"))
    assert rule.check(run, rule.thresholds)
    higher = dataclasses.replace(rule.thresholds, percent=99.0)
    assert rule.check(run, higher) == []


def test_each_threshold_constant_is_its_fields_default() -> None:
    """One home: each field's default is the constant it names, importable from findings."""
    for rule in REGISTRY:
        for f in dataclasses.fields(rule.thresholds):
            constant = f.metadata["constant"]
            assert getattr(fd, constant) == f.default, (rule.code, f.name, constant)
            assert getattr(rule.thresholds, f.name) == f.default
