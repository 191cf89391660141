"""End-to-end: the issue's acceptance runs, on the real Fashion-MNIST from Debian."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))


def test_mlp_fashion_mnist_reaches_87_percent_in_3_epochs(capsys):
    import mlp_fashion_mnist
    sys_argv = sys.argv
    sys.argv = ["mlp_fashion_mnist.py", "--epochs", "3"]
    try:
        acc = mlp_fashion_mnist.main()
    finally:
        sys.argv = sys_argv
    out = capsys.readouterr().out
    assert out.count("images/s") == 3 and "epoch 3" in out
    assert acc >= 0.87, out
