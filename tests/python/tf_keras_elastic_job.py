"""The elastic Keras job of tf_keras_elastic_run.sh (a rank SIGKILLed, a
host added by the discovery script, three workers ending with identical
weights) as a pytest test: kolo_tf_test starts this file on 1 rank, and the
test runs the script with its own kolorun ($KOLORUN, $KOLO_TF_PYTHON), in an
environment without the outer job's KOLO_* variables."""

import os
import subprocess


def test_elastic_keras_job_survives_a_lost_rank_and_an_added_host():
    outer = ("KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE", "KOLO_CROSS_RANK",
             "KOLO_CROSS_SIZE", "KOLO_HOST_ID", "KOLO_RENDEZVOUS", "KOLO_JOB_ID")
    env = {k: v for k, v in os.environ.items()
           if k not in outer and not k.startswith("KOLO_ELASTIC")}
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tf_keras_elastic_run.sh")
    out = subprocess.run(["bash", script, os.environ["KOLORUN"], os.environ["KOLO_TF_PYTHON"]],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert out.returncode == 0 and \
        "tf_keras elastic: three workers finished with identical weights" in out.stdout, out.stdout
