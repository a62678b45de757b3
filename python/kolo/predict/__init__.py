"""kolo.predict: the scale model in Python, on the same C++ model as
``kolo-predict`` (docs/scale.md).

    import kolo.predict as kp
    r = kp.train(model="resnet50", step_compute_ms=120, ranks=512,
                 ranks_per_host=4, link="25gbit")
    r["efficiency"], r["overlapped_comm_s"], r["suggested_fusion_threshold_bytes"]
    curve = kp.efficiency_curve(model="vgg16", step_compute_ms=300,
                                ranks_per_host=4, link="25gbit",
                                modes=("allreduce", "sync-ps"), servers=16)
    kp.plot_curve(curve, "vgg16.png")

Arguments are those of ``kolo-predict train`` (``--step-compute-ms`` is
``step_compute_ms``): exactly one of ``params`` (a count, ``25.6e6`` or
``"25.6M"``), ``model`` (a name of :func:`models`), ``from_model`` (a
script, read as ``--from-model`` reads it, in this interpreter) and
``layers`` (``[(name, elements, share)]`` in backward order). Rates are
bits per second or text (``"25gbit"``), times seconds or text (``"2us"``).
``allreduce_model`` is ``"kolo"`` (kolo's allreduce model with its
constants, ``constants`` or KOLO_PREDICT_CONSTANTS or the built-in ones,
and kolo's selection) or ``"nccl-ring"`` (NCCL 2's ring with NCCL's latency
table, the papers' GPU clusters; docs/scale.md).
Bad arguments raise ValueError naming the argument and its value.
"""

import os as _os
import re as _re

from kolo import _predict

_MODES = ("allreduce", "sync-ps", "downpour")


def _number(name, value, units, default_unit=None):
    """A number with an optional unit of `units` ({suffix: factor})."""
    if isinstance(value, bool):
        raise ValueError(f"{name}: expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        result = float(value)
    elif isinstance(value, str):
        m = _re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z/]*)\s*", value)
        unit = m.group(2).lower() if m else None
        if unit == "" and default_unit is not None:
            unit = default_unit
        if not m or unit not in units:
            raise ValueError(f"{name} {value!r}: expected a number with one of the units "
                             f"{', '.join(u or '(none)' for u in units)}")
        result = float(m.group(1)) * units[unit]
    else:
        raise ValueError(f"{name}: expected a number or text, got {type(value).__name__}")
    if not result >= 0:
        raise ValueError(f"{name} {value!r}: expected a value >= 0")
    return result


