"""Reads a torch model's parameter tensors for the scale model
(``kolo-predict train --from-model script.py``, ``kolo.predict.read_model``).

Which model, in this order (docs/scale.md, "Your own model"):

1. a module-level function ``model()`` that returns a ``torch.nn.Module``;
2. a module-level variable ``model`` holding a ``torch.nn.Module``;
3. the first ``torch.nn.Module`` instance among the script's module-level
   names, in the order the script defines them.

The script runs with ``__name__`` set to ``"kolo_predict_model"``, so its
``if __name__ == "__main__":`` block (the training) does not run.

The tensors are the parameters that require a gradient, in reverse
registration order (the order backward produces their gradients, as DDP
and Horovod assume), with their share of the backward compute:
proportional to the parameter count, or, when the script defines
``example_input()`` (returning the model's input, or a tuple of inputs),
to the multiply-adds one forward pass at that input does in the module
that owns the parameter (convolutions and linear layers: output elements
times weight elements per output channel; any other module: its output
elements).

Run as a program (``python3 from_model.py script.py``) it prints one line
per tensor, ``name<TAB>elements<TAB>share``, for the C++ tool; errors go
to stderr with exit status 2.

This file imports nothing of kolo, so it runs alone.
"""

import runpy
import sys

RUN_NAME = "kolo_predict_model"


class ModelScriptError(ValueError):
    """The script could not be read or names no model."""


def _find_model(script, namespace, torch):
    made = namespace.get("model")
    if callable(made) and not isinstance(made, torch.nn.Module):
        module = made()
        if not isinstance(module, torch.nn.Module):
            raise ModelScriptError(
                f"{script}: model() returned {type(module).__name__}, not a torch.nn.Module")
        return "model()", module
    if isinstance(made, torch.nn.Module):
        return "model", made
    for name, value in namespace.items():
        if not name.startswith("__") and isinstance(value, torch.nn.Module):
            return name, value
    raise ModelScriptError(
        f"{script}: no model found: define a function model() returning a torch.nn.Module, "
        "or a torch.nn.Module at module level")


def _forward_macs(module, inputs, torch):
    """{module: (multiply-adds, output elements)} of one forward pass, for
    the modules that own parameters."""
    macs = {}
    hooks = []

    def hook(mod, _inputs, output):
        out = output[0] if isinstance(output, (tuple, list)) else output
        if not torch.is_tensor(out):
            return
        weight = getattr(mod, "weight", None)
        per_output = 1
        if isinstance(mod, (torch.nn.modules.conv._ConvNd, torch.nn.Linear)) and \
                weight is not None:
            per_output = weight.numel() // max(1, weight.shape[0])
        done, outputs = macs.get(mod, (0, 0))
        macs[mod] = (done + out.numel() * per_output, outputs + out.numel())

    for m in module.modules():
        if any(True for _ in m.parameters(recurse=False)):
            hooks.append(m.register_forward_hook(hook))
    try:
        with torch.no_grad():
            module(*inputs)
    finally:
        for h in hooks:
            h.remove()
    return macs


def read_model(script):
    """[(name, elements, share)] of the script's model, in backward order."""
    try:
        import torch
    except ImportError as e:
        raise ModelScriptError(f"--from-model needs torch in {sys.executable}: {e}") from e
    try:
        namespace = runpy.run_path(script, run_name=RUN_NAME)
    except FileNotFoundError as e:
        raise ModelScriptError(f"{script}: no such file") from e
    except SystemExit as e:
        raise ModelScriptError(f"{script}: exited ({e.code}) while being imported") from e
    except Exception as e:  # the script's own error, named with its type
        raise ModelScriptError(f"{script}: {type(e).__name__} while importing: {e}") from e
    _, module = _find_model(script, namespace, torch)
    macs = None
    if callable(namespace.get("example_input")):
        inputs = namespace["example_input"]()
        if not isinstance(inputs, tuple):
            inputs = (inputs,)
        macs = _forward_macs(module, inputs, torch)
    rows = []
    for owner_name, owner in module.named_modules():
        for pname, p in owner.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            name = f"{owner_name}.{pname}" if owner_name else pname
            if macs is None:
                share = float(p.numel())
            else:
                # The weight carries the module's multiply-adds; the others
                # one per output element.
                done, outputs = macs.get(owner, (0, 0))
                share = float(done if pname == "weight" else outputs)
            rows.append((name, p.numel(), share))
    # named_modules() lists a shared module once; registration order is
    # named_parameters()'s: keep its order, reversed.
    order = {n: i for i, (n, _) in enumerate(module.named_parameters())}
    rows = [r for r in rows if r[0] in order]
    rows.sort(key=lambda r: order[r[0]])
    if not rows:
        raise ModelScriptError(f"{script}: the model has no parameters that require a gradient")
    return rows[::-1]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: from_model.py script.py", file=sys.stderr)
        return 2
    try:
        rows = read_model(argv[0])
    except ModelScriptError as e:
        print(f"kolo-predict: {e}", file=sys.stderr)
        return 2
    for name, elements, share in rows:
        print(f"{name}\t{elements}\t{share!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
