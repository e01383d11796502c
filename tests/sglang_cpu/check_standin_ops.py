"""Compare every sgl_kernel CPU test stand-in with SGLang 0.5.23's own reference kernel on seeded random inputs.

Run with the SGLang venv's interpreter; prints one JSON object {check: {"ok": bool, "detail": str}}:
    <venv>/bin/python tests/sglang_cpu/check_standin_ops.py
The references are the Triton kernels shipped in the sglang wheel, run by Triton's CPU interpreter
(TRITON_INTERPRET=1, set here before triton loads), and SGLang's torch_native attention (SDPA).
"""

from __future__ import annotations

import json
import os
import sys
import traceback

os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")

import torch  # noqa: E402

SEED = 1234
CHECKS = {}


def check(fn):
    CHECKS[fn.__name__.removeprefix("check_")] = fn
    return fn


def _np2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _pool(gen, n_reqs=6, pool_len=48, n_slots=512):
    """A req_to_token table of distinct random slots (int32, as SGLang allocates it)."""
    perm = torch.randperm(n_slots, generator=gen)[: n_reqs * pool_len]
    return perm.view(n_reqs, pool_len).to(torch.int32)


@check
def check_assign_req_to_token_pool_cpu(gen):
    from sglang.srt.mem_cache.allocation import assign_req_to_token_pool
    from sgl_kernel import assign_req_to_token_pool_cpu

    r2t = _pool(gen)
    rpi = torch.tensor([4, 1, 3], dtype=torch.int64)
    start = torch.tensor([2, 0, 7], dtype=torch.int64)
    end = start + torch.tensor([5, 3, 40], dtype=torch.int64)
    out = torch.randint(1000, 2000, (int((end - start).sum()),), generator=gen, dtype=torch.int64)
    ref, got = r2t.clone(), r2t.clone()
    assign_req_to_token_pool[(3,)](rpi, ref, start, end, out, ref.shape[1], _np2(3))
    assign_req_to_token_pool_cpu(rpi, got, start, end, out, got.shape[1])
    return torch.equal(ref, got), "req_to_token rows written from out_cache_loc"


@check
def check_assign_extend_cache_locs_cpu(gen):
    from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs
    from sgl_kernel import assign_extend_cache_locs_cpu

    r2t = _pool(gen).to(torch.int64)
    rpi = torch.tensor([5, 0, 2, 3], dtype=torch.int64)
    start = torch.tensor([1, 9, 0, 30], dtype=torch.int64)
    end = start + torch.tensor([4, 4, 35, 1], dtype=torch.int64)
    n = int((end - start).sum())
    ref = torch.full((n,), -7, dtype=torch.int64)
    got = ref.clone()
    assign_extend_cache_locs[(4,)](rpi, r2t, start, end, ref, r2t.shape[1], _np2(4))
    assign_extend_cache_locs_cpu(rpi, r2t, start, end, got, r2t.shape[1])
    return torch.equal(ref, got), f"{n} gathered slots"


@check
def check_assign_draft_cache_locs_contiguous_cpu(gen):
    from sglang.kernels.ops.speculative.cache_locs import assign_draft_cache_locs_contiguous
    from sgl_kernel import assign_draft_cache_locs_contiguous_cpu

    r2t = _pool(gen).to(torch.int64)
    rpi = torch.tensor([3, 1, 4], dtype=torch.int64)
    seq_lens = torch.tensor([5, 17, 2], dtype=torch.int64)
    ok = True
    for topk, steps in ((1, 3), (2, 2), (4, 3)):
        ref = torch.full((3 * topk * steps,), -1, dtype=torch.int64)
        got = ref.clone()
        assign_draft_cache_locs_contiguous[(3,)](rpi, r2t, seq_lens, ref, r2t.shape[1], topk, steps)
        assign_draft_cache_locs_contiguous_cpu(rpi, r2t, seq_lens, got, r2t.shape[1], topk, steps)
        ok &= torch.equal(ref, got)
    return ok, "topk x steps in (1,3), (2,2), (4,3)"


