//! `index_scores_rows` and `index_select_rows` (several lanes in one launch) against each lane's own launch: equal bits.

use crate::util::{F32_POISON, normals, poisoned_f32};
use tf_core::bf16;
use tf_core::rng::SplitMix64;
use tf_cuda::report::Report;
use tf_cuda::{Error, Gpu, PoolBuf};
use tf_dsv41::cuda::ops::{self, Candidates, LaneMask, RowCandidates, ScoreLane, SelectLane};

/// Heads, head dim, ratio, top-k, candidate blocks and block size shared by the lanes.
const SHAPE: (usize, usize, usize, usize, usize, usize) = (8, 32, 2, 6, 3, 4);
/// Each lane's (first position, rows, index keys): one that sees few groups, a prefill from 0, one past its keys.
const LANES: [(usize, usize, usize); 3] = [(40, 1, 18), (0, 3, 0), (99, 2, 45)];

fn bf16s(rng: &mut SplitMix64, n: usize) -> Vec<bf16> {
    normals(rng, n, 1.0).into_iter().map(bf16::from_f32).collect()
}

/// Each lane's launch alone, then all lanes in one, for scores and the three selection modes: (equal values, all values).
pub fn check(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    let (heads, hd, ratio, topk, blocks, block) = SHAPE;
    let total: usize = LANES.iter().map(|l| l.1).sum();
    let (q, w) = (bf16s(rng, total * heads * hd), bf16s(rng, total * heads));
    let keys: Vec<PoolBuf<'_>> =
        LANES.iter().map(|&(_, _, g)| gpu.upload(&bf16s(rng, g.max(1) * hd))).collect::<Result<_, _>>()?;
    let caps: Vec<usize> = LANES.iter().map(|&(p, r, _)| (p + r) / ratio).collect();
    let c = ((hd as f64).powf(-0.5) * (heads as f64).powf(-0.5)) as f32;
    // Alone: one launch per lane and kernel, as `select` runs them.
    let (mut alone, mut masks, mut at) = (Vec::new(), Vec::new(), 0);
    for (i, &(pos0, rows, groups)) in LANES.iter().enumerate() {
        let (qw, ww) = (heads * hd, heads);
        let qd = gpu.upload(&q[at * qw..(at + rows) * qw])?;
        let wd = gpu.upload(&w[at * ww..(at + rows) * ww])?;
        let mut scores = poisoned_f32(gpu, rows * caps[i])?;
        let dims = (rows, heads, hd, groups, caps[i]);
        let kv = keys[i].view();
        ops::index_scores(gpu, &qd.view(), &wd.view(), &kv, &mut scores.view_mut(), dims, (pos0, ratio), c)?;
        let (mut mask, mut sels) = (gpu.upload(&vec![0xAAu8; rows * caps[i]])?, Vec::new());
        for mode in 0..3 {
            let mut sel = gpu.upload(&vec![i32::MIN; rows * topk])?;
            let (sv, dims) = (scores.view(), (rows, caps[i], topk));
            match mode {
                0 => ops::index_select(gpu, &sv, Candidates::None, &mut sel.view_mut(), dims, (pos0, ratio))?,
                1 => {
                    let cands = Candidates::Make { mask: &mut mask.view_mut(), blocks, block };
                    ops::index_select(gpu, &sv, cands, &mut sel.view_mut(), dims, (pos0, ratio))?
                }
                _ => {
                    let cands = Candidates::Use { mask: &mask.view(), ratio };
                    ops::index_select(gpu, &sv, cands, &mut sel.view_mut(), dims, (pos0, ratio))?
                }
            }
            sels.extend(gpu.download::<u32>(&sel)?);
        }
        alone.push((gpu.download::<u32>(&scores)?, sels, gpu.download::<u8>(&mask)?));
        masks.push(mask);
        at += rows;
    }
    // Joint: every lane's rows in one launch per kernel and mode.
    let (qd, wd) = (gpu.upload(&q)?, gpu.upload(&w)?);
    let mut scores: Vec<PoolBuf<'_>> =
        caps.iter().zip(&LANES).map(|(c, l)| poisoned_f32(gpu, l.1 * c)).collect::<Result<_, _>>()?;
    let mut parts = Vec::new();
    let mut at = 0;
    for ((s, k), &(pos0, rows, groups)) in scores.iter_mut().zip(&keys).zip(&LANES) {
        parts.push(ScoreLane { keys: k.view(), groups, scores: s.view_mut(), pos0, rows, at });
        at += rows;
    }
    ops::index_scores_rows(gpu, (&qd.view(), &wd.view()), &mut parts, (heads, hd, ratio), c)?;
    drop(parts);
    let mut joint_masks: Vec<PoolBuf<'_>> =
        caps.iter().zip(&LANES).map(|(c, l)| gpu.upload(&vec![0xAAu8; l.1 * c])).collect::<Result<_, _>>()?;
    let mut sels: Vec<Vec<u32>> = vec![Vec::new(); LANES.len()];
    for mode in 0..3 {
        let mut out: Vec<PoolBuf<'_>> =
            LANES.iter().map(|l| gpu.upload(&vec![i32::MIN; l.1 * topk])).collect::<Result<_, _>>()?;
        let mut parts = Vec::new();
        let lanes = scores.iter().zip(out.iter_mut()).zip(joint_masks.iter_mut()).zip(&masks).zip(&LANES);
        for ((((s, o), jm), am), &(pos0, rows, _)) in lanes {
            let mask = match mode {
                0 => LaneMask::None,
                1 => LaneMask::Make(jm.view_mut()),
                _ => LaneMask::Use(am.view()),
            };
            parts.push(SelectLane { scores: s.view(), mask, sel: o.view_mut(), pos0, rows });
        }
        let cands = [RowCandidates::None, RowCandidates::Make { blocks, block }, RowCandidates::Use { ratio }][mode];
        ops::index_select_rows(gpu, &mut parts, cands, (topk, ratio))?;
        drop(parts);
        for (s, o) in sels.iter_mut().zip(&out) {
            s.extend(gpu.download::<u32>(o)?);
        }
    }
    let (mut same, mut all) = ([0usize; 3], [0usize; 3]);
    for (i, (a_scores, a_sels, a_mask)) in alone.iter().enumerate() {
        let j = [
            gpu.download::<u32>(&scores[i])?,
            sels[i].clone(),
            gpu.download::<u8>(&joint_masks[i])?.into_iter().map(u32::from).collect(),
        ];
        let a = [a_scores.clone(), a_sels.clone(), a_mask.iter().map(|&m| u32::from(m)).collect()];
        // A value still at its poison was never written, so it counts as unequal even where both hold it.
        let poison = [F32_POISON.to_bits(), i32::MIN as u32, 0xAA];
        for k in 0..3 {
            all[k] += a[k].len();
            let equal = a[k].iter().zip(&j[k]).filter(|&(x, y)| x == y && *x != poison[k]).count();
            same[k] += equal * usize::from(a[k].len() == j[k].len());
        }
    }
    for (k, name) in ["index_scores_rows", "index_select_rows", "candidate masks"].iter().enumerate() {
        let what = format!("{} of {} equal each lane alone", same[k], all[k]);
        report.row(name, "3 lanes: positions 40, 0, 99; 1, 3, 2 rows", what, same[k] == all[k] && all[k] > 0);
    }
    Ok(())
}
