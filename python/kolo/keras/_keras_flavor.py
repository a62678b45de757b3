"""Which Keras an object belongs to: Keras 3 ("keras3") or tf_keras
("tf_keras", Keras 2 for TensorFlow 2.16+, what tf.keras is with
TF_USE_LEGACY_KERAS=1). Shared by kolo.keras.ps and kolo.keras.lr."""

import os


def of_optimizer(optimizer, who):
    """The flavour of a Keras optimizer; TypeError naming ``who`` for
    anything else (and for tf_keras's legacy optimizers)."""
    try:
        import keras
        if int(keras.__version__.split(".")[0]) >= 3 and \
                isinstance(optimizer, keras.optimizers.Optimizer):
            return "keras3"
    except ImportError:  # pragma: no cover - Keras 3 comes with TF 2.16+
        pass
    try:
        import tf_keras
        if isinstance(optimizer, tf_keras.optimizers.legacy.Optimizer):
            raise TypeError("%s takes tf_keras's optimizers (tf_keras.optimizers.%s), "
                            "not the legacy ones (tf_keras.optimizers.legacy.%s)"
                            % (who, type(optimizer).__name__, type(optimizer).__name__))
        if isinstance(optimizer, tf_keras.optimizers.Optimizer):
            return "tf_keras"
    except ImportError:
        pass
    raise TypeError("%s wraps a Keras optimizer (keras.optimizers.* or "
                    "tf_keras.optimizers.*), got %s" % (who, type(optimizer).__name__))


def default():
    """The flavour tf.keras names: tf_keras with TF_USE_LEGACY_KERAS=1
    (or true), Keras 3 otherwise."""
    legacy = os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true")
    return "tf_keras" if legacy else "keras3"


def module(flavor):
    """The Keras module of a flavour (None: the default one)."""
    flavor = flavor or default()
    if flavor == "tf_keras":
        import tf_keras
        return tf_keras
    if flavor == "keras3":
        import keras
        return keras
    raise ValueError("unknown Keras flavour %r (expected 'keras3' or 'tf_keras')"
                     % (flavor,))
