"""mxmoe.torch.ops: loads the extension, registers the fake (meta) impls of every op, and wraps
the ops in Python functions with keyword defaults.

Ops (schemas in python/csrc/ops.cpp), all under torch.ops.mxmoe:
  prepare_weights(w1_packed, w1_scale, w3_packed, w3_scale, w2_packed, w2_scale,
                  num_experts_total, expert_start, device) -> int        (CUDA build)
  release_weights(int) / weights_info(int) -> int[]                      (CUDA build)
  moe_experts(hidden, topk_ids, topk_weights, weights, backend, beta, linear_beta,
              per_expert_beta?, per_expert_linear_beta?) -> fp32 [T, H]   (CUDA tensors)
  moe_experts_out(..., out) -> ()                                         (writes out)
  moe_routed(hidden, router_logits, correction_bias?, weights, top_k, renormalize,
             routed_scaling_factor, backend, ...) -> (out, ids int32, weights fp32)
  reference_experts / reference_route / reference_block                  (CPU tensors)
Stacked weight layout: w1/w3 packed [E, I, H/2] U8 (low nibble = even element), scales
[E, I, H/32] U8 (UE8M0); w2 packed [E, H, I/2], scales [E, H, I/32]. Layouts and numerics:
include/mxmoe/moe.h, docs/NUMERICS.md.
The weights handle is a plain int (see ops.cpp for why); PreparedWeights owns it.
"""
import os
import weakref

import torch

_LIB_NAME = "libmxmoe_torch.so"


def _find_library():
    env = os.environ.get("MXMOE_TORCH_LIB")
    if env:
        return env
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIB_NAME)
    if os.path.exists(here):
        return here
    raise ImportError(
        "mxmoe.torch: %s not found next to %s; build it with `pip install --no-build-isolation "
        "./python` or `python python/mxmoe_build.py --inplace`, or set MXMOE_TORCH_LIB"
        % (_LIB_NAME, here))


torch.ops.load_library(_find_library())
_ops = torch.ops.mxmoe


def has_cuda_ops():
    """True when this build of the extension has the GPU ops."""
    return bool(_ops.has_cuda())


# ---- fake (meta) implementations: output shapes only, for torch.compile / FakeTensor ----

@torch.library.register_fake("mxmoe::moe_experts")
def _moe_experts_fake(hidden, topk_ids, topk_weights, weights, backend, beta, linear_beta,
                      per_expert_beta, per_expert_linear_beta):
    return hidden.new_empty(hidden.shape, dtype=torch.float32)


@torch.library.register_fake("mxmoe::moe_experts_out")
def _moe_experts_out_fake(hidden, topk_ids, topk_weights, weights, backend, beta, linear_beta,
                          per_expert_beta, per_expert_linear_beta, out):
    return None


@torch.library.register_fake("mxmoe::moe_routed")
def _moe_routed_fake(hidden, router_logits, correction_bias, weights, top_k, renormalize,
                     routed_scaling_factor, backend, beta, linear_beta, per_expert_beta,
                     per_expert_linear_beta):
    T = hidden.shape[0]
    return (hidden.new_empty(hidden.shape, dtype=torch.float32),
            hidden.new_empty((T, top_k), dtype=torch.int32),
            hidden.new_empty((T, top_k), dtype=torch.float32))


@torch.library.register_fake("mxmoe::reference_experts")
def _reference_experts_fake(hidden, topk_ids, topk_weights, w1_packed, w1_scale, w3_packed,
                            w3_scale, w2_packed, w2_scale, expert_start, expert_count, act, beta,
                            linear_beta, per_expert_beta, per_expert_linear_beta):
    return hidden.new_empty(hidden.shape, dtype=torch.float32)


@torch.library.register_fake("mxmoe::reference_route")
def _reference_route_fake(router_logits, correction_bias, top_k, renormalize,
                          routed_scaling_factor):
    T = router_logits.shape[0]
    return (router_logits.new_empty((T, top_k), dtype=torch.int32),
            router_logits.new_empty((T, top_k), dtype=torch.float32))


@torch.library.register_fake("mxmoe::reference_block")
def _reference_block_fake(hidden, *args):
    return hidden.new_empty(hidden.shape, dtype=torch.float32)


# ---- the weights handle ----

def _release(handle):
    try:
        _ops.release_weights(handle)
    except Exception:  # noqa: BLE001 -- interpreter shutdown: the driver frees device memory
        pass


def split_w13(w13):
    """SGLang's fused w13 [E, 2I, ...] (gate = first half, up = second half) -> (w1, w3) views."""
    if w13.dim() != 3 or w13.shape[1] % 2:
        raise ValueError("mxmoe: w13 must be [E, 2I, ...] with an even row count, got %s"
                         % (tuple(w13.shape),))
    i = w13.shape[1] // 2
    return w13[:, :i], w13[:, i:]


