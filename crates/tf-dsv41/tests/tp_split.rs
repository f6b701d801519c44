//! TP split rules: heads in whole `wo_a` groups, every split tensor tiled exactly by its ranks, replicated bytes counted per rank.

use tf_dsv41::Config;
use tf_dsv41::inventory::params;
use tf_dsv41::tiny::TinyKind;
use tf_dsv41::tp::{ExpertSplit, Limits, Part, WeightFormat, budget, head_ranges, part, part_bytes, partition};

fn configs() -> Vec<(&'static str, Config)> {
    vec![("tiny", TinyKind::Tiny.config()), ("small", TinyKind::Small.config()), ("flash", Config::v41_flash())]
}

const LIM: Limits =
    Limits { gpu_bytes: 141_000_000_000, prefill_chunk: 2048, engram_cache_rows: 0, reserve_bytes: 2 << 30 };

#[test]
fn partitions_are_contiguous_and_put_the_remainder_last() {
    assert_eq!(partition(8, 3), vec![0..2, 2..5, 5..8]);
    assert_eq!(partition(4, 8).iter().map(|r| r.len()).collect::<Vec<_>>(), [0, 0, 0, 0, 1, 1, 1, 1]);
    let flash = Config::v41_flash();
    let heads: Vec<usize> = head_ranges(&flash, 3).iter().map(|r| r.len()).collect();
    assert_eq!(heads, [16, 24, 24], "world 3 splits 8 groups of 8 heads as 2/3/3");
    assert_eq!(head_ranges(&flash, 8).iter().map(|r| r.len()).collect::<Vec<_>>(), [8; 8]);
}

