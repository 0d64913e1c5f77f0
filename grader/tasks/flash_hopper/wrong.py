"""Wrong versions of 10_flash_hopper (grader/wrong.py says how they are kept and checked). The
emulator names each one's fault; on a GPU most of them race or hang, so they are CPU-only."""
from ...wrong import Wrong

EX = "10_flash_hopper"
WRONG = [
    Wrong(EX, 'empty_wait_wrong_parity',
          "the producer waits on a stage's 'empty' barrier with the consumers' parity, not the opposite",
          edits=(
              ('                    mbar_wait(k_empty(s), phase ^ 1);\n',
               '                    mbar_wait(k_empty(s), phase);        // BUG: the parity of the full wait\n'),
          ),
          expect=('hangs', 'parity'),
          cases=('tiny',),
          backends=('cpu',)),
    Wrong(EX, 'q_stores_not_fenced',
          "the consumers copy Q into shared memory with ordinary stores and no fence.proxy.async before wgmma reads it",
          edits=(
              ('        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // wgmma reads through the async proxy\n',
               ''),
          ),
          expect=('fence.proxy.async',),
          cases=('tiny',),
          backends=('cpu',)),
    Wrong(EX, 'released_before_wait',
          "a consumer releases the V stage before the wgmma.wait_group that covers the P V reading it",
          edits=(
              ('                wgmma_wait<0>();                          // P V done\n'
               '                release(v_empty((it - 1) % STAGES));\n',
               '                release(v_empty((it - 1) % STAGES));      // BUG: before the wait\n'
               '                wgmma_wait<0>();                          // P V done\n'),
          ),
          expect=('still reads',),
          cases=('stage_ring_d128',),
          backends=('cpu',)),
    Wrong(EX, 'descriptor_swizzle_64B',
          "the shared-memory descriptors say the 64-byte swizzle; TMA wrote the tiles with the 128-byte one",
          edits=(
              ('         | (1ull << 62);\n',
               '         | (2ull << 62);                          // BUG: 64-byte swizzle\n'),
          ),
          expect=('swizzle',),
          cases=('tiny',),
          backends=('cpu',)),
    Wrong(EX, 'no_wait_before_epilogue',
          "the epilogue reads acc without the wgmma.wait_group that covers the last P V",
          edits=(
              ('            wgmma_wait<0>();\n            release(v_empty((first + n_tiles - 1) % STAGES));\n',
               '            release(v_empty((first + n_tiles - 1) % STAGES));   // BUG: no wgmma_wait<0>() first\n'),
          ),
          expect=('in flight',),
          cases=('tiny',),
          backends=('cpu',)),
    Wrong(EX, 'expect_tx_one_box',
          "expect_tx announces one 64-feature box of the K tile where D / 64 boxes arrive",
          edits=(
              ('                    mbar_expect_tx(k_full(s), KV_BYTES);\n',
               '                    mbar_expect_tx(k_full(s), KV_BYTES / BOXES);   // BUG: one box, not BOXES\n'),
          ),
          expect=('expect_tx',),
          cases=('head_dim_128',),
          backends=('cpu',)),
    Wrong(EX, 'acc_not_rescaled',
          'acc keeps its old scale when the running max grows (l is rescaled)',
          edits=(
              ('                issue_s(s, it);\n                rescale(alpha);\n',
               '                issue_s(s, it);                           // BUG: acc is not rescaled by alpha\n'),
          ),
          # 06's replay of it reproduces the kernel on some inputs only (it is stated then, silent else).
          expect=('relative error',),
          cases=('long',),
          numeric=True,
          cause='rescale:acc'),
]
