"""Experiment plans: one change at a time or the grid, seeds, budgets, search spaces."""

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from tricklab.core.errors import TrickLabError
from tricklab.experiments.plan import (
    ablation_plan,
    budget_overrides,
    format_value,
    normalize_target,
    parse_vary,
    plan_units,
    unit_recipe,
)
from tricklab.experiments.space import parse_space
from tricklab.recipe.schema import load_recipe


@pytest.fixture(scope="module")
def baseline():
    return load_recipe(None, ["data.name=synthetic", "optim.lr=0.1", "aug.flip=none"])


def ids(configs):
    return [c.config_id for c in configs]


def test_one_at_a_time_is_the_baseline_plus_each_single_change(baseline):
    vary = parse_vary(["optim.lr=0.2,0.4", "aug.flip=random,alternating", "tricks.ema_decay=0.9"])
    configs = ablation_plan(baseline, vary).configs
    assert ids(configs) == [
        "baseline",
        "optim.lr=0.2",
        "optim.lr=0.4",
        "aug.flip=random",
        "aug.flip=alternating",
        "tricks.ema_decay=0.9",
    ]
    assert configs[1].overrides == ("optim.lr=0.2",)


def test_grid_is_the_full_product_and_includes_the_baseline(baseline):
    vary = parse_vary(["optim.lr=0.2,0.4", "aug.flip=random,alternating"])
    configs = ablation_plan(baseline, vary, grid=True).configs
    assert len(configs) == 1 + 2 * 2
    assert ids(configs)[0] == "baseline"
    assert "optim.lr=0.4 aug.flip=alternating" in ids(configs)


def test_grid_containing_the_baseline_values_counts_it_once(baseline):
    vary = parse_vary(["optim.lr=0.1,0.2", "aug.flip=none,random,alternating"])
    configs = ablation_plan(baseline, vary, grid=True).configs
    assert len(configs) == 2 * 3
    assert ids(configs).count("baseline") == 1


def test_a_value_equal_to_the_baseline_or_spelt_twice_is_not_a_new_config(baseline):
    configs = ablation_plan(baseline, parse_vary(["optim.lr=0.1,0.10,0.2,0.20"])).configs
    assert ids(configs) == ["baseline", "optim.lr=0.2"]


def test_list_values_vary_like_any_other(baseline):
    vary = parse_vary(["model.widths=[8,16,16],[16,32,32],[8, 16, 16]", "aug.cutout=0,4"])
    configs = ablation_plan(baseline, vary).configs
    assert ids(configs) == [
        "baseline", "model.widths=[8, 16, 16]", "model.widths=[16, 32, 32]", "aug.cutout=4",
    ]  # fmt: skip
    assert len(ablation_plan(baseline, vary, grid=True).configs) == 1 + 2 * 2


def test_units_are_every_config_with_every_seed_seed_major(baseline):
    configs = ablation_plan(baseline, parse_vary(["optim.lr=0.2,0.4"])).configs
    units = plan_units(configs, 3)
    assert len(units) == 3 * 3
    assert [u.seed for u in units] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert len({u.key for u in units}) == len(units)


def test_unit_recipe_applies_the_change_and_the_seed(baseline):
    configs = ablation_plan(baseline, parse_vary(["optim.lr=0.2"])).configs
    recipe = unit_recipe(baseline, plan_units(configs, 2)[-1])
    assert recipe.optim.lr == 0.2 and recipe.run.seed == 1
    assert recipe.data.name == "synthetic"


def test_python_values_are_written_so_the_recipe_reads_them_back(baseline):
    configs = ablation_plan(baseline, {"optim.lr": [1e-5, 0.5], "optim.nesterov": [True]}).configs
    assert ids(configs) == ["baseline", "optim.lr=1.0e-05", "optim.lr=0.5", "optim.nesterov=true"]
    assert unit_recipe(baseline, plan_units(configs, 1)[1]).optim.lr == 1e-5
    assert format_value(None) == "null" and format_value([8, 16]) == "[8, 16]"


def test_vary_values_split_at_top_level_commas_only():
    vary = parse_vary(["model.widths=[8,16,16],[16,32,32]"])
    assert vary == {"model.widths": ["[8,16,16]", "[16,32,32]"]}


@pytest.mark.parametrize("spec", ["optim.lr", "optim.lr=", "=0.1", "optim.lr=0.1,"])
def test_malformed_vary_is_a_user_error(spec):
    with pytest.raises(TrickLabError, match="KEY=V1,V2"):
        parse_vary([spec])


def test_unknown_key_or_bad_value_fails_before_anything_runs(baseline):
    with pytest.raises(TrickLabError, match="unknown recipe key"):
        ablation_plan(baseline, parse_vary(["optim.lrr=0.2"]))
    with pytest.raises(TrickLabError, match="optim.name"):
        ablation_plan(baseline, parse_vary(["optim.name=sgd,lion"]))


