"""The forward kernel's historical import path: `ptofa.kernels.fa_fwd` is the module."""

from ptofa.kernels.fa_fwd import NEG_INIT, build_fa, compute_gu, compute_p, compute_pv, compute_qk, emit_fa  # noqa: F401
