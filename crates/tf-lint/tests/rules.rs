use tf_lint::{MAX_LINES, Problem, Rule, check_source};

fn rules_at(label: &str, text: &str) -> Vec<(usize, Rule)> {
    check_source(label, text).into_iter().map(|p| (p.line, p.rule)).collect()
}

fn rules(text: &str) -> Vec<(usize, Rule)> {
    rules_at("src/lib.rs", text)
}

fn lines(n: usize) -> String {
    "let x = 1;\n".repeat(n)
}

#[test]
fn file_of_599_lines_passes() {
    assert_eq!(rules(&lines(599)), []);
}

#[test]
fn file_of_600_lines_fails_at_line_600() {
    assert_eq!(rules(&lines(600)), [(600, Rule::FileTooLong)]);
}

#[test]
fn file_of_601_lines_fails_at_line_600() {
    assert_eq!(rules(&lines(601)), [(MAX_LINES, Rule::FileTooLong)]);
}

#[test]
fn missing_final_newline_still_counts_the_last_line() {
    let text = lines(599) + "let last = 2;";
    assert_eq!(rules(&text), [(600, Rule::FileTooLong)]);
}

#[test]
fn two_line_comment_fails_at_first_line() {
    assert_eq!(rules("fn a() {}\n// one\n// two\nfn b() {}\n"), [(2, Rule::MultiLineComment)]);
}

#[test]
fn two_line_doc_comment_fails() {
    assert_eq!(rules("/// Does a.\n/// More about a.\nfn a() {}\n"), [(1, Rule::MultiLineComment)]);
}

#[test]
fn two_line_inner_doc_comment_fails() {
    assert_eq!(rules("//! Crate docs.\n//! More docs.\n"), [(1, Rule::MultiLineComment)]);
}

#[test]
fn mixed_comment_kinds_form_one_run() {
    assert_eq!(rules("    // why\n    /// what\nfn a() {}\n"), [(1, Rule::MultiLineComment)]);
}

#[test]
fn one_line_comments_pass() {
    assert_eq!(rules("/// Does a.\nfn a() {}\n\n// Why b exists.\nfn b() {}\n"), []);
}

#[test]
fn blank_line_breaks_a_run() {
    assert_eq!(rules("// one\n\n// two\n"), []);
}

#[test]
fn long_run_is_reported_once_and_separate_runs_separately() {
    let text = "// a\n// b\n// c\nfn f() {}\n// d\n// e\n";
    assert_eq!(rules(text), [(1, Rule::MultiLineComment), (5, Rule::MultiLineComment)]);
}

#[test]
fn trailing_comments_after_code_pass() {
    assert_eq!(rules("let a = 1; // why a\nlet b = 2; // why b\n// why c\nlet c = 3;\n"), []);
}

#[test]
fn comment_lines_inside_a_multiline_string_pass() {
    let text = "let s = \"\n// not a comment\n// still not\n\";\nlet r = r#\"\n// raw\n// raw\n\"#;\n";
    assert_eq!(rules(text), []);
}

#[test]
fn block_comment_fails() {
    assert_eq!(rules("fn a() {}\nlet x = 1; /* note */\n"), [(2, Rule::BlockComment)]);
}

#[test]
fn block_comment_spanning_lines_is_reported_once_where_it_opens() {
    assert_eq!(rules("/*\n * a\n * b\n */\nfn a() {}\n"), [(1, Rule::BlockComment)]);
}

#[test]
fn doc_and_empty_block_comments_fail() {
    let text = "/** doc */\nfn a() {}\n/*! inner */\n/**/\n";
    let expected = [(1, Rule::BlockComment), (3, Rule::BlockComment), (4, Rule::BlockComment)];
    assert_eq!(rules(text), expected);
}

#[test]
fn block_comment_markers_in_a_string_pass() {
    assert_eq!(rules("let s = \"/* not a comment */\";\n"), []);
}

