#!/usr/bin/python3
# tests/reference/deepseek_v3_reference.py
# An independent NumPy implementation of the DeepSeek-V3 forward pass, written only from
# reference/model-spec.md (not from the C++ code), used to check `moeserve logits`.
#
# All arithmetic is float64: weights are decoded (BF16 / F16 / F32 / F8_E4M3 + 128x128
# weight_scale_inv) into float64 and every activation, norm, softmax and router step is float64.
# Output files are float32 [T, V].
#
#   deepseek_v3_reference.py --model DIR --tokens 1,2,3 --out logits.npy
#   deepseek_v3_reference.py --model DIR --tokens 1,2,3 --compare other.npy [--atol-rel R]
#   deepseek_v3_reference.py --self-test
#   ... --lm-head-fp8: the lm_head block-quantised to FP8 first (spec 4), as `moeserve --lm-head-fp8`
#
# Needs only the Python standard library and numpy (Debian's /usr/bin/python3 has numpy 1.24).
import argparse
import glob
import json
import math
import os
import struct
import sys
import tempfile

import numpy as np

# ----------------------------------------------------------------------------------------------
# safetensors (spec 1.1) and dtypes


def _fp8_e4m3fn_table():
    """256-entry float64 table of float8_e4m3fn from the bit formula (spec 1.1)."""
    table = np.empty(256, dtype=np.float64)
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        exp = (b >> 3) & 0xF
        man = b & 0x7
        if exp == 0xF and man == 0x7:
            table[b] = np.nan                                # 0x7F / 0xFF; no infinities
        elif exp == 0:
            table[b] = sign * 2.0 ** -6 * (man / 8.0)          # subnormal
        else:
            table[b] = sign * 2.0 ** (exp - 7) * (1.0 + man / 8.0)
    return table


FP8_E4M3_TABLE = _fp8_e4m3fn_table()
DTYPE_SIZES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "F8_E4M3": 1, "I64": 8, "I32": 4,
               "U8": 1, "I8": 1}


def decode(raw, dtype, shape):
    """Bytes of one tensor -> float64 array (integer dtypes stay integer)."""
    if dtype == "BF16":
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        out = bits.view(np.float32).astype(np.float64)
    elif dtype == "F16":
        out = np.frombuffer(raw, dtype="<f2").astype(np.float64)
    elif dtype == "F32":
        out = np.frombuffer(raw, dtype="<f4").astype(np.float64)
    elif dtype == "F64":
        out = np.frombuffer(raw, dtype="<f8").astype(np.float64)
    elif dtype == "F8_E4M3":
        out = FP8_E4M3_TABLE[np.frombuffer(raw, dtype=np.uint8)]
    elif dtype in ("I64", "I32", "U8", "I8"):
        np_type = {"I64": "<i8", "I32": "<i4", "U8": "u1", "I8": "i1"}[dtype]
        out = np.frombuffer(raw, dtype=np_type).copy()
    else:
        raise ValueError("unsupported safetensors dtype %r" % dtype)
    return out.reshape(shape)


class SafetensorsFile:
    """One .safetensors file: header parsed eagerly, tensor data read on demand."""

    def __init__(self, path):
        self.path = path
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise ValueError("%s: shorter than the 8-byte header length" % path)
            (n,) = struct.unpack("<Q", head)
            if 8 + n > size:
                raise ValueError("%s: header length %d runs past the file end" % (path, n))
            header = json.loads(f.read(n).decode("utf-8"))
        self.data_start = 8 + n
        header.pop("__metadata__", None)
        self.entries = {}
        for name, e in header.items():
            dtype, shape, (begin, end) = e["dtype"], list(e["shape"]), e["data_offsets"]
            if dtype not in DTYPE_SIZES:
                raise ValueError("%s: tensor %s has unsupported dtype %s" % (path, name, dtype))
            want = int(np.prod(shape, dtype=np.int64)) * DTYPE_SIZES[dtype]
            if end - begin != want:
                raise ValueError("%s: tensor %s has %d bytes, shape %s %s needs %d"
                                 % (path, name, end - begin, shape, dtype, want))
            if begin < 0 or self.data_start + end > size:
                raise ValueError("%s: tensor %s data lies outside the file" % (path, name))
            self.entries[name] = (dtype, shape, begin, end)

    def read(self, name):
        dtype, shape, begin, end = self.entries[name]
        with open(self.path, "rb") as f:
            f.seek(self.data_start + begin)
            raw = f.read(end - begin)
        return decode(raw, dtype, shape)


