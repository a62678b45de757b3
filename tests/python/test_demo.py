"""scripts/demo.py's figures (`make demo`): the machine's ceiling is the sum
of two 1-rank runs at once, added to the 1-rank record only when every run
is of the same steps, batch, epochs and threads. A plain pytest process
(CTest python_demo); the runs themselves are `make demo`'s and
test_examples_fashion_mnist.py's."""

import os
import sys

import pytest

from paths import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import demo  # noqa: E402


def record(**kw):
    r = {"ranks": 1, "images_per_second": 1000.0, "batch_size": 64,
         "steps_per_epoch": 150, "epochs": 2, "threads": 1, "test_accuracy": 0.8}
    r.update(kw)
    return r


def test_the_ceiling_is_both_runs_at_once_added_up():
    one = record()
    out = demo.ceiling_record(one, [record(images_per_second=810.0),
                                    record(images_per_second=790.0)])
    assert out["ceiling_images_per_second"] == pytest.approx(1600.0)
    assert out["ceiling_runs"] == [810.0, 790.0]
    # The 1-rank figures are kept as they are; the input is not changed.
    assert out["images_per_second"] == 1000.0 and out["test_accuracy"] == 0.8
    assert "ceiling_images_per_second" not in one


@pytest.mark.parametrize("key,value", [("steps_per_epoch", 469), ("batch_size", 32),
                                       ("epochs", 3), ("threads", 2)])
def test_runs_of_other_steps_or_batches_are_refused_by_name(key, value):
    with pytest.raises(ValueError) as e:
        demo.ceiling_record(record(), [record(), record(**{key: value})])
    assert "ceiling run 2 has %s %r, the 1-rank run %r" % (key, value, record()[key]) \
        in str(e.value)


def test_a_run_of_two_ranks_or_without_throughput_is_refused():
    with pytest.raises(ValueError, match="ceiling run 1 has ranks 2, expected 1"):
        demo.ceiling_record(record(), [record(ranks=2), record()])
    with pytest.raises(ValueError, match="the 1-rank run has images_per_second 0"):
        demo.ceiling_record(record(images_per_second=0), [record(), record()])
    with pytest.raises(ValueError, match="needs 2 runs at once, got 1"):
        demo.ceiling_record(record(), [record()])


def test_the_command_line_needs_the_example_and_two_epochs():
    a = demo.parse_args(["--kolorun", "k", "--steps", "20", "--", "prog", "--lr", "1"])
    assert a.train == ["prog", "--lr", "1"] and a.steps == 20 and a.epochs == 2
    for bad in (["--kolorun", "k"], ["--kolorun", "k", "--epochs", "1", "--", "prog"]):
        with pytest.raises(SystemExit):
            demo.parse_args(bad)
