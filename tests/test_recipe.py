"""The recipe: typed fields, YAML round trip, dotted overrides, errors that say what would be valid."""

import pytest

from tricklab.errors import TrickLabError
from tricklab.train.recipe import Recipe, all_keys, builtin_recipes, field_table, load_recipe


def test_defaults_are_plain_pytorch():
    r = load_recipe()
    assert r.tricks.precision == "32-true"
    assert r.tricks.compile == "off"
    assert r.tricks.label_smoothing == 0.0
    assert r.tricks.ema_decay == 0.0
    assert r.aug.flip == "none" and r.aug.cutout == 0


def test_dotted_overrides_are_typed():
    r = load_recipe(
        None,
        [
            "optim.lr=0.2",
            "tricks.precision=bf16-mixed",
            "run.epochs=1.5",
            "model.widths=[8, 16, 32]",
            "run.target_accuracy=0.9",
        ],
    )
    assert r.optim.lr == 0.2
    assert r.tricks.precision == "bf16-mixed"
    assert r.run.epochs == 1.5
    assert r.model.widths == [8, 16, 32]
    assert r.run.target_accuracy == 0.9


def test_int_given_for_float_field_becomes_float():
    assert isinstance(load_recipe(None, ["optim.lr=1"]).optim.lr, float)


def test_override_returns_new_recipe():
    base = load_recipe()
    changed = base.override(["optim.lr=0.5"])
    assert base.optim.lr == 0.1 and changed.optim.lr == 0.5


def test_unknown_key_names_closest_valid_key():
    with pytest.raises(TrickLabError, match="did you mean 'optim.lr'"):
        load_recipe(None, ["optim.lrr=0.1"])


def test_key_without_section_names_its_section():
    with pytest.raises(TrickLabError, match="did you mean 'tricks.label_smoothing'"):
        load_recipe(None, ["label_smoothing=0.1"])


def test_bad_choice_lists_allowed_values():
    with pytest.raises(TrickLabError, match="32-true, 16-mixed, bf16-mixed, 16-true-bn32"):
        load_recipe(None, ["tricks.precision=fp8"])


def test_bad_type_names_expected_type():
    with pytest.raises(TrickLabError, match=r"expected a finite number \(float\)"):
        load_recipe(None, ["run.epochs=ten"])
    with pytest.raises(TrickLabError, match="expected bool"):
        load_recipe(None, ["tricks.channels_last=maybe"])


def test_value_below_minimum_is_refused():
    with pytest.raises(TrickLabError, match="must be >= 1"):
        load_recipe(None, ["loader.batch_size=0"])


@pytest.mark.parametrize(
    "override", ["optim.lr=nan", "optim.lr=.inf", "optim.lr=-.inf", "run.epochs=inf"]
)
def test_nan_and_infinity_are_refused(override):
    with pytest.raises(TrickLabError, match="finite number"):
        load_recipe(None, [override])


@pytest.mark.parametrize(
    ("override", "bound"),
    [
        ("tricks.label_smoothing=3", "<= 1"),  # torch's cross-entropy would raise mid-run
        ("tricks.ema_decay=2", "<= 1"),
        ("optim.momentum=5", "<= 1"),
        ("data.val_fraction=1.5", "<= 1"),
        ("run.seed=-1", ">= 0"),  # numpy's seeding would raise mid-run
        ("run.seed=99999999999999999999", "<= 4294967295"),  # so would torch.manual_seed
    ],
)
def test_value_out_of_bounds_is_refused(override, bound):
    with pytest.raises(TrickLabError, match=bound):
        load_recipe(None, [override])


@pytest.mark.parametrize("optimizer", ["adam", "adamw", "rmsprop"])
def test_adaptive_optimizers_are_refused_with_fp16_weights(optimizer):
    with pytest.raises(TrickLabError, match="use optim.name=sgd or muon"):
        load_recipe(None, ["tricks.precision=16-true-bn32", f"optim.name={optimizer}"])
    load_recipe(None, ["tricks.precision=16-true-bn32", "optim.name=sgd"])


@pytest.mark.parametrize("optimizer", ["rmsprop", "muon"])
def test_fused_is_refused_for_optimizers_without_a_fused_kernel(optimizer):
    with pytest.raises(TrickLabError, match=f"no fused {optimizer}"):
        load_recipe(None, ["optim.fused=true", f"optim.name={optimizer}"])


def test_override_without_equals_is_refused():
    with pytest.raises(TrickLabError, match="key=value"):
        load_recipe(None, ["optim.lr"])


