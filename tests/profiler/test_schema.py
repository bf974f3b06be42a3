"""Profile JSON round trip and validation (no torch needed)."""

from __future__ import annotations

import json

import pytest

from cost_model.hardware.profile_schema import SCHEMA_VERSION, profile_from_dict, profile_to_dict
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import CalibrationProfile, CommFit, LayerTiming


def _profile() -> CalibrationProfile:
    return CalibrationProfile(
        device="cpu",
        layers={
            ("block", 1, 1, 64): LayerTiming(1e-3, 2e-3, 1234.0),
            ("block", 2, 1, 64): LayerTiming(6e-4, 1.1e-3, None),
            ("logits", 1, 1, 64): LayerTiming(3e-4, 5e-4, 99.0),
        },
        comm={("all_reduce", "intra"): CommFit(5e-5, 1e-9), ("send_recv", "inter"): CommFit(1e-4, 2e-9)},
        gemm_tflops={128: 0.01, 256: 0.02},
        source="test",
    )


def test_round_trip_through_json():
    p = _profile()
    d = json.loads(json.dumps(profile_to_dict(p, device_name="x86", torch_version="2.13")))
    assert d["schema_version"] == SCHEMA_VERSION and d["device_name"] == "x86"
    assert profile_from_dict(d) == p
    assert profile_to_dict(profile_from_dict(d), device_name="x86", torch_version="2.13") == d


@pytest.mark.parametrize("version", [None, 0, 2, "1"])
def test_bad_schema_version(version):
    d = profile_to_dict(_profile())
    d["schema_version"] = version
    with pytest.raises(SpecError) as e:
        profile_from_dict(d)
    assert e.value.field == "profile.schema_version"


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d["layers"][0].update(kind="conv"), "profile.layers[0].kind"),
        (lambda d: d["layers"][0].update(fwd_s=-1.0), "profile.layers[0].fwd_s"),
        (lambda d: d["layers"][0].update(tp=0), "profile.layers[0].tp"),
        (lambda d: d["comm"][0].update(level="rack"), "profile.comm[0].level"),
        (lambda d: d["comm"][0].update(alpha_s="fast"), "profile.comm[0].alpha_s"),
        (lambda d: d.update(device=""), "profile.device"),
        (lambda d: d.update(layers={}), "profile.layers"),
        (lambda d: d["layers"].append(dict(d["layers"][0])), "profile.layers[3]"),
    ],
)
def test_bad_fields_name_the_field(mutate, field):
    d = profile_to_dict(_profile())
    mutate(d)
    with pytest.raises(SpecError) as e:
        profile_from_dict(d)
    assert e.value.field == field


def test_not_an_object():
    with pytest.raises(SpecError):
        profile_from_dict([1, 2])
