"""Module 06: FlashAttention on tensor cores, float16/bfloat16 with mma.sync, ldmatrix and cp.async.

The catalogue data of the module; its folder holds the rest (see grader/tasks/__init__.py).
"""

TITLE = 'FlashAttention on tensor cores: fp16/bf16 fragments, mma.sync, cp.async'
ENTRY = 'flash_tc'            # the function exercises/06_flash_tensor_cores.py defines
GOALS = (
    'Compute S = Q Kᵀ and P V with mma.sync on 16×16 and 16×8 register fragments read by ldmatrix, float32 accumulators.',
    "Run the online softmax on fragment rows: a row lives in one quad of 4 lanes, its max and sum are quad shuffles.",
    "Keep P in registers: S's accumulator fragment, rounded to fp16/bf16, is P V's A fragment as it stands.",
    'Read low-precision error against a same-precision reference, and see what double buffering and a swizzle buy.',
)
HINTS = (
    "TODO(1): S for a warp's rows is a sum over the features, 16 at a time (kk = 0 .. KSTEPS - 1). Per step you need Q's A fragment of each of the warp's MT row tiles, q_fragment(a[mt], mt, kk), and K's B fragments for every 8 keys. K is stored [key][feature]: the transpose of Kᵀ, which is exactly the 'col' layout B wants, so no .trans.",
    "TODO(1): one ldmatrix_x4(kb, k_t + block16(np, kk)) reads keys 16 np .. 16 np + 15 × features 16 kk .. 16 kk + 15 as four 8×8 matrices: kb[0] keys 0-7 × features 0-7, kb[1] keys 8-15 × features 0-7, kb[2] keys 0-7 × features 8-15, kb[3] keys 8-15 × features 8-15. So key tile 2 np takes (b0, b1) = (kb[0], kb[2]) and key tile 2 np + 1 takes (kb[1], kb[3]).",
    "TODO(1): for (kk < KSTEPS) { unsigned a[MT][4]; for (mt) q_fragment(a[mt], mt, kk); for (np < NT / 2) { unsigned kb[4]; ldmatrix_x4(kb, k_t + block16(np, kk)); for (mt) { mma_16816(s[mt][2 * np], a[mt], kb[0], kb[2]); mma_16816(s[mt][2 * np + 1], a[mt], kb[1], kb[3]); } } }, every loop with #pragma unroll (fragments must stay in registers, so every index must be a compile-time constant).",
    "TODO(2): in every s[mt][nt], elements 0 and 1 are row g and elements 2 and 3 row g + 8, so this lane holds 2 · NT of a row's BLOCK_N scores (2 of every 8 keys) and the 3 other lanes of its quad hold the rest. Per (mt, r): mx = the max over nt of s[mt][nt][2 * r] and s[mt][nt][2 * r + 1]; then mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)) and the same with offset 2. All 32 lanes run it: no if around it.",
    "TODO(2): the scores in s are unscaled: m_new = fmaxf(m[mt][r], mx * scale_log2); m_use = m_new == -INFINITY ? 0.0f : m_new (module 03's guard); alpha = exp2f(m[mt][r] - m_use); m[mt][r] = m_new; l[mt][r] *= alpha; and acc[mt][dt][2r], acc[mt][dt][2r + 1] *= alpha for every dt. Then, for e = 2r, 2r + 1 of every nt: s[mt][nt][e] = exp2f(fmaf(s[mt][nt][e], scale_log2, -m_use)); l[mt][r] += s[mt][nt][e] (float32, this lane's part only: no shuffle).",
    "TODO(2): after both rows of tile mt, pack P as P V's A fragments, keys 16 kk .. 16 kk + 15 from S tiles 2kk and 2kk + 1: p[mt][kk][0] = pack2(s[mt][2kk][0], s[mt][2kk][1]); p[mt][kk][1] = pack2(s[mt][2kk][2], s[mt][2kk][3]); p[mt][kk][2] = pack2(s[mt][2kk+1][0], s[mt][2kk+1][1]); p[mt][kk][3] = pack2(s[mt][2kk+1][2], s[mt][2kk+1][3]). The rounding to fp16/bf16 happens here, after the tile's max is final.",
    "TODO(3): P V sums over the tile's keys, 16 at a time (kk = 0 .. NT / 2 - 1), with p[mt][kk] as A. B is V's 16 keys × 8 features, and B wants two neighbouring keys of one feature in a register; V is stored [key][feature], so those two sit in different rows: read V transposed, ldmatrix_x4_trans.",
    "TODO(3): ldmatrix_x4_trans(vb, v_t + block16(kk, dp)) reads keys 16 kk .. × features 16 dp .. : vb[0] keys 0-7 × features 0-7, vb[1] keys 8-15 × features 0-7, vb[2] keys 0-7 × features 8-15, vb[3] keys 8-15 × features 8-15. Feature tile 2 dp takes (b0, b1) = (vb[0], vb[1]) (the keys are the k of this product), feature tile 2 dp + 1 takes (vb[2], vb[3]).",
    "TODO(3): for (kk < NT / 2) for (dp < DT / 2) { unsigned vb[4]; ldmatrix_x4_trans(vb, v_t + block16(kk, dp)); for (mt) { mma_16816(acc[mt][2 * dp], p[mt][kk], vb[0], vb[1]); mma_16816(acc[mt][2 * dp + 1], p[mt][kk], vb[2], vb[3]); } }, all with #pragma unroll.",
    "TODO(4): each lane's l[mt][r] is its part of the row sum (its 2 keys of every 8); the row's sum is the quad's: l_row = l[mt][r]; l_row += __shfl_xor_sync(0xffffffffu, l_row, 1); l_row += __shfl_xor_sync(0xffffffffu, l_row, 2); by every lane, before any if. m is already the same in the 4 lanes.",
    "TODO(4): row i = q_start + warp_row + mt * 16 + g + 8 * r; if (i < n_q): inv_l = l_row > 0.0f ? 1.0f / l_row : 0.0f; o_i = o + ((size_t)(b * H + h) * n_q + i) * D; for every dt, *reinterpret_cast<elem2_t*>(o_i + dt * 8 + 2 * t) = to_elem2(acc[mt][dt][2 * r] * inv_l, acc[mt][dt][2 * r + 1] * inv_l) (the lane's two columns of each 8).",
    "TODO(4): lse from one lane of the quad, t == 0: lse[(size_t)(b * H + h) * n_q + i] = l_row > 0.0f ? (m[mt][r] + log2f(l_row)) * M_LN2_F : -INFINITY (m is in log2 units, of the scaled scores).",
)
