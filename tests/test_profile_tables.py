"""The cells of the profile tables, shared by `tricklab profile` and `tricklab report --profile`:
numbers without exponents, the step's notes and section, the model's optional columns."""

from tricklab.profile import tables


def spread(median_ms, q1_ms=None, q3_ms=None):
    return {"median_ms": median_ms, "q1_ms": q1_ms or median_ms, "q3_ms": q3_ms or median_ms}


def component(name, ms, share, ms_raw=None, within_noise=False):
    return {"name": name, "ms": ms, "ms_raw": ms if ms_raw is None else ms_raw, "share": share,
            "ci_low_ms": ms - 1, "ci_high_ms": ms + 1, "within_noise": within_noise,
            "measured_as": "a - b"}  # fmt: skip


STEP = {
    "repeats": 5,
    "step_ms": 10.0,
    "components_sum_ms": 10.0,
    "components": [
        component("loading", 0, 0.0, ms_raw=-0.00001234, within_noise=True),
        component("forward", 10.0, 1.0),
    ],
    "inside_forward_backward": [component("batchnorm_and_activations", 2.0, 0.2)],
    "replaced_modules": {"GELU": 3},
    "evaluation": {"seconds": 1.5, "images": 10000, "tta": None, "tta_seconds": None},
    "compile_seconds": None,
    "top_operators": [],
}


def measured_row(batch_size, precision, mfu=None, compile_seconds=None):
    return {"model": "airbench", "batch_size": batch_size, "precision": precision,
            "compile": "off", "channels_last": False, "forward_ms": spread(2.0, 1.8, 2.4),
            "train_step_ms": spread(6.0), "train_images_per_second": 5333.3, "train_tflops": 0.5,
            "mfu": mfu, "forward_ms_per_gmac": 16.9, "train_ms_per_gmac": 50.8,
            "compile_seconds": compile_seconds}  # fmt: skip


def test_numbers_have_three_significant_digits_and_never_an_exponent():
    assert [tables.num(v) for v in (0.0839123, 2.9712, 41.66, 1090.4, 2175.3)] == [
        "0.0839", "2.97", "41.7", "1,090", "2,175"
    ]  # fmt: skip
    assert tables.num(-0.00001234) == "-0.0000123" and tables.num(None) == "-"
    assert tables.num(0) == "0"


def test_a_latency_is_its_median_and_half_the_interquartile_range_in_percent():
    assert tables.spread_ms(spread(2.0, 1.8, 2.4)) == "2.00 ±15%"
    # verifying the eleventh round: "30 ±104%" read as reaching below 0 ms; the quartiles instead
    assert tables.spread_ms(spread(30.0, 25.0, 87.5)) == "30.0 [25.0, 87.5]"


def test_a_component_below_zero_is_clipped_and_one_whose_interval_holds_zero_is_marked():
    table = tables.step_components(STEP)
    assert table.header == ["component", "ms/step", "share", "95% interval ms", "measured as",
                            "note"]  # fmt: skip
    assert table.rows[0] == ["loading", "0", "0.0 %", "[-1.00, 1.00]", "a - b",
                             "within noise, clipped from -0.0000123"]  # fmt: skip
    assert table.rows[1][-1] == ""


def test_within_noise_is_said_only_where_the_interval_holds_zero():
    apart = {**component("loading", 5.5, 0.5, within_noise=True), "ci_low_ms": 5, "ci_high_ms": 6}
    table = tables.step_components({**STEP, "components": [apart]})
    assert table.rows[0][3] == "[5.00, 6.00]" and table.rows[0][-1] == ""


def test_from_fewer_than_three_rounds_a_step_shows_no_interval_and_says_why():
    for repeats in (1, 2):
        table = tables.step_components({**STEP, "repeats": repeats})
        assert [row[3] for row in table.rows] == ["-", "-", "", "-"]
        assert "within noise" not in table.rows[0][-1]
        assert tables.step_interval_words({"repeats": repeats}) == (
            f"medians of {repeats} interleaved rounds (n={repeats}: too few for an interval)"
        )
    assert tables.step_interval_words({"repeats": 3}) == (
        "medians of 3 interleaved rounds, 95% paired-bootstrap intervals"
    )


