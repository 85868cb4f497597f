"""Where a Session's programs run: the `Backend` protocol (`protocol.py`) and its three
implementations, the NumPy reference (`reference.py`, with `make_backend`), GL over a model
(`gl.py`) and GL over a compiled artifact (`artifact.py`); `gl_eager.py` runs the eager
arrays' kernels (`dlc.ops`) on GL.

Empty on purpose: importing one backend imports neither the others nor the compiler.
"""