def test_stop_at_target_needs_a_target():
    with pytest.raises(TrickLabError, match="target_accuracy"):
        load_recipe(None, ["run.stop_at_target=true"])


def test_yaml_round_trip_is_lossless(tmp_path):
    r = load_recipe(None, ["optim.name=adamw", "schedule.milestones=[0.3, 0.6]", "data.dir=/x"])
    path = tmp_path / "r.yaml"
    r.to_yaml(path)
    assert load_recipe(path) == r
    assert Recipe.from_dict(r.to_dict()) == r


def test_yaml_file_with_unknown_section_is_refused(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("optimizer:\n  lr: 0.1\n")
    with pytest.raises(TrickLabError, match="unknown recipe section 'optimizer'"):
        load_recipe(path)


def test_invalid_yaml_is_one_clear_error(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("run:\n  epochs: 2\noptim: [unclosed\n")
    with pytest.raises(
        TrickLabError, match=r"r\.yaml: not valid YAML at line 4, column 1 \(expected ',' or ']'"
    ):
        load_recipe(path)


@pytest.mark.parametrize("override", ["run.eval_every=0.3", "model.whiten_bias_epochs=0.5"])
def test_epoch_counts_the_loop_acts_on_at_epoch_ends_must_be_whole(override):
    with pytest.raises(TrickLabError, match=f"{override} must be a whole number of epochs"):
        load_recipe(None, [override])
    load_recipe(None, [override.split("=")[0] + "=2"])


def test_early_stopping_without_evaluations_is_refused():
    with pytest.raises(TrickLabError, match="early_stopping_patience needs evaluations"):
        load_recipe(None, ["run.early_stopping_patience=3", "run.eval_every=0"])


def test_missing_recipe_file_and_unknown_name():
    with pytest.raises(TrickLabError, match="does not exist"):
        load_recipe("nope.yaml")
    with pytest.raises(TrickLabError, match="unknown recipe 'no-such-recipe'"):
        load_recipe("no-such-recipe")


def test_field_table_documents_every_key():
    rows = field_table()
    assert [r["key"] for r in rows] == all_keys()
    assert all(r["doc"] for r in rows)
    precision = next(r for r in rows if r["key"] == "tricks.precision")
    assert precision["choices"] == ["32-true", "16-mixed", "bf16-mixed", "16-true-bn32"]
    smoothing = next(r for r in rows if r["key"] == "tricks.label_smoothing")
    assert (smoothing["minimum"], smoothing["maximum"]) == (0, 1)


def test_every_builtin_recipe_loads_and_validates():
    names = builtin_recipes()
    assert names, "the package ships recipes"
    for name in names:
        assert isinstance(load_recipe(name), Recipe)


def test_exponent_without_dot_is_a_float():
    assert load_recipe(None, ["optim.lr=1e-3"]).optim.lr == 0.001


def test_yaml11_words_name_choices_and_still_set_booleans():
    recipe = load_recipe(
        None, ["tricks.compile=off", "tricks.channels_last=yes", "loader.drop_last=off"]
    )
    assert recipe.tricks.compile == "off"
    assert recipe.tricks.channels_last is True and recipe.loader.drop_last is False


def test_yaml_file_reads_off_as_the_choice_not_a_boolean(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("tricks:\n  compile: off\n  channels_last: yes\n")
    recipe = load_recipe(str(path))
    assert recipe.tricks.compile == "off" and recipe.tricks.channels_last is True


def test_misspelt_section_in_a_file_names_the_section(tmp_path):
    (tmp_path / "r.yaml").write_text("optimizer:\n  lr: 0.1\n")
    with pytest.raises(
        TrickLabError, match=r"unknown recipe section 'optimizer'; did you mean 'optim'\?"
    ):
        load_recipe(tmp_path / "r.yaml")
    (tmp_path / "r.yaml").write_text("lr: 0.1\n")
    with pytest.raises(TrickLabError, match=r"did you mean 'optim\.lr'"):
        load_recipe(tmp_path / "r.yaml")


def test_tricks_table_cuts_nothing_when_piped():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "tricklab", "tricks"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "…" not in out.stdout
    assert "optim.decoupled_weight_decay" in out.stdout
    assert "float in [0," in out.stdout  # bounds are shown (wrapped at 80 columns)


def test_a_key_given_twice_in_a_recipe_file_is_refused(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("optim:\n  lr: 0.1\n  lr: 0.2\n")
    with pytest.raises(TrickLabError, match=r"dup.yaml: 'lr' is given twice \(line 3\)"):
        load_recipe(path)
