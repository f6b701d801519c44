"""Builds token_map.u32: the Engram compressed token map of the DeepSeek-V4 tokenizer (spec/dsv41.md §10.1 step 1).

Usage: python make_token_map.py [tokenizer.json] [token_map.u32]   (needs PyPI `tokenizers`)
Writes one little-endian u32 per token id (added tokens included) and prints the class count and sha256.
"""

import hashlib
import struct
import sys
from pathlib import Path

from tokenizers import Regex, Tokenizer, normalizers

HERE = Path(__file__).resolve().parent
EXPECTED_CLASSES = 99092


def key_normalizer():
    # a private-use sentinel keeps a lone-space token from stripping to "" and merging with others
    sentinel = "\ue000"
    return normalizers.Sequence(
        [
            normalizers.NFKC(),
            normalizers.NFD(),
            normalizers.StripAccents(),
            normalizers.Lowercase(),
            normalizers.Replace(Regex(r"[ \t\r\n]+"), " "),
            normalizers.Replace(Regex(r"^ $"), sentinel),
            normalizers.Strip(),
            normalizers.Replace(sentinel, " "),
        ]
    )


def token_map(tok: Tokenizer) -> tuple[list[int], int]:
    norm = key_normalizer()
    classes: dict[str, int] = {}
    out = []
    # get_vocab_size(True) counts added tokens, like len() of a transformers tokenizer
    for tid in range(tok.get_vocab_size(with_added_tokens=True)):
        text = tok.decode([tid], skip_special_tokens=False)
        if "\ufffd" in text:
            # a partial UTF-8 byte sequence: key it by the raw (byte-level) token string
            key = tok.id_to_token(tid)
        else:
            key = norm.normalize_str(text) or text
        out.append(classes.setdefault(key, len(classes)))
    return out, len(classes)


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "tokenizer.json"
    dst = Path(sys.argv[2]) if len(sys.argv) > 2 else HERE / "token_map.u32"
    ids, n = token_map(Tokenizer.from_file(str(src)))
    if n != EXPECTED_CLASSES:
        sys.exit(f"{n} classes, expected {EXPECTED_CLASSES}")
    data = struct.pack(f"<{len(ids)}I", *ids)
    dst.write_bytes(data)
    print(f"{len(ids)} ids, {n} classes, pad = map[2] = {ids[2]}, sha256 {hashlib.sha256(data).hexdigest()}")


if __name__ == "__main__":
    main()
