//! One block's weights on the GPU, uploaded from the CPU block with the same roles and shapes.

use super::ops::Sum;
use super::weights::{Buf, Exl3Run, Experts4, Lin8, Mat, upload_bf16, upload_f32};
use crate::attn::AttnWeights;
use crate::config::LayerRole;
use crate::mhc::HcSite;
use crate::model::Block;
use crate::moe::Moe;
use tf_cuda::{Error, Gpu};

/// Grouped `wo_a`'s sum order on the GPU, the CPU's (`AttnWeights::wo_a_lanes8`).
pub(crate) fn wo_a_order(lanes8: bool) -> Sum {
    if lanes8 { Sum::Lanes8 } else { Sum::Sequential }
}

/// An mHC site: `fn` in f32 (it multiplies the stream state in f32), `scale` [3], `base` [mix].
pub struct GHc {
    pub func: Buf,
    pub scale: Buf,
    pub base: Buf,
}

impl GHc {
    fn upload(gpu: &'static Gpu, s: &HcSite) -> Result<GHc, Error> {
        Ok(GHc {
            func: upload_f32(gpu, &s.func.w)?,
            scale: upload_f32(gpu, &s.scale)?,
            base: upload_f32(gpu, &s.base)?,
        })
    }
}

/// The compressor of a KV source and, for index-key owners, its key projection.
pub struct GCompressor {
    pub wkv: Mat,
    pub wgate: Option<Mat>,
    pub norm: Buf,
    pub index_wk: Option<(Mat, Buf)>,
}

/// The indexer's query side.
pub struct GIndexer {
    pub wq_b: Lin8,
    pub weights_proj: Mat,
}

pub struct GAttn {
    pub wq_a: Lin8,
    pub q_norm: Buf,
    pub wq_b: Lin8,
    pub wkv: Lin8,
    pub kv_norm: Buf,
    pub wo_a: Mat,
    pub wo_b: Lin8,
    pub sink: Buf,
    pub compressor: Option<GCompressor>,
    pub indexer: Option<GIndexer>,
    /// This rank's heads (all of them unless `split`).
    pub heads: usize,
    /// Tensor parallel: this rank's heads, `wo_a` groups and `wo_b` rows.
    pub split: Option<super::split::GSplit>,
}

impl GAttn {
    fn upload(gpu: &'static Gpu, a: &AttnWeights, kernels: Exl3Run) -> Result<GAttn, Error> {
        let compressor = match &a.compressor {
            Some(c) => Some(GCompressor {
                wkv: Mat::upload(gpu, &c.wkv)?,
                wgate: c.wgate.as_ref().map(|g| Mat::upload(gpu, g)).transpose()?,
                norm: upload_bf16(gpu, &c.norm)?,
                index_wk: match &a.index_keys {
                    Some(k) => Some((Mat::upload(gpu, &k.wk)?, upload_bf16(gpu, &k.norm)?)),
                    None => None,
                },
            }),
            None => None,
        };
        let indexer = match &a.indexer {
            Some(ix) => Some(GIndexer {
                wq_b: Lin8::upload(gpu, &ix.wq_b, kernels)?,
                weights_proj: Mat::upload(gpu, &ix.weights_proj)?,
            }),
            None => None,
        };
        let gin = a.n_heads * a.head_dim / a.o_groups;
        let split = match &a.split {
            Some(s) => match (&s.out, s.q_whole, &s.comm) {
                (Some(out), false, Some(comm)) => Some(super::split::GSplit {
                    groups: s.groups[s.rank].len(),
                    group_parts: s.groups.clone(),
                    out_parts: out.clone(),
                    comm: comm.clone(),
                }),
                _ => {
                    let what =
                        "GPU ranks split FP8 attention only (not EXL3 `wq_b`/`wo_b`): use --tp-split experts".into();
                    return Err(Error::Launch { op: "uploading a tensor-parallel rank", what });
                }
            },
            None => None,
        };
        let groups = split.as_ref().map_or(a.o_groups, |s| s.groups);
        Ok(GAttn {
            wq_a: Lin8::upload(gpu, &a.wq_a, kernels)?,
            q_norm: upload_bf16(gpu, &a.q_norm)?,
            wq_b: Lin8::upload(gpu, &a.wq_b, kernels)?,
            wkv: Lin8::upload(gpu, &a.wkv, kernels)?,
            kv_norm: upload_bf16(gpu, &a.kv_norm)?,
            wo_a: Mat::from_f32(gpu, &a.wo_a, groups * a.o_lora_rank, gin, wo_a_order(a.wo_a_lanes8))?,
            wo_b: Lin8::upload(gpu, &a.wo_b, kernels)?,
            sink: upload_f32(gpu, &a.sink)?,
            compressor,
            indexer,
            heads: a.sink.len(),
            split,
        })
    }
}

