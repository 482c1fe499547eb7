"""The GPU ops on a CUDA device (H200): agreement with the CPU reference op, non-contiguous
inputs, EP slices, GPU routing, out=, CUDA graph capture and replay, determinism, opcheck,
torch.compile, the SGLang adapter, KimiK3MoE on CUDA, and bad inputs. Skipped loudly without a
GPU or without the CUDA build of the extension (conftest.py)."""
import pytest
import torch

import mxmoe.torch as mt
from conftest import requires_cuda
from mxmoe.torch import sglang as sg
from torch_ref import cosine, nrmse, random_block, random_experts, random_routing

pytestmark = requires_cuda

E, H, I, K = 16, 128, 128, 4
BARS = {"nrmse": 5e-3, "cos": 0.99999}  # issue 3's bars against the same-mode CPU reference


@pytest.fixture(scope="module")
def experts():
    return random_experts(E, H, I, seed=41)


@pytest.fixture(scope="module")
def weights(experts):
    return mt.PreparedWeights(*experts, device="cuda:0")


def inputs(T, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g).to(torch.bfloat16)
    ids, w = random_routing(T, K, E, seed=seed)
    return x, ids, w


def check(got, want, label):
    n, c = nrmse(got.cpu(), want), cosine(got.cpu(), want)
    print("[torch-gpu] %s: NRMSE %.3e cosine %.7f" % (label, n, c))
    assert n <= BARS["nrmse"] and c >= BARS["cos"], label


def test_weights_info(weights):
    assert (weights.hidden, weights.intermediate, weights.num_experts_total) == (H, I, E)
    assert (weights.expert_start, weights.expert_count) == (0, E)
    assert weights.compute_capability[0] == 9 and weights.weight_bytes > 0


@pytest.mark.parametrize("backend", ["w4a8", "w4a16"])
@pytest.mark.parametrize("T", [1, 3, 17, 118])
def test_experts_match_cpu_reference(experts, weights, backend, T):
    x, ids, w = inputs(T, seed=T)
    got = mt.moe_experts(x.cuda(), ids.cuda(), w.cuda(), weights, backend=backend)
    want = mt.reference_experts(x, ids, w, experts, act=mt.backend_act(backend))
    assert got.shape == (T, H) and got.dtype == torch.float32
    check(got, want, "moe_experts %s T=%d" % (backend, T))


def test_noncontiguous_hidden_and_out(experts, weights):
    x, ids, w = inputs(33, seed=5)
    wide = torch.zeros(33, 3 * H, dtype=torch.bfloat16, device="cuda")
    wide[:, H:2 * H] = x.cuda()
    xv = wide[:, H:2 * H]
    assert not xv.is_contiguous()
    out_wide = torch.full((33, 2 * H), 7.0, device="cuda")
    outv = out_wide[:, :H]
    mt.moe_experts(xv, ids.cuda(), w.cuda(), weights, out=outv)
    want = mt.reference_experts(x, ids, w, experts, act="mxfp8")
    check(outv, want, "strided hidden + strided out")
    assert torch.all(out_wide[:, H:] == 7.0)  # nothing outside the view was written
    # Non-contiguous ids / weights (a transposed copy) are accepted too.
    ids_t = ids.t().contiguous().cuda().t()
    got = mt.moe_experts(x.cuda(), ids_t, w.cuda(), weights)
    assert torch.equal(got, mt.moe_experts(x.cuda(), ids.cuda(), w.cuda(), weights))


def test_float_hidden(experts, weights):
    x, ids, w = inputs(9, seed=6)
    xf = x.float() * 1.001  # not BF16-exact: the op rounds / quantizes fp32 input itself
    got = mt.moe_experts(xf.cuda(), ids.cuda(), w.cuda(), weights, backend="w4a16")
    check(got, mt.reference_experts(xf, ids, w, experts, act="bf16"), "fp32 hidden w4a16")


