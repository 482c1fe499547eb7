"""mxmoe.torch.module: KimiK3MoE, one Kimi-K3 MoE block as an nn.Module.

Built from one layer's checkpoint tensors, found by name suffix below
`layers.L.block_sparse_moe.` (a multimodal checkpoint's `language_model.` prefix is fine):
gate.weight, gate.e_score_correction_bias, routed_expert_{down_proj,norm,up_proj}.weight,
shared_experts.{gate,up,down}_proj.weight and experts.E.w{1,3,2}.weight_{packed,scale}.

forward(x) on BF16 x [T, hidden] returns fp32 [T, hidden] with the rounding points of
docs/NUMERICS.md:
    logits = fp32(x . Wg^T)                  -> Kimi routing (sigmoid + bias top-k)
    latent = BF16(fp32(x . Wdown^T))
    routed = the routed experts on latent     (the mxmoe ops: GPU kernels or the CPU reference)
    normed = BF16(RMSNorm(routed) * norm)     in fp64, one rounding to BF16
    out    = fp32(normed . Wup^T) + fp32(Wsd . BF16(situ_glu(x . Wsg^T, x . Wsu^T)))
On the CPU every product accumulates in fp64 and rounds once to fp32 (as the C++ reference);
on CUDA the dense products run in fp32 (the routed experts are the mxmoe kernels).
Limitations: no expert parallelism here (a partial expert sum cannot go through the RMSNorm;
use the experts op with an EP slice for that); the routing on CUDA is the GPU router of
mxmoe::moe_routed, on the CPU mxmoe::reference_route.
"""
import json
import os
import re

import torch
from torch import nn

from . import ops

BLOCK_TENSORS = {
    "router_weight": "gate.weight",
    "router_bias": "gate.e_score_correction_bias",
    "latent_down": "routed_expert_down_proj.weight",
    "latent_norm": "routed_expert_norm.weight",
    "latent_up": "routed_expert_up_proj.weight",
    "shared_gate": "shared_experts.gate_proj.weight",
    "shared_up": "shared_experts.up_proj.weight",
    "shared_down": "shared_experts.down_proj.weight",
}
OPTIONAL = {"router_bias", "latent_norm", "shared_gate", "shared_up", "shared_down"}
_EXPERT = re.compile(r"^experts\.(\d+)\.(w[123])\.weight_(packed|scale)$")
EXPERT_ORDER = [("w1", "packed"), ("w1", "scale"), ("w3", "packed"), ("w3", "scale"),
                ("w2", "packed"), ("w2", "scale")]


def layer_marker(layer):
    return "layers.%d.block_sparse_moe." % layer


def layer_suffix(name, layer):
    """The part of a tensor name after `layers.L.block_sparse_moe.`, or None."""
    m = layer_marker(layer)
    i = name.find(m)
    if i < 0 or (i > 0 and name[i - 1] != "."):
        return None
    return name[i + len(m):]


def layer_tensors(named, layer):
    """{suffix: tensor} of one layer from any {name: tensor} mapping (e.g. a state_dict)."""
    out = {}
    for name, t in named.items():
        s = layer_suffix(name, layer)
        if s is not None:
            if s in out:
                raise ValueError("mxmoe: two tensors end with %s%s" % (layer_marker(layer), s))
            out[s] = t
    if not out:
        raise ValueError("mxmoe: no tensor named *%s* (wrong layer?)" % layer_marker(layer))
    return out


def stack_experts(tensors, num_experts=None):
    """(w1_packed, w1_scale, w3_packed, w3_scale, w2_packed, w2_scale), each [E, rows, cols]."""
    found = {}
    for s, t in tensors.items():
        m = _EXPERT.match(s)
        if m:
            found[(int(m.group(1)), m.group(2), m.group(3))] = t
    if not found:
        raise ValueError("mxmoe: no routed expert tensors (experts.E.w1.weight_packed, ...)")
    E = num_experts if num_experts is not None else 1 + max(e for e, _, _ in found)
    out = []
    for w, kind in EXPERT_ORDER:
        parts = []
        for e in range(E):
            t = found.get((e, w, kind))
            if t is None:
                raise ValueError("mxmoe: missing experts.%d.%s.weight_%s" % (e, w, kind))
            if t.dtype != torch.uint8:
                raise ValueError("mxmoe: experts.%d.%s.weight_%s must be uint8, got %s"
                                 % (e, w, kind, t.dtype))
            parts.append(t)
        out.append(torch.stack(parts).contiguous())
    return tuple(out)