@check
def check_fill_bonus_tokens_cpu(gen):
    from sglang.kernels.ops.speculative.eagle import fill_bonus_tokens
    from sgl_kernel import fill_bonus_tokens_cpu

    bs, stride = 5, 4
    tokens = torch.randint(0, 1000, (bs, stride), generator=gen, dtype=torch.int64)
    lens = torch.randint(1, stride + 1, (bs,), generator=gen, dtype=torch.int32)
    ref = torch.zeros(bs, dtype=torch.int64)
    got = ref.clone()
    fill_bonus_tokens[(bs,)](tokens, lens, ref, stride)
    fill_bonus_tokens_cpu(tokens, lens, got, stride)
    return torch.equal(ref, got), f"accept_lens {lens.tolist()}"


@check
def check_fill_accept_out_cache_loc_cpu(gen):
    from sglang.kernels.ops.speculative.eagle import fill_accept_out_cache_loc
    from sgl_kernel import fill_accept_out_cache_loc_cpu

    size = 12
    accept_index = torch.randint(0, size, (size,), generator=gen, dtype=torch.int32)
    accept_index[torch.rand(size, generator=gen) < 0.4] = -1
    out_cache_loc = torch.randint(100, 900, (size,), generator=gen, dtype=torch.int64)
    n = int((accept_index != -1).sum())
    ref = torch.full((n,), -5, dtype=torch.int64)
    got = ref.clone()
    fill_accept_out_cache_loc[(size,)](accept_index, out_cache_loc, ref, _np2(size))
    fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, got)
    return torch.equal(ref, got), f"{n} of {size} accepted"


@check
def check_rotate_input_ids_cpu(gen):
    from sglang.kernels.ops.speculative.multi_layer_eagle import rotate_input_ids_kernel
    from sgl_kernel import rotate_input_ids_cpu

    lens = torch.tensor([3, 1, 5, 2], dtype=torch.int64)
    starts = torch.cumsum(lens, 0) - lens
    topk_index = torch.randint(1000, 2000, (4,), generator=gen, dtype=torch.int64)
    ids = torch.randint(0, 1000, (int(lens.sum()),), generator=gen, dtype=torch.int64)
    ok = True
    for select in (None, starts + lens - 1 - (lens > 1).long()):
        ref, got = ids.clone(), ids.clone()
        rotate_input_ids_kernel[(4,)](ref, starts, lens, topk_index, select, BLOCK_SIZE=4)
        rotate_input_ids_cpu(got, starts, lens, topk_index, select)
        ok &= torch.equal(ref, got)
    return ok, "with and without select_index"


@check
def check_build_draft_decode_metadata_cpu(gen):
    from sglang.kernels.ops.speculative.cache_locs import generate_draft_decode_kv_indices
    from sgl_kernel import build_draft_decode_metadata_cpu

    r2t = _pool(gen)
    rpi = torch.tensor([2, 5, 0], dtype=torch.int64)
    seq_lens = torch.tensor([7, 3, 12], dtype=torch.int64)
    pool_len = r2t.shape[1]
    ok, bs = True, 3
    for topk, steps in ((1, 3), (2, 3)):
        table = build_draft_decode_metadata_cpu(r2t, rpi, seq_lens, topk, steps, pool_len)
        n_rows = bs * topk
        total = int(seq_lens.sum()) * topk + n_rows * steps
        kv_indices = torch.full((steps, total), -1, dtype=torch.int32)
        kv_indptr = torch.zeros((steps, n_rows + 1), dtype=torch.int32)
        positions = seq_lens.repeat_interleave(topk)
        generate_draft_decode_kv_indices[(steps, bs, topk)](
            rpi, r2t, seq_lens, kv_indices, kv_indptr, positions, pool_len, kv_indices.shape[1],
            kv_indptr.shape[1], _np2(bs), _np2(steps), _np2(n_rows), 1,
        )
        for step in range(steps - 1):
            for z in range(n_rows):
                lo, hi = int(kv_indptr[step, z]), int(kv_indptr[step, z + 1])
                mine = table[z, : int(positions[z]) + step + 1]
                ok &= torch.equal(kv_indices[step, lo:hi].to(mine.dtype), mine)
    return ok, "each draft step's kv indices equal the table row prefix (topk 1 and 2)"