#[test]
fn escaped_quotes_keep_the_string_open() {
    assert_eq!(rules("let s = \"\\\" /* still a string */ \\\\\";\n"), []);
    assert_eq!(rules("let s = \"\\\\\"; /* real */\n"), [(1, Rule::BlockComment)]);
}

#[test]
fn raw_and_byte_strings_pass() {
    let text = "let a = r\"/* a */\";\n\
                let b = r#\"\"/* b */\"#;\n\
                let c = br##\"/*\"#*/\"##;\n\
                let d = b\"/* d */\";\n";
    assert_eq!(rules(text), []);
}

#[test]
fn raw_identifier_is_not_a_raw_string() {
    assert_eq!(rules("let r#type = 1; /* real */\n"), [(1, Rule::BlockComment)]);
}

#[test]
fn quote_char_literals_do_not_open_strings() {
    let text = "let q = '\"'; /* real */\n\
                let e = '\\''; /* real */\n\
                let b = b'\"'; /* real */\n";
    let expected = [(1, Rule::BlockComment), (2, Rule::BlockComment), (3, Rule::BlockComment)];
    assert_eq!(rules(text), expected);
}

#[test]
fn lifetimes_do_not_open_char_literals() {
    let text = "fn f<'a>(x: &'a str) -> &'a str { x } /* real */\n\
                fn g<'b>(_: &'b u8) { let _ = \"/* no */\"; }\n";
    assert_eq!(rules(text), [(1, Rule::BlockComment)]);
}

#[test]
fn loop_labels_and_unicode_chars_are_understood() {
    let text = "'outer: loop { break 'outer; } /* real */\n\
                let c = 'é'; let s = \"/* no */\";\n";
    assert_eq!(rules(text), [(1, Rule::BlockComment)]);
}

#[test]
fn rust_block_comments_nest() {
    let text = "/* a /* b */ \"c */\n// x\n// y\n";
    assert_eq!(rules(text), [(1, Rule::BlockComment), (2, Rule::MultiLineComment)]);
}

#[test]
fn line_comment_hides_block_comment_markers() {
    assert_eq!(rules("let x = 1; // see /* this */\n"), []);
}

#[test]
fn cuda_files_get_the_same_rules() {
    let text = "// one\n// two\n__global__ void k() { /* body */ }\n";
    let expected = [(1, Rule::MultiLineComment), (3, Rule::BlockComment)];
    assert_eq!(rules_at("kernels/k.cu", text), expected);
    assert_eq!(rules_at("kernels/k.cuh", text), expected);
}

#[test]
fn cuda_literals_are_understood() {
    let text = "char q = '\"'; /* a */\n\
                int n = 1'000; /* b */\n\
                const char* s = \"/* no */\";\n\
                auto r = R\"x(\" /* )x\";\n";
    assert_eq!(rules_at("k.cu", text), [(1, Rule::BlockComment), (2, Rule::BlockComment)]);
}

#[test]
fn cuda_block_comments_do_not_nest() {
    let text = "/* a /* b */ int x; /* c */\n";
    assert_eq!(rules_at("k.cuh", text), [(1, Rule::BlockComment), (1, Rule::BlockComment)]);
}

#[test]
fn problems_are_sorted_and_formatted_as_path_line_rule() {
    let text = lines(598) + "// one\n// two\n/* x */\n";
    let shown: Vec<String> = check_source("crates/a/src/lib.rs", &text).iter().map(Problem::to_string).collect();
    let expected = [
        "crates/a/src/lib.rs:599: multi-line-comment",
        "crates/a/src/lib.rs:600: file-too-long",
        "crates/a/src/lib.rs:601: block-comment",
    ];
    assert_eq!(shown, expected);
}

#[test]
fn rule_names_are_stable_and_round_trip() {
    let names: Vec<&str> = Rule::ALL.iter().map(|r| r.name()).collect();
    assert_eq!(names, ["file-too-long", "block-comment", "multi-line-comment"]);
    for rule in Rule::ALL {
        assert_eq!(rule.to_string().parse::<Rule>(), Ok(rule));
    }
    assert!("no-such-rule".parse::<Rule>().is_err());
}
