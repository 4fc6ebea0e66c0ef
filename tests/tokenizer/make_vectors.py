#!/usr/bin/env python3
"""Makes the tokenizer test vectors: reference token ids for the strings in strings.json.

    python3 tests/tokenizer/make_vectors.py [--gemma models/gemma-3-270m-q4_k_m.gguf]

The reference is Hugging Face `transformers`, which builds a tokenizer from a GGUF file's
metadata (AutoTokenizer.from_pretrained(dir, gguf_file=name)), checked against a second,
independent reference where one exists. Outputs (all committed):

  bpe-llama3.gguf, bpe-qwen2.gguf   a small byte-level BPE vocabulary (tokenizer.ggml.model
                                    "gpt2"), trained here with the `tokenizers` library on
                                    the Llama 3 pre-tokenizer regex, once with
                                    tokenizer.ggml.pre = "llama-bpe", once with "qwen2".
  spm-small.gguf                    a small SentencePiece BPE vocabulary (model "llama",
                                    scores, byte fallback, space prefix on) trained here
                                    with the `sentencepiece` library.
  *.vectors.json                    for each of those and for Gemma 3 (the real 262,144-token
                                    vocabulary of models/gemma-3-270m-q4_k_m.gguf; the model
                                    is not committed, scripts/fetch-gemma3-270m.sh fetches it)

Each case holds `ids` (BOS/EOS as the vocabulary says, special-token text parsed: like
`stride tokenize --parse-special`) and `ids_plain` (nothing added, special-token text
tokenized as text: `stride tokenize --no-bos`).

Second references: the trained `tokenizers` object itself (bpe-llama3: transformers loaded
from the GGUF must reproduce it), and `sentencepiece` (spm-small: the trained model;
Gemma: a SentencePiece model proto rebuilt from the GGUF's pieces, scores and types, with
Gemma's whitespace pieces spelled with U+2581 as in Google's original model). Where two
references disagree the script explains why or fails:

  * SentencePiece never parses special-token text, so `ids` of strings that contain
    control-token text are compared with transformers only.
  * transformers' GGUF loader drops Gemma's whitespace-run pieces ("  ".."<31 spaces>",
    USER_DEFINED) from its added tokens (it renames them to "▁▁".. and then looks the old
    spelling up), so a run of more than 31 spaces is split by its BPE merges (16+16 for
    32) rather than matched longest-first (31+1) as SentencePiece and llama.cpp do. For
    those strings (only those) the expected ids are SentencePiece's; both are recorded.

The training corpus is /usr/share/common-licenses (Debian base-files) plus the test strings
themselves, so that the merges cover some non-Latin text; a different Debian release may
train a different vocabulary, which is why the vocabularies are committed with the ids.
"""
import argparse
import glob
import hashlib
import json
import os
import re
import sys
import tempfile

import gguf
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# GGUF token types (llama.cpp)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

BPE_SPECIALS = [  # (text, type)
    ("<|begin_of_text|>", CONTROL), ("<|end_of_text|>", CONTROL), ("<|eot_id|>", CONTROL),
    ("<|start_header_id|>", CONTROL), ("<|end_header_id|>", CONTROL), ("<tool>", USER_DEFINED),
]


def load_strings():
    with open(os.path.join(HERE, "strings.json")) as f:
        return json.load(f)


def corpus(strings):
    texts = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                texts.append(f.read())
    return texts + strings


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def hf_from_gguf(path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))


def hf_ids(tok, s):
    return (tok(s)["input_ids"],
            tok(s, add_special_tokens=False, split_special_tokens=True)["input_ids"])


# ---- byte-level BPE ------------------------------------------------------------------------

def train_bpe(strings, vocab_size=3000):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers, decoders
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[t for t, _ in BPE_SPECIALS])
    tok.train_from_iterator(corpus(strings), trainer=trainer)
    return tok


def write_bpe_gguf(tok, path, pre):
    model = json.loads(tok.to_str())["model"]
    vocab = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    assert [i for _, i in vocab] == list(range(len(tokens)))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    special = dict(BPE_SPECIALS)
    types = [special.get(t, NORMAL) for t in tokens]
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_name("stride tokenizer test vocabulary (byte-level BPE, %s)" % pre)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|begin_of_text|>"))
    w.add_eos_token_id(tokens.index("<|end_of_text|>"))
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---- small SentencePiece vocabulary ----------------------------------------------------------

SPM_CONTROL = ["<start_of_turn>", "<end_of_turn>"]
SPM_USER = ["<tool>"]


def train_spm(strings, workdir, vocab_size=1200):
    import sentencepiece as spm
    text = os.path.join(workdir, "corpus.txt")
    with open(text, "w") as f:
        for t in corpus(strings):
            for line in t.split("\n"):
                if line.strip():
                    f.write(line + "\n")
    prefix = os.path.join(workdir, "spm")
    spm.SentencePieceTrainer.train(
        input=text, model_prefix=prefix, model_type="bpe", vocab_size=vocab_size, byte_fallback=True,
        character_coverage=0.995, normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, split_digits=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        control_symbols=SPM_CONTROL, user_defined_symbols=SPM_USER, num_threads=1, minloglevel=2)
    return prefix + ".model"


