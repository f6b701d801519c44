//! A flash-shaped model generated on the GPU: V4.1-Flash's dimensions and formats with random weights, for benches.

use super::kernels::SYNTH;
use super::layer::{GAttn, GBlock, GCompressor, GHc, GIndexer, GMoe};
use super::model::GpuModel;
use super::ops::{Sum, strided};
use super::weights::{Buf, Exl3Run, Experts4, Lin8, LinW, Mat};
use crate::config::{Config, RopeKind, roles};
use crate::model::Options;
use crate::rope::Rope;
use cudarc::driver::PushKernelArg;
use tf_core::formats::f32_to_f16_bits;
use tf_core::ops::QBLOCK;
use tf_core::rng::SplitMix64;
use tf_cuda::error::DriverResultExt;
use tf_cuda::{Error, Gpu};
use tf_exl3::Codebook;
use tf_exl3::exl3_cuda::GpuExl3;

/// V4.1-Flash (dsv41 §1) in `layers` layers: 2 window, then ratio-2 and ratio-1 halves each led by a KV + index source (no Engram, DSpark, vision).
pub fn flash_config(layers: usize) -> Result<Config, crate::config::ConfigError> {
    if layers < 6 {
        return Err(crate::config::ConfigError::field("n_layers", "the flash shape needs at least 6 layers"));
    }
    let enc = (layers - 2) / 2;
    let dec_src = 2 + enc;
    let mut ratios = vec![0, 0];
    ratios.extend(std::iter::repeat_n(2, enc));
    ratios.extend(std::iter::repeat_n(1, layers - dec_src));
    let flash = Config::v41_flash();
    let cfg = Config {
        n_layers: layers,
        n_mtp_layers: 0,
        compress_ratios: ratios,
        kv_source_layers: vec![2, dec_src],
        index_source_layers: vec![2, dec_src, layers - 1],
        candidate_source_layer: dec_src as i64,
        engram_layer_ids: vec![],
        engram_num_embeddings: vec![],
        dspark_target_layer_ids: vec![],
        ..flash
    };
    cfg.validate()?;
    Ok(cfg)
}

/// [`flash_config`] with V4.1-Flash's three DSpark stages (128 experts, 3 a token) tapping the last three layers, for the drafting bench.
pub fn flash_config_dspark(layers: usize) -> Result<Config, crate::config::ConfigError> {
    let base = flash_config(layers)?;
    let flash = Config::v41_flash();
    let mut compress_ratios = base.compress_ratios.clone();
    compress_ratios.extend(std::iter::repeat_n(0, flash.n_mtp_layers));
    let targets = (layers - 3..layers).collect();
    let cfg = Config { n_mtp_layers: flash.n_mtp_layers, dspark_target_layer_ids: targets, compress_ratios, ..base };
    cfg.validate()?;
    Ok(cfg)
}

/// Fills fresh device buffers with reproducible random values, one seed per buffer; `exl3`: linears and experts as EXL3 at that K.
struct Gen {
    gpu: &'static Gpu,
    seed: u64,
    exl3: Option<(usize, Exl3Run)>,
}

/// Threads per block of the grid-stride fill kernels.
const THREADS: usize = 256;

impl Gen {
    fn next_seed(&mut self) -> u64 {
        self.seed = self.seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        self.seed
    }

    /// `n` bytes: kind 0 = FP8 codes, 1 = any byte (FP4 pairs), 2 = all `value` (E8M0 scales).
    fn bytes(&mut self, n: usize, kind: i32, value: i32) -> Result<Buf, Error> {
        const ENTRY: &str = "synth_bytes";
        let mut b = self.gpu.pool().take_exact(n)?;
        let f = self.gpu.function(&SYNTH.spec(&[]), ENTRY)?;
        let (n_u, seed) = (n as u64, self.next_seed());
        let mut view = b.view_mut();
        let mut launch = self.gpu.stream().launch_builder(&f);
        launch.arg(&mut view).arg(&n_u).arg(&seed).arg(&kind).arg(&value);
        // SAFETY: arguments match `synth_bytes(u8*, u64, u64, int, int)`; b holds n bytes.
        unsafe { launch.launch(strided(n, THREADS, THREADS as u32)) }.doing(|| format!("launching {ENTRY} on {n}"))?;
        Ok(b)
    }

