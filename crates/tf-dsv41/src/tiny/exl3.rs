//! An EXL3 variant of a synthetic checkpoint: every FP8/FP4 linear re-stored as an EXL3 trellis (issue 6).

use std::collections::BTreeMap;
use std::path::Path;
use tf_core::ops::qgemm::Fp8Weight;
use tf_core::rng::SplitMix64;
use tf_core::{Checkpoint, DType, Result, Tensor};
use tf_exl3::Fp4Weight;
pub use tf_exl3::exl3::Codebook;
use tf_exl3::exl3::encode::{quantize, random_weight};
use tf_exl3::exl3::{Exl3Weight, HAD};

/// How the trellis of each converted linear is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exl3Mode {
    /// Random streams scaled to the source's RMS: instant, for format and kernel tests (the values are not the source's).
    Random,
    /// The fallback quantizer (a Viterbi per tile): the source's values at `k` bits, slow beyond small matrices.
    Quantize,
    /// The fallback quantizer at one K for every linear (`cargo xtask gate-model exl3`: the gate model's EXL3 copy).
    QuantizeAt(usize),
}

/// The official checkpoint's bf16 linears that TensorFold's published EXL3 checkpoint holds as trellises (its `cuda/weights.py`).
const BF16_AS_EXL3: [&str; 4] = [".attn.wo_a", ".attn.compressor.wkv", ".attn.compressor.wgate", ".attn.indexer.wk"];

/// `[out, inp]` f32 of a stored FP8 or FP4 linear `{name}` or of the bf16 head or one in [`BF16_AS_EXL3`], or `None` when it is none of them.
fn dequant(ck: &Checkpoint, name: &str) -> Result<Option<(Vec<f32>, usize, usize)>> {
    let Ok(t) = ck.get(&format!("{name}.weight")) else { return Ok(None) };
    // TensorFold's published checkpoint stores these bf16 linears as EXL3 too.
    let listed = name == "head" || BF16_AS_EXL3.iter().any(|m| name.ends_with(m));
    if listed && t.dtype() == DType::BF16 && t.shape().len() == 2 {
        return Ok(Some((t.to_f32_vec()?, t.shape()[0], t.shape()[1])));
    }
    if !ck.contains(&format!("{name}.scale")) {
        return Ok(None);
    }
    Ok(match t.dtype() {
        DType::F8E4M3 => {
            let w = Fp8Weight::load(ck, name)?;
            Some((w.to_f32(), w.out_features(), w.in_features()))
        }
        DType::I8 | DType::Fp4x2 => {
            let w = Fp4Weight::load(ck, name)?;
            let mut v = vec![0.0f32; w.out_features() * w.in_features()];
            v.chunks_exact_mut(w.in_features()).enumerate().for_each(|(n, row)| w.dequant_row(n, row));
            Some((v, w.out_features(), w.in_features()))
        }
        _ => None,
    })
}

/// The plain matrices TensorFold's published EXL3 checkpoint stores in fp16 (docs/exl3.md).
pub fn stored_f16(name: &str) -> bool {
    name.ends_with("ffn.gate.weight") || name.ends_with("indexer.weights_proj.weight")
}

/// `t` re-stored as fp16 (exact for bf16 values in fp16's normal range, rounded to nearest otherwise).
fn to_f16(t: &Tensor) -> Result<Tensor> {
    let bits: Vec<u16> = t.to_f32_vec()?.into_iter().map(tf_core::formats::f32_to_f16_bits).collect();
    let bytes: Vec<u8> = bits.iter().flat_map(|x| x.to_le_bytes()).collect();
    Tensor::from_bytes(DType::F16, t.shape(), &bytes)
}

fn f16_tensor(v: &[u16]) -> Result<Tensor> {
    Tensor::from_bytes(DType::F16, &[v.len()], &v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())
}

/// The tensors of `w` stored under `name`, as exllamav3 writes them.
pub fn exl3_tensors(name: &str, w: &Exl3Weight) -> Result<Vec<(String, Tensor)>> {
    let trellis: Vec<u8> = w.trellis.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = vec![
        (format!("{name}.trellis"), Tensor::from_bytes(DType::I16, &[w.in_p / 16, w.out_p / 16, 16 * w.k], &trellis)?),
        (format!("{name}.suh"), f16_tensor(&w.suh)?),
        (format!("{name}.svh"), f16_tensor(&w.svh)?),
    ];
    let marker = |m: u32| Tensor::from_bytes(DType::I32, &[], &m.to_le_bytes());
    match w.codebook {
        Codebook::Mcg => out.push((format!("{name}.mcg"), marker(tf_exl3::exl3::codebook::MCG_MULT)?)),
        Codebook::Mul1 => out.push((format!("{name}.mul1"), marker(tf_exl3::exl3::codebook::MUL1_MULT)?)),
        Codebook::Inst3 => {}
    }
    Ok(out)
}

