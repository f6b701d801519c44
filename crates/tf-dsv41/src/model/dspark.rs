//! DSpark drafts (dsv41 §11): taps → main projection → ring seeds; draft blocks, Markov head and confidences.

use super::{Block, BlockCall, LaneRows, Model, Streams};
use crate::attn::Shared;
use crate::config::RopeKind;
use crate::linear::{Dense, load_bf16_vec, rms_norm_rows};
use crate::qlinear::QLinear;
use crate::state::SeqState;
use tf_core::ops::argmax;
use tf_core::ops::qgemm::Fp8Weight;
use tf_core::{Checkpoint, Error, Result, bf16};

/// The DSpark pieces outside the draft blocks: stage 0's main projection, the last stage's heads.
#[derive(Debug)]
pub struct DSparkHeads {
    pub stages: Vec<Block>,
    pub main_proj: QLinear<Fp8Weight>,
    pub main_norm: Vec<bf16>,
    pub norm: Vec<bf16>,
    pub markov_embed: Vec<bf16>,
    pub markov_head: Dense,
    pub confidence: Dense,
    pub rank: usize,
}

/// Five draft tokens for the positions after the next one, with a confidence logit each.
#[derive(Clone, Debug, PartialEq)]
pub struct Drafts {
    pub tokens: Vec<u32>,
    pub confidence: Vec<f32>,
}

impl DSparkHeads {
    pub fn load(ck: &Checkpoint, cfg: &crate::Config, stages: Vec<Block>) -> Result<DSparkHeads> {
        let last = format!("mtp.{}.", cfg.n_mtp_layers - 1);
        let (dim, rank, vocab) = (cfg.dim, cfg.dspark_markov_rank, cfg.vocab_size);
        let main_proj = QLinear::load(ck, "mtp.0.main_proj", dim, dim * cfg.dspark_target_layer_ids.len())?;
        let embed = Dense::load(ck, &format!("{last}markov_head.embed.weight"), vocab, rank)?;
        Ok(DSparkHeads {
            stages,
            main_proj,
            main_norm: load_bf16_vec(ck, "mtp.0.main_norm.weight", dim)?,
            norm: load_bf16_vec(ck, &format!("{last}norm.weight"), dim)?,
            markov_embed: embed.w.iter().map(|&v| tf_core::formats::to_bf16(v)).collect(),
            markov_head: Dense::load(ck, &format!("{last}markov_head.head.weight"), vocab, rank)?,
            confidence: Dense::load(ck, &format!("{last}confidence_head.proj.weight"), 1, dim + rank)?,
            rank,
        })
    }
}

impl Model {
    /// Seeds every stage's ring with the projected main rows at positions `pos0..pos0+rows` (only the newest `W` stay).
    pub(crate) fn seed_draft_rings(&self, st: &mut SeqState, pos0: usize, taps: &[Vec<bf16>], rows: usize) {
        let Some(ds) = &self.dspark else { return };
        if taps.is_empty() {
            return;
        }
        let (dim, w) = (self.cfg.dim, self.cfg.window_size);
        let first = rows.saturating_sub(w);
        let hidden: Vec<bf16> = (first..rows)
            .flat_map(|r| taps.iter().flat_map(move |t| t[r * dim..(r + 1) * dim].iter().copied()))
            .collect();
        let n = rows - first;
        let main_x = rms_norm_rows(&ds.main_proj.forward(&hidden, n), &ds.main_norm, self.cfg.norm());
        let rope = self.rope(RopeKind::Plain);
        for stage in &ds.stages {
            let kv = stage.attn.window_kv(&main_x, pos0 + first, rope, self.cfg.norm());
            for (r, row) in kv.chunks_exact(self.cfg.head_dim).enumerate() {
                st.windows[stage.role.layer].put(pos0 + first + r, row.to_vec());
            }
        }
    }

    /// Drafts after the newest processed row, given the token sampled for the next position (greedy drafts).
    pub fn draft(&self, st: &mut SeqState, next: u32) -> Result<Drafts> {
        self.draft_with_logits(st, next).map(|(d, _)| d)
    }

    /// `draft`, plus each block row's f32 logits after its Markov bias (the rows the greedy drafts are argmaxes of).
    pub fn draft_with_logits(&self, st: &mut SeqState, next: u32) -> Result<(Drafts, Vec<Vec<f32>>)> {
        Ok(self.draft_rows(&mut [st], &[next], true)?.remove(0))
    }

