"""Wrong versions of 12_ring_attention (grader/wrong.py says how they are kept and checked)."""
from ...wrong import Wrong

EX = "12_ring_attention"
WRONG = [
    Wrong(EX, 'merge_without_rescale',
          'the merge adds the parts of o without weighing them by exp(lse - lse_new)',
          edits=(
              ('            o[row * d + c] = (w_old * o[row * d + c] + w_part * to_float(o_part[r * d + c])) * inv;\n',
               '            o[row * d + c] = o[row * d + c] + to_float(o_part[r * d + c]);   // BUG: not rescaled\n'),
          ),
          expect=('lse is right on every rank and o is not',),
          cases=('two_ranks',),
          numeric=True),
    Wrong(EX, 'receive_read_before_it_lands',
          'the compute stream reads the next slice without waiting for the event recorded after its receive',
          edits=(
              ('    ring.compute.wait_event(arrived)\n', ''),
          ),
          expect=('a race across streams on rank', 'comm.recv from rank', 'wait_event'),
          cases=('two_ranks',)),
    Wrong(EX, 'receives_before_sends_without_group',
          'every rank posts its receives before its sends, outside a group',
          edits=(
              ('        with self.comm.group():\n            for x in sending:\n                self.comm.send(x, self.next, self.transfer)\n'
               '            for x in receiving:\n                self.comm.recv(x, self.prev, self.transfer)\n',
               '        for x in receiving:                               # BUG: no group, receives first\n'
               '            self.comm.recv(x, self.prev, self.transfer)\n        for x in sending:\n'
               '            self.comm.send(x, self.next, self.transfer)\n'),
          ),
          expect=('the ranks deadlock', 'rank 0 waits in comm.recv from rank 1', 'rank 1 waits in comm.recv from rank 0'),
          cases=('two_ranks',)),
    Wrong(EX, 'mask_from_own_chunks',
          "the causal mask's kind of each block is computed from this rank's own key chunks, not the held slice's",
          edits=(
              ('        kinds = [[pair_kind(qc, kc, causal) for kc, _, _ in theirs] for qc, _, _ in mine]\n',
               '        kinds = [[pair_kind(qc, kc, causal) for kc, _, _ in mine] for qc, _, _ in mine]   # BUG: own chunks\n'),
          ),
          expect=('is the log-sum-exp over key chunks', 'the causal mask gives key chunks'),
          cause='ring:pairs',
          cases=('causal_two_ranks',)),
    Wrong(EX, 'gradients_not_home',
          'dK and dV are not sent on after the last step, so each rank returns the held slice\'s',
          edits=(
              ('        to = held_at(ring.me, step + 1, P)                      # whose slice comes next; after the last step, ours\n',
               '        if step + 1 == P:                                       # BUG: the last step keeps them\n'
               '            break\n'
               '        to = held_at(ring.me, step + 1, P)                      # whose slice comes next; after the last step, ours\n'),
          ),
          expect=("dk on rank 0 holds rank 1's dk", 'instead of going back to rank 1'),
          cause='ring:other_rank',
          cases=('training_step_two_ranks',)),
    Wrong(EX, 'gradients_added_before_they_land',
          "no event is recorded after dK and dV's exchange, so the next step adds into them before they arrive",
          edits=(
              ('        landed = ring.transfer.record()\n', ''),
          ),
          expect=('a race across streams on rank', 'comm.recv from rank'),
          cases=('training_step_two_ranks',)),
]
