use std::fs;

use tf_lint::{BASELINE_FILE, Counts, Error, Report, Rule, Tally, check, check_source, update_baseline};

const ZEROS: &str = "file-too-long 0\nblock-comment 0\nmulti-line-comment 0\n";

fn counts(file_too_long: usize, block_comment: usize, multi_line_comment: usize) -> Counts {
    let mut counts = Counts::default();
    counts.set(Rule::FileTooLong, file_too_long);
    counts.set(Rule::BlockComment, block_comment);
    counts.set(Rule::MultiLineComment, multi_line_comment);
    counts
}

fn two_block_comments() -> Vec<tf_lint::Problem> {
    check_source("src/a.rs", "/* one */\n/* two */\n")
}

#[test]
fn parse_and_render_round_trip_with_every_rule_listed() {
    let parsed = Counts::parse("block-comment 3\n\nmulti-line-comment 1\n").unwrap();
    assert_eq!(parsed, counts(0, 3, 1));
    assert_eq!(parsed.render(), "file-too-long 0\nblock-comment 3\nmulti-line-comment 1\n");
    assert_eq!(Counts::parse(&parsed.render()).unwrap(), parsed);
}

#[test]
fn malformed_baselines_are_rejected_with_a_line_number() {
    for (text, line) in [
        ("no-such-rule 1\n", 1),
        ("file-too-long\n", 1),
        ("file-too-long 0\nblock-comment -1\n", 2),
        ("block-comment 1 2\n", 1),
        ("block-comment 1\nblock-comment 2\n", 2),
    ] {
        assert_eq!(Counts::parse(text).unwrap_err().line, line, "{text:?}");
    }
}

#[test]
fn missing_baseline_means_all_zero() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(Counts::load(&dir.path().join(BASELINE_FILE)).unwrap(), Counts::default());
}

#[test]
fn count_above_baseline_fails() {
    let report = Report::new(two_block_comments(), &counts(0, 1, 0));
    assert!(!report.passed());
    let above: Vec<String> = report.tallies.iter().filter(|t| t.is_above()).map(Tally::to_string).collect();
    assert_eq!(above, ["block-comment: 2 (baseline 1)"]);
}

#[test]
fn count_at_baseline_passes_and_below_says_lowerable() {
    let at = Report::new(two_block_comments(), &counts(0, 2, 0));
    assert!(at.passed() && !at.can_lower_baseline());
    let below = Report::new(two_block_comments(), &counts(1, 5, 0));
    assert!(below.passed() && below.can_lower_baseline());
}

#[test]
fn check_reads_the_baseline_and_scans_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::create_dir(root.join("src")).unwrap();
    fs::write(root.join("src/a.rs"), "/* one */\n").unwrap();
    let baseline = root.join(BASELINE_FILE);
    assert!(!check(root, &baseline).unwrap().passed());
    fs::write(&baseline, "file-too-long 0\nblock-comment 1\nmulti-line-comment 0\n").unwrap();
    assert!(check(root, &baseline).unwrap().passed());
    fs::write(&baseline, "block-comment lots\n").unwrap();
    assert!(matches!(check(root, &baseline), Err(Error::Baseline { .. })));
}

#[test]
fn update_refuses_to_raise_and_leaves_the_file_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(BASELINE_FILE);
    let before = "file-too-long 0\nblock-comment 1\nmulti-line-comment 0\n";
    fs::write(&path, before).unwrap();
    let Err(Error::WouldRaise(raised)) = update_baseline(&path, &two_block_comments()) else {
        panic!("update must refuse to raise block-comment");
    };
    assert_eq!(raised, [Tally { rule: Rule::BlockComment, current: 2, baseline: 1 }]);
    assert_eq!(fs::read_to_string(&path).unwrap(), before);
}

#[test]
fn update_refuses_when_the_missing_baseline_is_all_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(BASELINE_FILE);
    assert!(matches!(update_baseline(&path, &two_block_comments()), Err(Error::WouldRaise(_))));
    assert!(!path.exists());
}

#[test]
fn update_lowers_the_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(BASELINE_FILE);
    fs::write(&path, "file-too-long 3\nblock-comment 7\nmulti-line-comment 1\n").unwrap();
    let tallies = update_baseline(&path, &two_block_comments()).unwrap();
    assert_eq!(tallies[1], Tally { rule: Rule::BlockComment, current: 2, baseline: 7 });
    assert_eq!(fs::read_to_string(&path).unwrap(), "file-too-long 0\nblock-comment 2\nmulti-line-comment 0\n");
}

#[test]
fn update_creates_a_missing_baseline_with_every_rule() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(BASELINE_FILE);
    update_baseline(&path, &[]).unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), ZEROS);
}
