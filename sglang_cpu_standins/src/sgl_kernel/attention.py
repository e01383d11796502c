"""CPU test stand-ins, not SGLang kernels; never for measurement: torch.ops.sgl_kernel.{extend,decode}_attention_cpu as reference softmax attention over the paged KV cache.

The schemas follow the argument lists SGLang 0.5.23's intel_amx backend passes
(sglang/srt/layers/attention/intel_amx_backend.py). GQA, logit cap, causal and tree (QLEN_ONLY / FULL_MASK) masks are
supported; sliding window, attention sinks, cross-attention and encoder lengths raise NotImplementedError.
"""

from __future__ import annotations

from typing import Optional

import torch

OPS = ("extend_attention_cpu", "decode_attention_cpu")

EXTEND_SCHEMA = (
    "extend_attention_cpu(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, Tensor(a!) o_extend, "
    "Tensor k_buffer, Tensor v_buffer, float key_scale, float value_scale, Tensor req_to_token, "
    "Tensor req_pool_indices, Tensor seq_lens, Tensor extend_seq_lens, Tensor extend_start_loc, "
    "int? max_len_extend, float sm_scale, float logit_cap, bool is_cross_attention, int sliding_window_size, "
    "Tensor? encoder_lens, Tensor? sinks, Tensor? tree_mask, bool is_causal) -> ()"
)
DECODE_SCHEMA = (
    "decode_attention_cpu(Tensor query, Tensor(a!) k_buffer, Tensor(b!) v_buffer, float key_scale, "
    "float value_scale, Tensor(c!) output, Tensor? key, Tensor? value, Tensor loc, Tensor(d!) attn_logits, "
    "Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, float sm_scale, float logit_cap, "
    "bool is_cross_attention, int sliding_window_size, Tensor? encoder_lens, Tensor? sinks) -> ()"
)


def _unsupported(sliding_window_size: int, is_cross_attention: bool, encoder_lens, sinks) -> None:
    # SGLang passes layer.sliding_window_size + 1, so 0 (from -1) means no window.
    if sliding_window_size > 0:
        raise NotImplementedError("sliding-window attention is not supported by the CPU test stand-in")
    if is_cross_attention or encoder_lens is not None:
        raise NotImplementedError("cross-attention / encoder lengths are not supported by the CPU test stand-in")
    if sinks is not None:
        raise NotImplementedError("attention sinks are not supported by the CPU test stand-in")


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sm_scale: float, logit_cap: float, allowed: Optional[torch.Tensor]) -> torch.Tensor:
    """q [Lq, Hq, D], k [Lk, Hkv, D], v [Lk, Hkv, Dv] (float32), allowed [Lq, Lk] bool or None -> [Lq, Hq, Dv]."""
    hq, hkv = q.shape[1], k.shape[1]
    group = hq // hkv
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) * sm_scale
    if logit_cap > 0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    if allowed is not None:
        scores = scores.masked_fill(~allowed.unsqueeze(0), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, v)


def extend_attention_cpu(
    q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, key_scale, value_scale, req_to_token,
    req_pool_indices, seq_lens, extend_seq_lens, extend_start_loc, max_len_extend, sm_scale, logit_cap,
    is_cross_attention, sliding_window_size, encoder_lens, sinks, tree_mask, is_causal,
) -> None:
    """Each request's extend tokens attend to its prefix (from the cache) and to its extend tokens (causal or tree mask)."""
    _unsupported(sliding_window_size, is_cross_attention, encoder_lens, sinks)
    bs = seq_lens.shape[0]
    sls = [int(x) for x in seq_lens.tolist()]
    els = [int(x) for x in extend_seq_lens.tolist()]
    starts = [int(x) for x in extend_start_loc.tolist()]
    rpis = [int(x) for x in req_pool_indices.tolist()]
    qlen_only = tree_mask is not None and tree_mask.numel() == sum(e * e for e in els)
    full_mask_offset = 0
    for b in range(bs):
        sl, el, st = sls[b], els[b], starts[b]
        if el == 0:
            continue
        prefix = sl - el
        slots = req_to_token[rpis[b], :sl].long()
        k_all = k_buffer[slots].float() * key_scale
        v_all = v_buffer[slots].float() * value_scale
        if k_extend is not None and v_extend is not None:
            k_all[prefix:] = k_extend[st : st + el].float()
            v_all[prefix:] = v_extend[st : st + el].float()
        q = q_extend[st : st + el].float()
        allowed = torch.ones((el, sl), dtype=torch.bool)
        if tree_mask is not None:
            if qlen_only:
                off = sum(e * e for e in els[:b])
                allowed[:, prefix:] = tree_mask.view(-1)[off : off + el * el].view(el, el)
            else:
                allowed[:, :] = tree_mask.view(-1)[full_mask_offset : full_mask_offset + el * sl].view(el, sl)
        elif is_causal:
            allowed[:, prefix:] = torch.ones((el, el), dtype=torch.bool).tril()
        full_mask_offset += el * sl
        o_extend[st : st + el] = _attend(q, k_all, v_all, sm_scale, logit_cap, allowed).to(o_extend.dtype)


def decode_attention_cpu(
    query, k_buffer, v_buffer, key_scale, value_scale, output, key, value, loc, attn_logits, req_to_token,
    req_pool_indices, seq_lens, sm_scale, logit_cap, is_cross_attention, sliding_window_size, encoder_lens, sinks,
) -> None:
    """Store the new token's K/V at loc (when given), then one query per request attends to its seq_len cached tokens."""
    _unsupported(sliding_window_size, is_cross_attention, encoder_lens, sinks)
    if key is not None and value is not None:
        idx = loc.long()
        k_buffer[idx] = key.view(idx.shape[0], *k_buffer.shape[1:]).to(k_buffer.dtype)
        v_buffer[idx] = value.view(idx.shape[0], *v_buffer.shape[1:]).to(v_buffer.dtype)
    sls = [int(x) for x in seq_lens.tolist()]
    rpis = [int(x) for x in req_pool_indices.tolist()]
    for b, (sl, r) in enumerate(zip(sls, rpis)):
        slots = req_to_token[r, :sl].long()
        k = k_buffer[slots].float() * key_scale
        v = v_buffer[slots].float() * value_scale
        out = _attend(query[b : b + 1].float(), k, v, sm_scale, logit_cap, None)
        output[b : b + 1] = out.to(output.dtype)


_lib = torch.library.Library("sgl_kernel", "FRAGMENT")
_lib.define(EXTEND_SCHEMA)
_lib.define(DECODE_SCHEMA)
_lib.impl("extend_attention_cpu", extend_attention_cpu, "CPU")
_lib.impl("decode_attention_cpu", decode_attention_cpu, "CPU")
