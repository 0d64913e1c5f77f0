"""Module 12: ring attention, one sequence over several GPUs, forward and backward, through NCCL.

The catalogue data of the module; its folder holds the rest (see grader/tasks/__init__.py).
"""

TITLE = 'Ring attention: one sequence across GPUs, with NCCL'
ENTRY = 'ring_attention'            # the function exercises/12_ring_attention.py defines
GOALS = (
    'Place a sequence over P GPUs so that, under the causal mask, every GPU does the same work.',
    'Pass the key/value slices around a ring and merge the partial results by their log-sum-exp.',
    'Hide the transfers behind the computation with a second stream and the events that order the two.',
    'Send dK and dV around the ring with their slice, and bring them home.',
)
HINTS = (
    'TODO(1): every step, each slice moves one rank on (rank r sends to r + 1), so after s steps rank r holds the slice that started on rank r - s: held_at = (rank - step) % ranks.',
    'TODO(2): chunks are numbered by their place in the sequence, so one chunk comes before another exactly when its number is smaller. Without the mask every pair is FULL; with it, a key chunk before the query chunk is FULL, the same chunk is DIAGONAL (the causal mask of a square block), a later one is SKIP.',
    'TODO(3): m = fmaxf(lse[row], lse_part[r]); a row where m is -INFINITY has no key in either part yet: continue. w_old = expf(lse[row] - m), w_part = expf(lse_part[r] - m); each lane updates its features c = lane, lane + 32, ...: o = (w_old · o + w_part · o_part) / (w_old + w_part).',
    'TODO(3): lane 0 writes lse[row] = m + logf(w_old + w_part), but only after every lane has read the old lse[row]: __syncwarp() first.',
    'TODO(4): before the last step, make the next slice\'s buffers in the other slot: coming = (ring.slice_in(k_slots[step % 2], nxt), ring.slice_in(v_slots[step % 2], nxt)) with nxt = held_at(ring.me, step + 1, P); then ring.exchange(held, coming) sends the held slice on and receives the next, in one group, on the transfer stream.',
    'TODO(4): two events. Before the exchange, ring.transfer.wait_event(ring.compute.record()): the held slice is complete and the slot about to receive was last read two steps ago. After it, arrived = ring.transfer.record(); after the step\'s launches, ring.compute.wait_event(arrived), then held = coming.',
    'TODO(4): the step\'s work, inside `with ring.compute:`: for each (q_span, k_span, kind) in ring.blocks(src, causal): o_part, lse_part = ring.attn.forward(ring.rows_of(q, q_span), ring.rows_of(held[0], k_span), ring.rows_of(held[1], k_span), scale, kind == DIAGONAL), then rows.merge(o, lse, o_part, lse_part, q_span[0]).',
    'TODO(5): after each step, the held slice\'s dK and dV go to the next rank and the next slice\'s come from the previous one: to = held_at(ring.me, step + 1, P) (after the last step that is ring.me: home); incoming in the other slot; the transfer stream waits for the compute stream\'s event, ring.exchange((dk, dv), incoming), then the compute stream waits for the transfer stream\'s, and dk, dv = incoming.',
)
