"""Torch-free: what class of work an operator or a device kernel does (gemm, conv, attention, reduction, pool,
elementwise; data movement apart), and the names of the kernels a CUDA source defines. The evaluator's kernel
finding (what the candidate's own code did) uses it (profiles.py, kernelcheck.py); the prompts pick the form of
kernel to ask for with it."""

from __future__ import annotations

import re

LIBRARY_NAMESPACES = ("aten", "prim", "prims", "profiler", "cuda", "c10d", "_c10d_functional", "quantized",
                      "inductor", "torch", "mkldnn", "cudnn", "_ops")

_CLASSES: dict[str, tuple[str, ...]] = {
    "gemm": ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addmv", "mv", "dot", "vdot", "addbmm", "einsum",
             "_scaled_mm", "tensordot", "_addmm_activation", "bilinear", "outer", "addr", "kron", "inner"),
    "conv": ("convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
             "conv_transpose3d", "cudnn_convolution", "cudnn_convolution_transpose", "mkldnn_convolution",
             "_conv_depthwise2d", "slow_conv2d_forward", "slow_conv3d_forward", "slow_conv_transpose2d",
             "slow_conv_dilated2d", "_slow_conv2d_forward", "_nnpack_spatial_convolution", "thnn_conv2d"),
    "attention": ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                  "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                  "_flash_attention_forward", "_efficient_attention_forward", "_scaled_dot_product_attention_math"),
    "reduction": ("sum", "mean", "max", "min", "amax", "amin", "argmax", "argmin", "prod", "norm", "linalg_vector_norm",
                  "var", "std", "var_mean", "std_mean", "logsumexp", "softmax", "_softmax", "log_softmax",
                  "_log_softmax", "cumsum", "cumprod", "cummax", "cummin", "layer_norm", "native_layer_norm",
                  "group_norm", "native_group_norm", "batch_norm", "native_batch_norm", "_batch_norm_impl_index",
                  "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "cudnn_batch_norm",
                  "instance_norm", "rms_norm", "_fused_rms_norm", "topk", "sort", "kthvalue", "median", "mode", "all",
                  "any", "nll_loss", "nll_loss_forward", "nll_loss2d_forward", "cross_entropy_loss", "mse_loss",
                  "l1_loss", "kl_div", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
                  "binary_cross_entropy_with_logits", "cosine_similarity", "pdist", "cdist", "_cdist_forward",
                  "triplet_margin_loss", "margin_ranking_loss", "hinge_embedding_loss", "cosine_embedding_loss",
                  "soft_margin_loss", "multilabel_margin_loss", "multi_margin_loss", "nansum", "logcumsumexp",
                  "count_nonzero", "aminmax", "_weight_norm", "renorm", "histc", "bincount", "unique",
                  "_unique2", "unique_consecutive", "trace", "diff", "frobenius_norm", "nuclear_norm"),
    "pool": ("max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices", "max_pool3d_with_indices",
             "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
             "adaptive_avg_pool3d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_max_pool1d",
             "adaptive_max_pool2d", "adaptive_max_pool3d", "lp_pool1d", "lp_pool2d", "max_unpool2d",
             "max_unpool3d", "fractional_max_pool2d"),
    "data": ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
             "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "fill_", "zero_", "copy_",
             "clone", "contiguous", "to", "_to_copy", "view", "_unsafe_view", "reshape", "_reshape_alias",
             "as_strided", "permute", "transpose", "t", "expand", "expand_as", "squeeze", "unsqueeze", "flatten",
             "unflatten", "slice", "select", "narrow", "split", "split_with_sizes", "chunk", "unbind", "detach",
             "alias", "resize_", "set_", "lift_fresh", "resolve_conj", "resolve_neg", "view_as", "movedim",
             "item", "_local_scalar_dense", "is_nonzero", "size", "stride", "numel", "dim", "type_as",
             "record_stream", "_copy_from", "_copy_from_and_resize", "cat", "stack", "index_select", "gather",
             "repeat", "tile", "flip", "roll", "pad", "constant_pad_nd", "arange", "linspace", "rand", "randn",
             "normal_", "uniform_", "random_", "_has_compatible_shallow_copy_type", "is_same_size", "result_type",
             "where", "masked_fill", "masked_fill_", "index", "index_put_", "scatter", "scatter_", "_index_put_impl_",
             "hstack", "vstack", "dstack", "column_stack", "split_with_sizes_copy", "unfold", "im2col", "col2im",
             "diagonal", "triu", "tril", "broadcast_to", "expand_copy", "view_copy", "permute_copy", "_unsafe_split",
             "_pin_memory", "pin_memory", "_cudnn_rnn_flatten_weight", "set_data", "numpy_T", "mT", "mH", "adjoint",
             "swapaxes", "swapdims", "moveaxis", "matrix_H", "conj", "_conj", "real", "imag", "view_as_real",
             "view_as_complex", "_reshape_copy", "_unsafe_view_copy"),
}
_CLASS_OF = {op: cls for cls, ops in _CLASSES.items() for op in ops}
COMPUTE_CLASSES = ("gemm", "conv", "attention", "reduction", "pool", "elementwise")


