"""A pure-PyTorch fp64 reference of Kimi-K3's routed experts and MoE block, written from
shared/KIMI_K3.md and docs/NUMERICS.md (independent of the C++ code): MXFP4 decoded from its bit
fields, MXFP8 by the MX scale rule with torch's float8_e4m3fn rounding, products in fp64 rounded
once to fp32 at the documented points, SiTU in fp64. Plus the random test layers the tests use.
"""
import math

import torch

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)


def dequant_mxfp4(packed, scales):
    """packed [rows, k/2] U8 (low nibble = even element), scales [rows, k/32] U8 -> fp64."""
    lo = (packed & 0xF).long()
    hi = (packed >> 4).long()
    codes = torch.stack([lo, hi], dim=-1).reshape(packed.shape[0], -1)
    mag = E2M1[codes & 7]
    val = torch.where((codes & 8) != 0, -mag, mag)
    scale = torch.pow(2.0, scales.double() - 127.0).repeat_interleave(32, dim=1)
    return val * scale


def mx_exponent(amax, max_code):
    """Smallest integer E with amax <= max_code * 2^E, clamped to [-127, 127]."""
    if amax == 0:
        return -127
    e = math.ceil(math.log2(amax / max_code))
    while amax > max_code * 2.0 ** e:
        e += 1
    while e > -127 and amax <= max_code * 2.0 ** (e - 1):
        e -= 1
    return max(-127, min(127, e))


def fake_quant_mxfp8(x):
    """Rows of x [T, K] (fp32 values) -> MXFP8 per 32 along K, dequantized, fp64."""
    x = x.double()
    out = torch.empty_like(x)
    T, K = x.shape
    for t in range(T):
        for b in range(0, K, 32):
            blk = x[t, b:b + 32]
            e = mx_exponent(blk.abs().max().item(), 448.0)
            q = (blk / 2.0 ** e).float().to(torch.float8_e4m3fn).double()
            out[t, b:b + 32] = q * 2.0 ** e
    return out


def quant(x, act):
    """Q1 / Q2 of an activation mode on fp32 values, returned as fp64."""
    if act == "bf16":
        return x.float().to(torch.bfloat16).double()
    return fake_quant_mxfp8(x.float())


def situ_glu64(g, u, beta, linear_beta):
    g, u = g.double(), u.double()
    return beta * torch.tanh(g / beta) * torch.sigmoid(g) * linear_beta * torch.tanh(u / linear_beta)


def experts_ref(x, ids, w, experts, act, start=0, count=-1, beta=4.0, linear_beta=25.0,
                per_beta=None, per_lbeta=None):
    """out [T, H] fp32 = sum over slots in order of fp32(w * expert(x)) for owned experts."""
    w1p, w1s, w3p, w3s, w2p, w2s = experts
    E = w1p.shape[0]
    count = E - start if count < 0 else count
    T, H = x.shape
    xq = quant(x.float(), act)
    out = torch.zeros(T, H, dtype=torch.float32)
    deq = {}
    for j in range(ids.shape[1]):
        for t in range(T):
            e = int(ids[t, j])
            if not (start <= e < start + count):
                continue
            if e not in deq:
                deq[e] = (dequant_mxfp4(w1p[e], w1s[e]), dequant_mxfp4(w3p[e], w3s[e]),
                          dequant_mxfp4(w2p[e], w2s[e]))
            W1, W3, W2 = deq[e]
            b = float(per_beta[e]) if per_beta is not None else beta
            lb = float(per_lbeta[e]) if per_lbeta is not None else linear_beta
            g = (W1 @ xq[t]).float()
            u = (W3 @ xq[t]).float()
            h = situ_glu64(g, u, b, lb).float()
            y = (W2 @ quant(h[None], act)[0]).float()
            out[t] = out[t] + (w[t, j] * y).float()
    return out