def write_safetensors(path, tensors):
    """Minimal writer for the self-test: tensors = {name: (dtype, shape, raw bytes)}."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


class Checkpoint:
    """A model directory: config.json plus one or more safetensors files (spec 1)."""

    def __init__(self, model_dir):
        self.dir = model_dir
        with open(os.path.join(model_dir, "config.json")) as f:
            self.config = json.load(f)
        index_path = os.path.join(model_dir, "model.safetensors.index.json")
        if os.path.exists(index_path):
            with open(index_path) as f:
                weight_map = json.load(f)["weight_map"]
            shard_names = sorted(set(weight_map.values()))
        else:
            shard_names = sorted(os.path.basename(p)
                                 for p in glob.glob(os.path.join(model_dir, "*.safetensors")))
            weight_map = None
        if not shard_names:
            raise ValueError("%s: no *.safetensors files" % model_dir)
        self.files = {s: SafetensorsFile(os.path.join(model_dir, s)) for s in shard_names}
        self.where = {}
        for shard, st in self.files.items():
            for name in st.entries:
                if name in self.where:
                    raise ValueError("tensor %s appears in %s and %s" % (name, self.where[name], shard))
                self.where[name] = shard
        if weight_map is not None:
            for name, shard in weight_map.items():
                if self.where.get(name) != shard:
                    raise ValueError("index says %s is in %s, found in %s"
                                     % (name, shard, self.where.get(name)))
        q = self.config.get("quantization_config") or {}
        self.block = tuple(q.get("weight_block_size", [128, 128]))

    def has(self, name):
        return name in self.where

    def raw(self, name):
        if name not in self.where:
            raise KeyError("tensor %s not found in %s" % (name, self.dir))
        return self.files[self.where[name]].read(name)

    def dtype(self, name):
        return self.files[self.where[name]].entries[name][0]

    def weight(self, name):
        """A float64 weight; F8_E4M3 weights are block-dequantized with <name>_scale_inv."""
        w = self.raw(name)
        if self.dtype(name) != "F8_E4M3":
            return w
        scale_name = name + "_scale_inv"
        if not self.has(scale_name):
            raise ValueError("FP8 tensor %s has no %s" % (name, scale_name))
        return block_dequant(w, self.raw(scale_name), self.block)


def block_dequant(q, s, block):
    """W[i, j] = q[i, j] * s[i // br, j // bc] (spec 4: a multiply; edge blocks may be partial)."""
    br, bc = block
    m, n = q.shape
    want = (-(-m // br), -(-n // bc))
    if tuple(s.shape) != want:
        raise ValueError("scale shape %s, expected %s for weight %s" % (s.shape, want, q.shape))
    full = np.repeat(np.repeat(s, br, axis=0), bc, axis=1)[:m, :n]
    return q * full


def fp8_e4m3_round(x):
    """float64 x to the nearest float8_e4m3fn value (spec 1.1: 3 mantissa bits, exponent bias 7,
    subnormals below 2^-6), ties to even, saturating at +-448 (no infinities)."""
    a = np.minimum(np.abs(x), 448.0)
    quantum = 2.0 ** (np.floor(np.log2(np.maximum(a, 2.0 ** -6))) - 3)   # one mantissa step
    return np.copysign(np.round(a / quantum) * quantum, x)             # np.round: ties to even


def fp8_block_quantize(w, block=(128, 128)):
    """W as DeepSeek's FP8 checkpoints would hold it, dequantised (spec 4): per block scale =
    amax / 448 in float32 (1 for an all-zero block, at least 2^-126), code = e4m3(w / scale)."""
    br, bc = block
    w32 = w.astype(np.float32)
    out = np.empty(w.shape)
    for i in range(0, w.shape[0], br):
        for j in range(0, w.shape[1], bc):
            b = w32[i:i + br, j:j + bc]
            amax = np.float32(np.abs(b).max())
            scale = np.float32(1.0) if amax == 0 else max(amax / np.float32(448.0), np.float32(2.0 ** -126))
            out[i:i + br, j:j + bc] = fp8_e4m3_round((b / scale).astype(np.float64)) * float(scale)
    return out


# ----------------------------------------------------------------------------------------------
# Config (spec 2)


class Config:
    def __init__(self, c):
        self.vocab_size = int(c["vocab_size"])
        self.hidden_size = int(c["hidden_size"])
        self.intermediate_size = int(c["intermediate_size"])
        self.num_hidden_layers = int(c["num_hidden_layers"])
        self.num_heads = int(c["num_attention_heads"])
        self.q_lora_rank = c.get("q_lora_rank")
        self.kv_lora_rank = int(c["kv_lora_rank"])
        self.dn = int(c["qk_nope_head_dim"])
        self.dr = int(c["qk_rope_head_dim"])
        self.dv = int(c["v_head_dim"])
        self.n_routed_experts = c.get("n_routed_experts")
        self.moe_intermediate_size = c.get("moe_intermediate_size")
        self.n_shared_experts = c.get("n_shared_experts") or 0
        self.num_experts_per_tok = c.get("num_experts_per_tok")
        self.n_group = int(c.get("n_group") or 1)
        self.topk_group = int(c.get("topk_group") or 1)
        self.routed_scaling_factor = float(c.get("routed_scaling_factor", 1.0))
        self.norm_topk_prob = bool(c.get("norm_topk_prob", False))
        self.scoring_func = c.get("scoring_func", "sigmoid")
        self.topk_method = c.get("topk_method", "noaux_tc")
        self.first_k_dense_replace = int(c.get("first_k_dense_replace", 0))
        self.moe_layer_freq = int(c.get("moe_layer_freq", 1))
        self.rms_norm_eps = float(c.get("rms_norm_eps", 1e-6))
        self.tie_word_embeddings = bool(c.get("tie_word_embeddings", False))
        self.rope_interleave = bool(c.get("rope_interleave", True))
        act = c.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError("config hidden_act %r: only silu is supported" % act)
        rs = c.get("rope_scaling") or c.get("rope_parameters") or {}
        self.rope_theta = float(c.get("rope_theta", rs.get("rope_theta", 10000.0)))
        self.rope_type = rs.get("type", rs.get("rope_type", "default"))
        self.rope = rs

    def is_moe(self, n):
        return (self.n_routed_experts is not None and n >= self.first_k_dense_replace
                and n % self.moe_layer_freq == 0)


# ----------------------------------------------------------------------------------------------
# RoPE / YaRN (spec 5.3, 5.4)


def yarn_mscale(scale, m):
    return 1.0 if scale <= 1.0 else 0.1 * m * math.log(scale) + 1.0


def rope_inv_freq(d, base, rope):
    """inv_freq[i], i = 0 .. d/2-1; the YaRN blend when rope['type'] is yarn (spec 5.3)."""
    f = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    if rope.get("type", rope.get("rope_type")) != "yarn":
        return f
    factor = float(rope["factor"])
    l0 = float(rope["original_max_position_embeddings"])
    beta_fast = float(rope.get("beta_fast", 32))
    beta_slow = float(rope.get("beta_slow", 1))

    def corr(n):
        return d * math.log(l0 / (n * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(corr(beta_fast)), 0)
    high = min(math.ceil(corr(beta_slow)), d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    return f / factor * ramp + f * (1.0 - ramp)


def rope_attention_factor(rope):
    """The factor on cos/sin: mscale(factor, mscale) / mscale(factor, mscale_all_dim)."""
    if rope.get("type", rope.get("rope_type")) != "yarn":
        return 1.0
    factor = float(rope["factor"])
    return (yarn_mscale(factor, float(rope.get("mscale", 1.0)))
            / yarn_mscale(factor, float(rope.get("mscale_all_dim", 0.0))))


def softmax_scale(dq, rope):
    """dq^-0.5, times m^2 with m = 0.1 * mscale_all_dim * ln(factor) + 1 under YaRN (spec 5.4)."""
    scale = dq ** -0.5
    if rope.get("type", rope.get("rope_type")) == "yarn" and rope.get("mscale_all_dim"):
        m = yarn_mscale(float(rope["factor"]), float(rope["mscale_all_dim"]))
        scale *= m * m
    return scale


def apply_rope(x, positions, inv_freq, attn_factor, interleave=True):
    """x: [T, ..., dr]; rotates pairs (2i, 2i+1) by angle p * inv_freq[i] (spec 5.3)."""
    ang = positions.astype(np.float64)[:, None] * inv_freq[None, :]         # [T, dr/2]
    cos, sin = np.cos(ang) * attn_factor, np.sin(ang) * attn_factor
    shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (inv_freq.shape[0],)
    cos, sin = cos.reshape(shape), sin.reshape(shape)
    out = np.empty_like(x)
    if interleave:
        a, b = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
    else:                                            # rope_interleave false: NeoX halves
        h = x.shape[-1] // 2
        a, b = x[..., :h], x[..., h:]
        out[..., :h] = a * cos - b * sin
        out[..., h:] = a * sin + b * cos
    return out


# ----------------------------------------------------------------------------------------------
# Layers (spec 5.2, 5.4, 5.6, 5.7)


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(z):
    return z / (1.0 + np.exp(-z))


def mlp(x, gate, up, down):
    return (silu(x @ gate.T) * (x @ up.T)) @ down.T


def topk_indices(v, k):
    """Indices of the k largest values; ties go to the lower index (stable sort)."""
    return np.argsort(-v, kind="stable")[:k]


def route(logits, bias, cfg):
    """Router for one token: returns (expert indices, weights) per spec 5.7 (noaux_tc)."""
    e = logits.shape[0]
    if cfg.scoring_func == "sigmoid":
        s = 1.0 / (1.0 + np.exp(-logits))
    elif cfg.scoring_func == "softmax":
        s = np.exp(logits - logits.max())
        s = s / s.sum()
    else:
        raise ValueError("scoring_func %r not supported" % cfg.scoring_func)
    c = s + bias if bias is not None else s.copy()
    if cfg.n_group > 1:
        groups = c.reshape(cfg.n_group, e // cfg.n_group)
        if bias is not None:                          # top-2 sum with a correction bias
            group_score = np.sort(groups, axis=1)[:, -2:].sum(axis=1)
        else:
            group_score = groups.max(axis=1)
        kept = topk_indices(group_score, cfg.topk_group)
        mask = np.ones(cfg.n_group, dtype=bool)
        mask[kept] = False
        c = np.where(np.repeat(mask, e // cfg.n_group), -np.inf, c)
    k = cfg.num_experts_per_tok
    idx = topk_indices(c, k)
    if not np.all(np.isfinite(c[idx])):
        raise ValueError("fewer than num_experts_per_tok experts in the kept groups")
    w = s[idx]
    if cfg.norm_topk_prob and k > 1:
        w = w / (w.sum() + 1e-20)
    return idx, w * cfg.routed_scaling_factor


class Model:
    def __init__(self, ckpt, lm_head_fp8=False):
        self.ck = ckpt
        self.cfg = Config(ckpt.config)
        self.lm_head_fp8 = lm_head_fp8

    def w(self, name):
        return self.ck.weight(name)

    def head(self):
        """The lm_head (the tied embedding where there is none), FP8-quantised if asked."""
        name = "lm_head.weight"
        if not self.ck.has(name) and self.cfg.tie_word_embeddings:
            name = "model.embed_tokens.weight"
        if self.lm_head_fp8 and self.ck.dtype(name) != "F8_E4M3":
            return fp8_block_quantize(self.w(name))
        return self.w(name)

    def attention(self, x, p, positions):
        """MLA, naive form (spec 5.4). x: [T, D] -> [T, D]."""
        cfg = self.cfg
        t, h, dn, dr, dv, c = x.shape[0], cfg.num_heads, cfg.dn, cfg.dr, cfg.dv, cfg.kv_lora_rank
        dq = dn + dr
        eps = cfg.rms_norm_eps
        if cfg.q_lora_rank is None:
            q = x @ self.w(p + "q_proj.weight").T
        else:
            cq = rms_norm(x @ self.w(p + "q_a_proj.weight").T, self.w(p + "q_a_layernorm.weight"), eps)
            q = cq @ self.w(p + "q_b_proj.weight").T
        q = q.reshape(t, h, dq)                                          # [T, H, dq]
        inv_freq = rope_inv_freq(dr, cfg.rope_theta, cfg.rope)
        factor = rope_attention_factor(cfg.rope)
        q_nope = q[:, :, :dn]
        q_rope = apply_rope(q[:, :, dn:], positions, inv_freq, factor, cfg.rope_interleave)

        kv_a = x @ self.w(p + "kv_a_proj_with_mqa.weight").T             # [T, C + dr]
        c_kv = rms_norm(kv_a[:, :c], self.w(p + "kv_a_layernorm.weight"), eps)
        k_rope = apply_rope(kv_a[:, c:], positions, inv_freq, factor, cfg.rope_interleave)  # [T, dr]
        kv = (c_kv @ self.w(p + "kv_b_proj.weight").T).reshape(t, h, dn + dv)
        k_nope, v = kv[:, :, :dn], kv[:, :, dn:]

        scale = softmax_scale(dq, cfg.rope)
        scores = (np.einsum("shd,thd->hst", q_nope, k_nope)
                  + np.einsum("shd,td->hst", q_rope, k_rope)) * scale     # [H, T, T]
        causal = np.triu(np.ones((t, t), dtype=bool), k=1)
        scores = np.where(causal[None, :, :], -np.inf, scores)
        scores = scores - scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        o = np.einsum("hst,thd->shd", probs, v).reshape(t, h * dv)
        return o @ self.w(p + "o_proj.weight").T

    def attention_absorbed(self, x, p, pos, cache):
        """MLA, absorbed decode form (spec 5.5) for one token at `pos`; used by the self-test to
        cross-check attention(). cache: list of (c_kv [C], k_rope [dr]) of earlier tokens."""
        cfg = self.cfg
        h, dn, dr, dv, c = cfg.num_heads, cfg.dn, cfg.dr, cfg.dv, cfg.kv_lora_rank
        eps = cfg.rms_norm_eps
        if cfg.q_lora_rank is None:
            q = x @ self.w(p + "q_proj.weight").T
        else:
            cq = rms_norm(x @ self.w(p + "q_a_proj.weight").T, self.w(p + "q_a_layernorm.weight"), eps)
            q = cq @ self.w(p + "q_b_proj.weight").T
        q = q.reshape(1, h, dn + dr)
        inv_freq = rope_inv_freq(dr, cfg.rope_theta, cfg.rope)
        factor = rope_attention_factor(cfg.rope)
        at = np.array([pos])
        q_rope = apply_rope(q[:, :, dn:], at, inv_freq, factor, cfg.rope_interleave)[0]     # [H, dr]
        kv_a = x @ self.w(p + "kv_a_proj_with_mqa.weight").T
        cache.append((rms_norm(kv_a[:c], self.w(p + "kv_a_layernorm.weight"), eps),
                      apply_rope(kv_a[None, c:], at, inv_freq, factor, cfg.rope_interleave)[0]))
        w_kvb = self.w(p + "kv_b_proj.weight").reshape(h, dn + dv, c)
        w_uk, w_uv = w_kvb[:, :dn, :], w_kvb[:, dn:, :]
        q_abs = np.einsum("hd,hdc->hc", q[0, :, :dn], w_uk)                                 # [H, C]
        lat = np.stack([e[0] for e in cache])                                               # [S, C]
        rope = np.stack([e[1] for e in cache])                                              # [S, dr]
        scores = (q_abs @ lat.T + q_rope @ rope.T) * softmax_scale(dn + dr, cfg.rope)        # [H, S]
        probs = np.exp(scores - scores.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        o = np.einsum("hvc,hc->hv", w_uv, probs @ lat).reshape(h * dv)
        return o @ self.w(p + "o_proj.weight").T

    def decode_logits(self, tokens):
        """Token-by-token logits with the absorbed form and a latent cache (self-test only)."""
        cfg, eps = self.cfg, self.cfg.rms_norm_eps
        caches = [[] for _ in range(cfg.num_hidden_layers)]
        rows = []
        for pos, tok in enumerate(tokens):
            h = self.w("model.embed_tokens.weight")[tok]
            for n in range(cfg.num_hidden_layers):
                p = "model.layers.%d." % n
                h = h + self.attention_absorbed(rms_norm(h, self.w(p + "input_layernorm.weight"), eps),
                                                p + "self_attn.", pos, caches[n])
                x = rms_norm(h, self.w(p + "post_attention_layernorm.weight"), eps)[None, :]
                h = h + (self.moe(x, p + "mlp.") if cfg.is_moe(n) else self.dense_mlp(x, p + "mlp."))[0]
            rows.append(rms_norm(h, self.w("model.norm.weight"), eps) @ self.head().T)
        return np.stack(rows)

    def dense_mlp(self, x, p):
        return mlp(x, self.w(p + "gate_proj.weight"), self.w(p + "up_proj.weight"),
                   self.w(p + "down_proj.weight"))

    def moe(self, x, p):
        """MoE layer (spec 5.7): routed experts weighted by the router plus shared experts."""
        cfg = self.cfg
        gate = self.w(p + "gate.weight")
        bias_name = p + "gate.e_score_correction_bias"
        bias = self.w(bias_name) if cfg.topk_method == "noaux_tc" and self.ck.has(bias_name) else None
        logits = x @ gate.T                                               # [T, E]
        out = np.zeros_like(x)
        experts = {}
        for t in range(x.shape[0]):
            idx, wts = route(logits[t], bias, cfg)
            for e, wt in zip(idx, wts):
                if e not in experts:
                    ep = p + "experts.%d." % e
                    experts[e] = (self.w(ep + "gate_proj.weight"), self.w(ep + "up_proj.weight"),
                                  self.w(ep + "down_proj.weight"))
                out[t] += wt * mlp(x[t:t + 1], *experts[e])[0]
        if cfg.n_shared_experts:
            out += self.dense_mlp(x, p + "shared_experts.")
        return out

    def forward(self, tokens):
        """Full-prefill logits [T, V] in float64 for token ids at positions 0..T-1 (spec 5.1)."""
        cfg = self.cfg
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.min() < 0 or tokens.max() >= cfg.vocab_size:
            raise ValueError("token ids must lie in [0, %d)" % cfg.vocab_size)
        positions = np.arange(tokens.shape[0])
        h = self.w("model.embed_tokens.weight")[tokens]
        eps = cfg.rms_norm_eps
        for n in range(cfg.num_hidden_layers):
            p = "model.layers.%d." % n
            h = h + self.attention(rms_norm(h, self.w(p + "input_layernorm.weight"), eps),
                                   p + "self_attn.", positions)
            x = rms_norm(h, self.w(p + "post_attention_layernorm.weight"), eps)
            h = h + (self.moe(x, p + "mlp.") if cfg.is_moe(n) else self.dense_mlp(x, p + "mlp."))
        return rms_norm(h, self.w("model.norm.weight"), eps) @ self.head().T


# ----------------------------------------------------------------------------------------------
# Comparison


def compare(ref, other, atol, rtol, min_agree):
    """Prints the differences between `ref` (this file) and `other`; returns True when within."""
    if other.shape != ref.shape:
        print("FAIL: shape %s, reference %s" % (other.shape, ref.shape))
        return False
    other = other.astype(np.float64)
    if not np.all(np.isfinite(other)):
        print("FAIL: %d non-finite values" % np.count_nonzero(~np.isfinite(other)))
        return False
    diff = np.abs(other - ref)
    row_max = np.maximum(np.abs(ref).max(axis=1), 1e-30)
    rel_rows = diff.max(axis=1) / row_max
    ref_arg, oth_arg = ref.argmax(axis=1), other.argmax(axis=1)
    agree = ref_arg == oth_arg
    # A row "agrees up to a near-tie" when the other side's pick is within atol of the best.
    near = ref[np.arange(ref.shape[0]), oth_arg] >= ref.max(axis=1) - atol
    max_abs = float(diff.max())
    print("shape %s, max |ref| = %.6g" % (ref.shape, float(np.abs(ref).max())))
    print("max abs diff        = %.6g  (tolerance %.6g)" % (max_abs, atol))
    print("max rel diff (row)  = %.6g%s" % (float(rel_rows.max()),
                                             "  (tolerance %.6g)" % rtol if rtol else ""))
    print("mean abs diff       = %.6g" % float(diff.mean()))
    print("argmax agree        = %d / %d rows (%d counting near-ties)%s"
          % (int(agree.sum()), agree.size, int((agree | near).sum()),
             "  (need >= %.0f%%)" % (100 * min_agree) if min_agree else ""))
    for t in range(ref.shape[0]):
        print("  row %2d: ref argmax %6d other %6d %s  max abs diff %.3g"
              % (t, ref_arg[t], oth_arg[t], "ok " if agree[t] else ("tie" if near[t] else "DIFF"),
                 float(diff[t].max())))
    ok = max_abs <= atol
    if rtol:
        ok = ok and float(rel_rows.max()) <= rtol
    if min_agree:
        ok = ok and agree.mean() >= min_agree
    print("PASS" if ok else "FAIL")
    return ok


# ----------------------------------------------------------------------------------------------
# Self-test: the spec's worked numbers plus small hand-checked pieces


def write_random_model(d, q_lora_rank, seed):
    """A 3-layer random checkpoint (1 dense + 2 MoE layers, BF16 + FP8 with 16x16 blocks, an
    ignored MTP layer) for the self-test."""
    rng = np.random.default_rng(seed)
    cfg = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3,
           "num_attention_heads": 2, "q_lora_rank": q_lora_rank, "kv_lora_rank": 16,
           "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": 8,
           "moe_intermediate_size": 16, "n_shared_experts": 1, "num_experts_per_tok": 2,
           "n_group": 4, "topk_group": 2, "routed_scaling_factor": 2.5, "norm_topk_prob": True,
           "scoring_func": "sigmoid", "topk_method": "noaux_tc", "first_k_dense_replace": 1,
           "moe_layer_freq": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000,
           "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                            "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
           "hidden_act": "silu", "tie_word_embeddings": False,
           "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                   "weight_block_size": [16, 16]}}
    small = np.array([b for b in range(256) if abs(FP8_E4M3_TABLE[b]) <= 4.0], dtype=np.uint8)
    tensors = {}

    def bf16(name, shape, std, offset=0.0):
        x = (rng.standard_normal(shape) * std + offset).astype("<f4")
        tensors[name] = ("BF16", shape, (x.view("<u4") >> 16).astype("<u2").tobytes())

    def fp8(name, shape):
        tensors[name] = ("F8_E4M3", shape, rng.choice(small, size=shape).tobytes())
        sshape = [-(-shape[0] // 16), -(-shape[1] // 16)]
        scale = rng.uniform(0.5, 1.5, sshape) / (2.0 * math.sqrt(shape[1]))
        tensors[name + "_scale_inv"] = ("F32", sshape, scale.astype("<f4").tobytes())

    D, H, I, Im, E, C = 32, 2, 48, 16, 8, 16
    bf16("model.embed_tokens.weight", [64, D], 1.0)
    bf16("model.norm.weight", [D], 0.1, 1.0)
    bf16("lm_head.weight", [64, D], D ** -0.5)
    for n in range(4):                                   # layer 3 = MTP, must be ignored
        p = "model.layers.%d." % n
        bf16(p + "input_layernorm.weight", [D], 0.1, 1.0)
        bf16(p + "post_attention_layernorm.weight", [D], 0.1, 1.0)
        a = p + "self_attn."
        if q_lora_rank is None:
            bf16(a + "q_proj.weight", [H * 16, D], D ** -0.5)
        else:
            fp8(a + "q_a_proj.weight", [q_lora_rank, D])
            bf16(a + "q_a_layernorm.weight", [q_lora_rank], 0.1, 1.0)
            fp8(a + "q_b_proj.weight", [H * 16, q_lora_rank])
        fp8(a + "kv_a_proj_with_mqa.weight", [C + 8, D])          # 24 rows: a partial block
        bf16(a + "kv_a_layernorm.weight", [C], 0.1, 1.0)
        fp8(a + "kv_b_proj.weight", [H * 16, C])
        fp8(a + "o_proj.weight", [D, H * 8])
        m = p + "mlp."
        if n == 0:
            fp8(m + "gate_proj.weight", [I, D])
            fp8(m + "up_proj.weight", [I, D])
            fp8(m + "down_proj.weight", [D, I])
            continue
        bf16(m + "gate.weight", [E, D], 3 * D ** -0.5)
        tensors[m + "gate.e_score_correction_bias"] = (
            "F32", [E], (rng.standard_normal(E) * 0.3).astype("<f4").tobytes())
        for e in ["experts.%d." % i for i in range(E)] + ["shared_experts."]:
            fp8(m + e + "gate_proj.weight", [Im, D])
            fp8(m + e + "up_proj.weight", [Im, D])
            fp8(m + e + "down_proj.weight", [D, Im])
    tensors["model.layers.3.eh_proj.weight"] = ("BF16", [2], b"\0" * 4)   # MTP-only name
    write_safetensors(os.path.join(d, "model.safetensors"), tensors)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)


def self_test():
    failures = []

    def check(what, got, want, tol=1e-6):
        got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
        ok = got.shape == want.shape and np.allclose(got, want, rtol=tol, atol=tol, equal_nan=True)
        print("%-4s %s: got %s, want %s" % ("ok" if ok else "FAIL", what,
                                           np.array2string(got, precision=10),
                                           np.array2string(want, precision=10)))
        if not ok:
            failures.append(what)

    # FP8 e4m3fn examples (spec 1.1).
    check("fp8 0x38 0xB8 0x01 0x7E", FP8_E4M3_TABLE[[0x38, 0xB8, 0x01, 0x7E]],
          [1.0, -1.0, 2.0 ** -9, 448.0], 0)
    check("fp8 0x08 (min normal), 0x07 (max subnormal)", FP8_E4M3_TABLE[[0x08, 0x07]],
          [2.0 ** -6, 7 / 8 * 2.0 ** -6], 0)
    check("fp8 0x7F, 0xFF are NaN", np.isnan(FP8_E4M3_TABLE[[0x7F, 0xFF]]), [True, True], 0)
    check("bf16 0x3F80 0xC040 0x3E20", decode(np.array([0x3F80, 0xC040, 0x3E20], "<u2").tobytes(),
                                              "BF16", [3]), [1.0, -3.0, 0.15625], 0)

    # Router worked example (spec 5.7).
    class R:
        scoring_func, n_group, topk_group, num_experts_per_tok = "sigmoid", 4, 2, 2
        norm_topk_prob, routed_scaling_factor = True, 2.5
    idx, w = route(np.array([0.0, 1.0, -1.0, 2.0, 0.5, 0.5, -2.0, 3.0]),
                   np.array([0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0, -0.9]), R)
    check("router experts", idx, [3, 2], 0)
    check("router weights", w, [1.915212, 0.584788], 1e-6)
    # Ties go to the lower index: equal logits, no bias, 1 group.
    R.n_group, R.topk_group = 1, 1
    idx, w = route(np.zeros(8), np.zeros(8), R)
    check("router ties -> lower ids", idx, [0, 1], 0)
    check("router tie weights", w, [1.25, 1.25])

    # softmax_scale and YaRN inv_freq (spec 5.3, 5.4, 7).
    v3 = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
          "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
    check("softmax_scale dq=24", softmax_scale(24, v3), 0.3824988883, 1e-9)
    check("softmax_scale dq=192 (V3)", softmax_scale(192, v3), 0.1352337789, 1e-9)
    check("softmax_scale without yarn", softmax_scale(192, {}), 192 ** -0.5, 1e-12)
    check("inv_freq dr=8", rope_inv_freq(8, 10000.0, v3), [1.0, 0.1, 5.125e-3, 2.5e-5], 1e-9)
    f = rope_inv_freq(64, 10000.0, v3)
    check("inv_freq V3 i=0,8,10,11,16,22,23,31", f[[0, 8, 10, 11, 16, 22, 23, 31]],
          [1.0, 0.1, 5.623413252e-2, 3.900692657e-2, 5.5e-3, 1.778279410e-4,
           3.333803580e-5, 3.333803580e-6], 1e-9)
    check("V3 cos/sin factor", rope_attention_factor(v3), 1.0, 1e-12)
    check("cos/sin factor without mscale_all_dim",
          rope_attention_factor({"type": "yarn", "factor": 40, "mscale": 1.0}),
          1 + 0.1 * math.log(40), 1e-12)

    # Interleaved RoPE: pair (2i, 2i+1) rotated by p * inv_freq[i].
    x = np.array([[1.0, 0.0, 0.0, 2.0]])
    got = apply_rope(x, np.array([3]), np.array([0.5, 0.25]), 1.0)
    check("rope interleaved", got, [[math.cos(1.5), math.sin(1.5),
                                     -2 * math.sin(0.75), 2 * math.cos(0.75)]], 1e-12)

    # RMSNorm by hand: x = [3, 4] -> rms = sqrt(12.5).
    check("rms_norm", rms_norm(np.array([3.0, 4.0]), np.array([1.0, 2.0]), 0.0),
          [3 / math.sqrt(12.5), 8 / math.sqrt(12.5)], 1e-12)

    # Block dequant with partial edge blocks (block 2x2 on a 3x3 weight).
    q = np.arange(9, dtype=np.float64).reshape(3, 3)
    s = np.array([[1.0, 10.0], [100.0, 1000.0]])
    check("block dequant partial", block_dequant(q, s, (2, 2)),
          [[0, 1, 20], [3, 4, 50], [600, 700, 8000]], 0)

    # FP8 rounding: ties to even, subnormal steps of 2^-9, saturation at 448 (spec 1.1).
    check("fp8 round", fp8_e4m3_round(np.array(
        [1.0625, 1.1875, 1.07, -300.0, 460.0, 1e6, 3 * 2.0 ** -10, 2.0 ** -10, 0.3, -0.0])),
        [1.0, 1.25, 1.125, -288.0, 448.0, 448.0, 2.0 ** -8, 0.0, 0.3125, 0.0], 0)
    # Block quantisation: 3x3 in 2x2 blocks; each block's largest magnitude lands on 448 * scale.
    wq = np.array([[448.0, -1.0, 0.0], [3.0, 10.0, 0.0], [0.0, 0.0, -0.001]])
    check("fp8 block quantize", fp8_block_quantize(wq, (2, 2)),
          [[448.0, -1.0, 0.0], [3.0, 10.0, 0.0], [0.0, 0.0, -0.001]], 1e-9)   # f32 0.001
    check("fp8 block quantize rounds", fp8_block_quantize(np.array([[448.0, 9.0], [17.0, 1.0]]), (2, 2)),
          [[448.0, 9.0], [16.0, 1.0]], 0)

    # safetensors round trip across two shards, an index, FP8 + scale in different shards.
    with tempfile.TemporaryDirectory() as d:
        fp8 = np.array([[0x38, 0xB8, 0x01], [0x7E, 0x40, 0x30]], dtype=np.uint8)   # 0x40 = 2, 0x30 = 0.5
        write_safetensors(os.path.join(d, "a.safetensors"), {
            "w.weight": ("F8_E4M3", [2, 3], fp8.tobytes()),
            "b": ("BF16", [2], np.array([0x3F80, 0x4000], "<u2").tobytes())})
        write_safetensors(os.path.join(d, "b.safetensors"), {
            "w.weight_scale_inv": ("F32", [1, 2], np.array([[2.0, -1.0]], "<f4").tobytes())})
        with open(os.path.join(d, "config.json"), "w") as fh:
            json.dump({"quantization_config": {"weight_block_size": [2, 2]}}, fh)
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as fh:
            json.dump({"metadata": {}, "weight_map": {"w.weight": "a.safetensors", "b": "a.safetensors",
                                                      "w.weight_scale_inv": "b.safetensors"}}, fh)
        ck = Checkpoint(d)
        check("safetensors fp8 + scale", ck.weight("w.weight"),
              [[2.0, -2.0, -(2.0 ** -9)], [896.0, 4.0, -0.5]], 0)
        check("safetensors bf16", ck.weight("b"), [1.0, 2.0], 0)

    # Absorbed MLA (spec 5.5) equals the naive scores this file uses: (W_UK^T q_nope) . c_kv.
    rng = np.random.default_rng(0)
    h, dn, dv, c = 2, 3, 4, 5
    kv_b = rng.standard_normal((h * (dn + dv), c))
    c_kv, q_nope = rng.standard_normal(c), rng.standard_normal((h, dn))
    k_nope = (kv_b @ c_kv).reshape(h, dn + dv)[:, :dn]
    w_uk = kv_b.reshape(h, dn + dv, c)[:, :dn, :]
    check("absorbed == naive q.k_nope", np.einsum("hd,hdc,c->h", q_nope, w_uk, c_kv),
          np.einsum("hd,hd->h", q_nope, k_nope), 1e-12)

    # A random tiny model: full prefill (naive MLA) == token-by-token absorbed decode, and a
    # prefix's logits do not depend on later tokens (causality).
    for q_lora in (16, None):
        with tempfile.TemporaryDirectory() as d:
            write_random_model(d, q_lora, seed=1)
            model = Model(Checkpoint(d))
            toks = [3, 60, 7, 7, 21, 0, 45]
            full = model.forward(toks)
            check("tiny model (q_lora_rank %s): prefill == absorbed decode" % q_lora,
                  np.abs(full - model.decode_logits(toks)).max(), 0.0, 1e-9)
            check("tiny model (q_lora_rank %s): causal prefix" % q_lora,
                  np.abs(full[:4] - model.forward(toks[:4])).max(), 0.0, 1e-12)

    print("self-test: %s" % ("PASS" if not failures else "FAIL (%s)" % ", ".join(failures)))
    return not failures


# ----------------------------------------------------------------------------------------------


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__ or "DeepSeek-V3 NumPy reference forward pass")
    ap.add_argument("--model", help="checkpoint directory (config.json + *.safetensors)")
    ap.add_argument("--tokens", help="comma-separated token ids, e.g. 1,2,3")
    ap.add_argument("--out", help="write the reference logits (float32 [T, V]) to this .npy")
    ap.add_argument("--compare", help="a .npy of logits [T, V] to check against the reference")
    ap.add_argument("--atol", type=float, help="max abs diff allowed (default: atol-rel * max(1, max|ref|))")
    ap.add_argument("--atol-rel", type=float, default=1e-3,
                    help="default atol as a multiple of max(1, max|ref|) (default 1e-3)")
    ap.add_argument("--rtol", type=float, default=0.0,
                    help="also fail if max over rows of max|diff| / max|ref row| exceeds this")
    ap.add_argument("--min-argmax-agree", type=float, default=0.0,
                    help="also fail if the fraction of rows with the same argmax is below this")
    ap.add_argument("--self-test", action="store_true", help="check the spec's worked numbers")
    ap.add_argument("--lm-head-fp8", action="store_true",
                    help="block-quantise a non-FP8 lm_head to FP8 E4M3 (128x128) first")
    args = ap.parse_args(argv)

    if args.self_test:
        ok = self_test()
        if not args.model:
            return 0 if ok else 1
    else:
        ok = True
    if not args.model or not args.tokens:
        ap.error("--model and --tokens are required (or --self-test alone)")
    tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    logits = Model(Checkpoint(args.model), lm_head_fp8=args.lm_head_fp8).forward(tokens)
    if args.out:
        np.save(args.out, logits.astype(np.float32))
    if args.compare:
        atol = args.atol if args.atol is not None else args.atol_rel * max(1.0, float(np.abs(logits).max()))
        ok = compare(logits, np.load(args.compare), atol, args.rtol, args.min_argmax_agree) and ok
    elif not args.out:
        print("last-row argmax %d" % int(logits[-1].argmax()))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