@check
def check_copy_all_layer_kv_cache_cpu(gen):
    from sglang.kernels.ops.kvcache.cache_move import copy_all_layer_kv_cache_tiled
    from sgl_kernel import copy_all_layer_kv_cache_cpu

    def layers():
        g = torch.Generator().manual_seed(7)
        return [torch.randn((40, 2, 8), generator=g).to(torch.bfloat16) for _ in range(3)]

    src = torch.tensor([3, 9, 10, 21], dtype=torch.int64)
    tgt = torch.tensor([5, 10, 30, 3], dtype=torch.int64)  # overlaps src: all reads before writes
    ref_bufs, got_bufs = layers(), layers()

    def ptrs(bufs):
        return (torch.tensor([b.data_ptr() for b in bufs], dtype=torch.int64),
                torch.tensor([b[0].numel() * b.element_size() for b in bufs], dtype=torch.int64))

    p, s = ptrs(ref_bufs)
    stride = int(s[0])
    copy_all_layer_kv_cache_tiled[(3, 1)](p, s, tgt, src, 4, 4, BYTES_PER_TILE=_np2(stride))
    p, s = ptrs(got_bufs)
    copy_all_layer_kv_cache_cpu(p, s, tgt, src)
    return all(torch.equal(a, b) for a, b in zip(ref_bufs, got_bufs)), "3 layers, overlapping src/tgt"


def _draft_tree(gen, bs, topk, steps, num_draft):
    """Parents / selected indices / tokens as SGLang's own EAGLE draft loop builds them (spec_utils, eagle_utils)."""
    from sglang.srt.speculative.eagle_utils import organize_draft_results
    from sglang.srt.speculative.spec_utils import select_top_k_tokens

    hidden = torch.randn((bs, 8), generator=gen)
    scores = None
    score_list, token_list, parents_list = [], [], []
    for i in range(steps):
        rows = bs if i == 0 else bs * topk
        p = torch.softmax(torch.randn((rows, 16), generator=gen), dim=-1)
        topk_p, topk_index = torch.topk(p, topk, dim=-1)
        _, hidden, scores, tree_info = select_top_k_tokens(i, topk_p, topk_index, hidden, scores, topk)
        score_list.append(tree_info[0])
        token_list.append(tree_info[1])
        parents_list.append(tree_info[2])
    return organize_draft_results(score_list, token_list, parents_list, num_draft)


def _build_tree(fn, parent_list, sel, seq_lens, topk, steps, n, mode):
    bs = seq_lens.numel()
    if mode == 1:
        mask = torch.full((n * bs * n,), True, dtype=torch.bool)
    else:
        mask = torch.full((int(seq_lens.sum()) * n + n * n * bs,), True, dtype=torch.bool)
    retrieve = torch.full((3, bs, n), -1, dtype=torch.long)
    positions = torch.empty((bs * n,), dtype=torch.long)
    fn(parent_list, sel, seq_lens, mask, positions, retrieve[0], retrieve[1], retrieve[2], topk, steps, n, mode)
    return mask, positions, retrieve


TREE_CASES = ((1, 3, 4), (2, 3, 6), (4, 2, 5), (2, 1, 3))  # (topk, steps, num_draft_tokens)


