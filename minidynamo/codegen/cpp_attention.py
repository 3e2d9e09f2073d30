"""Scaled dot-product attention in the generated C++: torch's CPU flash-attention forward
(`_scaled_dot_product_flash_attention_for_cpu`, what `F.scaled_dot_product_attention` runs) and
its backward become Attention steps of a kernel group when each head is small. Per (batch, head)
row of queries the step computes the scores against every key it may see (causal: keys up to the
row's position, top-left aligned as torch's), adds the float mask, takes the softmax with its
log-sum-exp and the weighted sum of the values; the backward recomputes the probabilities from
the saved log-sum-exp. For the few-key, few-dimension heads of small transformers torch's op
spends most of its time on set-up and blocking (35-70 us a call, forward or backward, for llama's
2x4 heads of 8 keys and 16 dimensions) where the arithmetic is a few microseconds; large heads,
where its blocked BLAS products win, stay torch calls. A row every key of which is masked gets
zeros and a log-sum-exp of 0, as torch's kernel gives it."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

import torch

from .cpp_tuning import PARALLEL_FOR, PARALLEL_MIN_WORK
from .graph_lowering import ExternArg
from .ir import Buffer, ExternNode
from .scheduler import Step, replace_externs

aten = torch.ops.aten
FORWARD = aten._scaled_dot_product_flash_attention_for_cpu.default
BACKWARD = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
_CTYPES = {torch.float32: "float", torch.float64: "double"}
# Heads up to this many score multiply-adds (queries x keys x head dimension) run in the generated
# code. Measured per call, forward / forward+backward, 1 thread, causal: 8x8x16 heads 27 / 364 us
# against torch's 67 / 496, 32x32x32 92 / 521 against 101 / 621; at 64x64x64 torch's forward is
# 15% faster.
MAX_HEAD_MACS = 1 << 15
MAX_KEYS = 1024  # a row of scores lives on the stack


@dataclass
class Attention:
    """out = softmax(q k^T * scale + mask [causal]) v and its log-sum-exp (`backward` false), or
    the gradients of q, k and v given the output's gradient `grad` and the forward's `out` and
    `lse` (a None gradient is not computed). q: (B, H, Lq, D); k, v: (B, Hk, Lk, D), H a
    multiple of Hk (grouped-query heads); mask: broadcast to (B, H, Lq, Lk), or None."""

    name: str
    q: ExternArg
    k: ExternArg
    v: ExternArg
    mask: Optional[ExternArg]
    causal: bool
    scale: float
    dtype: torch.dtype
    results: Tuple[Optional[ExternArg], ...]  # (out, lse) or (dq, dk, dv), whole buffers
    grad: Optional[ExternArg] = None  # the backward's inputs
    out: Optional[ExternArg] = None
    lse: Optional[ExternArg] = None
    stored: Set[str] = field(default_factory=set)

    @property
    def backward(self) -> bool:
        return self.grad is not None

    def reads(self) -> List[ExternArg]:
        extra = [self.grad, self.out, self.lse] if self.backward else []
        return [a for a in [self.q, self.k, self.v, self.mask] + extra if a is not None]

    def args(self) -> List[str]:
        """Parameter buffers: the results, then each read buffer once."""
        written = [r.buffer for r in self.results if r is not None]
        return list(dict.fromkeys(written + [a.buffer for a in self.reads()]))

    def work(self, buffers: Dict[str, Buffer]) -> int:
        b, h, lq, d = self.q.size
        return b * h * lq * self.k.size[2] * d * (4 if self.backward else 2)

    def describe(self, buffers: Dict[str, Buffer]) -> str:
        b, h, lq, d = self.q.size
        what = "attention backward" if self.backward else "attention"
        return f"[{b}x{h}x{lq}x{self.k.size[2]}: {what} d={d}{' causal' if self.causal else ''}]"

    def render(self, buffers: Dict[str, Buffer]) -> Tuple[str, List[str]]:
        """The C++ function and its parameters in order (nthreads follows)."""
        ctype = _CTYPES[self.dtype]
        args = self.args()
        written = {r.buffer for r in self.results if r is not None}
        params = [f"{'' if a in written else 'const '}{ctype}* __restrict__ {a}" for a in args]
        body = _backward_body(self, ctype) if self.backward else _forward_body(self, ctype)
        lines = [f"static void {self.name}({', '.join(params)}, int nthreads) {{"]
        lines += ["  " + ln for ln in body] + ["}"]
        return "\n".join(lines) + "\n", args


def use_attention(steps: List[Step], buffers: Dict[str, Buffer]) -> List[Step]:
    """`steps` with each small-headed flash attention call (forward or backward) turned into an
    Attention step."""
    return replace_externs(steps, lambda node, i: _as_attention(node, buffers, i))


def _bound(node: ExternNode) -> Optional[Dict[str, object]]:
    """The call's arguments by name, defaults filled in; None for an unknown argument."""
    schema = node.fn._schema.arguments
    if len(node.args) > len(schema) or not set(node.kwargs) <= {a.name for a in schema}:
        return None
    bound = {a.name: a.default_value for a in schema if a.has_default_value()}
    bound.update({a.name: v for a, v in zip(schema, node.args)})
    bound.update(node.kwargs)
    return bound if all(a.name in bound for a in schema) else None


