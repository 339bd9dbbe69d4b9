"""A slow, readable NumPy reference of XLNet, written from the equations (xlnet-facts.md).

Independent of trainer/: it reads weights by their ORIGINAL TF1 names, works one example at a
time in float64, computes every relative distance (mlen + i) - j explicitly (no rel_shift), and
runs the query stream the way the original does: queries placed at all L positions through
target_mapping, attention with perm_mask rows, mapped back to the P rows.
"""
from __future__ import annotations

import numpy as np

T = "model/transformer"


def layer_norm(x, gamma, beta, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def sinusoid(distance, d_model):
    inv_freq = 1.0 / (10000.0 ** (np.arange(0, d_model, 2.0) / d_model))
    angles = np.asarray(distance, np.float64)[..., None] * inv_freq
    return np.concatenate([np.sin(angles), np.cos(angles)], -1)


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def random_weights(cfg, seed=0, scale=0.3):
    """Original-named weights with values large enough that every term of the score matters."""
    rng = np.random.default_rng(seed)
    n, nh, dh, d, di, v = cfg["n_layer"], cfg["n_head"], cfg["d_head"], cfg["d_model"], cfg["d_inner"], cfg["vocab"]
    bias_shape = [n, nh, dh] if cfg["untie_r"] else [nh, dh]
    w = {f"{T}/word_embedding/lookup_table": rng.normal(0, 1, [v, d]),
         f"{T}/mask_emb/mask_emb": rng.normal(0, 1, [1, 1, d]),
         f"{T}/r_w_bias": rng.normal(0, scale, bias_shape), f"{T}/r_r_bias": rng.normal(0, scale, bias_shape),
         f"{T}/r_s_bias": rng.normal(0, scale, bias_shape), f"{T}/seg_embed": rng.normal(0, scale, [n, 2, nh, dh]),
         "model/lm_loss/bias": rng.normal(0, scale, [v])}
    for i in range(n):
        p = f"{T}/layer_{i}"
        for name in "qkvro":
            w[f"{p}/rel_attn/{name}/kernel"] = rng.normal(0, scale, [d, nh, dh])
        for ln in ("rel_attn", "ff"):
            w[f"{p}/{ln}/LayerNorm/gamma"] = 1.0 + rng.normal(0, 0.1, [d])
            w[f"{p}/{ln}/LayerNorm/beta"] = rng.normal(0, 0.1, [d])
        w[f"{p}/ff/layer_1/kernel"] = rng.normal(0, scale, [d, di])
        w[f"{p}/ff/layer_1/bias"] = rng.normal(0, 0.1, [di])
        w[f"{p}/ff/layer_2/kernel"] = rng.normal(0, scale, [di, d])
        w[f"{p}/ff/layer_2/bias"] = rng.normal(0, 0.1, [d])
    return {k: val.astype(np.float32) for k, val in w.items()}


def attention(w, cfg, layer, queries, query_pos, keys_in, key_seg, query_seg, blocked, backward, mlen):
    """One example, one layer. queries [Q, D] at segment positions query_pos; keys_in [K, D] = [mem; h].

    Score(i, j) = ((q_i + r_w)·k_j + (q_i + r_r)·k_r(d_ij) + (q_i + r_s)·seg_embed[s_ij]) / sqrt(d_head)
    with d_ij = (mlen + pos_i) - j (negated for the backward half with bi_data, clamped to
    clamp_len), s_ij = 0 when the segments match, 1 otherwise. Blocked entries get -1e30.
    """
    p = f"{T}/layer_{layer}/rel_attn"
    bias = (lambda name: w[f"{T}/{name}"][layer]) if cfg["untie_r"] else (lambda name: w[f"{T}/{name}"])
    q = np.einsum("id,dnh->inh", queries, w[f"{p}/q/kernel"])
    k = np.einsum("jd,dnh->jnh", keys_in, w[f"{p}/k/kernel"])
    v = np.einsum("jd,dnh->jnh", keys_in, w[f"{p}/v/kernel"])
    distance = (mlen + np.asarray(query_pos))[:, None] - np.arange(keys_in.shape[0])[None, :]
    if backward:
        distance = -distance
    if cfg["clamp_len"] > 0:
        distance = np.clip(distance, -cfg["clamp_len"], cfg["clamp_len"])
    k_r = np.einsum("ijd,dnh->ijnh", sinusoid(distance, cfg["d_model"]), w[f"{p}/r/kernel"])
    ac = np.einsum("inh,jnh->nij", q + bias("r_w_bias"), k)
    bd = np.einsum("inh,ijnh->nij", q + bias("r_r_bias"), k_r)
    seg_terms = np.einsum("inh,snh->nis", q + bias("r_s_bias"), w[f"{T}/seg_embed"][layer])
    different = (np.asarray(query_seg)[:, None] != np.asarray(key_seg)[None, :]).astype(int)
    ef = np.take_along_axis(seg_terms, np.broadcast_to(different[None], ac.shape), axis=2)
    score = (ac + bd + ef) / np.sqrt(cfg["d_head"])
    score = score - 1e30 * blocked[None]
    prob = softmax(score)
    return np.einsum("nij,jnh->inh", prob, v)


def post_attention(w, layer, residual, attn_vec):
    p = f"{T}/layer_{layer}/rel_attn"
    out = np.einsum("inh,dnh->id", attn_vec, w[f"{p}/o/kernel"])
    return layer_norm(out + residual, w[f"{p}/LayerNorm/gamma"], w[f"{p}/LayerNorm/beta"])


def feed_forward(w, cfg, layer, x):
    p = f"{T}/layer_{layer}/ff"
    act = gelu_tanh if cfg["ff_activation"] == "gelu" else (lambda a: np.maximum(a, 0))
    inner = act(x @ w[f"{p}/layer_1/kernel"] + w[f"{p}/layer_1/bias"])
    out = inner @ w[f"{p}/layer_2/kernel"] + w[f"{p}/layer_2/bias"]
    return layer_norm(out + x, w[f"{p}/LayerNorm/gamma"], w[f"{p}/LayerNorm/beta"])


def forward(w, cfg, input_ids, segment_ids, perm_mask=None, target_mapping=None, mems=None):
    """Returns dict(content [B, L, D], query [B, P, D] or None, logits [B, P, V] or None, new_mems).

    cfg keys: n_layer, d_model, n_head, d_head, d_inner, ff_activation, untie_r, vocab,
    attn_type, bi_data, clamp_len, mem_len, reuse_len.
    """
    w = {k: np.asarray(val, np.float64) for k, val in w.items()}
    batch, seq_len = np.shape(input_ids)
    mlen = 0 if mems is None else np.shape(mems[0])[1]
    table = w[f"{T}/word_embedding/lookup_table"]
    contents, queries, new_mems = [], [], [[] for _ in range(cfg["n_layer"])]
    for b in range(batch):
        backward = cfg["bi_data"] and b >= batch // 2
        h = table[np.asarray(input_ids[b])]
        key_seg = np.concatenate([np.zeros(mlen, int), np.asarray(segment_ids[b])])  # memory is segment 0
        # blocked[i, j] over keys [mem; current]: memory always visible.
        perm = np.zeros([seq_len, seq_len]) if perm_mask is None else np.asarray(perm_mask[b], np.float64)
        if cfg["attn_type"] == "uni":
            perm = np.maximum(perm, np.triu(np.ones([seq_len, seq_len]), k=1))
        query_blocked = np.concatenate([np.zeros([seq_len, mlen]), (perm > 0).astype(float)], 1)
        content_blocked = query_blocked.copy()
        content_blocked[np.arange(seq_len), mlen + np.arange(seq_len)] = 0.0  # content sees itself
        two_stream = target_mapping is not None
        if two_stream:
            tm = np.asarray(target_mapping[b], np.float64)  # [P, L]
            g = np.repeat(w[f"{T}/mask_emb/mask_emb"].reshape(1, -1), tm.shape[0], 0)
        for layer in range(cfg["n_layer"]):
            mem = None if mems is None else np.asarray(mems[layer][b], np.float64)
            if cfg["mem_len"] > 0:
                cur = h[:cfg["reuse_len"]] if cfg["reuse_len"] > 0 else h
                joined = cur if mem is None else np.concatenate([mem, cur], 0)
                new_mems[layer].append(joined[-cfg["mem_len"]:])
            keys_in = h if mem is None else np.concatenate([mem, h], 0)
            positions = np.arange(seq_len)
            attn_h = attention(w, cfg, layer, h, positions, keys_in, key_seg, segment_ids[b], content_blocked,
                               backward, mlen)
            new_h = feed_forward(w, cfg, layer, post_attention(w, layer, h, attn_h))
            if two_stream:
                # The original: queries mapped onto all L positions, attended there, mapped back.
                g_at_positions = tm.T @ g
                attn_g = attention(w, cfg, layer, g_at_positions, positions, keys_in, key_seg, segment_ids[b],
                                   query_blocked, backward, mlen)
                attn_g = np.einsum("pl,lnh->pnh", tm, attn_g)
                g = feed_forward(w, cfg, layer, post_attention(w, layer, g, attn_g))
            h = new_h
        contents.append(h)
        if two_stream:
            queries.append(g)
    result = {"content": np.stack(contents), "query": None, "logits": None,
              "new_mems": [np.stack(m) for m in new_mems] if cfg["mem_len"] > 0 else None}
    if queries:
        result["query"] = np.stack(queries)
        result["logits"] = result["query"] @ table.T + w["model/lm_loss/bias"]
    return result
