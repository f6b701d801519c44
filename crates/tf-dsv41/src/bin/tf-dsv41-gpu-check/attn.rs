//! `sparse_attn` (≤ 2 bf16 ulps; several lanes in one launch: equal bits) and `compress_pool` (≤ 1): the CPU's op order, only `exp` may round apart.

use crate::util::{BF16_POISON, Diff, bf16s, diff_bf16, download_bf16, normals, poisoned_bf16};
use tf_core::bf16;
use tf_core::rng::SplitMix64;
use tf_cuda::report::Report;
use tf_cuda::{Error, Gpu};
use tf_dsv41::attn::{pool, sparse};
use tf_dsv41::cuda::ops::{self, AttnPath, KEY_NONE, KeyRows, KeySource, key_id};

/// One sparse_attn shape; `latents` is the compressed row count, `empty_row` a row whose every key is empty.
struct AttnCase {
    name: &'static str,
    rows: usize,
    heads: usize,
    d: usize,
    w: usize,
    s: usize,
    latents: usize,
    empty_row: Option<usize>,
    bad_ids: bool,
    sel: bool,
}

const ATTN_CASES: [AttnCase; 5] = [
    AttnCase {
        name: "decode: 64 heads, d 512, w 128, s 512",
        rows: 1,
        heads: 64,
        d: 512,
        w: 128,
        s: 512,
        latents: 700,
        empty_row: None,
        bad_ids: false,
        sel: true,
    },
    AttnCase {
        name: "prefill: 5 rows, w 70 + s 30 crossing 64, bad ids, an all-empty row",
        rows: 5,
        heads: 3,
        d: 96,
        w: 70,
        s: 30,
        latents: 40,
        empty_row: Some(1),
        bad_ids: true,
        sel: true,
    },
    AttnCase {
        name: "window only (s = 0, no sel)",
        rows: 3,
        heads: 2,
        d: 64,
        w: 16,
        s: 0,
        latents: 0,
        empty_row: None,
        bad_ids: false,
        sel: false,
    },
    AttnCase {
        name: "d 40 (unaligned rows), w 64 exactly one block, s 65",
        rows: 2,
        heads: 2,
        d: 40,
        w: 64,
        s: 65,
        latents: 10,
        empty_row: None,
        bad_ids: true,
        sel: true,
    },
    AttnCase {
        name: "split's edges: 2 rows, 6 heads (a part head group), d 128, w 70 + s 100, bad ids, an all-empty row",
        rows: 2,
        heads: 6,
        d: 128,
        w: 70,
        s: 100,
        latents: 30,
        empty_row: Some(0),
        bad_ids: true,
        sel: true,
    },
];

fn below(rng: &mut SplitMix64, n: usize) -> usize {
    (rng.next_u64() % n.max(1) as u64) as usize
}

/// A random id: mostly real rows of the three sources, some empty slots, and (if asked) ids past their source.
fn random_id(rng: &mut SplitMix64, c: &AttnCase, latent_only: bool) -> i32 {
    let roll = below(rng, 20);
    if roll == 0 {
        return KEY_NONE;
    }
    if c.bad_ids && roll == 1 {
        return match below(rng, 4) {
            0 => key_id(KeySource::Chunk, c.rows + below(rng, 3)),
            1 => key_id(KeySource::Ring, c.w + below(rng, 3)),
            2 => key_id(KeySource::Latent, c.latents + below(rng, 3)),
            _ => 3 << 28,
        };
    }
    if latent_only && c.latents > 0 {
        return key_id(KeySource::Latent, below(rng, c.latents));
    }
    match below(rng, 3) {
        0 => key_id(KeySource::Chunk, below(rng, c.rows)),
        1 if c.w > 0 => key_id(KeySource::Ring, below(rng, c.w)),
        _ if c.latents > 0 => key_id(KeySource::Latent, below(rng, c.latents)),
        _ => KEY_NONE,
    }
}

/// The row an id names, with the kernel's rule: unknown sources and rows past their source are empty.
fn resolve<'a>(id: i32, c: &AttnCase, sources: [&'a [bf16]; 3]) -> Option<&'a [bf16]> {
    if id < 0 {
        return None;
    }
    let (src, row) = ((id >> 28) as usize, (id & 0x0FFF_FFFF) as usize);
    let limit = [c.rows, c.w, c.latents];
    (src < 3 && row < limit[src]).then(|| &sources[src][row * c.d..(row + 1) * c.d])
}

/// Each path's difference from the CPU, and whether the split path's bits equal the whole kernel's (where it ran).
type CaseResult = (Vec<(AttnPath, Diff)>, Option<bool>);

