"""kolo.predict and `kolo-predict train` (docs/scale.md): the zoo against
torchvision, the training model's answers, the --from-model rule, --json,
--plot and the errors. One process, no ranks."""

import json
import os
import subprocess
import sys

import pytest

import kolo.predict as kp

KOLO_PREDICT = os.environ.get("KOLO_PREDICT", "")


def run_cli(*args, check=True):
    if not KOLO_PREDICT:
        pytest.skip("KOLO_PREDICT (the kolo-predict binary) is not set")
    p = subprocess.run([KOLO_PREDICT, "train", *args], capture_output=True, text=True,
                       timeout=120)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def test_zoo_is_torchvisions_parameters_in_reverse_order():
    tv = pytest.importorskip("torchvision.models")
    for name, make in (("resnet18", tv.resnet18), ("resnet50", tv.resnet50),
                       ("inception_v3", lambda: tv.inception_v3(aux_logits=False,
                                                                 init_weights=False))):
        model = make()
        expected = [p.numel() for p in model.parameters()][::-1]
        assert [e for _, e, _ in kp.model_layers(name)] == expected, name


def test_train_answers():
    one = kp.train(model="resnet50", step_compute_ms=120, ranks=1)
    assert one["efficiency"] == 1.0 and one["comm_s"] == 0.0
    r = kp.train(model="resnet50", step_compute_ms=120, ranks=64, ranks_per_host=4,
                 link="25gbit", latency="2us")
    assert 0 < r["efficiency"] < 1
    assert r["step_s"] == pytest.approx(r["compute_s"] + r["exposed_comm_s"])
    assert r["overlapped_comm_s"] <= r["comm_s"] + 1e-12
    assert r["suggested_step_s"] <= r["step_s"] + 1e-12
    # The same with the parameter count only, and a slower link: slower.
    slow = kp.train(params="25.6M", step_compute_ms=120, ranks=64, ranks_per_host=4,
                    link="1gbit")
    assert slow["efficiency"] < r["efficiency"]
    # Servers' links: more servers, a shorter sync step.
    s1 = kp.train(model="vgg16", step_compute_ms=300, ranks=16, link="10gbit",
                  mode="sync-ps", servers=1)
    s8 = kp.train(model="vgg16", step_compute_ms=300, ranks=16, link="10gbit",
                  mode="sync-ps", servers=8)
    assert s8["step_s"] < s1["step_s"] and s1["overlapped_comm_s"] == 0


def test_curve_and_allreduce():
    c = kp.efficiency_curve(model="resnet18", step_compute_ms=100, link="10gbit",
                            ranks_per_host=2, modes=("allreduce", "downpour"), max_ranks=64)
    assert [n for n, _ in c["allreduce"]] == [1, 2, 4, 8, 16, 32, 64]
    assert c["allreduce"][0][1] == 1.0
    a = kp.allreduce(ranks=8, ranks_per_host=2, bytes="64M", link="1gbit")
    assert a["selected"] in a["seconds"] and all(s > 0 for s in a["seconds"].values())


def test_papers_within_ten_points():
    rows = kp.papers()
    assert {(r["paper"], r["model"]) for r in rows} == {
        ("Horovod 2018", "inception_v3"), ("Horovod 2018", "resnet101"),
        ("Horovod 2018", "vgg16"), ("DDL 2017", "resnet50")}
    for r in rows:
        assert abs(r["efficiency"] - r["published_efficiency"]) <= 0.10, r


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="mode 'ring'"):
        kp.train(model="resnet50", step_compute_ms=10, ranks=2, link="1gbit", mode="ring")
    with pytest.raises(ValueError, match="exactly one of params, model"):
        kp.train(model="resnet50", params="1M", step_compute_ms=10, ranks=2)
    with pytest.raises(ValueError, match="unknown model 'alexnet'"):
        kp.train(model="alexnet", step_compute_ms=10, ranks=2)
    with pytest.raises(ValueError, match="link '25 potatoes'"):
        kp.train(model="resnet50", step_compute_ms=10, ranks=2, link="25 potatoes")
    with pytest.raises(ValueError, match="link is required"):
        kp.train(model="resnet50", step_compute_ms=10, ranks=8)
    with pytest.raises(ValueError, match="compute time"):
        kp.train(model="resnet50", step_compute_ms=0, ranks=2, link="1gbit")