def test_budget_turns_early_stopping_off_and_sets_the_fixed_budget():
    recipe = load_recipe(None, budget_overrides(epochs=3, target=94))
    assert recipe.run.epochs == 3 and recipe.run.early_stopping_patience == 0
    assert recipe.run.target_accuracy == 0.94 and recipe.run.stop_at_target is False
    recipe = load_recipe(None, budget_overrides(seconds=12.5))
    assert recipe.run.time_budget_seconds == 12.5
    with pytest.raises(TrickLabError):
        budget_overrides(epochs=1, seconds=1)
    with pytest.raises(TrickLabError):
        normalize_target(0)


def test_space_entries_become_optuna_distributions():
    space = parse_space(
        {
            "optim.name": ["sgd", "adam"],
            "optim.lr": {"low": "1e-3", "high": 1, "log": True},
            "loader.batch_size": {"low": 64, "high": 256, "step": 64},
            "schedule.name": {"choices": ["constant", "cosine"]},
        }
    )
    d = space.distributions
    assert d["optim.name"] == CategoricalDistribution(["sgd", "adam"])
    assert d["optim.lr"] == FloatDistribution(1e-3, 1.0, log=True)
    assert d["loader.batch_size"] == IntDistribution(64, 256, step=64)
    assert d["schedule.name"] == CategoricalDistribution(["constant", "cosine"])


def test_grid_of_a_space_enumerates_choices_and_stepped_ranges():
    space = parse_space(
        {"optim.name": ["sgd", "adam"], "loader.batch_size": {"low": 64, "high": 192, "step": 64}}
    )
    assert len(space.grid()) == 2 * 3
    assert {"optim.name": "adam", "loader.batch_size": 192} in space.grid()


def test_grid_of_a_continuous_range_says_what_to_add():
    space = parse_space({"optim.lr": {"low": 0.01, "high": 1.0, "log": True}})
    with pytest.raises(TrickLabError, match="optim.lr.*step"):
        space.grid()


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"optim.lr": []},
        {"optim.lr": {"low": 1}},
        {"optim.lr": {"low": 2.0, "high": 1.0}},
        {"optim.lr": [[0.1, 0.2]]},
        {"model.widths": [8, 16]},
        {"model.widths": [[8, "wide"]]},
        {"model.widths": {"low": 8, "high": 16}},
    ],
)
def test_malformed_space_is_a_user_error(data):
    with pytest.raises(TrickLabError):
        parse_space(data)


# ---------------------------------------------------------------- large grids


@pytest.fixture
def count_reads(monkeypatch):
    """How many recipes are read (Recipe.from_dict, which Recipe.override calls too); fails past
    `limit` reads."""
    from tricklab.recipe.schema import Recipe

    calls, real = {"n": 0, "limit": 10**9}, Recipe.from_dict.__func__

    def from_dict(cls, data, source="recipe"):
        calls["n"] += 1
        assert calls["n"] <= calls["limit"], "the grid was read recipe by recipe"
        return real(cls, data, source)

    monkeypatch.setattr(Recipe, "from_dict", classmethod(from_dict))
    return calls


def test_a_grid_above_the_cap_is_refused_from_its_axis_sizes_before_any_value_is_read(
    baseline, count_reads
):
    values = ",".join(f"{0.001 * i:.3f}" for i in range(1, 400))
    vary = parse_vary([f"optim.lr={values}", f"optim.weight_decay={values}"])
    count_reads["limit"] = 0
    with pytest.raises(TrickLabError, match=r"159,201 points \(399 × 399\), more than 100,000"):
        ablation_plan(baseline, vary, grid=True)


def test_each_value_is_read_once_however_large_the_grid(baseline, count_reads):
    values = ",".join(f"{0.001 * i:.3f}" for i in range(1, 101))
    vary = parse_vary([f"optim.lr={values}", f"optim.weight_decay={values}"])
    configs = ablation_plan(baseline, vary, grid=True).configs
    assert len(configs) == 1 + 100 * 100
    assert count_reads["n"] == 200  # one per value, none per point
    assert "optim.lr=0.037 optim.weight_decay=0.099" in ids(configs)


def test_every_grid_point_meets_the_recipes_cross_field_rules_before_anything_runs(baseline):
    vary = parse_vary(["tricks.precision=32-true,16-true-bn32", "optim.name=sgd,adam"])
    with pytest.raises(TrickLabError, match="16-true-bn32.*adam"):
        ablation_plan(baseline, vary, grid=True)
    assert len(ablation_plan(baseline, vary).configs) == 3  # one change at a time, each is fine


