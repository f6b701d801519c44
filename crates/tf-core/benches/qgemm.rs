//! FP8 block-scaled linear against dequantize-then-f32-matmul, in one run so the ratio is what counts.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use tf_core::formats::{quant_fp8_pow2, to_bf16};
use tf_core::ops::{Fp8Weight, matmul_nt};
use tf_core::{DType, Tensor, bf16};

fn weight(out: usize, inp: usize) -> Fp8Weight {
    let codes: Vec<u8> = (0..out * inp).map(|i| ((i as u32).wrapping_mul(2654435761) >> 24) as u8 & 0xF7).collect();
    let scales: Vec<u8> = (0..out.div_ceil(32) * (inp / 32)).map(|i| 120 + (i % 8) as u8).collect();
    let w = Tensor::from_bytes(DType::F8E4M3, &[out, inp], &codes).unwrap();
    let s = Tensor::from_bytes(DType::F8E8M0, &[out.div_ceil(32), inp / 32], &scales).unwrap();
    Fp8Weight::from_tensors("bench", &w, &s).unwrap()
}

fn acts(len: usize) -> Vec<bf16> {
    (0..len).map(|i| to_bf16(((i as u32).wrapping_mul(40503) % 2001) as f32 / 1000.0 - 1.0)).collect()
}

/// The f32 path: dequantize both operands, then the blocked f32 matmul.
fn dequant_matmul(w: &Fp8Weight, wf: Option<&[f32]>, x: &[bf16], rows: usize) -> Vec<bf16> {
    let (out, inp) = (w.out_features(), w.in_features());
    let q = quant_fp8_pow2(x, 32);
    let xd: Vec<f32> = (0..x.len()).map(|i| q.value(i)).collect();
    let owned;
    let wf = match wf {
        Some(wf) => wf,
        None => {
            owned = w.to_f32();
            &owned
        }
    };
    matmul_nt(&xd, wf, rows, out, inp).into_iter().map(to_bf16).collect()
}

fn bench(c: &mut Criterion) {
    for &(rows, out, inp) in &[(1usize, 4096usize, 4096usize), (32, 4096, 4096)] {
        let w = weight(out, inp);
        let wf = w.to_f32();
        let x = acts(rows * inp);
        let mut g = c.benchmark_group(format!("qgemm_{rows}x{out}x{inp}"));
        g.throughput(Throughput::Elements((2 * rows * out * inp) as u64));
        g.sample_size(10);
        g.bench_function("fp8_linear", |b| b.iter(|| w.forward(black_box(&x), rows)));
        g.bench_function("f32_matmul_on_predequantized_w", |b| {
            b.iter(|| dequant_matmul(&w, Some(black_box(&wf)), black_box(&x), rows))
        });
        g.bench_function("dequant_w_then_f32_matmul", |b| b.iter(|| dequant_matmul(&w, None, black_box(&x), rows)));
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
