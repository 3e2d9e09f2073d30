"""Convolution gradients in the generated C++: an aten.convolution_backward the forward's Conv step
could run becomes a ConvBackward step. The weight's gradient is the product of the output
gradient with the input's windows, gathered a tile at a time as the forward gathers them; the
input's gradient is the weight's transpose times the output gradient, a tile of windows at a time,
each window added back to the input elements under it (col2im); the bias's is a sum. All three use
torch's own BLAS (cpp_gemm) inside the kernel group, instead of a oneDNN call costing more than
the arithmetic at these sizes (see cpp_conv)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

import torch

from .cpp_conv import (
    ROW_COPIES_AS_VECTORS, Conv, _gather_pixels, _gather_planes, _weight, _weight_in_order, _window_order, conv_geometry,
    generated_conv, tile_rows,
)
from .cpp_gemm import GEMM_PARALLEL_MIN_MACS, blas_type
from .graph_lowering import ExternArg
from .ir import Buffer, ExternNode, numel
from .scheduler import Step, replace_externs


@dataclass
class ConvBackward:
    """(grad input, grad weight, grad bias) of out = convolution(x, w, bias), given dy, the
    gradient of out; a None gradient is not computed. `weights`: the forward convolution reading
    x (its windows' gather order is the weight gradient's); `inputs`: the same convolution with
    the input gradient's buffer as its x (its window order is the col2im's)."""

    name: str
    dy: ExternArg
    weights: Conv
    inputs: Conv
    grad_input: Optional[str]
    grad_weight: Optional[str]
    grad_bias: Optional[str]
    gw_stride: Tuple[int, int, int, int]
    stored: Set[str] = field(default_factory=set)

    def work(self, buffers: Dict[str, Buffer]) -> int:
        return self.weights.macs * ((self.grad_input is not None) + (self.grad_weight is not None)) \
            + numel(self.weights.out_size)

    def describe(self, buffers: Dict[str, Buffer]) -> str:
        return f"[{'x'.join(map(str, self.dy.size))}: conv backward k={numel(self.weights.w_size[1:])}]"


def use_conv_backwards(steps: List[Step], buffers: Dict[str, Buffer]) -> List[Step]:
    """`steps` with each convolution backward the generated code can run turned into a ConvBackward."""
    return replace_externs(steps, lambda node, i: _as_conv_backward(node, buffers, i))


def _as_conv_backward(node: ExternNode, buffers: Dict[str, Buffer], index: int) -> Optional[ConvBackward]:
    if node.fn is not torch.ops.aten.convolution_backward.default or node.kwargs or len(node.args) != 11 \
            or len(node.names) != 3 or not any(node.names):
        return None
    dy, x, w, _, stride, padding, dilation, transposed, _, groups, _ = node.args
    if not all(isinstance(a, ExternArg) for a in (dy, x, w)):
        return None
    dtype = buffers[dy.buffer].dtype
    outs = [buffers[b] if b else None for b in node.names]
    if not generated_conv(x.size, w.size, dy.size, dtype, transposed) \
            or {buffers[a.buffer].dtype for a in (x, w)} | {b.dtype for b in outs if b} != {dtype}:
        return None
    gi, gw, gb = outs
    params = (stride, padding, dilation, groups)
    name = f"convbwd{index}"
    # the weight gradient's layout decides the gather order as the weight's decides the forward's
    weights = conv_geometry(name, dy.buffer, dy.size, dy.stride, x, _whole(gw) if gw else w, None, params, dtype)
    inputs = conv_geometry(name, dy.buffer, dy.size, dy.stride, _whole(gi) if gi else x, w, None, params, dtype)
    if weights is None or inputs is None:
        return None
    return ConvBackward(name, dy, weights, inputs, *(b.name if b else None for b in outs), weights.w_stride,
                        {b.name for b in outs if b})


def _whole(buf: Buffer) -> ExternArg:
    """A whole buffer as an extern argument."""
    return ExternArg(buf.name, tuple(buf.size), tuple(buf.stride), 0)


def conv_backward_args(cb: ConvBackward) -> List[str]:
    outs = [b for b in (cb.grad_input, cb.grad_weight, cb.grad_bias) if b]
    reads = [cb.dy.buffer] + ([cb.weights.x.buffer] if cb.grad_weight else []) + (
        [cb.inputs.w.buffer] if cb.grad_input else [])
    return outs + list(dict.fromkeys(reads))


def render_conv_backward(cb: ConvBackward, buffers: Dict[str, Buffer]) -> Tuple[str, List[str]]:
    """The C++ function for `cb` and its parameters in order (nthreads follows)."""
    _, ctype = blas_type(cb.weights.dtype)
    args = conv_backward_args(cb)
    written = {cb.grad_input, cb.grad_weight, cb.grad_bias}
    params = [f"{'' if a in written else 'const '}{ctype}* __restrict__ {a}" for a in args]
    lines = [f"static {ROW_COPIES_AS_VECTORS}void {cb.name}({', '.join(params)}, int nthreads) {{",
             f"  const {ctype} one = 1, zero = 0;", "  int before = md_threads(1);"]
    if cb.grad_bias:
        lines += ["  " + ln for ln in _grad_bias(cb)]
    if cb.grad_weight:
        lines += ["  " + ln for ln in _grad_weight(cb)]
    if cb.grad_input:
        lines += ["  " + ln for ln in _grad_input(cb)]
    lines += ["  md_threads(before);", "}"]
    return "\n".join(lines) + "\n", args


def _dy_tile(cb: ConvBackward) -> str:
    """Where output rows oh0.. of image n, group g start in dy."""
    c = cb.weights
    _, o, oh, ow = c.out_size
    og = o // c.groups
    base = f"{cb.dy.buffer} + {cb.dy.offset} + n * {o * oh * ow}"
    return f"{base} + oh0 * {ow * o} + g * {og}" if c.channels_last else f"{base} + g * {og * oh * ow} + oh0 * {ow}"


def _tiles(c: Conv) -> List[str]:
    """The loop over tiles of output rows of image n (oh0, oh1, tile: their positions)."""
    oh, ow = c.out_size[2:]
    rows = tile_rows(c)
    return [f"for (int64_t t = 0; t < {-(-oh // rows)}; t++) {{",
            f"  const int64_t oh0 = t * {rows}, oh1 = oh0 + {rows} < {oh} ? oh0 + {rows} : {oh};",
            f"  const int tile = (int)((oh1 - oh0) * {ow});"]


def _grad_bias(cb: ConvBackward) -> List[str]:
    """grad_bias[o] = sum of dy over images and positions (float sums in double)."""
    c = cb.weights
    n, o, oh, ow = c.out_size
    ctype = blas_type(c.dtype)[1]
    at = f"{cb.dy.buffer} + {cb.dy.offset} + i * {o * oh * ow}"
    if c.channels_last:
        return [f"{{ double acc[{o}] = {{0}};",
                f"  for (int64_t i = 0; i < {n}; i++) for (int64_t p = 0; p < {oh * ow}; p++) {{",
                f"    const {ctype}* r = {at} + p * {o};",
                "    #pragma omp simd", f"    for (int64_t q = 0; q < {o}; q++) acc[q] += r[q];", "  }",
                f"  for (int64_t q = 0; q < {o}; q++) {cb.grad_bias}[q] = ({ctype})acc[q]; }}"]
    return [f"for (int64_t q = 0; q < {o}; q++) {{", "  double acc = 0;",
            f"  for (int64_t i = 0; i < {n}; i++) {{", f"    const {ctype}* r = {at} + q * {oh * ow};",
            "    #pragma omp simd reduction(+:acc)", f"    for (int64_t p = 0; p < {oh * ow}; p++) acc += r[p];",
            "  }", f"  {cb.grad_bias}[q] = ({ctype})acc;", "}"]


def _grad_weight(cb: ConvBackward) -> List[str]:
    """dW_g (og x kg) = sum over images and tiles of dy_g (og x tile) . cols^T (tile x kg), in
    column-major terms C(kg x og) = cols (kg x tile) . dy_g^T (tile x og); accumulated in place
    when the weight gradient's rows hold windows in the gather's order, else on the stack and
    copied out at the end."""
    c = cb.weights
    routine, ctype = blas_type(c.dtype)
    n, o, oh, ow = c.out_size
    cg = c.w_size[1]
    og, kg = o // c.groups, numel(c.w_size[1:])
    in_place = _weight_in_order(c.w_size, cb.gw_stride, c.pixels)
    ldw = max(cb.gw_stride[0], kg) if in_place else kg
    acc = cb.grad_weight if in_place else "acc"
    ta, lda = ("N", kg) if c.pixels else ("T", "tile")
    tb, ldb = ("T", o) if c.channels_last else ("N", oh * ow)
    parallel = c.macs >= GEMM_PARALLEL_MIN_MACS
    lines = [] if in_place else [f"alignas(64) {ctype} acc[{o * kg}];"]
    if parallel and c.groups == 1:
        lines.append("md_threads(nthreads);")  # the product itself split between threads
    if parallel and c.groups > 1:
        lines.append("#pragma omp parallel for if(nthreads > 1) num_threads(nthreads)")
    lines += [f"for (int64_t g = 0; g < {c.groups}; g++)", f"for (int64_t n = 0; n < {n}; n++)"]
    lines += _tiles(c) + [
        f"  alignas(64) {ctype} col[{tile_rows(c) * ow * kg}];",
        f"  const {ctype}* xg = {c.x.buffer} + {c.x.offset} + n * {c.x_stride[0]} + g * {cg * c.x_stride[1]};"]
    lines += ["  " + ln for ln in (_gather_pixels(c) if c.pixels else _gather_planes(c))]
    lines += [f"  {{ const int m = {kg}, nn = {og}, k = tile, lda = {lda}, ldb = {ldb}, ldc = {ldw};",
              f"    const {ctype}* beta = n == 0 && t == 0 ? &zero : &one;",
              f'    md_{routine}("{ta}", "{tb}", &m, &nn, &k, &one, col, &lda, {_dy_tile(cb)}, &ldb, beta, '
              f"{acc} + g * {og * ldw}, &ldc); }}", "}"]
    if parallel and c.groups == 1:
        lines.append("md_threads(1);")
    return lines if in_place else lines + _copy_out(cb)


def _copy_out(cb: ConvBackward) -> List[str]:
    """The stack-accumulated weight gradient (rows in the gather's order) into its buffer's layout."""
    c = cb.weights
    o, kg = c.w_size[0], numel(c.w_size[1:])
    order = _window_order(c.w_size, cb.gw_stride, c.pixels)
    dims = ("i0", "i1", "i2")
    at = " + ".join(f"{d} * {st}" for d, (st, _, _) in zip(dims, order))
    src = " + ".join(f"{d} * {want}" for d, (_, _, want) in zip(dims, order))
    return [f"for (int64_t oo = 0; oo < {o}; oo++)",
            f"  for (int64_t i0 = 0; i0 < {order[0][1]}; i0++) for (int64_t i1 = 0; i1 < {order[1][1]}; i1++)",
            f"    for (int64_t i2 = 0; i2 < {order[2][1]}; i2++)",
            f"      {cb.grad_weight}[oo * {cb.gw_stride[0]} + {at}] = acc[oo * {kg} + {src}];"]


def _grad_input(cb: ConvBackward) -> List[str]:
    """For each image and group: dX zeroed, then per tile cols (kg x tile) = W_g^T (kg x og) .
    dy_g (og x tile), each column added back under its window (col2im)."""
    c = cb.inputs
    routine, ctype = blas_type(c.dtype)
    n, o, oh, ow = c.out_size
    _, _, h, w = c.x_size
    cg = c.w_size[1]
    og, kg = o // c.groups, numel(c.w_size[1:])
    weight, ldw, pack = _weight(c, ctype)
    w_g = f"{weight} + g * {og * ldw}"
    if c.pixels:  # column-major C(kg x tile) = W_g (kg x og) . dy (og x tile)
        m, nn, ldc, (ta, a, lda) = kg, "tile", kg, ("N", w_g, ldw)
        tb, b, ldb = ("N", "dy", o) if c.channels_last else ("T", "dy", oh * ow)
    else:  # C(tile x kg) = dy^T (tile x og) . W_g^T (og x kg)
        m, nn, ldc, (tb, b, ldb) = "tile", kg, "tile", ("T", w_g, ldw)
        ta, a, lda = ("T", "dy", o) if c.channels_last else ("N", "dy", oh * ow)
    _, xc, xh, xw = c.x_stride
    zero = (f"for (int64_t iy = 0; iy < {h}; iy++) for (int64_t ix = 0; ix < {w}; ix++)",
            "  #pragma omp simd", f"  for (int64_t ci = 0; ci < {cg}; ci++) xg[ci * {xc} + iy * {xh} + ix * {xw}] = 0;") \
        if c.pixels else (f"for (int64_t ci = 0; ci < {cg}; ci++) for (int64_t iy = 0; iy < {h}; iy++)",
                          "  #pragma omp simd", f"  for (int64_t ix = 0; ix < {w}; ix++) xg[ci * {xc} + iy * {xh} + ix * {xw}] = 0;")
    lines = [ln[2:] for ln in pack]
    if c.macs >= GEMM_PARALLEL_MIN_MACS:
        lines.append("#pragma omp parallel for collapse(2) if(nthreads > 1) num_threads(nthreads)")
    lines += [f"for (int64_t n = 0; n < {n}; n++)", f"for (int64_t g = 0; g < {c.groups}; g++) {{",
              f"  {ctype}* xg = {c.x.buffer} + n * {c.x_stride[0]} + g * {cg * xc};"]
    lines += ["  " + ln for ln in zero]
    lines += ["  " + ln for ln in _tiles(c)] + [
        f"    alignas(64) {ctype} col[{tile_rows(c) * ow * kg}];",
        f"    const {ctype}* dy = {_dy_tile(cb)};",
        f"    {{ const int m = {m}, nn = {nn}, k = {og}, lda = {lda}, ldb = {ldb}, ldc = {ldc};",
        f'      md_{routine}("{ta}", "{tb}", &m, &nn, &k, &one, {a}, &lda, {b}, &ldb, &zero, col, &ldc); }}']
    lines += ["    " + ln for ln in (_gather_pixels(c, True) if c.pixels else _gather_planes(c, True))]
    return lines + ["  }", "}"]