    /// `n` values uniform in `[lo, hi)`, bf16 or f32.
    fn uniform(&mut self, n: usize, lo: f32, hi: f32, bf16: bool) -> Result<Buf, Error> {
        const ENTRY: &str = "synth_uniform";
        let mut b = self.gpu.pool().take_exact(n * if bf16 { 2 } else { 4 })?;
        let f = self.gpu.function(&SYNTH.spec(&[]), ENTRY)?;
        let (n_u, seed, as_bf16) = (n as u64, self.next_seed(), bf16 as i32);
        let mut view = b.view_mut();
        let mut launch = self.gpu.stream().launch_builder(&f);
        launch.arg(&mut view).arg(&n_u).arg(&seed).arg(&lo).arg(&hi).arg(&as_bf16);
        // SAFETY: arguments match `synth_uniform(void*, u64, u64, float, float, int)`; b holds n values of that width.
        unsafe { launch.launch(strided(n, THREADS, THREADS as u32)) }.doing(|| format!("launching {ENTRY} on {n}"))?;
        Ok(b)
    }

    fn norm(&mut self, n: usize) -> Result<Buf, Error> {
        self.uniform(n, 0.9, 1.1, true)
    }

    /// The E8M0 byte that scales codes of typical magnitude `mag` to a weight of RMS 1/√k.
    fn scale_byte(k: usize, mag: f64) -> i32 {
        127 - ((k as f64).sqrt() * mag).log2().round() as i32
    }

    /// An EXL3 MUL1 linear `[n, k]` at K = `kk`: a random trellis (any stream is valid), signed scales for an RMS near 1/√k.
    fn exl3_weight(&mut self, n: usize, k: usize, kk: usize) -> Result<GpuExl3<'static>, Error> {
        let trellis = self.bytes(k * n * kk / 8, 1, 0)?;
        let mut rng = SplitMix64::new(self.next_seed());
        let mut signed = |len: usize, s: f32| -> Vec<u16> {
            (0..len).map(|_| f32_to_f16_bits(if rng.next_u64() & 1 == 0 { s } else { -s })).collect()
        };
        let (suh, svh) = (signed(k, 1.0 / (k as f32).sqrt()), signed(n, 1.0));
        let (suh, svh) = (self.gpu.upload_exact(&suh)?, self.gpu.upload_exact(&svh)?);
        GpuExl3::from_device(self.gpu, (trellis, suh, svh, None), (k, n, kk), Codebook::Mul1)
    }

    fn lin8(&mut self, n: usize, k: usize) -> Result<Lin8, Error> {
        if let Some((kk, run)) = self.exl3 {
            return Ok(Lin8 { w: LinW::Exl3(Box::new(self.exl3_weight(n, k, kk)?), run), n, k });
        }
        let w = self.bytes(n * k, 0, 0)?;
        let scale = self.bytes(n.div_ceil(QBLOCK) * (k / QBLOCK), 2, Gen::scale_byte(k, 1.3))?;
        Ok(Lin8 { w: LinW::Fp8 { w, scale }, n, k })
    }

    fn mat(&mut self, n: usize, k: usize, order: Sum) -> Result<Mat, Error> {
        let a = (3.0 / k as f32).sqrt();
        Ok(Mat { w: self.uniform(n * k, -a, a, true)?, io: super::ops::Io::Bf16, n, k, order })
    }

    fn experts(&mut self, count: usize, n: usize, k: usize) -> Result<Experts4, Error> {
        if let Some((kk, run)) = self.exl3 {
            let w = (0..count).map(|_| self.exl3_weight(n, k, kk)).collect::<Result<Vec<_>, Error>>()?;
            return Experts4::exl3(self.gpu, w, (n, k), run);
        }
        let byte = Gen::scale_byte(k, 2.9);
        let w = (0..count)
            .map(|_| Ok((self.bytes(n * k / 2, 1, 0)?, self.bytes(n * (k / QBLOCK), 2, byte)?)))
            .collect::<Result<Vec<_>, Error>>()?;
        Experts4::new(self.gpu, w, (n, k))
    }

    fn hc(&mut self, cfg: &Config) -> Result<GHc, Error> {
        let (hc, width) = (cfg.hc_mult, cfg.hc_mult * cfg.dim);
        let a = (3.0 / width as f32).sqrt();
        Ok(GHc {
            func: self.uniform((2 + hc) * hc * width, -a, a, false)?,
            scale: self.uniform(3, 0.5, 1.0, false)?,
            base: self.uniform((2 + hc) * hc, -0.5, 0.5, false)?,
        })
    }
}