def _as_attention(node: ExternNode, buffers: Dict[str, Buffer], index: int) -> Optional[Attention]:
    if node.fn not in (FORWARD, BACKWARD):
        return None
    a = _bound(node)
    if a is None or a["dropout_p"] != 0.0:
        return None
    backward = node.fn is BACKWARD
    tensors = [a[n] for n in ("query", "key", "value")] + (
        [a[n] for n in ("grad_out", "out", "logsumexp")] if backward else [])
    mask = a["attn_mask"]
    if not all(isinstance(t, ExternArg) for t in tensors) or not (mask is None or isinstance(mask, ExternArg)):
        return None
    q, k, v = tensors[:3]
    dtype = buffers[q.buffer].dtype
    reads = tensors + ([mask] if mask is not None else [])
    results = [_whole(buffers[n]) if n else None for n in node.names]
    if dtype not in _CTYPES or any(buffers[t.buffer].dtype != dtype for t in reads) \
            or any(buffers[r.buffer].dtype != dtype for r in results if r is not None) \
            or not any(r is not None for r in results) or not _small_heads(q.size, k.size, v.size):
        return None
    if mask is not None:
        mask = _broadcast(mask, (q.size[0], q.size[1], q.size[2], k.size[2]))
        if mask is None:
            return None
    scale = a["scale"] if a["scale"] is not None else q.size[3] ** -0.5
    if not math.isfinite(scale):
        return None
    grad, out, lse = tensors[3:] if backward else (None, None, None)
    return Attention(f"attention{index}", q, k, v, mask, bool(a["is_causal"]), float(scale), dtype,
                     tuple(results), grad, out, lse, {r.buffer for r in results if r is not None})


def _small_heads(q: Tuple[int, ...], k: Tuple[int, ...], v: Tuple[int, ...]) -> bool:
    if len(q) != 4 or len(k) != 4 or len(v) != 4 or not all(isinstance(s, int) for s in q + k + v):
        return False
    b, h, lq, d = q
    hk, lk = k[1], k[2]
    return (k[0] == v[0] == b and v[1] == hk and v[2] == lk and k[3] == d and v[3] == d and hk > 0
            and h % hk == 0 and 0 < lk <= MAX_KEYS and lq * lk * d <= MAX_HEAD_MACS)


def _broadcast(mask: ExternArg, size: Tuple[int, ...]) -> Optional[ExternArg]:
    """`mask` viewed as (B, H, Lq, Lk): leading dims added, size-1 dims with stride 0."""
    if len(mask.size) > 4:
        return None
    pad = 4 - len(mask.size)
    msize, mstride = (1,) * pad + tuple(mask.size), (0,) * pad + tuple(mask.stride)
    if any(m not in (1, s) for m, s in zip(msize, size)):
        return None
    stride = tuple(0 if m == 1 else st for m, st in zip(msize, mstride))
    return ExternArg(mask.buffer, size, stride, mask.offset)


def _whole(buf: Buffer) -> ExternArg:
    return ExternArg(buf.name, tuple(buf.size), tuple(buf.stride), 0)


