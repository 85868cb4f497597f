"""The OpenGL runtime: context, buffers, programs, sync, and the artifact executor.

Importing this package imports no GL: `dlc.runtime.gl` does that, on first use of a module that
needs it (context creation is lazier still, in `dlc.runtime.device.get_context()`).
"""
