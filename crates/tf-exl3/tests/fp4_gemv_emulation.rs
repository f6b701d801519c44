//! `fp4_gemv`'s arithmetic, tiling and shared-memory layout replayed on the CPU must give `forward_f32` bit for bit.

use tf_core::formats::{E2M1_TABLE, e4m3_to_f32, e8m0_to_f32, f16_bits_to_f32, pack_fp4, quant_fp8_pow2};
use tf_core::rng::SplitMix64;
use tf_core::{DType, Tensor, bf16};
use tf_exl3::Fp4Weight;
use tf_exl3::cuda::{FP4_MAX_ROWS, Fp4Plan};

/// The kernel's `e2m1x8_scaled`: nibble pairs to f16 pairs (value × 2^-14), then to f32.
fn e2m1x8_scaled(q: u32) -> [f32; 8] {
    let mut w = [0.0f32; 8];
    for p in 0..4 {
        let s = q << (4 * p);
        let h = (s & 0x8000_8000) + ((s & 0x7000_7000) >> 3);
        w[3 - p] = f16_bits_to_f32(h as u16);
        w[7 - p] = f16_bits_to_f32((h >> 16) as u16);
    }
    w
}

/// The kernel's lane tree.
fn tree8(a: &[f32; 8]) -> f32 {
    ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

#[test]
fn nibble_decode_is_the_e2m1_table_times_2_pow_minus_14() {
    let mut rng = SplitMix64::new(11);
    for j in 0..8 {
        for code in 0..16u32 {
            let noise = rng.next_u64() as u32 & !(0xF << (4 * j));
            let got = e2m1x8_scaled(noise | code << (4 * j))[j];
            let want = E2M1_TABLE[code as usize] * 2f32.powi(-14);
            assert_eq!(got.to_bits(), want.to_bits(), "nibble {j}, code {code}");
        }
    }
}

/// One problem: packed weights, E8M0 scales, and E4M3 activation codes with their power-of-two scales.
struct Problem {
    rows: usize,
    n: usize,
    k: usize,
    packed: Vec<u8>,
    wscale: Vec<u8>,
    codes: Vec<u8>,
    xscale: Vec<f32>,
    want: Vec<f32>,
}

impl Problem {
    /// Wide activation ranges, scale bytes 0 and 1, and loud groups on all-6.0 rows so lane sums pass 2^14 and round.
    fn random(rng: &mut SplitMix64, rows: usize, n: usize, k: usize) -> Problem {
        let codes4: Vec<u8> = (0..n * k)
            .map(|i| match ((i / k) % 3, i % 8) {
                (0, 7) => 1,
                (0, _) => 7,
                _ => (rng.next_u64() % 16) as u8,
            })
            .collect();
        let wscale: Vec<u8> = (0..n * k / 32)
            .map(|i| if i % 97 == 5 { (i % 2) as u8 } else { 112 + (rng.next_u64() % 30) as u8 })
            .collect();
        let mut x = Vec::with_capacity(rows * k);
        for g in 0..rows * k / 32 {
            let mag = 2f32.powi((rng.next_u64() % 61) as i32 - 30);
            let loud = g % 5 == 0;
            x.extend((0..32).map(|i| {
                let v = match (loud, i % 8) {
                    (true, 7) => (1 + rng.next_u64() % 3) as f32 * mag * 2f32.powi(-17),
                    (true, _) => (1.0 + rng.normal().abs() / 64.0) * mag,
                    (false, _) => rng.normal() * mag,
                };
                bf16::from_f32(v)
            }));
        }
        let q = quant_fp8_pow2(&x, 32);
        let packed = pack_fp4(&codes4);
        let wt = Tensor::from_bytes(DType::I8, &[n, k / 2], &packed).unwrap();
        let st = Tensor::from_bytes(DType::F8E8M0, &[n, k / 32], &wscale).unwrap();
        let want = Fp4Weight::from_tensors("emulated", &wt, &st).unwrap().forward_f32(&x, rows);
        Problem { rows, n, k, packed, wscale, codes: q.codes, xscale: q.scales, want }
    }
}

/// `gemv_tile` for every block of the grid, thread by thread between its barriers, with poisoned shared memory.
fn run_kernel(p: &Problem, plan: Fp4Plan) -> Vec<f32> {
    let (rows, n, k) = (p.rows, p.n, p.k);
    assert_eq!(plan.rows, rows);
    let (seg, threads, rt) = (plan.seg, plan.threads, plan.rows_per_thread);
    let (m, kbt, tile) = (threads / seg, k / 32, plan.tile_rows());
    let ps = seg.div_ceil(32) * 32 + 4;
    let mut y = vec![f32::NAN; rows * n];
    for n0 in (0..n).step_by(tile) {
        let mut acc = vec![0.0f32; threads];
        for kb0 in (0..kbt).step_by(seg) {
            let nb = seg.min(kbt - kb0);
            // Shared memory as the kernel lays it out, NaN until written, so a read of an unwritten slot shows.
            let mut xf = vec![f32::NAN; rows * seg * 36];
            let mut part = vec![f32::NAN; tile * rows * ps];
            for i in 0..rows * nb * 8 {
                let (r, j) = (i / (nb * 8), i % (nb * 8));
                for e in 0..4 {
                    xf[(r * seg + j / 8) * 36 + (j % 8) * 4 + e] = e4m3_to_f32(p.codes[r * k + kb0 * 32 + 4 * j + e]);
                }
            }
            for t in 0..threads {
                let (kbl, phase) = (t % seg, t / seg);
                let kb = kb0 + kbl;
                if kbl >= nb {
                    continue;
                }
                for i in 0..rt {
                    let g = phase + m * i;
                    let row = n0 + g;
                    if row >= n {
                        continue;
                    }
                    let block = &p.packed[row * k / 2 + kb * 16..][..16];
                    let sw = e8m0_to_f32(p.wscale[row * kbt + kb]);
                    let mut v = vec![[0.0f32; 8]; rows];
                    for c in 0..4 {
                        let wf = e2m1x8_scaled(u32::from_le_bytes(block[4 * c..4 * c + 4].try_into().unwrap()));
                        for (r, vr) in v.iter_mut().enumerate() {
                            for l in 0..8 {
                                let x = xf[(r * seg + kbl) * 36 + 8 * c + l];
                                vr[l] = x.mul_add(wf[l], vr[l]);
                            }
                        }
                    }
                    for (r, vr) in v.iter().enumerate() {
                        let pv = tree8(vr) * 2f32.powi(14);
                        let slot = &mut part[(g * rows + r) * ps + kbl];
                        assert!(slot.is_nan(), "block {n0}, segment {kb0}: partial ({g}, {r}, {kbl}) written twice");
                        *slot = (pv * p.xscale[r * kbt + kb]) * sw;
                    }
                }
            }
            for (t, a) in acc.iter_mut().enumerate().take(tile * rows) {
                for b in 0..nb {
                    *a += part[t * ps + b];
                }
            }
        }
        for (t, &a) in acc.iter().enumerate().take(tile * rows) {
            let (g, r) = (t / rows, t % rows);
            if n0 + g < n {
                assert!(y[r * n + n0 + g].is_nan(), "output ({r}, {}) written twice", n0 + g);
                y[r * n + n0 + g] = a;
            }
        }
    }
    y
}

fn assert_bits(got: &[f32], want: &[f32], case: &str) {
    assert_eq!(got.len(), want.len(), "{case}");
    let differ: Vec<usize> = (0..got.len()).filter(|&i| got[i].to_bits() != want[i].to_bits()).collect();
    assert!(
        differ.is_empty(),
        "{case}: {} of {} outputs differ, first at {}: {} vs {}",
        differ.len(),
        got.len(),
        differ[0],
        got[differ[0]],
        want[differ[0]]
    );
}

#[test]
fn kernel_replay_matches_the_cpu_reference_on_model_shapes() {
    let mut rng = SplitMix64::new(0x5EED);
    // DeepSeek-V4.1 expert shapes in one segment: w1/w3 (5120 -> 2304) and w2 (2304 -> 5120), rows cut to keep it quick.
    for (rows, n, k) in [(1, 300, 5120), (1, 700, 2304), (2, 150, 2304)] {
        let p = Problem::random(&mut rng, rows, n, k);
        let plan = Fp4Plan::new(rows, k);
        assert_eq!(plan.seg, k / 32, "{rows}×{n}×{k} runs in one segment");
        assert_bits(&run_kernel(&p, plan), &p.want, &format!("{rows}×{n}×{k} {plan:?}"));
    }
}

#[test]
fn kernel_replay_matches_in_segments_and_ragged_tiles() {
    let mut rng = SplitMix64::new(7);
    for (rows, n, k) in [(8, 40, 2304), (4, 33, 5120), (3, 100, 160), (5, 17, 96), (1, 9, 32 * 1021)] {
        let p = Problem::random(&mut rng, rows, n, k);
        let plan = Fp4Plan::new(rows, k);
        assert_bits(&run_kernel(&p, plan), &p.want, &format!("{rows}×{n}×{k} {plan:?}"));
    }
}

#[test]
fn any_plan_gives_the_same_bits() {
    let mut rng = SplitMix64::new(99);
    let p = Problem::random(&mut rng, 2, 48, 2304);
    let a = run_kernel(&p, Fp4Plan::new(2, 2304));
    let segmented = Fp4Plan { rows: 2, seg: 32, threads: 128, rows_per_thread: 4 };
    assert_bits(&run_kernel(&p, segmented), &a, "one segment vs segments of 32");
    assert_bits(&a, &p.want, "against the CPU");
    for rows in 1..=FP4_MAX_ROWS {
        let plan = Fp4Plan::new(rows, 2304);
        assert!(plan.rows_per_thread * rows <= plan.seg, "{plan:?}");
    }
}
