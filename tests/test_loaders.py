"""DeviceLoader and TorchLoader: epoch order, sharding, augmentations, and that both mean the same."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tricklab.core.errors import TrickLabError
from tricklab.data.augment import crop_at, normalize, pad
from tricklab.data.loaders import (
    AugmentSpec,
    DeviceLoader,
    LoaderSpec,
    TorchLoader,
    alternating_flip_bits,
    epoch_order,
)

MEAN, STD = [0.49, 0.48, 0.45], [0.25, 0.24, 0.26]


def split(n=96, size=8, seed=0):
    """Random uint8 images with labels = their index, so every yielded sample names its image."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=generator)
    return images, torch.arange(n)


def epoch_batches(loader):
    images, labels = zip(*list(loader))
    return torch.cat(images), torch.cat(labels)


def windows(images, translate, pad_mode="reflect", flips=True):
    """Every image the loaders may make from `images`: normalized shifted crops, optionally mirrored.

    Returns K × N × C × H × W with K = (2t+1)² (times 2 with flips).
    """
    size = images.shape[-1]
    variants = [images, images.flip(-1)] if flips else [images]
    out = []
    for variant in variants:
        padded = normalize(pad(variant, translate, pad_mode), MEAN, STD)
        for top in range(2 * translate + 1):
            for left in range(2 * translate + 1):
                offsets = torch.full((images.shape[0],), top), torch.full((images.shape[0],), left)
                out.append(crop_at(padded, size, *offsets))
    return torch.stack(out)


def matching_window(candidates, out, labels):
    """K × B bool: which candidate equals each yielded image."""
    return (candidates[:, labels] == out).flatten(2).all(2)


# ---------------------------------------------------------------- order, epochs, sharding


@pytest.mark.parametrize("Loader", [DeviceLoader, TorchLoader])
def test_eval_loader_yields_the_split_in_order_and_normalized(Loader):
    images, labels = split(n=50)
    out, out_labels = epoch_batches(
        Loader(images, labels, LoaderSpec(16, train=False, mean=MEAN, std=STD))
    )
    assert torch.equal(out_labels, labels)
    assert out.dtype == torch.float32 and out_labels.dtype == torch.int64
    assert torch.equal(out, normalize(images, MEAN, STD))


def test_without_mean_and_std_images_are_only_scaled_to_0_1():
    images, labels = split(n=10)
    out, _ = epoch_batches(DeviceLoader(images, labels, LoaderSpec(4, train=False)))
    torch.testing.assert_close(out, images.float() / 255, rtol=0, atol=1e-7)


def test_permutations_differ_per_epoch_and_repeat_per_seed():
    images, labels = split()
    loader = DeviceLoader(images, labels, LoaderSpec(32, seed=3))
    epoch0 = epoch_batches(loader)[1]
    epoch1 = epoch_batches(loader)[1]
    assert not torch.equal(epoch0, epoch1)
    assert sorted(epoch0.tolist()) == sorted(epoch1.tolist()) == list(range(96))
    again = DeviceLoader(images, labels, LoaderSpec(32, seed=3))
    assert torch.equal(epoch_batches(again)[1], epoch0)
    assert torch.equal(epoch_batches(again)[1], epoch1)
    other_seed = DeviceLoader(images, labels, LoaderSpec(32, seed=4))
    assert not torch.equal(epoch_batches(other_seed)[1], epoch0)


