"""Module 13: paged decode on tensor cores, bf16/fp16 cache, GQA groups and new tokens as mma rows.

The catalogue data of the module; its folder holds the rest (see grader/tasks/__init__.py).
"""

TITLE = 'Decode on tensor cores: a bf16 paged cache, GQA groups as mma rows, several new tokens'
ENTRY = 'decode_tc'            # the function exercises/13_decode_tensor_cores.py defines
GOALS = (
    "Pack a GQA group's query heads, times the new tokens, as the rows of mma.sync, so each page of K and V is read once per group.",
    'Stream the pages through the block table into shared memory with cp.async, in a ring of stages.',
    'Mask the new tokens causally among themselves and against the cache (bottom-right).',
    'Choose the split count from the batch, the cache and the SMs; merge the warps, then the splits.',
)
HINTS = (
    "TODO(1): module 05's slot arithmetic on a page page_of has already loaded: return -1 when page < 0 (a key past the context has no page); else page * page_size + j % page_size.",
    "TODO(2): positions first: for (i = tid; i < STAGES * STAGE_KEYS; i += NTHREADS) pos_s[i / STAGE_KEYS][i % STAGE_KEYS] = physical_pos(page_of(table_b, start + i, end, page_size), start + i, page_size); then __syncthreads(). Then for (s < STAGES - 1) { if (s < n_stages) load_stage_async<D>(ring + s * STAGE, pos_s[s], k_pages, v_pages, kv, H_kv, tid); cp_async_commit(); }: a commit per stage even when nothing was issued, so that cp_async_wait counts the same groups in every thread.",
    "TODO(2): in the loop over it < n_stages: cp_async_wait<STAGES - 2>() (stage it has landed: only the STAGES - 2 newer groups may still fly), __syncthreads() (everyone's copies landed, and every warp has finished stage it - 1), then refill: next = it + STAGES - 1 goes into slot next % STAGES, which stage it - 1 just freed, with pos_s[next % STAGES]; commit, even when next >= n_stages.",
    "TODO(2): the look-ahead: j_ahead = start + (it + STAGES) * STAGE_KEYS + tid and page = tid < STAGE_KEYS ? page_of(table_b, j_ahead, end, page_size) : -1 before the tile's work; after it, pos_s[(it + STAGES) % STAGES][tid] = physical_pos(page, j_ahead, page_size) (the slot of stage it, whose positions were used when it was issued). Using page before the tile's work would make the warp wait for the table's load there. The tile: k_t = ring + (it % STAGES) * STAGE + warp * TILE_KEYS * D, v_t = k_t + STAGE_KEYS * D, key0 = start + it * STAGE_KEYS + warp * TILE_KEYS, and attend_tile<D, MT>(q_s, k_t, v_t, key0, end, ctx, T, G, row0, scale_log2, m, l, acc).",
    "TODO(3): S = Q Kᵀ is module 06's TODO(1) with Q's A fragments from shared memory: for (kk < KSTEPS) { unsigned a[MT][4]; for (mt) ldmatrix_x4(a[mt], q_s + block16(mt, kk)); for (np < NT / 2) { unsigned kb[4]; ldmatrix_x4(kb, k_t + block16(np, kk)); for (mt) { mma_16816(s[mt][2 * np], a[mt], kb[0], kb[2]); mma_16816(s[mt][2 * np + 1], a[mt], kb[1], kb[3]); } } }, with float s[MT][NT][4] = {} and #pragma unroll on every loop.",
    "TODO(3): the mask. Row row0 + 16 mt + g + 8 (e / 2) of the block is token row / G (rows r = t · G + g), and element e of s[mt][nt] is key key0 + 8 nt + 2t + e % 2. With offset = ctx - T, token t sees j <= t + offset, and no key j >= end: set the others to -INFINITY. Every row sees the keys below min(end, offset + 1), so only a tile reaching past that needs the test.",
    "TODO(3): the softmax and P V are module 06's TODO(2) and TODO(3) as they stand (quad shuffles 1 and 2, m_use, alpha, exp2f(fmaf(s, scale_log2, -m_use)), P packed as p[mt][kk], then ldmatrix_x4_trans(vb, v_t + block16(kk, dp)) and two mma_16816 per dp).",
    "TODO(4): per row r of each MMA tile (row = 16 mt + g + 8 r of the block), sum l over the quad (shuffles 1 and 2, by every lane); lane t == 0 writes m_s[warp][row] and l_s[warp][row]; every lane writes its acc elements to acc_s[(warp * ROWS + row) * D + 8 dt + 2t] and + 1. Then __syncthreads().",
    "TODO(4): then one thread per (row r, feature pair c) with row0 + r < n_rows: module 04's merge of the WARPS states (skip a warp with l_s = 0; weights exp2f(m_s[w][r] - m_blk)); inv_l = l > 0 ? 1 / l : 0 and lse = l > 0 ? (m_blk + log2f(l)) · ln 2 : -INFINITY. The output row is out = (b · T + row / G) · H + kv · G + row % G. With n_splits == 1 write o[out · D + c] as to_elem2 and lse[out]; else o_part[(out · n_splits + split) · D + c] as a float2 and lse_part[out · n_splits + split].",
    "TODO(5): module 04's combine over all n_splits: every split wrote its rows (an empty one o = 0, lse = -inf, weight 0). First lse_max, in every warp: lanes stride over the splits, then a butterfly; if lse_max == -INFINITY the row saw no key: warp 0 writes o = 0, thread 0 lse = -INFINITY, and every thread returns.",
    "TODO(5): then warp w takes the splits s = warp, warp + COMBINE_WARPS, ..: w = expf(lse_s[s] - lse_max), total += w, and each active lane adds w times its float4 o_s[s * (d / 4) + lane] into acc. acc_s[warp][lane] = acc and total_s[warp] = total (lane 0), __syncthreads(); warp 0 adds the other warps' sums and writes o = acc / total as two to_elem2 of the lane's 4 features, lse = lse_max + logf(total).",
    "TODO(6): module 04's rule over the blocks of one split: wanted = cdiv(BLOCKS_PER_SM * rt.multiprocessor_count, blocks), longest = cdiv(max_len, MIN_CHUNK), return max(1, min(wanted, longest)).",
)
