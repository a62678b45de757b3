"""Where the Python tests find the project's scripts, the dataset and the
programs that CTest names in the environment (unset: those runs skip)."""

import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "fashion_mnist.py")
SYNTHETIC = os.path.join(ROOT, "bench", "synthetic.py")
DATA = "/usr/share/datasets/fashion-mnist"
KOLORUN = os.environ.get("KOLORUN")
