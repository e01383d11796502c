"""CPU test stand-ins, not SGLang kernels; never for measurement: a strict pure-torch sgl_kernel with exactly the names SGLang 0.5.23 touches on a CPU.

Any other name raises ImportError on ``from sgl_kernel import name`` (a plain module, no catch-all), so a new
SGLang version that needs more shows up as a failing import. ``sgl_kernel.scalar_type`` is deliberately absent:
SGLang catches that ImportError and uses its own fallback.
"""

from __future__ import annotations

from sgl_kernel import attention as _attention  # registers torch.ops.sgl_kernel.{extend,decode}_attention_cpu
from sgl_kernel.speculative import (
    assign_draft_cache_locs_contiguous_cpu,
    assign_extend_cache_locs_cpu,
    assign_req_to_token_pool_cpu,
    build_draft_decode_metadata_cpu,
    build_tree_kernel_efficient_cpu,
    copy_all_layer_kv_cache_cpu,
    fill_accept_out_cache_loc_cpu,
    fill_bonus_tokens_cpu,
    rotate_input_ids_cpu,
    verify_tree_greedy_cpu,
)

__version__ = "0.0.0+sglbench.cpu.standin"

STANDIN_FUNCTIONS = (
    "assign_req_to_token_pool_cpu",
    "copy_all_layer_kv_cache_cpu",
    "build_tree_kernel_efficient_cpu",
    "verify_tree_greedy_cpu",
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "fill_bonus_tokens_cpu",
    "build_draft_decode_metadata_cpu",
    "fill_accept_out_cache_loc_cpu",
    "rotate_input_ids_cpu",
)
STANDIN_TORCH_OPS = _attention.OPS

__all__ = list(STANDIN_FUNCTIONS)
