"""KimiK3MoE (CPU path) against the C++ reference block and the pure-torch block; built from a
state_dict and from safetensors files with real Kimi-K3 tensor names."""
import json
import os

import pytest
import torch

import mxmoe.torch as mt
from mxmoe.torch.module import bf16_from_f64
from torch_ref import block_ref, nrmse, random_block, random_experts

D, L, I, E, K = 128, 64, 64, 8, 3
CONFIG = {"text_config": {"hidden_size": D, "routed_expert_hidden_size": L,
                          "moe_intermediate_size": I, "num_experts": E,
                          "num_experts_per_token": K, "num_shared_experts": 2,
                          "rms_norm_eps": 1e-5, "hidden_act": "situ",
                          "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0}}
NAMES = {"router_weight": "gate.weight", "router_bias": "gate.e_score_correction_bias",
         "latent_down": "routed_expert_down_proj.weight",
         "latent_norm": "routed_expert_norm.weight", "latent_up": "routed_expert_up_proj.weight",
         "shared_gate": "shared_experts.gate_proj.weight",
         "shared_up": "shared_experts.up_proj.weight",
         "shared_down": "shared_experts.down_proj.weight"}


def checkpoint_dict(layer, blk, ex, prefix="model."):
    p = "%slayers.%d.block_sparse_moe." % (prefix, layer)
    sd = {p + NAMES[k]: v for k, v in blk.items()}
    for e in range(ex[0].shape[0]):
        for i, (w, kind) in enumerate([("w1", "packed"), ("w1", "scale"), ("w3", "packed"),
                                       ("w3", "scale"), ("w2", "packed"), ("w2", "scale")]):
            sd["%sexperts.%d.%s.weight_%s" % (p, e, w, kind)] = ex[i][e].clone()
    return sd


@pytest.fixture(scope="module")
def layer():
    blk = random_block(D, L, I, E, seed=31)
    ex = random_experts(E, L, I, seed=32)
    return blk, ex


def x_in(T=7, seed=33):
    return torch.randn(T, D, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


@pytest.mark.parametrize("backend,act", [("w4a8", "mxfp8"), ("w4a16", "bf16")])
def test_module_matches_reference_block(layer, backend, act):
    blk, ex = layer
    sd = checkpoint_dict(3, blk, ex)
    sd.update(checkpoint_dict(4, random_block(D, L, I, E, seed=99), ex))  # another layer
    m = mt.KimiK3MoE.from_state_dict(sd, 3, CONFIG, backend=backend)
    x = x_in()
    got = m(x)
    want = mt.reference_block(x, blk, ex, top_k=K, act=act)
    err_cpp = nrmse(got, want)
    err_torch = nrmse(got, block_ref(x, blk, ex, K, act))
    print("KimiK3MoE %s: NRMSE vs C++ block %.3g, vs torch fp64 block %.3g"
          % (backend, err_cpp, err_torch))
    assert got.shape == (7, D) and got.dtype == torch.float32
    assert err_cpp < 1e-3 and err_torch < 2e-3
    other = mt.KimiK3MoE.from_state_dict(sd, 4, CONFIG, backend=backend)
    assert nrmse(other(x), got) > 1e-2  # layer 4 really is another layer


def test_from_safetensors(layer, tmp_path):
    st = pytest.importorskip("safetensors.torch")
    blk, ex = layer
    sd = checkpoint_dict(5, blk, ex, prefix="language_model.model.")
    keys = sorted(sd)
    half = len(keys) // 2
    st.save_file({k: sd[k].contiguous() for k in keys[:half]}, str(tmp_path / "a.safetensors"))
    st.save_file({k: sd[k].contiguous() for k in keys[half:]}, str(tmp_path / "b.safetensors"))
    with open(tmp_path / "config.json", "w") as f:
        json.dump(CONFIG, f)
    m = mt.KimiK3MoE.from_safetensors(str(tmp_path), 5)
    x = x_in(4)
    assert torch.equal(m(x), mt.KimiK3MoE.from_state_dict(sd, 5, CONFIG)(x))


def test_missing_tensor_and_bad_input(layer):
    blk, ex = layer
    sd = checkpoint_dict(2, blk, ex)
    del sd["model.layers.2.block_sparse_moe.experts.5.w3.weight_scale"]
    with pytest.raises(ValueError, match=r"missing experts.5.w3.weight_scale"):
        mt.KimiK3MoE.from_state_dict(sd, 2, CONFIG)
    with pytest.raises(ValueError, match=r"no tensor named \*layers.9.block_sparse_moe.\*"):
        mt.KimiK3MoE.from_state_dict(sd, 9, CONFIG)
    m = mt.KimiK3MoE.from_state_dict(checkpoint_dict(2, blk, ex), 2, CONFIG)
    with pytest.raises(ValueError, match=r"takes BF16 \[T, hidden\]"):
        m(torch.randn(2, D))


def test_bf16_from_f64_single_rounding():
    # 1 + 2^-8 + 2^-40 lies just above the BF16 midpoint 1 + 2^-8: one rounding gives 1 + 2^-7,
    # fp64 -> fp32 -> BF16 would round to the midpoint first and then to even (1.0).
    d = torch.tensor([1.0 + 2.0 ** -8 + 2.0 ** -40, -(1.0 + 2.0 ** -8 + 2.0 ** -40), 3.0],
                     dtype=torch.float64)
    got = bf16_from_f64(d).double()
    assert got.tolist() == [1.0 + 2.0 ** -7, -(1.0 + 2.0 ** -7), 3.0]
