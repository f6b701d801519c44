"""The gate model's config: the `small` structure of crates/tf-dsv41/src/tiny/configs.rs as HF JSON, roles, Engram hashing."""

import copy
import json
import math
from pathlib import Path

import numpy as np
import torch

# The repo's tokenizer assets: above this file in a checkout, or under the working directory when carried elsewhere.
ASSETS = next(p / "assets" / "deepseek-v4" for p in [*Path(__file__).resolve().parents, Path.cwd()]
              if (p / "assets" / "deepseek-v4" / "token_map.u32").is_file())

# The `small` config (tiny's §18 layer map at dim 128, real vocab), as TinyKind::Small::hf_json writes it.
SMALL_HF = {
    "architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41", "dtype": "bfloat16",
    "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2, "image_token_id": 129264,
    "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [32, 32],
                            "scale_fmt": "ue8m0", "expert_dtype": "fp4"},
    "text_config": {
        "model_type": "deepseek_v41_text", "vocab_size": 129280, "hidden_size": 128, "num_hidden_layers": 8,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 128, "qk_rope_head_dim": 32,
        "q_lora_rank": 128, "o_groups": 2, "o_lora_rank": 64, "sliding_window": 16,
        "compress_ratios": [0, 0, 2, 2, 1, 1, 1, 1, 0, 0, 0],
        "kv_source_layer_ids": [2, 4], "index_source_layer_ids": [2, 4, 6],
        "candidate_source_layer_id": 4, "candidate_topk_blocks": 3, "candidate_block_size": 4,
        "index_n_heads": 4, "index_head_dim": 64, "index_topk": 8,
        "rope_theta": 10000, "compress_rope_theta": 160000,
        "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 32, "beta_fast": 32,
                         "beta_slow": 1},
        "max_position_embeddings": 4096,
        "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "moe_intermediate_size": 128,
        "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "norm_topk_prob": True,
        "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "hidden_act": "silu", "rms_norm_eps": 1e-20,
        "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "num_hash_layers": 0,
        "engram_layer_ids": [1, 2], "engram_num_embeddings": None, "engram_max_ngram_size": 4,
        "engram_vocab_size": 1000, "engram_n_heads": 2, "engram_head_dim": 32, "engram_pad_token_id": 2,
        "engram_compressed_vocab_size": 99092,
        "num_nextn_predict_layers": 3, "dspark_block_size": 5, "dspark_noise_token_id": 128799,
        "dspark_target_layer_ids": [5, 6, 7], "dspark_markov_rank": 32,
        "dspark_n_routed_experts": 4, "dspark_num_experts_per_tok": 2,
    },
}

# Multipliers the Rust engine knows (crates/tf-engram/src/multipliers.rs): Engram must stay on layers with an entry.
KNOWN_MULTIPLIERS = {
    1: [76_632_096_046_245, 4_839_876_093_313, 35_959_672_319_349, 73_987_337_458_391],
    2: [76_507_469_730_479, 37_097_805_264_573, 22_647_385_550_623, 71_424_551_940_645],
    14: [67_716_810_739_261, 51_510_806_800_915, 30_921_347_202_721, 82_619_226_485_591],
}


def is_prime(n: int) -> bool:
    if n < 2:
        return False
    f = 2
    while f * f <= n:
        if n % f == 0:
            return False
        f += 1
    return True


def bucket_primes(engram_vocab_size: int, count: int) -> list[int]:
    """Consecutive primes above `engram_vocab_size - 1` (spec §10.1 step 3)."""
    out, cur = [], engram_vocab_size - 1
    while len(out) < count:
        cur += 1
        if is_prime(cur):
            out.append(cur)
    return out


