//! Prints the tiny model's top tokens for a prompt, for eyeballing.
fn main() {
    let d = tempfile::tempdir().unwrap();
    tf_dsv41::tiny::write_checkpoint(tf_dsv41::tiny::TinyKind::Tiny, 0, d.path()).unwrap();
    let m = tf_dsv41::Model::load(d.path(), tf_dsv41::Options { replay: false, ..Default::default() }).unwrap();
    let mut st = m.new_state();
    let p: Vec<u32> = (0..40u32).map(|i| (i * 131 + 7) % 509 + 3).collect();
    let t = std::time::Instant::now();
    let l = m.prefill(&mut st, &p, true).unwrap().unwrap();
    let mut idx: Vec<usize> = (0..l.len()).collect();
    idx.sort_by(|&a, &b| l[b].total_cmp(&l[a]));
    println!("prefill {:?}; top {:?}", t.elapsed(), idx[..5].iter().map(|&i| (i, l[i])).collect::<Vec<_>>());
    let mean = l.iter().sum::<f32>() / l.len() as f32;
    let sd = (l.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / l.len() as f32).sqrt();
    println!("mean {mean} sd {sd}");
    let mut toks = vec![];
    let mut last = idx[0] as u32;
    let t = std::time::Instant::now();
    for _ in 0..20 {
        toks.push(last);
        let l = m.decode(&mut st, &[last]).unwrap().remove(0);
        last = l.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0 as u32;
    }
    println!("decode 20 in {:?}: {:?}", t.elapsed(), toks);
}
