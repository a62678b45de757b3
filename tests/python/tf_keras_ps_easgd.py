"""kolo.keras.ps in easgd mode (1 server, 2 workers: Keras 3 and tf_keras);
the checks are tf_keras_ps_common.py's."""

import tf_keras_ps_common as common


def test_easgd():
    common.run("easgd")