class PreparedWeights:
    """This rank's routed experts, uploaded once and converted to the kernels' layout.

    Experts [expert_start, expert_start + E) of a model with num_experts_total experts, where E
    is the stack's first dimension. The device copy is freed by release() or garbage collection.
    """

    def __init__(self, w1_packed, w1_scale, w3_packed, w3_scale, w2_packed, w2_scale, *,
                 num_experts_total=None, expert_start=0, device=None):
        if num_experts_total is None:
            num_experts_total = expert_start + w1_packed.shape[0]
        if device is None:
            device = torch.cuda.current_device() if torch.cuda.is_available() else 0
        elif isinstance(device, (str, torch.device)):
            device = torch.device(device)
            if device.type != "cuda":
                raise ValueError("mxmoe: PreparedWeights lives on a CUDA device, got %s" % device)
            device = device.index if device.index is not None else torch.cuda.current_device()
        self.handle = _ops.prepare_weights(w1_packed, w1_scale, w3_packed, w3_scale, w2_packed,
                                           w2_scale, int(num_experts_total), int(expert_start),
                                           int(device))
        self._finalizer = weakref.finalize(self, _release, self.handle)
        info = list(_ops.weights_info(self.handle))
        (self.hidden, self.intermediate, self.num_experts_total, self.expert_start,
         self.expert_count, self.device_index, cc_major, cc_minor, self.weight_bytes) = info
        self.compute_capability = (cc_major, cc_minor)

    @classmethod
    def from_w13(cls, w13_packed, w13_scale, w2_packed, w2_scale, **kw):
        """From SGLang's fused layout: w13 = [gate; up] halves along dim 1."""
        w1p, w3p = split_w13(w13_packed)
        w1s, w3s = split_w13(w13_scale)
        return cls(w1p, w1s, w3p, w3s, w2_packed, w2_scale, **kw)

    @property
    def device(self):
        return torch.device("cuda", self.device_index)

    def release(self):
        self._finalizer()


def _handle(weights):
    return weights.handle if isinstance(weights, PreparedWeights) else int(weights)


# ---- wrappers ----

def backend_act(backend):
    """The CPU reference's activation mode matching a GPU backend."""
    return {"w4a8": "mxfp8", "w4a16": "bf16"}[backend]


def moe_experts(hidden, topk_ids, topk_weights, weights, *, backend="w4a8", beta=4.0,
                linear_beta=25.0, per_expert_beta=None, per_expert_linear_beta=None, out=None):
    """Routed experts on caller-chosen top-k: fp32 [T, H] (written into `out` when given)."""
    args = (hidden, topk_ids, topk_weights, _handle(weights), backend, float(beta),
            float(linear_beta), per_expert_beta, per_expert_linear_beta)
    if out is None:
        return _ops.moe_experts(*args)
    _ops.moe_experts_out(*args, out)
    return out


def moe_routed(hidden, router_logits, correction_bias, weights, *, top_k, renormalize=True,
               routed_scaling_factor=1.0, backend="w4a8", beta=4.0, linear_beta=25.0,
               per_expert_beta=None, per_expert_linear_beta=None):
    """Kimi routing (sigmoid + bias top-k) on the GPU, then the routed experts.
    Returns (out fp32 [T, H], topk_ids int32 [T, k], topk_weights fp32 [T, k])."""
    return _ops.moe_routed(hidden, router_logits, correction_bias, _handle(weights), int(top_k),
                           bool(renormalize), float(routed_scaling_factor), backend, float(beta),
                           float(linear_beta), per_expert_beta, per_expert_linear_beta)


def reference_experts(hidden, topk_ids, topk_weights, experts, *, act="mxfp8", expert_start=0,
                      expert_count=-1, beta=4.0, linear_beta=25.0, per_expert_beta=None,
                      per_expert_linear_beta=None):
    """The CPU reference of the routed experts. `experts` = (w1_packed, w1_scale, w3_packed,
    w3_scale, w2_packed, w2_scale), stacked over ALL experts (index = global id)."""
    return _ops.reference_experts(hidden, topk_ids, topk_weights, *experts, int(expert_start),
                                  int(expert_count), act, float(beta), float(linear_beta),
                                  per_expert_beta, per_expert_linear_beta)


def reference_route(router_logits, correction_bias, *, top_k, renormalize=True,
                    routed_scaling_factor=1.0):
    """The CPU reference of Kimi routing: (ids int32 [T, k], weights fp32 [T, k])."""
    return _ops.reference_route(router_logits, correction_bias, int(top_k), bool(renormalize),
                                float(routed_scaling_factor))


def reference_block(hidden, block, experts, *, top_k, renormalize=True,
                    routed_scaling_factor=1.0, rms_norm_eps=1e-5, act="mxfp8", beta=4.0,
                    linear_beta=25.0, per_expert_beta=None, per_expert_linear_beta=None):
    """The CPU reference of the whole block on BF16 hidden [T, hidden] -> fp32 [T, hidden].
    `block` maps router_weight, router_bias, latent_down, latent_norm, latent_up, shared_gate,
    shared_up, shared_down to BF16 tensors (bias fp32; norm and shared ones may be None)."""
    return _ops.reference_block(
        hidden, block["router_weight"], block.get("router_bias"), block["latent_down"],
        block.get("latent_norm"), block["latent_up"], block.get("shared_gate"),
        block.get("shared_up"), block.get("shared_down"), *experts, int(top_k),
        bool(renormalize), float(routed_scaling_factor), float(rms_norm_eps), act, float(beta),
        float(linear_beta), per_expert_beta, per_expert_linear_beta)