def test_ep_slice(experts):
    start, count = 5, 6
    sl = [t[start:start + count] for t in experts]
    wsl = mt.PreparedWeights(*sl, num_experts_total=E, expert_start=start, device="cuda:0")
    x, ids, w = inputs(40, seed=7)
    got = mt.moe_experts(x.cuda(), ids.cuda(), w.cuda(), wsl)
    want = mt.reference_experts(x, ids, w, experts, act="mxfp8", expert_start=start,
                                expert_count=count)
    check(got, want, "EP slice [5, 11)")
    full = mt.reference_experts(x, ids, w, experts, act="mxfp8")
    assert nrmse(want, full) > 1e-2


def test_per_expert_betas(experts, weights):
    x, ids, w = inputs(20, seed=8)
    pb, plb = torch.linspace(1.5, 6.0, E), torch.linspace(3.0, 30.0, E)
    got = mt.moe_experts(x.cuda(), ids.cuda(), w.cuda(), weights, per_expert_beta=pb.cuda(),
                         per_expert_linear_beta=plb.cuda(), beta=1.0, linear_beta=1.0)
    want = mt.reference_experts(x, ids, w, experts, act="mxfp8", per_expert_beta=pb,
                                per_expert_linear_beta=plb)
    check(got, want, "per-expert betas")


def test_routed_matches_cpu(experts, weights):
    x, _, _ = inputs(25, seed=9)
    g = torch.Generator().manual_seed(9)
    logits = torch.randn(25, E, generator=g)
    bias = torch.randn(E, generator=g) * 0.1
    out, ids, w = mt.moe_routed(x.cuda(), logits.cuda(), bias.cuda(), weights, top_k=K)
    rids, rw = mt.reference_route(logits, bias, top_k=K)
    assert torch.equal(ids.cpu(), rids)
    torch.testing.assert_close(w.cpu(), rw, rtol=1e-6, atol=0)
    check(out, mt.reference_experts(x, rids, rw, experts, act="mxfp8"), "moe_routed")