pub struct GMoe {
    pub gate: Mat,
    pub bias: Buf,
    pub w1: Experts4,
    pub w2: Experts4,
    pub w3: Experts4,
    pub shared: [Lin8; 3],
    /// `--prefill-experts mxfp4`: the MXFP4 copies of the routed experts (w1, w2, w3), for calls of at least `min_rows` rows.
    pub prefill: Option<([Experts4; 3], usize)>,
    pub topk: usize,
    /// Routed experts of the layer (this rank may hold a share: `ep`).
    pub experts: usize,
    /// Expert parallel: this rank holds `ep.parts[ep.rank]` of the routed experts.
    pub ep: Option<super::GEp>,
    pub route_scale: f32,
    pub norm_topk: bool,
    pub limit: f32,
}

impl GMoe {
    fn upload(gpu: &'static Gpu, m: &Moe, kernels: Exl3Run) -> Result<GMoe, Error> {
        if m.width.is_some() {
            let what = "routed experts split by width run on CPU ranks only; GPU ranks split whole experts".to_string();
            return Err(Error::Launch { op: "GPU upload", what });
        }
        let set = |es: &[crate::moe::Expert<_>], w: fn(&crate::moe::Expert<_>) -> &_| {
            Experts4::upload(gpu, es.iter().map(w), kernels)
        };
        let prefill = match &m.prefill {
            Some(p) => {
                let copies = [set(&p.experts, |e| &e.w1)?, set(&p.experts, |e| &e.w2)?, set(&p.experts, |e| &e.w3)?];
                Some((copies, p.min_rows))
            }
            None => None,
        };
        let (w1, w2, w3) = (set(&m.experts, |e| &e.w1)?, set(&m.experts, |e| &e.w2)?, set(&m.experts, |e| &e.w3)?);
        let shared = [
            Lin8::upload(gpu, &m.shared.w1, kernels)?,
            Lin8::upload(gpu, &m.shared.w2, kernels)?,
            Lin8::upload(gpu, &m.shared.w3, kernels)?,
        ];
        let mut moe = GMoe {
            prefill,
            gate: Mat::upload(gpu, &m.gate)?,
            bias: upload_f32(gpu, &m.bias)?,
            w1,
            w2,
            w3,
            shared,
            topk: m.topk,
            experts: m.gate.out,
            ep: m.ep.as_ref().map(|comm| super::GEp {
                rank: comm.rank(),
                parts: crate::tp::partition(m.gate.out, comm.world_size()),
                comm: comm.clone(),
            }),
            route_scale: m.route_scale,
            norm_topk: m.norm_topk,
            limit: m.limit,
        };
        moe.join_shared(gpu)?;
        Ok(moe)
    }

    /// Whether the FFN input's FP8 codes are read: an FP8 shared expert or FP4 routed experts (EXL3 reads bf16).
    pub fn reads_codes(&self) -> bool {
        self.shared[0].is_fp8() || matches!(self.w1, super::weights::Experts4::Fp4 { .. })
    }

    /// Puts an EXL3 shared expert of the routed shape into the routed launches (same kernels, so the same bits).
    pub fn join_shared(&mut self, gpu: &'static Gpu) -> Result<(), Error> {
        let [s1, s2, s3] = &self.shared;
        if self.w1.join_shared(gpu, s1)? && self.w2.join_shared(gpu, s2)? {
            self.w3.join_shared(gpu, s3)?;
        }
        Ok(())
    }
}

/// Engram's projection and folded gate weight; the table stays on the host (rows are gathered there).
pub struct GEngram {
    pub wkv: Lin8,
    pub weight: Buf,
}

pub struct GBlock {
    pub role: LayerRole,
    pub attn: GAttn,
    pub ffn: GMoe,
    pub attn_norm: Buf,
    pub ffn_norm: Buf,
    pub hc_attn: GHc,
    pub hc_ffn: GHc,
    pub engram: Option<GEngram>,
}

impl GBlock {
    /// The block's weights; EXL3 linears and experts run through `kernels`.
    pub fn upload(gpu: &'static Gpu, b: &Block, kernels: Exl3Run) -> Result<GBlock, Error> {
        let engram = match &b.engram {
            Some(g) => Some(GEngram { wkv: Lin8::upload(gpu, &g.wkv, kernels)?, weight: upload_f32(gpu, &g.weight)? }),
            None => None,
        };
        Ok(GBlock {
            role: b.role.clone(),
            attn: GAttn::upload(gpu, &b.attn, kernels)?,
            ffn: GMoe::upload(gpu, &b.ffn, kernels)?,
            attn_norm: upload_bf16(gpu, &b.attn_norm)?,
            ffn_norm: upload_bf16(gpu, &b.ffn_norm)?,
            hc_attn: GHc::upload(gpu, &b.hc_attn)?,
            hc_ffn: GHc::upload(gpu, &b.hc_ffn)?,
            engram,
        })
    }
}
