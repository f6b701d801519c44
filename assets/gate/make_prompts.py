#!/usr/bin/env python3
"""Writes assets/gate/prompts.json: the gate's fixed prompts, cut from this repository's own files at one commit."""

import json
import subprocess
import sys
from pathlib import Path

COMMIT = "4c5b102"
# (name, kind, path, first byte, byte count): our own sources and docs, so no licence beyond the project's.
CUTS = [
    ("rust-quant", "code", "crates/tf-core/src/formats/quant.rs", 0, 5000),
    ("rust-moe", "code", "crates/tf-dsv41/src/moe.rs", 0, 6000),
    ("rust-hasher", "code", "crates/tf-engram/src/hasher.rs", 0, 6000),
    ("rust-pyjson-long", "code", "crates/tf-server/src/chat/pyjson.rs", 0, 9765),
    ("python-openai-client", "code", "scripts/openai_client.py", 0, 6000),
    ("python-golden-long", "code", "tools/golden/run_reference.py", 0, 23509),
    ("prose-readme", "prose", "README.md", 0, 6000),
    ("prose-dsv41-cpu", "prose", "docs/dsv41-cpu.md", 0, 6000),
    ("prose-engram-disk", "prose", "docs/engram-disk.md", 0, 6000),
]
CHATS = [
    ("chat-rust-help", [
        {"role": "system", "content": "You are a careful Rust reviewer."},
        {"role": "user", "content": "Why does this fail to compile?\n\nfn first(v: &Vec<String>) -> &str { v[0] }"},
        {"role": "assistant", "content": "`v[0]` is a `String`, and the function returns `&str`. Indexing a Vec "
         "gives the element by value in this position, so the compiler sees a `String` where a reference is "
         "expected. Borrow it instead: `&v[0]`, which derefs to `&str`. Also prefer `&[String]` over "
         "`&Vec<String>` in parameters, and handle the empty case with `v.first().map(String::as_str)`."},
        {"role": "user", "content": "And if I want to return an owned value?"},
        {"role": "assistant", "content": "Return `String` and clone: `v[0].clone()`, or take the vector by value "
         "and use `v.into_iter().next()` to move the first element out without a copy."},
    ]),
    ("chat-python-help", [
        {"role": "user", "content": "How do I read a file line by line in Python without loading it whole?"},
        {"role": "assistant", "content": "Iterate over the file object: `with open(path, encoding=\"utf-8\") as f:` "
         "then `for line in f:`. Python reads it in buffered blocks, so memory stays small even for huge "
         "files. Use `line.rstrip(\"\\n\")` to drop the newline, and `enumerate(f, 1)` if you need line numbers."},
    ]),
    ("chat-server-howto", [
        {"role": "user", "content": "What does the server answer when a request body is too large?"},
        {"role": "assistant", "content": "A 413 with an OpenAI-shaped JSON error: the message says the body is over "
         "16 MiB. When the length is declared, the server refuses before reading the body; when the body is "
         "chunked, it stops reading as soon as the limit is passed."},
    ]),
]


def cut(path, start, count):
    text = subprocess.run(["git", "show", f"{COMMIT}:{path}"], check=True, capture_output=True).stdout
    return text[start:start + count].decode("utf-8", errors="ignore")


def main():
    prompts = [{"name": n, "kind": k, "source": f"{p}@{COMMIT}[{s}:{s + c}]", "text": cut(p, s, c)}
               for n, k, p, s, c in CUTS]
    prompts += [{"name": n, "kind": "chat", "messages": m, "thinking": False} for n, m in CHATS]
    out = {"version": 1, "made_by": "assets/gate/make_prompts.py", "commit": COMMIT, "prompts": prompts}
    dest = Path(__file__).with_name("prompts.json")
    dest.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{dest}: {len(prompts)} prompts", file=sys.stderr)


if __name__ == "__main__":
    main()
