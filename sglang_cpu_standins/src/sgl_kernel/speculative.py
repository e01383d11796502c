"""CPU test stand-ins, not SGLang kernels; never for measurement: the speculative-decoding bookkeeping ops, ported from SGLang's Triton references as plain loops."""

from __future__ import annotations

import ctypes
from typing import Optional

import torch

# SGLang's TreeMaskMode values (sglang/kernels/ops/speculative/spec_tree.py).
FULL_MASK = 0
QLEN_ONLY = 1


def _ints(t: torch.Tensor) -> list[int]:
    return [int(x) for x in t.reshape(-1).tolist()]


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """req_to_token[rpi[i], start[i]:end[i]] <- the next end[i]-start[i] entries of out_cache_loc."""
    rows = req_to_token.view(-1, pool_len)
    pos = 0
    for r, s, e in zip(_ints(req_pool_indices), _ints(start_offset), _ints(end_offset)):
        n = e - s
        if n > 0:
            rows[r, s:e] = out_cache_loc[pos : pos + n].to(rows.dtype)
        pos += max(n, 0)


def assign_extend_cache_locs_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """out_cache_loc <- the concatenation of req_to_token[rpi[i], start[i]:end[i]]."""
    rows = req_to_token.reshape(-1, pool_len)
    pos = 0
    for r, s, e in zip(_ints(req_pool_indices), _ints(start_offset), _ints(end_offset)):
        n = e - s
        if n > 0:
            out_cache_loc[pos : pos + n] = rows[r, s:e].to(out_cache_loc.dtype)
        pos += max(n, 0)


def assign_draft_cache_locs_contiguous_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
    topk: int,
    num_steps: int,
) -> None:
    """out[i*n:(i+1)*n] <- req_to_token[rpi[i], seq_lens[i]:seq_lens[i]+n] with n = topk * num_steps."""
    rows = req_to_token.reshape(-1, pool_len)
    n = topk * num_steps
    for i, (r, s) in enumerate(zip(_ints(req_pool_indices), _ints(seq_lens))):
        out_cache_loc[i * n : (i + 1) * n] = rows[r, s : s + n].to(out_cache_loc.dtype)


def fill_bonus_tokens_cpu(
    accept_tokens: torch.Tensor, accept_lens: torch.Tensor, bonus_tokens: torch.Tensor, accept_stride: int
) -> None:
    """bonus[i] <- accept_tokens.flat[accept_stride*i + accept_lens[i] - 1] (the last accepted slot)."""
    flat = accept_tokens.reshape(-1)
    for i, n in enumerate(_ints(accept_lens)):
        bonus_tokens[i] = flat[accept_stride * i + n - 1]


def fill_accept_out_cache_loc_cpu(
    accept_index: torch.Tensor, out_cache_loc: torch.Tensor, accept_out_cache_loc: torch.Tensor
) -> None:
    """Compact out_cache_loc[accept_index[j]] for every accept_index[j] != -1, in order."""
    dst = 0
    for src in _ints(accept_index):
        if src > -1:
            accept_out_cache_loc[dst] = out_cache_loc[src]
            dst += 1


def rotate_input_ids_cpu(
    input_ids: torch.Tensor,
    extend_start_loc: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    topk_index: torch.Tensor,
    select_index: Optional[torch.Tensor] = None,
) -> None:
    """Shift each request's extend ids left by one and write its new token at the last (or select_index) slot."""
    starts, lens, new = _ints(extend_start_loc), _ints(extend_seq_lens), _ints(topk_index)
    sel = _ints(select_index) if select_index is not None else None
    for i, (s, n) in enumerate(zip(starts, lens)):
        if n > 1:
            input_ids[s : s + n - 1] = input_ids[s + 1 : s + n].clone()
        if n > 0:
            last = sel[i] if sel is not None else s + n - 1
            input_ids[last] = new[i]


def build_draft_decode_metadata_cpu(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    topk: int,
    num_steps: int,
    pool_len: int,
) -> torch.Tensor:
    """A req_to_token table for the draft decode steps: row b*topk+tk = req_to_token[rpi[b], :sl] ++ branch tk's draft slots.

    Branch tk's slots are req_to_token[rpi[b], sl + tk*num_steps : sl + (tk+1)*num_steps] (page size 1), the layout of
    SGLang's generate_draft_decode_kv_indices; rows are pool_len wide so the kernels' row stride stays size(1).
    """
    rows = req_to_token.reshape(-1, pool_len)
    sls = _ints(seq_lens)
    out = torch.zeros((len(sls) * topk, pool_len), dtype=req_to_token.dtype, device=req_to_token.device)
    for b, (r, sl) in enumerate(zip(_ints(req_pool_indices), sls)):
        for tk in range(topk):
            row = out[b * topk + tk]
            row[:sl] = rows[r, :sl]
            lo = sl + tk * num_steps
            n = min(num_steps, pool_len - sl, pool_len - lo)
            row[sl : sl + n] = rows[r, lo : lo + n]
    return out


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor, src_loc: torch.Tensor
) -> None:
    """For every layer buffer (raw base address, bytes per token slot): slot src_loc[i] -> slot tgt_loc[i].

    All source slots of a buffer are read before any is written, as the Triton kernel's tile does (safe in place).
    """
    src, tgt = _ints(src_loc), _ints(tgt_loc)
    for base, stride in zip(_ints(data_ptrs), _ints(strides)):
        saved = [ctypes.string_at(base + s * stride, stride) for s in src]
        for t, data in zip(tgt, saved):
            ctypes.memmove(base + t * stride, data, stride)