fn check_attn_case(gpu: &Gpu, rng: &mut SplitMix64, c: &AttnCase) -> Result<CaseResult, Error> {
    let (rows, heads, d, w, s) = (c.rows, c.heads, c.d, c.w, c.s);
    let q = bf16s(rng, rows * heads * d, 2.0);
    let chunk = bf16s(rng, rows * d, 1.0);
    let ring = bf16s(rng, w * d, 1.0);
    let latents = bf16s(rng, c.latents * d, 1.0);
    let sink = normals(rng, heads, 1.0);
    let mut window: Vec<i32> = Vec::with_capacity(rows * w);
    let mut sel: Vec<i32> = Vec::with_capacity(rows * s);
    for r in 0..rows {
        // Like the CPU's list: some live window slots, then KEY_NONE padding; selections padded the same way.
        let live = if c.empty_row == Some(r) { 0 } else { w - below(rng, w / 3 + 1) };
        window.extend((0..w).map(|j| if j < live { random_id(rng, c, false) } else { KEY_NONE }));
        let live = if c.empty_row == Some(r) { 0 } else { s - below(rng, s / 4 + 1) };
        sel.extend((0..s).map(|j| if j < live { random_id(rng, c, true) } else { KEY_NONE }));
    }
    let scale = (d as f32).powf(-0.5);
    let sources = [chunk.as_slice(), ring.as_slice(), latents.as_slice()];
    let mut want = vec![bf16::ZERO; rows * heads * d];
    for r in 0..rows {
        let ids = window[r * w..(r + 1) * w].iter().chain(&sel[r * s..(r + 1) * s]);
        let keys: Vec<Option<&[bf16]>> = ids.map(|&id| resolve(id, c, sources)).collect();
        for (h, &sink_h) in sink.iter().enumerate() {
            let o = (r * heads + h) * d;
            let qf: Vec<f32> = q[o..o + d].iter().map(|v| v.to_f32()).collect();
            sparse::attend(&qf, &keys, sink_h, scale, &mut want[o..o + d]);
        }
    }
    let (qd, cd, rd) = (gpu.upload(&q)?, gpu.upload(&chunk)?, gpu.upload(&ring)?);
    // An empty latent set is uploaded as 8 bytes, under one row, so the kernel sees no latent rows.
    let ld = if latents.is_empty() { gpu.upload(&[0u16; 4])? } else { gpu.upload(&latents)? };
    // An empty selection (s = 0) is uploaded as one unread id, never as a zero-byte copy.
    let sel_host = if sel.is_empty() { vec![KEY_NONE] } else { sel.clone() };
    let (wd, sd, kd) = (gpu.upload(&window)?, gpu.upload(&sel_host)?, gpu.upload(&sink)?);
    let (cv, rv, lv) = (cd.view(), rd.view(), ld.view());
    let keys = KeyRows { chunk: &cv, ring: &rv, latents: &lv };
    let sv = sd.view();
    let sel_view = c.sel.then_some(&sv);
    let shape = (rows, heads, d, w, s);
    // The split path runs where head dims are a multiple of 64 (every dsv41 config's 512 among them).
    let paths: &[AttnPath] = if d % 64 == 0 { &[AttnPath::Whole, AttnPath::Split] } else { &[AttnPath::Whole] };
    let mut got = Vec::new();
    for &path in paths {
        let mut out = poisoned_bf16(gpu, rows * heads * d)?;
        let (qv, wv, kv) = (qd.view(), wd.view(), kd.view());
        ops::sparse_attn(path, gpu, &qv, &keys, &wv, sel_view, &kv, &mut out.view_mut(), shape, scale)?;
        let vals = download_bf16(gpu, &out)?;
        got.push((path, diff_bf16(&vals, &want), vals));
    }
    let split_same = match got.as_slice() {
        [(_, _, whole), (_, _, split)] => Some(whole.iter().zip(split).all(|(a, b)| a.to_bits() == b.to_bits())),
        _ => None,
    };
    Ok((got.into_iter().map(|(p, d, _)| (p, d)).collect(), split_same))
}

/// Every case of [`ATTN_CASES`], within 2 bf16 ulps of the CPU.
pub fn check_sparse(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    for c in &ATTN_CASES {
        let (diffs, split_same) = check_attn_case(gpu, rng, c)?;
        for (path, diff) in diffs {
            let name = format!("{path:?}: {}", c.name);
            report.row("sparse_attn", &name, diff.describe("bf16 ulp (≤ 2)"), diff.pass(2.0));
        }
        if let Some(same) = split_same {
            let what = if same { "every bit equal" } else { "bits differ" };
            report.row("sparse_attn", format!("split == whole: {}", c.name), what.to_string(), same);
        }
    }
    for (with_sel, name) in
        [(true, "3 lanes of 1, 3, 2 rows; 5, 0, 40 latents; bad ids"), (false, "the same, window only")]
    {
        let (same, total) = check_rows(gpu, rng, with_sel)?;
        let what = format!("{same} of {total} values equal each lane's launch alone");
        report.row("sparse_attn_rows", name, what, same == total && total > 0);
    }
    Ok(())
}

