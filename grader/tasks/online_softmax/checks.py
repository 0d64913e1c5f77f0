"""Checks for 01_online_softmax: row softmax and lse, one warp per row."""
from __future__ import annotations

import itertools

import numpy as np

from ...attention import references as R, replays, weights
from ...spec import F32, Case, Cause, Seen

CASES = [
    Case("one_element", dict(R=1, n=1)),
    Case("fewer_than_a_warp", dict(R=3, n=5)),
    Case("warp_minus_1", dict(R=4, n=31)),
    Case("one_warp", dict(R=5, n=32)),
    Case("warp_plus_1", dict(R=6, n=33)),
    Case("rows_not_multiple_of_block", dict(R=7, n=100)),
    Case("prime_length", dict(R=9, n=1009)),
    Case("huge_logits", dict(R=8, n=300, spread=50.0)),
    Case("extreme_logits", dict(R=8, n=300, spread=1000.0)),
    Case("masked_entries", dict(R=8, n=200, masked=0.5)),
    Case("fully_masked_rows", dict(R=8, n=64, masked_rows=3)),
    # Every 32nd entry from the first masked: with one warp per row, lane 0 holds nothing but -inf in
    # rows that are not masked (masked_entries keeps entry 0 visible, so no lane of it is all -inf).
    Case("masked_every_32nd", dict(R=6, n=100, masked_stride=32)),
    Case("increasing_rows", dict(R=4, n=500, increasing=True)),
    # Small integers: maxima tie everywhere (two lanes' states with the same m, a row of one value), as
    # low-precision scores do; a merge that tests m2 > m and m2 < m but not equality drops a sum.
    Case("tied_maxima", dict(R=6, n=100, integers=True)),
    # Finite values at or below a soft mask's -1e30, down to float32's lowest: such a row is not masked
    # (its softmax is spread over its entries), so only m == -INFINITY may mean "no visible entry".
    Case("soft_masked_rows", dict(R=6, n=70, soft_mask=True)),
    Case("many_rows", dict(R=257, n=128)),
    Case("long_rows", dict(R=4, n=4099)),
]
TOLERANCES = {"y": F32, "lse": F32}