def write_spm_gguf(model_path, path):
    from sentencepiece import sentencepiece_model_pb2 as pb
    m = pb.ModelProto()
    with open(model_path, "rb") as f:
        m.ParseFromString(f.read())
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_name("stride tokenizer test vocabulary (SentencePiece BPE)")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list([p.piece for p in m.pieces])
    w.add_token_scores([p.score for p in m.pieces])
    w.add_token_types([int(p.type) for p in m.pieces])
    w.add_bos_token_id(m.trainer_spec.bos_id)
    w.add_eos_token_id(m.trainer_spec.eos_id)
    w.add_unk_token_id(m.trainer_spec.unk_id)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gemma_sp_proto(gguf_path):
    """A SentencePiece model equivalent to Gemma 3's, rebuilt from the GGUF."""
    from sentencepiece import sentencepiece_model_pb2 as pb
    import sentencepiece as spm
    r = gguf.GGUFReader(gguf_path)

    def arr(key):
        f = r.fields[key]
        return [f.parts[i] for i in f.data]
    tokens = [bytes(p).decode("utf-8") for p in arr("tokenizer.ggml.tokens")]
    scores = [float(p[0]) for p in arr("tokenizer.ggml.scores")]
    types = [int(p[0]) for p in arr("tokenizer.ggml.token_type")]
    m = pb.ModelProto()
    for t, s, y in zip(tokens, scores, types):
        p = m.pieces.add()
        # the GGUF converter wrote Gemma's whitespace pieces with real spaces
        p.piece = "\u2581" * len(t) if (" " in t and not t.strip()) else t
        p.score = s
        p.type = y
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.unk_id, m.trainer_spec.bos_id, m.trainer_spec.eos_id, m.trainer_spec.pad_id = 3, 2, 1, 0
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = False
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    return spm.SentencePieceProcessor(model_proto=m.SerializeToString()), tokens, types


# ---- vectors ----------------------------------------------------------------------------------

def save(name, meta, cases):
    path = os.path.join(HERE, name)
    with open(path, "w") as f:
        json.dump(dict(meta, cases=cases), f, ensure_ascii=True, indent=1)
    print("wrote %s (%d cases)" % (os.path.relpath(path, ROOT), len(cases)))


def versions():
    import tokenizers
    import transformers
    v = {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__}
    try:
        import sentencepiece
        v["sentencepiece"] = sentencepiece.__version__
    except ImportError:
        pass
    return v


def make_bpe(strings):
    trained = train_bpe(strings)
    for pre, name in (("llama-bpe", "bpe-llama3"), ("qwen2", "bpe-qwen2")):
        path = os.path.join(HERE, name + ".gguf")
        write_bpe_gguf(trained, path, pre)
        hf = hf_from_gguf(path)
        cases, mismatches = [], 0
        bos = hf.convert_tokens_to_ids("<|begin_of_text|>")
        for s in strings:
            ids, plain = hf_ids(hf, s)
            if pre == "llama-bpe":  # the trained tokenizer: same splitting, same merges
                own = trained.encode(s).ids
                if [bos] + own != ids:
                    mismatches += 1
                    print("  transformers and tokenizers differ on %r:\n    %s\n    %s" % (s[:60], ids, [bos] + own))
            cases.append({"text": s, "ids": ids, "ids_plain": plain})
        if mismatches:
            sys.exit("make_vectors: the two references disagree on %d strings" % mismatches)
        save(name + ".vectors.json", {
            "vocab": "tests/tokenizer/%s.gguf" % name, "vocab_sha256": sha256(path),
            "reference": "transformers AutoTokenizer.from_pretrained(gguf_file=...)" +
                         ("; equal to the trained tokenizers object" if pre == "llama-bpe" else ""),
            "versions": versions()}, cases)


def split_special(s, specials):
    """Leftmost-longest split of s on the given special texts: [str | (text,)]."""
    out, frag, i = [], 0, 0
    by_len = sorted(specials, key=len, reverse=True)
    while i < len(s):
        hit = next((t for t in by_len if s.startswith(t, i)), None)
        if hit is None:
            i += 1
            continue
        out.append(s[frag:i])
        out.append((hit,))
        i += len(hit)
        frag = i
    out.append(s[frag:])
    return out


