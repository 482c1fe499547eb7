"""mxmoe.torch.sglang: mxmoe as an SGLang MoE runner backend (docs/SGLANG.md has the patch).

SGLang's fused runner functions take (dispatch_output, quant_info, runner_config) and return a
combine input whose hidden_states is the expert sum in the activation dtype. The dispatch output
carries hidden_states [T, H] and a top-k output with topk_ids [T, k] (global expert ids, -1 for
none) and topk_weights [T, k]; the quant info here carries the prepared weights of this rank's
experts (an EP rank prepares its slice with expert_start). This module does not import SGLang:
the combine-input class is passed in (or a SimpleNamespace is returned), so it is testable alone.
"""
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Optional

import torch

from . import ops


@dataclass
class MxmoeQuantInfo:
    """What SGLang's quant method hands the runner: prepared weights and the SiTU settings."""
    weights: "ops.PreparedWeights"
    backend: str = "w4a8"
    beta: float = 4.0
    linear_beta: float = 25.0
    per_expert_beta: Optional[torch.Tensor] = None
    per_expert_linear_beta: Optional[torch.Tensor] = None

    @classmethod
    def from_sglang_layer(cls, w13_weight, w13_weight_scale, w2_weight, w2_weight_scale, *,
                          num_experts_total, expert_start=0, **kw):
        """From SGLang's per-layer MXFP4 parameters (w13 = [gate; up] halves, U8 packed and
        UE8M0 scales; scales typed float8_e8m0fnu are reinterpreted as their bytes)."""
        def u8(t):
            return t.view(torch.uint8) if t.dtype != torch.uint8 else t
        w = ops.PreparedWeights.from_w13(u8(w13_weight), u8(w13_weight_scale), u8(w2_weight),
                                         u8(w2_weight_scale), num_experts_total=num_experts_total,
                                         expert_start=expert_start,
                                         device=w13_weight.device if w13_weight.is_cuda else None)
        return cls(weights=w, **kw)


def run_experts(hidden_states, topk_ids, topk_weights, quant_info, routed_scaling_factor=None):
    """The expert sum for SGLang's (hidden_states, top-k): [T, H] in hidden_states' dtype."""
    if topk_ids.dtype != torch.int32:
        topk_ids = topk_ids.to(torch.int32)  # SGLang may hand int64 ids
    if topk_weights.dtype != torch.float32:
        topk_weights = topk_weights.float()
    q = quant_info
    out = ops.moe_experts(hidden_states, topk_ids, topk_weights, q.weights, backend=q.backend,
                          beta=q.beta, linear_beta=q.linear_beta,
                          per_expert_beta=q.per_expert_beta,
                          per_expert_linear_beta=q.per_expert_linear_beta)
    if routed_scaling_factor is not None and routed_scaling_factor != 1.0:
        out = out * routed_scaling_factor
    return out.to(hidden_states.dtype)


def fused_experts_none_to_mxmoe(dispatch_output, quant_info, runner_config, combine_cls=None):
    """The body of SGLang's `@register_fused_func("none", "mxmoe")` function."""
    if runner_config is not None:
        act = getattr(runner_config, "activation", "situ")
        if act != "situ":
            raise ValueError("mxmoe runner: activation %r is not supported (only 'situ')" % act)
    topk = dispatch_output.topk_output
    if not hasattr(topk, "topk_ids"):
        raise ValueError("mxmoe runner: needs a top-k output with topk_ids / topk_weights")
    out = run_experts(dispatch_output.hidden_states, topk.topk_ids, topk.topk_weights, quant_info,
                      getattr(runner_config, "routed_scaling_factor", None))
    return (combine_cls or SimpleNamespace)(hidden_states=out)
