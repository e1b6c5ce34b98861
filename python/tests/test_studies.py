"""The schedule runtime and the simulators from Python: plan_schedule, run_schedule, sim_uvm, sim_swap, to_dataframe.

Runs are kept short: a small configuration (4 MiB buffers, a 120 ms table), the store's bandwidths given instead of
measured, quick simulator workloads.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

import oversub
from oversub import errors

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# Three components sharing CPU 0 and 8 MiB for their three 4 MiB buffers (50% oversubscription), and a logger
# without buffers on CPU 1. Derived table, 120 ms: A 0-40, B 40-80, C 80-120 ms on CPU 0; log 0-20 ms on CPU 1.
SMALL = """\
[platform]
capacity = "8MiB"
cpus = 2
gpus = 1

[[component]]
name = "A"
budget_ms = 40
period_ms = 120
work = { sleep_ms = 10 }
[[component.buffer]]
name = "state"
size = "4MiB"

[[component]]
name = "B"
budget_ms = 40
period_ms = 120
work = { sleep_ms = 10 }
[[component.buffer]]
name = "state"
size = "4MiB"

[[component]]
name = "C"
budget_ms = 40
period_ms = 120
work = { sleep_ms = 10 }
[[component.buffer]]
name = "state"
size = "4MiB"
read_only = true