def make_inputs(p, rng):
    x = rng.standard_normal((p["R"], p["n"])) * p.get("spread", 3.0)
    if p.get("integers"):
        x = rng.integers(-2, 3, size=x.shape).astype(np.float64)
        x[0] = 1.0                                  # one row of one value: every lane's max ties
    if p.get("increasing"):
        # Each new element is the new max: the running sum is rescaled at every step.
        x = np.sort(x, axis=1) + np.linspace(0, 40, p["n"])
    if p.get("masked"):
        x[rng.random(x.shape) < p["masked"]] = -np.inf
        x[:, 0] = rng.standard_normal(p["R"])       # keep at least one visible entry per row
    if p.get("masked_stride"):
        x[:, ::p["masked_stride"]] = -np.inf
    if p.get("soft_mask"):
        # Row r takes pattern r % 6 (any R and n a shrunk case has): every entry the soft mask (y =
        # 1/n); every entry float32's lowest; half of the row the lowest, half normal; entries far
        # apart at -1e30's scale (y one-hot); every other entry the soft mask; a normal row.
        lowest, n = float(np.finfo(np.float32).min), p["n"]
        for r in range(p["R"]):
            kind = r % 6
            if kind == 0:
                x[r] = -1e30
            elif kind == 1:
                x[r] = lowest
            elif kind == 2:
                x[r, : n // 2] = lowest
            elif kind == 3:
                x[r] = -1e30 * (1.0 + 1e-3 * rng.random(n))
            elif kind == 4:
                x[r, 1::2] = -1e30
    if p.get("masked_rows"):
        x[rng.choice(p["R"], min(p["masked_rows"], p["R"]), replace=False)] = -np.inf
    return {"x": x.astype(np.float32)}


def reference(inputs, p):
    y, lse = R.softmax(inputs["x"])
    return {"y": y, "lse": lse}


def call(fn, rt, inputs, p):
    y, lse = fn(rt, inputs["x"])
    return {"y": y, "lse": lse}


# ---- diagnosis: replay the warp reduction with the usual mistakes ---------------------------------

def _lane_states(x):
    """(m, l) of each lane's strided elements x[lane::32], per row: [R, 32] each (empty: -inf, 0)."""
    R, n = x.shape
    pad = np.full((R, -n % 32), -np.inf)
    lanes = np.concatenate([x, pad], axis=1).reshape(R, -1, 32)     # [R, n/32, 32]
    m = lanes.max(axis=1)
    with np.errstate(invalid="ignore"):
        l = np.where(np.isfinite(m), np.exp(lanes - np.where(np.isfinite(m), m, 0)[:, None]).sum(axis=1), 0.0)
    return m, l


def _merge(m, l, m2, l2, rescale=(True, True), guard=True):
    """TODO(1)'s merge; rescale=(False, True) replays one that forgets to rescale its own l, and so on
    ("flip": with the exponent's sign reversed);
    guard=False one without the return for two empty states (exp(-inf - -inf) is NaN)."""
    m_new = np.maximum(m, m2)
    safe = np.where(np.isfinite(m_new), m_new, 0.0) if guard else m_new
    def exp32(t):                       # expf: it overflows and underflows where float64 would not
        return np.exp(np.asarray(t, np.float32)).astype(np.float64)

    def rescaled(l, m_l, how):          # True: l · exp(m_l - m_new); False: l; "flip": l · exp(m_new - m_l);
        if how == "old":                # "old": l · exp(m_l - m), against the state's old max
            return l * exp32(m_l - m)
        return l * exp32(safe - m_l) if how == "flip" else l * exp32(m_l - safe) if how else l
    with np.errstate(invalid="ignore", over="ignore"):
        own, other = rescaled(l, m, rescale[0]), rescaled(l2, m2, rescale[1])
        l_new = np.where(np.isfinite(m_new), own + other, l) if guard else own + other
    return np.where(np.isfinite(m_new), m_new, m), l_new


def _streamed_lanes(x, rescale, guard=True):
    """Each lane's (m, l) built as the kernel builds it, one merge of (x_j, 1) per element: [R, 32]."""
    R, n = x.shape
    m, l = np.full((R, 32), -np.inf), np.zeros((R, 32))
    pad = np.concatenate([x, np.full((R, -n % 32), -np.inf)], axis=1).reshape(R, -1, 32)
    real = (np.arange(pad.shape[1] * 32) < n).reshape(-1, 32)
    for step in range(pad.shape[1]):
        # Every element of the row, -inf ones too, is merged as (x_j, 1); lanes past n merge nothing.
        m_new, l_new = _merge(m, l, pad[:, step], np.ones((R, 32)), rescale, guard)
        m, l = np.where(real[step], m_new, m), np.where(real[step], l_new, l)
    return m, l


def _shuffle(a, offset, kind):
    """What each lane receives: __shfl_xor_sync (lane ^ offset) or __shfl_down_sync (lane + offset,
    its own value past lane 31)."""
    lane = np.arange(32)
    src = lane ^ offset if kind == "xor" else np.where(lane + offset < 32, lane + offset, lane)
    return a[:, src]


def _replayed(x, start, m_kind, l_kind, rescale=(True, True), guard=True, l_from_m=False):
    """y and lse of the kernel when its reduction starts at `start` (or runs the offsets of the tuple
    `start`) with these shuffles, and its merge rescales the sums as `rescale` says (`l_from_m`: the
    partner's l fetched from its m)."""
    m, l = _lane_states(x) if rescale == (True, True) and guard else _streamed_lanes(x, rescale, guard)
    offsets = start if isinstance(start, tuple) else tuple(1 << k for k in reversed(range(start.bit_length())))
    for offset in offsets:
        m, l = _merge(m, l, _shuffle(m, offset, m_kind), _shuffle(m if l_from_m else l, offset, l_kind),
                      rescale, guard)
    R, n = x.shape
    lane = np.arange(n) % 32
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        y = np.where(np.isfinite(m[:, lane]), np.exp(x - m[:, lane]) / l[:, lane], 0.0)
        lse = np.where(np.isfinite(m[:, 0]), m[:, 0] + np.log(l[:, 0]), -np.inf)
    return y, lse


def finite_rows_as_masked(ctx, x):
    """Rows of finite entries that came out as a fully masked row does (y = 0, lse = -inf)."""
    y, lse = np.asarray(ctx.out["y"], np.float64), np.asarray(ctx.out["lse"], np.float64)
    as_masked = np.isneginf(lse) & (y == 0).all(axis=-1) & np.isfinite(ctx.ref["lse"])
    if as_masked.any():
        rows = np.flatnonzero(as_masked)
        top = x[rows].max(axis=-1)
        largest = (f"whose largest entry is {top[0]:.3g}" if top.min() == top.max() else
                   f"whose largest entries lie between {top.min():.3g} and {top.max():.3g}")
        yield Seen(f"{len(rows)} row(s) with a finite entry came out as a fully masked row does (y = 0, "
                   f"lse = -inf): row{'s' if len(rows) > 1 else ''} {', '.join(map(str, rows[:8]))}"
                   f"{' ...' if len(rows) > 8 else ''}, {largest}. Only a row whose every entry is -inf has "
                   "no visible entry; a finite one, however low, is visible.")


def diagnose(ctx):
    from ...attention.replays import matches, rel
    x = np.asarray(ctx.inputs["x"], np.float64)
    yield from finite_rows_as_masked(ctx, x)
    for start, m_kind, l_kind in ((16, "down", "down"), (16, "down", "xor"), (16, "xor", "down"),
                                  (8, "xor", "xor"), (4, "xor", "xor"), (2, "xor", "xor"), (1, "xor", "xor")):
        y_alt, lse_alt = _replayed(x, start, m_kind, l_kind)
        # The replay must reproduce the output AND differ from the truth: on short rows some of these
        # reductions are still right, and then they explain nothing.
        if matches(ctx, y=y_alt, lse=lse_alt) and (ctx.probe or rel(y_alt, ctx.ref["y"]) > 1e-5):
            if "down" in (m_kind, l_kind):
                yield Cause("reduce:shfl_down", (
                    "after the warp reduction only lane 0 holds the row's (m, l) (the output matches a "
                    "reduction with __shfl_down_sync): a lane whose partner lane + offset is past 31 gets "
                    "its own value back, so the other lanes end with partial states, and the elements "
                    "they normalise are wrong. Use __shfl_xor_sync, the butterfly, for m and for l: "
                    "every lane then ends with the whole row's state."))
            else:
                offsets = ", ".join(str(1 << k) for k in reversed(range(start.bit_length())))
                yield Cause("reduce:start", (
                    f"the butterfly's largest offset is {start}, not 16 (the output matches a reduction "
                    f"over offsets {offsets} only, in whichever order): lanes only combine within groups "
                    f"of {2 * start}, so each group normalises with its own (m, l). Use every offset from "
                    "16, half the warp, down to 1."))
    # No butterfly at all (or one whose merge never updates the lane's own state): each lane
    # normalises its own elements with its own (m, l), and lse is lane 0's.
    y_alt, lse_alt = _replayed(x, (), "xor", "xor")
    if matches(ctx, y=y_alt, lse=lse_alt) and (ctx.probe or rel(y_alt, ctx.ref["y"]) > 1e-5):
        yield Cause("reduce:max_sum_lanes:missing_16_8_4_2_1", (
            "the lanes' states are never combined (the output matches a butterfly with no step: each "
            "lane normalises its elements with its own max and sum, and lse is lane 0's): every "
            "__shfl_xor_sync step, offsets 16, 8, 4, 2, 1, must merge the partner's (m, l) into the "
            "lane's own, merge(m, l, m_other, l_other), which updates its first two arguments."))
    # The streaming loop merging x_row[lane] where x_row[j] is due: lane t merges its first element
    # once for each of its j, and no other element.
    R_, n = x.shape
    if n > 1:
        lanes_n = min(n, 32)
        first = x[:, :lanes_n]
        count = np.array([len(range(t, n, 32)) for t in range(lanes_n)], np.float64)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            m1 = np.max(first, axis=-1, initial=-np.inf)
            ms = np.where(np.isfinite(m1), m1, 0.0)[:, None]
            l1 = (count * np.exp(first - ms)).sum(axis=-1)
            y1 = np.where(l1[:, None] > 0, np.exp((x - ms).astype(np.float32)).astype(np.float64)
                          / np.where(l1 > 0, l1, 1.0)[:, None], 0.0)     # float32: exp overflows
            lse1 = np.where(l1 > 0, ms[:, 0] + np.log(np.where(l1 > 0, l1, 1.0)), -np.inf)
        if matches(ctx, y=y1, lse=lse1):
            yield Cause("loop_index:stream_lane", (
                "the streaming loop merges x_row[lane], the lane's first element, where x_row[j] is due "
                "(the output matches each lane's first element counted once per step of its loop, and no "
                "other element): merge(m, l, x_row[j], 1)."))
    # y written as exp(x) / l without the max, with l summed against the max.
    # In float32, as the kernel computes it: exp(x) overflows past x = 88.7.
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m_row = np.max(x, axis=-1, initial=-np.inf)
        m_safe = np.where(np.isfinite(m_row), m_row, 0.0)[:, None]
        l_row = np.exp(x - m_safe).sum(axis=-1, keepdims=True).astype(np.float32)
        y_alt = np.where(np.isfinite(m_row)[:, None],
                         np.exp(x.astype(np.float32)) * (np.float32(1) / l_row), 0.0).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        y_inv = np.where(np.isfinite(m_row)[:, None], ctx.ref["y"] * l_row.astype(np.float64) ** 2, 0.0)
    if matches(ctx, y=y_inv):
        yield Cause("y:divides_by_inv_l", (
            "y is exp(x - m) divided by 1/l, where times 1/l is due (the output matches y · l² per row): "
            "y = exp(x - m) · inv_l with inv_l = 1/l."))
    if matches(ctx, y=y_alt):
        yield Cause("y:unshifted", (
            "y is written as exp(x) / l, without the max (the output matches softmax times exp(m) per "
            "row): l was summed as exp(x - m), so y = exp(x - m) / l."))
    # The butterfly with offsets left out elsewhere than at its start (those are reduce:start).
    full = (16, 8, 4, 2, 1)
    for kept in (c for r in range(1, 5) for c in itertools.combinations(full, r)):
        if kept == full[full.index(kept[0]):]:
            continue
        y_alt, lse_alt = _replayed(x, kept, "xor", "xor")
        if matches(ctx, y=y_alt, lse=lse_alt) and (ctx.probe or rel(y_alt, ctx.ref["y"]) > 1e-5):
            missing = [o for o in full if o not in kept]
            yield Cause(f"reduce:max_sum_lanes:missing_{'_'.join(map(str, missing))}", (
                f"the butterfly leaves out offset {' and '.join(map(str, missing))} (the output matches "
                f"a reduction over offsets {', '.join(map(str, kept))} only): each lane ends with the "
                f"state of {2 ** len(kept)} of the 32 lanes. Halve from 16 down to 1, every offset."))
    for rescale, cid, which in (((False, True), "merge:no_rescale_l", "its own sum l"),
                                ((True, False), "merge:no_rescale_l2", "the other state's sum l2"),
                                ((False, False), "merge:no_rescale", "either sum")):
        y_alt, lse_alt = _replayed(x, 16, "xor", "xor", rescale)
        if matches(ctx, y=y_alt, lse=lse_alt) and (ctx.probe or rel(y_alt, ctx.ref["y"]) > 1e-5):
            yield Cause(cid, (
                f"merge (TODO 1) does not rescale {which} to the new max (the output matches that "
                "merge): each sum was measured against its own max, so l = l · exp(m - m_new) + "
                "l2 · exp(m2 - m_new). Rows whose max never moves are still right, which is why some "
                "cases pass."))
    for rescale, cid, which, term in ((("flip", True), "merge:sign:l", "its own sum l", "l · exp(m - m_new)"),
                                      ((True, "flip"), "merge:sign:l2", "the other state's sum l2",
                                       "l2 · exp(m2 - m_new)")):
        y_alt, lse_alt = _replayed(x, 16, "xor", "xor", rescale)
        if matches(ctx, y=y_alt, lse=lse_alt):
            yield Cause(cid, (
                f"merge (TODO 1) rescales {which} with the exponent's sign reversed (the output matches "
                f"exp(m_new - ...) there): the new max is at least the old one, so the factor is "
                f"{term}, at most 1."))
    y_alt, lse_alt = _replayed(x, 16, "xor", "xor", (True, "old"))
    if matches(ctx, y=y_alt, lse=lse_alt):
        yield Cause("merge:l2_old_max", (
            "merge (TODO 1) rescales the other state's sum against this state's old max, "
            "l2 · exp(m2 - m), not the new one (the output matches that merge): both sums are brought "
            "to m_new = max(m, m2): l = l · exp(m - m_new) + l2 · exp(m2 - m_new)."))
    y_alt, lse_alt = _replayed(x, 16, "xor", "xor", l_from_m=True)
    if matches(ctx, y=y_alt, lse=lse_alt):
        yield Cause("reduce:l_reads_m", (
            "the butterfly hands each lane its partner's m where the partner's l is due (the output "
            "matches l_other = __shfl_xor_sync(..., m, offset)): shuffle l for l, m for m."))
    yield from unwritten_causes(ctx, x)
    # The streaming loop stepping by 1 from its lane: element j is merged by lanes 0 .. min(j, 31),
    # so it weighs min(j, 31) + 1 times in l.
    count = np.minimum(np.arange(x.shape[-1]), 31) + 1.0
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        m_row = np.max(x, axis=-1, initial=-np.inf)
        m_safe = np.where(np.isfinite(m_row), m_row, 0.0)[:, None]
        l_c = (count * np.exp(x - m_safe)).sum(axis=-1)
        y_alt = np.where(l_c[:, None] > 0, np.exp(x - m_safe) / np.where(l_c > 0, l_c, 1.0)[:, None], 0.0)
        lse_alt = np.where(l_c > 0, m_safe[:, 0] + np.log(np.where(l_c > 0, l_c, 1.0)), -np.inf)
    if matches(ctx, y=y_alt, lse=lse_alt):
        yield Cause("loop_step:stream_1", (
            "the streaming loop steps by 1, not 32 (the output matches element j counted by the "
            "min(j, 31) + 1 lanes that reach it): lane t takes elements t, t + 32, t + 64, ..., so each "
            "element is merged once."))
    y_alt, lse_alt = _replayed(x, 16, "xor", "xor", guard=False)
    if matches(ctx, y=y_alt, lse=lse_alt):
        yield Cause("merge:no_guard", (
            "merge (TODO 1) has no guard for two empty states (the output matches that merge): when "
            "both maxima are -inf, exp(m - m_new) is exp(-inf - -inf) = NaN, and 0 · NaN is NaN, which "
            "every later merge spreads. Return early when m_new == -INFINITY: lanes with no element are "
            "empty states (rows shorter than a warp, fully masked rows)."))
    lse_ref = ctx.ref["lse"]
    with np.errstate(invalid="ignore"):
        row_max = x.max(axis=-1) if x.shape[-1] else np.full(x.shape[:-1], -np.inf)
    if matches(ctx, lse=lse_ref / np.log(2.0)):
        yield Cause("lse:log2", "lse is in log2 units (the output matches lse / ln 2): lse = (m + log2(l)) · "
                                "ln 2 when m and l come from exp2, or m + log(l) with expf.")
    if matches(ctx, lse=lse_ref - row_max) or matches(ctx, lse=(lse_ref - row_max) / np.log(2.0)):
        yield Cause("lse:no_max", "lse is missing the max (the output matches log(l) alone): lse = m + log(l).")
    if matches(ctx, lse=2 * row_max - lse_ref):
        yield Cause("lse:log_inverse", replays.LSE_LOG_INVERSE)
    with np.errstate(invalid="ignore", over="ignore"):
        m_safe = np.where(np.isfinite(row_max), row_max, 0.0)
        l_row = np.exp(x - m_safe[:, None]).sum(axis=-1)
    yield from replays.lse_units_causes(ctx, row_max, l_row)
    # Each element merged as the state (x, exp(x)) where (x, 1) is due: l sums exp(x) · exp(x - m), in
    # float32 (exp(x) overflows past 88.7).
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        m32 = np.where(np.isfinite(row_max), row_max, 0.0).astype(np.float32)[:, None]
        x32 = x.astype(np.float32)
        l_alt = (np.exp(x32) * np.exp(x32 - m32)).sum(axis=-1, dtype=np.float32).astype(np.float64)
        y_alt = np.where(np.isfinite(x), np.exp(x32 - m32).astype(np.float64) / l_alt[:, None], 0.0)
        lse_alt = np.where(np.isfinite(row_max), row_max + np.log(l_alt), -np.inf)
    if matches(ctx, y=y_alt, lse=lse_alt):
        yield Cause("merge:element_weight_exp", (
            "each element enters the softmax as the state (x, exp(x)), where (x, 1) is due (the output "
            "matches l = sum of exp(x) · exp(x - m)): one element seen alone has max x and sum exp(x - x) = 1."))
    # The row's loop runs one element too far, j <= n: (m, l) also take x_row[n], the next row's first
    # element (the last row's: what lies after the array, zeros in the emulator's padding); y and lse
    # are then normalised with that state.
    R, n = x.shape
    if R and n:
        extra = np.append(x[1:, 0], 0.0)[:, None]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            wide = np.concatenate([x, extra], axis=1)
            m_alt = wide.max(axis=1, keepdims=True)
            l_alt = np.exp(wide - m_alt).sum(axis=1, keepdims=True)
            y_alt = np.exp(x - m_alt) / l_alt
            lse_alt = (m_alt + np.log(l_alt))[:, 0]
        if matches(ctx, y=y_alt, lse=lse_alt):
            yield Cause("row_bound:one_past_end", (
                "each row's (m, l) also takes the element after its last, x_row[n] (the next row's first; "
                "the output matches that): the loop over a row's elements runs to j <= n, where j < n is due."))
    yield from weights.softmax_rows_observation(ctx, x)


ROWS_PER_BLOCK = 4      # the lesson's block: 32 lanes × 4 rows (a student's other choice is not replayed)


def unwritten_causes(ctx, x):
    """Rows or elements never written, exactly where a wrong row index or store loop leaves them."""
    from ...attention.replays import unwritten_as
    R_, n = x.shape
    r = np.arange(R_)
    blocks = -(-R_ // ROWS_PER_BLOCK)
    missed_rows = ~((r % 32 < ROWS_PER_BLOCK) & (r < 32 * blocks))
    if unwritten_as(ctx, {"y": np.broadcast_to(missed_rows[:, None], x.shape), "lse": missed_rows}):
        yield Cause("grid:rows_blockdim_x", (
            "only rows 32·b .. 32·b + 3 were written, exactly as a row index blockIdx.x · blockDim.x + "
            "threadIdx.y leaves them: blockDim.x is the 32 lanes of a row, blockDim.y the rows of a "
            "block. row = blockIdx.x · blockDim.y + threadIdx.y."))
    missed = np.broadcast_to(np.arange(n) % 32 != 0, x.shape)
    if unwritten_as(ctx, {"y": missed}):
        yield Cause("store:loop_start_0", (
            "y was written only at the columns j that are multiples of 32, exactly as a store loop "
            "for (j = 0; j < n; j += 32) in every lane leaves it: lane t stores columns t, t + 32, ..., "
            "so the loop starts at j = lane."))
