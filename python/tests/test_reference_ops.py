"""The CPU reference ops against the pure-PyTorch fp64 reference (torch_ref.py)."""
import pytest
import torch

import mxmoe.torch as mt
from torch_ref import (block_ref, experts_ref, nrmse, random_block, random_experts,
                       random_routing, route_ref)

E, H, I, K, T = 8, 64, 64, 4, 6


@pytest.fixture(scope="module")
def experts():
    return random_experts(E, H, I, seed=1)


def hidden(T=T, dtype=torch.bfloat16, seed=2):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(T, H, generator=g).to(dtype)


@pytest.mark.parametrize("act", ["bf16", "mxfp8"])
def test_experts_match_fp64_reference(experts, act):
    x = hidden()
    ids, w = random_routing(T, K, E, seed=3)
    got = mt.reference_experts(x, ids, w, experts, act=act)
    want = experts_ref(x.float(), ids, w, experts, act)
    assert got.dtype == torch.float32 and got.shape == (T, H)
    assert want.abs().max() > 0
    err = nrmse(got, want)
    print("reference_experts %s vs torch fp64: NRMSE %.3g" % (act, err))
    assert err < 1e-3
    # Token 1's last slot is -1: it must not be counted (compare with that slot dropped).
    assert torch.all(ids[1, -1] == -1)


def test_modes_differ(experts):
    x = hidden()
    ids, w = random_routing(T, K, E, seed=3)
    a = mt.reference_experts(x, ids, w, experts, act="bf16")
    b = mt.reference_experts(x, ids, w, experts, act="mxfp8")
    assert 1e-4 < nrmse(b, a) < 0.2


def test_ep_slices_sum_to_full(experts):
    x = hidden()
    ids, w = random_routing(T, K, E, seed=4)
    full = mt.reference_experts(x, ids, w, experts, act="mxfp8")
    lo = mt.reference_experts(x, ids, w, experts, act="mxfp8", expert_start=0, expert_count=3)
    hi = mt.reference_experts(x, ids, w, experts, act="mxfp8", expert_start=3, expert_count=-1)
    want_lo = experts_ref(x.float(), ids, w, experts, "mxfp8", start=0, count=3)
    assert nrmse(lo, want_lo) < 1e-3
    assert nrmse(lo + hi, full) < 1e-6
    assert nrmse(lo, full) > 1e-2  # the slice really dropped experts


def test_per_expert_betas(experts):
    x = hidden()
    ids, w = random_routing(T, K, E, seed=5)
    pb = torch.linspace(1.5, 6.0, E)
    plb = torch.linspace(3.0, 30.0, E)
    got = mt.reference_experts(x, ids, w, experts, act="bf16", per_expert_beta=pb,
                               per_expert_linear_beta=plb)
    want = experts_ref(x.float(), ids, w, experts, "bf16", per_beta=pb, per_lbeta=plb)
    assert nrmse(got, want) < 1e-3
    default = mt.reference_experts(x, ids, w, experts, act="bf16")
    assert nrmse(got, default) > 1e-3


def test_float_input_and_strided_rows(experts):
    x = hidden()
    ids, w = random_routing(T, K, E, seed=6)
    base = mt.reference_experts(x, ids, w, experts, act="mxfp8")
    assert torch.equal(mt.reference_experts(x.float(), ids, w, experts, act="mxfp8"), base)
    wide = torch.zeros(T, 3 * H, dtype=torch.bfloat16)
    wide[:, H:2 * H] = x
    view = wide[:, H:2 * H]
    assert not view.is_contiguous()
    assert torch.equal(mt.reference_experts(view, ids, w, experts, act="mxfp8"), base)


def test_empty_batch(experts):
    x = torch.zeros(0, H, dtype=torch.bfloat16)
    ids = torch.zeros(0, K, dtype=torch.int32)
    out = mt.reference_experts(x, ids, torch.zeros(0, K), experts)
    assert out.shape == (0, H)


def test_route_matches_torch():
    g = torch.Generator().manual_seed(7)
    logits = torch.randn(9, 32, generator=g)
    bias = torch.randn(32, generator=g) * 0.1
    logits[0, 5] = logits[0, 3]  # an exact tie: the lower id must win
    bias[5] = bias[3]
    ids, w = mt.reference_route(logits, bias, top_k=6)
    want_ids, want_w = route_ref(logits, bias, 6)
    assert torch.equal(ids, want_ids)
    torch.testing.assert_close(w, want_w, rtol=2e-7, atol=0)
    assert list(ids[0]).index(3) < list(ids[0]).index(5) if 5 in ids[0] else True
    ids2, w2 = mt.reference_route(logits, None, top_k=6, renormalize=False,
                                  routed_scaling_factor=2.5)
    want_ids2, want_w2 = route_ref(logits, None, 6, renormalize=False, scale=2.5)
    assert torch.equal(ids2, want_ids2)
    torch.testing.assert_close(w2, want_w2, rtol=2e-7, atol=0)


@pytest.mark.parametrize("act", ["bf16", "mxfp8"])
def test_block_matches_fp64_reference(act):
    D, L, Ib, Eb, k = 128, 64, 64, 8, 3
    blk = random_block(D, L, Ib, Eb, seed=8)
    ex = random_experts(Eb, L, Ib, seed=9)
    x = (torch.randn(5, D, generator=torch.Generator().manual_seed(10))).to(torch.bfloat16)
    got = mt.reference_block(x, blk, ex, top_k=k, act=act)
    want = block_ref(x, blk, ex, k, act)
    err = nrmse(got, want)
    print("reference_block %s vs torch fp64: NRMSE %.3g" % (act, err))
    assert got.shape == (5, D) and err < 2e-3
