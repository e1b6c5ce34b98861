"""Your own Python code in the slots of a schedule: run_schedule(work={...}, init={...}) and oversub.Slot.

The configuration is the paper's example scaled down: five components with a 1 MiB buffer each (A also has a
read-only 1 MiB one) in a 5 MiB pool (7 MiB of buffers), slots of 25 ms (A, B, C on CPU 0) and 37.5 ms (D, E on CPU 1), a 75 ms table.
The store's bandwidths are given, so nothing is measured; nothing here asserts wall-clock times.
"""

from __future__ import annotations

import collections
import gc
import os
import signal

import pytest

import oversub
from oversub import errors

np = pytest.importorskip("numpy")

MIB = 1 << 20
BW = (500e6, 500e6)
NAMES = ["A", "B", "C", "D", "E"]
MODES = ["async", "sync", "demand"]


def config(works: dict[str, str] | None = None) -> str:
    """The scaled-down paper example; `works` gives a component a `work = {...}` table (default: none, your code)."""
    works = works or {}
    text = '[platform]\ncapacity = "5MiB"\ncpus = 2\ngpus = 1\n'
    for name, budget, cpu in [("A", 25, 0), ("B", 25, 0), ("C", 25, 0), ("D", 37.5, 1), ("E", 37.5, 1)]:
        text += f'\n[[component]]\nname = "{name}"\nbudget_ms = {budget}\nperiod_ms = 75\ncpus = [{cpu}]\n'
        if name in works:
            text += f"work = {works[name]}\n"
        text += '[[component.buffer]]\nname = "state"\nsize = "1MiB"\n'
        if name == "A":
            text += '[[component.buffer]]\nname = "weights"\nsize = "1MiB"\nread_only = true\n'
    return text


CONFIG = config()


def run(mode: str = "async", **kw) -> dict:
    kw.setdefault("hyperperiods", 2)
    kw.setdefault("warmup", 1)
    return oversub.run_schedule(
        text=kw.pop("text", CONFIG),
        mode=mode,
        bandwidths=BW,
        settle_s=0.0,
        at_min_period=mode != "async",
        **kw,
    )


BASE = ((np.arange(MIB, dtype=np.uint32) * 31) & 0xFF).astype(np.uint8)


def pattern(component: str, instance: int) -> "np.ndarray":
    """The bytes a component's slot `instance` leaves in its state buffer."""
    return BASE + np.uint8((instance * 7 + NAMES.index(component) * 50 + 1) & 0xFF)


def slots_of(result: dict) -> collections.Counter:
    return collections.Counter(s["component"] for s in result["slots"])


# --- what a work sees ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_works_see_their_own_buffers_with_the_bytes_their_previous_slot_left(mode: str) -> None:
    problems: list[str] = []
    calls: collections.Counter = collections.Counter()

    def make(name: str):
        def work(slot: oversub.Slot) -> None:
            i = calls[name]
            calls[name] += 1
            where = f"{name}#{i}"
            if slot.component != name or slot.instance != i:
                problems.append(f"{where}: slot says {slot.component}#{slot.instance}")
            if not slot.active or not slot.planned_start_s < slot.deadline_s or slot.is_init:
                problems.append(f"{where}: bad timing {slot.planned_start_s} {slot.deadline_s}")
            if not 0.0 <= slot.remaining_s() < 1.0 or not isinstance(slot.overrun(), bool):
                problems.append(f"{where}: remaining {slot.remaining_s()}")
            expected = ("state", "weights") if name == "A" else ("state",)
            if tuple(slot.buffers) != expected or slot.buffer_names != expected:
                problems.append(f"{where}: buffers {list(slot.buffers)}")
            state = slot.buffers["state"]
            if state.dtype != np.uint8 or state.shape != (MIB,) or not state.flags.writeable:
                problems.append(f"{where}: state is {state.dtype} {state.shape} {state.flags.writeable}")
            want = np.zeros(MIB, np.uint8) if i == 0 else pattern(name, i - 1)
            if not np.array_equal(state, want):
                problems.append(f"{where}: state does not hold what slot {i - 1} left")
            state[:] = pattern(name, i)
            if name == "A":
                weights = slot.buffers["weights"]
                if weights.flags.writeable or not slot.is_read_only("weights") or slot.is_read_only("state"):
                    problems.append(f"{where}: weights are writable")
                try:
                    weights[0] = 1
                    problems.append(f"{where}: wrote a read-only buffer")
                except ValueError:
                    pass
                if weights.any():
                    problems.append(f"{where}: weights are not zero")

        return work

    r = run(mode, work={n: make(n) for n in NAMES})
    assert problems == []
    assert r["mode"] == mode
    assert dict(calls) == dict(slots_of(r))
    assert all(calls[n] == 3 for n in NAMES)  # one slot per repetition, warm-up included
    for s in r["slots"]:
        assert s["work_s"] >= 0.0 and s["major_faults"] >= 0
    if mode != "demand":
        assert r["bytes_paged"] > 0