def test_iterating_advances_the_epoch_and_set_epoch_selects_one():
    images, labels = split()
    loader = DeviceLoader(images, labels, LoaderSpec(32))
    assert loader.epoch == 0
    first = epoch_batches(loader)[1]
    assert loader.epoch == 1
    epoch_batches(loader)
    loader.set_epoch(0)
    assert torch.equal(epoch_batches(loader)[1], first)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_shards_of_all_ranks_partition_the_epoch(world_size):
    images, labels = split(n=103)  # 103 % 2, 3, 4 != 0: the remainder of the order is dropped
    shards = [
        epoch_batches(
            DeviceLoader(images, labels, LoaderSpec(8, seed=1, rank=r, world_size=world_size))
        )[1]
        for r in range(world_size)
    ]
    loaders = [
        DeviceLoader(images, labels, LoaderSpec(8, rank=r, world_size=world_size))
        for r in range(world_size)
    ]
    assert len({len(loader) for loader in loaders}) == 1  # equal steps on every rank
    assert all(len(shard) == 103 // world_size for shard in shards)
    seen = torch.cat(shards)
    assert len(set(seen.tolist())) == len(seen)  # disjoint
    order = epoch_order(103, seed=1, epoch=0, shuffle=True)
    kept = set(order[: world_size * (103 // world_size)].tolist())
    assert set(seen.tolist()) == kept  # union = the epoch's order minus its last 103 % world_size


def test_drop_last_drops_the_partial_batch():
    images, labels = split(n=50)
    loader = DeviceLoader(images, labels, LoaderSpec(16, drop_last=True))
    sizes = [len(batch_labels) for _, batch_labels in loader]
    assert len(loader) == 3 and sizes == [16, 16, 16]
    keep = DeviceLoader(images, labels, LoaderSpec(16))
    assert len(keep) == 4 and [len(b) for _, b in keep] == [16, 16, 16, 2]


def test_channels_last_output_is_channels_last_contiguous():
    images, labels = split()
    for Loader in (DeviceLoader, TorchLoader):
        loader = Loader(
            images, labels, LoaderSpec(32, channels_last=True, augment=AugmentSpec(cutout=2))
        )
        out, _ = next(iter(loader))
        assert out.is_contiguous(memory_format=torch.channels_last)


def test_output_dtype_follows_dtype():
    images, labels = split()
    out, _ = next(
        iter(DeviceLoader(images, labels, LoaderSpec(32, train=False, dtype=torch.bfloat16)))
    )
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, (images[:32].float() / 255).bfloat16())


# ---------------------------------------------------------------- augmentations in DeviceLoader


def test_alternating_flip_shows_each_image_mirrored_on_alternate_epochs():
    images, labels = split()
    loader = DeviceLoader(
        images, labels, LoaderSpec(32, augment=AugmentSpec(flip="alternating"), mean=MEAN, std=STD)
    )
    seen = []
    for _ in range(3):
        out, out_labels = epoch_batches(loader)
        seen.append(out[out_labels.argsort()])  # back in dataset order
    assert torch.equal(seen[1], seen[0].flip(-1))
    assert torch.equal(seen[2], seen[0])
    plain = normalize(images, MEAN, STD)
    mirrored_first = (seen[0] == plain.flip(-1)).flatten(1).all(1)
    assert torch.equal(mirrored_first, alternating_flip_bits(96, seed=0))


def test_random_flip_mirrors_about_half_each_epoch():
    images, labels = split(n=400)
    loader = DeviceLoader(
        images, labels, LoaderSpec(100, augment=AugmentSpec(flip="random"), mean=MEAN, std=STD)
    )
    out, out_labels = epoch_batches(loader)
    plain = normalize(images, MEAN, STD)[out_labels]
    mirrored = (out == plain.flip(-1)).flatten(1).all(1)
    assert torch.all(mirrored | (out == plain).flatten(1).all(1))
    assert 0.4 < mirrored.float().mean() < 0.6


@pytest.mark.parametrize("pad_mode", ["reflect", "zeros"])
def test_translate_yields_shifted_crops_of_every_offset(pad_mode):
    images, labels = split(n=300)
    spec = AugmentSpec(flip="random", translate=2, pad_mode=pad_mode)
    loader = DeviceLoader(images, labels, LoaderSpec(64, augment=spec, mean=MEAN, std=STD))
    out, out_labels = epoch_batches(loader)
    match = matching_window(windows(images, 2, pad_mode), out, out_labels)
    assert torch.all(match.any(0))  # each output is one flipped/shifted window
    assert torch.all(match.any(1))  # and every window occurs


def test_cutout_zeroes_a_clipped_square_after_normalization():
    images = torch.full((200, 3, 8, 8), 200, dtype=torch.uint8)  # normalizes to non-zero values
    loader = DeviceLoader(
        images, torch.arange(200), LoaderSpec(50, augment=AugmentSpec(cutout=4), mean=MEAN, std=STD)
    )
    out, _ = epoch_batches(loader)
    zeros = (out == 0).sum(dim=(2, 3))
    assert torch.all(zeros[:, 0] == zeros[:, 1])
    assert set(zeros[:, 0].tolist()) <= {4, 6, 8, 9, 12, 16}
    assert (zeros[:, 0] == 16).any() and (zeros[:, 0] < 16).any()
    kept = out != 0
    assert torch.equal(out[kept], normalize(images, MEAN, STD)[kept])  # the rest is untouched


@pytest.mark.parametrize("Loader", [DeviceLoader, TorchLoader])
def test_cutout_inside_zeroes_a_whole_square_inside_the_image_reaching_every_border(Loader):
    images = torch.full((400, 3, 8, 8), 200, dtype=torch.uint8)
    spec = AugmentSpec(cutout=3, cutout_inside=True)
    out, _ = epoch_batches(
        Loader(images, torch.arange(400), LoaderSpec(50, augment=spec, mean=MEAN, std=STD))
    )
    zeroed = out[:, 0] == 0
    assert torch.all(zeroed.sum(dim=(1, 2)) == 9) and torch.equal(zeroed, (out == 0).all(1))
    rows, cols = zeroed.any(2).float(), zeroed.any(1).float()
    assert torch.all(rows.sum(1) == 3) and torch.all(cols.sum(1) == 3)  # one whole 3x3 square
    # squares reach each border (top-left corners 0 and 8 - 3 = 5), never beyond it
    tops, lefts = rows.argmax(1), cols.argmax(1)
    assert set(tops.tolist()) == set(range(6)) and set(lefts.tolist()) == set(range(6))


def test_cutout_inside_larger_than_the_image_is_refused():
    with pytest.raises(TrickLabError, match="cutout_inside"):
        DeviceLoader(
            torch.zeros(4, 3, 8, 8, dtype=torch.uint8),
            torch.arange(4),
            LoaderSpec(2, augment=AugmentSpec(cutout=9, cutout_inside=True)),
        )


def test_augmentations_repeat_for_the_same_seed_and_epoch():
    images, labels = split()
    spec = AugmentSpec(flip="random", translate=2, cutout=3)
    first = DeviceLoader(images, labels, LoaderSpec(32, augment=spec, seed=5))
    second = DeviceLoader(images, labels, LoaderSpec(32, augment=spec, seed=5))
    first.set_epoch(2)
    second.set_epoch(2)
    a, b = epoch_batches(first), epoch_batches(second)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(epoch_batches(first)[0], a[0])


def test_no_augmentation_when_not_training():
    images, labels = split()
    spec = AugmentSpec(flip="random", translate=2, cutout=3)
    out, _ = epoch_batches(
        DeviceLoader(images, labels, LoaderSpec(32, train=False, augment=spec, mean=MEAN, std=STD))
    )
    assert torch.equal(out, normalize(images, MEAN, STD))


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_normalized_storage_equals_the_uint8_float32_path_rounded_to_its_dtype(
    dtype, channels_last
):
    """Stored normalized in bf16/fp16 = per batch uint8 -> fp32 -> normalize -> the cast autocast
    made at the first convolution: the same values, bit for bit, for the same seed."""
    images, labels = split()
    spec = AugmentSpec(flip="alternating", translate=2, cutout=3)
    kwargs = dict(augment=spec, mean=MEAN, std=STD, seed=2, channels_last=channels_last)
    uint8_fp32 = DeviceLoader(images, labels, LoaderSpec(32, **kwargs), storage_dtype=torch.uint8)
    stored = DeviceLoader(images, labels, LoaderSpec(32, dtype=dtype, **kwargs))
    assert stored.storage_dtype == dtype
    for _ in range(2):
        reference, out = epoch_batches(uint8_fp32), epoch_batches(stored)
        assert out[0].dtype == dtype and torch.equal(out[1], reference[1])
        assert torch.equal(out[0], reference[0].to(dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_stored_batches_equal_torchvisions_float32_batches_rounded_to_their_dtype(dtype):
    images, labels = split()
    kwargs = dict(augment=AugmentSpec(flip="alternating"), mean=MEAN, std=STD, seed=1)
    device = DeviceLoader(images, labels, LoaderSpec(32, dtype=dtype, channels_last=True, **kwargs))
    torch_ = TorchLoader(images, labels, LoaderSpec(32, **kwargs))
    for _ in range(2):
        a, b = epoch_batches(device), epoch_batches(torch_)
        assert torch.equal(a[1], b[1]) and torch.equal(a[0], b[0].to(dtype))


def test_batches_come_out_in_the_dtype_the_split_is_stored_in():
    images, labels = split(n=40, size=8)
    spec = AugmentSpec(flip="random", translate=2)
    bf16 = DeviceLoader(images, labels, LoaderSpec(8, augment=spec, dtype=torch.bfloat16))
    assert bf16.storage_dtype == torch.bfloat16
    assert next(iter(bf16))[0].dtype == torch.bfloat16  # not upcast to float32
    assert bf16.storage_bytes == 2 * 40 * 3 * 12 * 12 * 2  # mirrored copy, padded, 2 bytes
    raw = DeviceLoader(images, labels, LoaderSpec(8, augment=spec), storage_dtype=torch.uint8)
    assert raw.storage_dtype == torch.uint8 and raw.storage_bytes == bf16.storage_bytes // 2
    assert next(iter(raw))[0].dtype == torch.float32  # normalized per batch into dtype


def test_a_float_storage_dtype_other_than_the_batches_dtype_is_refused():
    images, labels = split(n=8)
    with pytest.raises(TrickLabError, match="batches come out in the dtype the split is stored"):
        DeviceLoader(images, labels, LoaderSpec(4), storage_dtype=torch.bfloat16)  # dtype float32


def test_a_split_that_does_not_fit_on_its_device_is_refused_before_allocating(monkeypatch):
    from tricklab.data import device_loader

    asked = []
    monkeypatch.setattr(
        device_loader, "free_memory_bytes", lambda device: asked.append(device) or 10_000
    )
    images, labels = split(n=40, size=8)
    spec = AugmentSpec(flip="random", translate=2)
    with pytest.raises(TrickLabError, match=r"40 images stored as float32, padded, with a mirror"):
        DeviceLoader(images, labels, LoaderSpec(8, augment=spec))  # 2 × 40 × 3 × 12 × 12 × 4 bytes
    with pytest.raises(TrickLabError, match="loader.storage_dtype=uint8"):
        DeviceLoader(images, labels, LoaderSpec(8, augment=spec))
    assert asked == [torch.device("cpu")] * 2
    DeviceLoader(
        images, labels, LoaderSpec(8, train=False), storage_dtype=torch.uint8
    )  # no copy: no check


class KernelRecorder(TorchDispatchMode):
    """Names of the aten ops that run a kernel (not views) inside it."""

    def __init__(self):
        super().__init__()
        self.kernels = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        returns = func._schema.returns
        if not any(r.alias_info is not None and not r.alias_info.is_write for r in returns):
            self.kernels.append(func._overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize(
    ("spec", "kernels"),
    [
        (AugmentSpec(), ["index_select"]),
        (AugmentSpec(flip="alternating", translate=2), ["index_select"]),
        (AugmentSpec(flip="random", translate=2, cutout=3), ["index_select", "index_put_"]),
    ],
)
def test_a_batch_is_one_gather_and_one_fill_for_cutout(spec, kernels, channels_last):
    """Flip, crop and the dataset gather in one index_select, cutout in one index_put_: no dtype
    conversion, no normalization, no layout copy, no host sync (airbench's loader does a
    whole-split flip and crop per epoch and a gather per batch)."""
    images, labels = split(n=40)
    loader = DeviceLoader(
        images,
        labels,
        LoaderSpec(
            8, augment=spec, mean=MEAN, std=STD, dtype=torch.bfloat16, channels_last=channels_last
        ),
    )
    batches = iter(loader)
    for _ in range(len(loader)):
        with KernelRecorder() as recorder:
            out, _ = next(batches)
        assert recorder.kernels == kernels
        assert out.is_contiguous(
            memory_format=torch.channels_last if channels_last else torch.contiguous_format
        )


def test_iterating_draws_the_epochs_order_and_augmentations_before_its_first_batch(monkeypatch):
    """So that a training loop draws them before its timer starts (`iter()`, then the timer)."""
    from tricklab.data import device_loader

    events = []
    real_order, real_generator = device_loader.epoch_order, device_loader.device_generator
    monkeypatch.setattr(
        device_loader, "epoch_order", lambda *a, **k: events.append("order") or real_order(*a, **k)
    )
    monkeypatch.setattr(
        device_loader, "device_generator", lambda *a: events.append("draws") or real_generator(*a)
    )
    images, labels = split(n=40)
    batches = iter(
        DeviceLoader(images, labels, LoaderSpec(8, augment=AugmentSpec(flip="random", cutout=2)))
    )
    assert events == ["order", "draws"]
    next(batches)
    assert events == ["order", "draws"]


# ---------------------------------------------------------------- TorchLoader means the same


def test_torch_loader_matches_device_loader_exactly_without_augmentation():
    images, labels = split(n=70)
    for train in (False, True):
        kwargs = dict(train=train, mean=MEAN, std=STD, seed=7, rank=1, world_size=2)
        device = epoch_batches(DeviceLoader(images, labels, LoaderSpec(16, **kwargs)))
        torch_ = epoch_batches(TorchLoader(images, labels, LoaderSpec(16, **kwargs)))
        assert torch.equal(torch_[1], device[1])  # same order and shard
        assert torch.equal(torch_[0], device[0])  # bit-identical normalization


def test_torch_loader_alternating_flip_matches_device_loader_exactly():
    images, labels = split()
    kwargs = dict(augment=AugmentSpec(flip="alternating"), mean=MEAN, std=STD, seed=1)
    device, torch_ = (
        DeviceLoader(images, labels, LoaderSpec(32, **kwargs)),
        TorchLoader(images, labels, LoaderSpec(32, **kwargs)),
    )
    for _ in range(2):
        a, b = epoch_batches(device), epoch_batches(torch_)
        assert torch.equal(a[1], b[1]) and torch.equal(a[0], b[0])


@pytest.mark.parametrize("pad_mode", ["reflect", "zeros"])
def test_torch_loader_flip_and_translate_yield_the_same_windows(pad_mode):
    images, labels = split(n=300)
    spec = AugmentSpec(flip="random", translate=2, pad_mode=pad_mode)
    out, out_labels = epoch_batches(
        TorchLoader(images, labels, LoaderSpec(64, augment=spec, mean=MEAN, std=STD))
    )
    match = matching_window(windows(images, 2, pad_mode), out, out_labels)
    assert torch.all(match.any(0))
    assert torch.all(match.any(1))


def test_torch_loader_cutout_zeroes_a_clipped_square_after_normalization():
    images = torch.full((200, 3, 8, 8), 200, dtype=torch.uint8)
    loader = TorchLoader(
        images, torch.arange(200), LoaderSpec(50, augment=AugmentSpec(cutout=4), mean=MEAN, std=STD)
    )
    out, _ = epoch_batches(loader)
    zeros = (out == 0).sum(dim=(2, 3))
    assert torch.all(zeros[:, 0] == zeros[:, 2])
    assert set(zeros[:, 0].tolist()) <= {4, 6, 8, 9, 12, 16}
    assert (zeros[:, 0] == 16).any() and (zeros[:, 0] < 16).any()


def test_torch_loader_augmentations_repeat_per_seed_and_leave_the_global_rng_alone():
    images, labels = split()
    spec = AugmentSpec(flip="random", translate=2, cutout=3)
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    a = epoch_batches(TorchLoader(images, labels, LoaderSpec(32, augment=spec, seed=4)))
    assert torch.equal(torch.rand(3), expected_next)
    b = epoch_batches(TorchLoader(images, labels, LoaderSpec(32, augment=spec, seed=4)))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_torch_loader_with_two_workers_yields_the_same_epoch():
    images, labels = split(n=100)
    spec = AugmentSpec(flip="alternating")
    kwargs = dict(augment=spec, mean=MEAN, std=STD, seed=3, drop_last=True)
    loader = TorchLoader(
        images, labels, LoaderSpec(16, **kwargs), num_workers=2, persistent_workers=True
    )
    reference = DeviceLoader(images, labels, LoaderSpec(16, **kwargs))
    for _ in range(2):
        a, b = epoch_batches(loader), epoch_batches(reference)
        assert torch.equal(a[1], b[1]) and torch.equal(a[0], b[0])
    assert len(loader) == 6


# ---------------------------------------------------------------- argument errors


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(augment=AugmentSpec(flip="sometimes")), "none, random, alternating"),
        (dict(augment=AugmentSpec(translate=-1)), "translate"),
        (dict(augment=AugmentSpec(cutout=-2)), "cutout"),
        (dict(augment=AugmentSpec(translate=2, pad_mode="edge")), "reflect, zeros"),
        (dict(augment=AugmentSpec(translate=8)), "translate"),
        (dict(batch_size=0), "batch_size"),
        (dict(rank=2, world_size=2), "rank"),
        (dict(mean=MEAN), "both mean and std"),
        (dict(mean=MEAN, std=[0.2, 0.0, 0.2]), "std"),
        (dict(batch_size=64, drop_last=True), "drop_last"),
    ],
)
@pytest.mark.parametrize("Loader", [DeviceLoader, TorchLoader])
def test_bad_arguments_raise_trick_lab_error(Loader, kwargs, message):
    images, labels = split(n=40)
    kwargs = {"batch_size": 8, **kwargs}
    with pytest.raises(TrickLabError, match=message):
        Loader(images, labels, LoaderSpec(**kwargs))


def test_bad_storage_dtype_and_images_raise_trick_lab_error():
    images, labels = split(n=8)
    with pytest.raises(TrickLabError, match="uint8, float16, bfloat16"):
        DeviceLoader(images, labels, LoaderSpec(4), storage_dtype=torch.int32)
    with pytest.raises(TrickLabError, match="uint8"):
        DeviceLoader(images.float(), labels, LoaderSpec(4))
    with pytest.raises(TrickLabError, match="persistent_workers"):
        TorchLoader(images, labels, LoaderSpec(4), persistent_workers=True)


# ---------------------------------------------------------------- what train() builds


def recipe_loaders(*overrides):
    from tricklab.data.sources import load_dataset
    from tricklab.recipe.schema import load_recipe
    from tricklab.training.api import LoaderInputs, build_loaders

    recipe = load_recipe(
        None, ["loader.kind=device", "loader.batch_size=16", "run.device=cpu", *overrides]
    )
    dataset = load_dataset("synthetic", train_size=40, test_size=20, image_size=8)
    return build_loaders(LoaderInputs.of(recipe, torch.device("cpu")), dataset, MEAN, STD)


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [
        ("bf16-mixed", torch.bfloat16),
        ("16-mixed", torch.float16),
        ("16-true-bn32", torch.float16),
        ("32-true", torch.float32),
    ],
)
@pytest.mark.parametrize("kind", ["device", "torch"])
def test_a_recipes_batches_come_in_the_dtype_its_model_computes_in(precision, dtype, kind):
    for loader in recipe_loaders(f"tricks.precision={precision}", f"loader.kind={kind}"):
        assert next(iter(loader))[0].dtype == dtype
        if kind == "device":
            assert loader.storage_dtype == dtype  # loader.storage_dtype=auto


def test_recipe_storage_dtype_uint8_normalizes_each_batch_into_the_compute_dtype():
    train, _ = recipe_loaders("tricks.precision=bf16-mixed", "loader.storage_dtype=uint8")
    assert train.storage_dtype == torch.uint8
    assert next(iter(train))[0].dtype == torch.bfloat16


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_recipe_storage_dtype_float32_under_autocast_gives_float32_batches(precision):
    train, _ = recipe_loaders(f"tricks.precision={precision}", "loader.storage_dtype=float32")
    assert train.storage_dtype == torch.float32
    assert next(iter(train))[0].dtype == torch.float32  # autocast casts them at each conv


@pytest.mark.parametrize(
    ("precision", "storage"), [("32-true", "bfloat16"), ("16-true-bn32", "float32")]
)
def test_recipe_storage_dtype_the_model_cannot_take_is_one_clear_error(precision, storage):
    with pytest.raises(TrickLabError, match=f"loader.storage_dtype={storage} gives {storage}"):
        recipe_loaders(f"tricks.precision={precision}", f"loader.storage_dtype={storage}")