/// The attention output groups, from the checkpoint's own inference config.
fn ck_groups(ck: &Checkpoint) -> Result<usize> {
    let cfg = crate::Config::load(ck.root()).map_err(|e| tf_core::Error::Invalid(e.to_string()))?;
    Ok(cfg.o_groups)
}

/// `w [rows, inp]` (HF orientation) as an EXL3 weight padded to 128, random or quantized.
fn encode(
    w: &[f32],
    (out, inp): (usize, usize),
    codebook: Codebook,
    mode: Exl3Mode,
    k: usize,
    rng: &mut SplitMix64,
) -> Exl3Weight {
    let pad = |n: usize| n.div_ceil(HAD) * HAD;
    let (in_p, out_p) = (pad(inp), pad(out));
    match mode {
        Exl3Mode::Random => {
            let rms = (w.iter().map(|v| v * v).sum::<f32>() / w.len() as f32).sqrt();
            random_weight(rng, (in_p, out_p, k), codebook, rms / 1.8)
        }
        Exl3Mode::Quantize | Exl3Mode::QuantizeAt(_) => {
            let mut t = vec![0.0f32; in_p * out_p];
            (0..out * inp).for_each(|i| t[(i % inp) * out_p + i / inp] = w[i]);
            quantize(&t, (in_p, out_p), k, codebook, rng.next_u64())
        }
    }
}

/// Writes `dst` as `src` with every FP8/FP4 linear in EXL3 (K from 2 to 5 by tensor unless `QuantizeAt`, `codebook`), one shard.
pub fn convert(src: &Path, dst: &Path, codebook: Codebook, mode: Exl3Mode, seed: u64) -> Result<usize> {
    let ck = Checkpoint::open(src)?;
    std::fs::create_dir_all(dst).map_err(|e| tf_core::Error::Invalid(format!("{}: {e}", dst.display())))?;
    let mut rng = SplitMix64::new(seed);
    let mut tensors: BTreeMap<String, Tensor> = BTreeMap::new();
    let names: Vec<String> = ck.names().map(str::to_string).collect();
    // Engram tables stay in their own format (DeepSeek's FP8 rows); every other block-scaled linear converts.
    let modules: Vec<&str> =
        names.iter().filter_map(|n| n.strip_suffix(".weight")).filter(|m| !m.ends_with("engram.embed")).collect();
    let mut done = std::collections::HashSet::new();
    let bits = |i: usize| if let Exl3Mode::QuantizeAt(k) = mode { k } else { 2 + i % 4 };
    for module in modules {
        let Some((w, out, inp)) = dequant(&ck, module)? else { continue };
        // exllamav3 stores attention's grouped wo_a as one linear per output group.
        let parts: Vec<(String, usize)> = if module.ends_with("attn.wo_a") {
            let g = ck_groups(&ck)?;
            (0..g).map(|i| (format!("{module}.slice.{i}"), out / g)).collect()
        } else {
            vec![(module.to_string(), out)]
        };
        for (i, (name, rows)) in parts.iter().enumerate() {
            let part = &w[i * rows * inp..(i + 1) * rows * inp];
            tensors
                .extend(exl3_tensors(name, &encode(part, (*rows, inp), codebook, mode, bits(done.len()), &mut rng))?);
        }
        done.insert(module.to_string());
    }
    for name in &names {
        let module = name.strip_suffix(".weight").or_else(|| name.strip_suffix(".scale"));
        if !module.is_some_and(|m| done.contains(m)) {
            let t = ck.get(name)?;
            tensors.insert(name.clone(), if stored_f16(name) { to_f16(&t)? } else { t });
        }
    }
    let refs: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    tf_core::st::write::write_file(&dst.join("model.safetensors"), &refs, None)?;
    for f in ["config.json", "tokenizer.json", "engram_token_map.u32", "inference/config.json"] {
        let from = src.join(f);
        if from.exists() {
            let to = dst.join(f);
            std::fs::create_dir_all(to.parent().expect("a file has a folder"))
                .map_err(|e| tf_core::Error::Invalid(e.to_string()))?;
            std::fs::copy(&from, &to).map_err(|e| tf_core::Error::Invalid(format!("{}: {e}", from.display())))?;
        }
    }
    Ok(done.len())
}