def op_class(name: str) -> str:
    """gemm | conv | attention | reduction | pool | data | elementwise, for an operator name like 'aten::addmm'."""
    base = name.split("::", 1)[-1].split(".", 1)[0]
    if base.endswith("_") and base[:-1] in _CLASS_OF and _CLASS_OF[base[:-1]] != "data":
        base = base[:-1]
    return _CLASS_OF.get(base, "elementwise")


def known_op_class(base: str) -> str:
    """The class of an ATen operator known by its base name ("add", "add_out", "add_"); "" when not known."""
    for b in (base, base.removesuffix("_out"), base.rstrip("_")):
        if b in _CLASS_OF:
            return _CLASS_OF[b]
    return ""


def is_library(name: str) -> bool:
    return "::" in name and name.split("::", 1)[0] in LIBRARY_NAMESPACES


def is_registered_op(name: str) -> bool:
    """`ns::op` outside torch's namespaces: an operator someone registered (from C++ or from Python)."""
    return "::" in name and name.split("::", 1)[0] not in LIBRARY_NAMESPACES and "." not in name.split("::", 1)[0] \
        and " " not in name and not name.startswith(("ProfilerStep", "Optimizer", "DataLoader"))


_GLOBAL_NAME = re.compile(r"__global__\s+(?:[^;{()]*?\s)?(?:__launch_bounds__\s*\([^)]*\)\s*)?"
                                        r"([A-Za-z_]\w*)\s*\(")
_KERNEL_IDENT = re.compile(r"(?:void\s+)?(?:[\w:]+::)?([A-Za-z_]\w*)\s*[<(]")
_LIB_KERNEL_CLASS = (("gemm", ("gemm", "xmma", "cutlass", "cublas", "sgemm", "hgemm", "matmul", "wgmma")),
                     ("conv", ("conv", "cudnn", "implicit_gemm", "winograd", "fft")),
                     ("reduction", ("reduce", "softmax", "norm", "scan")))


def kernel_names(cuda_sources: list[str]) -> set[str]:
    """Names of the `__global__` functions defined in CUDA sources (the evaluator reads them from the sources it
    built: a candidate's own kernels, as the profiler names them)."""
    names: set[str] = set()
    for src in cuda_sources:
        names |= {m.group(1) for m in _GLOBAL_NAME.finditer(src) if m.group(1) != "__launch_bounds__"}
    return names


def kernel_ident(name: str) -> str:
    m = _KERNEL_IDENT.match(name.strip())
    return m.group(1) if m else name.strip()


def library_kernel_class(name: str) -> str:
    low = name.lower()
    for cls, words in _LIB_KERNEL_CLASS:
        if any(w in low for w in words):
            return cls
    return "elementwise"