def build_tree_kernel_efficient_cpu(
    parent_list: torch.Tensor,
    selected_index: torch.Tensor,
    verified_seq_len: torch.Tensor,
    tree_mask: torch.Tensor,
    positions: torch.Tensor,
    retrieve_index: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    topk: int,
    depth: int,
    draft_token_num: int,
    tree_mask_mode: int,
) -> None:
    """The EAGLE tree builder: positions, retrieve index / next-token / next-sibling links and the tree mask.

    A port of sgl_build_tree_kernel_efficient_triton (spec_tree.py), one batch row at a time. FULL_MASK and
    QLEN_ONLY layouts; QLEN_ONLY_BITPACKING raises like the Triton reference.
    """
    mode = int(tree_mask_mode)
    if mode not in (FULL_MASK, QLEN_ONLY):
        raise NotImplementedError(f"tree_mask_mode {mode} is not supported by the CPU test stand-in")
    n = draft_token_num
    bs = verified_seq_len.shape[0]
    seq_lens = _ints(verified_seq_len)
    parents = parent_list.reshape(bs, -1).tolist()
    selected = selected_index.reshape(bs, -1).tolist()
    mask = tree_mask.view(-1)
    pos = positions.view(-1)
    r_index = retrieve_index.view(-1)
    r_next = retrieve_next_token.view(-1)
    r_sib = retrieve_next_sibling.view(-1)
    prefix_sum = 0
    for b in range(bs):
        seq_len = seq_lens[b]
        sel, par = selected[b], parents[b]
        seq_tree_idx = n * n * b + prefix_sum * n
        pos[b * n] = seq_len
        for i in range(n - 1, 0, -1):
            r_index[b * n + i] = b * n + i
            parent_tb = int(sel[i - 1]) // topk
            parent_position, found = 0, parent_tb == 0
            if not found:
                parent_token = int(par[parent_tb])
                for pp in range(n - 1):
                    if int(sel[pp]) == parent_token:
                        parent_position, found = pp + 1, True
                        break
            if found:
                nxt = int(r_next[b * n + parent_position])
                r_next[b * n + parent_position] = i
                if nxt != -1:
                    r_sib[b * n + i] = nxt
        r_index[b * n] = b * n
        for x in range(n):
            if mode == FULL_MASK:
                tok = seq_tree_idx + (seq_len + n) * x + seq_len + 1
            else:
                tok = n * n * b + n * x + 1
            mask[tok - 1] = True
            mask[tok : tok + n - 1] = False
            if x == 0:
                continue
            cur, position = x - 1, 0
            for _ in range(depth):
                position += 1
                mask[tok + cur] = True
                parent_tb = int(sel[cur]) // topk
                if parent_tb == 0:
                    break
                parent_token = int(par[parent_tb])
                for cp in range(n - 1):
                    if int(sel[cp]) == parent_token:
                        cur = cp
                        break
                else:
                    break
            pos[b * n + x] = position + seq_len
        prefix_sum += seq_len


def verify_tree_greedy_cpu(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    target_predict: torch.Tensor,
) -> None:
    """Greedy tree verification: walk each request's draft tree, accepting children equal to the target's token.

    A port of verify_tree_greedy_kernel_triton (spec_tree.py); keyword names keep SGLang's ``retrive_*`` spelling.
    """
    bs, num_spec = accept_index.shape[0], accept_index.shape[1]
    n = candidates.shape[1]
    cand = candidates.reshape(bs, n).tolist()
    r_index = retrive_index.reshape(bs, n).tolist()
    r_next = retrive_next_token.reshape(bs, n).tolist()
    r_sib = retrive_next_sibling.reshape(bs, n).tolist()
    target = target_predict.reshape(-1)
    pred = predicts.view(-1)
    for b in range(bs):
        last = int(r_index[b][0])
        accept_index[b, 0] = last
        accepted, cur = 0, 0
        for _ in range(1, num_spec):
            cur = int(r_next[b][cur])
            target_token = int(target[last])
            matched = False
            while cur != -1:
                if int(cand[b][cur]) == target_token:
                    pred[last] = target_token
                    accepted += 1
                    accept_index[b, accepted] = int(r_index[b][cur])
                    last = int(r_index[b][cur])
                    matched = True
                    break
                cur = int(r_sib[b][cur])
            if not matched:
                break
        accept_token_num[b] = accepted
        pred[last] = target[last]
