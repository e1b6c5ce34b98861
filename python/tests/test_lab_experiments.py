"""Each experiment of the lab from Python, at a tiny size, and its options declared once: Python's defaults are the
lab's (the CLI's are held to the same by the CLI's tests), an option is refused as the command refuses it."""

import inspect

import pytest

import oversub
from oversub import _oversub
from oversub.lab import interference, paging, tasks, tenants


def test_paging_takes_every_default_from_the_lab():
    # Python spells no default of its own: None means the lab's PagingOptions::default(), the CLI's defaults.
    for name, p in inspect.signature(paging.bench).parameters.items():
        if p.kind is not p.VAR_KEYWORD:
            assert p.default is None, name
    native = inspect.signature(_oversub.lab_paging).parameters
    assert all(p.default is None for n, p in native.items() if n != "store")
    # The native keywords are the command's flags (two switches read the other way round).
    renamed = {"no_checksums": "checksums", "no_cufile": "cufile"}
    flags = {renamed.get(n, n) for n in paging.defaults()}
    assert flags == set(native)
    d = paging.defaults()
    assert (oversub.parse_size(d["size"]), d["samples"], d["engine"]) == (1 << 30, "20", "auto")


@pytest.mark.parametrize("module", [tenants, interference, tasks])
def test_defaults_are_the_commands(module):
    d = module.defaults()
    assert d and all(isinstance(k, str) for k in d)
    assert d["quick"] is False if "quick" in d else True
    with pytest.raises(TypeError, match="is not an option of"):
        module.run(no_such_option=1)


def test_enum_options_list_the_accepted_names(tmp_path):
    with pytest.raises(ValueError, match="is not one of auto, uring, psync") as info:
        oversub.lab.paging("4MiB", 1, store=tmp_path, engine="warp")
    assert any("engine" in n for n in getattr(info.value, "__notes__", []))
    with pytest.raises(ValueError, match="invalid value 'lots'"):
        tenants.run(priorities="lots")
    assert tenants.defaults()["priorities"] == "measured"
    assert interference.defaults()["interferers"] == ["paging", "paging-dontneed", "copy", "copy-nt"]


def test_tenants_runs_at_a_tiny_size(tmp_path):
    r = oversub.lab.tenants(
        demand="8MiB", buffer="1MiB", compute=["1ms", "2ms"], rounds=1, samples=1, priorities="given",
        no_priority_io=True, store_dir=tmp_path,
    )
    assert r["tenants"] == 3 and len(r["rows"]) == 3
    assert all(row["alone_s"] > 0 for row in r["rows"])


def test_interference_runs_at_a_tiny_size(tmp_path):
    r = oversub.lab.interference(
        quick=True, measure="100ms", llc="2MiB", paging_buffer="2MiB", data="8MiB", iterations=6, rounds=2,
        placement="separate", interferers=["copy"], store=[tmp_path],
    )
    assert r["thrashing"] and r["prem"] is not None


def test_tasks_runs_the_built_in_case_at_a_tiny_size(tmp_path):
    try:
        # The worker is a Python interpreter (tens of MiB): the emulated memory must hold three of them.
        r = oversub.lab.tasks(size="4MiB", passes=1, warmup=0, priorities="given", capacity="768MiB", dir=tmp_path)
    except (oversub.errors.Error, OSError) as e:
        if "cgroup" in str(e).lower():
            pytest.skip(f"no usable memory cgroup controller here: {e}")
        raise
    assert len(r["tasks"]) == 3
