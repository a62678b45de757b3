"""examples/keras_fashion_mnist.py trains: one short epoch on 3000 images,
2 ranks, --mode allreduce (hvd.DistributedOptimizer and the callbacks); worker 0's test accuracy must beat guessing by far."""

import importlib.util
import json
import os
import tempfile

import kolo

kolo.init()  # a server rank serves here and exits

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                       "examples", "keras_fashion_mnist.py")


def test_example_allreduce():
    spec = importlib.util.spec_from_file_location("keras_fashion_mnist", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.json")
        assert example.main(["--mode", "allreduce", "--limit", "3000", "--epochs", "1",
                             "--json", out]) == 0
        if kolo.rank() != 0:
            return
        with open(out) as f:
            run = json.load(f)
    assert run["mode"] == "allreduce" and run["ranks"] == 2, run
    assert run["test_accuracy"] > 0.5, run
