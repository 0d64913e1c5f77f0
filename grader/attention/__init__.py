"""The attention kit every module's checks are built from, independent of any kernel:

    references   float64 attention, softmax, decode, split-KV and paged references
    inputs       input generators (prefill and decode), with the edge-case shapes
    replays      bugs replayed in float64, so a diagnosis names a cause only when it reproduces
    baselines    what `grader bench` times a kernel against, with FLOP and byte counts

Task folders import from here, never from each other.
"""
