#!/usr/bin/env python3
"""Write a moeserve / HF DeepSeek-V3 checkpoint as a llama.cpp GGUF (architecture deepseek2).

Used by tools/llama_cpp/compare.sh to run the same model in llama.cpp, beside moeserve: its
metadata and tensor layout follow llama.cpp's own convert_hf_to_gguf.py (DeepseekV2Model) of the
release we build, which needs torch and transformers; this needs only NumPy and that release's
gguf-py (GGUF_PY=DIR, or on PYTHONPATH).

  export_gguf.py --model DIR --out FILE.gguf [--type f32|bf16] [--ascii-vocab]

--ascii-vocab renames the tokens for serving random weights (compare.sh serve): token i of the
BPE vocabulary (and any padding id past it) becomes the printable-ASCII string "<i>"; the
tokenizer's added tokens (BOS, EOS, pad, FIM, ...) keep their text and types. The number of
tokens, the weights and the shapes do not change. Random weights pick tokens that decode to
pieces of UTF-8 characters, and llama-server refuses to send text that is not valid UTF-8;
"<i>" always decodes to itself (printable ASCII is its own byte in the byte-level BPE). Text no
longer tokenizes into this vocabulary (no merges apply): send prompts as token ids.

FP8 weights are expanded with their 128x128 block scales (exactly in f32); BF16 / F16 / F32 are
copied (bf16 -> f32 exactly). Norms, router weights and biases stay f32, as llama.cpp's converter
leaves them. Reads one tensor at a time through numpy.memmap.
"""
import argparse
import json
import os
import sys

import numpy as np

if os.environ.get("GGUF_PY"):
    sys.path.insert(0, os.environ["GGUF_PY"])
import gguf  # noqa: E402


class Checkpoint:
    """The tensors of model.safetensors or its shards, by name, as f32 arrays."""

    def __init__(self, model_dir):
        index = os.path.join(model_dir, "model.safetensors.index.json")
        files = (sorted(set(json.load(open(index))["weight_map"].values()))
                 if os.path.exists(index) else ["model.safetensors"])
        self.entries = {}
        for name in files:
            path = os.path.join(model_dir, name)
            with open(path, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(n))
            header.pop("__metadata__", None)
            for key, info in header.items():
                self.entries[key] = (path, 8 + n, info)

    def names(self):
        return self.entries.keys()

    def raw(self, key):
        path, base, info = self.entries[key]
        begin, end = info["data_offsets"]
        dtypes = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "F8_E4M3": np.uint8}
        if info["dtype"] not in dtypes:
            raise SystemExit(f"export_gguf: {path}: tensor {key}: dtype {info['dtype']} is not supported")
        data = np.memmap(path, dtype=np.uint8, mode="r", offset=base + begin, shape=(end - begin,))
        return info["dtype"], data.view(dtypes[info["dtype"]]).reshape(info["shape"])

    def f32(self, key):
        dtype, a = self.raw(key)
        if dtype == "BF16":
            return (a.astype(np.uint32) << 16).view(np.float32)
        if dtype == "F8_E4M3":
            w = E4M3[a]
            s = self.f32(key.replace(".weight", ".weight_scale_inv"))
            r, c = w.shape
            return w * np.repeat(np.repeat(s, 128, 0), 128, 1)[:r, :c]
        return a.astype(np.float32)


def _e4m3_table():
    """The 256 OCP e4m3 codes (bias 7, subnormals, 0x7f / 0xff NaN) as f32, exactly."""
    b = np.arange(256)
    exp, man = (b >> 3) & 0xF, (b & 7) / 8.0
    value = np.where(exp == 0, np.ldexp(man, -6), np.ldexp(1.0 + man, exp - 7))
    value = np.where(b & 0x80, -value, value).astype(np.float32)
    value[(b & 0x7F) == 0x7F] = np.nan
    return value


E4M3 = _e4m3_table()