    /// [`Model::draft`] of several lanes at once: the stages and the head run once over every lane's block; each lane's drafts equal its drafts alone.
    pub fn draft_lanes(&self, sts: &mut [&mut SeqState], next: &[u32]) -> Result<Vec<Drafts>> {
        Ok(self.draft_rows(sts, next, false)?.into_iter().map(|(d, _)| d).collect())
    }

    /// Each lane's drafts, and with `keep` its block rows' logits; the stages' attention runs per lane, the rest over all rows.
    fn draft_rows(&self, sts: &mut [&mut SeqState], next: &[u32], keep: bool) -> Result<Vec<(Drafts, Vec<Vec<f32>>)>> {
        let ds = self.dspark.as_ref().ok_or_else(|| Error::Invalid("this checkpoint has no DSpark stages".into()))?;
        assert_eq!(sts.len(), next.len(), "one next token per lane");
        if sts.iter().any(|st| st.pos == 0) {
            return Err(Error::Invalid("draft needs a processed prompt".into()));
        }
        let (block, noise, n) = (self.cfg.dspark_block_size, self.cfg.dspark_noise_token_id, sts.len());
        let ids: Vec<u32> =
            next.iter().flat_map(|&t| std::iter::once(t).chain(std::iter::repeat_n(noise, block - 1))).collect();
        let mut s: Streams = self.embed_rows(&ids)?;
        let mut shared: Vec<Shared> = (0..n).map(|_| Shared::default()).collect();
        for stage in &ds.stages {
            let call = BlockCall {
                cfg: &self.cfg,
                rope: self.rope(RopeKind::Plain),
                run_compressor: false,
                quirks: self.opts.quirks,
                engram_ids: None,
                engram_rows: None,
            };
            let mut lanes: Vec<LaneRows<'_>> = sts
                .iter_mut()
                .zip(shared.iter_mut())
                .map(|(st, shared)| LaneRows { pos0: st.pos, rows: block, st, shared })
                .collect();
            stage.forward(&mut s, &call, &mut lanes);
        }
        let (hc, dim, vocab) = (self.cfg.hc_mult, self.cfg.dim, self.cfg.vocab_size);
        let y = s.collapse(hc, dim);
        let normed: Vec<f32> = rms_norm_rows(&y, &ds.norm, self.cfg.norm()).iter().map(|v| v.to_f32()).collect();
        let logits = self.head_rows(&normed, n * block);
        let each = next.iter().enumerate();
        Ok(each
            .map(|(l, &t)| {
                let rows = l * block..(l + 1) * block;
                let (y, logits) = (&y[rows.start * dim..rows.end * dim], &logits[rows.start * vocab..rows.end * vocab]);
                self.markov_drafts(ds, t, (y, logits), keep)
            })
            .collect())
    }

    /// One lane's block: each row's logits plus the Markov bias of the token before it, greedy, with its confidence.
    fn markov_drafts(
        &self,
        ds: &DSparkHeads,
        next: u32,
        (y, logits): (&[bf16], &[f32]),
        keep: bool,
    ) -> (Drafts, Vec<Vec<f32>>) {
        let (block, dim, vocab) = (self.cfg.dspark_block_size, self.cfg.dim, self.cfg.vocab_size);
        let mut out = vec![next];
        let mut confidence = Vec::with_capacity(block);
        let mut rows = Vec::with_capacity(if keep { block } else { 0 });
        for i in 0..block {
            let e = &ds.markov_embed[out[i] as usize * ds.rank..(out[i] as usize + 1) * ds.rank];
            let ef: Vec<f32> = e.iter().map(|v| v.to_f32()).collect();
            let bias = ds.markov_head.forward_f32(&ef, 1);
            let bias = if let Some(v) = &self.vocab { v.logits(&bias, 1) } else { bias };
            let row: Vec<f32> = logits[i * vocab..(i + 1) * vocab].iter().zip(&bias).map(|(a, b)| a + b).collect();
            out.push(argmax(&row));
            let cat: Vec<f32> = y[i * dim..(i + 1) * dim].iter().map(|v| v.to_f32()).chain(ef).collect();
            confidence.push(ds.confidence.forward_f32(&cat, 1)[0]);
            if keep {
                rows.push(row);
            }
        }
        (Drafts { tokens: out[1..].to_vec(), confidence }, rows)
    }
}