def _at(a: ExternArg, *index: str) -> str:
    """The element of `a` at the given per-dim index expressions ("0" terms dropped)."""
    terms = [str(a.offset)] if a.offset else []
    terms += [f"{i} * {st}" for i, st in zip(index, a.stride) if st != 0 and i != "0"]
    return f"{a.buffer}[{' + '.join(terms) or '0'}]"


def _row(a: ExternArg, b: str, h: str, i: str) -> str:
    """Pointer to row i of head h of batch b (the last dim is indexed with its stride)."""
    terms = [str(a.offset)] + [f"{x} * {st}" for x, st in zip((b, h, i), a.stride) if st != 0]
    return f"{a.buffer} + {' + '.join(terms)}"


def _scores(at: Attention, ctype: str) -> List[str]:
    """s[j] = q_i . k_j * scale (+ mask) for the keys row i sees (n of them)."""
    d, lk = at.q.size[3], at.k.size[2]
    qd, kd = at.q.stride[3], at.k.stride[3]
    seen = f"i + 1 < {lk} ? i + 1 : {lk}" if at.causal else str(lk)
    mask = f" + {_at(at.mask, 'b', 'h', 'i', 'j')}" if at.mask is not None else ""
    return [f"const int64_t n = {seen};",
            f"const {ctype}* qi = {_row(at.q, 'b', 'h', 'i')};",
            "for (int64_t j = 0; j < n; j++) {",
            f"  const {ctype}* kj = kh + j * {at.k.stride[2]};",
            f"  {ctype} acc = 0;",
            "  #pragma omp simd reduction(+:acc)",
            f"  for (int64_t c = 0; c < {d}; c++) acc += qi[c * {qd}] * kj[c * {kd}];",
            f"  s[j] = acc * ({ctype}){at.scale!r}{mask};",
            "}"]


def _heads(at: Attention, ctype: str, per_group: bool) -> List[str]:
    """The loop over batches and heads (`per_group`: over key/value heads, each running its
    query heads in turn), split over the threads when there is enough work; kh, vh point at the
    key and value head."""
    b, h, _, _ = at.q.size
    hk = at.k.size[1]
    rep = h // hk
    work = at.work({})
    pragma = [PARALLEL_FOR.format(" collapse(2)", "nthreads > 1")] if work >= PARALLEL_MIN_WORK else []
    if per_group:
        head = pragma + [f"for (int64_t b = 0; b < {b}; b++) for (int64_t g = 0; g < {hk}; g++) {{"]
    else:
        head = pragma + [f"for (int64_t b = 0; b < {b}; b++) for (int64_t h = 0; h < {h}; h++) {{",
                         f"  const int64_t g = h / {rep};"]
    return head + [f"  const {ctype}* kh = {_row(at.k, 'b', 'g', '0')};",
                   f"  const {ctype}* vh = {_row(at.v, 'b', 'g', '0')};"]


def _forward_body(at: Attention, ctype: str) -> List[str]:
    out, lse = at.results
    lq, lk, d = at.q.size[2], at.k.size[2], at.q.size[3]
    vd, od = at.v.stride[3], out.stride[3]
    exp = "md_expf" if at.dtype == torch.float32 else "mdm::exp"
    row = _scores(at, ctype) + [
        f"{ctype}* oi = {_row(out, 'b', 'h', 'i')};",
        f"{ctype} m = -std::numeric_limits<{ctype}>::infinity();",
        "for (int64_t j = 0; j < n; j++) m = md_max(m, s[j]);",
        f"if (m == -std::numeric_limits<{ctype}>::infinity()) {{",
        f"  for (int64_t c = 0; c < {d}; c++) oi[c * {od}] = 0;",
        f"  {_at(lse, 'b', 'h', 'i')} = 0;",
        "  continue;",
        "}",
        f"{ctype} sum = 0;",
        f"alignas(64) {ctype} acc[{d}] = {{0}};",
        "for (int64_t j = 0; j < n; j++) {",
        f"  const {ctype} p = {exp}(s[j] - m);",
        "  sum += p;",
        f"  const {ctype}* vj = vh + j * {at.v.stride[2]};",
        "  #pragma omp simd",
        f"  for (int64_t c = 0; c < {d}; c++) acc[c] += p * vj[c * {vd}];",
        "}",
        f"const {ctype} r = 1 / sum;",
        "#pragma omp simd",
        f"for (int64_t c = 0; c < {d}; c++) oi[c * {od}] = acc[c] * r;",
        f"{_at(lse, 'b', 'h', 'i')} = m + mdm::log(sum);"]
    return _heads(at, ctype, False) + [
        f"  for (int64_t i = 0; i < {lq}; i++) {{", f"    alignas(64) {ctype} s[{lk}];"] + [
        "    " + ln for ln in row] + ["  }", "}"]


