"""Bad inputs give clear one-line errors naming the op and the argument."""
import pytest
import torch

import mxmoe.torch as mt
from torch_ref import random_experts, random_routing

E, H, I, K, T = 8, 64, 64, 4, 3


@pytest.fixture(scope="module")
def experts():
    return random_experts(E, H, I, seed=21)


@pytest.fixture
def call(experts):
    def run(x=None, ids=None, w=None, ex=None, **kw):
        x = torch.randn(T, H).to(torch.bfloat16) if x is None else x
        rids, rw = random_routing(T, K, E, seed=22)
        return mt.reference_experts(x, rids if ids is None else ids, rw if w is None else w,
                                    experts if ex is None else ex, **kw)
    return run


def raises(match):
    return pytest.raises(RuntimeError, match=match)


def test_hidden_dtype(call):
    with raises(r"mxmoe::reference_experts: hidden must be BFloat16 or Float, got Half"):
        call(x=torch.randn(T, H).half())


def test_hidden_width(call):
    with raises(r"hidden is \[3, 32\] but the experts' latent width is 64"):
        call(x=torch.randn(T, 32).to(torch.bfloat16))


def test_hidden_rows_must_be_dense(call):
    x = torch.randn(H, T).to(torch.bfloat16).t()
    with raises(r"hidden rows must be contiguous"):
        call(x=x)


def test_ids_dtype_and_shape(call):
    ids, w = random_routing(T, K, E, seed=23)
    with raises(r"topk_ids must be Int, got Long"):
        call(ids=ids.long())
    with raises(r"topk_weights must be \[3, 4\], got \[3, 3\]"):
        call(w=w[:, :3])
    with raises(r"topk_weights must be Float, got Double"):
        call(w=w.double())


def test_id_out_of_range(call):
    ids, _ = random_routing(T, K, E, seed=24)
    ids[2, 1] = E
    with raises(r"topk_ids\[2, 1\] = 8 is not an expert id"):
        call(ids=ids)


def test_bad_act(call):
    with raises(r"act must be 'bf16' or 'mxfp8', got 'fp8'"):
        call(act="fp8")


def test_nan_scale_byte(call, experts):
    ex = [t.clone() for t in experts]
    ex[1][:, 0, 0] = 255  # w1 scales: the UE8M0 NaN code
    with raises(r"expert \d+.*255|NaN"):
        call(ex=ex, ids=torch.zeros(T, K, dtype=torch.int32))


def test_weight_shapes(call, experts):
    ex = list(experts)
    ex[4] = ex[4][:, :, :16]  # w2 packed too narrow
    with raises(r"w2_packed|w2_scale"):
        call(ex=ex)
    ex = list(experts)
    ex[0] = ex[0].to(torch.int8)
    with raises(r"w1_packed must be Byte, got Char"):
        call(ex=ex)


def test_ep_range(call):
    with raises(r"expert range"):
        call(expert_start=6, expert_count=5)


def test_device_cpu_tensor_to_gpu_op(experts):
    x = torch.randn(T, H).to(torch.bfloat16)
    ids, w = random_routing(T, K, E, seed=25)
    with raises(r"mxmoe::moe_experts: hidden is on cpu; this op runs on CUDA tensors only"):
        mt.moe_experts(x, ids, w, 1)
    with raises(r"mxmoe::moe_routed: hidden is on cpu"):
        mt.moe_routed(x, torch.randn(T, E), None, 1, top_k=K)


def test_route_bad_inputs():
    with raises(r"top_k = 9 must be in 1..8"):
        mt.reference_route(torch.randn(2, 8), None, top_k=9)
    with raises(r"correction_bias must be \[8\], got \[7\]"):
        mt.reference_route(torch.randn(2, 8), torch.zeros(7), top_k=2)
    with raises(r"NaN"):
        mt.reference_route(torch.tensor([[0.0, float("nan")]]), None, top_k=1)


@pytest.mark.skipif(mt.has_cuda_ops(), reason="CUDA build: prepare_weights is available")
def test_cpu_build_says_no_cuda(experts):
    with raises(r"mxmoe::prepare_weights: this mxmoe build has no CUDA"):
        mt.PreparedWeights(*experts)
