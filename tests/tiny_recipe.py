"""The tiny synthetic recipe the experiment tests train: a run of a second or two on a shared CPU."""

TINY_SYNTHETIC = [
    "data.name=synthetic", "data.train_size=256", "data.test_size=128", "data.image_size=16",
    "model.name=airbench", "model.widths=[8,16,16]", "loader.kind=device",
    "loader.batch_size=64", "loader.eval_batch_size=128", "run.device=cpu",
]  # fmt: skip
