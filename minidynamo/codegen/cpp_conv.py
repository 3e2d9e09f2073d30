"""Convolutions in the generated C++: a 1-d or 2-d aten.convolution becomes a Conv step that gathers
its input windows (im2col, a tile of output rows at a time, on the stack) and multiplies them by
the weight with the BLAS torch itself uses (cpp_gemm), writing the result in its buffer's layout,
bias added on the cache-hot tile. Torch's oneDNN call costs 100-500 us per convolution before any
arithmetic (descriptor, memory objects, layout reorders), more than the whole product of the small
convolutions of a CNN or a speech encoder's feature extractor; here the call is one C function in
the kernel group with the kernels around it (batch norm, activation, pooling)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

import torch

from .cpp_gemm import GEMM_PARALLEL_MIN_MACS, blas_routines, blas_type
from .graph_lowering import ExternArg
from .ir import Buffer, ExternNode, contiguous_strides, numel
from .scheduler import Step, replace_externs

CONV_DTYPES = (torch.float32, torch.float64)
# Input windows gathered per tile (elements, on the stack): a tile stays in L2 between its gather
# and its product.
_TILE_ELEMENTS = 1 << 15
GENERATED_MAX_MACS = 1 << 24
# A window's row copy would become a memcpy, which g++ expands inline for these short rows as
# `rep movs`: about 50 cycles for 64 bytes, 80% of a convolution's gather; as vector moves, a few.
ROW_COPIES_AS_VECTORS = '__attribute__((optimize("no-tree-loop-distribute-patterns"))) '


@dataclass
class Conv:
    """out = convolution(x, w, bias) for 2-d sizes (a 1-d convolution has height 1)."""

    name: str
    out: str
    x: ExternArg
    w: ExternArg
    bias: Optional[ExternArg]
    x_size: Tuple[int, int, int, int]  # N, C, H, W
    x_stride: Tuple[int, int, int, int]
    w_size: Tuple[int, int, int, int]  # O, C / groups, KH, KW
    w_stride: Tuple[int, int, int, int]
    out_size: Tuple[int, int, int, int]  # N, O, OH, OW
    channels_last: bool  # out is laid out (N, OH, OW, O); otherwise contiguous (N, O, OH, OW)
    pixels: bool  # windows gathered as whole pixels' channels (channels-last input), else plane by plane
    stride: Tuple[int, int]
    padding: Tuple[int, int]
    dilation: Tuple[int, int]
    groups: int
    dtype: torch.dtype
    stored: Set[str] = field(default_factory=set)

    @property
    def macs(self) -> int:
        return numel(self.out_size) * numel(self.w_size[1:])


def generated_conv(x_size: Sequence[int], w_size: Sequence[int], out_size: Sequence[int], dtype: torch.dtype,
                   transposed: bool) -> bool:
    """Whether a convolution of these sizes runs in the generated code (static sizes). Past
    GENERATED_MAX_MACS oneDNN's direct convolution (15-40% faster arithmetic than gather and
    product) outweighs its per-call cost, and the operands go channels-last for it instead."""
    return (not transposed and len(x_size) in (3, 4) and len(w_size) == len(x_size) == len(out_size)
            and dtype in CONV_DTYPES and min(list(x_size) + list(w_size) + list(out_size)) > 0
            and numel(out_size) * numel(w_size[1:]) < GENERATED_MAX_MACS
            and out_size[-1] * numel(w_size[1:]) <= 2 * _TILE_ELEMENTS  # one output row's windows: the smallest tile
            and blas_routines() is not None)


def use_convs(steps: Sequence[Step], buffers: Dict[str, Buffer]) -> List[Step]:
    """`steps` with each convolution the generated code can run turned into a Conv step."""
    return replace_externs(steps, lambda node, i: _as_conv(node, buffers, i))


def _as_conv(node: ExternNode, buffers: Dict[str, Buffer], index: int) -> Optional[Conv]:
    if node.fn is not torch.ops.aten.convolution.default or node.kwargs or len(node.args) != 9 \
            or len(node.names) != 1:
        return None
    x, w, bias, stride, padding, dilation, transposed, _, groups = node.args
    out = buffers[node.names[0]]
    if not (isinstance(x, ExternArg) and isinstance(w, ExternArg)) or (bias is not None and not isinstance(bias, ExternArg)) \
            or not generated_conv(x.size, w.size, out.size, out.dtype, transposed) \
            or {buffers[a.buffer].dtype for a in (x, w, bias) if a is not None} != {out.dtype}:
        return None
    return conv_geometry(f"conv{index}", out.name, out.size, out.stride, x, w, bias,
                         (stride, padding, dilation, groups), out.dtype)


def conv_geometry(name: str, out: str, out_size: Sequence[int], out_stride: Sequence[int], x: ExternArg,
                  w: ExternArg, bias: Optional[ExternArg], params: Tuple[Sequence[int], Sequence[int], Sequence[int], int],
                  dtype: torch.dtype) -> Optional[Conv]:
    """The Conv computing `out` (sizes and strides) = convolution(x, w, bias) with `params`
    (stride, padding, dilation, groups), in 2-d terms; None where the generated code cannot
    lay it out (an output in neither layout, a large weight in neither gather order)."""
    stride, padding, dilation, groups = params
    one_d = len(x.size) == 3
    x_size, w_size, out_size = (_two_d(size, 1, one_d) for size in (x.size, w.size, out_size))
    x_stride, w_stride = (_two_d(t.stride, 0, one_d) for t in (x, w))
    _, o, oh, ow = out_size
    nchw = contiguous_strides(out_size)
    nhwc = (oh * ow * o, 1, ow * o, o)
    flat = _two_d(out_stride, nchw[2], one_d)
    layout = [cl for cl, want in ((False, nchw), (True, nhwc))
              if all(a == b or s == 1 for a, b, s in zip(flat, want, out_size))]
    if not layout or x_size[1] != w_size[1] * groups or o % groups:
        return None
    pixels = x_stride[1] == 1 and x_size[1] > 1
    if o * numel(w_size[1:]) > _TILE_ELEMENTS and not _weight_in_order(w_size, w_stride, pixels):
        # a large weight is read in place (copying it would need too much stack): gather to its order
        pixels = not pixels
        if not _weight_in_order(w_size, w_stride, pixels):
            return None
    return Conv(name, out, x, w, bias, x_size, x_stride, w_size, w_stride, out_size, layout[0],
                pixels, _two_d(stride, 1, one_d), _two_d(padding, 0, one_d), _two_d(dilation, 1, one_d), groups,
                dtype, {out})


def _two_d(values: Sequence[int], height: int, one_d: bool) -> tuple:
    """A 1-d convolution's sizes, strides or parameters as a 2-d one's: `height` for the height
    inserted before the width (a size 1, stride 0, padding 0, ...)."""
    values = tuple(values)
    return values[:-1] + (height,) + values[-1:] if one_d else values


def conv_args(c: Conv) -> List[str]:
    return [c.out, c.x.buffer, c.w.buffer] + ([c.bias.buffer] if c.bias is not None else [])


def render_conv(c: Conv, buffers: Dict[str, Buffer]) -> Tuple[str, List[str]]:
    """The C++ function for `c` and its parameters in order (nthreads follows)."""
    routine, ctype = blas_type(c.dtype)
    n = c.x_size[0]
    o, cg, kh, kw = c.w_size
    _, _, oh, ow = c.out_size
    og, kg = o // c.groups, cg * kh * kw
    rows = tile_rows(c)
    args = conv_args(c)
    params = [f"{ctype}* __restrict__ {c.out}", f"const {ctype}* __restrict__ {c.x.buffer}",
              f"const {ctype}* __restrict__ {c.w.buffer}"] + (
        [f"const {ctype}* __restrict__ {c.bias.buffer}"] if c.bias is not None else [])
    weight, ldw, pack = _weight(c, ctype)
    lines = [f"static {ROW_COPIES_AS_VECTORS}void {c.name}({', '.join(params)}, int nthreads) {{",
             f"  const {ctype} one = 1, zero = 0;"] + pack + [
             "  const int before = md_threads(1);",
             f"  const int64_t row_tiles = {-(-oh // rows)};"]
    if c.macs >= GEMM_PARALLEL_MIN_MACS:
        lines.append("  #pragma omp parallel for collapse(3) if(nthreads > 1) num_threads(nthreads)")
    lines += [f"  for (int64_t n = 0; n < {n}; n++)",
              f"  for (int64_t g = 0; g < {c.groups}; g++)",
              "  for (int64_t t = 0; t < row_tiles; t++) {",
              f"    alignas(64) {ctype} col[{rows * ow * kg}];",
              f"    const int64_t oh0 = t * {rows}, oh1 = oh0 + {rows} < {oh} ? oh0 + {rows} : {oh};",
              f"    const int tile = (int)((oh1 - oh0) * {ow});",
              f"    const {ctype}* xg = {c.x.buffer} + {c.x.offset} + n * {c.x_stride[0]} + g * {cg * c.x_stride[1]};"]
    lines += ["    " + ln for ln in (_gather_pixels(c) if c.pixels else _gather_planes(c))]
    lines += ["    " + ln for ln in _product(c, weight, ldw, routine, og, kg)]
    if c.bias is not None:
        lines += ["    " + ln for ln in _add_bias(c, og)]
    lines += ["  }", "  md_threads(before);", "}"]
    return "\n".join(lines) + "\n", args


def tile_rows(c: Conv) -> int:
    """Output rows per tile: the fewest tiles whose gathered windows fit _TILE_ELEMENTS."""
    oh, ow = c.out_size[2:]
    tiles = -(-oh * ow * numel(c.w_size[1:]) // _TILE_ELEMENTS)
    return -(-oh // max(1, min(oh, tiles)))


def _window_order(w_size: Sequence[int], w_stride: Sequence[int], pixels: bool) -> Tuple[Tuple[int, int, int], ...]:
    """(weight stride, size, stride in a gathered window) of the window's dims in the gather's
    order: (kh, kw, cg) for pixels, (cg, kh, kw) for planes."""
    _, cg, kh, kw = w_size
    _, sc, sh, sw = w_stride
    return ((sh, kh, kw * cg), (sw, kw, cg), (sc, cg, 1)) if pixels else \
        ((sc, cg, kh * kw), (sh, kh, kw), (sw, kw, 1))


def _weight_in_order(w_size: Sequence[int], w_stride: Sequence[int], pixels: bool) -> bool:
    """Whether the weight's rows (one per output channel) hold windows in the gather's order."""
    kg = numel(w_size[1:])
    return all(st == want or size == 1 for st, size, want in _window_order(w_size, w_stride, pixels)) \
        and (w_stride[0] >= kg or w_size[0] == 1)


def _weight(c: Conv, ctype: str) -> Tuple[str, int, List[str]]:
    """The weight as rows of (O, KG) in the order the gather lays out a window: read in place
    when laid out so (a contiguous or a channels-last weight), else copied into that order
    (at most _TILE_ELEMENTS, on the stack: see _as_conv)."""
    o, kg, so = c.w_size[0], numel(c.w_size[1:]), c.w_stride[0]
    order = _window_order(c.w_size, c.w_stride, c.pixels)
    base = f"{c.w.buffer} + {c.w.offset}"
    if _weight_in_order(c.w_size, c.w_stride, c.pixels):
        return base, max(so, kg), []
    dims = ("i0", "i1", "i2")
    idx = " + ".join(f"{d} * {st}" for d, (st, _, _) in zip(dims, order))
    dest = " + ".join(f"{d} * {want}" for d, (_, _, want) in zip(dims, order))
    pack = [f"  alignas(64) {ctype} wpack[{o * kg}];",
            f"  for (int64_t oo = 0; oo < {o}; oo++)",
            f"    for (int64_t i0 = 0; i0 < {order[0][1]}; i0++) for (int64_t i1 = 0; i1 < {order[1][1]}; i1++)",
            f"      for (int64_t i2 = 0; i2 < {order[2][1]}; i2++)",
            f"        wpack[oo * {kg} + {dest}] = ({base})[oo * {so} + {idx}];"]
    return "wpack", kg, pack


def _gather_planes(c: Conv, scatter: bool = False) -> List[str]:
    """Rows k = (cg, kh, kw) of `tile` output positions each: col[k][p] is the input under
    position p's window at k, 0 in the padding. `scatter`: the reverse, each col[k][p] added to
    the input element under it (col2im; the padding's are dropped)."""
    _, _, h, w = c.x_size
    _, cg, kh, kw = c.w_size
    ow = c.out_size[3]
    (sh, sw), (ph, pw), (dh, dw) = c.stride, c.padding, c.dilation
    _, xc, xh, xw = c.x_stride
    ctype = _ctype(c)
    zero = (lambda fill: []) if scatter else (lambda fill: [fill])
    return [
        f"for (int64_t ci = 0; ci < {cg}; ci++) for (int64_t ki = 0; ki < {kh}; ki++) for (int64_t kj = 0; kj < {kw}; kj++) {{",
        f"  {'const ' * scatter}{ctype}* row = col + ((ci * {kh} + ki) * {kw} + kj) * tile;",
        f"  const int64_t lo0 = {_first_inside(f'kj * {dw}', pw, sw)}, lo = lo0 < {ow} ? lo0 : {ow};",
        f"  const int64_t hi = {_end_inside(f'kj * {dw}', pw, sw, w, ow)};",
        "  for (int64_t y = oh0; y < oh1; y++) {",
        f"    {'const ' * scatter}{ctype}* r = row + (y - oh0) * {ow};",
        f"    const int64_t iy = y * {sh} - {ph} + ki * {dh};",
        f"    if (iy < 0 || iy >= {h}) {{ {'' if scatter else f'for (int64_t x = 0; x < {ow}; x++) r[x] = 0; '}continue; }}",
        f"    {'' if scatter else 'const '}{ctype}* src = xg + ci * {xc} + iy * {xh} + (kj * {dw} - {pw}) * {xw};"]  + \
        zero("    for (int64_t x = 0; x < lo; x++) r[x] = 0;") + [
        "    #pragma omp simd",
        f"    for (int64_t x = lo; x < hi; x++) " + (f"src[x * {sw * xw}] += r[x];" if scatter else f"r[x] = src[x * {sw * xw}];")] + \
        zero(f"    for (int64_t x = hi; x < {ow}; x++) r[x] = 0;") + ["  }", "}"]


def _gather_pixels(c: Conv, scatter: bool = False) -> List[str]:
    """Rows p of KG = (kh, kw, cg) each: whole pixels' channels (contiguous in a channels-last
    input). `scatter`: the reverse, as for _gather_planes."""
    _, _, h, w = c.x_size
    _, cg, kh, kw = c.w_size
    ow = c.out_size[3]
    (sh, sw), (ph, pw), (dh, dw) = c.stride, c.padding, c.dilation
    _, xc, xh, xw = c.x_stride
    kg = cg * kh * kw
    ctype, const = _ctype(c), "const " * scatter
    padding = "" if scatter else f"for (int64_t ci = 0; ci < {cg}; ci++) d[ci] = 0; "
    return [
        "for (int64_t y = oh0; y < oh1; y++) for (int64_t x = 0; x < " + str(ow) + "; x++) {",
        f"  {const}{ctype}* row = col + ((y - oh0) * {ow} + x) * {kg};",
        f"  for (int64_t ki = 0; ki < {kh}; ki++) for (int64_t kj = 0; kj < {kw}; kj++) {{",
        f"    {const}{ctype}* d = row + (ki * {kw} + kj) * {cg};",
        f"    const int64_t iy = y * {sh} - {ph} + ki * {dh}, ix = x * {sw} - {pw} + kj * {dw};",
        f"    if (iy < 0 || iy >= {h} || ix < 0 || ix >= {w}) {{ {padding}continue; }}",
        f"    {'' if scatter else 'const '}{ctype}* src = xg + iy * {xh} + ix * {xw};",
        "    #pragma omp simd",
        f"    for (int64_t ci = 0; ci < {cg}; ci++) " + ("src[ci * {xc}] += d[ci];".format(xc=xc) if scatter else f"d[ci] = src[ci * {xc}];"),
        "  }", "}"]


def _first_inside(shift: str, pad: int, step: int) -> str:
    """The first output column whose input column x*step - pad + shift is >= 0."""
    return f"(({pad} - {shift}) > 0 ? ({pad} - {shift} + {step - 1}) / {step} : 0)"


def _end_inside(shift: str, pad: int, step: int, size: int, out: int) -> str:
    """One past the last output column whose input column is < size (at least _first_inside)."""
    last = f"({size} - 1 + {pad} - {shift})"
    end = f"({last} >= 0 ? {last} / {step} + 1 : 0)"
    return f"({end} < {out} ? {end} : {out})"


def _product(c: Conv, weight: str, ldw: int, routine: str, og: int, kg: int) -> List[str]:
    """The tile's product with group g's weight rows, into the output in its layout (column-major
    BLAS terms: see the comments of each case)."""
    _, o, oh, ow = c.out_size
    wg = f"{weight} + g * {og * ldw}"
    if c.channels_last:  # C(og x tile, ldc o) = W_g(og x kg) . cols(kg x tile)
        cout = f"{c.out} + n * {oh * ow * o} + oh0 * {ow * o} + g * {og}"
        m, nn, ldc = str(og), "tile", o
        ta, a, lda = "T", wg, ldw
        tb, b, ldb = ("N", "col", kg) if c.pixels else ("T", "col", "tile")
    else:  # C(tile x og, ldc oh*ow) = cols(tile x kg) . W_g^T(kg x og)
        cout = f"{c.out} + n * {o * oh * ow} + g * {og * oh * ow} + oh0 * {ow}"
        m, nn, ldc = "tile", str(og), oh * ow
        ta, a, lda = ("T", "col", kg) if c.pixels else ("N", "col", "tile")
        tb, b, ldb = "N", wg, ldw
    return [f"{{ const int m = {m}, nn = {nn}, k = {kg}, lda = {lda}, ldb = {ldb}, ldc = {ldc};",
            f'  md_{routine}("{ta}", "{tb}", &m, &nn, &k, &one, {a}, &lda, {b}, &ldb, &zero, {cout}, &ldc); }}']


def _add_bias(c: Conv, og: int) -> List[str]:
    _, o, oh, ow = c.out_size
    b = f"{c.bias.buffer} + {c.bias.offset} + g * {og}"
    if c.channels_last:
        base = f"{c.out} + n * {oh * ow * o} + oh0 * {ow * o} + g * {og}"
        return [f"for (int64_t p = 0; p < tile; p++) {{", f"  {_ctype(c)}* r = {base} + p * {o};",
                "  #pragma omp simd", f"  for (int64_t q = 0; q < {og}; q++) r[q] += ({b})[q * {c.bias.stride[0]}];", "}"]
    base = f"{c.out} + n * {o * oh * ow} + g * {og * oh * ow} + oh0 * {ow}"
    return [f"for (int64_t q = 0; q < {og}; q++) {{", f"  {_ctype(c)}* r = {base} + q * {oh * ow};",
            f"  const {_ctype(c)} bq = ({b})[q * {c.bias.stride[0]}];",
            "  #pragma omp simd", "  for (int64_t p = 0; p < tile; p++) r[p] += bq;", "}"]


def _ctype(c: Conv) -> str:
    return blas_type(c.dtype)[1]
