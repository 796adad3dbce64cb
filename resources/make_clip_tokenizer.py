"""Generate the CLIP BPE tokenizer files (vocab.json, merges.txt) from OpenAI's ``bpe_simple_vocab_16e6.txt.gz``.

The ``.gz`` ships inside the ``open_clip_torch`` wheel (``open_clip/bpe_simple_vocab_16e6.txt.gz``)::

    pip download --no-deps open_clip_torch -d /tmp/oclip
    python resources/make_clip_tokenizer.py /tmp/oclip/open_clip_torch-*.whl      # or the extracted .gz

The result is token for token the tokenizer of ``openai/clip-vit-large-patch14`` (SD 1.5's ``tokenizer/``,
SDXL's and SD 3.5's ``tokenizer/`` and ``tokenizer_2/``, Flux.1's ``tokenizer/``): 49408 entries = 256 byte characters, the same 256 with
``</w>``, the merges from lines 1..48894 of the BPE file, then ``<|startoftext|>`` and ``<|endoftext|>``.
SDXL's and SD 3.5's ``tokenizer_2`` is the same vocabulary with pad token ``!`` (OpenCLIP pads with id 0).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import zipfile
from pathlib import Path

from guitrainer.core.model.clip_bpe import bytes_to_unicode

BPE_MEMBER = "open_clip/bpe_simple_vocab_16e6.txt.gz"
N_MERGES = 49152 - 256 - 2  # = 48894, as in CLIP's simple_tokenizer and transformers' CLIPTokenizer
ROOT = Path(__file__).resolve().parent / "models"
TARGETS = {  # folder -> pad token
    "sd15/tokenizer": "<|endoftext|>",
    "sdxl/tokenizer": "<|endoftext|>",
    "sdxl/tokenizer_2": "!",
    "sd35/tokenizer": "<|endoftext|>",
    "sd35/tokenizer_2": "!",
    "flux1/tokenizer": "<|endoftext|>",
}


def read_bpe(source: Path) -> list[str]:
    """Lines of the BPE file, from the ``.txt.gz`` itself or from the open_clip_torch wheel."""
    if source.suffix == ".whl":
        with zipfile.ZipFile(source) as zf:
            raw = gzip.decompress(zf.read(BPE_MEMBER))
    else:
        raw = gzip.decompress(source.read_bytes())
    return raw.decode("utf-8").split("\n")


def build(lines: list[str]) -> tuple[dict[str, int], list[str]]:
    """(vocab token -> id, merge lines) exactly as CLIP builds them."""
    merges = lines[1 : N_MERGES + 1]
    if len(merges) != N_MERGES:
        raise SystemExit(f"expected {N_MERGES} merges, the file has {len(merges)}")
    pairs = [tuple(m.split()) for m in merges]
    alphabet = list(bytes_to_unicode().values())
    tokens = alphabet + [c + "</w>" for c in alphabet] + ["".join(p) for p in pairs]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != 49408:
        raise SystemExit(f"expected 49408 distinct tokens, got {len(vocab)}")
    return vocab, merges


def write(folder: Path, vocab: dict[str, int], merges: list[str], pad: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    special = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "pad_token": pad}
    config = {
        "tokenizer_class": "CLIPTokenizer",
        "model_max_length": 77,
        "do_lower_case": True,
        "add_prefix_space": False,
        "errors": "replace",
        **special,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path, help="bpe_simple_vocab_16e6.txt.gz or the open_clip_torch wheel")
    ap.add_argument("--out", type=Path, default=ROOT, help="resources/models (default)")
    args = ap.parse_args(argv)
    vocab, merges = build(read_bpe(args.source))
    for sub, pad in TARGETS.items():
        write(args.out / sub, vocab, merges, pad)
        print(f"wrote {args.out / sub}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
