# BLIND: In the launch code the grid is '((n_rows + ROWS_PER_BLOCK // 2) // ROWS_PER_BLOCK,)' (rounded to the nearest block) instead of the ceiling '(n_rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK', so when the row count is one more than a multiple of 4 (e.g. R=5 rows of n=8, or R=1, which launches no block at all) the last row's y and lse are never written; every other row count is right.
"""01 · Online softmax. Read modules/01_online_softmax.md, then fill in each TODO.

Softmax of every row of x [R, n], in one pass over the row for the statistics:
    (m, l) = (max_j x_j, Σ_j exp(x_j - m))     kept online, per lane, then merged across the warp
    y_j = exp(x_j - m) / l,   lse = m + log(l)
One warp (32 lanes) per row; lane t reads x[t], x[t + 32], x[t + 64], ...
A row whose entries are all -inf (fully masked) gives y = 0 and lse = -inf.
"""

KERNEL = r"""
// Merge the softmax state (m2, l2) into (m, l). A state (m, l) stands for the row chunk it has
// seen: m its max, l = sum of exp(x - m) over it. The empty chunk is (-INFINITY, 0).
__device__ void merge(float& m, float& l, float m2, float l2)
{
    // BEGIN SOLUTION TODO(1): rescale both sums to the new max and add them; keep (-inf, 0) if both are empty
    float m_new = fmaxf(m, m2);
    if (m_new == -INFINITY) return;        // both empty: exp(-inf - -inf) would be NaN
    l = l * expf(m - m_new) + l2 * expf(m2 - m_new);
    m = m_new;
    // END SOLUTION
}

extern "C" __global__ void online_softmax(const float* __restrict__ x, float* __restrict__ y,
                                          float* __restrict__ lse, int n_rows, int n)
{
    int row = blockIdx.x * blockDim.y + threadIdx.y;   // one warp per row
    int lane = threadIdx.x;                            // 0..31
    if (row >= n_rows) return;                         // the whole warp leaves together
    const float* x_row = x + (size_t)row * n;
    float* y_row = y + (size_t)row * n;

    float m = -INFINITY, l = 0.0f;
    // BEGIN SOLUTION TODO(2): stream this lane's elements x_row[lane], x_row[lane + 32], ... into (m, l)
    for (int j = lane; j < n; j += 32)
        merge(m, l, x_row[j], 1.0f);                   // one element x is the state (x, 1)
    // END SOLUTION

    // BEGIN SOLUTION TODO(3): combine the 32 lanes' states with __shfl_xor_sync so that every lane ends with the whole row's (m, l)
    for (int offset = 16; offset > 0; offset /= 2) {
        float m_other = __shfl_xor_sync(0xffffffffu, m, offset);
        float l_other = __shfl_xor_sync(0xffffffffu, l, offset);
        merge(m, l, m_other, l_other);
    }
    // END SOLUTION

    // BEGIN SOLUTION TODO(4): write y_row[j] = exp(x_j - m) / l and lse[row] = m + log(l); a fully masked row writes 0 and -inf
    bool masked = (m == -INFINITY);                    // every x was -inf: nothing to normalise
    float inv_l = 1.0f / l;
    for (int j = lane; j < n; j += 32)
        y_row[j] = masked ? 0.0f : expf(x_row[j] - m) * inv_l;
    if (lane == 0)
        lse[row] = masked ? -INFINITY : m + logf(l);
    // END SOLUTION
}
"""

ROWS_PER_BLOCK = 4          # 4 warps = 128 threads per block


def online_softmax(rt, x):
    """x [R, n] float32 on rt's device -> (y [R, n], lse [R])."""
    n_rows, n = x.shape
    kernel = rt.compile(KERNEL).get_function("online_softmax")
    y = rt.empty((n_rows, n), "float32")
    lse = rt.empty((n_rows,), "float32")
    grid = ((n_rows + ROWS_PER_BLOCK // 2) // ROWS_PER_BLOCK,)
    kernel(grid, (32, ROWS_PER_BLOCK), (x, y, lse, rt.int32(n_rows), rt.int32(n)))
    return y, lse