@pytest.mark.parametrize("values", [2, 10])
def test_the_setup_check_builds_each_data_source_model_and_loader_once(monkeypatch, values):
    """A grid's setup check costs about the same for 4 points as for 100: the data, the model and
    the loaders are built once per distinct setting, the cheap rest once per varied value."""
    from collections import Counter

    from tiny_recipe import TINY_SYNTHETIC

    from tricklab.experiments.plan import AblationPlan
    from tricklab.experiments.runner import plan_ablation
    from tricklab.training import setup

    built = Counter()
    for name in ("load_data", "build_model", "build_loaders", "build_optimizer"):
        real = getattr(setup, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            built[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(setup, name, counted)
    base = load_recipe(None, TINY_SYNTHETIC)
    lrs = [0.01 * (i + 1) for i in range(values)]
    vary = {"data.train_size": [128, 256], "optim.lr": lrs, "optim.weight_decay": lrs}
    configs, _, _ = plan_ablation(AblationPlan(base, vary, 1, grid=True))
    assert len(configs) == 1 + 2 * values * values
    assert built["load_data"] == 2 and built["build_model"] == 2 and built["build_loaders"] == 2
    assert built["build_optimizer"] <= 1 + 2 + 2 * values  # the baseline and each value's


def test_a_long_categorical_is_checked_value_by_value_but_built_at_a_spread_of_its_choices():
    """sweep's check before any run: every choice of a 2,000-value axis meets the recipe's own
    checks (a bad one is refused), but only SETUP_CHECKS_PER_AXIS of them, first and last
    included, are built into a run's setup (was one build per choice: minutes for 10,000)."""
    from tricklab.experiments.space import SETUP_CHECKS_PER_AXIS

    base = load_recipe("speedrun94", ["data.name=synthetic"])
    lrs = [round(0.001 + i * 1e-6, 7) for i in range(2000)]
    recipes = parse_space({"optim.lr": {"choices": lrs}}).check(base)
    assert len(recipes) == SETUP_CHECKS_PER_AXIS
    assert recipes[0].optim.lr == lrs[0] and recipes[-1].optim.lr == lrs[-1]
    with pytest.raises(TrickLabError, match="optim.lr"):
        parse_space({"optim.lr": {"choices": [*lrs[:1500], -1.0, *lrs[1500:]]}}).check(base)


def test_a_long_categorical_is_described_in_one_short_line():
    from tricklab.experiments.space import describe

    text = describe(CategoricalDistribution(list(range(10_000))))
    assert text == "one of 10,000 choices: 0, 1, 2, 3, 4, ..., 9999"
    assert describe(CategoricalDistribution([1, 2])) == repr(CategoricalDistribution([1, 2]))


def test_minus_zero_and_zero_are_one_configuration():
    """Twelfth hostile round: `--vary tricks.label_smoothing=-0.0,0.0` trained two configurations
    of smoothing 0 (`0`, `0.0` and `0e0` were merged, `-0.0` was not)."""
    baseline = load_recipe(None, ["data.name=synthetic", "tricks.label_smoothing=0.2"])
    configs = ablation_plan(
        baseline, {"tricks.label_smoothing": ["-0.0", "0.0", "0", -0.0]}
    ).configs
    assert ids(configs) == ["baseline", "tricks.label_smoothing=0.0"]


def test_a_plan_keeps_its_own_vary_and_is_checked_again_when_it_runs(tmp_path):
    """The caller's dict changed after the plan was made (`"01"`, read letter by letter), or a
    field set past `frozen` (a study named `a/b`), went unchecked into the study."""
    from tricklab.experiments.plan import AblationPlan, SweepPlan
    from tricklab.experiments.runner import ablate, plan_ablation, sweep

    baseline = load_recipe(None, ["data.name=synthetic", "tricks.label_smoothing=0.2"])
    vary = {"tricks.label_smoothing": [0.0]}
    plan = AblationPlan(baseline, vary, seeds=1, out_dir=str(tmp_path))
    vary["tricks.label_smoothing"] = "01"
    vary[3] = [1]
    assert plan.vary == {"tricks.label_smoothing": (0.0,)}
    assert ids(plan_ablation(plan, check_runs=False)[0])[1:] == ["tricks.label_smoothing=0.0"]
    object.__setattr__(plan, "study", "a/b")
    with pytest.raises(TrickLabError, match="study"):
        ablate(plan, train_fn=lambda *a, **k: None)
    object.__setattr__(plan, "study", None)
    object.__setattr__(plan, "baseline", "speedrun94")
    with pytest.raises(TypeError, match="AblationPlan's baseline"):
        plan_ablation(plan, check_runs=False)
    swept = SweepPlan(
        baseline, parse_space({"optim.lr": [0.1, 0.2]}), trials=1, out_dir=str(tmp_path)
    )
    object.__setattr__(swept, "study", "a/b")
    with pytest.raises(TrickLabError, match="study"):
        sweep(swept, train_fn=lambda *a, **k: None)
    assert not list(tmp_path.iterdir())  # no study was made