def _backward_body(at: Attention, ctype: str) -> List[str]:
    """Per key/value head: its gradients zeroed, then for each of its query heads and rows the
    probabilities p_j = exp(s_j - lse), dv_j += p_j dO_i, ds_j = p_j (dO_i . v_j - dO_i . O_i),
    dq_i = scale sum_j ds_j k_j, dk_j += scale ds_j q_i."""
    dq, dk, dv = at.results
    b, h, lq, d = at.q.size
    hk, lk = at.k.size[1], at.k.size[2]
    rep = h // hk
    exp = "md_expf" if at.dtype == torch.float32 else "mdm::exp"
    lines = _heads(at, ctype, True)
    for grad in (dk, dv):
        if grad is not None:
            lines += [f"  for (int64_t j = 0; j < {lk}; j++) for (int64_t c = 0; c < {d}; c++) "
                      f"{_at(grad, 'b', 'g', 'j', 'c')} = 0;"]
    row = _scores(at, ctype) + [
        f"const {ctype}* gi = {_row(at.grad, 'b', 'h', 'i')};",
        f"const {ctype}* oi = {_row(at.out, 'b', 'h', 'i')};",
        f"const {ctype} lse = {_at(at.lse, 'b', 'h', 'i')};",
        f"{ctype} di = 0;",
        "#pragma omp simd reduction(+:di)",
        f"for (int64_t c = 0; c < {d}; c++) di += gi[c * {at.grad.stride[3]}] * oi[c * {at.out.stride[3]}];",
        f"alignas(64) {ctype} dqi[{d}] = {{0}};",
        "for (int64_t j = 0; j < n; j++) {",
        f"  const {ctype} p = {exp}(s[j] - lse);",
        f"  const {ctype}* vj = vh + j * {at.v.stride[2]};",
        f"  const {ctype}* kj = kh + j * {at.k.stride[2]};",
        f"  {ctype} dp = 0;",
        "  #pragma omp simd reduction(+:dp)",
        f"  for (int64_t c = 0; c < {d}; c++) dp += gi[c * {at.grad.stride[3]}] * vj[c * {at.v.stride[3]}];",
        f"  const {ctype} ds = p * (dp - di);"]
    if dv is not None:
        row += ["  #pragma omp simd",
                f"  for (int64_t c = 0; c < {d}; c++) {_at(dv, 'b', 'g', 'j', 'c')} += p * gi[c * {at.grad.stride[3]}];"]
    row += ["  #pragma omp simd", f"  for (int64_t c = 0; c < {d}; c++) dqi[c] += ds * kj[c * {at.k.stride[3]}];"]
    if dk is not None:
        row += [f"  const {ctype} dss = ds * ({ctype}){at.scale!r};", "  #pragma omp simd",
                f"  for (int64_t c = 0; c < {d}; c++) {_at(dk, 'b', 'g', 'j', 'c')} += dss * qi[c * {at.q.stride[3]}];"]
    row += ["}"]
    if dq is not None:
        row += ["#pragma omp simd",
                f"for (int64_t c = 0; c < {d}; c++) {_at(dq, 'b', 'h', 'i', 'c')} = dqi[c] * ({ctype}){at.scale!r};"]
    return lines + [f"  for (int64_t r = 0; r < {rep}; r++) {{", f"    const int64_t h = g * {rep} + r;",
                    f"    for (int64_t i = 0; i < {lq}; i++) {{", f"      alignas(64) {ctype} s[{lk}];"] + [
        "      " + ln for ln in row] + ["    }", "  }", "}"]
