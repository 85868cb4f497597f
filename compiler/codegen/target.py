"""A code generation target: one object holding everything that differs between shader
languages and the way their programs run.

What a target provides (a subclass of `Target`):
- `name`: what users pass (`--target`, `Session(target=...)`); `runtime`: the executor that
  runs its programs ("compute": runtime/executor.py over storage buffers; "texture":
  runtime/texture_executor.py over float textures);
- `keys`: its lowering keys in the registry, most specific first. A kernel of kind K renders
  through `template(K)`, the callable registered for (K, key) by `registry.register_lowering`
  (the layout ops' index maps likewise, per op, under "glsl"). A target reuses another's
  lowerings by listing that one's key after its own, and replaces only those it registers
  under its own key. The callables' signature is the target's own: the compute target's is
  `fn(ctx, options) -> KernelSource`, the texture target's `fn(ctx, options) -> TextureKernel`;
- `renderer(options)`: the `Renderer` (renderer.py) that the Emitter asks how to load, store
  and find an invocation's element; the shader header is the target's (compute.header,
  fragment.header);
- `capabilities(options)`: what fusion may put in one kernel (`fusion.Capabilities`: the
  bindings and outputs a kernel may have on the device the options' limits describe);
- `render(name, plan, options)`: the program as a `Rendered`: its spec (runtime/spec.py,
  from program.program_spec plus the target's own fields), shader files and KernelSources.

Two targets ship: `ComputeTarget` (compute.py: GLSL 4.30 compute shaders) and
`TextureTarget` (texture.py: GLSL 3.30 / ES 3.00 fragment shaders, for WebGL2 and macOS).
A new one (WebGPU's WGSL, say) is one new module: its Target subclass with the five above, its
kernel templates registered under its key, and `register_target(...)` so that its name can be
passed (a Target object may also be passed where a target name is). tests/codegen/targets/
compute_noshared.py is a third in one file: compute shaders without shared memory, whose
reduce and matmul kernels loop over their inputs one invocation an output.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from dlc.runtime.spec import ProgramSpec

from .. import registry
from ..fusion import Capabilities
from ..plan import Plan
from .glsl import KernelSource
from .options import CodegenOptions
from .renderer import Renderer


@dataclass(frozen=True)
class Rendered:
    """A program rendered for a target: its spec, its shader files (name -> text) and a
    KernelSource per kernel, in schedule order."""

    spec: ProgramSpec
    sources: dict[str, str]
    kernels: list[KernelSource]


class Target(ABC):
    """See the module docstring."""

    name: ClassVar[str]
    runtime: ClassVar[str]
    keys: ClassVar[tuple[str, ...]]

    @abstractmethod
    def renderer(self, options: CodegenOptions) -> Renderer:
        """How this target's shaders load, store and find their own element."""

    @abstractmethod
    def capabilities(self, options: CodegenOptions) -> Capabilities:
        """What one kernel may do on the device the options' `limits` describe (none: the
        spec minimums, so a program compiled offline runs on any conforming device)."""

    @abstractmethod
    def render(self, name: str, plan: Plan, options: CodegenOptions) -> Rendered:
        """Program `name` of planned `plan`, rendered."""

    def template(self, kind: str) -> Callable:
        """The lowering of kernels of `kind` on this target (the first of its keys that has
        one); a kind it has none for is a TargetError naming both."""
        for key in self.keys:
            fn = registry.LOWERINGS.get((kind, key))
            if fn is not None:
                return fn
        raise TargetError(f"the {self.name} target has no kernel for {kind} kernels")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} '{self.name}'>"


class TargetError(Exception):
    """A kernel a target cannot render (names the target and what it lacks)."""


TARGETS: dict[str, Target] = {}  # by the name users pass


def register_target(target: Target) -> Target:
    if target.name in TARGETS:
        raise ValueError(f"target {target.name!r} registered twice")
    TARGETS[target.name] = target
    return target


def get_target(target: str | Target) -> Target:
    """The target named `target` (a Target is returned as it is); an unknown name is a
    ValueError naming the ones there are."""
    if isinstance(target, Target):
        return target
    found = TARGETS.get(target) if isinstance(target, str) else None
    if found is None:
        raise ValueError(f"unknown target '{target}': choose {' or '.join(TARGETS)}")
    return found
