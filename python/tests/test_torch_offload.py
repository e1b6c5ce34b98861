"""oversub.torch: models whose weights do not fit, paged in group by group in an order learned from the first pass
(skipped without torch)."""

from __future__ import annotations

import gc
import os
import threading

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numpy")

from torch import nn  # noqa: E402

import oversub  # noqa: E402
import oversub.torch as ot  # noqa: E402

D = 64
LIN = D * D * 4 + D * 4  # bytes of one Linear(D, D): weight + bias (bias at a 64-byte aligned offset)
BLOCK = 4096 * ((LIN + 4095) // 4096)  # what one block's buffer reserves in the pool

@pytest.fixture(autouse=True)
def _fixed_lookahead(monkeypatch):
    """lookahead="auto" keeps the depth the capacity allows: its choice between that and on demand follows the
    measured read and compute times (test_auto_lookahead_follows_read_against_compute gives it measurements), which
    a test must not depend on."""
    monkeypatch.setattr(ot.Offloaded, "_measured", lambda self: None)


class Block(nn.Module):
    def __init__(self, d: int = D):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x):
        return torch.tanh(self.lin(x))


class Stack(nn.Module):
    """Blocks in a ModuleList, a small resident head; ``exit_after`` makes an early exit (a divergent pass)."""

    def __init__(self, n: int = 6, d: int = D):
        super().__init__()
        self.blocks = nn.ModuleList([Block(d) for _ in range(n)])
        self.norm = nn.LayerNorm(d)
        self.exit_after: int | None = None

    def forward(self, x):
        for i, b in enumerate(self.blocks):
            x = b(x)
            if self.exit_after is not None and i == self.exit_after:
                break
        return self.norm(x)


def _model(n=6, seed=0):
    torch.manual_seed(seed)
    return Stack(n)


def _ref(model, x):
    with torch.no_grad():
        return model(x).clone()


@pytest.fixture
def x():
    return torch.randn(3, D, generator=torch.Generator().manual_seed(1))


def test_linear_stack_bit_identical_and_trace_learned(tmp_path, x):
    m = _model()
    ref = _ref(m, x)
    h = ot.offload(m, capacity=3 * BLOCK, store=tmp_path)
    assert [g.name for g in h.groups] == [f"blocks.{i}" for i in range(6)]
    assert all(p.requires_grad is False for p in m.blocks.parameters())
    with torch.no_grad():
        for _ in range(3):
            assert torch.equal(m(x), ref)
    s = ot.stats(m)
    assert s["passes"] == 3 and s["traces_recorded"] == 1 and s["divergences"] == 0
    assert s["trace"] == [f"blocks.{i}" for i in range(6)]
    assert s["page_ins_on_demand"] == 6  # the first pass, which records the order
    assert s["page_ins_prefetched"] > 0 and s["last_pass"]["page_ins_on_demand"] == 0
    assert s["last_pass"]["followed_trace"] is True
    assert s["bytes_written"] == s["offloaded_bytes"]
    assert set(s["wait_s_per_group"]) == {f"blocks.{i}" for i in range(6)}
    assert 0.0 <= s["paging_hidden"] <= 1.0
    assert h.pool.used_bytes <= 3 * BLOCK


def test_paged_out_weights_hold_no_memory_and_views_are_zero_copy(tmp_path, x):
    m = _model(4)
    h = ot.offload(m, capacity=2 * BLOCK, store=tmp_path, lookahead=0)
    w = m.blocks[0].lin.weight
    assert w.shape == (D, D) and w.dtype == torch.float32
    assert w.stride() == (0, 0) and torch.isnan(w).all()  # a NaN broadcast: no memory, and a use shows
    with torch.no_grad():
        m(x)
    g = h.groups[3]  # the last block ran last and is resident: its tensors are views into its buffer
    assert g.state == "resident" and g.buf.state == "resident"
    assert m.blocks[3].lin.weight.data_ptr() == g.buf.address
    assert m.blocks[3].lin.bias.data_ptr() == g.buf.address + D * D * 4
    assert m.blocks[3].lin.bias.data_ptr() % 64 == 0


def test_divergent_pass_falls_back_and_rerecords(tmp_path, x):
    m = _model()
    ref_full = _ref(m, x)
    m.exit_after = 2
    ref_short = _ref(m, x)
    m.exit_after = None
    ot.offload(m, capacity=3 * BLOCK, store=tmp_path)
    with torch.no_grad():
        assert torch.equal(m(x), ref_full)  # records
        assert torch.equal(m(x), ref_full)  # follows
        assert ot.stats(m)["last_pass"]["followed_trace"]
        m.exit_after = 2  # early exit: the trace is not followed to its end
        assert torch.equal(m(x), ref_short)
        s = ot.stats(m)
        assert s["divergences"] == 1 and s["traces_recorded"] == 2
        assert s["trace"] == ["blocks.0", "blocks.1", "blocks.2"]
        assert torch.equal(m(x), ref_short)  # follows the new trace
        assert ot.stats(m)["last_pass"]["followed_trace"]
        m.exit_after = None  # runs past the trace's end: diverges, on demand for the rest, re-recorded
        assert torch.equal(m(x), ref_full)
        s = ot.stats(m)
        assert s["divergences"] == 2 and s["traces_recorded"] == 3 and len(s["trace"]) == 6
        assert s["last_pass"]["page_ins_on_demand"] >= 3


