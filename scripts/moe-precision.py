"""How far an MoE model's logits move under a backend's roundings, and why (bench/moe-precision-*.md).

    moe-precision.py model DIR                          OLMoE-shaped F16 GGUF + token sequences
    moe-precision.py reference DIR                      float64 logits: exact and rounded variants
    moe-precision.py logits STRIDE DIR NAME BACKEND KV  stride's logits of every sequence (run)
    moe-precision.py report DIR [NAME...] [--json F]    errors against the exact pass

The model has OLMoE-1B-7B's widths (hidden 2,048, 16 heads of 128 with whole-projection q/k
norms, 64 experts of 1,024, top-8, F32 router) and 4 layers, random weights at the
fixtures' scale (tests/fixtures: N(0, 0.2) at width 64, here scaled by sqrt(64 / K) so
activations keep their size), the fixtures' 384-token vocabulary. Eight sequences of 40
prompt tokens and 4 teacher-forced decode tokens.

The reference is tests/fixtures/gguf_forward.py's float64 forward pass (llama.cpp's
semantics, checked against transformers on the fixtures) with stride CUDA's roundings as
switches, so each can be weighed alone:
  prompt products  the activations of every F16 product of the prompt rounded to f16 (a
                   cuBLAS GEMM takes A and B of one type); decode's one-column products
                   take f32 activations, and the router is an F32 weight: not rounded
  kv f16           keys (after rope) and values rounded to f16, as the F16 cache holds them
  q, P f16         prefill's flash attention: the query and the softmax numerators rounded
                   to f16 (the sums stay f32)
With top-8 of 64 experts, a token whose 8th and 9th router logits nearly tie takes another
expert under any of these roundings; such a flip moves the logits an order of magnitude
more than the roundings themselves. The report gives, per sequence, the normalised error
||x - exact|| / ||exact|| and the (layer, token) pairs whose expert set differs from the
exact pass's, so a backend's error can be told apart as rounding, flips, or its own.

Needs numpy and gguf (tests/fixtures' generator for the vocabulary, no torch).
"""
import json
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
from gguf_forward import Model, round_to  # noqa: E402
from test_model_reference import norm_err, run_stride  # noqa: E402  (the CPU's fixture test)

N_EMBD, N_HEAD, HEAD_DIM, N_EXPERT, N_FF, N_USED, N_LAYER = 2048, 16, 128, 64, 1024, 8, 4
N_SEQ, N_PROMPT, N_DECODE = 8, 40, 4
MODEL, SEQS, REF = "olmoe-shaped.gguf", "sequences.json", "reference.npz"
# name: (rows whose products round: the prompt's or none, kv f16, q and P f16)
VARIANTS = {"exact": (0, False, False), "prompt products": (N_PROMPT, False, False),
            "kv f16": (0, True, False), "prompt products + kv f16": (N_PROMPT, True, False),
            "prompt products + kv f16 + q, P f16": (N_PROMPT, True, True)}


def write_model(d):
    import gguf
    import make_fixtures
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(11)
    mat32 = lambda *shape, k: rng.standard_normal(shape, dtype=np.float32) * np.float32(0.2 * math.sqrt(64.0 / k))
    mat = lambda *shape, k: mat32(*shape, k=k).astype(np.float16)
    norm = lambda n: (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)
    w = gguf.GGUFWriter(os.path.join(d, MODEL), "olmoe")
    w.add_name("olmoe-shaped precision probe")
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
    w.add_context_length(4096)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_expert_count(N_EXPERT)
    w.add_expert_used_count(N_USED)
    w.add_expert_feed_forward_length(N_FF)
    tokens, scores, types = make_fixtures.sentencepiece_vocab()
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(make_fixtures.BOS)
    w.add_eos_token_id(make_fixtures.EOS)
    w.add_unk_token_id(make_fixtures.UNK)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    n_vocab = len(tokens)
    w.add_tensor("token_embd.weight", rng.standard_normal((n_vocab, N_EMBD), dtype=np.float32).astype(np.float16))
    for il in range(N_LAYER):
        b = f"blk.{il}."
        w.add_tensor(b + "attn_norm.weight", norm(N_EMBD))
        for n in "qkv":
            w.add_tensor(b + f"attn_{n}.weight", mat(N_EMBD, N_EMBD, k=N_EMBD))
        w.add_tensor(b + "attn_q_norm.weight", norm(N_EMBD))
        w.add_tensor(b + "attn_k_norm.weight", norm(N_EMBD))
        w.add_tensor(b + "attn_output.weight", mat(N_EMBD, N_EMBD, k=N_EMBD))
        w.add_tensor(b + "ffn_norm.weight", norm(N_EMBD))
        w.add_tensor(b + "ffn_gate_inp.weight", mat32(N_EXPERT, N_EMBD, k=N_EMBD))
        w.add_tensor(b + "ffn_gate_exps.weight", mat(N_EXPERT, N_FF, N_EMBD, k=N_EMBD))
        w.add_tensor(b + "ffn_up_exps.weight", mat(N_EXPERT, N_FF, N_EMBD, k=N_EMBD))
        w.add_tensor(b + "ffn_down_exps.weight", mat(N_EXPERT, N_EMBD, N_FF, k=N_FF))
    w.add_tensor("output_norm.weight", norm(N_EMBD))
    w.add_tensor("output.weight", mat(n_vocab, N_EMBD, k=N_EMBD))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    rng = np.random.default_rng(7)
    seqs = [[make_fixtures.BOS] + [int(t) for t in rng.integers(3, n_vocab, N_PROMPT + N_DECODE - 1)]
            for _ in range(N_SEQ)]
    json.dump({"n_prompt": N_PROMPT, "sequences": seqs}, open(os.path.join(d, SEQS), "w"))