#[test]
fn every_split_tensor_is_tiled_exactly_by_its_ranks() {
    for (name, cfg) in configs() {
        let ps = params(&cfg);
        for world in 1..=8 {
            for experts in [ExpertSplit::Width, ExpertSplit::Whole, ExpertSplit::ExpertsAndHeads] {
                for p in &ps {
                    let parts: Vec<Part> = (0..world).map(|r| part(&cfg, world, r, experts, p)).collect();
                    let bytes: usize = parts.iter().map(|pt| part_bytes(p, pt)).sum();
                    let holders = parts.iter().filter(|pt| **pt != Part::None).count();
                    match &parts[0] {
                        Part::Whole if parts.iter().all(|pt| *pt == Part::Whole) => {
                            assert_eq!(bytes, world * p.nbytes(), "{name} {} replicated", p.name)
                        }
                        Part::Whole | Part::None => {
                            assert_eq!(holders, 1, "{name} world {world}: expert {} on one rank", p.name);
                            assert_eq!(bytes, p.nbytes());
                        }
                        Part::Rows(_) | Part::Cols(_) => {
                            let mut at = 0;
                            for pt in &parts {
                                let (Part::Rows(r) | Part::Cols(r)) = pt else {
                                    panic!("{name} {}: mixed parts", p.name)
                                };
                                assert_eq!(r.start, at, "{name} world {world} {}: contiguous", p.name);
                                at = r.end;
                            }
                            assert_eq!(bytes, p.nbytes(), "{name} world {world} {}: parts add up", p.name);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn attention_heads_split_and_small_tensors_stay_whole() {
    let cfg = Config::v41_flash();
    let ps = params(&cfg);
    let get = |n: &str| ps.iter().find(|p| p.name == n).unwrap();
    assert_eq!(part(&cfg, 3, 0, ExpertSplit::Width, get("layers.5.attn.wq_b.weight")), Part::Rows(0..16 * 512));
    assert_eq!(part(&cfg, 3, 2, ExpertSplit::Width, get("layers.5.attn.wo_b.weight")), Part::Rows(106 * 32..5120));
    let lockstep = |n: &str| part(&cfg, 3, 2, ExpertSplit::ExpertsAndHeads, get(n));
    assert_eq!(lockstep("layers.5.attn.wq_b.weight"), Part::Rows(40 * 512..64 * 512), "`tf serve --tp 3` splits heads");
    assert_eq!(lockstep("mtp.0.attn.wq_b.weight"), Part::Whole, "DSpark stages stay whole on every rank");
    assert_eq!(lockstep("layers.5.attn.wkv.weight"), Part::Whole);
    let vocab = cfg.vocab_size;
    assert_eq!(lockstep("head.weight"), Part::Rows(86_186..vocab), "129,280 ids: 43,093 / 43,093 / 43,094");
    assert_eq!(lockstep("embed.weight"), lockstep("head.weight"));
    let last = format!("mtp.{}.", cfg.n_mtp_layers - 1);
    assert_eq!(lockstep(&format!("{last}markov_head.head.weight")), lockstep("head.weight"));
    let table = lockstep(&format!("{last}markov_head.embed.weight"));
    assert_eq!(table, Part::Whole, "the Markov table is read a row at a time");
    let engram = ps.iter().find(|p| p.name.ends_with(".engram.embed.weight")).expect("Engram tables");
    assert!(
        matches!(part(&cfg, 3, 2, ExpertSplit::ExpertsAndHeads, engram), Part::Rows(r) if r.end > r.start && r.start > 0)
    );
    assert_eq!(part(&cfg, 4, 1, ExpertSplit::Width, get("layers.5.attn.wkv.weight")), Part::Whole);
    assert_eq!(part(&cfg, 4, 1, ExpertSplit::Width, get("layers.5.ffn.gate.weight")), Part::Whole);
    let w2 = part(&cfg, 8, 7, ExpertSplit::Width, get("layers.5.ffn.experts.17.w2.weight"));
    assert_eq!(w2, Part::Cols(2016..2304), "2304 = 72 blocks of 32: 9 per rank");
    assert_eq!(part(&cfg, 8, 7, ExpertSplit::Whole, get("layers.5.ffn.experts.383.w1.weight")), Part::Whole);
}

#[test]
fn the_budget_counts_replicated_bytes_once_per_rank() {
    for (name, cfg) in configs() {
        let ps = params(&cfg);
        let total: u64 =
            ps.iter().filter(|p| !p.name.ends_with("engram.embed.weight")).map(|p| p.nbytes() as u64).sum();
        let one = budget(&cfg, 1, ExpertSplit::Width, WeightFormat::Official, LIM);
        assert_eq!(one.weights, vec![total], "{name}");
        let replicated: u64 = ps
            .iter()
            .filter(|p| !p.name.ends_with("engram.embed.weight"))
            .filter(|p| part(&cfg, 4, 0, ExpertSplit::Width, p) == Part::Whole)
            .map(|p| p.nbytes() as u64)
            .sum();
        let four = budget(&cfg, 4, ExpertSplit::Width, WeightFormat::Official, LIM);
        assert_eq!(four.weights.iter().sum::<u64>(), total + 3 * replicated, "{name}");
        let exl3 = budget(&cfg, 4, ExpertSplit::Width, WeightFormat::Exl3 { bpw: 2.9 }, LIM);
        assert!(exl3.weights[0] < four.weights[0], "{name}: 2.9 bpw is smaller than FP8/FP4");
    }
}

#[test]
fn the_flash_model_fits_where_the_thread_ran_it_and_not_on_one_gpu() {
    let cfg = Config::v41_flash();
    let b1 = budget(&cfg, 1, ExpertSplit::Width, WeightFormat::Official, LIM);
    assert!(b1.weights[0] > 250_000_000_000 && b1.weights[0] < 350_000_000_000, "{:?}", b1.weights);
    assert_eq!(b1.max_context, vec![0], "≈ 300 GB of weights never fit one 141 GB card");
    let b8 = budget(&cfg, 8, ExpertSplit::Width, WeightFormat::Official, LIM);
    assert!(b8.max_context.iter().all(|&c| c >= 1 << 20), "TP8 on H200 holds a 1M-token lane: {:?}", b8.max_context);
    assert!(b8.engram_tables.iter().sum::<u64>() > 190_000_000_000, "two ~100 GB tables, split by rows");
    let smaller =
        budget(&cfg, 8, ExpertSplit::Width, WeightFormat::Official, Limits { gpu_bytes: 80_000_000_000, ..LIM });
    assert!(smaller.max_context[0] < b8.max_context[0]);
}

#[test]
fn the_lockstep_split_holds_each_backbone_expert_once_and_everything_else_everywhere() {
    for (name, cfg) in configs() {
        for world in [1, 2, 3, 8] {
            let mut total = vec![0usize; world];
            for p in params(&cfg) {
                let parts: Vec<Part> = (0..world).map(|r| part(&cfg, world, r, ExpertSplit::ExpertsOnly, &p)).collect();
                let routed = p.name.starts_with("layers.") && p.name.contains(".ffn.experts.");
                let held = parts.iter().filter(|x| **x == Part::Whole).count();
                assert_eq!(held, if routed { 1 } else { world }, "{name} TP{world}: {}", p.name);
                parts.iter().zip(&mut total).for_each(|(x, t)| *t += part_bytes(&p, x));
            }
            let b = budget(&cfg, world, ExpertSplit::ExpertsOnly, WeightFormat::Official, LIM);
            assert_eq!(b.heads, vec![cfg.n_heads; world], "{name}: attention is whole on every rank");
            let engram: usize =
                params(&cfg).iter().filter(|p| p.name.ends_with("engram.embed.weight")).map(|p| p.nbytes()).sum();
            let want: Vec<u64> = total.iter().map(|&t| (t - engram) as u64).collect();
            assert_eq!(b.weights, want, "{name} TP{world}");
        }
    }
}

/// Table rows gathered by owner: every rank gets each id's row in order; a rank whose read fails still sends, so nobody waits, and only it errs.
#[test]
fn table_rows_arrive_in_order_and_a_failed_read_blocks_no_rank() {
    use tf_core::bf16;
    use tf_dsv41::tp::{SharedComm, TableSplit};
    let ids: Vec<u64> = vec![9, 0, 5, 9, 2, 7];
    let row = |t: u64| vec![bf16::from_f32(t as f32), bf16::from_f32(-(t as f32))];
    let comms = tf_collective::InProcessComm::group_with_timeout(2, std::time::Duration::from_secs(10));
    let ranks: Vec<_> = comms
        .into_iter()
        .enumerate()
        .map(|(rank, c)| {
            let ids = ids.clone();
            std::thread::spawn(move || {
                let mut t = TableSplit::new(10, rank, 2);
                t.comm = Some(SharedComm::new(Box::new(c)));
                let good = t.rows(&ids, 2, |mine| Ok(mine.iter().flat_map(|&i| row(i)).collect()));
                let bad = t.rows(&ids, 2, |mine| {
                    if rank == 1 { Err("disk gone".into()) } else { Ok(mine.iter().flat_map(|&i| row(i)).collect()) }
                });
                (good, bad)
            })
        })
        .collect();
    let want: Vec<bf16> = ids.iter().flat_map(|&i| row(i)).collect();
    for (rank, r) in ranks.into_iter().enumerate() {
        let (good, bad) = r.join().unwrap();
        assert_eq!(good.unwrap(), want, "rank {rank}: ids 0..5 from rank 0, 5..10 from rank 1, in request order");
        match rank {
            0 => assert_eq!(bad.unwrap()[..2], [bf16::ZERO, bf16::ZERO], "rank 1's rows arrive as zeros"),
            _ => assert_eq!(bad.unwrap_err(), "disk gone"),
        }
    }
}