def test_belady_keeps_the_part_that_fits(tmp_path, x):
    """4 blocks, room for 3, the order given, no prefetch: the victim is the block used furthest in the future, so
    a pass pages in one or two blocks where LRU would page in all four."""
    m = _model(4)
    ref = _ref(m, x)
    h = ot.offload(m, capacity=3 * BLOCK, store=tmp_path, lookahead=0, order=[f"blocks.{i}" for i in range(4)])
    nbytes = h.groups[0].nbytes
    with torch.no_grad():
        assert torch.equal(m(x), ref)
        # pass 1: 0, 1, 2 fill the pool; 3 evicts 2 (next uses at 4, 5, 6: 2 is furthest)
        assert sorted(ot.stats(m)["resident_groups"]) == ["blocks.0", "blocks.1", "blocks.3"]
        # pass 2: 2 evicts 1 (0 is next used at 4, 1 at 5, 3 at 3); pass 3: 1 evicts 0; pass 4: 0 evicts 3, then 3
        # evicts 2, back to the state after pass 1: 4 page-ins in 3 passes, the optimum for a cycle of 4 in room for 3
        expected = [(1, ["blocks.0", "blocks.2", "blocks.3"]), (1, ["blocks.1", "blocks.2", "blocks.3"]),
                    (2, ["blocks.0", "blocks.1", "blocks.3"])]
        for misses, want in expected:
            assert torch.equal(m(x), ref)
            s = ot.stats(m)
            assert s["last_pass"]["page_ins_on_demand"] == misses
            assert s["last_pass"]["bytes_paged_in"] == misses * nbytes
            assert sorted(s["resident_groups"]) == want
    # With prefetching (lookahead auto) the same model reads at most 2 blocks a pass once the order is known.
    ot.restore(m)
    ot.offload(m, capacity=3 * BLOCK, store=tmp_path)
    with torch.no_grad():
        for _ in range(4):
            assert torch.equal(m(x), ref)
            last = ot.stats(m)["last_pass"]
    assert last["bytes_paged_in"] <= 2 * nbytes and last["page_ins_on_demand"] == 0


def test_leaf_and_callable_groups(tmp_path, x):
    m = _model(3)
    ref = _ref(m, x)
    h = ot.offload(m, capacity=2 * BLOCK, store=tmp_path, group="leaf")
    assert [g.name for g in h.groups] == ["blocks.0.lin", "blocks.1.lin", "blocks.2.lin", "norm"]
    with torch.no_grad():
        assert torch.equal(m(x), ref) and torch.equal(m(x), ref)
    ot.restore(m)
    h = ot.offload(m, capacity=4 * BLOCK, store=tmp_path, group=lambda mod: [mod.blocks[0], mod.blocks[2]],
                   keep=["blocks.2"])
    assert [g.name for g in h.groups] == ["blocks.0"]
    assert h.kept_bytes > 0
    with torch.no_grad():
        assert torch.equal(m(x), ref)


def test_transformer_bit_identical(tmp_path):
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except Exception:  # noqa: BLE001 (not installed, or an incompatible version)
        LlamaForCausalLM = None
    torch.manual_seed(0)
    if LlamaForCausalLM is not None:
        cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                          num_key_value_heads=4, vocab_size=256, max_position_embeddings=64)
        m = LlamaForCausalLM(cfg).eval()
        inp = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(3))

        def run():
            return m(inp).logits
    else:
        layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
        m = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).eval()
        inp = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(3))

        def run():
            return m(inp)
    with torch.no_grad():
        ref = run().clone()
    layer_bytes = max(sum(p.numel() * 4 for p in blk.parameters()) for blk in _largest_list(m))
    h = ot.offload(m, capacity=2 * layer_bytes + (1 << 20), store=tmp_path)
    assert len(h.groups) >= 4
    with torch.no_grad():
        for _ in range(3):
            assert torch.equal(run(), ref)
    s = ot.stats(m)
    assert s["traces_recorded"] == 1 and s["last_pass"]["followed_trace"]
    ot.restore(m)
    with torch.no_grad():
        assert torch.equal(run(), ref)


def _largest_list(m):
    lists = [c for c in m.modules() if isinstance(c, (nn.ModuleList, nn.Sequential))]
    return max(lists, key=lambda c: sum(p.numel() for p in c.parameters()))


