"""torch.library.opcheck on every op: schema, fake (meta) impl, autograd registration and
AOT dispatch. CPU ops here; the GPU ops in test_cuda.py (skipped without CUDA)."""
import pytest
import torch

import mxmoe.torch as mt
from conftest import requires_cuda
from torch_ref import random_block, random_experts, random_routing

E, H, I, K, T = 8, 64, 64, 4, 5


@pytest.fixture(scope="module")
def experts():
    return random_experts(E, H, I, seed=11)


def test_opcheck_reference_experts(experts):
    x = torch.randn(T, H).to(torch.bfloat16)
    ids, w = random_routing(T, K, E, seed=12)
    pb = torch.full((E,), 3.0)
    for args in [
        (x, ids, w, *experts, 0, -1, "mxfp8", 4.0, 25.0, None, None),
        (x.float(), ids, w, *experts, 2, 4, "bf16", 4.0, 25.0, pb, None),
    ]:
        torch.library.opcheck(torch.ops.mxmoe.reference_experts.default, args)


def test_opcheck_reference_route():
    logits = torch.randn(T, 16)
    bias = torch.randn(16) * 0.1
    torch.library.opcheck(torch.ops.mxmoe.reference_route.default, (logits, bias, 4, True, 1.0))
    torch.library.opcheck(torch.ops.mxmoe.reference_route.default, (logits, None, 2, False, 2.0))


def test_opcheck_reference_block():
    blk = random_block(128, 64, 64, 8, seed=13)
    ex = random_experts(8, 64, 64, seed=14)
    x = torch.randn(3, 128).to(torch.bfloat16)
    args = (x, blk["router_weight"], blk["router_bias"], blk["latent_down"], blk["latent_norm"],
            blk["latent_up"], blk["shared_gate"], blk["shared_up"], blk["shared_down"], *ex, 2,
            True, 1.0, 1e-5, "mxfp8", 4.0, 25.0, None, None)
    torch.library.opcheck(torch.ops.mxmoe.reference_block.default, args)


def test_compile_reference_experts(experts):
    """The fake impl lets torch.compile trace through the op with no graph break."""
    ids, w = random_routing(T, K, E, seed=15)

    def f(x):
        return mt.reference_experts(x * 2, ids, w, experts, act="bf16") + 1

    x = torch.randn(T, H).to(torch.bfloat16)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x)
    assert torch.equal(got, f(x))


@requires_cuda
def test_opcheck_prepare_weights(experts):
    # prepare_weights has a side effect (a new handle per call), so the checks that compare two
    # runs' outputs do not apply; schema and autograd registration do.
    torch.library.opcheck(torch.ops.mxmoe.prepare_weights.default, (*experts, E, 0, 0),
                          test_utils=("test_schema", "test_autograd_registration"))
