"""The simulators' arguments as Python code writes them: lists and tuples wherever a comma-separated string works,
and ratios as fractions (ratio_unit="fraction") beside the command line's percentages."""

from __future__ import annotations

import pytest

import oversub


def _runs(r):
    return [(x["workload"], x["ratio"], x["policy"]) for x in r["runs"]]


def test_sim_uvm_lists_tuples_and_strings_agree() -> None:
    common = dict(quick=True, threads=2)
    as_string = oversub.sim_uvm(workloads="nw", ratios="100,200", policies="eager,dynamap", **common)
    as_lists = oversub.sim_uvm(workloads=["nw"], ratios=[100, 200], policies=["eager", "dynamap"], **common)
    as_tuples = oversub.sim_uvm(workloads=("nw",), ratios=(100, 200), policies=("eager", "dynamap"), **common)
    expected = [("nw", 100, "Eager"), ("nw", 100, "DynaMap"), ("nw", 200, "Eager"), ("nw", 200, "DynaMap")]
    assert _runs(as_string) == _runs(as_lists) == _runs(as_tuples) == expected
    for a, b in zip(as_string["runs"], as_tuples["runs"]):
        assert a["est_time_s"] == b["est_time_s"]


def test_sim_uvm_ratios_as_fractions() -> None:
    common = dict(workloads="nw", policies="eager", quick=True, threads=2)
    percent = oversub.sim_uvm(ratios=[50, 200], **common)
    fraction = oversub.sim_uvm(ratios=[0.5, 2.0], ratio_unit="fraction", **common)
    strings = oversub.sim_uvm(ratios="0.5,2", ratio_unit="fraction", **common)
    suffixed = oversub.sim_uvm(ratios=["50%", "2x"], ratio_unit="fraction", **common)  # the same under both units
    assert _runs(percent) == _runs(fraction) == _runs(strings) == _runs(suffixed)
    assert [x["ratio"] for x in fraction["runs"]] == [50, 200]
    assert [x["est_time_s"] for x in percent["runs"]] == [x["est_time_s"] for x in fraction["runs"]]
    with pytest.raises(ValueError, match="ratio_unit"):
        oversub.sim_uvm(ratios=2.0, ratio_unit="factor", **common)
    with pytest.raises(ValueError, match="fraction such as 2.0"):
        oversub.sim_uvm(ratios=-0.5, ratio_unit="fraction", **common)
    with pytest.raises(ValueError, match="bad ratio"):
        oversub.sim_uvm(ratios="lots", ratio_unit="fraction", **common)


def test_sim_swap_takes_lists_and_tuples() -> None:
    as_string = oversub.sim_swap(scenarios="fig6", policies="baseline,proposed", alpha_rules="fraction")
    as_tuple = oversub.sim_swap(scenarios=("fig6",), policies=("baseline", "proposed"), alpha_rules=["fraction"])
    names = [(x["name"], x["policy"]) for x in as_string["scenarios"]]
    assert names == [(x["name"], x["policy"]) for x in as_tuple["scenarios"]]
    assert names == [("fig6", "baseline"), ("fig6", "proposed")]
    assert [x["makespan_s"] for x in as_string["scenarios"]] == [x["makespan_s"] for x in as_tuple["scenarios"]]
