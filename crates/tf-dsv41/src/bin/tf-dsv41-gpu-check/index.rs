//! `index_scores` and `index_select` against `attn::index`, bit-exact: same op order, no transcendental, same scores.

use crate::util::{diff_f32, normals, poisoned_f32};
use tf_core::bf16;
use tf_core::rng::SplitMix64;
use tf_cuda::report::Report;
use tf_cuda::{Error, Gpu, PoolBuf};
use tf_dsv41::attn::{apply_candidates, candidate_mask, head_weights, index_score, top_k, visible_groups};
use tf_dsv41::cuda::ops::{self, Candidates, KEY_NONE, KeySource, key_id};

/// What unwritten selection slots and mask bytes hold, so they fail the comparison.
const SEL_POISON: i32 = i32::MIN;
const MASK_POISON: u8 = 0xAA;

fn below(rng: &mut SplitMix64, n: usize) -> usize {
    (rng.next_u64() % n.max(1) as u64) as usize
}

/// Scores of `rows` rows at `pos0..` for `groups` keys, each case within bit-exactness of the CPU.
pub fn check_scores(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    let cases = [
        ("groups past the keys score a zero key", 4, 8, 64, 5, 9, 2),
        ("decode: 64 heads × 128, 1000 groups", 1, 64, 128, 1000, 3999, 4),
        ("prefill from 0: row 0 sees nothing", 7, 4, 32, 3, 0, 2),
        ("300,000 groups: two launches of at most 65,535 × 4", 1, 4, 32, 300_000, 299_999, 1),
    ];
    for (name, rows, heads, hd, groups, pos0, ratio) in cases {
        let cap = (pos0 + rows) / ratio;
        let q: Vec<bf16> = normals(rng, rows * heads * hd, 1.0).into_iter().map(bf16::from_f32).collect();
        let w: Vec<bf16> = normals(rng, rows * heads, 1.0).into_iter().map(bf16::from_f32).collect();
        let keys: Vec<bf16> = normals(rng, groups * hd, 1.0).into_iter().map(bf16::from_f32).collect();
        let c = ((hd as f64).powf(-0.5) * (heads as f64).powf(-0.5)) as f32;
        let zero = vec![bf16::ZERO; hd];
        let mut want = vec![f32::NEG_INFINITY; rows * cap];
        for r in 0..rows {
            let wr = head_weights(&w[r * heads..(r + 1) * heads], c);
            let qrow = &q[r * heads * hd..(r + 1) * heads * hd];
            for t in 0..visible_groups(pos0 + r, ratio) {
                let key = if t < groups { &keys[t * hd..(t + 1) * hd] } else { zero.as_slice() };
                want[r * cap + t] = index_score(qrow, key, &wr, hd);
            }
        }
        let (qd, wd, kd) = (gpu.upload(&q)?, gpu.upload(&w)?, gpu.upload(&keys)?);
        let mut out = poisoned_f32(gpu, rows * cap)?;
        let shape = (rows, heads, hd, groups, cap);
        ops::index_scores(gpu, &qd.view(), &wd.view(), &kd.view(), &mut out.view_mut(), shape, (pos0, ratio), c)?;
        let got: Vec<f32> = gpu.download(&out)?;
        let diff = diff_f32(&got, &want, 1e-6);
        report.row("index_scores", format!("{name} ({rows} rows, cap {cap})"), diff.describe("rel"), diff.pass(0.0));
    }
    Ok(())
}

/// Scores with many exact ties (a few distinct values, both zero signs), NaN past each row's visible count.
fn tied_scores(
    rng: &mut SplitMix64,
    rows: usize,
    cap: usize,
    (pos0, ratio): (usize, usize),
    levels: usize,
) -> Vec<f32> {
    let mut s = vec![f32::NAN; rows * cap];
    for r in 0..rows {
        for t in 0..visible_groups(pos0 + r, ratio).min(cap) {
            let v = match below(rng, levels + 2) {
                0 => 0.0,
                1 => -0.0,
                l => (l as f32 - levels as f32 / 2.0) * 0.25,
            };
            s[r * cap + t] = v;
        }
    }
    s
}

/// The CPU's selection ids for one row, padded to `topk` as the kernel writes them.
fn ids(chosen: &[usize], topk: usize) -> Vec<i32> {
    let mut v: Vec<i32> = chosen.iter().map(|&g| key_id(KeySource::Latent, g)).collect();
    v.resize(topk, KEY_NONE);
    v
}

/// A layer's scores on the GPU and the CPU's view of them (each row cut to its visible groups).
struct Layer<'g> {
    rows: usize,
    cap: usize,
    pos0: usize,
    ratio: usize,
    scores: Vec<f32>,
    dev: PoolBuf<'g>,
}

impl<'g> Layer<'g> {
    fn new(
        gpu: &'g Gpu,
        rng: &mut SplitMix64,
        rows: usize,
        (pos0, ratio): (usize, usize),
        levels: usize,
    ) -> Result<Self, Error> {
        let cap = (pos0 + rows) / ratio;
        let scores = tied_scores(rng, rows, cap, (pos0, ratio), levels);
        Ok(Layer { rows, cap, pos0, ratio, dev: gpu.upload(&scores)?, scores })
    }

    fn row(&self, r: usize) -> Vec<f32> {
        let cl = visible_groups(self.pos0 + r, self.ratio);
        self.scores[r * self.cap..r * self.cap + cl].to_vec()
    }