impl GpuModel {
    /// A model of `cfg`'s shapes in the official formats (FP8 linears, FP4 experts, bf16 small matrices), random.
    pub fn synthetic(cfg: Config, gpu: &'static Gpu, seed: u64) -> Result<GpuModel, Error> {
        GpuModel::synth(cfg, gpu, seed, None)
    }

    /// [`GpuModel::synthetic`] with every FP8 linear and FP4 expert as an EXL3 MUL1 trellis at K = `k`, run through `run`.
    pub fn synthetic_exl3(
        cfg: Config,
        gpu: &'static Gpu,
        seed: u64,
        (k, run): (usize, Exl3Run),
    ) -> Result<GpuModel, Error> {
        GpuModel::synth(cfg, gpu, seed, Some((k, run)))
    }

    fn synth(cfg: Config, gpu: &'static Gpu, seed: u64, exl3: Option<(usize, Exl3Run)>) -> Result<GpuModel, Error> {
        let mut g = Gen { gpu, seed, exl3 };
        let (dim, h, d, qr) = (cfg.dim, cfg.n_heads, cfg.head_dim, cfg.q_lora_rank);
        let (ih, id, inter) = (cfg.index_n_heads, cfg.index_head_dim, cfg.moe_inter_dim);
        let sinter = inter * cfg.n_shared_experts;
        let mut blocks = Vec::with_capacity(cfg.n_layers);
        for role in roles(&cfg) {
            let (experts, topk) = cfg.moe_config(role.layer);
            let compressor = if role.is_kv_source {
                Some(GCompressor {
                    wkv: g.mat(d, dim, Sum::Lanes8)?,
                    wgate: if role.ratio > 1 { Some(g.mat(d, dim, Sum::Lanes8)?) } else { None },
                    norm: g.norm(d)?,
                    index_wk: if role.is_index_source { Some((g.mat(id, d, Sum::Lanes8)?, g.norm(id)?)) } else { None },
                })
            } else {
                None
            };
            let indexer = if role.is_index_source {
                Some(GIndexer { wq_b: g.lin8(ih * id, qr)?, weights_proj: g.mat(ih, dim, Sum::Lanes8)? })
            } else {
                None
            };
            let attn = GAttn {
                wq_a: g.lin8(qr, dim)?,
                q_norm: g.norm(qr)?,
                wq_b: g.lin8(h * d, qr)?,
                wkv: g.lin8(d, dim)?,
                kv_norm: g.norm(d)?,
                wo_a: g.mat(
                    cfg.o_groups * cfg.o_lora_rank,
                    h * d / cfg.o_groups,
                    super::layer::wo_a_order(cfg.wo_a_lanes8),
                )?,
                wo_b: g.lin8(dim, cfg.o_groups * cfg.o_lora_rank)?,
                sink: g.uniform(h, -1.0, 1.0, false)?,
                compressor,
                indexer,
                heads: h,
                split: None,
            };
            let mut ffn = GMoe {
                gate: g.mat(experts, dim, Sum::Lanes8)?,
                bias: g.uniform(experts, -0.01, 0.01, false)?,
                w1: g.experts(experts, inter, dim)?,
                w2: g.experts(experts, dim, inter)?,
                w3: g.experts(experts, inter, dim)?,
                shared: [g.lin8(sinter, dim)?, g.lin8(dim, sinter)?, g.lin8(sinter, dim)?],
                prefill: None,
                topk,
                experts,
                ep: None,
                route_scale: cfg.route_scale,
                norm_topk: cfg.norm_topk_prob,
                limit: cfg.swiglu_limit,
            };
            ffn.join_shared(gpu)?;
            let (attn_norm, ffn_norm) = (g.norm(dim)?, g.norm(dim)?);
            let (hc_attn, hc_ffn) = (g.hc(&cfg)?, g.hc(&cfg)?);
            blocks.push(GBlock { role, attn, ffn, attn_norm, ffn_norm, hc_attn, hc_ffn, engram: None });
        }
        let stages = blocks.split_off(cfg.n_layers);
        let dspark = if stages.is_empty() {
            None
        } else {
            let main_proj = g.lin8(dim, dim * cfg.dspark_target_layer_ids.len())?;
            let norms = (g.norm(dim)?, g.norm(dim)?);
            let markov_head = g.mat(cfg.vocab_size, cfg.dspark_markov_rank, Sum::Lanes8)?;
            Some(super::dspark::GDSpark::synthetic(gpu, stages, main_proj, norms, markov_head, &cfg, g.next_seed())?)
        };
        let embed = g.uniform(cfg.vocab_size * dim, -1.0, 1.0, true)?;
        let norm = g.norm(dim)?;
        let head = g.mat(cfg.vocab_size, dim, Sum::Lanes8)?;
        gpu.sync("generating the synthetic model")?;
        let ropes = [Rope::new(&cfg, RopeKind::Plain), Rope::new(&cfg, RopeKind::Yarn)];
        let opts =
            Options { replay: false, exl3_prompt_gemm: exl3.and_then(|(_, r)| r.prompt_rows), ..Options::default() };
        Ok(GpuModel {
            gpu,
            cfg,
            ropes,
            hasher: None,
            engram_tables: Vec::new(),
            blocks,
            embed,
            norm,
            head,
            opts,
            route_log: Default::default(),
            profile: Default::default(),
            graphs: false,
            graph_warm: Default::default(),
            engram_staging: Default::default(),
            dspark,
            vocab: None,
        })
    }

