"""Elastic Keras training (Horovod's horovod.tensorflow.keras.elastic) on
kolo: ``KerasState`` (kolo.tensorflow.elastic's ``TensorFlowKerasState``
for a Keras model and its optimizer), the callbacks that keep the state's
``batch`` and ``epoch`` current and commit it, and ``run``
(kolo.tensorflow.elastic's, re-exported: on a lost peer the state rolls back
to its last commit, kolo re-forms the world, the state is synced from rank 0
and the training function is called again).

A script::

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    @hvd.elastic.run
    def train(state):
        model.fit(data, steps_per_epoch=..., epochs=epochs - state.epoch,
                  callbacks=[hvd.elastic.UpdateEpochStateCallback(state),
                             hvd.elastic.UpdateBatchStateCallback(state),
                             hvd.elastic.CommitStateCallback(state)])

- ``CommitStateCallback(state, batches_per_commit=1)``: ``state.commit()``
  every ``batches_per_commit`` batches and at each epoch's end (a commit
  also checks for hosts added or removed by the launcher).
- ``UpdateBatchStateCallback(state)``: ``state.batch`` is the last finished
  batch of the epoch, 0 again at the epoch's end. With ``steps`` in the
  fit's params, the first epoch after a reset is shortened in the params by
  the batches already done (as in Horovod; what Keras itself runs is set by
  ``steps_per_epoch``).
- ``UpdateEpochStateCallback(state)``: ``state.epoch`` counts finished
  epochs across resets (the fit's epoch numbers start at 0 in each call).
"""

import tensorflow as tf

from kolo.tensorflow.elastic import TensorFlowKerasState, run  # noqa: F401

_Callback = tf.keras.callbacks.Callback


class KerasState(TensorFlowKerasState):
    """The state of a Keras model and its optimizer (``model.optimizer``
    unless given), plus the keyword attributes (``batch=0, epoch=0``)."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, backend=tf.keras.backend, **kwargs)


class CommitStateCallback(_Callback):
    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        if not isinstance(batches_per_commit, int) or batches_per_commit < 1:
            raise ValueError("kolo.keras.elastic.CommitStateCallback: batches_per_commit must be "
                             "an int >= 1, got %r" % (batches_per_commit,))
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        # Every rank counts from the same point after a reset.
        self.batches_remaining = self.batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateCallback(_Callback):
    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.params and self.params.get("steps"):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = self.params.get("steps")
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(_Callback):
    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = self.state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        # +1: a reset after the epoch's end must not repeat it.
        self.state.epoch = self.initial_epoch + epoch + 1


__all__ = ["KerasState", "CommitStateCallback", "UpdateBatchStateCallback",
           "UpdateEpochStateCallback", "run"]
