//! Where the GPU forward leaves the CPU's: each block's steps run on the GPU from the CPU's own inputs, then compared.

use super::model::{GStreams, GpuModel, Shared as GShared};
use super::weights::{Buf, Normed};
use crate::attn::{AttnCall, Shared};
use crate::linear::rms_norm_rows;
use crate::mhc::HcMix;
use crate::model::{BlockCall, Streams};
use crate::plan::Result;
use tf_core::bf16;

/// One compared step: its name and `max |gpu − cpu| / rms(cpu)` (infinite when the GPU gave NaN).
#[derive(Clone, Debug)]
pub struct ProbeRow {
    pub step: String,
    pub diff: f64,
}

fn diff(g: &[f32], c: &[f32]) -> f64 {
    let rms = (c.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / c.len().max(1) as f64).sqrt().max(1e-30);
    if g.len() != c.len() || g.iter().any(|v| v.is_nan()) {
        return f64::INFINITY;
    }
    g.iter().zip(c).map(|(a, b)| f64::from((a - b).abs())).fold(0.0, f64::max) / rms
}

fn f32s(v: &[bf16]) -> Vec<f32> {
    v.iter().map(|b| b.to_f32()).collect()
}

fn flat(m: &[HcMix]) -> Vec<f32> {
    m.iter().flat_map(|m| m.pre.iter().chain(&m.post).chain(&m.comb).copied()).collect()
}

impl GpuModel {
    fn up(&self, v: &[bf16]) -> Result<Buf> {
        Ok(self.gpu.upload(&v.iter().map(|b| b.to_bits()).collect::<Vec<u16>>())?)
    }

    /// The CPU's normed rows uploaded as a linear's input (no codes: its FP8 linears quantize them).
    fn normed(&self, v: &[bf16], dim: usize) -> Result<Normed> {
        Ok(Normed { x: self.up(v)?, rows: v.len() / dim, k: dim, fp8: None })
    }

    fn down(&self, b: &Buf) -> Result<Vec<f32>> {
        let bits: Vec<u16> = self.gpu.download(b)?;
        Ok(bits.into_iter().map(|b| bf16::from_bits(b).to_f32()).collect())
    }

    /// The CPU's streams on the GPU, each row's `pre` in the mix layout's first slots.
    fn up_streams(&self, s: &Streams) -> Result<GStreams> {
        let hc = self.cfg().hc_mult;
        let width = (2 + hc) * hc;
        let mut mix = vec![0.0f32; s.pre.len() * width];
        for (m, p) in mix.chunks_exact_mut(width).zip(&s.pre) {
            m[..hc].copy_from_slice(p);
        }
        Ok(GStreams { x: self.up(&s.x)?, mix: self.gpu.upload(&mix)?, rows: s.pre.len() })
    }

    /// One prompt chunk at position 0 without replay: every step of every block, the GPU from `cpu`'s inputs (the same checkpoint loaded on the host).
    pub fn probe(&self, cpu: &crate::Model, tokens: &[u32]) -> Result<Vec<ProbeRow>> {
        let cfg = self.cfg().clone();
        let (hc, dim, norm, rows) = (cfg.hc_mult, cfg.dim, cfg.norm(), tokens.len());
        let (iters, hc_eps) = (cfg.hc_sinkhorn_iters, cfg.hc_eps);
        let mut st = cpu.new_state();
        let mut lane = self.new_lane()?;
        let ids = crate::plan::engram_ids(cpu, &mut st, tokens)?;
        let mut s = cpu.embed_rows(tokens)?;
        let (mut shared, mut gshared) = (Shared::default(), GShared::default());
        let call = self.call(0, rows, &lane.window_floor)?;
        let mut out = Vec::new();
        let mut row = |step: String, g: Vec<f32>, c: &[f32]| out.push(ProbeRow { step, diff: diff(&g, c) });
        for (b, gb) in cpu.blocks.iter().zip(&self.blocks) {
            let l = b.role.layer;
            let engram_ids =
                cpu.hasher.as_ref().and_then(|h| h.layout().layer_index(l)).and_then(|k| ids.get(k)).map(Vec::as_slice);
            let bcall = BlockCall {
                cfg: &cfg,
                rope: cpu.rope(b.role.rope),
                run_compressor: true,
                quirks: cpu.opts.quirks,
                engram_ids,
                engram_rows: None,
            };
            if b.engram.is_some() {
                let mut gs = self.up_streams(&s)?;
                self.apply_engram(gb, &mut gs, engram_ids, None)?;
                b.apply_engram(&mut s, &bcall)?;
                row(format!("L{l} engram"), self.down(&gs.x)?, &f32s(&s.x));
            }
            let gs = self.up_streams(&s)?;
            let mix_a = b.hc_attn.mixes(&s.x, rows, hc, iters, norm, hc_eps);
            let gmix = self.mixes(&gb.hc_attn, &gs.x, rows)?;
            row(format!("L{l} hc_attn mixes"), self.gpu.download(&gmix)?, &flat(&mix_a));
            let a_in = b.attn_input(&s, &cfg);
            row(format!("L{l} attn_input"), self.down(&self.attn_input(gb, &gs, false)?.x)?, &f32s(&a_in));
            let acall = AttnCall {
                role: &b.role,
                rope: bcall.rope,
                norm,
                pos0: 0,
                run_compressor: true,
                quirks: cpu.opts.quirks,
            };
            let ga = self.attention(&gb.attn, &gb.role, &self.normed(&a_in, dim)?, &call, &mut lane, &mut gshared)?;
            let a = b.attn.forward(&a_in, &acall, &mut st, &mut shared);
            row(format!("L{l} attention"), self.down(&ga)?, &f32s(&a));
            let width = hc * dim;
            let x: Vec<bf16> = (0..rows)
                .flat_map(|r| {
                    crate::mhc::hc_post(&a[r * dim..(r + 1) * dim], &s.x[r * width..(r + 1) * width], &mix_a[r], dim)
                })
                .collect();
            let f_pre: Vec<bf16> = (0..rows)
                .flat_map(|r| crate::mhc::hc_pre(&x[r * width..(r + 1) * width], &mix_a[r].pre, dim))
                .collect();
            let normed = rms_norm_rows(&f_pre, &b.ffn_norm, norm);
            let f = b.ffn.forward(&normed, rows);
            row(format!("L{l} moe"), self.down(&self.moe(&gb.ffn, &self.normed(&normed, dim)?, rows)?)?, &f32s(&f));
            let mix_f = b.hc_ffn.mixes(&x, rows, hc, iters, norm, hc_eps);
            let gmf = self.mixes(&gb.hc_ffn, &self.up(&x)?, rows)?;
            row(format!("L{l} hc_ffn mixes"), self.gpu.download(&gmf)?, &flat(&mix_f));
            s.x = (0..rows)
                .flat_map(|r| {
                    crate::mhc::hc_post(&f[r * dim..(r + 1) * dim], &x[r * width..(r + 1) * width], &mix_f[r], dim)
                })
                .collect();
            s.pre = mix_f.into_iter().map(|m| m.pre).collect();
        }
        let want: Vec<f32> = cpu.logits(&s).concat();
        row("logits".into(), self.logits(&self.up_streams(&s)?)?.concat(), &want);
        Ok(out)
    }
}