class KimiConfig:
    """The config.json fields the block needs (text_config nested or at the top level)."""

    def __init__(self, d=None):
        d = dict(d or {})
        d = d.get("text_config", d)
        self.num_experts = int(d.get("num_experts", 896))
        self.top_k = int(d.get("num_experts_per_token", 16))
        self.renormalize = bool(d.get("moe_renormalize", True))
        self.routed_scaling_factor = float(d.get("routed_scaling_factor", 1.0))
        self.beta = float(d.get("activation_situ_beta", 4.0))
        self.linear_beta = float(d.get("activation_situ_linear_beta", 25.0))
        self.rms_norm_eps = float(d.get("rms_norm_eps", 1e-5))
        self.use_norm = bool(d.get("latent_moe_use_norm", True))
        act = d.get("hidden_act", "situ")
        if act != "situ":
            raise ValueError("mxmoe: hidden_act %r is not 'situ'" % act)

    @classmethod
    def from_file(cls, path):
        with open(path) as f:
            return cls(json.load(f))


def situ_glu(g, u, beta, linear_beta):
    """SiTU-GLU in fp32, the formula of formats.h (sigmoid = 1 / (1 + exp(-g)))."""
    gate = beta * torch.tanh(g / beta) * (1.0 / (1.0 + torch.exp(-g)))
    return gate * (linear_beta * torch.tanh(u / linear_beta))


def bf16_from_f64(d):
    """fp64 -> BF16 with ONE rounding (RNE): round-to-odd to fp32 keeps the sticky bit, then
    fp32 -> BF16 RNE is exact-once (as the C++ reference does)."""
    f = d.float()
    fd = f.double()
    inexact = torch.isfinite(f) & (fd != d)
    f = torch.where(inexact & (fd.abs() > d.abs()), torch.nextafter(f, torch.zeros_like(f)), f)
    bits = f.view(torch.int32)
    bits = torch.where(inexact, bits | 1, bits)
    return bits.view(torch.float32).to(torch.bfloat16)


