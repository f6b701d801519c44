//! Every tensor DeepSeek's reference `Transformer` loads for a config: names, storage dtypes and shapes (spec §3.2).

use crate::config::{Config, roles};
use crate::wquant::BLOCK;
use tf_core::{Checkpoint, DType};

/// How one parameter is stored; quantized ones carry a sibling `.scale` tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Store {
    /// FP8 e4m3 `[rows, cols]` plus E8M0 `[ceil(rows/32), ceil(cols/32)]`: dense `Linear` weights.
    Fp8Tiles {
        rows: usize,
        cols: usize,
    },
    /// FP8 e4m3 `[rows, cols]` plus E8M0 `[rows, cols/32]`: Engram tables.
    Fp8Rows {
        rows: usize,
        cols: usize,
    },
    /// E2M1 pairs as I8 `[rows, cols/2]` plus E8M0 `[rows, cols/32]`: routed experts (`cols` is the logical K).
    Fp4 {
        rows: usize,
        cols: usize,
    },
    Bf16(Vec<usize>),
    F32(Vec<usize>),
}

/// One model parameter under its reference name (the main tensor's name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    pub name: String,
    pub store: Store,
}

/// One stored tensor as a safetensors header lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl TensorSpec {
    pub fn nbytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size()
    }
}

impl Param {
    /// Name of the sibling scale: `x.weight` → `x.scale`.
    pub fn scale_name(&self) -> String {
        format!("{}.scale", self.name.strip_suffix(".weight").unwrap_or(&self.name))
    }

    /// The stored tensors: the weight, then its scale when quantized.
    pub fn tensors(&self) -> Vec<TensorSpec> {
        let spec = |name: String, dtype, shape: Vec<usize>| TensorSpec { name, dtype, shape };
        let main = |dtype, shape| spec(self.name.clone(), dtype, shape);
        let e8m0 = |shape| spec(self.scale_name(), DType::F8E8M0, shape);
        match &self.store {
            &Store::Fp8Tiles { rows, cols } => {
                vec![main(DType::F8E4M3, vec![rows, cols]), e8m0(vec![rows.div_ceil(BLOCK), cols.div_ceil(BLOCK)])]
            }
            &Store::Fp8Rows { rows, cols } => {
                vec![main(DType::F8E4M3, vec![rows, cols]), e8m0(vec![rows, cols / BLOCK])]
            }
            &Store::Fp4 { rows, cols } => vec![main(DType::I8, vec![rows, cols / 2]), e8m0(vec![rows, cols / BLOCK])],
            Store::Bf16(shape) => vec![main(DType::BF16, shape.clone())],
            Store::F32(shape) => vec![main(DType::F32, shape.clone())],
        }
    }

    pub fn nbytes(&self) -> usize {
        self.tensors().iter().map(TensorSpec::nbytes).sum()
    }
}

/// Collects parameters under one module prefix.
struct Builder<'a> {
    out: &'a mut Vec<Param>,
    prefix: String,
}

impl Builder<'_> {
    fn add(&mut self, name: &str, store: Store) {
        self.out.push(Param { name: format!("{}{name}", self.prefix), store });
    }
    fn fp8(&mut self, name: &str, rows: usize, cols: usize) {
        self.add(&format!("{name}.weight"), Store::Fp8Tiles { rows, cols });
    }
    fn bf16(&mut self, name: &str, shape: &[usize]) {
        self.add(name, Store::Bf16(shape.to_vec()));
    }
    fn f32(&mut self, name: &str, shape: &[usize]) {
        self.add(name, Store::F32(shape.to_vec()));
    }
}

/// Every parameter, in the reference's module order: embed, layers, norm, head, then the DSpark stages as `mtp.K`.
pub fn params(cfg: &Config) -> Vec<Param> {
    let mut out = Vec::new();
    let (vocab, dim) = (cfg.vocab_size, cfg.dim);
    Builder { out: &mut out, prefix: String::new() }.bf16("embed.weight", &[vocab, dim]);
    let stages = if cfg.dspark_block_size > 0 { cfg.n_mtp_layers } else { 0 };
    let roles = roles(cfg);
    for role in roles.iter().take(cfg.n_layers) {
        block(cfg, role, &mut Builder { out: &mut out, prefix: format!("layers.{}.", role.layer) });
    }
    let mut top = Builder { out: &mut out, prefix: String::new() };
    top.bf16("norm.weight", &[dim]);
    top.bf16("head.weight", &[vocab, dim]);
    for role in roles.iter().skip(cfg.n_layers).take(stages) {
        let stage = role.layer - cfg.n_layers;
        let mut b = Builder { out: &mut out, prefix: format!("mtp.{stage}.") };
        block(cfg, role, &mut b);
        if stage == 0 {
            b.fp8("main_proj", dim, dim * cfg.dspark_target_layer_ids.len());
            b.bf16("main_norm.weight", &[dim]);
        }
        if stage + 1 == stages {
            let rank = cfg.dspark_markov_rank;
            b.bf16("norm.weight", &[dim]);
            b.bf16("markov_head.embed.weight", &[vocab, rank]);
            b.bf16("markov_head.head.weight", &[vocab, rank]);
            b.bf16("confidence_head.proj.weight", &[1, dim + rank]);
        }
    }
    out
}