def test_cuda_graph_replay(experts, weights):
    T = 24
    x, ids, w = inputs(T, seed=10)
    sx, sids, sw = x.cuda(), ids.cuda(), w.cuda()
    out = torch.empty(T, H, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside capture (allocator, lazy init)
        mt.moe_experts(sx, sids, sw, weights, out=out)
        mt.moe_experts(sx, sids, sw, weights, backend="w4a16")
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mt.moe_experts(sx, sids, sw, weights, out=out)
        res = mt.moe_experts(sx, sids, sw, weights, backend="w4a16")  # workspace inside capture
    for seed in (11, 12):
        x2, ids2, w2 = inputs(T, seed=seed)
        sx.copy_(x2.cuda()); sids.copy_(ids2.cuda()); sw.copy_(w2.cuda())
        graph.replay()
        torch.cuda.synchronize()
        check(out, mt.reference_experts(x2, ids2, w2, experts, act="mxfp8"),
              "graph replay seed %d w4a8" % seed)
        check(res, mt.reference_experts(x2, ids2, w2, experts, act="bf16"),
              "graph replay seed %d w4a16" % seed)


def test_deterministic(weights):
    x, ids, w = inputs(64, seed=13)
    a = mt.moe_experts(x.cuda(), ids.cuda(), w.cuda(), weights)
    b = mt.moe_experts(x.cuda(), ids.cuda(), w.cuda(), weights)
    assert torch.equal(a, b)


def test_opcheck_gpu_ops(weights):
    x, ids, w = inputs(6, seed=14)
    x, ids, w = x.cuda(), ids.cuda(), w.cuda()
    h = weights.handle
    torch.library.opcheck(torch.ops.mxmoe.moe_experts.default,
                          (x, ids, w, h, "w4a8", 4.0, 25.0, None, None))
    out = torch.empty(6, H, device="cuda")
    torch.library.opcheck(torch.ops.mxmoe.moe_experts_out.default,
                          (x, ids, w, h, "w4a16", 4.0, 25.0, None, None, out))
    logits = torch.randn(6, E, device="cuda")
    torch.library.opcheck(torch.ops.mxmoe.moe_routed.default,
                          (x, logits, None, h, K, True, 1.0, "w4a8", 4.0, 25.0, None, None))


def test_torch_compile(weights):
    x, ids, w = inputs(8, seed=15)
    x, ids, w = x.cuda(), ids.cuda(), w.cuda()

    def f(x):
        return mt.moe_experts(x * 1, ids, w, weights).sum(dim=1)

    got = torch.compile(f, fullgraph=True)(x)
    torch.testing.assert_close(got, f(x), rtol=1e-5, atol=1e-5)


def test_sglang_adapter(experts):
    w13p = torch.cat([experts[0], experts[2]], dim=1).cuda()  # SGLang's [gate; up]
    w13s = torch.cat([experts[1], experts[3]], dim=1).cuda()
    q = sg.MxmoeQuantInfo.from_sglang_layer(w13p, w13s, experts[4].cuda(), experts[5].cuda(),
                                            num_experts_total=E)
    x, ids, w = inputs(10, seed=16)

    class TopK:
        topk_ids, topk_weights = ids.long().cuda(), w.cuda()

    class Dispatch:
        hidden_states, topk_output = x.cuda(), TopK()

    class Cfg:
        activation, routed_scaling_factor = "situ", None

    res = sg.fused_experts_none_to_mxmoe(Dispatch(), q, Cfg())
    assert res.hidden_states.dtype == torch.bfloat16
    check(res.hidden_states.float(),
          mt.reference_experts(x, ids, w, experts, act="mxfp8").to(torch.bfloat16).float(),
          "sglang adapter (bf16 out)")


def test_module_on_cuda():
    from test_module import CONFIG, checkpoint_dict, x_in
    D, L, Im, Em = 128, 64, 64, 8
    sd = checkpoint_dict(1, random_block(D, L, Im, Em, seed=17), random_experts(Em, L, Im, seed=18))
    cpu = mt.KimiK3MoE.from_state_dict(sd, 1, CONFIG)
    gpu = mt.KimiK3MoE.from_state_dict(sd, 1, CONFIG, device="cuda")
    x = x_in(9)
    n = nrmse(gpu(x.cuda()).cpu(), cpu(x))
    print("[torch-gpu] KimiK3MoE cuda vs cpu: NRMSE %.3e" % n)
    assert n < 1e-2  # dense GEMMs in fp32 on the GPU, fp64 on the CPU; routing may flip near-ties


def test_gpu_bad_inputs(weights):
    x, ids, w = inputs(4, seed=19)
    x, ids, w = x.cuda(), ids.cuda(), w.cuda()
    with pytest.raises(RuntimeError, match=r"moe_experts: topk_ids must be Int, got Long"):
        mt.moe_experts(x, ids.long(), w, weights)
    with pytest.raises(RuntimeError, match=r"backend must be 'w4a16' or 'w4a8'"):
        mt.moe_experts(x, ids, w, weights, backend="fp8")
    with pytest.raises(RuntimeError, match=r"topk_ids must be on cuda:0"):
        mt.moe_experts(x, ids.cpu(), w, weights)
    with pytest.raises(RuntimeError, match=r"latent width is 128"):
        mt.moe_experts(x[:, :64], ids, w, weights)
    with pytest.raises(RuntimeError, match=r"weights handle 987654 is unknown"):
        mt.moe_experts(x, ids, w, 987654)
    with pytest.raises(RuntimeError, match=r"router_logits must be \[4, 16\]"):
        mt.moe_routed(x, torch.randn(4, 8, device="cuda"), None, weights, top_k=2)
    bad = list(random_experts(2, H, I, seed=20))
    bad[5][0, 0, 0] = 255
    with pytest.raises(RuntimeError, match=r"255|NaN"):
        mt.PreparedWeights(*bad, device="cuda:0")


def test_release(experts):
    wt = mt.PreparedWeights(*experts, device="cuda:0")
    h = wt.handle
    wt.release()
    x, ids, w = inputs(2, seed=21)
    with pytest.raises(RuntimeError, match=r"unknown or was released"):
        mt.moe_experts(x.cuda(), ids.cuda(), w.cuda(), h)
