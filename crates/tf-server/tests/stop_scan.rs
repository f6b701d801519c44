//! Stop strings: held back while undecided, cut exactly, released at the end when they never came.

use tf_server::http::text::StopScan;

#[test]
fn a_stop_split_across_pushes_is_cut_and_never_leaked() {
    let mut s = StopScan::new(vec!["END".into()]);
    assert_eq!(s.push("abc E"), "abc ");
    assert_eq!(s.push("N"), "", "EN could still be END");
    assert_eq!(s.push("Dxyz"), "");
    assert!(s.hit());
    assert_eq!(s.take_after(), "xyz");
    assert_eq!(s.push("more"), "", "nothing after the stop");
}

#[test]
fn held_text_is_released_when_it_turns_out_harmless() {
    let mut s = StopScan::new(vec!["END".into(), "stop".into()]);
    assert_eq!(s.push("sto"), "");
    assert_eq!(s.push("ne"), "stone");
    assert_eq!(s.push("E"), "");
    assert_eq!(s.finish(), "E");
    assert!(!s.hit());
}

#[test]
fn earliest_stop_wins_and_multibyte_text_is_kept_whole() {
    let mut s = StopScan::new(vec!["世界".into(), "b".into()]);
    assert_eq!(s.push("你好世"), "你好");
    assert_eq!(s.push("界 a b"), "");
    assert!(s.hit());
    let mut t = StopScan::new(vec!["xb".into(), "a".into()]);
    assert_eq!(t.push("1xba"), "1");
}