class RoundedOlmoe(Model):
    """gguf_forward's OLMoE with stride CUDA's roundings as switches (VARIANTS); records
    each layer's expert sets and the 8th-minus-9th router logit margin of every token."""

    def __init__(self, path):
        super().__init__(path, round_products=False)
        self.f16 = {n for n in self.w if n.endswith("weight") and not n.endswith("norm.weight")
                    and not n.endswith("gate_inp.weight")}
        self.set_variant(VARIANTS["exact"])

    def set_variant(self, v):
        self.n_rounded, self.kv16, self.qp16 = v
        self.routes, self.margins = [], []

    def mm(self, x, name, e=None, row=None):
        """As Model.mm; rows < n_rounded take f16 activations (row: x is that one row)."""
        if name in self.f16:
            x = np.array(x, dtype=np.float64)
            if row is None:
                x[:self.n_rounded] = round_to(x[:self.n_rounded], "f16")
            elif row < self.n_rounded:
                x = round_to(x, "f16")
        return x @ self.w[name].T if e is None else self.w[name][e] @ x

    def attention(self, il, h, pos):
        W, b, n, hd = self.w, f"blk.{il}.", h.shape[0], self.hd
        q, k, v = (self.mm(h, b + f"attn_{t}.weight") for t in "qkv")
        q, k = self.rmsnorm(q, W[b + "attn_q_norm.weight"]), self.rmsnorm(k, W[b + "attn_k_norm.weight"])
        q, k, v = (t.reshape(n, -1, hd) for t in (q, k, v))
        q, k = self.rope(q, pos, self.base), self.rope(k, pos, self.base)
        if self.kv16:
            k, v = round_to(k, "f16"), round_to(v, "f16")
        if self.qp16:
            q[:self.n_rounded] = round_to(q[:self.n_rounded], "f16")
        future = np.arange(n)[None, :] > np.arange(n)[:, None]
        out = np.empty((n, self.n_head, hd))
        for hh in range(self.n_head):
            s = np.where(future, -np.inf, q[:, hh] @ k[:, hh].T / math.sqrt(hd))
            p = np.exp(s - s.max(axis=1, keepdims=True))
            l = p.sum(axis=1, keepdims=True)
            if self.qp16:
                p[:self.n_rounded] = round_to(p[:self.n_rounded], "f16")
            out[:, hh] = (p @ v[:, hh]) / l
        return self.mm(out.reshape(n, -1), b + "attn_output.weight")

    def ffn(self, il, h):
        b = f"blk.{il}."
        logits = self.mm(h, b + "ffn_gate_inp.weight")                   # (n, n_expert), f32 weight
        order = np.argsort(-logits, axis=1)
        ranked = np.take_along_axis(logits, order, axis=1)
        self.routes.append(np.sort(order[:, :self.n_used], axis=1))
        self.margins.append(ranked[:, self.n_used - 1] - ranked[:, self.n_used])
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        silu = lambda z: z / (1.0 + np.exp(-z))
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            for e in order[t, :self.n_used]:
                g = self.mm(h[t], b + "ffn_gate_exps.weight", e, t)
                u = self.mm(h[t], b + "ffn_up_exps.weight", e, t)
                out[t] += p[t, e] * self.mm(silu(g) * u, b + "ffn_down_exps.weight", e, t)
        return out


