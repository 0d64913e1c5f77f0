"""Module 11: the FlashAttention backward pass in float16 and bfloat16 on tensor cores.

The catalogue data of the module; its folder holds the rest (see grader/tasks/__init__.py).
"""

TITLE = 'The backward pass on tensor cores: five products on fragments, fp16/bf16'
ENTRY = 'flash_backward_tc'       # the function exercises/11_backward_tensor_cores.py defines
GOALS = (
    "Run module 09's backward on mma.sync: Sᵀ, dPᵀ, dV, dK and dQ as fragment products, float32 accumulators.",
    'Compute the transposed products Sᵀ = K Qᵀ and dPᵀ = V dOᵀ, so that Pᵀ and dSᵀ leave their product as the A fragments dV and dK take.',
    'Find every transpose a product needs and take it from ldmatrix.trans: dO and Q for dV and dK, dS and K for dQ.',
    'Gather dQ across key tiles with float32 atomics into an accumulator, converted to fp16/bf16 at the end.',
)
HINTS = (
    "TODO(1): the warp's A fragment of a_s for features 16 kk .. is ldmatrix_x4(a, a_s + block16<D>(warp, kk, lane)) (a_s is stored [key][feature], row-major like A). For every 16 rows np of b_t: ldmatrix_x4(b, b_t + block16<D>(np, kk, lane)); column tile 2np takes (b[0], b[2]), 2np + 1 takes (b[1], b[3]), exactly as K in module 06.",
    "TODO(1): unsigned a[4]; ldmatrix_x4(a, ...); for (np < NT / 2) { unsigned b[4]; ldmatrix_x4(b, ...); mma_16816(x[2 * np], a, b[0], b[2]); mma_16816(x[2 * np + 1], a, b[1], b[3]); }, the np loop with #pragma unroll (x's index must be known at compile time). products_t calls this step for every kk, for Sᵀ and for dPᵀ.",
    "TODO(2): element e of pT[nt] is key j = k_start + warp_key + g + 8 (e / 2) and query i = m_start + nt * 8 + 2t + e % 2. Its lse is lse_t[nt * 8 + 2t + e % 2], in natural-log units: multiply by M_LOG2E_F. pT[nt][e] = exp2f(fmaf(pT[nt][e], scale_log2, -lse_log2)) where visible, else 0.0f.",
    "TODO(2): visible = !masked || (j < n_k && i < n_q && (!causal || j <= i + offset)). Keys past n_k are zeros in k_s, so their score is 0, and exp2(0 - lse) is not 0: they must be masked explicitly (and exp2 of +150 · log2 e overflows).",
    "TODO(3): for (kk < QSTEPS) for (dp < D / 16) { unsigned b[4]; ldmatrix_x4_trans(b, b_t + block16<D>(kk, dp, lane)); mma_16816(acc[2 * dp], a[kk], b[0], b[1]); mma_16816(acc[2 * dp + 1], a[kk], b[2], b[3]); }, both loops unrolled. The pairing is V's in module 06: the 16 rows of the block (queries) are the k index.",
    "TODO(4): dsT[nt][e] = pT[nt][e] * (dsT[nt][e] - delta_t[nt * 8 + 2t + e % 2]); then to_a_fragments(a, dsT); add_product<D>(dk_acc, a, q_t, lane);",
    "TODO(4): register x of a[kk] holds key warp_key + g + 8 (x % 2) and queries kk * 16 + 8 (x / 2) + 2t, + 1: *reinterpret_cast<unsigned*>(&ds_s[swz<BLOCK_M>(warp_key + g + 8 * (x % 2), kk * 16 + 8 * (x / 2) + 2 * t)]) = a[kk][x];",
    "TODO(5): per kk < BLOCK_N / 16: unsigned ds_a[4]; ldmatrix_x4_trans(ds_a, ds_s + block16_across<BLOCK_M>(kk, mq, lane)); read across first, the matrices come in A's order (matrix 1 holds queries 8-15 of keys 0-7: a[1]). B: ldmatrix_x4_trans(kb, k_s + block16<D>(kk, fq * DQ_DT / 2 + dp, lane)); mma_16816(kk % 2 ? dq_odd[2 * dp] : dq_frag[2 * dp], ds_a, kb[0], kb[1]); mma_16816(kk % 2 ? dq_odd[2 * dp + 1] : dq_frag[2 * dp + 1], ds_a, kb[2], kb[3]): the even steps into dq_frag, the odd ones into dq_odd. With the loop fully unrolled (#pragma unroll) the choice is made at compile time.",
    "TODO(5): after the loop, add the odd set into the even one: dq_frag[dt][e] += dq_odd[dt][e] for every dt and e. Two sets give each feature tile two independent chains of mma; one set would make every mma wait for the one before it on the same registers.",
    "TODO(5): the lane's rows are i = m_start + mq * 16 + g + 8 r (r = 0, 1), its features (fq * DQ_DT + dt) * 8 + 2t and + 1, elements 2r and 2r + 1 of dq_frag[dt]: if (i < n_q) atomic_add2(&dq_acc[(bh + i) * D + feature], dq_frag[dt][2 * r], dq_frag[dt][2 * r + 1]) (atomicAdd of both, in one reduction). A plain += would lose the other key tiles' shares.",
    "TODO(6): for r = 0, 1: key j = k_start + warp_key + g + 8 r; if (j < n_k), for every dt: *reinterpret_cast<elem2_t*>(dv + row + dt * 8 + 2 * t) = to_elem2(dv_acc[dt][2r], dv_acc[dt][2r + 1]), and dk the same with scale * dk_acc; row = ((size_t)(b * H_kv + h_kv) * n_k + j) * D. In convert_dq: float2 x = reinterpret_cast<const float2*>(dq_acc)[idx]; reinterpret_cast<elem2_t*>(dq)[idx] = to_elem2(scale * x.x, scale * x.y);",
)
