"""A compiled artifact, read as untrusted input: `manifest.py` checks manifest.json against
the typed spec, `files.py` reads the shaders and .npz files it names, `runner.py` loads it
onto a GL context and runs its programs. The compiler's emit stage (`compiler/emit.py`)
writes it.
"""
