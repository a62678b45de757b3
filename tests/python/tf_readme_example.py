"""The README's Keras example, run as it is written: the first ```python
block under "## A Keras job" of README.md is executed on every rank (under
kolorun), then what it promises is checked: every rank ends with rank 0's
weights (broadcast at the start, gradients averaged at every step) and the
model learned (its loss fell from the first epoch to the last)."""

import os
import re

import numpy as np
import tensorflow as tf

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def example_code():
    with open(README) as f:
        section = f.read().split("## A Keras job", 1)
    assert len(section) == 2, "README.md: no section '## A Keras job'"
    block = re.search(r"```python\n(.*?)```", section[1], re.S)
    assert block, "README.md: no ```python block under '## A Keras job'"
    return block.group(1)


def test_readme_keras_example():
    ns = {}
    exec(compile(example_code(), README, "exec"), ns)
    hvd, model, x, y = ns["hvd"], ns["model"], ns["x"], ns["y"]
    flat = np.concatenate([np.ravel(w) for w in model.get_weights()])
    root = hvd.broadcast(tf.constant(flat), root_rank=0, name="readme.weights").numpy()
    np.testing.assert_array_equal(flat, root, err_msg="rank %d's weights differ from rank 0's"
                                  % hvd.rank())
    losses = model.history.history["loss"]  # the last fit's, per epoch
    assert len(losses) == 5 and losses[-1] < losses[0], losses
