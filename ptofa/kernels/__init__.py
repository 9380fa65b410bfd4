"""Kernels emitted by ptofa's builder.

`common` holds the pieces every kernel of the family shares (work-unit decoding,
BSND offsets, pipe setup, the software-pipelined schedule over a tile range, ring
selection); `fa_fwd` is the FlashAttention-2 forward kernel built from them.
"""