@check
def check_build_tree_kernel_efficient_cpu(gen):
    from sglang.kernels.ops.speculative.spec_tree import sgl_build_tree_kernel_triton
    from sgl_kernel import build_tree_kernel_efficient_cpu

    ok, bs = True, 3
    seq_lens = torch.tensor([5, 9, 2], dtype=torch.int64)
    for topk, steps, n in TREE_CASES:
        parent_list, sel, _ = _draft_tree(gen, bs, topk, steps, n)
        for mode in (0, 1):  # FULL_MASK, QLEN_ONLY
            ref = _build_tree(sgl_build_tree_kernel_triton, parent_list, sel, seq_lens, topk, steps, n, mode)
            got = _build_tree(build_tree_kernel_efficient_cpu, parent_list, sel, seq_lens, topk, steps, n, mode)
            ok &= all(torch.equal(a, b) for a, b in zip(ref, got))
    return ok, f"(topk, steps, draft tokens) in {TREE_CASES}, FULL_MASK and QLEN_ONLY"


@check
def check_verify_tree_greedy_cpu(gen):
    from sglang.kernels.ops.speculative.spec_tree import sgl_build_tree_kernel_triton, verify_tree_greedy_triton
    from sgl_kernel import verify_tree_greedy_cpu

    ok, bs, accepted = True, 4, []
    seq_lens = torch.tensor([5, 9, 2, 4], dtype=torch.int64)
    for topk, steps, n in TREE_CASES:
        parent_list, sel, _ = _draft_tree(gen, bs, topk, steps, n)
        _, _, retrieve = _build_tree(sgl_build_tree_kernel_triton, parent_list, sel, seq_lens, topk, steps, n, 1)
        for _ in range(3):
            vocab = 3  # a tiny vocabulary makes drafts match the target often
            candidates = torch.randint(0, vocab, (bs, n), generator=gen, dtype=torch.int64)
            target = torch.randint(0, vocab, (bs, n), generator=gen, dtype=torch.int64)
            outs = []
            for fn in (verify_tree_greedy_triton, verify_tree_greedy_cpu):
                predicts = torch.zeros((bs * n,), dtype=torch.int32)
                accept_index = torch.full((bs, steps + 1), -1, dtype=torch.int32)
                accept_num = torch.zeros((bs,), dtype=torch.int32)
                kw = dict(predicts=predicts, accept_index=accept_index, candidates=candidates, target_predict=target)
                if fn is verify_tree_greedy_cpu:
                    fn(accept_token_num=accept_num, retrive_index=retrieve[0], retrive_next_token=retrieve[1],
                       retrive_next_sibling=retrieve[2], **kw)
                else:
                    fn(accept_token_num=accept_num, retrieve_index=retrieve[0], retrieve_next_token=retrieve[1],
                       retrieve_next_sibling=retrieve[2], **kw)
                outs.append((predicts, accept_index, accept_num))
            ok &= all(torch.equal(a, b) for a, b in zip(*outs))
            accepted += outs[1][2].tolist()
    return ok, f"accepted-draft counts seen {sorted(set(accepted))}"


def _paged_kv(gen, n_slots, hkv, d, dtype):
    return (torch.randn((n_slots, hkv, d), generator=gen).to(dtype), torch.randn((n_slots, hkv, d), generator=gen).to(dtype))


def _sdpa_backend():
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    return TorchNativeAttnBackend.__new__(TorchNativeAttnBackend)  # only the SDPA helpers are used


