"""The op library's build check: kolo.tensorflow refuses a library built
for another TensorFlow, naming both versions and the command that rebuilds
it, and says so when kolo was built without TensorFlow. Each case imports a
copy of the package in a fresh interpreter."""

import json
import os
import shutil
import subprocess
import sys

import kolo
import tensorflow as tf

PACKAGE = os.path.dirname(os.path.abspath(kolo.__file__))


def import_copy(tmp_path, change):
    root = tmp_path / "python"
    shutil.copytree(PACKAGE, root / "kolo", symlinks=True)
    change(root / "kolo" / "tensorflow")
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([sys.executable, "-c", "import kolo.tensorflow"], env=env,
                          capture_output=True, text=True, timeout=120)


def test_another_tensorflow_version_is_refused_by_name(tmp_path):
    def older(d):
        info = json.loads((d / "_kolo_tf_ops.json").read_text())
        info["tensorflow"] = "2.15.1"
        (d / "_kolo_tf_ops.json").write_text(json.dumps(info))

    r = import_copy(tmp_path, older)
    assert r.returncode != 0
    assert "built for TensorFlow 2.15.1 but TensorFlow %s is running" % tf.__version__ \
        in r.stderr, r.stderr
    assert "--target kolo_tf_ops" in r.stderr and "-DKOLO_TF_PYTHON=" in r.stderr


def test_a_build_without_tensorflow_says_so(tmp_path):
    r = import_copy(tmp_path, lambda d: (d / "_kolo_tf_ops.so").unlink())
    assert r.returncode != 0
    assert "kolo was built without TensorFlow" in r.stderr, r.stderr


def test_the_matching_build_loads(tmp_path):
    r = import_copy(tmp_path, lambda d: None)
    assert r.returncode == 0, r.stderr



def test_import_sets_the_runtime_defaults_for_tensorflow_unless_set():
    """kolo.tensorflow's runtime settings (runtime_defaults): set on import
    when absent (this process imported it; its launcher set neither), a
    value already in the environment kept."""
    import kolo.tensorflow  # noqa: F401
    from kolo.tensorflow import runtime_defaults
    assert os.environ["KOLO_RUNTIME_SPIN_US"] == "0"
    assert runtime_defaults.apply({"KOLO_RUNTIME_SPIN_US": "20"}) == []
    env = {}
    assert runtime_defaults.apply(env) == ["KOLO_RUNTIME_SPIN_US"]
    assert env == {"KOLO_RUNTIME_SPIN_US": "0"}
