"""Bounds of model sizes that no CIFAR-scale run needs and that would otherwise fail at allocation
(a 100,000-channel conv is 360 GB): model.width's and model.widths' in a recipe, build_model's
for a caller. A parameter-memory estimate checks what they let through (training/model_memory)."""

MAX_WIDTH = 8192  # channels of a stage (and of an input)
MAX_WIDTH_SCALE = 64  # model.width: every stage's channels times this at most
MAX_CLASSES = 1_000_000  # ImageNet-21k has 21,841
MAX_SEED = 2**32 - 1  # data.seed's and run.seed's: what numpy's generators take