def test_from_fewer_than_three_repeats_a_latency_is_its_median_alone():
    result = {"repeats": 1, "results": [measured_row(2, "32-true")]}
    row = tables.model_measured(result).rows[0]
    assert row[2:4] == ["2.00", "6.00"]  # forward ms, train step ms: no ±
    assert tables.model_spread_words(result) == (
        "median of 1 interleaved repeats (n=1: too few for a spread)"
    )
    row = tables.model_measured({**result, "repeats": 3}).rows[0]
    assert row[2] == "2.00 ±15%"


def test_the_parts_of_forward_and_backward_open_a_section_under_a_label():
    table = tables.step_components(STEP)
    assert table.sections == (2,)
    assert table.rows[2] == ["of forward + backward:", "", "", "", "", ""]
    assert table.rows[3][:3] == ["  batchnorm and activations", "2.00", "20.0 %"]
    assert tables.step_components({**STEP, "inside_forward_backward": []}).sections == ()


def test_the_step_notes_say_what_was_replaced_evaluation_and_an_over_full_sum():
    over = [
        STEP["components"][0],
        component("forward", 12.0, 1.0),
    ]  # the rows' sum, not a stored one
    notes = tables.step_components({**STEP, "components": over, "components_sum_ms": 10.0}).notes
    assert notes == [
        "replaced by identity in the bare copy: 3 GELU (modules; functional calls remain)",
        "the clipped components add up to 12.0 ms, above the measured step: negative "
        "differences (noise) count as 0",
        "evaluation: 1.50 s per pass over 10,000 images",
    ]


def test_operator_names_are_cut_to_100_characters_and_a_device_column_appears_on_a_gpu():
    long_name = "void cutlass::Kernel<" + "x" * 300 + ">"
    operators = [{"name": long_name, "calls_per_step": 7, "self_cpu_ms_per_step": 9.67,
                  "self_device_ms_per_step": 0.5, "self_share": 0.591}]  # fmt: skip
    table = tables.step_operators({"top_operators": operators})
    (row,) = table.rows
    assert len(row[0]) == 100 and row[0].endswith("…")
    assert table.header[-2:] == ["self device ms/step", "share"] and row[-1] == "59.1 %"
    cpu = tables.step_operators(
        {"top_operators": [{**operators[0], "self_device_ms_per_step": None}]}
    )
    assert "self device ms/step" not in cpu.header


def test_a_setting_that_varies_gets_a_column_and_the_others_go_to_the_title():
    result = {
        "repeats": 5,
        "results": [measured_row(32, "32-true"), measured_row(32, "bf16-mixed")],
    }
    assert tables.varying_settings(result) == ["precision"]
    assert tables.fixed_settings(result) == "compile off, channels_last off"
    table = tables.model_measured({**result, "device": "cpu"})
    assert table.header[:3] == ["model", "batch", "precision"]
    assert table.rows[1][:7] == [
        "airbench",
        "32",
        "bf16-mixed",
        "2.00 ±15%",
        "6.00 ±0%",
        "5,333",
        "0.500",
    ]
    assert "MFU %" not in table.header and "compile s" not in table.header


def test_mfu_and_compile_columns_appear_when_any_row_has_them():
    rows = [
        measured_row(32, "32-true", mfu=0.0123),
        measured_row(256, "32-true", compile_seconds=31.27),
    ]
    table = tables.model_measured(
        {"repeats": 5, "results": rows, "device": "cuda", "peak_tflops": {"x": None}}
    )
    mfu, compile_s = table.header.index("MFU %"), table.header.index("compile s")
    assert [r[mfu] for r in table.rows] == ["1.2", "n/a"]
    assert [r[compile_s] for r in table.rows] == ["-", "31.3"]
    assert table.notes[-1].startswith("MFU unavailable on cuda")


def test_the_loader_table_gives_the_ratio_to_the_first_and_the_step_fraction():
    config = {"kind": "device", "num_workers": None, "pin_memory": None,
              "images_per_second": 523510.2, "vs_first": 2175.3, "ms_per_batch": spread(0.122),
              "setup_seconds": 0.0291, "step_fraction": 0.015}  # fmt: skip
    result = {"configs": [config], "step": {"seconds": 0.00788, "batch_size": 64},
              "recipe": "speedrun94", "notes": ["a note"]}  # fmt: skip
    table = tables.loader_configs(result)
    assert table.header[-1] == "of the step"
    assert table.rows == [["device", "-", "-", "523,510", "2,175×", "0.122", "0.03", "1.5 %"]]
    assert table.notes == [
        "speedrun94's step on a batch already on the device: 7.9 ms at batch 64",
        "a note",
    ]
    assert "of the step" not in tables.loader_configs({**result, "step": None}).header
