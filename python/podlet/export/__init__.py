"""podlet.export: a trained model out of podlet.

    podlet.export.to_onnx(model, variables, jnp.zeros((1, 224, 224, 1)), "model.onnx")
    podlet.export.to_onnx(model, variables, jnp.zeros((1, 224, 224, 1)), "model.onnx", dynamic_batch=True)
"""
from .onnx import to_onnx, UnsupportedPrimitiveError, DynamicBatchError, SUPPORTED_PRIMITIVES, DEFAULT_OPSET

__all__ = ["to_onnx", "UnsupportedPrimitiveError", "DynamicBatchError", "SUPPORTED_PRIMITIVES", "DEFAULT_OPSET"]