fn block(cfg: &Config, role: &crate::config::LayerRole, b: &mut Builder<'_>) {
    let (dim, hd) = (cfg.dim, cfg.head_dim);
    let heads_out = cfg.n_heads * hd;
    b.f32("attn.attn_sink", &[cfg.n_heads]);
    b.fp8("attn.wq_a", cfg.q_lora_rank, dim);
    b.bf16("attn.q_norm.weight", &[cfg.q_lora_rank]);
    b.fp8("attn.wq_b", heads_out, cfg.q_lora_rank);
    b.fp8("attn.wkv", hd, dim);
    b.bf16("attn.kv_norm.weight", &[hd]);
    b.bf16("attn.wo_a.weight", &[cfg.o_groups * cfg.o_lora_rank, heads_out / cfg.o_groups]);
    b.fp8("attn.wo_b", dim, cfg.o_groups * cfg.o_lora_rank);
    if role.is_kv_source {
        b.bf16("attn.compressor.norm.weight", &[hd]);
        b.bf16("attn.compressor.wkv.weight", &[hd, dim]);
        if role.ratio > 1 {
            b.bf16("attn.compressor.wgate.weight", &[hd, dim]);
        }
    }
    if role.is_index_source {
        let ihd = cfg.index_head_dim;
        b.fp8("attn.indexer.wq_b", cfg.index_n_heads * ihd, cfg.q_lora_rank);
        b.bf16("attn.indexer.weights_proj.weight", &[cfg.index_n_heads, dim]);
        if cfg.kv_source_layers.contains(&role.layer) {
            b.bf16("attn.indexer.wk.weight", &[ihd, hd]);
            b.bf16("attn.indexer.k_norm.weight", &[ihd]);
        }
    }
    let (n_experts, _) = cfg.moe_config(role.layer);
    let inter = cfg.moe_inter_dim;
    b.bf16("ffn.gate.weight", &[n_experts, dim]);
    b.f32("ffn.gate.bias", &[n_experts]);
    b.f32("ffn.gate.bias_vl", &[n_experts]);
    for e in 0..n_experts {
        b.add(&format!("ffn.experts.{e}.w1.weight"), Store::Fp4 { rows: inter, cols: dim });
        b.add(&format!("ffn.experts.{e}.w2.weight"), Store::Fp4 { rows: dim, cols: inter });
        b.add(&format!("ffn.experts.{e}.w3.weight"), Store::Fp4 { rows: inter, cols: dim });
    }
    b.fp8("ffn.shared_experts.w1", inter, dim);
    b.fp8("ffn.shared_experts.w2", dim, inter);
    b.fp8("ffn.shared_experts.w3", inter, dim);
    if let Some(i) = cfg.engram_layer_ids.iter().position(|&l| l == role.layer && !role.is_dspark) {
        let rows = cfg.engram_num_embeddings[i] as usize;
        let cols = (cfg.engram_max_ngram_size - 1) * cfg.engram_n_heads * cfg.engram_head_dim;
        b.add("engram.embed.weight", Store::Fp8Rows { rows, cols: cfg.engram_head_dim });
        b.fp8("engram.wkv", dim * (cfg.hc_mult + 1), cols);
        b.bf16("engram.q_weight", &[cfg.hc_mult, dim]);
        b.bf16("engram.k_weight", &[cfg.hc_mult, dim]);
    }
    b.bf16("attn_norm.weight", &[dim]);
    b.bf16("ffn_norm.weight", &[dim]);
    let mix = (2 + cfg.hc_mult) * cfg.hc_mult;
    for site in ["attn", "ffn"] {
        b.f32(&format!("hc_{site}_fn"), &[mix, cfg.hc_mult * dim]);
    }
    for site in ["attn", "ffn"] {
        b.f32(&format!("hc_{site}_base"), &[mix]);
    }
    for site in ["attn", "ffn"] {
        b.f32(&format!("hc_{site}_scale"), &[3]);
    }
}

/// Every stored tensor of a config, weights followed by their scales.
pub fn expected_tensors(cfg: &Config) -> Vec<TensorSpec> {
    params(cfg).iter().flat_map(Param::tensors).collect()
}

/// How a checkpoint differs from the expected inventory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Audit {
    pub missing: Vec<String>,
    /// Present with the wrong dtype or shape, each with both.
    pub mismatched: Vec<String>,
    /// Stored but not loaded by the model (vision tensors in a released checkpoint land here).
    pub unexpected: Vec<String>,
}

impl Audit {
    pub fn is_exact(&self) -> bool {
        self.missing.is_empty() && self.mismatched.is_empty() && self.unexpected.is_empty()
    }

    /// True when every expected tensor is present and right, extras allowed.
    pub fn is_loadable(&self) -> bool {
        self.missing.is_empty() && self.mismatched.is_empty()
    }
}

/// Compares a checkpoint's headers with [`expected_tensors`].
pub fn audit(ckpt: &Checkpoint, cfg: &Config) -> Audit {
    let expected = expected_tensors(cfg);
    let mut a = Audit::default();
    for t in &expected {
        match ckpt.entry(&t.name) {
            None => a.missing.push(t.name.clone()),
            Some((_, e)) if e.dtype != t.dtype || e.shape != t.shape => a
                .mismatched
                .push(format!("{}: expected {} {:?}, found {} {:?}", t.name, t.dtype, t.shape, e.dtype, e.shape)),
            Some(_) => {}
        }
    }
    let names: std::collections::HashSet<&str> = expected.iter().map(|t| t.name.as_str()).collect();
    a.unexpected = ckpt.names().filter(|n| !names.contains(n)).map(str::to_string).collect();
    a
}
