"""Catalog entries for the hardware people have: datasheet source, family constants stated."""

import pytest

from cost_model.hardware.catalog import CATALOG, get_gpu

NEW = {"gb200": "Blackwell", "b300": "Blackwell", "gb300": "Blackwell", "h800": "Hopper", "h20": "Hopper",
       "gh200": "Hopper", "mi325x": "CDNA", "mi355x": "CDNA"}
FAMILY_BASE = {"Blackwell": "b200", "Hopper": "h100-sxm", "CDNA": "mi300x"}


@pytest.mark.parametrize("name", sorted(NEW))
def test_new_entry_inherits_its_family_constants(name):
    g, base = get_gpu(name), CATALOG[FAMILY_BASE[NEW[name]]]
    src = g.source.lower()
    assert "datasheet" in src or "brief" in src
    assert "inherits" in g.efficiency_source and base.name in g.efficiency_source
    assert (g.gemm_max_efficiency, g.gemm_half_dim) == (base.gemm_max_efficiency, base.gemm_half_dim)
    # dense fp8 is twice dense bf16 on every one of these parts
    assert g.peak_tflops["fp8"] == pytest.approx(2 * g.peak_tflops["bf16"], rel=0.01)


def test_nvl72_domain():
    for name in ("gb200", "gb300"):
        g = get_gpu(name)
        assert g.nvlink_domain == 72 and g.gpus_per_node == 4
        assert g.nvlink_gb_s == 900.0  # NVLink5: 1.8 TB/s bidirectional
    assert get_gpu("h100-sxm").nvlink_domain is None  # default: the node


def test_h800_nvlink_is_400_bidirectional():
    assert get_gpu("h800").nvlink_gb_s * 2 == 400.0
    assert get_gpu("h800").peak_tflops == get_gpu("h100-sxm").peak_tflops