def multipliers(layer: int, classes: int) -> list[int]:
    """numpy's PCG64 draws of spec §10.1 step 2, checked against the Rust table."""
    bound = max(1, (np.iinfo(np.int64).max // classes) // 2)
    m = (np.random.default_rng(10007 * layer).integers(0, bound, size=4, dtype=np.int64) * 2 + 1).tolist()
    assert layer not in KNOWN_MULTIPLIERS or m == KNOWN_MULTIPLIERS[layer], "numpy disagrees with the Rust table"
    return m


class Cfg:
    """Reference-named view of the HF JSON, with per-layer roles."""

    def __init__(self, hf: dict):
        self.hf = copy.deepcopy(hf)
        t = self.hf["text_config"]
        per_layer = (t["engram_max_ngram_size"] - 1) * t["engram_n_heads"]
        primes = bucket_primes(t["engram_vocab_size"], per_layer * len(t["engram_layer_ids"]))
        self.engram_primes = [primes[i * per_layer:(i + 1) * per_layer] for i in range(len(t["engram_layer_ids"]))]
        t["engram_num_embeddings"] = [sum(p) for p in self.engram_primes]
        for k, v in t.items():
            setattr(self, k, v)
        self.vocab, self.dim, self.n_layers = t["vocab_size"], t["hidden_size"], t["num_hidden_layers"]
        self.n_heads, self.rope_dim, self.window = t["num_attention_heads"], t["qk_rope_head_dim"], t["sliding_window"]
        self.inter, self.hc, self.eps = t["moe_intermediate_size"], t["hc_mult"], t["rms_norm_eps"]
        self.n_mtp = t["num_nextn_predict_layers"]
        self.rope_scaling = t["rope_scaling"]

    def role(self, l: int) -> dict:
        """Layer role as crates/tf-dsv41/src/config/roles.rs derives it."""
        ratio = self.compress_ratios[l]
        backbone = l < self.n_layers
        kv_src = backbone and l in self.kv_source_layer_ids
        idx_src = backbone and l in self.index_source_layer_ids
        comp = backbone and ratio > 0
        below = lambda srcs: max([s for s in srcs if s <= l], default=None)
        cand = self.candidate_source_layer_id
        return {
            "layer": l, "ratio": ratio, "compressed": comp, "kv_source": kv_src, "index_source": idx_src,
            "kv_owner": below(self.kv_source_layer_ids) if comp else None,
            "sel_owner": below(self.index_source_layer_ids) if comp else None,
            "candidate_source": idx_src and cand == l, "uses_candidates": idx_src and 0 <= cand < l,
            "yarn": ratio > 0, "dspark": not backbone,
            "owns_index_keys": idx_src and l in self.kv_source_layer_ids,
        }

    def moe_config(self, l: int) -> tuple[int, int]:
        if l < self.n_layers:
            return self.n_routed_experts, self.num_experts_per_tok
        return self.dspark_n_routed_experts, self.dspark_num_experts_per_tok

    def inv_freq(self, yarn: bool) -> torch.Tensor:
        """RoPE inverse frequencies in f32 as crates/tf-dsv41/src/rope.rs builds them."""
        d = self.rope_dim
        base = float(self.compress_rope_theta if yarn else self.rope_theta)
        f = (1.0 / torch.tensor(base, dtype=torch.float32) ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        rs = self.rope_scaling
        if yarn and rs["original_max_position_embeddings"] > 0:
            orig = rs["original_max_position_embeddings"]
            corr = lambda r: d * math.log(orig / (r * 2 * math.pi)) / (2 * math.log(base))
            low = max(math.floor(corr(rs["beta_fast"])), 0.0)
            high = min(math.ceil(corr(rs["beta_slow"])), d - 1.0)
            span = max(high - low, 1e-3)
            ramp = ((torch.arange(d // 2, dtype=torch.float32) - low) / span).clamp(0, 1)
            smooth = 1 - ramp
            f = f / rs["factor"] * (1 - smooth) + f * smooth
        return f

    def to_json(self) -> str:
        return json.dumps(self.hf, indent=2) + "\n"


def load_token_map() -> torch.Tensor:
    raw = np.fromfile(ASSETS / "token_map.u32", dtype="<u4")
    return torch.from_numpy(raw.astype(np.int64))


class EngramHasher:
    """Spec §10.1 n-gram ids per Engram layer for whole sequences starting at position 0 (no image tokens)."""

    def __init__(self, cfg: Cfg, token_map: torch.Tensor):
        self.cfg, self.map = cfg, token_map
        classes = int(token_map.max()) + 1
        assert classes == cfg.engram_compressed_vocab_size, f"token map has {classes} classes"
        self.pad = int(token_map[cfg.engram_pad_token_id])
        self.mult = [multipliers(l, classes) for l in cfg.engram_layer_ids]

    def ids(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """Per Engram layer, `[B, S, (n-1)·heads]` int64 table rows for `tokens` `[B, S]`."""
        c = self.map.to(tokens.device)[tokens]
        n, heads = self.cfg.engram_max_ngram_size, self.cfg.engram_n_heads
        win = [c] + [torch.nn.functional.pad(c, (k, 0), value=self.pad)[:, :-k] for k in range(1, n)]
        out = []
        for m, primes in zip(self.mult, self.cfg.engram_primes):
            offsets = np.concatenate([[0], np.cumsum(primes)[:-1]]).tolist()
            roll = win[0] * m[0]
            cols = []
            for k in range(1, n):
                roll = torch.bitwise_xor(roll, win[k] * m[k])
                for h in range((k - 1) * heads, k * heads):
                    cols.append(torch.remainder(roll, primes[h]) + offsets[h])
            out.append(torch.stack(cols, -1))
        return out