@check
def check_extend_attention_cpu(gen):
    """Causal + GQA against SGLang's torch_native SDPA; logit cap and tree masks against its Triton extend kernel."""
    from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd

    import sgl_kernel  # noqa: F401  (registers the op)

    hq, hkv, d, dtype = 4, 2, 32, torch.float32
    k_buf, v_buf = _paged_kv(gen, 200, hkv, d, dtype)
    r2t = _pool(gen, n_reqs=4, pool_len=40, n_slots=200).to(torch.int64)
    rpi = torch.tensor([2, 0, 3], dtype=torch.int64)
    prefix = torch.tensor([5, 0, 11], dtype=torch.int64)
    ext = torch.tensor([4, 6, 4], dtype=torch.int64)
    seq_lens = prefix + ext
    starts = torch.cumsum(ext, 0) - ext
    t = int(ext.sum())
    q = torch.randn((t, hq, d), generator=gen)
    k_ext = torch.cat([k_buf[r2t[r, p:s]] for r, p, s in zip(rpi, prefix, seq_lens)])
    v_ext = torch.cat([v_buf[r2t[r, p:s]] for r, p, s in zip(rpi, prefix, seq_lens)])
    scale = d ** -0.5
    report, ok = [], True

    def ours(logit_cap, tree_mask):
        o = torch.zeros((t, hq, d))
        torch.ops.sgl_kernel.extend_attention_cpu(q, k_ext, v_ext, o, k_buf, v_buf, 1.0, 1.0, r2t, rpi, seq_lens, ext,
                                                  starts, int(ext.max()), scale, logit_cap, False, 0, None, None,
                                                  tree_mask, True)
        return o

    ref = torch.zeros((t, hq, d))
    _sdpa_backend()._run_sdpa_forward_extend(q, ref, k_buf, v_buf, r2t, rpi, seq_lens, prefix, ext, scaling=scale,
                                             enable_gqa=True, causal=True)
    err = (ours(0.0, None) - ref).abs().max().item()
    ok &= err < 1e-4
    report.append(f"causal vs SDPA {err:.1e}")

    qo_indptr = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(ext, 0)]).to(torch.int32)
    kv_indptr = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(prefix, 0)]).to(torch.int32)
    kv_indices = torch.cat([r2t[r, :p] for r, p in zip(rpi, prefix)])
    # A QLEN_ONLY tree mask (query x extend key, diagonal always visible) and the same mask in the Triton kernel's
    # per-request [extend, prefix + extend] layout.
    qlen_masks = []
    for e in ext.tolist():
        m = torch.rand((e, e), generator=gen) < 0.5
        m = (m & torch.ones((e, e), dtype=torch.bool).tril()) | torch.eye(e, dtype=torch.bool)
        qlen_masks.append(m)
    qlen_flat = torch.cat([m.flatten() for m in qlen_masks])
    full_flat = torch.cat([torch.cat([torch.ones((e, p), dtype=torch.bool), m], 1).flatten()
                           for m, e, p in zip(qlen_masks, ext.tolist(), prefix.tolist())])
    mask_indptr = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(ext * seq_lens, 0)]).to(torch.int64)
    for logit_cap, tree in ((30.0 * scale, False), (0.0, True), (2.0, True)):
        ref = torch.zeros((t, hq, d))
        extend_attention_fwd(q, k_ext, v_ext, ref, k_buf, v_buf, qo_indptr, kv_indptr, kv_indices,
                             full_flat if tree else None, not tree, mask_indptr if tree else None, int(ext.max()),
                             1.0, 1.0, sm_scale=scale, logit_cap=logit_cap)
        err = (ours(logit_cap, qlen_flat if tree else None) - ref).abs().max().item()
        ok &= err < 1e-4
        report.append(f"logit_cap={logit_cap:.2f} tree={tree} vs Triton {err:.1e}")
    err = (ours(2.0, full_flat) - ours(2.0, qlen_flat)).abs().max().item()
    ok &= err < 1e-6
    report.append(f"FULL_MASK layout == QLEN_ONLY {err:.1e}")
    return ok, "; ".join(report)


