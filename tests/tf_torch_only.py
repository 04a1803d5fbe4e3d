"""transformers' Gated DeltaNet functions in their pure torch form, whatever else is installed.

transformers 5.17 wraps torch_chunk_gated_delta_rule and its kin so that they call
flash-linear-attention's Triton kernels when that package imports, even on CPU tensors, where
those kernels fail (later versions check the device). The parity tests run transformers on the
CPU in fp32 as the reference, so they put the wrapped functions' originals back
(functools.wraps keeps them as __wrapped__)."""
import importlib
import sys

MODULES = ("qwen3_5", "qwen3_5_moe", "qwen3_next")


def torch_delta_rule():
    for name in MODULES:
        try:
            m = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        except ImportError:
            continue
        for attr, fn in list(vars(m).items()):
            if attr.startswith("torch_") and callable(fn) and hasattr(fn, "__wrapped__"):
                setattr(m, attr, fn.__wrapped__)


def torch_linear_attn(la):
    """A Gated DeltaNet module (la; None: nothing to do) on its modeling file's torch delta rule
    and conv, for the versions that bind the hub kernels to the module itself."""
    if la is None:
        return
    if hasattr(la, "chunk_gated_delta_rule"):
        la.chunk_gated_delta_rule = sys.modules[type(la).__module__].torch_chunk_gated_delta_rule
    if hasattr(la, "causal_conv1d_fn"):
        la.causal_conv1d_fn = None