def make_spm(strings):
    """SentencePiece itself is the reference here, applied to the text between special
    tokens (its dummy prefix only on the text at the very start), cross-checked with
    transformers. transformers' GGUF LlamaTokenizer differs in two documented ways, both
    about the space prefix: it adds none when the text already starts with a space
    (SentencePiece, llama.cpp and Llama 2's own tokenizer.json always add one), and none
    after a special token at the start (as stride; SentencePiece, which knows no special
    tokens in text, would put a lone "\u2581" before it)."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb
    with tempfile.TemporaryDirectory() as tmp:
        model = train_spm(strings, tmp)
        path = os.path.join(HERE, "spm-small.gguf")
        write_spm_gguf(model, path)
        m = pb.ModelProto()
        with open(model, "rb") as f:
            m.ParseFromString(f.read())
    sp_first = spm.SentencePieceProcessor(model_proto=m.SerializeToString())
    m.normalizer_spec.add_dummy_prefix = False
    sp_rest = spm.SentencePieceProcessor(model_proto=m.SerializeToString())
    pieces = {p.piece: i for i, p in enumerate(m.pieces)}
    control = [p.piece for p in m.pieces if p.type in (CONTROL, UNKNOWN)]
    user = [p.piece for p in m.pieces if p.type == USER_DEFINED]
    bos = m.trainer_spec.bos_id

    def reference(s, parse_special, prefix=True):
        ids = []
        for k, part in enumerate(split_special(s, user + (control if parse_special else []))):
            if isinstance(part, tuple):
                ids.append(pieces[part[0]])
            elif part:
                ids += (sp_first if k == 0 and prefix else sp_rest).encode(part)
        return ids

    hf = hf_from_gguf(path)
    cases, bad, explained = [], 0, 0
    for s in strings:
        ids, plain = [bos] + reference(s, True), reference(s, False)
        hf_ids_, hf_plain = hf_ids(hf, s)
        for got, ref, ps in ((hf_ids_, ids, True), (hf_plain, plain, False)):
            if got == ref:
                continue
            # the documented difference: no dummy prefix before a leading space
            if s.startswith(" ") and got == [bos] * ps + reference(s, ps, prefix=False):
                explained += 1
            else:
                bad += 1
                print("  transformers and sentencepiece differ on %r:\n    %s\n    %s" % (s[:60], got, ref))
        cases.append({"text": s, "ids": ids, "ids_plain": plain, "hf_ids": hf_ids_, "hf_ids_plain": hf_plain})
    if bad:
        sys.exit("make_vectors: transformers and sentencepiece disagree on %d strings" % bad)
    print("  spm-small: transformers differs on the space prefix of %d encodings (documented)" % explained)
    save("spm-small.vectors.json", {
        "vocab": "tests/tokenizer/spm-small.gguf", "vocab_sha256": sha256(path),
        "reference": "sentencepiece (the library that trained the vocabulary) applied between special tokens; "
                     "transformers AutoTokenizer.from_pretrained(gguf_file=...) agrees except on the space "
                     "prefix of text that starts with a space or a special token (see make_spm)",
        "versions": versions()}, cases)


def make_gemma(strings, gguf_path):
    hf = hf_from_gguf(gguf_path)
    sp, tokens, types = gemma_sp_proto(gguf_path)
    controls = [t for t, y in zip(tokens, types) if y in (CONTROL, UNKNOWN)]
    cases, notes = [], []
    for s in strings:
        ids, plain = hf_ids(hf, s)
        sp_plain = sp.encode(s)
        case = {"text": s, "ids": ids, "ids_plain": plain}
        long_space_run = re.search(" {32,}", s) is not None
        if long_space_run:
            # transformers' loader quirk (see the module docstring): SentencePiece is right
            case["hf_ids_plain"] = plain
            case["ids_plain"] = sp_plain
            if any(c in s for c in controls):
                sys.exit("make_vectors: %r mixes a long space run with special-token text" % s[:40])
            case["ids"] = ([2] if ids[:1] == [2] else []) + sp_plain
            case["reference"] = "sentencepiece (transformers drops Gemma's whitespace pieces)"
            if case["ids"] != ids:
                notes.append(s)
        elif sp_plain != plain:
            sys.exit("make_vectors: transformers and sentencepiece disagree on %r:\n  %s\n  %s" % (s[:60], plain, sp_plain))
        cases.append(case)
    for s in notes:
        print("  gemma: expected ids from sentencepiece for %r (transformers differs)" % s[:50])
    save("gemma3.vectors.json", {
        "vocab": "models/gemma-3-270m-q4_k_m.gguf (scripts/fetch-gemma3-270m.sh)", "vocab_sha256": sha256(gguf_path),
        "reference": "transformers AutoTokenizer.from_pretrained(gguf_file=...), equal to sentencepiece with a model "
                     "proto rebuilt from the GGUF on every string except runs of more than 31 spaces, where "
                     "sentencepiece's ids are expected (see make_vectors.py)",
        "versions": versions()}, cases)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gemma", default=os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--only", choices=["bpe", "spm", "gemma"], action="append")
    args = ap.parse_args()
    strings = load_strings()
    only = set(args.only or ["bpe", "spm", "gemma"])
    if "bpe" in only:
        make_bpe(strings)
    if "spm" in only:
        make_spm(strings)
    if "gemma" in only:
        if os.path.exists(args.gemma):
            make_gemma(strings, args.gemma)
        else:
            print("make_vectors: %s is missing (scripts/fetch-gemma3-270m.sh); Gemma vectors not remade" % args.gemma)


if __name__ == "__main__":
    main()
