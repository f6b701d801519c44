//! Text ↔ token ids over a Hugging Face `tokenizer.json`, and a streaming detokenizer.

use std::path::Path;
use tf_core::{Error, Result};

/// A loaded `tokenizer.json` (BPE, word-level, ... as the file says).
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    longest: Option<usize>,
}

fn invalid(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Invalid(format!("tokenizer: {what}: {e}"))
}

impl Tokenizer {
    /// Loads a `tokenizer.json`; a missing or malformed file is named in the error.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Tokenizer> {
        let path = path.as_ref();
        let text = std::fs::read(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
        let inner = tokenizers::Tokenizer::from_bytes(&text)
            .map_err(|e| Error::BadFile { path: path.to_path_buf(), msg: format!("not a tokenizer.json: {e}") })?;
        let longest = longest_token(&inner);
        Ok(Tokenizer { inner, longest })
    }

    /// The fewest tokens `bytes` bytes of text can encode to, where the model bounds a token's bytes (byte-level BPE).
    pub fn min_tokens(&self, bytes: usize) -> Option<usize> {
        self.longest.map(|l| bytes.div_ceil(l))
    }

    /// Token ids of `text`; `add_special_tokens` applies the file's post-processor template (DeepSeek's adds none).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, add_special_tokens).map_err(|e| invalid("encode", e))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Text of `ids`; ids outside the vocabulary decode to nothing, as in Hugging Face.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner.decode(ids, skip_special).map_err(|e| invalid("decode", e))
    }

    /// Every id the tokenizer knows, added tokens included (129,280 for DeepSeek-V4).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }
}

/// The most bytes of input one token can cover, when that is bounded: a BPE with no normalizer and no fused unknowns.
fn longest_token(t: &tokenizers::Tokenizer) -> Option<usize> {
    let tokenizers::ModelWrapper::BPE(bpe) = t.get_model() else { return None };
    let normalizes = t.get_normalizer().is_some_and(|n| {
        let v = serde_json::to_value(n).unwrap_or_default();
        v.get("normalizers").and_then(serde_json::Value::as_array).is_none_or(|list| !list.is_empty())
    });
    if normalizes || (bpe.unk_token.is_some() && bpe.fuse_unk) {
        return None;
    }
    t.get_vocab(true).keys().map(String::len).max().map(|l| l.max(4))
}

/// How many ids before the first new one are decoded with it, so word-joining decoders see their context.
const CONTEXT_IDS: usize = 5;

/// Streams text as ids arrive: decodes a window of ids and emits only the stable, complete-UTF-8 suffix.
pub struct IncrementalDecoder<'t> {
    tok: &'t Tokenizer,
    ids: Vec<u32>,
    skip_special: bool,
    /// Start of the window whose text was already emitted (or belongs to the prompt).
    prefix_offset: usize,
    /// End of that window: ids from here on have not been emitted yet.
    read_offset: usize,
}

impl<'t> IncrementalDecoder<'t> {
    /// A decoder that continues after `prompt`; the prompt's own text is never emitted.
    pub fn new(tok: &'t Tokenizer, prompt: &[u32], skip_special: bool) -> IncrementalDecoder<'t> {
        IncrementalDecoder {
            tok,
            ids: prompt.to_vec(),
            skip_special,
            prefix_offset: prompt.len().saturating_sub(CONTEXT_IDS),
            read_offset: prompt.len(),
        }
    }

    /// Adds one id; returns the text it completes (empty while a character is split), sliced by length as vLLM does.
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        let (prefix, full) = self.window()?;
        if full.len() <= prefix.len() || full.ends_with(char::REPLACEMENT_CHARACTER) {
            return Ok(String::new());
        }
        let Some(delta) = full.get(prefix.len()..).map(str::to_string) else { return Ok(String::new()) };
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        Ok(delta)
    }

    /// Text still held back at the end of the stream (an unfinished character decodes as U+FFFD, as in a full decode).
    pub fn finish(&mut self) -> Result<String> {
        let (prefix, full) = self.window()?;
        let delta = full.get(prefix.len()..).map(str::to_string).unwrap_or_default();
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        Ok(delta)
    }

    /// Every id seen, prompt first.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    fn window(&self) -> Result<(String, String)> {
        let prefix = self.tok.decode(&self.ids[self.prefix_offset..self.read_offset], self.skip_special)?;
        let full = self.tok.decode(&self.ids[self.prefix_offset..], self.skip_special)?;
        Ok((prefix, full))
    }
}
