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
    'TODO(4): at the last step there is nothing to pass on: return None, None. Otherwise nxt = held_at(ring.me, step + 1, ring.P) and coming = tuple(ring.slice_in(slot[step % 2], nxt) for slot in slots): the slot of this step\'s parity, which the compute stream read two steps ago.',
    'TODO(4): two orders on the transfer stream: first ring.transfer.wait_event(ring.compute.record()) (the held slice is complete; the slot was read for the last time), then ring.exchange(held, coming); return coming and ring.transfer.record(), the event that the exchange has landed.',
    'TODO(5): ring.compute.wait_event(arrived), then return coming: without the wait, the next step\'s kernels on the compute stream may read the slot before the receive has written it.',
    'TODO(6): after each step, the held slice\'s dK and dV go to the next rank and the next slice\'s come from the previous one: to = held_at(ring.me, step + 1, P) (after the last step that is ring.me: home); incoming = tuple(ring.slice_in(slot[step % 2], to) for slot in grad_slots); then ring.transfer.wait_event(ring.compute.record()) (an event recorded now: the sums of this step are done before dk and dv leave), then ring.exchange((dk, dv), incoming).',
    'TODO(6): landed = ring.transfer.record(), the event that they have arrived (the loop waits for it before its next sums into dk and dv, and before returning), and dk, dv = incoming.',
)
