"""oversub.torch on real Hugging Face `transformers` models (issue 35): tiny Llama, GPT-2, GPT-Neo and a BatchNorm
CNN built from configs with random weights. Skipped without torch or transformers."""

from __future__ import annotations

import copy
import gc
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numpy")
tf = pytest.importorskip("transformers")

import oversub.torch as ot  # noqa: E402

tf.logging.set_verbosity_error()


@pytest.fixture(autouse=True)
def _fixed_lookahead(monkeypatch):
    """lookahead="auto" keeps the depth the capacity allows: its choice between that and on demand follows the
    measured read and compute times (test_auto_lookahead_follows_read_against_compute gives it measurements), which
    a test must not depend on."""
    monkeypatch.setattr(ot.Offloaded, "_measured", lambda self: None)


def _llama(seed=0):
    torch.manual_seed(seed)
    cfg = tf.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return tf.LlamaForCausalLM(cfg).eval()


def _gpt2(seed=0):
    torch.manual_seed(seed)
    cfg = tf.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=64, bos_token_id=0,
                        eos_token_id=0)
    return tf.GPT2LMHeadModel(cfg).eval()


def _neo(seed=0):
    torch.manual_seed(seed)
    cfg = tf.GPTNeoConfig(vocab_size=256, hidden_size=64, num_layers=2, num_heads=4,
                          attention_types=[[["global", "local"], 1]], max_position_embeddings=64, window_size=16,
                          bos_token_id=0, eos_token_id=0)
    return tf.GPTNeoForCausalLM(cfg).eval()


def _resnet(seed=0):
    torch.manual_seed(seed)
    cfg = tf.ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=4)
    return tf.ResNetForImageClassification(cfg)


MODELS = {"llama": _llama, "gpt2": _gpt2, "neo": _neo}
IDS = torch.tensor([[1, 5, 9, 17, 33, 65, 129, 200]])