    /// Runs the kernel with `cands` and returns its selection.
    fn select(&self, gpu: &Gpu, cands: Candidates<'_, '_>, topk: usize) -> Result<Vec<i32>, Error> {
        let mut sel = gpu.upload(&vec![SEL_POISON; self.rows * topk])?;
        let shape = (self.rows, self.cap, topk);
        ops::index_select(gpu, &self.dev.view(), cands, &mut sel.view_mut(), shape, (self.pos0, self.ratio))?;
        gpu.download(&sel)
    }
}

/// Rows of a selection that differ from the CPU's, as a report string.
fn verdict(got: &[i32], want: &[i32], topk: usize) -> (String, bool) {
    let bad = (0..want.len() / topk.max(1)).filter(|r| got[r * topk..(r + 1) * topk] != want[r * topk..(r + 1) * topk]);
    let bad: Vec<usize> = bad.collect();
    let ok = got.len() == want.len() && bad.is_empty();
    (if ok { "bit-exact".to_string() } else { format!("rows {bad:?} differ") }, ok)
}

/// A candidate source and a layer using its mask (at the same or another ratio), plus plain top-k, all bit-exact.
fn check_pair(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report, case: SelectCase) -> Result<(), Error> {
    let SelectCase { name, rows, pos0, src_ratio, ratio, blocks, block, topk, levels } = case;
    let src = Layer::new(gpu, rng, rows, (pos0, src_ratio), levels)?;
    let user = Layer::new(gpu, rng, rows, (pos0, ratio), levels)?;
    let mut masks: Vec<Vec<bool>> = Vec::new();
    let (mut want_sel, mut want_mask, mut want_use, mut want_plain) =
        (vec![], vec![0u8; rows * src.cap], vec![], vec![]);
    for r in 0..rows {
        let s = src.row(r);
        let mask = candidate_mask(&s, blocks, block);
        want_mask[r * src.cap..r * src.cap + mask.len()].iter_mut().zip(&mask).for_each(|(m, &k)| *m = u8::from(k));
        want_sel.extend(ids(&top_k(&s, topk.min(s.len())), topk));
        let mut u = user.row(r);
        want_plain.extend(ids(&top_k(&u, topk.min(u.len())), topk));
        apply_candidates(&mut u, &mask);
        want_use.extend(ids(&top_k(&u, topk.min(u.len())), topk));
        masks.push(mask);
    }
    let mut mask_dev = gpu.upload(&vec![MASK_POISON; rows * src.cap])?;
    let got = src.select(gpu, Candidates::Make { mask: &mut mask_dev.view_mut(), blocks, block }, topk)?;
    let (text, ok) = verdict(&got, &want_sel, topk);
    report.row("index_select", format!("{name}: candidate source, top {topk}"), text, ok);
    let got_mask: Vec<u8> = gpu.download(&mask_dev)?;
    let bad = got_mask.iter().zip(&want_mask).filter(|(g, w)| g != w).count();
    let case = format!("{name}: mask of {blocks} blocks × {block}, cap {}", src.cap);
    report.row("index_select", case, format!("{bad} of {} bytes differ", want_mask.len()), bad == 0);
    let got = user.select(gpu, Candidates::Use { mask: &mask_dev.view(), ratio: src_ratio }, topk)?;
    let (text, ok) = verdict(&got, &want_use, topk);
    report.row("index_select", format!("{name}: ratio {ratio} using ratio {src_ratio}'s mask"), text, ok);
    let got = user.select(gpu, Candidates::None, topk)?;
    let (text, ok) = verdict(&got, &want_plain, topk);
    report.row("index_select", format!("{name}: plain top {topk} of cap {}", user.cap), text, ok);
    Ok(())
}

/// One index_select scenario; `levels` distinct score values make ties common.
struct SelectCase {
    name: &'static str,
    rows: usize,
    pos0: usize,
    src_ratio: usize,
    ratio: usize,
    blocks: usize,
    block: usize,
    topk: usize,
    levels: usize,
}

/// Small, awkward and large scenarios for [`check_pair`].
pub fn check_select(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    let cases = [
        SelectCase {
            name: "same ratio",
            rows: 6,
            pos0: 300,
            src_ratio: 4,
            ratio: 4,
            blocks: 3,
            block: 8,
            topk: 20,
            levels: 6,
        },
        SelectCase {
            name: "ratio 2 past a ratio-4 mask",
            rows: 5,
            pos0: 301,
            src_ratio: 4,
            ratio: 2,
            blocks: 2,
            block: 5,
            topk: 40,
            levels: 9,
        },
        SelectCase {
            name: "cap 1, topk past the visible",
            rows: 3,
            pos0: 0,
            src_ratio: 2,
            ratio: 2,
            blocks: 1,
            block: 4,
            topk: 4,
            levels: 3,
        },
        SelectCase {
            name: "only ±0 scores",
            rows: 2,
            pos0: 100,
            src_ratio: 1,
            ratio: 1,
            blocks: 2,
            block: 16,
            topk: 10,
            levels: 0,
        },
        SelectCase {
            name: "cap 20000, heavy ties",
            rows: 2,
            pos0: 79_998,
            src_ratio: 4,
            ratio: 4,
            blocks: 16,
            block: 64,
            topk: 512,
            levels: 40,
        },
    ];
    for case in cases {
        check_pair(gpu, rng, report, case)?;
    }
    Ok(())
}