def test_group_larger_than_capacity_is_refused_before_anything_moves(tmp_path, x):
    m = _model(3)
    ref = _ref(m, x)
    w = m.blocks[1].lin.weight
    with pytest.raises(ot.GroupTooLargeError, match="group blocks.0 \\(Block\\)") as e:
        ot.offload(m, capacity=BLOCK // 2, store=tmp_path)
    assert isinstance(e.value, MemoryError) and isinstance(e.value, oversub.Error)
    assert not ot.is_offloaded(m) and m.blocks[1].lin.weight is w and w.requires_grad
    with torch.no_grad():
        assert torch.equal(m(x), ref)


def test_store_too_small(tmp_path, x):
    m = _model(4)
    ref = _ref(m, x)
    with pytest.raises(ot.StoreTooSmallError, match="blocks.2 is the first that does not fit"):
        ot.offload(m, capacity=2 * BLOCK, store=tmp_path, store_capacity=2 * BLOCK)
    assert not ot.is_offloaded(m)
    with torch.no_grad():
        assert torch.equal(m(x), ref)


def test_store_full_midway_loses_nothing(tmp_path, x, monkeypatch):
    """The up-front check passed but the store filled up while the weights were written: the model is put back."""
    m = _model(4)
    ref = _ref(m, x)
    real_round = ot._round_up
    monkeypatch.setattr(ot, "_round_up", lambda n, a: real_round(n, a) // 4 if a == 4096 else real_round(n, a))
    with pytest.raises(ot.StoreTooSmallError, match="the store is full at group"):
        ot.offload(m, capacity=2 * BLOCK, store=tmp_path, store_capacity=2 * BLOCK)
    monkeypatch.undo()
    assert not ot.is_offloaded(m)
    assert all(p.stride() != (0, 0) for p in m.parameters())
    with torch.no_grad():
        assert torch.equal(m(x), ref)


def test_restore_gives_back_an_ordinary_model(tmp_path, x):
    m = _model(4)
    ref = _ref(m, x)
    w = m.blocks[2].lin.weight
    h = ot.offload(m, capacity=2 * BLOCK, store=tmp_path)
    with torch.no_grad():
        m(x)
        m(x)  # some groups resident, some paged out, maybe a prefetch in flight
    pool = h.pool
    assert ot.restore(m) is m
    assert not ot.is_offloaded(m) and pool.used_bytes == 0
    assert m.blocks[2].lin.weight is w and w.requires_grad and w.is_contiguous()
    assert all(len(b._forward_pre_hooks) == 0 and len(b._forward_hooks) == 0 for b in m.blocks)
    with torch.no_grad():
        assert torch.equal(m(x), ref)
    with pytest.raises(ot.NotOffloadedError):
        ot.stats(m)


def test_parameter_replaced_behind_oversubs_back(tmp_path, x):
    m = _model(3)
    ot.offload(m, capacity=2 * BLOCK, store=tmp_path)
    with torch.no_grad():
        m(x)
        m.blocks[1].lin.weight = nn.Parameter(torch.zeros(D, D))
        with pytest.raises(ot.TensorReplacedError, match="blocks.1.lin.weight of group blocks.1"):
            m(x)
        del m.blocks[1].lin._parameters["weight"]
        m.blocks[1].lin.weight = ot._handle(m).groups[1].slots[0].tensor  # put oversub's back: runs again
        m(x)
        m.blocks[0].lin.bias.data = torch.ones(D)
        with pytest.raises(ot.TensorReplacedError, match="had its data replaced"):
            m(x)


def test_called_from_two_threads_at_once(tmp_path, x):
    m = _model(3)
    ot.offload(m, capacity=2 * BLOCK, store=tmp_path)
    inside, release = threading.Event(), threading.Event()

    def slow(mod, args):
        inside.set()
        release.wait(10)

    hook = m.blocks[1].register_forward_pre_hook(slow)
    errors: list[BaseException] = []

    def first():
        try:
            with torch.no_grad():
                m(x)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=first)
    t.start()
    assert inside.wait(10)
    with pytest.raises(ot.ConcurrentUseError, match="Stack"):
        with torch.no_grad():
            m(x)
    with pytest.raises(ot.ConcurrentUseError, match="blocks.2"):
        with torch.no_grad():
            m.blocks[2](x)
    release.set()
    t.join(10)
    hook.remove()
    assert not errors
    with torch.no_grad():
        m(x)  # the model is usable again from this thread


def test_a_kept_view_blocks_release_with_a_clear_error(tmp_path, x):
    m = _model(3)
    ot.offload(m, capacity=2 * BLOCK, store=tmp_path, lookahead=0)
    with torch.no_grad():
        m.blocks[0](x)
        kept = m.blocks[0].lin.weight[0]  # a view of block 0's buffer
        m.blocks[1](x)
        with pytest.raises(ot.WeightsInUseError, match="group blocks.0"):
            m.blocks[2](x)  # needs block 0's room
        del kept
        gc.collect()
        m.blocks[2](x)


def test_inference_only(tmp_path):
    with pytest.raises(NotImplementedError, match="inference"):
        ot.offload(_model(2), capacity=4 * BLOCK, store=tmp_path, trainable=True)


def test_grad_mode_warns(tmp_path, x):
    m = _model(2)
    ot.offload(m, capacity=2 * BLOCK, store=tmp_path)
    with pytest.warns(UserWarning, match="no_grad"):
        m(x.requires_grad_())


def test_checkpoint_into_a_meta_model(tmp_path, x):
    st = pytest.importorskip("safetensors.torch")
    m = _model(5, seed=7)
    ref = _ref(m, x)
    path = tmp_path / "model.safetensors"
    st.save_file({k: v.contiguous() for k, v in m.state_dict().items()}, str(path))
    with torch.device("meta"):
        empty = Stack(5)
    h = ot.offload(empty, capacity=2 * BLOCK, store=tmp_path, checkpoint=path)
    assert all(p.device.type == "cpu" for p in empty.parameters())
    assert empty.norm.weight.device.type == "cpu"  # resident, loaded from the checkpoint
    with torch.no_grad():
        for _ in range(2):
            assert torch.equal(empty(x), ref)
    assert h.stats()["load_s"] > 0
    ot.restore(empty)
    with torch.no_grad():
        assert torch.equal(empty(x), ref)
    # a checkpoint that lacks a tensor: a clear error, nothing offloaded
    st.save_file({k: v for k, v in m.state_dict().items() if k != "blocks.3.lin.bias"}, str(path))
    with torch.device("meta"):
        empty = Stack(5)
    with pytest.raises(ot.CheckpointError, match="blocks.3.lin.bias is not in the checkpoint"):
        ot.offload(empty, capacity=2 * BLOCK, store=tmp_path, checkpoint=path)
    with torch.device("meta"):
        empty = Stack(5)
    with pytest.raises(ot.CheckpointError, match="meta device and no checkpoint"):
        ot.offload(empty, capacity=2 * BLOCK, store=tmp_path)


def test_the_checkpoint_is_the_store(tmp_path, x):
    """Groups whose tensors lie together in the safetensors file page in from the file itself: nothing is written
    to oversub's store at start-up or later, the file is never modified, and the outputs are the resident model's."""
    st = pytest.importorskip("safetensors.torch")
    m = _model(6, seed=3)
    ref = _ref(m, x)
    path = tmp_path / "model.safetensors"
    st.save_file({k: v.contiguous() for k, v in m.state_dict().items()}, str(path))
    before = (path.stat().st_mtime_ns, path.read_bytes())
    with torch.device("meta"):
        empty = Stack(6)
    h = ot.offload(empty, capacity=3 * BLOCK, store=tmp_path / "store", checkpoint=path)
    s = ot.stats(empty)
    # Every group but the one in the file's last, partial 4 KiB block (a direct read cannot end there): that one
    # is copied into the store.
    in_file = [g.external is not None for g in h.groups]
    assert in_file == [True] * 5 + [False] and s["groups_in_checkpoint"] == 5
    assert s["bytes_written"] == h.groups[5].nbytes
    with torch.no_grad():
        for _ in range(3):
            assert torch.equal(empty(x), ref)
    s = ot.stats(empty)
    assert s["page_ins_prefetched"] > 0 and s["bytes_paged_in"] > 0
    assert h.pool.stats()["store_capacity_bytes"] - h.pool.stats()["store_free_bytes"] <= 2 * BLOCK
    assert h.pool.store_alignment in (512, 1024, 2048, 4096)
    ot.restore(empty)
    with torch.no_grad():
        assert torch.equal(empty(x), ref)
    assert (path.stat().st_mtime_ns, path.read_bytes()) == before

    # copy_checkpoint=True: the old way, every group copied into the store
    with torch.device("meta"):
        empty = Stack(6)
    ot.offload(empty, capacity=3 * BLOCK, store=tmp_path / "store", checkpoint=path, copy_checkpoint=True)
    s = ot.stats(empty)
    assert s["groups_in_checkpoint"] == 0 and s["bytes_written"] > 0
    with torch.no_grad():
        assert torch.equal(empty(x), ref)


def test_groups_the_file_cannot_back_are_copied(tmp_path, x):
    """A group whose tensors the file holds in another dtype than the model's (read and converted) is copied into
    the store; the others still read the file."""
    st = pytest.importorskip("safetensors.torch")
    m = _model(4, seed=5)
    ref = _ref(m, x)
    sd = {k: v.contiguous() for k, v in m.state_dict().items()}
    sd["blocks.2.lin.weight"] = sd["blocks.2.lin.weight"].double()  # another dtype: read and converted
    path = tmp_path / "model.safetensors"
    st.save_file(sd, str(path))
    with torch.device("meta"):
        empty = Stack(4)
    h = ot.offload(empty, capacity=2 * BLOCK, store=tmp_path / "store", checkpoint=path)
    in_file = [g.external is not None for g in h.groups]
    assert in_file[2] is False and in_file[0] and in_file[1]
    assert ot.stats(empty)["groups_in_checkpoint"] == sum(in_file)
    with torch.no_grad():
        assert torch.equal(empty(x), ref)


def test_a_checkpoint_modified_under_the_model_is_an_error(tmp_path, x):
    st = pytest.importorskip("safetensors.torch")
    m = _model(4, seed=9)
    path = tmp_path / "model.safetensors"
    st.save_file({k: v.contiguous() for k, v in m.state_dict().items()}, str(path))
    with torch.device("meta"):
        empty = Stack(4)
    ot.offload(empty, capacity=2 * BLOCK, store=tmp_path / "store", checkpoint=path, lookahead=0)
    with torch.no_grad():
        empty(x)
    with open(path, "ab") as f:
        f.write(b"changed")
    with torch.no_grad(), pytest.raises(oversub.ExternalChangedError, match="changed after oversub opened it"):
        empty(x)


def test_offload_benchmark_runs_end_to_end(tmp_path):
    """`python -m oversub.bench offload` at a tiny size: oversub beside the floor and the mmap'd file, outputs equal
    (no timing is asserted)."""
    pytest.importorskip("safetensors")
    import json
    import subprocess
    import sys

    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "oversub.bench", "offload", "--models", "linear", "--layers", "4", "--layer-size",
           "256KiB", "--batch", "4", "--capacity-layers", "2", "--passes", "2", "--no-drop-caches",
           "--methods", "resident,oversub-demand,oversub-learned,mmap-safetensors", "--store", str(tmp_path),
           "--lookahead", "1", "--json", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "oversub-learned" in p.stdout and "x oversub" in p.stdout
    rows = {r["method"]: r for r in json.loads(out.read_text())["models"]["linear"]["rows"]}
    assert set(rows) == {"resident", "oversub-demand", "oversub-learned", "mmap-safetensors"}
    for name in ("oversub-demand", "oversub-learned", "mmap-safetensors"):
        assert rows[name]["output"] == "equal", rows[name]
        assert len(rows[name]["pass_s"]) == 2
    assert rows["oversub-learned"]["oversub"]["page_ins_prefetched"] > 0


def test_offload_benchmark_generate_beside_accelerate(tmp_path):
    """`--models generate`: a Llama written with save_pretrained, a greedy generate per pass, oversub beside
    accelerate's device_map="auto" (its configuration in the JSON), the same tokens as the resident model; in a
    memory cgroup where this runs as root with a memory controller (no timing is asserted)."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    import json
    import subprocess
    import sys

    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "oversub.bench", "offload", "--models", "generate", "--tf-layers", "2",
           "--tf-hidden", "128", "--tf-intermediate", "256", "--tf-vocab", "1000", "--gen-tokens", "3",
           "--passes", "1", "--capacity-fraction", "0.34", "--no-drop-caches", "--store", str(tmp_path),
           "--methods", "resident,oversub-learned,accelerate-auto,double-buffer,accelerate-cpu-offload", "--json",
           str(out)]
    with open("/proc/self/cgroup") as f:
        cgroup = os.geteuid() == 0 and os.path.isdir("/sys/fs/cgroup/memory") and ":memory:" in f.read()
    if cgroup:
        cmd += ["--memory-limit", "4GiB"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "ms a token" in p.stdout
    rep = json.loads(out.read_text())
    rows = {r["method"]: r for r in rep["models"]["generate"]["rows"]}
    assert set(rows) == {"resident", "oversub-learned", "accelerate-auto", "double-buffer", "accelerate-cpu-offload"}
    for name in ("oversub-learned", "accelerate-auto", "double-buffer"):  # the double buffer's hooks, on the CPU
        assert rows[name]["output"] == "equal", rows[name]
        assert rows[name]["prefill_s"] > 0 and rows[name]["decode_s_per_token"] >= 0
    assert rows["accelerate-cpu-offload"]["skipped"].startswith("not on cpu")
    assert "prefill" in p.stdout and "decode" in p.stdout
    cfg = rows["accelerate-auto"]["info"]["config"]
    assert cfg["from_pretrained"]["device_map"] == "auto" and "disk" in cfg["modules_on"]
    if cgroup:
        assert rep["memory_limit_bytes"] == 4 << 30 and rows["oversub-learned"]["cgroup"]["peak_bytes"] > 0


def test_offload_benchmark_refuses_a_bad_device(tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "oversub.bench", "offload", "--device", "tpu", "--store", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "--device must be cpu or cuda[:N], not 'tpu'" in p.stderr


# --- the host tier (host_memory) -----------------------------------------------------------------------------------


def test_host_tier_holds_the_groups_and_pages_them_in(tmp_path, x):
    """host_memory large enough for every group: each is written to the pool's host tier at load, every page-in
    comes from it, the store holds nothing, and the outputs are the resident model's bit for bit."""
    m = _model(6)
    ref = _ref(m, x)
    h = ot.offload(m, capacity=3 * BLOCK, store=tmp_path, host_memory="1MiB")
    s = ot.stats(m)
    assert s["host_tier_bytes"] == 6 * BLOCK and s["groups_in_host_tier"] == 6
    assert [g.tier for g in h.groups] == ["host"] * 6
    assert h.pool.stats()["host_tier_capacity_bytes"] == 6 * BLOCK
    assert h.pool.stats()["host_tier_used_bytes"] == 6 * BLOCK
    assert h.pool.stats()["store_capacity_bytes"] == h.pool.stats()["store_free_bytes"]
    with torch.no_grad():
        for _ in range(4):
            assert torch.equal(m(x), ref)
    s = ot.stats(m)
    assert s["bytes_paged_in"] > 0 and s["bytes_from_host_tier"] == s["bytes_paged_in"]
    assert s["bytes_from_store"] == 0 and s["last_pass"]["bytes_from_host_tier"] == s["last_pass"]["bytes_paged_in"]
    ot.restore(m)
    with torch.no_grad():
        assert torch.equal(m(x), ref)


def test_host_tier_smaller_than_the_weights(tmp_path, x):
    """A tier with room for two groups takes the first two; the store backs the other four, and stats report the
    bytes paged in from each."""
    m = _model(6)
    ref = _ref(m, x)
    h = ot.offload(m, capacity=3 * BLOCK, store=tmp_path, host_memory=2 * BLOCK + 100)
    assert [g.tier for g in h.groups] == ["host"] * 2 + ["store"] * 4
    assert ot.stats(m)["host_tier_bytes"] == 2 * BLOCK and ot.stats(m)["groups_in_host_tier"] == 2
    with torch.no_grad():
        for _ in range(4):
            assert torch.equal(m(x), ref)
    s = ot.stats(m)
    assert s["bytes_from_host_tier"] > 0 and s["bytes_from_store"] > 0
    assert s["bytes_from_host_tier"] + s["bytes_from_store"] == s["bytes_paged_in"]


def test_host_memory_auto_and_zero(tmp_path, x, monkeypatch):
    """"auto" (the default) is no tier on the CPU backend; 0 is none anywhere; "auto" on a GPU takes MemAvailable
    less an eighth of MemTotal (at least 2 GiB); a negative or malformed size is refused."""
    m = _model(4)
    for hm in ("auto", 0, "0"):
        h = ot.offload(m, capacity=3 * BLOCK, store=tmp_path, host_memory=hm)
        assert ot.stats(m)["host_tier_bytes"] == 0 and {g.tier for g in h.groups} == {"store"}
        assert h.pool.stats().host_tier_capacity_bytes is None
        ot.restore(m)
    GiB = 1 << 30
    real = ot._meminfo()
    assert 0 < real["MemAvailable"] <= real["MemTotal"]
    for avail, total, want in ((10 * GiB, 16 * GiB, 8 * GiB), (10 * GiB, 64 * GiB, 2 * GiB), (GiB, 4 * GiB, 0)):
        monkeypatch.setattr(ot, "_meminfo", lambda a=avail, t=total: {"MemAvailable": a, "MemTotal": t})
        assert ot._auto_host_memory() == want
    monkeypatch.setattr(ot, "_meminfo", lambda: {})
    assert ot._auto_host_memory() == 0
    with pytest.raises(ValueError):
        ot.offload(m, capacity=3 * BLOCK, store=tmp_path, host_memory=-1)
    with pytest.raises(ValueError):
        ot.offload(m, capacity=3 * BLOCK, store=tmp_path, host_memory="lots")
    assert not ot.is_offloaded(m)


def test_a_checkpoint_is_read_once_into_the_host_tier(tmp_path, x):
    """With a tier that holds the weights, the checkpoint is read into it at load (not used in place as the
    store), and every page-in after comes from the tier."""
    st = pytest.importorskip("safetensors.torch")
    m = _model(6, seed=3)
    ref = _ref(m, x)
    path = tmp_path / "model.safetensors"
    st.save_file({k: v.contiguous() for k, v in m.state_dict().items()}, str(path))
    with torch.device("meta"):
        empty = Stack(6)
    h = ot.offload(empty, capacity=3 * BLOCK, store=tmp_path / "store", checkpoint=path, host_memory="1MiB")
    s = ot.stats(empty)
    assert s["groups_in_checkpoint"] == 0 and s["groups_in_host_tier"] == 6
    assert all(g.external is None and g.tier == "host" for g in h.groups)
    with torch.no_grad():
        for _ in range(3):
            assert torch.equal(empty(x), ref)
    s = ot.stats(empty)
    assert s["bytes_from_store"] == 0 and s["bytes_from_host_tier"] == s["bytes_paged_in"] > 0


# --- the residency: a fixed part and a rotating part ------------------------------------------------------------------


def _bytes_per_pass(h, passes):
    return [p["bytes_paged_in"] for p in h.per_pass[-passes:]]


def test_bytes_per_pass_approach_model_less_capacity(tmp_path):
    """24 blocks, a third of them as capacity, lookahead auto (2): once the order is known, a pass reads at most
    1.1 x (model - capacity + the window of two groups the rest rotate through); the groups kept for the whole pass
    are read once and stay resident."""
    d = 256
    torch.manual_seed(0)
    m = Stack(24, d)
    x = torch.randn(4, d, generator=torch.Generator().manual_seed(1))
    ref = _ref(m, x)
    model_bytes = sum(p.numel() * p.element_size() for p in m.blocks.parameters())
    capacity = model_bytes // 3
    h = ot.offload(m, capacity=capacity, store=tmp_path)
    with torch.no_grad():
        for _ in range(3):
            assert torch.equal(m(x), ref)
        before = ot.stats(m)["page_ins_per_group"]
        for _ in range(5):
            assert torch.equal(m(x), ref)
    s = ot.stats(m)
    assert s["lookahead"] == 2 and s["divergences"] == 0
    offloaded = s["offloaded_bytes"]
    window = 2 * max(g.nbytes for g in h.groups)
    bound = 1.1 * (offloaded - capacity + window)
    per_pass = _bytes_per_pass(h, 5)
    assert max(per_pass) <= bound, (per_pass, bound)
    pinned = s["pinned_groups"]
    assert len(pinned) >= 4 and set(pinned) <= set(s["resident_groups"])
    assert all(s["page_ins_per_group"][n] == before[n] for n in pinned)  # not read again once the order is known


class Ends(nn.Module):
    """A large first and last module (an embedding and a head, each two blocks' worth) around blocks."""

    def __init__(self, n: int = 12, d: int = 128):
        super().__init__()
        self.inp = nn.Linear(d, 2 * d)
        self.blocks = nn.ModuleList([Block(d) for _ in range(n)])
        self.out = nn.Linear(2 * d, d)

    def forward(self, x):
        x = self.inp(x)[:, : x.shape[1]]
        for b in self.blocks:
            x = b(x)
        return self.out(torch.cat([x, x], 1))


def test_the_large_groups_at_the_ends_stay_resident(tmp_path):
    torch.manual_seed(0)
    m = Ends()
    x = torch.randn(4, 128, generator=torch.Generator().manual_seed(1))
    ref = _ref(m, x)
    capacity = 2 * sum(p.numel() * p.element_size() for p in m.parameters()) // 5
    h = ot.offload(m, capacity=capacity, store=tmp_path)
    assert {g.name for g in h.groups} >= {"inp", "out"}
    with torch.no_grad():
        for _ in range(3):
            assert torch.equal(m(x), ref)
        before = ot.stats(m)["page_ins_per_group"]
        for _ in range(3):
            assert torch.equal(m(x), ref)
    s = ot.stats(m)
    assert {"inp", "out"} <= set(s["pinned_groups"])
    assert s["page_ins_per_group"]["inp"] == before["inp"] and s["page_ins_per_group"]["out"] == before["out"]
    window = 2 * max(g.nbytes for g in h.groups if not g.pinned)
    assert max(_bytes_per_pass(h, 3)) <= 1.1 * (s["offloaded_bytes"] - capacity + window)


class Twice(nn.Module):
    """Block 0 runs at the start and again at the end of every pass (a group used twice per pass)."""

    def __init__(self, n: int = 8):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(n)])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.blocks[0](x)