def test_typed_views() -> None:
    seen: dict[str, object] = {}

    def work(slot: oversub.Slot) -> None:
        if slot.instance != 0:
            return
        m = slot.array("state", "float32", (512, 512))
        raw = slot.buffers["state"]
        seen["shape"] = (m.shape, m.dtype.name, m.flags.writeable)
        seen["shares"] = np.shares_memory(m, raw)
        m[0, 0] = 1.5
        seen["bytes"] = bytes(raw[:4]) == np.float32(1.5).tobytes()
        seen["whole"] = slot.array("state", np.float64).shape
        seen["prefix"] = slot.array("state", "int16", 10).shape
        seen["minus_one"] = slot.array("state", "float32", (-1, 256)).shape
        seen["weights"] = slot.array("weights", "float32", (4, 4)).flags.writeable
        for bad in [lambda: slot.array("state", "float32", (1024, 1024)), lambda: slot.array("state", "V3")]:
            try:
                bad()
                seen.setdefault("unrefused", 0)
            except errors.ViewError as e:
                seen.setdefault("refused", []).append(str(e))
        try:
            slot.array("nope", "uint8")
        except KeyError as e:
            seen["unknown"] = str(e)

    r = run(work={"A": work, **{n: oversub.NOOP for n in NAMES[1:]}})
    assert r["slots"]
    assert seen["shape"] == ((512, 512), "float32", True)
    assert seen["shares"] is True and seen["bytes"] is True
    assert seen["whole"] == (MIB // 8,)
    assert seen["prefix"] == (10,)
    assert seen["minus_one"] == (1024, 256)
    assert seen["weights"] is False
    assert "unrefused" not in seen
    assert len(seen["refused"]) == 2
    assert "4194304 bytes" in seen["refused"][0] and "A.state" in seen["refused"][0]
    assert "whole number" in seen["refused"][1]
    assert "nope" in seen["unknown"] and "state, weights" in seen["unknown"]


def test_memoryview_and_dlpack_exports() -> None:
    seen: dict[str, object] = {}

    def work(slot: oversub.Slot) -> None:
        if slot.instance != 0:
            return
        v = slot.view("state")
        seen["view"] = (v.name, v.nbytes, len(v), v.readonly)
        with memoryview(v) as mv:
            seen["mv"] = (mv.nbytes, mv.readonly, mv.format)
            mv[0] = 42
        x = np.from_dlpack(v)
        seen["dlpack"] = (x.shape, x.dtype.name, int(x[0]))
        w = np.from_dlpack(slot.view("weights"))
        seen["dlpack_ro"] = w.flags.writeable
        seen["device"] = v.__dlpack_device__()
        with memoryview(slot.view("weights")) as mw:
            seen["mw_ro"] = mw.readonly
        try:
            import torch  # noqa: PLC0415

            t = torch.from_dlpack(v)
            seen["torch"] = (tuple(t.shape), int(t[0]))
            del t
        except ImportError:
            pass

    run(work={"A": work, **{n: oversub.NOOP for n in NAMES[1:]}})
    assert seen["view"] == ("state", MIB, MIB, False)
    assert seen["mv"] == (MIB, False, "B")
    assert seen["dlpack"] == ((MIB,), "uint8", 42)
    assert seen["dlpack_ro"] is False
    assert seen["mw_ro"] is True
    assert seen["device"] == (1, 0)
    if "torch" in seen:
        assert seen["torch"] == ((MIB,), 42)


def test_one_dict_of_works_serves_every_mode() -> None:
    calls: collections.Counter = collections.Counter()

    def work(slot: oversub.Slot) -> None:
        calls[(slot.component, slot.instance)] += 1
        slot.buffers["state"][:8] = slot.instance

    r = run("all", work={n: work for n in NAMES}, hyperperiods=1, warmup=0)
    assert set(r["modes"]) == set(MODES)
    for m in MODES:
        assert dict(slots_of(r["modes"][m])) == {n: 1 for n in NAMES}
    assert calls == {(n, 0): 3 for n in NAMES}


def test_python_work_beside_built_in_work_and_noop() -> None:
    text = config({"D": "{ sleep_ms = 2 }", "E": "{ spin_ms = 2 }", "C": "{ wcet_ms = 5 }"})
    calls: collections.Counter = collections.Counter()

    def work(slot: oversub.Slot) -> None:
        calls[slot.component] += 1

    # D keeps its built-in work; E's is replaced by Python code; C runs the Rust no-op.
    r = run(text=text, work={"A": work, "B": work, "C": oversub.NOOP, "E": work}, inflate=1.5)
    assert dict(calls) == {"A": 3, "B": 3, "E": 3}
    assert dict(slots_of(r)) == {n: 3 for n in NAMES}
    assert repr(oversub.NOOP) == "oversub.NOOP"


def test_init_fills_the_buffers_before_the_run() -> None:
    problems: list[str] = []

    def init(slot: oversub.Slot) -> None:
        if not slot.is_init or slot.is_read_only("weights"):
            problems.append("init: not an init, or weights not writable")
        slot.buffers["state"][:] = pattern("A", -1)
        slot.buffers["weights"][:] = 7

    def work(slot: oversub.Slot) -> None:
        if slot.instance == 0 and not np.array_equal(slot.buffers["state"], pattern("A", -1)):
            problems.append("slot 0 does not see the init's state")
        if not (slot.buffers["weights"] == 7).all():
            problems.append(f"slot {slot.instance} does not see the init's weights")
        slot.buffers["state"][:] = pattern("A", slot.instance)

    for mode in MODES:
        run(mode, work={"A": work, **{n: oversub.NOOP for n in NAMES[1:]}}, init={"A": init})
        assert problems == [], mode


# --- errors --------------------------------------------------------------------------------------------------------


def test_an_exception_stops_the_run_and_is_raised_naming_the_slot() -> None:
    calls: collections.Counter = collections.Counter()

    def work(slot: oversub.Slot) -> None:
        calls[slot.component] += 1
        held = slot.buffers["state"]  # in the traceback's frame: the exception must still win
        if slot.component == "B" and slot.instance == 1:
            raise ValueError(f"boom at {held.shape}")

    with pytest.raises(errors.RunError) as ei:
        run(work={n: work for n in NAMES})
    e = ei.value
    assert "component B" in str(e) and "slot 1" in str(e) and "ValueError: boom" in str(e)
    assert isinstance(e.__cause__, ValueError) and str(e.__cause__) == f"boom at {(MIB,)}"
    assert (e.component, e.instance, e.hyperperiod) == ("B", 1, 1)
    assert e.planned_start_s == pytest.approx(0.075 + 0.025)
    assert calls["B"] == 2
    del e, ei
    gc.collect()
    # The pool and the store were given back: the same run again succeeds.
    r = run(work={n: (lambda slot: None) for n in NAMES})
    assert dict(slots_of(r)) == {n: 3 for n in NAMES}


def test_keyboard_interrupt_in_a_work_stops_the_run() -> None:
    def work(slot: oversub.Slot) -> None:
        if slot.component == "D":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as ei:
        run(work={n: work for n in NAMES})
    assert any("component D" in note for note in getattr(ei.value, "__notes__", []))


def test_ctrl_c_during_a_run_stops_it_at_the_next_python_slot(ctrl_c) -> None:
    calls: collections.Counter = collections.Counter()

    def work(slot: oversub.Slot) -> None:
        calls[slot.component] += 1
        if sum(calls.values()) == 10:
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C: the caller's thread sees it while it waits

    hyperperiods = 40
    with pytest.raises(KeyboardInterrupt):
        run(work={n: work for n in NAMES}, hyperperiods=hyperperiods)
    assert 10 <= sum(calls.values()) < 5 * (hyperperiods + 1)


def test_a_view_kept_after_the_slot_stops_the_run() -> None:
    stash: list = []

    def work(slot: oversub.Slot) -> None:
        if slot.component == "C" and slot.instance == 1:
            stash.append(slot.buffers["state"][10:20])  # a derived array keeps the export too

    with pytest.raises(errors.RunError, match="still alive") as ei:
        run(work={n: work for n in NAMES})
    assert "C.state" in str(ei.value)
    del ei
    stash.clear()
    r = run(work={n: oversub.NOOP for n in NAMES})
    assert dict(slots_of(r)) == {n: 3 for n in NAMES}


def test_a_kept_slot_view_or_mapping_is_dead_after_the_slot() -> None:
    kept: dict[str, object] = {}

    def work(slot: oversub.Slot) -> None:
        if slot.component == "A" and slot.instance == 0:
            kept["slot"] = slot
            kept["view"] = slot.view("state")
            kept["mapping"] = slot.buffers  # emptied when the slot ends, so it holds nothing

    run(work={n: work for n in NAMES})
    slot = kept["slot"]
    assert not slot.active and slot.component == "A" and slot.instance == 0
    assert len(kept["mapping"]) == 0
    for call in (lambda: slot.buffers, lambda: slot.array("state", "uint8"), lambda: slot.view("state")):
        with pytest.raises(errors.ViewError, match="is over"):
            call()
    with pytest.raises(RuntimeError, match="is over"):
        slot.remaining_s()
    with pytest.raises(errors.ViewError, match="is over"):
        memoryview(kept["view"])
    with pytest.raises(errors.ViewError, match="is over"):
        np.from_dlpack(kept["view"])
    assert "over" in repr(slot)


def test_a_coroutine_function_is_refused() -> None:
    async def work(slot: oversub.Slot) -> None:
        pass

    with pytest.raises(errors.RunError, match="async def") as ei:
        run(work={n: work for n in NAMES})
    assert isinstance(ei.value.__cause__, TypeError)


def test_bad_registrations() -> None:
    noop = {n: oversub.NOOP for n in NAMES}
    with pytest.raises(errors.ConfigError, match='no component "Z"') as ei:
        run(work={**noop, "Z": oversub.NOOP})
    assert "A, B, C, D, E" in str(ei.value)
    with pytest.raises(errors.ConfigError, match='init=.*no component "Y"'):
        run(work=noop, init={"Y": lambda slot: None})
    with pytest.raises(errors.ConfigError, match="no work for components B, E"):
        run(work={"A": oversub.NOOP, "C": oversub.NOOP, "D": oversub.NOOP})
    with pytest.raises(errors.ConfigError, match="no work for components A, B, C, D, E"):
        run()
    with pytest.raises(TypeError, match=r'work\["A"\] must be callable'):
        run(work={**noop, "A": 3})
    with pytest.raises(TypeError, match="must be callable"):
        run(work={**noop, "A": None})
    with pytest.raises(TypeError, match="must be a dict"):
        run(work=[("A", oversub.NOOP)])
    with pytest.raises(TypeError, match="names must be strings"):
        run(work={1: oversub.NOOP})
    with pytest.raises(ValueError, match="inflate"):
        run(work=noop, inflate=0.0)