def route_ref(logits, bias, top_k, renormalize=True, scale=1.0):
    """Kimi routing: top-k of fp32(sigmoid + bias), ties to the lower id; weights from s."""
    s = (1.0 / (1.0 + torch.exp(-logits.float()))).float()
    key = s + bias.float() if bias is not None else s
    order = torch.sort(key, dim=1, descending=True, stable=True).indices[:, :top_k]
    chosen = torch.gather(s, 1, order)
    if renormalize:
        total = torch.zeros(chosen.shape[0], dtype=torch.float32)
        for j in range(top_k):
            total = total + chosen[:, j]
        w = (chosen / total[:, None]).float() * scale
    else:
        w = chosen * scale
    return order.to(torch.int32), w.float()


def mm32(a, w):
    """fp32(a . w^T) with fp64 accumulation."""
    return (a.double() @ w.double().t()).float()


def block_ref(x, blk, experts, top_k, act, eps=1e-5, beta=4.0, linear_beta=25.0):
    """The whole block on BF16 x [T, hidden] -> fp32, NUMERICS.md's rounding points."""
    logits = mm32(x, blk["router_weight"])
    ids, w = route_ref(logits, blk.get("router_bias"), top_k)
    latent = mm32(x, blk["latent_down"]).to(torch.bfloat16).float()
    routed = experts_ref(latent, ids, w, experts, act, beta=beta, linear_beta=linear_beta).double()
    inv = 1.0 / torch.sqrt((routed * routed).mean(dim=1, keepdim=True) + eps)
    normed = (routed * inv * blk["latent_norm"].double()).to(torch.bfloat16)  # (2 roundings)
    y = mm32(normed, blk["latent_up"])
    h = situ_glu64(mm32(x, blk["shared_gate"]), mm32(x, blk["shared_up"]), beta, linear_beta)
    sh = mm32(h.float().to(torch.bfloat16), blk["shared_down"])
    return (y + sh).float()


# ---- random test layers ----

def random_experts(E, H, I, seed=0, scale_lo=118, scale_hi=124):
    """Stacked MXFP4 experts with random codes and scale bytes (never 255)."""
    g = torch.Generator().manual_seed(seed)

    def mx(rows, k):
        packed = torch.randint(0, 256, (E, rows, k // 2), generator=g, dtype=torch.int32)
        scales = torch.randint(scale_lo, scale_hi + 1, (E, rows, k // 32), generator=g,
                               dtype=torch.int32)
        return packed.to(torch.uint8), scales.to(torch.uint8)

    w1p, w1s = mx(I, H)
    w3p, w3s = mx(I, H)
    w2p, w2s = mx(H, I)
    return (w1p, w1s, w3p, w3s, w2p, w2s)


def random_routing(T, k, E, seed=0, allow_none=True):
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).to(torch.int32)
    if allow_none and T > 1:
        ids[1, -1] = -1
    w = torch.rand(T, k, generator=g, dtype=torch.float32)
    return ids, w / w.sum(dim=1, keepdim=True)


def random_block(D, L, I, E, n_shared=2, seed=0):
    g = torch.Generator().manual_seed(seed)

    def bf(*shape, s=0.05):
        return (torch.randn(*shape, generator=g) * s).to(torch.bfloat16)

    return {
        "router_weight": bf(E, D, s=0.2),
        "router_bias": (torch.randn(E, generator=g) * 0.1).float(),
        "latent_down": bf(L, D, s=0.15),
        "latent_norm": (1.0 + torch.randn(L, generator=g) * 0.1).to(torch.bfloat16),
        "latent_up": bf(D, L, s=0.1),
        "shared_gate": bf(n_shared * I, D, s=0.15),
        "shared_up": bf(n_shared * I, D, s=0.15),
        "shared_down": bf(D, n_shared * I, s=0.1),
    }


def nrmse(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


def cosine(a, b):
    a, b = a.double().flatten(), b.double().flatten()
    return (a @ b / (a.norm() * b.norm()).clamp_min(1e-300)).item()