def _cap(model) -> int:
    """Half the model's weights: every pass pages."""
    return max(sum(p.numel() * p.element_size() for p in model.parameters()) // 2, 256 << 10)


def _logits(model, ids=IDS):
    with torch.no_grad():
        return model(input_ids=ids).logits.clone()


def _same_state(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k


# -- 1. no silent wrong data ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MODELS))
def test_state_dict_is_the_real_weights(tmp_path, name):
    m = MODELS[name]()
    ref_sd = {k: v.clone() for k, v in m.state_dict().items()}
    ref = _logits(m)
    ot.offload(m, capacity=_cap(m), store=tmp_path)
    for _ in range(2):
        assert torch.equal(_logits(m), ref)
    assert len(ot.stats(m)["resident_groups"]) < ot.stats(m)["groups"], "some group must be paged out"
    _same_state(m.state_dict(), ref_sd)
    _same_state(ot.state_dict(m), ref_sd)
    # keep_vars: Parameters (copies), with the real values
    _same_state({k: v.detach() for k, v in m.state_dict(keep_vars=True).items()}, ref_sd)
    # a module inside a group, called on its own
    sub = m.get_submodule({"llama": "model.layers.0", "gpt2": "transformer.h.0", "neo": "transformer.h.0"}[name])
    prefix = {"llama": "model.layers.0.", "gpt2": "transformer.h.0.", "neo": "transformer.h.0."}[name]
    _same_state(sub.state_dict(prefix=prefix), {k: v for k, v in ref_sd.items() if k.startswith(prefix)})
    # the state dict holds no view of a group's buffer: the model still pages, and restores
    sd = m.state_dict()
    assert torch.equal(_logits(m), ref)
    ot.restore(m)
    del sd
    _same_state(m.state_dict(), ref_sd)
    for n, p in m.named_parameters():
        assert torch.equal(p, ref_sd[n]), n


def test_named_parameters_group_by_group(tmp_path):
    m = _llama()
    ref = {n: p.detach().clone() for n, p in m.named_parameters()}
    ot.offload(m, capacity=_cap(m), store=tmp_path)
    _logits(m)
    # model.named_parameters(): the same Parameters, right shapes and dtypes; values only while resident
    assert [(n, p.shape, p.dtype) for n, p in m.named_parameters()] == [(n, t.shape, t.dtype) for n, t in ref.items()]
    seen = 0
    for n, p in ot.named_parameters(m):  # real while the iteration is at its group
        assert torch.equal(p, ref[n]), n
        seen += 1
    assert seen == len(ref)
    copies = dict(ot.named_parameters(m, copy=True))
    _same_state(copies, ref)
    assert torch.equal(_logits(m), _logits(_llama()))


def test_a_meta_buffer_nothing_computes_is_an_error(tmp_path):
    class Odd(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(2)])
            self.register_buffer("scale", torch.ones(8), persistent=False)

        def forward(self, x):
            return self.blocks[1](self.blocks[0](x)) * self.scale

    src = Odd()
    st = pytest.importorskip("safetensors.torch")
    st.save_file({k: v.contiguous() for k, v in src.state_dict().items()}, str(tmp_path / "m.safetensors"))
    with torch.device("meta"):
        e = Odd()
    with pytest.raises(ot.CheckpointError, match="scale.*init_empty_weights"):
        ot.offload(e, capacity=1 << 20, store=tmp_path, checkpoint=tmp_path / "m.safetensors")
    assert e.scale.device.type == "meta" and not ot.is_offloaded(e)


def test_save_pretrained_round_trip(tmp_path):
    m = _gpt2()
    ref = _logits(m)
    ot.offload(m, capacity=_cap(m), store=tmp_path)
    _logits(m)
    m.save_pretrained(tmp_path / "saved")
    loaded = tf.GPT2LMHeadModel.from_pretrained(tmp_path / "saved").eval()
    assert torch.equal(_logits(loaded), ref)
    assert torch.equal(_logits(m), ref)


def test_load_state_dict_is_refused(tmp_path):
    m = _llama()
    ref = _logits(m)
    sd = {k: v.clone() for k, v in m.state_dict().items()}
    ot.offload(m, capacity=_cap(m), store=tmp_path)
    with pytest.raises(ot.ModelChangeError, match="ot.restore"):
        m.load_state_dict(sd)
    assert torch.equal(_logits(m), ref)


def test_batchnorm_in_train_mode_keeps_its_running_stats(tmp_path):
    m = _resnet()
    ref = copy.deepcopy(m)
    m.train()
    ref.train()
    torch.manual_seed(1)
    xs = [torch.randn(4, 3, 32, 32) for _ in range(4)]
    cap = max(max(sum(p.numel() * 4 for p in g.parameters()) for g in m.resnet.encoder.stages) + 8192, 64 << 10)
    h = ot.offload(m, capacity=cap, store=tmp_path, group="leaf")
    with torch.no_grad():
        for x in xs:
            assert torch.equal(m(x).logits, ref(x).logits)
    assert h.stats()["evictions"] > 0
    ot.restore(m)
    for (n, a), (_, b) in zip(m.named_buffers(), ref.named_buffers()):
        assert torch.equal(a, b), n
    m.eval()
    ref.eval()
    with torch.no_grad():
        assert torch.equal(m(xs[0]).logits, ref(xs[0]).logits)


def test_a_buffer_written_in_forward_is_kept(tmp_path):
    """Any module's buffer written in place during a pass (not only BatchNorm's) survives its group's eviction: it
    leaves the read-only group and stays resident, with a warning."""

    class Counting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(64, 64)
            self.register_buffer("calls", torch.zeros(4))

        def forward(self, x):
            self.calls.add_(1)
            return torch.tanh(self.lin(x))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([Counting() for _ in range(4)])

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return x

    torch.manual_seed(0)
    m = Net()
    ref = copy.deepcopy(m)
    x = torch.randn(2, 64)
    one = 4096 * ((64 * 64 * 4 + 64 * 4 + 4 * 4 + 3 * 64 + 4095) // 4096)
    h = ot.offload(m, capacity=2 * one, store=tmp_path)
    with pytest.warns(UserWarning, match="written during a pass"):
        for _ in range(3):
            assert torch.equal(m(x), ref(x))
    assert h.stats()["buffers_kept_resident"] == 4
    for _ in range(2):
        assert torch.equal(m(x), ref(x))
    assert [b.calls.tolist() for b in m.blocks] == [[5.0] * 4] * 4
    ot.restore(m)
    assert [b.calls.tolist() for b in m.blocks] == [[5.0] * 4] * 4


# -- 2. checkpoints and models as transformers writes them ---------------------------------------------------------


def _saved(tmp_path, m, shard=None):
    d = tmp_path / "ckpt"
    if shard:
        m.save_pretrained(d, max_shard_size=shard)
    else:
        m.save_pretrained(d)
    return d


def test_sharded_checkpoint_by_its_index(tmp_path):
    m = _llama()
    ref = _logits(m)
    d = _saved(tmp_path, m, shard="40KB")
    index = d / "model.safetensors.index.json"
    assert index.exists() and len(set(json.loads(index.read_text())["weight_map"].values())) > 3
    with torch.device("meta"):
        e = tf.LlamaForCausalLM(m.config)
    ot.offload(e, capacity=_cap(m), store=tmp_path, checkpoint=index)
    assert e.model.rotary_emb.inv_freq.device.type == "cpu"  # non-persistent: computed, not looked up
    for _ in range(3):
        assert torch.equal(_logits(e), ref)
    with torch.no_grad():
        g1 = e.generate(IDS, max_new_tokens=4, do_sample=False)
        g0 = m.generate(IDS, max_new_tokens=4, do_sample=False)
    assert torch.equal(g1, g0)
    _same_state(e.state_dict(), m.state_dict())


def test_sharded_folder_reads_groups_across_shards_in_place(tmp_path):
    m = _llama()
    ref = _logits(m)
    d = _saved(tmp_path, m, shard="150KB")  # each layer's tensors in two shards
    with torch.device("meta"):
        e = tf.LlamaForCausalLM(m.config)
    h = ot.offload(e, capacity=_cap(m), store=tmp_path, checkpoint=d)
    st = h.stats()
    # Every layer straddles shards here; each reads its ranges from the shards. Only the tensors in a shard's last
    # partial 4 KiB block (a direct read cannot end there) are copied into the store.
    assert any(g.parts is not None and len(g.parts) > 1 for g in h.groups)
    assert st["groups_in_checkpoint"] == st["groups"], st
    assert st["bytes_written"] < st["offloaded_bytes"] // 4, st
    for _ in range(3):
        assert torch.equal(_logits(e), ref)
    assert h.stats()["last_pass"]["bytes_paged_in"] > 0
    _same_state(e.state_dict(), m.state_dict())
    ot.restore(e)
    assert torch.equal(_logits(e), ref)


@pytest.mark.parametrize("build", ["meta", "init_empty_weights", "cpu"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_built_empty_or_real_with_a_checkpoint(tmp_path, name, build):
    m = MODELS[name]()
    ref = _logits(m)
    d = _saved(tmp_path, m)
    if build == "meta":
        with torch.device("meta"):
            e = type(m)(m.config)
    elif build == "init_empty_weights":
        accelerate = pytest.importorskip("accelerate")
        with accelerate.init_empty_weights():
            e = type(m)(m.config)
    else:
        e = MODELS[name](seed=3)  # other random weights: the checkpoint's must win
    e.eval()
    ot.offload(e, capacity=_cap(m), store=tmp_path, checkpoint=d / "model.safetensors")
    for _ in range(2):
        assert torch.equal(_logits(e), ref)
    if name != "llama":  # GPT-2 and GPT-Neo tie the LM head to the input embedding
        assert e.lm_head.weight is e.transformer.wte.weight


# -- 3. habits ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("call", ["half", "double", "bfloat16", "to_dtype", "sub_half"])
def test_dtype_conversion_after_offload_is_refused(tmp_path, call):
    m = _llama()
    ref = _logits(m)
    ot.offload(m, capacity=_cap(m), store=tmp_path)
    _logits(m)
    conv = {"half": lambda: m.half(), "double": lambda: m.double(), "bfloat16": lambda: m.bfloat16(),
            "to_dtype": lambda: m.to(torch.bfloat16), "sub_half": lambda: m.model.layers[1].half()}[call]
    with pytest.raises(ot.ModelChangeError, match="ot.restore"):
        conv()
    assert all(p.dtype == torch.float32 for p in m.parameters())
    assert torch.equal(_logits(m), ref)
    m.to("cpu")  # no change: allowed
    m.float()
    assert torch.equal(_logits(m), ref)
    ot.restore(m)
    m.half()  # an ordinary model again
    assert all(p.dtype == torch.float16 for p in m.parameters())


def test_restore_is_all_or_nothing(tmp_path):
    m = _llama()
    ref = _logits(m)
    ref_sd = {k: v.clone() for k, v in m.state_dict().items()}
    ot.offload(m, capacity=_cap(m), store=tmp_path)
    sd = m.state_dict()  # copies: they do not hold the model
    kept = []
    hook = m.model.layers[1].mlp.register_forward_hook(lambda mod, a, o: kept.append(mod.up_proj.weight.detach()))
    _logits(m)
    hook.remove()
    with pytest.raises(ot.WeightsInUseError, match="model.layers.1"):
        ot.restore(m)
    assert ot.is_offloaded(m) and all(h.id in m._forward_pre_hooks for h in ot._handle(m)._hooks[:1])
    kept.clear()  # the hook (removed) still closes over the list; its tensors are what must go
    gc.collect()
    assert torch.equal(_logits(m), ref)  # still offloaded, and working
    ot.restore(m)
    assert not ot.is_offloaded(m)
    _same_state(m.state_dict(), ref_sd)
    _same_state(sd, ref_sd)
    assert torch.equal(_logits(m), ref)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_runs_without_no_grad(tmp_path, name):
    m = MODELS[name]()
    ref = _logits(m)
    ot.offload(m, capacity=_cap(m), store=tmp_path)
    assert torch.is_grad_enabled()
    for _ in range(3):
        out = m(input_ids=IDS).logits
        assert torch.equal(out, ref) and not out.requires_grad
    assert torch.is_grad_enabled()  # put back after each pass
    out = m.generate(IDS, max_new_tokens=3, do_sample=False)
    assert out.shape[1] == IDS.shape[1] + 3


def test_stats_on_a_handle_kept_across_restore(tmp_path):
    m = _gpt2()
    h = ot.offload(m, capacity=_cap(m), store=tmp_path)
    _logits(m)
    ot.restore(m)
    with pytest.raises(ot.NotOffloadedError, match="restored"):
        h.stats()
    with pytest.raises(ot.NotOffloadedError):
        ot.stats(m)


def test_store_in_a_missing_folder_names_the_path(tmp_path):
    m = _gpt2()
    missing = tmp_path / "nonexistent" / "dir"
    with pytest.raises(ot.StorePathError, match="nonexistent/dir") as e:
        ot.offload(m, capacity=_cap(m), store=missing)
    assert isinstance(e.value, FileNotFoundError)
    assert not ot.is_offloaded(m)
    assert torch.isfinite(_logits(m)).all()


# -- residency: what a pass reads at a third of the model as capacity --------------------------------------------------


@pytest.mark.parametrize("layers", [8, 24])
def test_llama_bytes_per_pass_approach_model_less_capacity(tmp_path, layers):
    """A Llama-shaped model (embedding and head twice a layer's size, at the ends of the pass), a third of it as
    capacity: forward and generate read at most 1.1 x (model - capacity + window) a pass, where the window is the
    rotating groups' room (two consecutive ones with prefetch, the largest one on demand). With 8 layers the
    largest group is over half the capacity, so lookahead="auto" is 0; with 24 it is 2."""
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(vocab_size=2048, hidden_size=64, intermediate_size=192, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    m = tf.LlamaForCausalLM(cfg).eval()
    ref = _logits(m)
    h = ot.offload(m, capacity=sum(p.numel() * 4 for p in m.parameters()) // 3, store=tmp_path)
    for _ in range(3):
        assert torch.equal(_logits(m), ref)
    st = h.stats()
    assert st["lookahead"] == (0 if layers == 8 else 2)
    size = {g.name: g.reserved for g in h.groups}
    M, C = sum(size.values()), st["capacity_bytes"]
    rot = [n for n in st["trace"] if n not in st["pinned_groups"]]
    if st["lookahead"] == 0:
        window = max(size[n] for n in rot)
    else:
        window = max(size[a] + size[b] for a, b in zip(rot, rot[1:] + rot[:1]))
    bound = 1.1 * (M - C + window)
    assert st["pinned_groups"], st
    assert st["last_pass"]["bytes_paged_in"] <= bound, (st["last_pass"], M, C, window)
    p0, b0 = st["passes"], st["bytes_paged_in"]
    m.generate(IDS, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    st = h.stats()
    assert st["divergences"] == 0
    assert (st["bytes_paged_in"] - b0) / (st["passes"] - p0) <= bound
