"""Golden tests: the text of each named compiler stage for a few small models, compared with
files under review, so that a change in the IR, the fusion, the storage plan or the generated
GLSL shows up as a diff (TVM's style: text in, text out).

- `models/*.dl`: the models (an MLP with softmax cross-entropy, a conv net, a layer-norm and
  attention block, i32 ids and a gather, state and dropout); `texts.OPTIMIZERS` gives each
  the optimizer of its training step.
- `expected/<model>/<stage>.txt`: what each stage printed, as `dlc compile --emit STAGE
  --train` prints it (`pipeline.format_stage`), every
  symbolic dim planned at 8. The stages from `fuse` on
  depend on the GL target, so they have one file per target (`fuse.compute.txt`,
  `codegen.texture.txt`); `codegen` keeps a few kernels of each program (see
  `texts.codegen_text`). `reference.txt` is the graph the NumPy reference evaluates for
  `eval` (the model's eval form); for a training step it evaluates the `simplify` stage's
  train program, which a test checks.
- `test_golden.py`: one test per (model, file); a mismatch fails with a unified diff. It
  also checks that `dlc compile --emit STAGE` prints these texts.

After a change that is meant to change the text, regenerate the files (from the repository
root) and review the diff like any other (`git diff tests/golden/expected`):

    python -m tests.golden --update

`python -m tests.golden` alone compares without writing and lists what changed (`--diff`:
and prints each difference).
"""