def test_a_group_used_twice_per_pass_is_kept_first(tmp_path, x):
    m = Twice()
    ref = _ref(m, x)
    h = ot.offload(m, capacity=4 * BLOCK, store=tmp_path)
    with torch.no_grad():
        for _ in range(2):
            assert torch.equal(m(x), ref)
        before = ot.stats(m)["page_ins_per_group"]["blocks.0"]
        for _ in range(3):
            assert torch.equal(m(x), ref)
    s = ot.stats(m)
    assert s["trace"][0] == s["trace"][-1] == "blocks.0" and s["divergences"] == 0
    assert "blocks.0" in s["pinned_groups"] and s["page_ins_per_group"]["blocks.0"] == before
    assert sum(g.pinned for g in h.groups) == 2  # 4 blocks of room, 2 for the window


def test_no_fixed_part_on_demand(tmp_path, x):
    """With lookahead=0 Belady alone decides (on demand it keeps more than any fixed set)."""
    m = _model(6)
    ot.offload(m, capacity=3 * BLOCK, store=tmp_path, lookahead=0)
    with torch.no_grad():
        for _ in range(3):
            m(x)
    assert ot.stats(m)["pinned_groups"] == []


def test_generate_with_a_kv_cache_keeps_the_order(tmp_path):
    """A Llama's greedy generate (a prefill pass, then one pass per token with the KV cache growing) through the
    host tier and the fixed part of the residency: the same tokens as the resident model, every pass after the
    first follows the learned order, and the groups kept resident are not read again."""
    tf = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
                         num_key_value_heads=4, vocab_size=1024, max_position_embeddings=128)
    m = tf.LlamaForCausalLM(cfg).eval()
    inp = torch.randint(0, 1024, (1, 12), generator=torch.Generator().manual_seed(3))
    kw = dict(max_new_tokens=10, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        ref = m.generate(inp, **kw)
    total = sum(p.numel() * p.element_size() for p in m.parameters())
    h = ot.offload(m, capacity=total // 2, store=tmp_path, host_memory="8MiB")
    names = {g.name for g in h.groups}
    assert {"model.embed_tokens", "lm_head"} <= names and ot.stats(m)["groups_in_host_tier"] == len(h.groups)
    with torch.no_grad():
        assert torch.equal(m.generate(inp, **kw), ref)
        before = ot.stats(m)
        assert torch.equal(m.generate(inp, **kw), ref)
    s = ot.stats(m)
    assert s["traces_recorded"] == 1 and s["divergences"] == 0 and s["passes"] == 20
    assert s["pinned_groups"] and all(s["page_ins_per_group"][n] == before["page_ins_per_group"][n]
                                      for n in s["pinned_groups"])
    assert s["bytes_from_store"] == 0 and s["bytes_from_host_tier"] == s["bytes_paged_in"]


# --- on a GPU (opt-in: OVERSUB_TEST_CUDA=1) ----------------------------------------------------------------------------

gpu = pytest.mark.skipif(os.environ.get("OVERSUB_TEST_CUDA") != "1", reason="GPU tests are opt-in: OVERSUB_TEST_CUDA=1")


@gpu
def test_cuda_offload_matches_the_resident_model(tmp_path, x):
    """Weights paged into the CUDA backend's device buffers, computed on as zero-copy CUDA tensors; the same
    results as the model resident on the GPU, the order learned and prefetched on later passes."""
    import copy

    m = _model(8)
    resident = copy.deepcopy(m).to("cuda")
    xc = x.to("cuda")
    ref = _ref(resident, xc)
    gran = 2 * 1024 * 1024  # the VMM granularity: each group's buffer takes at least this much
    h = ot.offload(m, capacity=3 * gran, store=tmp_path, device="cuda:0")
    assert h.pool.device.startswith("cuda")
    with torch.no_grad():
        for _ in range(3):
            out = m(xc)
            assert out.device.type == "cuda"
            torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    w = m.blocks[0].lin.weight
    s = ot.stats(m)
    assert s["traces_recorded"] == 1 and s["last_pass"]["page_ins_on_demand"] == 0
    assert s["page_ins_prefetched"] > 0
    assert w.device.type == "cuda"
    ot.restore(m)
    with torch.no_grad():
        torch.testing.assert_close(m.to("cuda")(xc), ref, rtol=1e-6, atol=1e-6)


@gpu
def test_cuda_offload_benchmark_runs(tmp_path):
    pytest.importorskip("safetensors")
    import json
    import subprocess
    import sys

    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "oversub.bench", "offload", "--device", "cuda", "--models", "linear", "--layers", "4",
           "--layer-size", "4MiB", "--batch", "4", "--capacity-layers", "2", "--passes", "2", "--no-drop-caches",
           "--methods", "resident,oversub-learned,mmap-safetensors", "--store", str(tmp_path), "--json", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = {r["method"]: r for r in json.loads(out.read_text())["models"]["linear"]["rows"]}
    assert rows["mmap-safetensors"]["skipped"].startswith("not on cuda")
    assert "device_used_bytes" in rows["oversub-learned"]


@gpu
def test_cuda_generate_benchmark_runs_issue_34s_rows(tmp_path):
    """`--models generate --device cuda`: every row of issue 34 (the host tier, the store, the double buffer on a
    side stream, accelerate's device_map and cpu_offload) gives the resident model's tokens."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    import json
    import subprocess
    import sys

    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "oversub.bench", "offload", "--device", "cuda", "--models", "generate",
           "--tf-layers", "4", "--tf-hidden", "256", "--tf-intermediate", "512", "--tf-vocab", "1000", "--dtype",
           "float16", "--gen-tokens", "3", "--passes", "1", "--capacity-fraction", "0.34", "--no-drop-caches",
           "--store", str(tmp_path), "--json", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = {r["method"]: r for r in json.loads(out.read_text())["models"]["generate"]["rows"]}
    assert set(rows) == {"resident", "oversub-learned", "oversub-store", "double-buffer", "accelerate-auto",
                         "accelerate-cpu-offload"}
    for name, r in rows.items():
        if name != "resident":
            assert r.get("output") in ("equal", "close") or r["output"].startswith("close"), (name, r)
            assert "decode_s_per_token" in r


@gpu
def test_cuda_capacity_gives_way_to_torch_allocations(tmp_path, x):
    """On the GPU: a headroom of all but 64 MiB of the device's free memory, taken by a torch tensor, shrinks the
    pool to its largest group; outputs stay equal to the resident model's; freeing it grows the pool back."""
    m = _model(6, seed=12)
    ref = _ref(m.to("cuda"), x.to("cuda"))
    m = _model(6, seed=12)
    gran = 2 << 20  # a group's reservation on the CUDA backend
    h = ot.offload(m, capacity=5 * gran, store=tmp_path, device="cuda", device_headroom="256MiB")
    xc = x.to("cuda")
    with torch.no_grad():
        torch.testing.assert_close(m(xc), ref, rtol=1e-6, atol=1e-6)
        free = torch.cuda.mem_get_info()[0]
        hog = torch.empty(max(0, free - (128 << 20)), dtype=torch.uint8, device="cuda")
        torch.testing.assert_close(m(xc), ref, rtol=1e-6, atol=1e-6)
        st = ot.stats(m)
        assert st["capacity_bytes"] == max(g.reserved for g in h.groups) and st["capacity_changes"] >= 1
        del hog
        torch.cuda.empty_cache()
        torch.testing.assert_close(m(xc), ref, rtol=1e-6, atol=1e-6)
        assert ot.stats(m)["capacity_bytes"] == 5 * gran


@gpu
def test_cuda_offload_reads_the_checkpoint_in_place(tmp_path, x):
    """On the GPU too, the safetensors file is the store: groups page from it through the staging ring into device
    buffers, nothing written to oversub's store for them, results equal to the model resident on the GPU."""
    st = pytest.importorskip("safetensors.torch")
    m = _model(6, seed=11)
    resident = m.to("cuda")
    xc = x.to("cuda")
    ref = _ref(resident, xc)
    path = tmp_path / "model.safetensors"
    st.save_file({k: v.detach().cpu().contiguous() for k, v in m.state_dict().items()}, str(path))
    with torch.device("meta"):
        empty = Stack(6)
    gran = 2 * 1024 * 1024
    h = ot.offload(empty, capacity=3 * gran, store=tmp_path / "store", device="cuda:0", checkpoint=path)
    s = ot.stats(empty)
    assert s["groups_in_checkpoint"] >= 5
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(empty(xc), ref, rtol=1e-6, atol=1e-6)
    assert ot.stats(empty)["page_ins_prefetched"] > 0
    assert h.pool.device == "cuda"


@pytest.mark.parametrize(("compute_per_read", "calibration"), [(0.0, {}), (1.0, {}), (1.0, {2: 3.0})])
def test_auto_lookahead_follows_read_against_compute(tmp_path, monkeypatch, compute_per_read, calibration):
    """lookahead="auto" chooses, after each pass, between prefetching (the depth the capacity allows) and paging on
    demand from the measured read bandwidth and each group's compute. Given measurements (not timed here): with no
    compute to overlap, prefetch would only cost the fixed part a group (one more read a pass), so the passes page
    on demand, read no more than on demand does and prefetch nothing; with compute as long as a read, they prefetch
    and nothing is read on demand. A correction factor seen for the depth in force (prefetch took 3x its estimate)
    applies to the untried one too, so on demand does not win for lack of a correction."""
    d = 256
    torch.manual_seed(0)
    m = Stack(24, d)
    x = torch.randn(4, d, generator=torch.Generator().manual_seed(1))
    ref = _ref(m, x)
    capacity = sum(p.numel() * p.element_size() for p in m.blocks.parameters()) // 3
    h = ot.offload(m, capacity=capacity, store=tmp_path)
    bw = 1e9  # bytes/s, whatever it is: the choice depends on compute against read
    read_s = max(g.nbytes for g in h.groups) / bw
    monkeypatch.setattr(ot.Offloaded, "_measured",
                        lambda self: (bw, [compute_per_read * read_s] * len(self.groups), dict(calibration)))
    with torch.no_grad():
        for _ in range(3):
            assert torch.equal(m(x), ref)
        s0 = ot.stats(m)
        for _ in range(4):
            assert torch.equal(m(x), ref)
    s = ot.stats(m)
    est = s["lookahead_estimates_s"]
    assert set(est) == {0, 2}
    if calibration:
        assert est[2] == pytest.approx(3.0 * h._raw_estimates[2]) and est[0] == pytest.approx(3.0 * h._raw_estimates[0])
    last = h.per_pass[-4:]
    if compute_per_read == 0:
        assert s["lookahead"] == 0 and est[0] < est[2]
        assert all(p["page_ins_prefetched"] == 0 for p in last)
        # fewer reads a pass than prefetch's rotating part (every group outside its fixed set, read each pass)
        rotating_with_prefetch = len(h.groups) - len(h._plans[2][0])
        assert all(p["page_ins_on_demand"] < rotating_with_prefetch for p in last), (last, rotating_with_prefetch)
    else:
        assert s["lookahead"] == 2 and est[2] < est[0]
        assert all(p["page_ins_on_demand"] == 0 and p["page_ins_prefetched"] > 0 for p in last)
    assert s["page_ins_prefetched"] >= s0["page_ins_prefetched"]


def test_the_capacity_gives_way_to_what_torch_allocates_on_the_device(tmp_path, x):
    """On a GPU a generate's KV cache grows in torch's allocator beside the pool. Before each pass, free device
    memory below ``device_headroom`` shrinks the capacity by the shortfall (evicting groups, never below the largest
    group), and memory freed again lets it grow back; outputs never change. The free memory is simulated here
    (the CPU backend has no device to ask)."""
    m = _model(6, seed=5)
    ref = _ref(m, x)
    h = ot.offload(m, capacity=5 * BLOCK, store=tmp_path, lookahead=1, device_headroom="1MiB")
    torch_bytes = {"now": 0}
    device = 5 * BLOCK + (1 << 20)  # the pool's capacity and the headroom
    h._device_free = lambda: device - torch_bytes["now"] - h._used()
    with torch.no_grad():
        for _ in range(2):
            assert torch.equal(m(x), ref)
        assert ot.stats(m)["capacity_bytes"] == 5 * BLOCK
        torch_bytes["now"] = 3 * BLOCK  # a KV cache grew: the pool is 3 blocks short of its headroom
        assert torch.equal(m(x), ref)
        st = ot.stats(m)
        assert st["capacity_bytes"] == 2 * BLOCK
        assert sum(g.reserved for g in h.groups if g.state != "paged_out") <= 2 * BLOCK
        assert st["capacity_changes"] == 1 and st["device_free_min_bytes"] < 1 << 20
        for _ in range(2):
            assert torch.equal(m(x), ref)
        assert ot.stats(m)["capacity_changes"] == 1  # stable while the cache stays
        torch_bytes["now"] = 0  # released again
        assert torch.equal(m(x), ref)
        st = ot.stats(m)
        assert st["capacity_bytes"] == st["capacity_given_bytes"] == 5 * BLOCK
        assert st["capacity_changes"] == 2
    ot.restore(m)


def test_device_headroom_zero_keeps_the_capacity(tmp_path, x):
    m = _model(4, seed=6)
    h = ot.offload(m, capacity=3 * BLOCK, store=tmp_path, device_headroom=0)
    h._device_free = lambda: 0
    with torch.no_grad():
        m(x)
        m(x)
    assert ot.stats(m)["capacity_bytes"] == 3 * BLOCK and ot.stats(m)["capacity_changes"] == 0