@check
def check_decode_attention_cpu(gen):
    """Decode stores K/V at loc; output against SGLang's torch_native SDPA and (logit cap) its Triton decode kernel."""
    from sglang.kernels.ops.attention.decode_attention import decode_attention_fwd

    import sgl_kernel  # noqa: F401

    hq, hkv, d, bs = 4, 2, 32, 3
    k_buf, v_buf = _paged_kv(gen, 200, hkv, d, torch.bfloat16)
    r2t = _pool(gen, n_reqs=4, pool_len=40, n_slots=200).to(torch.int64)
    rpi = torch.tensor([1, 3, 0], dtype=torch.int64)
    seq_lens = torch.tensor([6, 1, 17], dtype=torch.int64)
    loc = torch.stack([r2t[r, s - 1] for r, s in zip(rpi, seq_lens)])
    q = torch.randn((bs, hq, d), generator=gen).to(torch.bfloat16)
    k_new = torch.randn((bs, hkv, d), generator=gen).to(torch.bfloat16)
    v_new = torch.randn((bs, hkv, d), generator=gen).to(torch.bfloat16)
    scale = d ** -0.5
    report, ok = [], True
    k_ours, v_ours = k_buf.clone(), v_buf.clone()
    logits = torch.zeros((bs, hq, 8, d + 1))

    def ours(logit_cap, kb, vb, k, v):
        o = torch.zeros((bs, hq, d), dtype=torch.bfloat16)
        torch.ops.sgl_kernel.decode_attention_cpu(q, kb, vb, 1.0, 1.0, o, k, v, loc, logits, r2t, rpi, seq_lens,
                                                  scale, logit_cap, False, 0, None, None)
        return o.float()

    out = ours(0.0, k_ours, v_ours, k_new, v_new)
    stored = torch.equal(k_ours[loc], k_new) and torch.equal(v_ours[loc], v_new)
    untouched = torch.ones(200, dtype=torch.bool)
    untouched[loc] = False
    stored &= torch.equal(k_ours[untouched], k_buf[untouched])
    ok &= stored
    report.append(f"K/V stored at loc: {stored}")
    ref = torch.zeros((bs, hq, d), dtype=torch.bfloat16)
    _sdpa_backend()._run_sdpa_forward_decode(q, ref, k_ours, v_ours, r2t, rpi, seq_lens, scaling=scale,
                                             enable_gqa=True, causal=False)
    err = (out - ref.float()).abs().max().item()
    ok &= err < 2e-2
    report.append(f"vs SDPA (bf16) {err:.1e}")
    kv_indptr = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(seq_lens, 0)]).to(torch.int32)
    kv_indices = torch.cat([r2t[r, :s] for r, s in zip(rpi, seq_lens)])
    qf, kf, vf = q.float(), k_ours.float(), v_ours.float()
    splits = 4
    ref = torch.zeros((bs, hq, d))
    decode_attention_fwd(qf, kf, vf, ref, kv_indptr, kv_indices, torch.zeros((bs, hq, splits, d)),
                         torch.zeros((bs, hq, splits)), torch.full((bs,), splits, dtype=torch.int32), splits, scale,
                         1.0, 1.0, logit_cap=1.5)
    o = torch.zeros((bs, hq, d))
    torch.ops.sgl_kernel.decode_attention_cpu(qf, kf, vf, 1.0, 1.0, o, None, None, loc, logits, r2t, rpi, seq_lens,
                                              scale, 1.5, False, 0, None, None)
    err = (o - ref).abs().max().item()
    ok &= err < 1e-4
    report.append(f"logit_cap=1.5 vs Triton (fp32) {err:.1e}")
    return ok, "; ".join(report)


@check
def check_strict_namespace(gen):
    """Exactly the documented names: anything else (scalar_type included) raises ImportError."""
    import sgl_kernel

    missing_ok = []
    for name in ("scalar_type", "silu_and_mul", "segment_packbits", "tree_speculative_sampling_target_only"):
        try:
            exec(f"from sgl_kernel import {name}")
            missing_ok.append(False)
        except ImportError:
            missing_ok.append(True)
    public = sorted(n for n in vars(sgl_kernel) if n.endswith("_cpu"))
    return all(missing_ok) and public == sorted(sgl_kernel.STANDIN_FUNCTIONS), f"public: {public}"


def main() -> int:
    names = sys.argv[1:] or list(CHECKS)
    results = {}
    for name in names:
        gen = torch.Generator().manual_seed(SEED)
        torch.manual_seed(SEED)
        try:
            ok, detail = CHECKS[name](gen)
            results[name] = {"ok": bool(ok), "detail": detail}
        except Exception:  # report every check, not just the first failure
            results[name] = {"ok": False, "detail": traceback.format_exc()[-3000:]}
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