/// Three lanes' rows in one `sparse_attn_rows` launch against `sparse_attn` per lane: (equal bf16 values, all values).
fn check_rows(gpu: &Gpu, rng: &mut SplitMix64, with_sel: bool) -> Result<(usize, usize), Error> {
    let (heads, d, w, s) = (4, 64, 16, if with_sel { 24 } else { 0 });
    let case =
        |rows, latents| AttnCase { name: "", rows, heads, d, w, s, latents, empty_row: None, bad_ids: true, sel: true };
    let cases = [case(1, 5), case(3, 0), case(2, 40)];
    let mut ups = Vec::new();
    let (mut alone, mut q_all) = (Vec::new(), Vec::new());
    for c in &cases {
        let q = bf16s(rng, c.rows * heads * d, 2.0);
        let (chunk, ring) = (gpu.upload(&bf16s(rng, c.rows * d, 1.0))?, gpu.upload(&bf16s(rng, w * d, 1.0))?);
        // An empty latent set is 8 bytes, under one row, as in `check_attn_case`.
        let lat = if c.latents == 0 { gpu.upload(&[0u16; 4])? } else { gpu.upload(&bf16s(rng, c.latents * d, 1.0))? };
        let window: Vec<i32> = (0..c.rows * w).map(|_| random_id(rng, c, false)).collect();
        // No selection (s = 0) is one unread id, never a zero-byte upload.
        let sel: Vec<i32> = (0..(c.rows * s).max(1)).map(|_| random_id(rng, c, true)).collect();
        let (wd, sd, qd) = (gpu.upload(&window)?, gpu.upload(&sel)?, gpu.upload(&q)?);
        ups.push((chunk, ring, lat, wd, sd));
        q_all.extend(q);
        let (chunk, ring, lat, wd, sd) = ups.last().expect("pushed above");
        let (cv, rv, lv, sv) = (chunk.view(), ring.view(), lat.view(), sd.view());
        let keys = KeyRows { chunk: &cv, ring: &rv, latents: &lv };
        let (mut out, sink) = (poisoned_bf16(gpu, c.rows * heads * d)?, gpu.upload(&vec![0.5f32; heads])?);
        let shape = (c.rows, heads, d, w, s);
        ops::sparse_attn(
            AttnPath::Auto,
            gpu,
            &qd.view(),
            &keys,
            &wd.view(),
            Some(&sv),
            &sink.view(),
            &mut out.view_mut(),
            shape,
            0.125,
        )?;
        alone.extend(download_bf16(gpu, &out)?);
    }
    let views: Vec<_> =
        ups.iter().map(|(c, r, l, wd, sd)| (c.view(), r.view(), l.view(), wd.view(), sd.view())).collect();
    let lanes: Vec<ops::LaneKeys<'_>> = views
        .iter()
        .zip(&cases)
        .map(|((chunk, ring, latents, window, sel), c)| ops::LaneKeys {
            keys: KeyRows { chunk, ring, latents },
            window,
            sel: with_sel.then_some(sel),
            rows: c.rows,
        })
        .collect();
    let (qd, sink) = (gpu.upload(&q_all)?, gpu.upload(&vec![0.5f32; heads])?);
    let mut out = poisoned_bf16(gpu, alone.len())?;
    ops::sparse_attn_rows(gpu, &qd.view(), &lanes, &sink.view(), &mut out.view_mut(), (heads, d, w, s), 0.125)?;
    let joint = download_bf16(gpu, &out)?;
    // A value left at the poison (NaN) pattern was never written, so it counts as unequal even where both are.
    let same = joint.iter().zip(&alone).filter(|(a, b)| a.to_bits() == b.to_bits() && a.to_bits() != BF16_POISON);
    Ok((same.count(), alone.len()))
}

/// Pooling of `groups` groups of `ratio` rows of width `d`, within 1 bf16 ulp of the CPU.
pub fn check_pool(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    for (groups, ratio, d) in [(6, 2, 300), (3, 4, 128), (1, 2, 1)] {
        let kv = normals(rng, groups * ratio * d, 1.0);
        let gate = normals(rng, groups * ratio * d, 3.0);
        let mut want = Vec::with_capacity(groups * d);
        for g in 0..groups {
            let open: Vec<(Vec<f32>, Vec<f32>)> = (g * ratio..(g + 1) * ratio)
                .map(|i| (kv[i * d..(i + 1) * d].to_vec(), gate[i * d..(i + 1) * d].to_vec()))
                .collect();
            want.extend(pool(&open, d));
        }
        let (kd, gd) = (gpu.upload(&kv)?, gpu.upload(&gate)?);
        let mut out = poisoned_bf16(gpu, groups * d)?;
        ops::compress_pool(gpu, &kd.view(), &gd.view(), &mut out.view_mut(), (groups, ratio, d))?;
        let diff = diff_bf16(&download_bf16(gpu, &out)?, &want);
        let case = format!("{groups} groups × ratio {ratio} × d {d}");
        report.row("compress_pool", case, diff.describe("bf16 ulp (≤ 1)"), diff.pass(1.0));
    }
    Ok(())
}
