"""Step settings come from config.pbtxt parameters, typed and checked."""

import re

import pytest

from pipeline_src.steps.settings import (
    CaptionerSettings,
    CaptionWithLabelSettings,
    ClassifierSettings,
    PreprocessSettings,
    SettingsError,
    VisionEncoderSettings,
    config_parameters,
    declared_settings_class,
)
from pipeline_src.steps.top_labels import TopLabelsSettings


def test_parameters_are_read_from_tritons_json_config():
    config = {"parameters": {"max_pixels": {"string_value": "1000"}}}
    assert config_parameters(config) == {"max_pixels": "1000"}
    assert PreprocessSettings.from_model_config(config).max_pixels == 1000


def test_defaults_apply_to_missing_parameters():
    assert CaptionerSettings.from_parameters({}) == CaptionerSettings()


def test_gpu_batch_sizes_read_as_increasing_integers_and_empty_means_none():
    assert ClassifierSettings.from_parameters({"gpu_batch_sizes": "1, 8,32"}).padded_batch_sizes == (1, 8, 32)
    assert ClassifierSettings.from_parameters({}).padded_batch_sizes == (1, 8, 32)
    assert VisionEncoderSettings.from_parameters({}).padded_batch_sizes == ()


def test_booleans_and_floats_parse():
    settings = CaptionerSettings.from_parameters({"repetition_penalty": "1.3", "auto_min_agreement": "0.95"})
    assert settings.repetition_penalty == 1.3 and settings.auto_min_agreement == 0.95
    assert TopLabelsSettings.from_parameters({}).k == 3


@pytest.mark.parametrize(
    "cls, parameters, message",
    [
        (PreprocessSettings, {"max_pixel": "5"}, "unknown parameter"),
        (PreprocessSettings, {"max_pixels": "many"}, "is not a int"),
        (PreprocessSettings, {"max_pixels": "0"}, "must be positive"),
        (CaptionWithLabelSettings, {"prompt_template": "a photo"}, r"must contain \{label\}"),
        (CaptionWithLabelSettings, {"confidence_threshold": "1.5"}, r"must lie in \[0, 1\]"),
        (CaptionerSettings, {"max_new_tokens": "many"}, "is not a int"),
        (CaptionerSettings, {"cpu_precision": "bf16"}, "cpu_precision must be one of"),
        (CaptionerSettings, {"auto_min_agreement": "1.5"}, r"auto_min_agreement must lie in \[0, 1\]"),
        (VisionEncoderSettings, {"cpu_precision": "int4"}, "cpu_precision must be one of"),
        (VisionEncoderSettings, {"intra_op_threads": "-1"}, "intra_op_threads must be >= 0"),
        (ClassifierSettings, {"gpu_batch_sizes": "1,eight"}, "comma-separated integers"),
        (ClassifierSettings, {"gpu_batch_sizes": "8,1"}, "positive and increasing"),
        (ClassifierSettings, {"gpu_batch_sizes": "0,8"}, "positive and increasing"),
    ],
)
def test_bad_parameters_are_refused_with_the_reason(cls, parameters, message):
    with pytest.raises(SettingsError, match=message):
        cls.from_parameters(parameters)


def test_a_config_names_its_settings_class_and_a_mismatch_is_refused():
    parameters = {"settings": "pipeline_src.steps.settings:PreprocessSettings", "max_pixels": "7"}
    assert declared_settings_class(parameters) is PreprocessSettings
    assert PreprocessSettings.from_parameters(parameters).max_pixels == 7
    with pytest.raises(
        SettingsError, match=re.escape("this step reads 'pipeline_src.steps.settings:CaptionerSettings'")
    ):
        CaptionerSettings.from_parameters(parameters)


@pytest.mark.parametrize(
    "reference",
    ["pipeline_src.steps.settings:NoSuchSettings", "no_such_module:X", "pipeline_src.steps.settings:SettingsError"],
)
def test_a_settings_reference_that_names_no_settings_class_is_refused(reference):
    with pytest.raises(SettingsError, match="settings="):
        declared_settings_class({"settings": reference})