[[component]]
name = "log"
budget_ms = 20
period_ms = 120
cpus = [1]
work = { sleep_ms = 5 }
"""

# Page-in and page-out speeds the plans assume (bytes/s): 4 MiB moves in about 4 ms.
BW = (1e9, 1e9)

MODES = {"async", "sync", "demand"}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sched") / "small.toml"
    path.write_text(SMALL)
    return path


@pytest.fixture(scope="module")
def async_run(small: Path) -> dict:
    """One async run of the small system (about a second), with a Python thread ticking meanwhile."""
    ticks = 0
    stop = threading.Event()

    def tick() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    t = threading.Thread(target=tick)
    t.start()
    try:
        result = oversub.run_schedule(small, mode="async", hyperperiods=2, warmup=1, bandwidths=BW, settle_s=0.1)
    finally:
        stop.set()
        t.join()
    result["_ticks_meanwhile"] = ticks
    return result


# --- load_schedule -------------------------------------------------------------------------------------------------


def test_load_schedule_describes_the_configuration(small: Path) -> None:
    s = oversub.load_schedule(small)
    assert set(s) == {"platform", "components", "table", "demand_bytes", "oversubscription"}
    assert s["platform"] == {"capacity_bytes": 8 << 20, "store": None, "device": "host", "cpus": 2, "gpus": 1}
    assert [c["name"] for c in s["components"]] == ["A", "B", "C", "log"]
    c = s["components"][2]
    assert c["buffers"] == [{"name": "state", "size_bytes": 4 << 20, "read_only": True}]
    assert c["work"] == {"kind": "sleep", "compute_s": pytest.approx(0.010)}
    assert s["table"]["hyperperiod_s"] == pytest.approx(0.120)
    slots = {(x["component"], x["cpu"]): (x["start_s"], x["length_s"]) for x in s["table"]["slots"]}
    assert slots[("B", 0)] == (pytest.approx(0.040), pytest.approx(0.040))
    assert slots[("log", 1)] == (pytest.approx(0.0), pytest.approx(0.020))
    assert s["demand_bytes"] == 12 << 20
    assert s["oversubscription"] == pytest.approx(0.5)
    # The same from the text, and from a str path.
    assert oversub.load_schedule(text=SMALL) == s
    assert oversub.load_schedule(str(small)) == s


def test_load_schedule_wants_a_path_or_text(small: Path) -> None:
    with pytest.raises(TypeError):
        oversub.load_schedule()
    with pytest.raises(TypeError):
        oversub.load_schedule(small, text=SMALL)


# --- errors --------------------------------------------------------------------------------------------------------


def test_missing_file_raises_config_error_with_the_rust_message(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    for call in (oversub.load_schedule, oversub.plan_schedule, oversub.run_schedule):
        with pytest.raises(errors.ConfigError) as info:
            call(missing)
        assert str(info.value) == f"reading {missing}: No such file or directory (os error 2)"
        assert isinstance(info.value, ValueError)
        assert isinstance(info.value, oversub.errors.Error)


def test_invalid_configuration_names_file_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[platform]\ncapacity = 0\n')
    with pytest.raises(errors.ConfigError) as info:
        oversub.run_schedule(bad, bandwidths=BW)
    assert str(info.value) == f"{bad}:2:12: platform capacity must be > 0"
    with pytest.raises(errors.ConfigError) as info:
        oversub.plan_schedule(text='[platform]\ncapacity = 0\n', bandwidths=BW)
    assert str(info.value) == "<text>:2:12: platform capacity must be > 0"


def test_bad_mode_raises_value_error_listing_the_modes(small: Path) -> None:
    with pytest.raises(ValueError) as info:
        oversub.plan_schedule(small, mode="lazy", bandwidths=BW)
    assert str(info.value) == 'mode must be one of "async", "sync", "demand", "all", not "lazy"'
    assert not isinstance(info.value, errors.Error)
    with pytest.raises(ValueError, match='mode must be one of "async"'):
        oversub.run_schedule(small, mode="eager", bandwidths=BW)


def test_bad_run_arguments(small: Path) -> None:
    with pytest.raises(ValueError, match="hyperperiods must be at least 1"):
        oversub.run_schedule(small, hyperperiods=0, bandwidths=BW)
    with pytest.raises(ValueError, match="bandwidth"):
        oversub.run_schedule(small, bandwidths=(0.0, 1e9))
    with pytest.raises(TypeError):
        oversub.run_schedule(small, "async")  # the options are keyword-only


def test_profile_without_storage_raises_profile_error(small: Path, tmp_path: Path) -> None:
    profile = tmp_path / "profile.toml"
    profile.write_text("[profile]\nversion = 1\n")
    with pytest.raises(errors.ProfileError) as info:
        oversub.plan_schedule(small, profile=profile)
    assert str(info.value).startswith(f"{profile} has no [storage] table")


# --- plan_schedule -------------------------------------------------------------------------------------------------


def test_plan_schedule_analyses_every_mode(small: Path) -> None:
    p = oversub.plan_schedule(small, bandwidths=BW)
    assert p["read_bytes_per_s"] == BW[0] and p["write_bytes_per_s"] == BW[1]
    assert p["bandwidth_source"] == "given"
    assert p["demand_bytes"] == 12 << 20 and p["capacity_bytes"] == 8 << 20
    assert p["hyperperiod_s"] == pytest.approx(0.120)
    assert set(p["modes"]) == MODES
    for name, a in p["modes"].items():
        assert set(a) >= {
            "target_period_s",
            "feasible_at_target",
            "min_feasible_period_s",
            "page_outs_per_hyperperiod",
            "bytes_paged_per_hyperperiod",
            "min_capacity_bytes",
            "max_oversubscription",
            "problems",
            "slots",
        }, name
        assert a["target_period_s"] == pytest.approx(0.120)
        assert isinstance(a["feasible_at_target"], bool)
        assert isinstance(a["problems"], list)
        assert sorted(s["component"] for s in a["slots"]) == ["A", "B", "C", "log"]
    # Async pages the next buffer in during the previous slot: it fits the table as it is.
    a = p["modes"]["async"]
    assert a["feasible_at_target"] and a["problems"] == []
    assert a["min_feasible_period_s"] <= 0.120 + 1e-9
    assert a["page_outs_per_hyperperiod"] >= 1
    assert a["bytes_paged_per_hyperperiod"] > 0
    assert a["min_capacity_bytes"] <= (8 << 20) + (1 << 20)  # found to 1 MiB
    assert a["max_oversubscription"] >= 0.3
    assert all(s["problem"] is None for s in a["slots"])
    paging = [s for s in a["slots"] if s["page_ins"]]
    assert paging and all(s["io_bytes"] > 0 and s["paging_s"] > 0 for s in paging)
    log = next(s for s in a["slots"] if s["component"] == "log")
    assert log == {**log, "page_ins": 0, "page_outs": 0, "io_bytes": 0, "paging_s": 0.0, "problem": None}


def test_plan_schedule_one_mode_with_a_profile(small: Path, tmp_path: Path) -> None:
    profile = tmp_path / "profile.toml"
    profile.write_text("[profile]\nversion = 1\n\n[storage]\nread_bytes_per_s = 2e9\nwrite_bytes_per_s = 1e9\n")
    p = oversub.plan_schedule(small, mode="demand", profile=profile)
    assert set(p["modes"]) == {"demand"}
    assert p["bandwidth_source"] == "profile"
    assert (p["read_bytes_per_s"], p["write_bytes_per_s"]) == (2e9, 1e9)


def test_plan_schedule_paper_example() -> None:
    # The paper's Figs. 5-8 at 4 GiB/s both ways: only planning, nothing of its 5 GiB is allocated.
    gib = float(1 << 30)
    p = oversub.plan_schedule(EXAMPLES / "paper.toml", bandwidths=(4 * gib, 4 * gib))
    assert p["demand_bytes"] == 5 << 30 and p["capacity_bytes"] == 4 << 30
    periods = {m: a["min_feasible_period_s"] for m, a in p["modes"].items()}
    assert all(v is not None and v > 0 for v in periods.values()), periods
    # Asynchronous paging hides the transfers: it needs the shortest period of the three.
    assert periods["async"] <= periods["sync"] and periods["async"] <= periods["demand"]


# --- run_schedule --------------------------------------------------------------------------------------------------


def test_run_schedule_returns_the_run_record(async_run: dict) -> None:
    r = async_run
    assert r["mode"] == "async"
    assert r["hyperperiod_s"] == pytest.approx(0.120)
    assert r["hyperperiods"] == 3 and r["warmup_hyperperiods"] == 1 and r["hyperperiods_counted"] == 2
    assert r["bandwidth_source"] == "given" and r["read_bytes_per_s"] == BW[0]
    assert r["at_min_period"] is False
    assert r["min_feasible_period_s"] is not None
    # Four slots per repetition, three repetitions.
    assert len(r["slots"]) == 12
    assert r["counted_slots"] == 8
    assert isinstance(r["deadline_misses"], int) and 0 <= r["deadline_misses"] <= r["counted_slots"]
    assert isinstance(r["warmup_misses"], int)
    assert r["met_target"] is (r["deadline_misses"] == 0)
    # The store was read back before the table (one round at least), and the misses are read repetition by
    # repetition.
    assert r["prime"]["rounds"] >= 1 and all(b > 0 for b in r["prime"]["read_bytes_per_s"])
    assert r["warmup_asked"] == 1
    assert [rep["hyperperiod"] for rep in r["misses"]["repetitions"]] == [0, 1, 2]
    # Any of the profile's kinds: on a busy machine (CI beside two CPU hogs) one repetition can hiccup ("isolated")
    # or a work run past its window; which one is the machine's, not the record's shape.
    assert r["misses"]["origin"]["kind"] in {
        "none",
        "start_caught_up",
        "start_still_draining",
        "work_overran",
        "isolated",
        "steady_state",
    }
    for s in r["slots"]:
        assert set(s) == {
            "component",
            "cpu",
            "gpu",
            "hyperperiod",
            "planned_start_s",
            "actual_start_s",
            "lateness_s",
            "completion_s",
            "deadline_s",
            "met",
            "paging_wait_s",
            "work_s",
            "major_faults",
            "minor_faults",
        }
        assert isinstance(s["met"], bool)
        assert s["completion_s"] >= s["actual_start_s"] >= 0.0
        assert s["planned_start_s"] == pytest.approx(s["hyperperiod"] * 0.120 + {"A": 0, "B": 0.04, "C": 0.08, "log": 0}[s["component"]])
    # Three 4 MiB buffers in 8 MiB: every repetition pages.
    assert r["ops"] and {op["kind"] for op in r["ops"]} <= {"in", "out"}
    assert all(op["end_s"] >= op["start_s"] and op["buffer"].endswith(".state") for op in r["ops"])
    assert r["bytes_paged"] > 0 and r["store_busy_s"] > 0
    assert len(r["resident_at_start"]) <= 2


def test_run_schedule_releases_the_gil(async_run: dict) -> None:
    # The run took over 0.4 s; a thread sleeping 1 ms per tick got to run meanwhile.
    assert async_run["_ticks_meanwhile"] > 50


def test_run_schedule_all_modes_from_text() -> None:
    r = oversub.run_schedule(text=SMALL, mode="all", hyperperiods=1, warmup=0, bandwidths=BW, settle_s=0.0)
    assert set(r) == {"modes"}
    assert set(r["modes"]) == MODES
    for name, run in r["modes"].items():
        assert run["mode"] == name
        assert len(run["slots"]) == 4
        assert run["counted_slots"] == 4 and run["warmup_hyperperiods"] == 0


# --- sim_uvm -------------------------------------------------------------------------------------------------------

UVM_RUN_FIELDS = {
    "workload",
    "ratio_percent",
    "policy",
    "est_time_s",
    "speedup_vs_lazygrphw",
    "faults",
    "migrations",
    "prefetches",
    "evictions",
    "evictions_per_page",
    "remote_accesses",
    "cache_hits",
    "gpu_mem_accesses",
    "bytes_h2d",
    "bytes_d2h",
    "accesses",
    "footprint_bytes",
    "gpu_memory_bytes",
    "sim_seconds",
    "serial_time_s",
    "fault_batches",
    "transfers_h2d",
    "transfers_d2h",
    "pst_updates",
    "throttles",
    "pins",
    "breakdown",
    "geometry",
    "series",
    "utilisation",
    "f_under_per_s",
    "low_util_l2_hit_rate",
}


def test_sim_uvm_quick_one_workload_one_ratio() -> None:
    r = oversub.sim_uvm(workloads="nw", ratios=200, policies=["lazy-grp-hw", "dynamap"], quick=True, threads=2)
    assert set(r) == {
        "runs",
        "speedups",
        "cost_model",
        "time_model",
        "machine_scale",
        "cost_curves",
        "eviction",
        "eviction_unit",
        "wall_seconds",
    }
    assert [(x["workload"], x["ratio_percent"], x["policy"]) for x in r["runs"]] == [
        ("nw", 200, "LazyGrpHW"),
        ("nw", 200, "DynaMap"),
    ]
    for run in r["runs"]:
        assert set(run) == UVM_RUN_FIELDS
        assert run["accesses"] > 0 and run["est_time_s"] > 0
        # 200% oversubscription: the problem is three times the GPU memory.
        assert run["footprint_bytes"] == pytest.approx(3 * run["gpu_memory_bytes"], rel=0.01)
    assert r["runs"][0]["speedup_vs_lazygrphw"] == pytest.approx(1.0)
    assert [(s["label"], s["ratio_percent"]) for s in r["speedups"]] == [("LazyGrpHW", 200), ("DynaMap", 200)]
    assert r["speedups"][1]["speedup"] == pytest.approx(r["runs"][0]["est_time_s"] / r["runs"][1]["est_time_s"])
    assert r["cost_model"]["page_bytes"] == 4096
    assert r["cost_model"]["decision"]["fault_s"] == pytest.approx(20e-6)
    assert r["time_model"] == "Overlap"
    assert r["runs"][1]["pst_updates"] > 0  # DynaMap pays for its instrumentation
    assert r["runs"][0]["series"] and r["runs"][0]["series"][-1]["time_s"] == pytest.approx(r["runs"][0]["est_time_s"])
    assert r["wall_seconds"] > 0


def test_sim_uvm_ratio_spellings() -> None:
    r = oversub.sim_uvm(
        workloads=["nw"], ratios=["100%", "2x"], policies="eager", quick=True, l2="1MiB", time_model="serial"
    )
    assert [x["ratio_percent"] for x in r["runs"]] == [100, 200]
    assert r["cost_model"]["machine"]["l2_bytes"] == 1 << 20
    assert r["runs"][0]["geometry"]["l2_bytes"] == 1 << 20  # fixed, not scaled
    assert r["runs"][0]["est_time_s"] == r["runs"][0]["serial_time_s"]
    assert r["speedups"] == []  # no LazyGrpHW run to compare with
    assert r["runs"][0]["speedup_vs_lazygrphw"] is None


def test_sim_uvm_errors() -> None:
    with pytest.raises(errors.SimError) as info:
        oversub.sim_uvm(workloads="nope", quick=True)
    assert str(info.value) == "unknown workload `nope` (known: bfs, sssp, nw, gaussian, atax, pagerank, bst)"
    with pytest.raises(errors.SimError, match="unknown policy `lru`"):
        oversub.sim_uvm(workloads="nw", policies="lru", quick=True)
    with pytest.raises(ValueError, match="say what to simulate"):
        oversub.sim_uvm(quick=True)
    with pytest.raises(ValueError, match="bad ratio"):
        oversub.sim_uvm(workloads="nw", ratios="lots", quick=True)
    with pytest.raises(ValueError, match='"fifo" is not one of allocation, lru'):
        oversub.sim_uvm(workloads="nw", eviction="fifo", quick=True)
    with pytest.raises(ValueError, match='"fast" is not one of overlap, serial'):
        oversub.sim_uvm(workloads="nw", time_model="fast", quick=True)
    with pytest.raises(errors.SimError):
        oversub.sim_uvm(traces="/nonexistent/trace.bin", policies="eager", quick=True)


# --- sim_swap ------------------------------------------------------------------------------------------------------


def test_sim_swap_one_scenario_every_policy() -> None:
    r = oversub.sim_swap(scenarios="fig6")
    assert set(r) == {"scenarios", "summaries", "seed"}
    assert r["seed"] == 1
    assert [(x["name"], x["policy"]) for x in r["scenarios"]] == [
        ("fig6", "baseline"),
        ("fig6", "mat"),
        ("fig6", "alg1-priority"),
        ("fig6", "alg2-direct"),
        ("fig6", "proposed"),
    ]
    for run in r["scenarios"]:
        assert set(run) == {"name", "policy", "policy_label", "tasks", "makespan_s", "swap_outs", "memory_peak_bytes"}
        assert len(run["tasks"]) == 4
        assert sorted(t["priority"] for t in run["tasks"]) == [1, 2, 3, 4]
        for t in run["tasks"]:
            assert set(t) == {
                "task",
                "priority",
                "lengthened_latency_s",
                "response_s",
                "alone_s",
                "degree",
                "alpha",
                "swap_outs",
            }
            assert t["response_s"] == pytest.approx(t["alone_s"] + t["lengthened_latency_s"])
    (summary,) = r["summaries"]
    assert summary["name"] == "fig6" and summary["figure"] == "Fig. 6"
    # The proposed policy runs the highest-priority task as if alone.
    assert summary["highest_proposed_lengthened_s"] == pytest.approx(0.0)
    proposed = r["scenarios"][4]
    top = next(t for t in proposed["tasks"] if t["priority"] == 1)
    assert top["task"] == summary["highest"] and top["lengthened_latency_s"] == pytest.approx(0.0)


def test_sim_swap_options() -> None:
    r = oversub.sim_swap(scenarios=["fig6"], policies="proposed", alpha_rules="fraction,printed-ceil")
    assert [x["policy"] for x in r["scenarios"]] == ["proposed", "proposed-printed-ceil"]
    r = oversub.sim_swap(scenarios="fig6", policies="baseline", capacity="1GiB")
    assert r["scenarios"][0]["swap_outs"] == 0  # everything fits


def test_sim_swap_default_priorities_are_the_literal_reading() -> None:
    """One default everywhere: Alg. 1 as written ("measured", C_i(N) under Baseline in the scenario's own memory),
    as in the library (StudyOptions::default) and the command line (tested there against the library)."""
    default = oversub.sim_swap(scenarios="fig4a", policies="paper")
    measured = oversub.sim_swap(scenarios="fig4a", policies="paper", priorities="measured")
    contention = oversub.sim_swap(scenarios="fig4a", policies="paper", priorities="contention")
    assert default == measured
    assert default != contention  # the two readings rank fig4a's tasks differently
    paper = oversub.sim_swap(scenarios="fig6", policies="paper")
    assert [x["policy"] for x in paper["scenarios"]] == ["baseline", "mat", "proposed"]


def test_sim_swap_over_seeds() -> None:
    """``seeds`` runs every scenario once per seed (and per direct-access timing) and returns the spread, as
    ``oversub sim swap --seeds`` does; ``seed`` alone stays one draw."""
    r = oversub.sim_swap(scenarios="fig4b", policies="paper", seeds=3)
    assert r["kind"] == "seeds" and r["seeds"] == [1, 2, 3]
    assert r["default_direct_access"] == "serial"
    assert [s["direct_access"] for s in r["scenarios"]] == ["serial", "overlapped"]
    for s in r["scenarios"]:
        assert s["policies"] == ["baseline", "mat", "proposed"]
        assert len(s["per_seed"]) == 3 and s["seed_dependent"]
        for p in s["positions"]:
            assert p["seeds"] == 3 and 0 <= p["proposed_beats_baseline"] <= 3
            for spread in p["lengthened_s"]:
                assert spread["q1"] <= spread["median"] <= spread["q3"]
        top = s["positions"][0]["lengthened_s"][2]
        assert top["max"] == pytest.approx(0.0)
    assert oversub.sim_swap(scenarios="fig6", seeds="4-5", direct_access="serial")["seeds"] == [4, 5]
    assert oversub.sim_swap(scenarios="fig6", seeds=[7, 9])["seeds"] == [7, 9]
    with pytest.raises(ValueError, match="at least one seed"):
        oversub.sim_swap(scenarios="fig6", seeds=0)


def test_sim_swap_errors() -> None:
    with pytest.raises(errors.SwapSimError) as info:
        oversub.sim_swap(scenarios="fig9")
    assert str(info.value) == "unknown scenario `fig9` (known: fig4a, fig4b, fig5a, fig5b, fig6, all)"
    with pytest.raises(errors.SwapSimError, match="unknown policy `lru`"):
        oversub.sim_swap(scenarios="fig6", policies="lru")
    with pytest.raises(ValueError, match='"random" is not one of measured, contention, given'):
        oversub.sim_swap(scenarios="fig6", priorities="random")
    with pytest.raises(ValueError, match="sms must be at least 1"):
        oversub.sim_swap(scenarios="fig6", sms=0)
    with pytest.raises(ValueError, match="alpha_rules"):
        oversub.sim_swap(scenarios="fig6", alpha_rules="round")


# --- to_dataframe --------------------------------------------------------------------------------------------------


def test_to_dataframe_one_row_per_slot(async_run: dict) -> None:
    pd = pytest.importorskip("pandas")
    df = oversub.to_dataframe(async_run, "slots")
    assert isinstance(df, pd.DataFrame)
    assert len(df) == len(async_run["slots"]) == 12
    assert list(df.columns)[:3] == ["component", "cpu", "gpu"]
    assert df["met"].dtype == bool
    assert (df.groupby("component").size() == 3).all()
    # The same from the list itself.
    assert oversub.to_dataframe(async_run["slots"]).equals(df)


def test_to_dataframe_dict_of_dicts_and_errors(small: Path) -> None:
    pytest.importorskip("pandas")
    plan = oversub.plan_schedule(small, bandwidths=BW)
    df = oversub.to_dataframe(plan, "modes")
    assert set(df.index) == MODES
    assert "min_feasible_period_s" in df.columns
    with pytest.raises(TypeError, match="needs key="):
        oversub.to_dataframe(plan)
    with pytest.raises(KeyError):
        oversub.to_dataframe(plan, "nope")
    with pytest.raises(TypeError):
        oversub.to_dataframe([1, 2, 3])


def test_to_dataframe_without_pandas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now raises ImportError
    with pytest.raises(ImportError, match=r"to_dataframe needs pandas: pip install pandas"):
        oversub.to_dataframe([{"a": 1}])
