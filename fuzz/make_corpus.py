#!/usr/bin/env python3
"""Writes the small seed corpus of the fuzz harnesses (fuzz/corpus/{safetensors,config}/).

Seeds are valid files plus one example of each class of defect the readers must reject, so the
fuzzer starts next to every validation branch. Rerun after changing it: python3 fuzz/make_corpus.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def st(header, data=b"", raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


def t(dtype, shape, b, e):
    return {"dtype": dtype, "shape": shape, "data_offsets": [b, e]}


def safetensors_seeds():
    d16 = bytes(range(16))
    return {
        "valid_u8_bf16_meta": st({"__metadata__": {"format": "pt"}, "w": t("U8", [2, 4], 0, 8),
                                  "b": t("BF16", [4], 8, 16)}, d16),
        "valid_every_dtype": st({n: t(n, [1], i * 8, i * 8 + s) for i, (n, s) in enumerate(
            [("BOOL", 1), ("U8", 1), ("I8", 1), ("I16", 2), ("I32", 4), ("I64", 8), ("F16", 2),
             ("BF16", 2), ("F32", 4), ("F64", 8), ("F8_E4M3", 1)])}, bytes(88)),
        "valid_empty_and_scalar": st({"e": t("F32", [0, 3], 0, 0), "s": t("F32", [], 0, 4)},
                                     bytes(4)),
        "kimi_expert_names": st({
            "model.layers.1.block_sparse_moe.experts.0.w1.weight_packed": t("U8", [2, 16], 0, 32),
            "model.layers.1.block_sparse_moe.experts.0.w1.weight_scale": t("U8", [2, 1], 32, 34)},
            bytes(34)),
        "empty_header": st({}),
        "truncated": b"\x10\x00\x00",
        "header_past_eof": struct.pack("<Q", 1000) + b"{}",
        "invalid_json": st(None, raw_header=b'{"w": {"dtype": '),
        "unknown_dtype": st({"w": t("F4", [16], 0, 16)}, d16),
        "negative_shape": st({"w": t("U8", [-4, -4], 0, 16)}, d16),
        "nbytes_mismatch": st({"w": t("F32", [3], 0, 16)}, d16),
        "offsets_past_end": st({"w": t("U8", [32], 0, 32)}, d16),
        "overlap": st({"a": t("U8", [10], 0, 10), "b": t("U8", [8], 8, 16)}, d16),
        "non_object_entry": st({"w": [1, 2, 3]}, d16),
        "bad_metadata": st({"__metadata__": {"k": 1}}),
    }


def kimi_text_config():
    return {
        "hidden_size": 7168, "routed_expert_hidden_size": 3584, "moe_intermediate_size": 3072,
        "num_experts": 896, "num_shared_experts": 2, "num_experts_per_token": 16,
        "num_hidden_layers": 93, "first_k_dense_replace": 1, "intermediate_size": 33792,
        "moe_router_activation_func": "sigmoid", "num_expert_group": 1, "topk_group": 1,
        "moe_renormalize": True, "routed_scaling_factor": 1.0, "hidden_act": "situ",
        "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
        "latent_moe_use_norm": True, "rms_norm_eps": 1e-05,
    }


def config_seeds():
    k = kimi_text_config()
    small = dict(k, hidden_size=96, routed_expert_hidden_size=64, moe_intermediate_size=32,
                 num_experts=6, num_experts_per_token=2, num_hidden_layers=3)
    aliases = {("n_routed_experts" if a == "num_experts" else
                "num_experts_per_tok" if a == "num_experts_per_token" else a): v
               for a, v in small.items()}
    missing = dict(k)
    del missing["hidden_act"]
    seeds = {
        "kimi_nested": {"model_type": "kimi_k3", "text_config": k,
                        "quantization_config": {"quant_method": "compressed-tensors",
                                                "format": "mxfp4-pack-quantized"}},
        "kimi_top_level": k,
        "small": small,
        "aliases": aliases,
        "missing_field": missing,
        "topk_gt_experts": dict(small, num_experts_per_token=7),
        "bad_width": dict(small, hidden_size=100),
        "bad_act": dict(small, hidden_act="silu"),
        "bad_beta": dict(small, activation_situ_beta=-1.0),
        "wrong_types": dict(small, hidden_size="96", moe_renormalize=1),
    }
    out = {n: json.dumps(v, indent=1).encode() for n, v in seeds.items()}
    out["not_json"] = b'{"text_config": {"hidden_size": 7168,'
    out["text_config_not_object"] = b'{"text_config": [1]}'
    return out


def main():
    for sub, seeds in (("safetensors", safetensors_seeds()), ("config", config_seeds())):
        d = os.path.join(HERE, "corpus", sub)
        os.makedirs(d, exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