_COUNT = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}
_RATE = {"": 1.0, "bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
         "bps": 1.0, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9, "tbps": 1e12,
         "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_TIME = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def _milliseconds(name, value):
    """Seconds from a number of milliseconds, or text ("120", "120ms", "0.12s")."""
    if isinstance(value, str):
        return _number(name, value, _TIME, default_unit="ms")
    return _number(name, value, _TIME) * 1e-3


def models():
    """The names the model zoo knows."""
    return list(_predict.zoo_names())


def model_layers(name):
    """[(name, elements, share)] of a zoo model, in backward order."""
    return list(_predict.zoo_model(name))


def read_model(script):
    """[(name, elements, share)] of a torch model script, in backward order
    (the rule of ``--from-model``: kolo/predict/from_model.py)."""
    from kolo.predict import from_model
    try:
        return from_model.read_model(script)
    except from_model.ModelScriptError as e:
        raise ValueError(str(e)) from e


def _layers(params, model, from_model, layers):
    given = [n for n, v in (("params", params), ("model", model), ("from_model", from_model),
                            ("layers", layers)) if v is not None]
    if len(given) != 1:
        raise ValueError("give exactly one of params, model, from_model and layers (got "
                         f"{', '.join(given) or 'none'})")
    if model is not None:
        return model, model_layers(model)
    if from_model is not None:
        return str(from_model), read_model(from_model)
    if layers is not None:
        return "layers", [(str(n), int(e), float(s)) for n, e, s in layers]
    count = int(round(_number("params", params, _COUNT)))
    if count < 1:
        raise ValueError(f"params {params!r}: expected at least 1")
    tensors = min(50, count)
    return (f"{params} parameters",
            [(f"tensor{i}", count // tensors + (1 if i < count % tensors else 0), 1.0)
             for i in range(tensors)])


def _request(params=None, model=None, from_model=None, layers=None, *, step_compute_ms,
             ranks=1, ranks_per_host=1, link=None, latency=0, servers=1, fusion_mb=64,
             cycle_ms=1, runtime="kolo", push_period=1, pull_period=1,
             backward_fraction=2.0 / 3.0, transport="shm", constants=None,
             allreduce_model="kolo"):
    name, tensor_list = _layers(params, model, from_model, layers)
    if runtime not in ("kolo", "horovod"):
        raise ValueError(f"runtime {runtime!r}: expected 'kolo' or 'horovod'")
    for arg, v, low in (("ranks", ranks, 1), ("ranks_per_host", ranks_per_host, 1),
                        ("servers", servers, 1), ("push_period", push_period, 1),
                        ("pull_period", pull_period, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"{arg} {v!r}: expected an integer >= {low}")
    return {
        "layers": tensor_list,
        "model_name": name,
        "step_compute_s": _milliseconds("step_compute_ms", step_compute_ms),
        "backward_fraction": float(backward_fraction),
        "ranks": ranks,
        "ranks_per_host": ranks_per_host,
        "link_bps": _number("link", link if link is not None else "10gbit", _RATE),
        "latency_s": _number("latency", latency, _TIME),
        "transport": _transport(transport),
        "constants": _constants(constants),
        "allreduce": allreduce_model,
        "fusion_threshold_bytes": int(_number("fusion_mb", fusion_mb, _COUNT) * (1 << 20)),
        "cycle_s": _milliseconds("cycle_ms", cycle_ms),
        "periodic": runtime == "horovod",
        "servers": servers,
        "push_period": push_period,
        "pull_period": pull_period,
    }


def _transport(transport):
    if transport not in ("shm", "tcp", "mpi"):
        raise ValueError(f"transport {transport!r}: expected 'shm', 'tcp' or 'mpi'")
    return transport


def _constants(constants):
    """The constants file: the argument, else KOLO_PREDICT_CONSTANTS, else
    '' (the built-in constants)."""
    path = constants if constants is not None else _os.environ.get("KOLO_PREDICT_CONSTANTS", "")
    if path and not _os.path.isfile(path):
        raise ValueError(f"constants file {path!r} does not exist")
    return str(path)


_BYTES = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def allreduce(*, ranks, bytes, ranks_per_host=1, link=0, latency=0, transport="shm",
              constants=None, agreement=True):
    """Predicted seconds of one allreduce (float32 sum) of `bytes` per
    algorithm, and the one kolo's selection runs: {"seconds": {"ring": s,
    ...}, "selected": "rhd"} (``kolo-predict allreduce``; `agreement`:
    include Communicator::allreduce's descriptor exchange, as kolo-bench
    measures). `bytes` is a count or text with K/M/G (powers of 1024)."""
    for arg, v in (("ranks", ranks), ("ranks_per_host", ranks_per_host)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{arg} {v!r}: expected an integer >= 1")
    size = int(_number("bytes", bytes, _BYTES))
    return dict(_predict.allreduce(ranks, ranks_per_host, _number("link", link, _RATE),
                                   _number("latency", latency, _TIME), size,
                                   _transport(transport), _constants(constants),
                                   bool(agreement)))


def _check_mode(mode):
    if mode not in _MODES:
        raise ValueError(f"mode {mode!r}: expected one of {', '.join(_MODES)}")
    return mode


def train(params=None, model=None, from_model=None, layers=None, *, mode="allreduce",
          **kwargs):
    """The predicted training step: a dict with step_s, compute_s,
    efficiency, comm_s, overlapped_comm_s, exposed_comm_s, collectives,
    cycles, and in allreduce mode suggested_fusion_threshold_bytes,
    suggested_step_s, suggested_efficiency."""
    request = _request(params, model, from_model, layers, **kwargs)
    if request["ranks"] > request["ranks_per_host"] or mode != "allreduce":
        if kwargs.get("link") is None:
            raise ValueError("link is required (ranks span hosts, or a PS mode)")
    return dict(_predict.train(request, _check_mode(mode)))


def efficiency_curve(params=None, model=None, from_model=None, layers=None, *,
                     modes=("allreduce",), max_ranks=4096, ranks=None, **kwargs):
    """{mode: [(ranks, efficiency), ...]} for ranks 1, 2, 4, ... max_ranks
    (or the given `ranks`), as ``--plot`` draws it."""
    if isinstance(modes, str):
        modes = (modes,)
    modes = [_check_mode(m) for m in modes]
    if kwargs.get("link") is None:
        raise ValueError("link is required for a curve (it spans hosts)")
    series = list(ranks) if ranks is not None else list(_predict.rank_series(int(max_ranks)))
    request = _request(params, model, from_model, layers, **kwargs)
    points = _predict.curve(request, modes, series)
    out = {m: [] for m in modes}
    for p in points:
        out[p["mode"]].append((p["ranks"], p["efficiency"]))
    return out


def papers():
    """The published figures the model reproduces (docs/scale.md, "The
    papers' figures"): one dict per case with its inputs (paper, model,
    gpus, gpus_per_host, link_bps, images_per_second, batch), the
    published_efficiency and the predicted step (efficiency, step_s, ...)."""
    return [dict(r) for r in _predict.papers()]


def plot_curve(curve, out, title=""):
    """Draws an efficiency_curve() result to a PNG (matplotlib)."""
    from kolo.predict import plot
    plot.plot_series([{"label": m, "ranks": [n for n, _ in pts],
                       "efficiency": [e for _, e in pts]} for m, pts in curve.items()],
                     out, title)
