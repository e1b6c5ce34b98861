"""The simulators' arguments as Python code writes them: lists and tuples wherever a comma-separated string works,
and ratios in percent as on the command line (one unit everywhere, issue 32)."""

from __future__ import annotations

import pytest

import oversub


def _runs(r):
    return [(x["workload"], x["ratio_percent"], x["policy"]) for x in r["runs"]]


def test_sim_uvm_lists_tuples_and_strings_agree() -> None:
    common = dict(quick=True, threads=2)
    as_string = oversub.sim_uvm(workloads="nw", ratios="100,200", policies="eager,dynamap", **common)
    as_lists = oversub.sim_uvm(workloads=["nw"], ratios=[100, 200], policies=["eager", "dynamap"], **common)
    as_tuples = oversub.sim_uvm(workloads=("nw",), ratios=(100, 200), policies=("eager", "dynamap"), **common)
    expected = [("nw", 100, "Eager"), ("nw", 100, "DynaMap"), ("nw", 200, "Eager"), ("nw", 200, "DynaMap")]
    assert _runs(as_string) == _runs(as_lists) == _runs(as_tuples) == expected
    for a, b in zip(as_string["runs"], as_tuples["runs"]):
        assert a["est_time_s"] == b["est_time_s"]


def test_sim_uvm_ratios_are_percent_and_fractions_are_refused() -> None:
    common = dict(workloads="nw", policies="eager", quick=True, threads=2)
    numbers = oversub.sim_uvm(ratios=[50, 200], **common)
    strings = oversub.sim_uvm(ratios="50,200", **common)
    suffixed = oversub.sim_uvm(ratios=["50%", "2x"], **common)
    assert _runs(numbers) == _runs(strings) == _runs(suffixed) == [("nw", 50, "Eager"), ("nw", 200, "Eager")]
    assert [x["est_time_s"] for x in numbers["runs"]] == [x["est_time_s"] for x in suffixed["runs"]]
    # A bare number that reads as a fraction is refused with what was meant; "5%" says 5% explicitly.
    for ratios in (2.0, [2], "2", [0.5, 200]):
        with pytest.raises(ValueError, match=r"ratios are percent as in the paper: did you mean (200|50)\?"):
            oversub.sim_uvm(ratios=ratios, **common)
    assert _runs(oversub.sim_uvm(ratios="5%", **common)) == [("nw", 5, "Eager")]
    with pytest.raises(TypeError):
        oversub.sim_uvm(ratios=[2.0], ratio_unit="fraction", **common)  # the second unit is gone
    with pytest.raises(ValueError, match="non-negative"):
        oversub.sim_uvm(ratios=-50, **common)
    with pytest.raises(ValueError, match="bad ratio"):
        oversub.sim_uvm(ratios="lots", **common)
    assert oversub._oversub.ratio_percent("2x") == 200 and oversub._oversub.ratio_percent("33.3") == 33.3


def test_sim_swap_takes_lists_and_tuples() -> None:
    as_string = oversub.sim_swap(scenarios="fig6", policies="baseline,proposed", alpha_rules="fraction")
    as_tuple = oversub.sim_swap(scenarios=("fig6",), policies=("baseline", "proposed"), alpha_rules=["fraction"])
    names = [(x["name"], x["policy"]) for x in as_string["scenarios"]]
    assert names == [(x["name"], x["policy"]) for x in as_tuple["scenarios"]]
    assert names == [("fig6", "baseline"), ("fig6", "proposed")]
    assert [x["makespan_s"] for x in as_string["scenarios"]] == [x["makespan_s"] for x in as_tuple["scenarios"]]
