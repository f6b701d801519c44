//! The DeepSeek-V4 tokenizer through `tf_server::tokenizer`: ids as Hugging Face gives them, round trips, streaming.

use std::path::Path;
use tf_server::tokenizer::{IncrementalDecoder, Tokenizer};

fn deepseek() -> Tokenizer {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/deepseek-v4/tokenizer.json");
    Tokenizer::from_file(path).expect("the committed DeepSeek-V4 tokenizer loads")
}

const MIXED: &str = "Hello 世界 🌍👋🏽 — naïve café, 3.14!";

/// Expected ids from Python `tokenizers` 0.23.3 (Oniguruma regexes), `encode(s, add_special_tokens=False)`.
const KNOWN: &[(&str, &[u32])] = &[
    ("Hello, world!", &[19923, 14, 2058, 3]),
    ("The quick brown fox jumps over the lazy dog.", &[671, 4787, 13769, 46012, 54994, 1060, 270, 41638, 6397, 16]),
    ("你好，世界！", &[30594, 303, 3427, 1175]),
    ("Emoji: 👋🌍 café", &[6962, 82644, 28, 52780, 236, 21716, 238, 57664]),
    ("x = 12345 + 67;\n\tprint(x)", &[90, 438, 223, 6895, 1883, 940, 223, 3186, 510, 40817, 4042, 11]),
    (MIXED, &[19923, 223, 3427, 73369, 238, 25730, 236, 40965, 124, 2136, 112752, 57664, 14, 223, 21, 16, 929, 3]),
];

#[test]
fn vocab_and_special_tokens() {
    let tok = deepseek();
    assert_eq!(tok.vocab_size(), 129_280);
    assert_eq!(tok.token_to_id("<｜begin▁of▁sentence｜>"), Some(0));
    assert_eq!(tok.token_to_id("<｜end▁of▁sentence｜>"), Some(1));
    assert_eq!(tok.id_to_token(1).as_deref(), Some("<｜end▁of▁sentence｜>"));
}

#[test]
fn ids_match_hugging_face() {
    let tok = deepseek();
    for (text, ids) in KNOWN {
        assert_eq!(tok.encode(text, false).unwrap(), *ids, "{text:?}");
        assert_eq!(tok.encode(text, true).unwrap(), *ids, "DeepSeek's template adds no BOS: {text:?}");
    }
}

#[test]
fn round_trip_english_chinese_emoji() {
    let tok = deepseek();
    for (text, _) in KNOWN {
        assert_eq!(tok.decode(&tok.encode(text, false).unwrap(), false).unwrap(), *text);
    }
}

#[test]
fn special_tokens_are_parsed_and_skippable() {
    let tok = deepseek();
    let ids = tok.encode("<｜begin▁of▁sentence｜>Hi<｜end▁of▁sentence｜>", false).unwrap();
    assert_eq!(ids, [0, 23166, 1]);
    assert_eq!(tok.decode(&ids, true).unwrap(), "Hi");
    assert_eq!(tok.decode(&ids, false).unwrap(), "<｜begin▁of▁sentence｜>Hi<｜end▁of▁sentence｜>");
}

/// Pushes `ids` one at a time after `prompt`; returns every piece, the final flush last.
fn stream(tok: &Tokenizer, prompt: &[u32], ids: &[u32]) -> Vec<String> {
    let mut d = IncrementalDecoder::new(tok, prompt, true);
    let mut pieces: Vec<String> = ids.iter().map(|&id| d.push(id).unwrap()).collect();
    pieces.push(d.finish().unwrap());
    assert_eq!(d.ids().len(), prompt.len() + ids.len());
    pieces
}

#[test]
fn streaming_equals_full_decode_split_at_every_token() {
    let tok = deepseek();
    let text = format!("{MIXED} 日本語のテキスト、한국어 👨‍👩‍👧‍👦 ½ ①");
    let ids = tok.encode(&text, false).unwrap();
    let pieces = stream(&tok, &[], &ids);
    assert_eq!(pieces.concat(), text);
    assert!(pieces.iter().all(|p| !p.contains(char::REPLACEMENT_CHARACTER)), "{pieces:?}");
    let held = pieces.iter().filter(|p| p.is_empty()).count();
    assert!(held >= 3, "emoji split over tokens should hold text back: {pieces:?}");
}

#[test]
fn streaming_after_a_prompt_emits_only_the_continuation() {
    let tok = deepseek();
    let prompt = [&[0][..], &tok.encode("Translate: ", false).unwrap()].concat();
    let cont = tok.encode(MIXED, false).unwrap();
    let pieces = stream(&tok, &prompt, &cont);
    let whole = tok.decode(&[&prompt[..], &cont].concat(), true).unwrap();
    assert_eq!(whole, format!("Translate: {MIXED}"));
    assert_eq!(pieces.concat(), MIXED);
}

#[test]
fn an_unfinished_character_is_flushed_as_a_full_decode_would() {
    let tok = deepseek();
    let ids = tok.encode("a 🌍", false).unwrap();
    let cut = &ids[..ids.len() - 1];
    let pieces = stream(&tok, &[], cut);
    assert_eq!(pieces.concat(), tok.decode(cut, true).unwrap());
    assert!(pieces.last().unwrap().ends_with(char::REPLACEMENT_CHARACTER), "{pieces:?}");
}

#[test]
fn word_level_tokenizer_streams_with_its_spaces() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    let json = tf_dsv41::tiny::tokenizer::tokenizer_json(512, 500, 511);
    std::fs::write(&path, serde_json::to_vec(&json).unwrap()).unwrap();
    let tok = Tokenizer::from_file(&path).unwrap();
    let ids = tok.encode("w10 W11 w12 <｜User｜> w13", true).unwrap();
    assert_eq!(ids, [20, 23, 24, 480, 26]);
    assert_eq!(stream(&tok, &[], &ids).concat(), "w10 W11 w12 <｜User｜> w13");
    assert_eq!(stream(&tok, &[0, 20], &ids[1..]).concat(), " W11 w12 <｜User｜> w13");
}

#[test]
fn a_missing_or_bad_file_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.json");
    let e = Tokenizer::from_file(&missing).err().unwrap().to_string();
    assert!(e.contains("nope.json"), "{e}");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"not\": \"a tokenizer\"}").unwrap();
    let e = Tokenizer::from_file(&bad).err().unwrap().to_string();
    assert!(e.contains("bad.json") && e.contains("not a tokenizer.json"), "{e}");
}
