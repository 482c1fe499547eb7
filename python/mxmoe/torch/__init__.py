"""mxmoe.torch: the PyTorch custom ops (torch.ops.mxmoe.*), KimiK3MoE and the SGLang adapter.

Importing it loads libmxmoe_torch.so (built by python/mxmoe_build.py or pip) and registers the
fake impls. has_cuda_ops() says whether this build has the GPU ops.
"""
from .ops import (PreparedWeights, backend_act, has_cuda_ops, moe_experts, moe_routed,
                  reference_block, reference_experts, reference_route, split_w13)
from .module import KimiConfig, KimiK3MoE, layer_tensors, stack_experts

__all__ = ["PreparedWeights", "backend_act", "has_cuda_ops", "moe_experts", "moe_routed",
           "reference_block", "reference_experts", "reference_route", "split_w13", "KimiConfig",
           "KimiK3MoE", "layer_tensors", "stack_experts"]