class KimiK3MoE(nn.Module):
    """One Kimi-K3 MoE block. Construct with from_state_dict / from_safetensors, or directly
    from a {suffix: tensor} dict (layer_tensors)."""

    def __init__(self, tensors, config=None, *, backend="w4a8", device="cpu",
                 per_expert_beta=None, per_expert_linear_beta=None):
        super().__init__()
        cfg = config if isinstance(config, KimiConfig) else KimiConfig(config)
        self.cfg = cfg
        self.backend = backend
        ops.backend_act(backend)  # KeyError for an unknown backend
        device = torch.device(device)
        self.on_cuda = device.type == "cuda"
        for attr, suffix in BLOCK_TENSORS.items():
            t = tensors.get(suffix)
            if t is None and attr not in OPTIONAL:
                raise ValueError("mxmoe: layer tensor %s is missing" % suffix)
            if attr == "latent_norm" and cfg.use_norm and t is None:
                raise ValueError("mxmoe: latent_moe_use_norm is set but %s is missing" % suffix)
            if attr == "latent_norm" and not cfg.use_norm:
                t = None
            if t is not None:
                want = torch.float32 if attr == "router_bias" else torch.bfloat16
                if t.dtype != want:
                    raise ValueError("mxmoe: %s must be %s, got %s" % (suffix, want, t.dtype))
                t = t.to(device)
            self.register_buffer(attr, t, persistent=False)
        experts = stack_experts(tensors, cfg.num_experts)
        self.num_experts = experts[0].shape[0]
        if self.router_weight.shape[0] != self.num_experts:
            raise ValueError("mxmoe: gate.weight has %d rows for %d experts"
                             % (self.router_weight.shape[0], self.num_experts))
        self.per_expert_beta = per_expert_beta
        self.per_expert_linear_beta = per_expert_linear_beta
        if self.on_cuda:
            self.weights = ops.PreparedWeights(*experts, num_experts_total=self.num_experts,
                                               expert_start=0, device=device)
            self.experts = None
        else:
            self.weights = None
            self.experts = experts
        self.matmul_dtype = torch.float32 if self.on_cuda else torch.float64

    @classmethod
    def from_state_dict(cls, state_dict, layer, config=None, **kw):
        return cls(layer_tensors(state_dict, layer), config, **kw)

    @classmethod
    def from_safetensors(cls, path, layer, config=None, **kw):
        """`path`: a checkpoint directory (config.json + *.safetensors) or one .safetensors
        file. Reads only this layer's tensors (the `safetensors` package, lazily)."""
        try:
            from safetensors import safe_open
        except ImportError as e:
            raise ImportError("mxmoe: from_safetensors needs the `safetensors` package") from e
        files = [path]
        if os.path.isdir(path):
            files = sorted(os.path.join(path, f) for f in os.listdir(path)
                           if f.endswith(".safetensors"))
            if config is None and os.path.exists(os.path.join(path, "config.json")):
                config = KimiConfig.from_file(os.path.join(path, "config.json"))
            if not files:
                raise ValueError("mxmoe: no .safetensors file in %s" % path)
        tensors = {}
        for f in files:
            with safe_open(f, framework="pt") as st:
                for name in st.keys():
                    if layer_suffix(name, layer) is not None:
                        tensors[name] = st.get_tensor(name)
        return cls(layer_tensors(tensors, layer), config, **kw)

    def _mm(self, a, w):
        """fp32(a . w^T) with the matmul dtype's accumulation."""
        return (a.to(self.matmul_dtype) @ w.to(self.matmul_dtype).t()).float()

    def routed_experts(self, latent, logits):
        cfg = self.cfg
        common = dict(beta=cfg.beta, linear_beta=cfg.linear_beta,
                      per_expert_beta=self.per_expert_beta,
                      per_expert_linear_beta=self.per_expert_linear_beta)
        if self.on_cuda:
            out, _, _ = ops.moe_routed(latent, logits, self.router_bias, self.weights,
                                       top_k=cfg.top_k, renormalize=cfg.renormalize,
                                       routed_scaling_factor=cfg.routed_scaling_factor,
                                       backend=self.backend, **common)
            return out
        ids, w = ops.reference_route(logits, self.router_bias, top_k=cfg.top_k,
                                     renormalize=cfg.renormalize,
                                     routed_scaling_factor=cfg.routed_scaling_factor)
        return ops.reference_experts(latent, ids, w, self.experts,
                                     act=ops.backend_act(self.backend), **common)

    def forward(self, x):
        if x.dtype != torch.bfloat16 or x.dim() != 2:
            raise ValueError("mxmoe: KimiK3MoE takes BF16 [T, hidden], got %s %s"
                             % (x.dtype, tuple(x.shape)))
        cfg = self.cfg
        logits = self._mm(x, self.router_weight)
        latent = self._mm(x, self.latent_down).to(torch.bfloat16)
        routed = self.routed_experts(latent, logits)
        if self.latent_norm is not None:
            r = routed.double()
            inv = 1.0 / torch.sqrt((r * r).sum(dim=1, keepdim=True) / r.shape[1] + cfg.rms_norm_eps)
            normed = bf16_from_f64(r * inv * self.latent_norm.double())
        else:
            normed = routed.to(torch.bfloat16)
        out = self._mm(normed, self.latent_up)
        if self.shared_gate is not None:
            h = situ_glu(self._mm(x, self.shared_gate), self._mm(x, self.shared_up), cfg.beta,
                         cfg.linear_beta).to(torch.bfloat16)
            out = out + self._mm(h, self.shared_down)
        return out
