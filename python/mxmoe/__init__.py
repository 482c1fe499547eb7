"""mxmoe: Kimi-K3's routed-expert MoE with MXFP4 weights (MXFP8 / BF16 activations).

The PyTorch layer lives in mxmoe.torch (custom ops, KimiK3MoE, the SGLang adapter); importing
this package alone does not import torch.
"""
__version__ = "0.1.0"