    /// Device bytes of every weight of block `layer`, the routed experts apart: (the rest, one routed expert's three).
    pub fn block_weight_bytes(&self, layer: usize) -> (usize, usize) {
        let b = &self.blocks[layer];
        let lin = |l: &Lin8| l.bytes();
        let mut rest = [&b.attn.wq_a, &b.attn.wq_b, &b.attn.wkv, &b.attn.wo_b].iter().map(|l| lin(l)).sum::<usize>();
        rest += b.ffn.shared.iter().map(lin).sum::<usize>();
        rest += b.attn.wo_a.w.len() + b.ffn.gate.w.len() + b.ffn.bias.len() + b.attn.sink.len();
        rest += b.hc_attn.func.len() + b.hc_ffn.func.len();
        rest += b.attn_norm.len() + b.ffn_norm.len() + b.attn.q_norm.len() + b.attn.kv_norm.len();
        if let Some(c) = &b.attn.compressor {
            rest += c.wkv.w.len() + c.wgate.as_ref().map_or(0, |m| m.w.len()) + c.norm.len();
            rest += c.index_wk.as_ref().map_or(0, |(m, n)| m.w.len() + n.len());
        }
        if let Some(ix) = &b.attn.indexer {
            rest += lin(&ix.wq_b) + ix.weights_proj.w.len();
        }
        let expert = |s: &Experts4| s.expert_bytes();
        (rest, expert(&b.ffn.w1) + expert(&b.ffn.w2) + expert(&b.ffn.w3))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AttnMode;

    #[test]
    fn flash_config_keeps_the_real_shapes_and_every_attention_mode() {
        for layers in [6, 8, 9, 16, 40] {
            let cfg = flash_config(layers).unwrap();
            assert_eq!((cfg.dim, cfg.n_heads, cfg.head_dim, cfg.moe_inter_dim), (5120, 64, 512, 2304));
            assert_eq!((cfg.n_routed_experts, cfg.n_activated_experts, cfg.vocab_size), (384, 6, 129_280));
            let r = roles(&cfg);
            assert_eq!(r.len(), layers);
            assert_eq!((r[0].mode, r[1].mode, r[2].mode), (AttnMode::Swa, AttnMode::Swa, AttnMode::Full));
            assert!(r.iter().any(|x| x.mode == AttnMode::Reuse), "{layers} layers: no reuse layer");
            assert!(r.iter().any(|x| x.is_candidate_source) && r.iter().any(|x| x.uses_candidates));
            assert!(r.iter().any(|x| x.ratio == 1) && r.iter().any(|x| x.ratio == 2));
        }
        assert!(flash_config(5).is_err());
    }
}