SCRIPTS = {
    # model(): wins over a module-level instance
    "factory.py": """
import torch
other = torch.nn.Linear(2, 2)
def model():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(),
                               torch.nn.Linear(8 * 6 * 6, 10))
def example_input():
    return torch.zeros(1, 3, 8, 8)
if __name__ == "__main__":
    raise SystemExit("the training must not run")
""",
    # the first nn.Module at module level
    "instance.py": """
import torch
net = torch.nn.Linear(4, 3)
later = torch.nn.Linear(100, 100)
""",
    "none.py": "x = 1\n",
}


@pytest.fixture
def scripts(tmp_path):
    for name, text in SCRIPTS.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_from_model_rule(scripts):
    pytest.importorskip("torch")
    rows = kp.read_model(str(scripts / "factory.py"))
    assert [(n, e) for n, e, _ in rows] == [("2.bias", 10), ("2.weight", 2880),
                                            ("0.bias", 8), ("0.weight", 216)]
    shares = {n: s for n, _, s in rows}
    assert shares["0.weight"] == 288 * 27 and shares["2.weight"] == 10 * 288
    rows = kp.read_model(str(scripts / "instance.py"))
    assert [(n, e, s) for n, e, s in rows] == [("bias", 3, 3.0), ("weight", 12, 12.0)]
    with pytest.raises(ValueError, match="no model found"):
        kp.read_model(str(scripts / "none.py"))
    r = kp.train(from_model=str(scripts / "instance.py"), step_compute_ms=1, ranks=1)
    assert r["efficiency"] == 1.0


def test_cli_json_from_model_and_plot(scripts, tmp_path):
    p = run_cli("--from-model", str(scripts / "factory.py"), "--step-compute-ms", "5",
                "--ranks", "8", "--ranks-per-host", "2", "--link", "1gbit", "--json")
    out = json.loads(p.stdout)
    assert out["parameters"] == 216 + 8 + 2880 + 10 and out["tensors"] == 4
    assert out["mode"] == "allreduce" and 0 < out["efficiency"] <= 1
    for key in ("step_s", "overlapped_comm_s", "exposed_comm_s",
                "suggested_fusion_threshold_bytes"):
        assert key in out
    # The same answer as kolo.predict (one model underneath).
    r = kp.train(from_model=str(scripts / "factory.py"), step_compute_ms=5, ranks=8,
                 ranks_per_host=2, link="1gbit")
    assert out["step_s"] == pytest.approx(r["step_s"], rel=1e-6)
    p = run_cli("--from-model", str(scripts / "none.py"), "--step-compute-ms", "5",
                "--ranks", "1", check=False)
    assert p.returncode != 0 and "no model found" in p.stderr
    p = run_cli("--model", "resnet50", "--step-compute-ms", "120", "--ranks", "8",
                "--link", "25gbit", "--mode", "sync-ps,allreduce", "--json")
    assert [r["mode"] for r in json.loads(p.stdout)["results"]] == ["sync-ps", "allreduce"]
    p = run_cli("--model", "resnet50", "--step-compute-ms", "120", "--ranks", "8",
                "--mode", "downpour", check=False)
    assert p.returncode == 2 and "--link" in p.stderr
    pytest.importorskip("matplotlib")
    png = tmp_path / "curve.png"
    run_cli("--model", "resnet18", "--step-compute-ms", "100", "--ranks", "4",
            "--ranks-per-host", "2", "--link", "10gbit", "--mode", "allreduce,downpour",
            "--plot", str(png), "--max-ranks", "64")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