def write_reference(d):
    m = RoundedOlmoe(os.path.join(d, MODEL))
    seqs = json.load(open(os.path.join(d, SEQS)))["sequences"]
    out = {}
    for i, seq in enumerate(seqs):
        for name, v in VARIANTS.items():
            m.set_variant(v)
            out[f"{i}/{name}"] = m.forward(seq)
            out[f"{i}/{name}/routes"] = np.stack(m.routes)               # (layer, token, n_used)
            out[f"{i}/{name}/margins"] = np.stack(m.margins)             # (layer, token)
        print(f"sequence {i + 1} of {len(seqs)}", flush=True)
    np.savez(os.path.join(d, REF), **out)


def write_logits(stride, d, name, backend, kv):
    s = json.load(open(os.path.join(d, SEQS)))
    os.makedirs(os.path.join(d, name), exist_ok=True)
    n = s["n_prompt"]
    for i, seq in enumerate(s["sequences"]):
        ref = {"prompt": seq[:n], "decode_tokens": seq[n:]}
        if run_stride(stride, os.path.join(d, MODEL), ref, os.path.join(d, name, f"{i}.npy"), kv,
                      backend=backend) is None:
            sys.exit(f"stride run failed on sequence {i}")


def report(d, names, json_out=None):
    r = np.load(os.path.join(d, REF))
    s = json.load(open(os.path.join(d, SEQS)))
    n_p, n_s = s["n_prompt"], len(s["sequences"])
    exact = [r[f"{i}/exact"] for i in range(n_s)]
    margins = np.concatenate([r[f"{i}/exact/margins"].ravel() for i in range(n_s)])
    summary = {"sequences": n_s, "n_prompt": n_p, "n_decode": len(s["sequences"][0]) - n_p,
               "router_margin_min": float(margins.min()), "router_margins_below_1e-3": int((margins < 1e-3).sum()),
               "router_margins": int(margins.size), "rows": {}}
    print(f"{n_s} sequences of {n_p} + {summary['n_decode']} tokens; 8th-9th router margin of the exact "
          f"pass: min {margins.min():.1e}, {summary['router_margins_below_1e-3']} of {margins.size} below 1e-3")
    rows = [(v, [r[f"{i}/{v}"] for i in range(n_s)], [r[f"{i}/{v}/routes"] for i in range(n_s)])
            for v in VARIANTS if v != "exact"]
    rows += [(n, [np.load(os.path.join(d, n, f"{i}.npy")).astype(np.float64) for i in range(n_s)], None)
             for n in names]
    for name, logits, routes in rows:
        per_seq = [norm_err(a, b) for a, b in zip(logits, exact)]
        row = {"median": float(np.median(per_seq)),
               "median_prompt": float(np.median([norm_err(a[:n_p], b[:n_p]) for a, b in zip(logits, exact)])),
               "median_decode": float(np.median([norm_err(a[n_p:], b[n_p:]) for a, b in zip(logits, exact)])),
               "per_sequence": per_seq}
        if routes is not None:
            row["flips_per_sequence"] = [int((x != r[f"{i}/exact/routes"]).any(axis=2).sum())
                                         for i, x in enumerate(routes)]
        summary["rows"][name] = row
        flips = "" if routes is None else "  flips " + " ".join(map(str, row["flips_per_sequence"]))
        print(f"{name:36s} median {row['median']:.2e} (prompt {row['median_prompt']:.2e}, decode "
              f"{row['median_decode']:.2e})  per sequence " + " ".join(f"{x:.1e}" for x in per_seq) + flips)
    if json_out:
        json.dump(summary, open(json_out, "w"), indent=1)


def main():
    a = sys.argv[1:]
    if len(a) == 2 and a[0] == "model":
        write_model(a[1])
    elif len(a) == 2 and a[0] == "reference":
        write_reference(a[1])
    elif len(a) == 6 and a[0] == "logits":
        write_logits(*a[1:])
    elif len(a) >= 2 and a[0] == "report":
        j = a.index("--json") if "--json" in a else None
        names = a[2:j] if j else a[2:]
        report(a[1], names, a[j + 1] if j else None)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
