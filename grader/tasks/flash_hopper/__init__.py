"""Module 10: FlashAttention-3 on Hopper: wgmma, TMA, mbarriers, warp specialization, ping-pong.

The catalogue data of the module; its folder holds the rest (see grader/tasks/__init__.py).
"""

TITLE = 'FlashAttention-3 on Hopper: wgmma, TMA, mbarriers, warp specialization'
ENTRY = 'flash_hopper'        # the function exercises/10_flash_hopper.py defines
GOALS = (
    'Issue warpgroup products (wgmma.mma_async) that read Q and K from shared memory through descriptors, and P from registers.',
    'Feed shared memory with TMA copies that complete on mbarriers, or with ordinary stores published by fence.proxy.async, and hand stages back and forth with full/empty barrier pairs and phase parities.',
    'Split a block into a producer warpgroup and consumer warpgroups, and overlap one tile\'s softmax with the next products.',
    'Read what the emulator reports when a parity, a fence, a release, a swizzle or a wait is wrong.',
)
HINTS = (
    "TODO(1): a stage is used by tiles s, s + STAGES, s + 2 STAGES ...: tile it is the (it / STAGES)-th use of stage it % STAGES, so the consumers wait on its 'full' barrier with parity (it / STAGES) & 1. Before refilling, the producer waits for the previous use's release: the 'empty' barrier with the opposite parity, (it / STAGES) & 1 ^ 1, which a fresh barrier passes at once.",
    "TODO(1): for each stage use: mbar_wait(k_empty(s), phase ^ 1); mbar_expect_tx(k_full(s), KV_BYTES) (the bytes of all BOXES boxes: the barrier completes when they are in); then one tma_load per 64-feature box c into k_s + s * KV_BYTES + c * BLOCK_N * 128, at coordinates (c * BOX, it * BLOCK_N, b * H_kv + h_kv). The same for V.",
    "TODO(2): the consumer's rows are q_start + 64 cw + r, r = 0 .. 63; a row is D / 8 chunks of 16 bytes (uint4, 8 elements). Let the warpgroup's 128 threads take chunks x = threadIdx.x % 128 + 128 u, u = 0 .. 64 · D / 8 / 128 - 1: r = x / (D / 8), c = x % (D / 8). Load all of a thread's chunks into registers first, then store them: a loop that stores each chunk before it loads the next waits for memory once per chunk. Chunk c lives in box c / 8, as chunk (c % 8) ^ (r % 8) of the row's 128-byte line: q_s + cw * 64 * 128 + (c / 8) * BLOCK_M * 128 + r * 128 + ((c % 8) ^ (r % 8)) * 16. Rows past n_q get zeros (TMA would zero-fill them too).",
    "TODO(2): wgmma reads shared memory through the async proxy, which need not see ordinary stores: after its copies each thread executes asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\"), and then the warpgroup waits for all its rows with asm volatile(\"bar.sync %0, 128;\" :: \"r\"(1 + CONSUMERS + cw) : \"memory\") (barrier 0 is __syncthreads, 1 .. CONSUMERS are the ping-pong turns).",
    "TODO(3): S = Q Kᵀ over the features, 16 at a time: step kk reads box kk / 4, 32 (kk % 4) bytes into its rows. desc(q_base + (kk / 4) * BLOCK_M * 128 + (kk % 4) * 32, 16, 1024) for Q and the same with k_base and BLOCK_N for K; the first step overwrites s (wgmma_s0), the others accumulate (wgmma_s). Wait on the stage's 'full' barrier first, wgmma_fence() before and wgmma_commit() after.",
    "TODO(4): acc += P V over the keys, 16 at a time: step kk's V rows start 16 kk rows (16 · 128 bytes) into the stage; V is read transposed (features contiguous), so its descriptor's leading offset is the distance between 64-feature boxes, BLOCK_N * 128, and the stride 1024 between groups of 8 keys: wgmma_o(acc, p[kk], desc(v_base + kk * 16 * 128, BLOCK_N * 128, 1024)).",
    "TODO(5): the loop body, in order: my_turn(); issue_s(s, it); rescale(alpha); issue_o(p, it - 1); next_turn(); wgmma_wait<1>() (S is done, P V may still run); release(k_empty(it % STAGES)); softmax(s, alpha, it); wgmma_wait<0>(); release(v_empty((it - 1) % STAGES)); to_p(s, p). A stage is released only after the wait that covers the products reading it.",
    "TODO(6): as in 06: the lane holds 2 of every 8 keys of rows row0 and row0 + 8, so the row's l is the quad's sum: l_row = l[r]; l_row += __shfl_xor_sync(0xffffffffu, l_row, 1); the same with 2; by every lane, before the if.",
    "TODO(6): if (i < n_q), i = row0 + 8 r: inv_l = l_row > 0.0f ? 1.0f / l_row : 0.0f; o_i = o + ((size_t)(b * H + h) * n_q + i) * D; for every 8-feature tile j, *reinterpret_cast<elem2_t*>(o_i + 8 * j + 2 * t) = to_elem2(acc[j][2 * r] * inv_l, acc[j][2 * r + 1] * inv_l); and if (t == 0) lse[(size_t)(b * H + h) * n_q + i] = l_row > 0.0f ? (m[r] + log2f(l_row)) * 0.6931471805599453f : -INFINITY.",
)
