"""Datasets: Fashion-MNIST from Debian's IDX files (more loaders to come)."""
from .fashion_mnist import CLASS_NAMES, load_fashion_mnist

__all__ = ["CLASS_NAMES", "load_fashion_mnist"]
