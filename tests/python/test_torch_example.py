"""The Horovod-style example differs from a Horovod script only in its
import line: replacing `import kolo.torch as hvd` by Horovod's import leaves
no other mention of kolo. (CTest runs the example itself on 2 ranks:
torch_horovod_example.)"""

import os

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                       "horovod_style_mnist.py")


def test_only_the_import_line_names_kolo():
    with open(EXAMPLE) as f:
        code = [line for line in f if not line.lstrip().startswith("#")]
    mentions = [line.strip() for line in code if "kolo" in line]
    assert mentions == ["import kolo.torch as hvd"]
    horovod = "".join(code).replace("import kolo.torch as hvd",
                                    "import horovod.torch as hvd")
    assert "kolo" not in horovod
    compile(horovod, EXAMPLE, "exec")