def write_vocab(w, model_dir, vocab_size, ascii_vocab=False):
    tok = json.load(open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8"))
    cfg = json.load(open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8"))
    text = {i: t for t, i in tok["model"]["vocab"].items()}
    kinds = {i: gguf.TokenType.NORMAL for i in text}
    if ascii_vocab:  # see --ascii-vocab above; the added tokens below keep their text
        text = {i: f"<{i}>" for i in range(vocab_size)}
    for a in tok["added_tokens"]:
        text[a["id"]] = a["content"]
        kinds[a["id"]] = gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED
    tokens = [text.get(i, f"[PAD{i}]") for i in range(vocab_size)]
    types = [kinds.get(i, gguf.TokenType.UNUSED) for i in range(vocab_size)]
    if ascii_vocab and len(set(tokens)) != len(tokens):
        raise SystemExit(f"export_gguf: {model_dir}: the vocabulary has repeated token strings")
    known = set(tokens)
    merges = []
    for m in tok["model"]["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in known and b in known and a + b in known:  # a vocab cut to fewer ids keeps its own merges
            merges.append(f"{a} {b}")
    if not merges:  # GGUF has no empty arrays, and llama.cpp wants the key: one merge, never used
        merges = ["< >"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("deepseek-v3")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    ids = {t: i for i, t in enumerate(tokens)}
    for key, add in (("bos_token", w.add_bos_token_id), ("eos_token", w.add_eos_token_id),
                     ("pad_token", w.add_pad_token_id)):
        t = cfg.get(key)
        t = t.get("content") if isinstance(t, dict) else t
        if t in ids:
            add(ids[t])
    w.add_add_bos_token(bool(cfg.get("add_bos_token", True)))
    w.add_add_eos_token(bool(cfg.get("add_eos_token", False)))


def write_params(w, c):
    w.add_block_count(c["num_hidden_layers"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(1)  # MLA runs as MQA over the latent in llama.cpp
    w.add_rope_freq_base(c.get("rope_theta", 10000.0))
    w.add_layer_norm_rms_eps(c.get("rms_norm_eps", 1e-6))
    w.add_expert_count(c["n_routed_experts"])
    w.add_expert_used_count(c["num_experts_per_tok"])
    w.add_expert_group_count(c.get("n_group", 1))
    w.add_expert_group_used_count(c.get("topk_group", 1))
    gating = {"sigmoid": gguf.ExpertGatingFuncType.SIGMOID, "softmax": gguf.ExpertGatingFuncType.SOFTMAX}
    w.add_expert_gating_func(gating[c.get("scoring_func", "softmax")])
    w.add_leading_dense_block_count(c.get("first_k_dense_replace", 0))
    w.add_vocab_size(c["vocab_size"])
    if c.get("q_lora_rank"):
        w.add_q_lora_rank(c["q_lora_rank"])
    w.add_kv_lora_rank(c["kv_lora_rank"])
    w.add_key_length(c["kv_lora_rank"] + c["qk_rope_head_dim"])
    w.add_value_length(c["kv_lora_rank"])
    w.add_key_length_mla(c["qk_nope_head_dim"] + c["qk_rope_head_dim"])
    w.add_value_length_mla(c["v_head_dim"])
    w.add_expert_feed_forward_length(c["moe_intermediate_size"])
    w.add_expert_shared_count(c.get("n_shared_experts", 0))
    w.add_expert_weights_scale(c.get("routed_scaling_factor", 1.0))
    if c.get("norm_topk_prob"):
        w.add_expert_weights_norm(True)
    w.add_rope_dimension_count(c["qk_rope_head_dim"])
    rs = c.get("rope_scaling") or {}
    if rs.get("type", rs.get("rope_type")) == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rs["factor"])
        w.add_rope_scaling_orig_ctx_len(rs["original_max_position_embeddings"])
        w.add_rope_scaling_yarn_beta_fast(rs.get("beta_fast", 32.0))
        w.add_rope_scaling_yarn_beta_slow(rs.get("beta_slow", 1.0))
        if "mscale_all_dim" in rs:  # llama.cpp divides this by 0.1 again when it loads deepseek2
            w.add_rope_scaling_yarn_log_mul(0.1 * rs["mscale_all_dim"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--type", choices=["f32", "bf16"], default="bf16")
    ap.add_argument("--ascii-vocab", action="store_true",
                    help='token i -> "<i>" (printable ASCII), added tokens kept: for llama-server on random weights')
    args = ap.parse_args()
    try:
        c = json.load(open(os.path.join(args.model, "config.json")))
    except (OSError, ValueError) as e:
        raise SystemExit(f"export_gguf: {args.model}/config.json: {e}")
    if c.get("model_type") != "deepseek_v3":
        raise SystemExit(f"export_gguf: {args.model}/config.json: model_type {c.get('model_type')!r}, expected 'deepseek_v3'")
    ck = Checkpoint(args.model)
    layers = c["num_hidden_layers"]
    arch = gguf.MODEL_ARCH.DEEPSEEK2
    names = gguf.get_tensor_name_map(arch, layers)
    w = gguf.GGUFWriter(args.out, gguf.MODEL_ARCH_NAMES[arch])
    w.add_name(os.path.basename(os.path.normpath(args.model)))
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if args.type == "f32" else gguf.LlamaFileType.MOSTLY_BF16)
    write_params(w, c)
    write_vocab(w, args.model, c["vocab_size"], args.ascii_vocab)

    def put(hf_name, a):
        hf_name = hf_name.replace("e_score_correction_bias", "e_score_correction.bias")
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise SystemExit(f"export_gguf: no GGUF name for tensor {hf_name}")
        if args.type == "bf16" and a.ndim >= 2 and not name.endswith("ffn_gate_inp.weight"):
            u = a.astype(np.float32).view(np.uint32)  # round to nearest even
            bf = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
            w.add_tensor(name, bf, raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))

    dn, dv, heads = c["qk_nope_head_dim"], c["v_head_dim"], c["num_attention_heads"]
    experts = c["n_routed_experts"]
    for key in sorted(ck.names()):
        if key.endswith("weight_scale_inv"):
            continue
        parts = key.split(".")
        if parts[0] == "model" and parts[1] == "layers" and int(parts[2]) >= layers:
            continue  # multi-token prediction layers
        if ".mlp.experts." in key:
            if key.endswith(".experts.0.gate_proj.weight"):
                base = key[: key.index(".experts.") + len(".experts.")]
                for proj in ("down_proj", "gate_proj", "up_proj"):
                    put(f"{base}{proj}.weight",
                        np.stack([ck.f32(f"{base}{e}.{proj}.weight") for e in range(experts)]))
            continue
        a = ck.f32(key)
        if key.endswith("kv_b_proj.weight"):  # llama.cpp's absorbed MLA wants W_UK^T and W_UV apart
            kv = a.reshape(heads, dn + dv, a.shape[-1])
            put(key.replace("kv_b_proj", "k_b_proj"), np.ascontiguousarray(kv[:, :dn, :].transpose(0, 2, 1)))
            put(key.replace("kv_b_proj", "v_b_proj"), np.ascontiguousarray(kv[:, dn:, :]))
            continue
        put(key, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    print(f"export_gguf: wrote {args.out} ({os.path.getsize(args.out) / 1e9:.2f} GB, {args.type})")


if __name__ == "__main__":
    main()
