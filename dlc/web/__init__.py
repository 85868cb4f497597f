"""`dlc export --web`: a folder that evaluates and trains a model in a browser (WebGL2).

`export_web` compiles the model for the texture target as GLSL ES 3.00 and writes the
shaders, `manifest.json`, the weights as one little-endian float32 file, and the static
JavaScript runtime `dlc.js` with a page (`static/`).
"""

from .export import export_web

__all__ = ["export_web"]
