"""Pipeline parallelism for kolo.torch (docs/pipeline.md): Pipeline (GPipe
and 1F1B schedules over kolo's point-to-point messages) and Mesh (pipeline
x data parallelism)."""

from kolo.torch.pipeline.mesh import Mesh
from kolo.torch.pipeline.pipeline import Pipeline
from kolo.torch.pipeline.schedules import bubble_fraction

__all__ = ["Pipeline", "Mesh", "bubble_fraction"]
