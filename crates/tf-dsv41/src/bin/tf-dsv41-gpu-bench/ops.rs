//! Single ops at the flash shapes of a decode row, each timed by events (median of 20 after 3 warm runs).

use serde_json::{Value, json};
use tf_core::ops::SumOrder;
use tf_core::rng::SplitMix64;
use tf_cuda::timing::median;
use tf_cuda::{Error, Gpu};
use tf_dsv41::cuda::ops::{self, Io, Sum};
use tf_dsv41::linear::Norm;

/// Bytes of bf16 noise (normals are not needed: timing only).
fn noise<'g>(gpu: &'g Gpu, rng: &mut SplitMix64, bytes: usize) -> Result<tf_cuda::PoolBuf<'g>, Error> {
    let v: Vec<u16> = (0..bytes.div_ceil(2)).map(|_| 0x3c00 | (rng.next_u64() as u16 & 0x00ff)).collect();
    gpu.upload(&v)
}

fn time(gpu: &Gpu, mut f: impl FnMut(&Gpu) -> Result<(), Error>) -> Result<f32, Error> {
    for _ in 0..3 {
        f(gpu)?;
    }
    let ms = (0..20).map(|_| gpu.time_ms(&mut f)).collect::<Result<Vec<_>, _>>()?;
    Ok(median(&ms))
}

/// µs per launch of the reductions that bound a decode step, printed and returned.
pub fn ops_bench(gpu: &Gpu, rows: usize) -> Result<Value, Error> {
    let mut rng = SplitMix64::new(11);
    let (hc, dim, vocab) = (4usize, 5120usize, 129_280usize);
    let mix = (2 + hc) * hc;
    let x = noise(gpu, &mut rng, rows * hc * dim * 2)?;
    let func = gpu.upload(&vec![0.01f32; mix * hc * dim])?;
    let (scale, base) = (gpu.upload(&[0.5f32; 3])?, gpu.upload(&vec![0.1f32; mix])?);
    let mut out = gpu.pool().take(rows * vocab * 4)?;
    let mut results = Vec::new();
    let mut report = |name: &str, us: f32, bytes: usize| {
        let gbps = bytes as f64 / (f64::from(us) * 1e-6) / 1e9;
        println!("[bench] op {rows} rows: {name:<44} {us:>9.1} µs  ({gbps:.0} GB/s of weights)");
        results.push(json!({"op": name, "rows": rows, "us": us, "weight_gbps": gbps}));
    };
    let orders = [
        (SumOrder::Sequential, "sequential", false),
        (SumOrder::Lanes32, "lanes32", false),
        (SumOrder::Lanes32, "lanes32", true),
    ];
    for (sums, tag, hc4) in orders {
        let us = 1e3
            * time(gpu, |g| {
                let mut o = out.view_mut();
                let (s, b, shape, norm) = (&scale.view(), &base.view(), (rows, hc, dim), Norm { eps: 1e-6, sums });
                ops::hc_mixes(
                    g,
                    &x.view(),
                    &func.view(),
                    s,
                    b,
                    &mut o,
                    shape,
                    ops::Sinkhorn { iters: 20, eps: 1e-6, hc4 },
                    norm,
                )
            })?;
        let warp4 = if hc4 { ", warp4" } else { "" };
        report(&format!("hc_mixes (24×20480 f32, x² {tag}, sinkhorn{warp4})"), us, mix * hc * dim * 4);
    }
    let us = 1e3
        * time(gpu, |g| {
            let mut o = out.view_mut();
            ops::dense(
                g,
                &x.view(),
                Io::Bf16,
                &func.view(),
                Io::F32,
                &mut o,
                Io::F32,
                (rows, mix, hc * dim),
                1,
                Sum::Lanes8,
            )
        })?;
    report("dense 24×20480 f32, 8 lanes", us, mix * hc * dim * 4);
    let wo_a = noise(gpu, &mut rng, 8 * 1024 * 4096 * 2)?;
    let xo = noise(gpu, &mut rng, rows * 8 * 4096 * 2)?;
    let us = 1e3
        * time(gpu, |g| {
            let mut o = out.view_mut();
            ops::dense(
                g,
                &xo.view(),
                Io::Bf16,
                &wo_a.view(),
                Io::Bf16,
                &mut o,
                Io::Bf16,
                (rows, 8192, 4096),
                8,
                Sum::Sequential,
            )
        })?;
    report("dense wo_a 8×1024×4096 bf16, sequential", us, 8 * 1024 * 4096 * 2);
    let gate = noise(gpu, &mut rng, 384 * dim * 2)?;
    let us = 1e3
        * time(gpu, |g| {
            let mut o = out.view_mut();
            ops::dense(
                g,
                &x.view(),
                Io::Bf16,
                &gate.view(),
                Io::Bf16,
                &mut o,
                Io::F32,
                (rows, 384, dim),
                1,
                Sum::Lanes8,
            )
        })?;
    report("dense router 384×5120 bf16, 8 lanes", us, 384 * dim * 2);
    let head = noise(gpu, &mut rng, vocab * dim * 2)?;
    let us = 1e3
        * time(gpu, |g| {
            let mut o = out.view_mut();
            ops::dense(
                g,
                &x.view(),
                Io::Bf16,
                &head.view(),
                Io::Bf16,
                &mut o,
                Io::F32,
                (rows, vocab, dim),
                1,
                Sum::Lanes8,
            )
        })?;
    report("dense head 129280×5120 bf16, 8 lanes", us, vocab * dim * 2);
    // The slope over widths is the cost of one step of the sequential sum of squares; width 8 is the launch floor.
    let nw = noise(gpu, &mut rng, 4 * dim * 2)?;
    let (seq, wide) = (Norm::sequential(1e-6), Norm { eps: 1e-6, sums: SumOrder::Lanes32 });
    for (width, norm) in [(8, seq), (1280, seq), (dim, seq), (4 * dim, seq), (dim, wide), (4 * dim, wide)] {
        let us = 1e3
            * time(gpu, |g| {
                let mut o = out.view_mut();
                ops::rms_norm(g, &x.view(), &nw.view(), &mut o, None, rows, width, norm)
            })?;
        report(&format!("rms_norm {width}, {:?}", norm.sums), us, width * 2);
    }
    Ok(Value::Array(results))
}
