//! The tiny model's tokenizer: a word-level HF `tokenizer.json` over `w{k}` / `W{k}` words plus DeepSeek's chat tokens.

use serde_json::{Map, Value, json};

/// Reserved ids shared with the DeepSeek-V4 tokenizer.
pub const BOS: &str = "<｜begin▁of▁sentence｜>";
pub const EOS: &str = "<｜end▁of▁sentence｜>";
pub const PAD: &str = "<｜▁pad▁｜>";
/// Word-level needs an unknown token for text outside its words.
pub const UNK: &str = "<unk>";

/// First id of the chat-format tokens, so a server can encode DeepSeek chats with the tiny model.
const CHAT_BASE: u32 = 480;

/// DeepSeek-V4's chat and tool tokens (their real ids are 128803 and up).
const CHAT: &[&str] = &[
    "<｜User｜>",
    "<｜Assistant｜>",
    "<think>",
    "</think>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁outputs▁begin｜>",
    "<｜tool▁outputs▁end｜>",
    "<｜tool▁output▁begin｜>",
    "<｜tool▁output▁end｜>",
    "｜DSML｜",
    "<dsml:",
    "</dsml:",
    "<｜begin▁sys｜>",
    "<｜end▁sys｜>",
];

/// Token text and whether it is special, for every id below `vocab`.
pub fn tokens(vocab: u32, image_id: u32, noise_id: u32) -> Vec<(String, bool)> {
    (0..vocab)
        .map(|id| match id {
            0 => (BOS.to_string(), true),
            1 => (EOS.to_string(), true),
            2 => (PAD.to_string(), true),
            3 => (UNK.to_string(), true),
            _ if id == image_id => ("<｜image2｜>".to_string(), false),
            _ if id == noise_id => ("<｜place▁holder▁no▁799｜>".to_string(), true),
            _ if (CHAT_BASE..CHAT_BASE + CHAT.len() as u32).contains(&id) => {
                (CHAT[(id - CHAT_BASE) as usize].to_string(), false)
            }
            _ if id % 2 == 0 => (format!("w{}", id / 2), false),
            _ => (format!("W{}", id / 2), false),
        })
        .collect()
}

/// The `tokenizer.json` text: WordLevel model, whitespace split, every non-word as an added token.
pub fn tokenizer_json(vocab: u32, image_id: u32, noise_id: u32) -> Value {
    let toks = tokens(vocab, image_id, noise_id);
    let mut map = Map::new();
    let mut added = Vec::new();
    for (id, (text, special)) in toks.iter().enumerate() {
        map.insert(text.clone(), json!(id));
        let word = !special && (text.starts_with('w') || text.starts_with('W'));
        if !word {
            added.push(json!({
                "id": id, "content": text, "single_word": false, "lstrip": false, "rstrip": false,
                "normalized": !special, "special": special
            }));
        }
    }
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": map, "unk_token": UNK}
    })
}

/// The compressed token map of the tiny tokenizer: `w{k}` and `W{k}` normalize alike, so id t ↦ t / 2.
pub fn tiny_token_map(vocab: u32) -> Vec<u32> {
    (0..vocab).map(|t| t / 2).collect()
}
